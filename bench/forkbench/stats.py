"""forkbench.stats -- the statistics of make bench's repetitions (pure Python, seeded).

Per metric, over the repetitions of one server and size:

  spread()      median, min, max and the quartiles;
  compare()     the ratio of a variant's median to the baseline's, a 95%
                bootstrap confidence interval of that ratio, the two-sided
                p-value of a rank-sum (Wilcoxon-Mann-Whitney) permutation test,
                and the verdict: better / worse / within noise.

A difference is called better or worse only when both agree: the rank test
gives p < ALPHA and the interval excludes 1. The exact rank test of n runs
against n runs cannot go below 2 / C(2n, n): with fewer than 4 repetitions
per server every verdict is "within noise", by construction, not by luck.
Every random draw comes from a generator seeded by the caller, so a results
folder always gives the same tables.
"""
import itertools
import math
import random
import statistics

BOOTSTRAP_RESAMPLES = 2000
CONFIDENCE = 0.95
ALPHA = 0.05
# A difference smaller than this (ratio within 1 +/- it) is no gain and no
# loss whatever the test says: e.g. two servers' dataset sizes, a steady
# 0.1% apart.
MIN_EFFECT = 0.02
EXACT_LIMIT = 20000      # rank test: enumerate every split up to this many
MONTE_CARLO = 20000      # else this many random splits

BETTER, WORSE, NOISE = "better", "worse", "within noise"
ONE_RUN = "one run"      # fewer than 2 values on a side: no verdict
NO_DIRECTION = "-"       # a count that is neither better nor worse (keys)


def quantile(values, q):
    """Linear interpolation between order statistics (numpy's default)."""
    s = sorted(values)
    pos = q * (len(s) - 1)
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def spread(values):
    """n, median, min, max, q1, q3 of one metric over repetitions."""
    return {"n": len(values), "median": statistics.median(values),
            "min": min(values), "max": max(values),
            "q1": quantile(values, 0.25), "q3": quantile(values, 0.75)}


def bootstrap_ratio_ci(values, base, seed):
    """95% percentile interval of median(values*) / median(base*), both
    resampled with replacement; None when the baseline's median is 0 too
    often for a ratio to mean anything."""
    rng = random.Random(seed)
    ratios = []
    for _ in range(BOOTSTRAP_RESAMPLES):
        b = statistics.median(rng.choices(base, k=len(base)))
        if b == 0:
            continue
        ratios.append(statistics.median(rng.choices(values, k=len(values))) / b)
    if len(ratios) < 0.95 * BOOTSTRAP_RESAMPLES:
        return None
    tail = (1.0 - CONFIDENCE) / 2.0
    return quantile(ratios, tail), quantile(ratios, 1.0 - tail)


def midranks(pooled):
    """Ranks 1..N of the pooled values, ties given their average rank."""
    order = sorted(range(len(pooled)), key=lambda i: pooled[i])
    ranks = [0.0] * len(pooled)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and pooled[order[j + 1]] == pooled[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2.0 + 1.0
        i = j + 1
    return ranks


def rank_test_p(a, b, seed):
    """Two-sided p of the rank-sum test: how often a random split of the
    pooled ranks puts a rank sum at least as far from its mean as `a`'s.
    Exact (every split) when there are few splits, else seeded Monte Carlo."""
    ranks = midranks(list(a) + list(b))
    n, total_n = len(a), len(ranks)
    mean = n * (total_n + 1) / 2.0
    dev = abs(sum(ranks[:n]) - mean) - 1e-9
    splits = math.comb(total_n, n)
    if splits <= EXACT_LIMIT:
        hits = sum(1 for idx in itertools.combinations(range(total_n), n)
                   if abs(sum(ranks[i] for i in idx) - mean) >= dev)
        return hits / splits
    rng = random.Random(seed)
    hits = sum(1 for _ in range(MONTE_CARLO)
               if abs(sum(rng.sample(ranks, n)) - mean) >= dev)
    return (hits + 1) / (MONTE_CARLO + 1)


def verdict(median_v, median_b, ci, p, direction):
    """better / worse / within noise for a metric where `direction` ("lower"
    or "higher") is the good side."""
    if direction is None:
        return NO_DIRECTION
    if p >= ALPHA or median_v == median_b:
        return NOISE
    if ci is not None and ci[0] <= 1.0 <= ci[1]:
        return NOISE
    if median_b and abs(median_v / median_b - 1.0) < MIN_EFFECT:
        return NOISE
    lower = median_v < median_b
    return BETTER if lower == (direction == "lower") else WORSE


def compare(values, base, direction, seed):
    """The variant's `values` against the baseline's `base` (one value per
    repetition each): ratio of medians, its interval, p, verdict."""
    mv, mb = statistics.median(values), statistics.median(base)
    out = {"ratio": mv / mb if mb else None, "ci": None, "p": None}
    if len(values) < 2 or len(base) < 2:
        out["verdict"] = ONE_RUN if direction else NO_DIRECTION
        return out
    out["ci"] = bootstrap_ratio_ci(values, base, seed + "|ci")
    out["p"] = rank_test_p(values, base, seed + "|rank")
    out["verdict"] = verdict(mv, mb, out["ci"], out["p"], direction)
    return out


def direction(metric):
    """Which side of a metric is good: "higher" (throughput, huge pages
    kept), None (figures that only describe the run), else "lower"."""
    if (metric in ("keys", "sync_rdb_channel") or metric.endswith("_load_s")
            or metric.endswith("_outlasted_load") or describes_growth(metric)):
        return None
    if (metric.endswith("rps") or metric.endswith("huge_after_mb")
            or metric.endswith("ping_per_s")):
        return "higher"
    return "lower"


# The growth scenarios' figures that describe the run (forkbench.growth):
# the machine-wide vmstat counters, what fork-thp chose and held, the
# fragmenter's, how many keys the fill or the eviction left, and how many
# round trips (a longer fill makes more; the rate, ping_per_s, compares).
GROWTH_DESCRIBES = ("_vm_", "fork_thp_on", "fork_thp_tables_", "fragment_", "free_2m_",
                    "anon_huge_mb", "_dbsize", "evicted_keys", "defrag_hits", "defrag_running",
                    "ping_count",
                    "at_limit_s")


def describes_growth(metric):
    return any(part in metric for part in GROWTH_DESCRIBES)
