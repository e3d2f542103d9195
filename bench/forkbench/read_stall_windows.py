"""forkbench.read_stall_windows -- read_stall.c's slow stretches by window of a
stalls.py run: the no-save control, each save while the child lived, and
the 30 s after the child (the re-collapse pass with fork-thp).

    python3 -m forkbench.read_stall_windows READ_STALL.txt[.gz] STALLS_DIR [REPORTING.txt]

STALLS_DIR needs runs.json and probe_<round>.bgsave; the control's window
comes from probe_control.csv.gz while it is still there (not committed).
"Not waiting" is a stretch's wall time minus its wait for a CPU: the
reads, whatever the host did meanwhile without taking the vCPU away
(steal is counted apart, in forkbench.stalls' steal.csv.gz), and any sleep. The
last column, where read_stall recorded it (a fifth field), is the
kernel's own count of time on a CPU for the longest stretch (updated at
ticks: 4 ms steps at HZ 250), which tells running from sleeping.
REPORTING.txt, where given, holds samples of the VM's free page reporting
(unix s, passes, KiB reported; collapse_parts.sh writes one): the MiB
reported in each window, and each stretch over 20 ms on a CPU after a
child beside the nearest report.
"""
import gzip
import json
import os
import sys

from . import child_gaps

AFTER_S = 30.0


def save_rounds(folder):
    """(round, BGSAVE sent, child gone) of each save of a make bench-stalls run, from
    its runs.json and probe_<round>.bgsave marks."""
    for r in json.load(open(os.path.join(folder, "runs.json")))[0]:
        if not r.get("save"):
            continue
        t_save, _ = child_gaps.read_marks(os.path.join(folder, "probe_%s.bgsave" % r["tag"]))
        yield r, t_save, t_save + r["save_s"]


def windows(folder):
    out = []
    control = os.path.join(folder, "probe_control.csv.gz")
    if os.path.exists(control):
        with gzip.open(control, "rt") as f:
            next(f)
            times = [float(line.split(",")[0]) for line in f]
        out.append(("control", times[0], times[-1]))
    for r, t, done in save_rounds(folder):
        out.append((r["tag"] + ", child alive", t, done))
        out.append((r["tag"] + ", %g s after the child" % AFTER_S, done, done + AFTER_S))
    return out


def load_rows(path):
    """read_stall's stretches: (unix s, wall, wait, not waiting[, on a CPU])."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return [tuple(map(float, l.split())) for l in f if l[:1].isdigit()]


def print_table(rows, wins):
    print("| window | s | stretches over the threshold | not waiting for a CPU over 3 ms "
          "| longest not waiting (ms) | its time on a CPU, kernel's count (ms) "
          "| longest wall (ms) |")
    print("|---|---|---|---|---|---|---|")
    for name, a, b in wins:
        w = [r for r in rows if a <= r[0] <= b]
        top = max(w, key=lambda r: r[3]) if w else None
        counted = "%.1f" % top[4] if top and len(top) > 4 else "-"
        print("| %s | %.0f | %d | %d | %.1f | %s | %.1f |" % (
            name, b - a, len(w), sum(1 for r in w if r[3] > 3), top[3] if top else 0,
            counted, max([r[1] for r in w] or [0])))


def load_reporting(path):
    """The VM's reporting samples: (unix s, passes, KiB reported so far)."""
    with open(path) as f:
        return [tuple(map(float, l.split()[:3])) for l in f if len(l.split()) >= 3]


def print_reported(samples, wins):
    """The MiB reported to the host in each window."""
    print()
    print("| window | MiB reported to the host |")
    print("|---|---|")
    for name, a, b in wins:
        before = [s for s in samples if s[0] <= a]
        upto = [s for s in samples if s[0] <= b]
        if before:  # sampled from the window's start on
            print("| %s | %.0f |" % (name, (upto[-1][2] - before[-1][2]) / 1024))


def report_times(samples):
    """The samples at which the reported KiB grew: (unix s, MiB)."""
    return [(b[0], (b[2] - a[2]) / 1024) for a, b in zip(samples, samples[1:]) if b[2] > a[2]]


def print_near_reports(rows, samples, wins, on_cpu_ms=20.0):
    """Each stretch the probe spent over on_cpu_ms on a CPU, after a child,
    beside the nearest sample at which the VM reported memory."""
    reports, first = report_times(samples), samples[0][0]
    print()
    print("| window | s after the child | on a CPU (ms) | nearest report: s from the stretch, MiB (- not sampled) |")
    print("|---|---|---|---|")
    for name, a, b in wins:
        if not name.endswith("after the child"):
            continue
        for r in rows:
            if a <= r[0] <= b and len(r) > 4 and r[4] > on_cpu_ms:
                near = min(reports, key=lambda x: abs(x[0] - r[0]), default=None)
                if r[0] < first:
                    near = None  # not sampled then
                where = "%+.1f s, %.0f" % (near[0] - r[0], near[1]) if near else "-"
                print("| %s | %.1f | %.1f | %s |" % (name, r[0] - a, r[4], where))


def main(argv):
    if len(argv) not in (3, 4):
        sys.stderr.write(__doc__)
        return 2
    rows, wins = load_rows(argv[1]), windows(argv[2])
    print_table(rows, wins)
    samples = load_reporting(argv[3]) if len(argv) == 4 else []
    if samples:
        print_reported(samples, wins)
        print_near_reports(rows, samples, wins)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
