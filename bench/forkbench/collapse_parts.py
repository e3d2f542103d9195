"""forkbench.collapse_parts -- read_stall.c's slow stretches by window of a
collapse_parts.sh run: the no-save control, and for each collapse_stall.c
run its fill and child's life, and the 30 s after the child (the pass,
in modes that have one).

    python3 -m forkbench.collapse_parts OUT_DIR

Columns as in forkbench.read_stall_windows, whose table this prints; then, where
reporting.txt was sampled, the MiB the VM's free page reporting handed to
the host in each window, and each stretch over 20 ms on a CPU after a
child beside the nearest report.
"""
import os
import sys

from . import read_stall_windows


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
    samples = read_stall_windows.load_reporting(reported) if os.path.exists(reported) else []
    if samples:
        read_stall_windows.print_reported(samples, wins)
        read_stall_windows.print_near_reports(rows, samples, wins)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
