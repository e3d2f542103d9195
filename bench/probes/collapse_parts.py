"""collapse_parts.py -- read_stall.c's slow stretches by window of a
collapse_parts.sh run: the no-save control, and for each collapse_stall.c
run its fill and child's life, and the 30 s after the child (the pass,
in modes that have one).

    python3 bench/probes/collapse_parts.py OUT_DIR

Columns as in read_stall_windows.py, whose table this prints; then, where
reporting.txt was sampled, the MiB the VM's free page reporting handed to
the host in each window.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import read_stall_windows  # noqa: E402


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


def main(argv):
    if len(argv) != 2:
        sys.stderr.write(__doc__)
        return 2
    rows = read_stall_windows.load_rows(os.path.join(argv[1], "read_stall.txt"))
    wins = windows(argv[1])
    read_stall_windows.print_table(rows, wins)
    reported = os.path.join(argv[1], "reporting.txt")
    if os.path.exists(reported):
        print_reported(reported, wins)
        print_near_reports(rows, reported, wins)
    return 0


def print_reported(path, wins):
    """KiB counter samples (unix s, passes, KiB) -> MiB reported per window."""
    with open(path) as f:
        samples = [tuple(map(float, l.split()[:3])) for l in f if len(l.split()) >= 3]
    if not samples:
        return
    print()
    print("| window | MiB reported to the host |")
    print("|---|---|")
    for name, a, b in wins:
        before = [s for s in samples if s[0] <= a]
        upto = [s for s in samples if s[0] <= b]
        if before:  # sampled from the window's start on
            print("| %s | %.0f |" % (name, (upto[-1][2] - before[-1][2]) / 1024))


def report_times(path):
    """The 1 s samples at which the reported KiB grew: (unix s, MiB)."""
    with open(path) as f:
        samples = [tuple(map(float, l.split()[:3])) for l in f if len(l.split()) >= 3]
    return [(b[0], (b[2] - a[2]) / 1024) for a, b in zip(samples, samples[1:]) if b[2] > a[2]]


def print_near_reports(rows, path, wins, on_cpu_ms=20.0):
    """Each stretch the probe spent over on_cpu_ms on a CPU, after a child,
    beside the nearest sample at which the VM reported memory."""
    reports = report_times(path)
    with open(path) as f:
        first = float(f.readline().split()[0])
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


if __name__ == "__main__":
    sys.exit(main(sys.argv))
