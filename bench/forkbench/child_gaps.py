"""forkbench.child_gaps -- a save's longest client stall, with and without its fork.

    python3 -m forkbench.child_gaps DIR

For every round with a save of a make bench run in DIR (the PING probe's
samples, probe_*.csv.gz, and marks, probe_*.bgsave, which stay in the
folder but are not committed), splits the longest PING round trip of the
round into:

  the fork          round trips that overlap fork() in the parent;
  the child's life  the rest, from BGSAVE to the child's exit;
  after the child   from the child's exit to the end of the load.

Stock Redis's worst stall of a save is its fork. What it pays besides
(copy-on-write, the CPUs it shares with its child, the machine) is what a
save costs the clients apart from the fork, on the same machine under the
same load: a floor that a server with a cheap fork competes against.
Per repetition, each figure is the median over the steady rounds (2 and
later), as make bench's steady metrics are. Writes child_gaps.md in DIR.
"""
import gzip
import os
import re
import statistics
import sys

from . import report
from . import stats

PROBE = re.compile(r"probe_(?P<size>[0-9.]+)gb_(?P<variant>.+)_r(?P<rep>\d+)"
                   r"_round(?P<round>\d+)\.bgsave$")
METRICS = (("fork", "longest PING round trip over the fork (ms)"),
           ("child", "longest PING round trip while the child lives, apart from the fork (ms)"),
           ("after", "longest PING round trip after the child, to the load's end (ms)"),
           ("nofork", "longest PING round trip of the round apart from the fork (ms)"))


def read_samples(path):
    with gzip.open(path, "rt") as f:
        next(f)
        return [tuple(map(float, line.split(","))) for line in f]


def read_marks(path):
    """(BGSAVE sent, fork began): the fork's start is the BGSAVE's when the
    log did not give it."""
    with open(path) as f:
        times = [float(x) for x in f.read().split()]
    return times[0], times[1] if len(times) > 1 else times[0]


def split_round(samples, t_save, t_fork, fork_ms, save_s):
    """The longest round trip over the fork, in the child's life apart from
    it, and after the child."""
    fork_end = t_fork + fork_ms / 1000.0
    t_done = t_save + save_s
    out = {"fork": 0.0, "child": 0.0, "after": 0.0}
    for t, rtt in samples:
        end = t + rtt / 1000.0
        if t <= fork_end and end >= t_fork:
            key = "fork"
        elif t_save <= t < t_done:
            key = "child"
        elif t >= t_done:
            key = "after"
        else:
            continue
        out[key] = max(out[key], rtt)
    out["nofork"] = max(out["child"], out["after"])
    return out


def round_value(res, size, variant, rep, rnd, metric):
    """results.csv's round<rnd>_<metric> of one repetition, or None."""
    vals = res.values.get((size, variant, "round%d_%s" % (rnd, metric)), [])
    return vals[rep - 1] if len(vals) >= rep else None


def round_figures(outdir, res):
    """(size, variant, rep) -> {round: split_round()}."""
    rounds = {}
    for name in sorted(os.listdir(outdir)):
        m = PROBE.match(name)
        if not m:
            continue
        size, variant = float(m["size"]), m["variant"]
        rep, rnd = int(m["rep"]), int(m["round"])
        fork_ms = round_value(res, size, variant, rep, rnd, "fork_ms")
        save_s = round_value(res, size, variant, rep, rnd, "save_s")
        probe = os.path.join(outdir, name[:-len(".bgsave")] + ".csv.gz")
        if fork_ms is None or save_s is None or not os.path.exists(probe):
            continue
        t_save, t_fork = read_marks(os.path.join(outdir, name))
        rounds.setdefault((size, variant, rep), {})[rnd] = split_round(
            read_samples(probe), t_save, t_fork, fork_ms, save_s)
    return rounds


def per_repetition(rounds):
    """(size, variant, metric) -> one value per repetition: the median over
    rounds 2 and later (round 1 alone when there is no other)."""
    values = {}
    for (size, variant, rep), by_round in sorted(rounds.items()):
        steady = [r for n, r in by_round.items() if n >= 2] or list(by_round.values())
        for key, _ in METRICS:
            values.setdefault((size, variant, key), []).append(
                statistics.median(r[key] for r in steady))
    return values


def markdown(res, values):
    lines = ["# A save's longest client stall, with and without its fork",
             "", "`python3 -m forkbench.child_gaps %s` (forkbench.child_gaps says how)." %
             os.path.basename(os.path.normpath(res.outdir)), "",
             "Each cell: median [min–max] over the repetitions of the median over",
             "rounds 2 and later; ratio to %s with its 95%% interval." % res.baseline]
    others = [v for v in res.variants if v != res.baseline]
    for size in res.sizes:
        head = ["%s GB" % report.fmt_size(size), res.baseline] + others
        head += ["%s / %s" % (v, res.baseline) for v in others]
        lines += ["", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for key, label in METRICS:
            base = values.get((size, res.baseline, key))
            row = [label, report.fmt_spread(stats.spread(base)) if base else "n/a"]
            ratios = []
            for v in others:
                vals = values.get((size, v, key))
                row.append(report.fmt_spread(stats.spread(vals)) if vals else "n/a")
                if vals and base:
                    seed = "child_gaps|%s|%s|%s" % (size, v, key)
                    ratios.append(report.fmt_ratio(stats.compare(vals, base, "lower", seed)))
                else:
                    ratios.append("n/a")
            lines.append("| " + " | ".join(row + ratios) + " |")
    return "\n".join(lines) + "\n"


def main(argv):
    if len(argv) != 2:
        sys.stderr.write(__doc__)
        return 2
    res = report.read(argv[1])
    values = per_repetition(round_figures(argv[1], res))
    if not values:
        sys.stderr.write("child_gaps: no probe samples of saves in %s\n" % argv[1])
        return 1
    text = markdown(res, values)
    with open(os.path.join(argv[1], "child_gaps.md"), "w") as f:
        f.write(text)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
