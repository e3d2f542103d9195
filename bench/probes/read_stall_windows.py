"""read_stall_windows.py -- read_stall.c's slow stretches by window of a
stalls.py run: the no-save control, each save while the child lived, and
the 30 s after the child (the re-collapse pass with fork-thp).

    python3 bench/probes/read_stall_windows.py READ_STALL.txt[.gz] STALLS_DIR

STALLS_DIR needs runs.json and probe_<round>.bgsave; the control's window
comes from probe_control.csv.gz while it is still there (not committed).
"On a CPU" is a stretch's wall time minus its wait for a CPU: the reads
themselves, including whatever the host did meanwhile without taking the
vCPU away (steal is counted apart, in stalls.py's steal.csv.gz).
"""
import gzip
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import slowlog_split  # noqa: E402  (bench/, for the save rounds' times)

AFTER_S = 30.0


def windows(folder):
    out = []
    control = os.path.join(folder, "probe_control.csv.gz")
    if os.path.exists(control):
        with gzip.open(control, "rt") as f:
            next(f)
            times = [float(line.split(",")[0]) for line in f]
        out.append(("control", times[0], times[-1]))
    for r, t, done in slowlog_split.save_rounds(folder):
        out.append((r["tag"] + ", child alive", t, done))
        out.append((r["tag"] + ", %g s after the child" % AFTER_S, done, done + AFTER_S))
    return out


def main(argv):
    if len(argv) != 3:
        sys.stderr.write(__doc__)
        return 2
    opener = gzip.open if argv[1].endswith(".gz") else open
    with opener(argv[1], "rt") as f:
        rows = [tuple(map(float, l.split()[:4])) for l in f if l[:1].isdigit()]
    print("| window | s | stretches over the threshold | on a CPU over 3 ms "
          "| longest on a CPU (ms) | longest wall (ms) |")
    print("|---|---|---|---|---|---|")
    for name, a, b in windows(argv[2]):
        w = [r for r in rows if a <= r[0] <= b]
        on = [r[3] for r in w]
        print("| %s | %.0f | %d | %d | %.1f | %.1f |" % (
            name, b - a, len(w), sum(1 for v in on if v > 3), max(on or [0]),
            max([r[1] for r in w] or [0])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
