"""forkbench.targets -- fork-thp's targets, checked against a steady-scenario run.

    python3 -m forkbench.targets DIR [--variant NAME]

The targets that make `fork-thp auto` the default
(docs/investigations/2026-12-02-fork-thp-auto-default.md), per size of a `make bench --scenario steady`
results folder, each from the repetitions of the run against stock Redis
of the same run. Where the variant's heap was not in huge pages at the end
(fork_thp_on 0: auto still waiting), it must cost what stock costs:

  - RSS at the end: at most stock's + 1 MB;
  - client p99, p99.9 and max during a save, throughput during saves: not
    worse than stock's beyond the spread (the rank test and the ratio's
    interval of forkbench.stats).

Where it was (fork_thp_on 1, or a run that predates the field):

  - client max during a save: at most 0.25x stock's at 4 GB and 0.15x at
    8 GB, and at most 3x the same load's no-save max;
  - client p99 and p99.9 during a save: at most 1.1x stock's;
  - throughput during saves: at least 0.98x stock's;
  - RSS at the end: at most stock's + 2% + 16 MB.

Each figure is the median over the repetitions (a repetition's figure being
the median of its rounds 2+, as the bench gives the steady ones); a ratio
has its 95% bootstrap interval (forkbench.stats), and a ratio target is
"met" when the ratio of medians is within it. forkbench.tables puts this
table under each steady folder in docs/results.md. Only the standard
library.
"""
import argparse
import os
import statistics
import sys

from . import report, stats

# (what, metric, against, limit, sizes, when): against "stock" compares the
# ratio with stock's figure with limit the largest ratio allowed (a
# negative one: the smallest, for "at least"); "noise" asks the variant not
# to be worse than stock beyond the spread (limit unused); "rss" allows
# stock's figure x limit[0] + limit[1] MB; "control" means the metric is
# already a ratio to the variant's own no-save run. sizes: the sizes (GB)
# the row holds for, None for all; when: "off" or "on", whether the
# variant's heap was in huge pages.
TARGETS = [
    ("RSS at the end", "rss_mb", "rss", (1.0, 1.0), None, "off"),
    ("client p99 during a save", "steady_p99_ms_median", "noise", None, None, "off"),
    ("client p99.9 during a save", "steady_p999_ms", "noise", None, None, "off"),
    ("client max during a save", "steady_max_ms_median", "noise", None, None, "off"),
    ("throughput during saves", "steady_rps", "noise", None, None, "off"),
    ("client max during a save", "steady_max_ms_median", "stock", 0.25, (4,), "on"),
    ("client max during a save", "steady_max_ms_median", "stock", 0.15, (8,), "on"),
    ("client max during a save vs the no-save max", "save_vs_control_max", "control", 3.0,
     None, "on"),
    ("client p99 during a save", "steady_p99_ms_median", "stock", 1.1, None, "on"),
    ("client p99.9 during a save", "steady_p999_ms", "stock", 1.1, None, "on"),
    ("throughput during saves", "steady_rps", "stock", -0.98, None, "on"),
    ("RSS at the end", "rss_mb", "rss", (1.02, 16.0), None, "on"),
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
    if metric in ("steady_rps", "steady_cow_mb", "steady_p999_ms"):
        return later_rounds(res, size, variant, metric.split("_", 1)[1])
    return list(res.values.get((size, variant, metric), []))


def heap_on(res, size, variant):
    """Was the variant's heap in huge pages at the end (fork_thp_on, the
    median over repetitions)? Runs that predate the field were of
    fork-thp yes."""
    on = values(res, size, variant, "fork_thp_on")
    return statistics.median(on) >= 0.5 if on else True


def check_target(res, size, variant, target):
    """One row: (what, figure, reference, ratio text, limit text, verdict)."""
    what, metric, against, limit, sizes, when = target
    if sizes and int(size) not in sizes:
        return None
    if when and heap_on(res, size, variant) != (when == "on"):
        return None
    mine = values(res, size, variant, metric)
    if not mine:
        return None
    if against == "control":
        ratio = statistics.median(mine)
        return (what, "-", "its own no-save run",
                "%.2f [%.2f–%.2f]" % (ratio, min(mine), max(mine)), "≤ %.3g" % limit,
                "met" if ratio <= limit else "**not met**")
    base = values(res, size, res.baseline, metric)
    if not base:
        return None
    cmp = stats.compare(mine, base, stats.direction(metric),
                        "target|%s|%s|%s" % (report.fmt_size(size), variant, metric))
    if cmp["ratio"] is None:
        return None
    ratio, ci = cmp["ratio"], cmp["ci"]
    ref = statistics.median(base)
    figure = statistics.median(mine)
    ratio_text = "%.3g" % ratio + (" (%.3g–%.3g)" % ci if ci else "")
    if against == "rss":
        allowed = ref * limit[0] + limit[1]
        met = figure <= allowed
        limit_text = "≤ stock%s + %g MB" % (" x %g" % limit[0] if limit[0] != 1 else "", limit[1])
        ratio_text = "%+.1f MB" % (figure - ref)
    elif against == "noise":
        met = cmp["verdict"] != stats.WORSE
        limit_text = "not worse beyond the spread"
        ratio_text += " (%s)" % cmp["verdict"]
    else:
        met = ratio >= -limit if limit < 0 else ratio <= limit
        limit_text = ("≥ %g" % -limit) if limit < 0 else ("≤ %.3g" % limit)
    return (what, report.fmt_num(figure), report.fmt_num(ref), ratio_text, limit_text,
            "met" if met else "**not met**")


def table(res, size, variant):
    rows = [r for r in (check_target(res, size, variant, t) for t in TARGETS) if r]
    if not rows:
        return []
    lines = ["| %s GB: %s's targets (heap %s) | %s | stock | ratio | target | |"
             % (report.fmt_size(size), variant,
                "in huge pages" if heap_on(res, size, variant) else "in 4 KiB pages", variant),
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
