"""forkbench.ab_runs -- an A/B of make bench-stalls runs as one table.

    python3 -m forkbench.ab_runs DIR A B

DIR holds make bench-stalls output folders named A-1, A-2, ... and B-1, B-2, ...
(each with its runs.json). Every save round of every run is one sample;
the table gives per metric the median (min-max) of A and of B over all
their saves, U (how many of the A x B pairs have A above B, ties half),
and the rank-sum test's p (forkbench.stats). The no-save controls' client
max and PING max are listed per run beside: an A/B of latency means
little without them.
"""
import json
import os
import statistics
import sys

from . import stats

# runs.json field -> what the table calls it.
METRICS = (("max_gap_ms", "PING max while the child lives (ms)"),
           ("after_child_max_gap_ms", "PING max after the child (ms)"),
           ("max_ms", "client (redis-benchmark) max (ms)"),
           ("p99_ms", "client p99 (ms)"),
           ("fork_ms", "fork (ms)"),
           ("save_s", "save (s)"),
           ("cow_mb", "COW (MB)"),
           ("collapse_max_ms", "longest MADV_COLLAPSE of the pass (ms)"),
           ("collapse_ms_per_range", "MADV_COLLAPSE per range (ms)"),
           ("warm_ms_per_range", "warm-up per range (ms)"))


def runs_of(folder, prefix):
    names = sorted(n for n in os.listdir(folder)
                   if n.startswith(prefix + "-") and n[len(prefix) + 1:].isdigit())
    return [(n, json.load(open(os.path.join(folder, n, "runs.json")))[0]) for n in names]


def samples(runs, key):
    return [r[key] for _, rs in runs for r in rs if r.get("save") and r.get(key) is not None]


def controls(runs):
    return " / ".join("%.1f, %.1f" % (r["max_ms"], r["max_gap_ms"])
                      for _, rs in runs for r in rs if not r.get("save"))


def fmt(v):
    return "%.1f (%.1f-%.1f)" % (statistics.median(v), min(v), max(v))


def main(argv):
    if len(argv) != 4:
        sys.exit(__doc__)
    folder, a, b = argv[1:]
    ra, rb = runs_of(folder, a), runs_of(folder, b)
    if not ra or not rb:
        sys.exit("ab_runs: no %s-N or %s-N folders with runs.json in %s" % (a, b, folder))
    print("| | %s (%d runs) | %s (%d runs) | U (%s above) | p |" % (a, len(ra), b, len(rb), a))
    print("|---|---|---|---|---|")
    for key, title in METRICS:
        va, vb = samples(ra, key), samples(rb, key)
        if not va or not vb:
            continue
        u = sum((x > y) + 0.5 * (x == y) for x in va for y in vb)
        p = stats.rank_test_p(va, vb, seed=1)
        print("| %s | %s | %s | %g of %d | %.3f |" % (title, fmt(va), fmt(vb), u, len(va) * len(vb), p))
    print("| no-save control: client max, PING max (ms), per run | %s | %s | | |"
          % (controls(ra), controls(rb)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
