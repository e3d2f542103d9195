"""collapse_parts.py -- read_stall.c's slow stretches by window of a
collapse_parts.sh run: the no-save control, and for each collapse_stall.c
run its fill and child's life, and the 30 s after the child (the pass,
in modes that have one).

    python3 bench/probes/collapse_parts.py OUT_DIR

Per window: its length, the stretches over read_stall's threshold, those
not waiting for a CPU over 3 ms, the longest not waiting, its time on a
CPU by the kernel's count where read_stall recorded it (a fifth field:
updated at ticks, 4 ms steps at HZ 250, which tells running from
sleeping), and the longest wall time. "Not waiting" is a stretch's wall
time minus its wait for a CPU: the reads, whatever the host did meanwhile
without taking the vCPU away, and any sleep. Then, where reporting.txt was
sampled (unix s, passes, KiB reported), the MiB the VM's free page
reporting handed to the host in each window, and each stretch over 20 ms
on a CPU after a child beside the nearest report
(docs/investigations/2026-11-26-fork-thp-free-page-reporting.md).
"""
import os
import sys


def windows(folder):
    with open(os.path.join(folder, "marks.txt")) as f:
        marks = [l.split() for l in f if l.strip()]
    with open(os.path.join(folder, "collapse_stall.txt")) as f:
        exits = [float(l.split()[1]) for l in f if l.startswith("child_exited")]
    out, runs = [], 0
    for (t0, what0, mode), (t1, what1, _) in zip(marks[::2], marks[1::2]):
        assert what0 == "start" and what1 == "end", (what0, what1)
        if mode == "control":
            out.append(("control", float(t0), float(t1)))
            continue
        runs += 1
        exited = exits[runs - 1]
        out.append(("%s (run %d), fill and child" % (mode, runs), float(t0), exited))
        out.append(("%s (run %d), after the child" % (mode, runs), exited, float(t1)))
    return out


def load_rows(path):
    """read_stall's stretches: (unix s, wall, wait, not waiting[, on a CPU])."""
    with open(path) as f:
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
    if len(argv) != 2:
        sys.stderr.write(__doc__)
        return 2
    rows = load_rows(os.path.join(argv[1], "read_stall.txt"))
    wins = windows(argv[1])
    print_table(rows, wins)
    reported = os.path.join(argv[1], "reporting.txt")
    samples = load_reporting(reported) if os.path.exists(reported) else []
    if samples:
        print_reported(samples, wins)
        print_near_reports(rows, samples, wins)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
