"""slowlog_split.py -- a stalls.py run's slow commands, while the child lived
and after it.

    python3 -m forkbench.slowlog_split SLOWLOG.txt STALLS_DIR [AFTER_SECONDS]

SLOWLOG.txt is what bench/slowlog_watch.sh recorded beside the run;
STALLS_DIR the run's folder (runs.json, probe_<round>.bgsave). For each
save round: the load's commands (SET) over the slowlog threshold while the
child lived and in the AFTER_SECONDS (default 30) after it, their count and
the longest, beside the round's longest PING round trips. The slowlog's
times are whole seconds, so each window is widened by one. A long PING
round trip with no command as long means many slowed commands, not one
blocked command.
"""
import json
import os
import sys

from . import child_gaps


def entries(path):
    """(unix s, duration us, command) of every slowlog entry in the dumps:
    redis-cli prints an entry as its id, time, duration, then the command's
    arguments."""
    lines = [l.rstrip("\n") for l in open(path, errors="replace")]
    out, i = [], 0
    while i + 3 < len(lines):
        if lines[i].isdigit() and lines[i + 1].isdigit() and lines[i + 2].isdigit():
            out.append((int(lines[i + 1]), int(lines[i + 2]), lines[i + 3]))
            i += 4
        else:
            i += 1
    return out


def describe(durations_us):
    if not durations_us:
        return "0 | - | -"
    top = sorted(durations_us)[-5:]
    return "%d | %.1f | %s" % (len(durations_us), top[-1] / 1000.0,
                               ", ".join("%.1f" % (d / 1000.0) for d in top))


def save_rounds(folder):
    """(round, BGSAVE sent, child gone) of each save of a stalls.py run, from
    its runs.json and probe_<round>.bgsave marks."""
    for r in json.load(open(os.path.join(folder, "runs.json")))[0]:
        if not r.get("save"):
            continue
        t_save, _ = child_gaps.read_marks(os.path.join(folder, "probe_%s.bgsave" % r["tag"]))
        yield r, t_save, t_save + r["save_s"]


def rows(slow, folder, after_s):
    sets = [e for e in entries(slow) if e[2].upper() == "SET"]
    for r, t_save, t_done in save_rounds(folder):
        during = [d for t, d, _ in sets if t_save - 1 <= t <= t_done]
        after = [d for t, d, _ in sets if t_done < t <= t_done + after_s + 1]
        yield "| %s | %.1f | %.1f | %s | %s |" % (
            r["tag"], r["max_gap_ms"], r["after_child_max_gap_ms"],
            describe(during), describe(after))


def main(argv):
    if len(argv) not in (3, 4):
        sys.stderr.write(__doc__)
        return 2
    after_s = float(argv[3]) if len(argv) == 4 else 30.0
    print("| round | PING max, child alive (ms) | PING max, after (ms) "
          "| SET over the threshold, child alive | longest (ms) | 5 longest (ms) "
          "| SET over the threshold, %g s after | longest (ms) | 5 longest (ms) |" % after_s)
    print("|---|---|---|---|---|---|---|---|---|")
    for row in rows(argv[1], argv[2], after_s):
        print(row)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
