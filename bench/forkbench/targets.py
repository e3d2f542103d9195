"""forkbench.targets -- fork-thp's targets, checked against a steady-scenario run.

    python3 -m forkbench.targets DIR [--variant NAME]

The targets fork-thp must meet before it is recommended by default
(docs/investigations/2026-11-26-fork-thp-off-by-default.md), per size of a `make bench --scenario steady` results folder,
each from the repetitions of the run against stock Redis of the same run:

  - steady fork, parent blocked: at most 1/15 of stock's (8 GB);
  - client max during a save: at most 2x the same load's no-save max, and
    at most 1/10 of stock's (4 and 8 GB); the PING probe's longest gap
    during the save and after the child (the re-collapse), each at most 2x
    the no-save run's (the probe's view beside the load generator's);
  - client p99 during a save: at most 1.2x stock's;
  - throughput during saves: at least stock's;
  - RSS at the end: at most stock's + 3%;
  - copy-on-write during saves: at most stock's.

Each figure is the median over the repetitions (a repetition's figure being
the median of its rounds 2+, as the bench gives the steady ones), the ratio
has its 95% bootstrap interval (forkbench.stats), and the target is "met" when the
ratio of medians is within it, "not met" otherwise. forkbench.tables puts this
table under each steady folder in docs/results.md. Only the standard library.
"""
import argparse
import os
import statistics
import sys

from . import report, stats

# (what, metric, against, limit, sizes): against "stock" compares with
# stock's figure, "control" means the metric is already a ratio to the
# variant's own no-save run, "control:M" divides by that run's M; limit is
# the largest ratio allowed (a negative one: the smallest, for "at least").
TARGETS = [
    ("steady fork, parent blocked", "steady_fork_ms_median", "stock", 1 / 15.0, (8,)),
    ("client max during a save vs the no-save max", "save_vs_control_max", "control", 2.0, None),
    # The PING probe's view of the same (the bench): it is not behind the
    # load's pipelines, and it tells the save from the re-collapse after it.
    ("PING: longest gap during a save vs the no-save run", "steady_max_gap_ms_median",
     "control:nosave_max_gap_ms", 2.0, None),
    ("PING: longest gap after the child (re-collapse) vs the no-save run",
     "steady_after_child_max_gap_ms_median", "control:nosave_max_gap_ms", 2.0, None),
    ("client max during a save", "steady_max_ms_median", "stock", 0.1, (4, 8)),
    ("client p99 during a save", "steady_p99_ms_median", "stock", 1.2, None),
    ("throughput during saves", "steady_rps", "stock", -1.0, None),
    ("RSS at the end", "rss_mb", "stock", 1.03, None),
    ("copy-on-write per save (MB)", "steady_cow_mb", "stock", 1.0, None),
]


def later_rounds(res, size, variant, key):
    """Per repetition, the median of rounds 2+ of roundN_<key>."""
    per_rep = {}
    for (s, v, metric), vals in res.values.items():
        if s != size or v != variant or not metric.startswith("round"):
            continue
        rnd, _, name = metric[5:].partition("_")
        if name == key and rnd.isdigit() and int(rnd) >= 2:
            for i, x in enumerate(vals):
                per_rep.setdefault(i, []).append(x)
    return [statistics.median(v) for _, v in sorted(per_rep.items())]


def values(res, size, variant, metric):
    if metric in ("steady_rps", "steady_cow_mb"):
        return later_rounds(res, size, variant, metric.split("_", 1)[1])
    return list(res.values.get((size, variant, metric), []))


def check_target(res, size, variant, target):
    """One row: (what, figure, reference, ratio text, limit text, verdict)."""
    what, metric, against, limit, sizes = target
    if sizes and int(size) not in sizes:
        return None
    mine = values(res, size, variant, metric)
    if not mine:
        return None
    if against.startswith("control:"):
        # Per repetition, the figure over the same repetition's control.
        ctl = values(res, size, variant, against.split(":", 1)[1])
        mine = [a / b for a, b in zip(mine, ctl) if b > 0]
        if not mine:
            return None
        against = "control"
    if against == "control":
        ref, ratio, ci = None, statistics.median(mine), None
        low, high = min(mine), max(mine)
        ratio_text = "%.2f [%.2f–%.2f]" % (ratio, low, high)
        ref_text = "its own no-save run"
    else:
        base = values(res, size, res.baseline, metric)
        if not base:
            return None
        cmp = stats.compare(mine, base, stats.direction(metric),
                            "target|%s|%s|%s" % (report.fmt_size(size), variant, metric))
        ratio, ci = cmp["ratio"], cmp["ci"]
        if ratio is None:
            return None
        ref = statistics.median(base)
        ref_text = report.fmt_num(ref)
        ratio_text = "%.3g" % ratio + (" (%.3g–%.3g)" % ci if ci else "")
    met = ratio >= -limit if limit < 0 else ratio <= limit
    limit_text = ("≥ %g" % -limit) if limit < 0 else ("≤ %.3g" % limit)
    figure = report.fmt_num(statistics.median(mine)) if against != "control" else "-"
    return (what, figure, ref_text, ratio_text, limit_text, "met" if met else "**not met**")


def table(res, size, variant):
    rows = [r for r in (check_target(res, size, variant, t) for t in TARGETS) if r]
    if not rows:
        return []
    lines = ["| %s GB: %s's targets | %s | stock | ratio | target | |"
             % (report.fmt_size(size), variant, variant),
             "|---|---|---|---|---|---|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return lines


def tables(res, variant=None):
    """Markdown lines for every size, for the variant (default: the first
    one other than stock)."""
    others = [v for v in res.variants if v != res.baseline]
    variant = variant or (others[0] if others else None)
    if not variant:
        return []
    lines = []
    for size in res.sizes:
        t = table(res, size, variant)
        if t:
            lines += t + [""]
    return lines


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("dir")
    p.add_argument("--variant")
    a = p.parse_args()
    res = report.read(a.dir)
    out = tables(res, a.variant)
    if not out:
        sys.exit("targets: no steady-scenario figures against stock in %s" % a.dir)
    print("\n".join(out))


if __name__ == "__main__":
    main()
