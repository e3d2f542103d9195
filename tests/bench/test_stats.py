"""forkbench.stats: spreads, the ratio's interval, the rank test, verdicts."""
import math

from forkbench import stats


def test_spread_median_quartiles():
    s = stats.spread([5.0, 1.0, 3.0, 2.0, 4.0])
    assert (s["n"], s["median"], s["min"], s["max"]) == (5, 3.0, 1.0, 5.0)
    assert (s["q1"], s["q3"]) == (2.0, 4.0)
    assert stats.quantile([0.0, 10.0], 0.25) == 2.5


def test_midranks_share_ties():
    assert stats.midranks([10, 20, 20, 30]) == [1.0, 2.5, 2.5, 4.0]


def test_rank_test_floor_is_two_over_binomial():
    # n runs against n never go below 2 / C(2n, n): REPEAT=2 or 3 cannot
    # reach p < 0.05, REPEAT=5 can when the runs do not overlap.
    for n in (2, 3):
        a, b = list(range(n)), list(range(100, 100 + n))
        assert math.isclose(stats.rank_test_p(a, b, "t"), 2 / math.comb(2 * n, n))
        assert stats.rank_test_p(a, b, "t") >= stats.ALPHA
    p5 = stats.rank_test_p([1, 2, 3, 4, 5], [11, 12, 13, 14, 15], "t")
    assert math.isclose(p5, 2 / 252) and p5 < stats.ALPHA


def test_rank_test_same_values_is_one():
    assert stats.rank_test_p([3, 3, 3], [3, 3, 3], "t") == 1.0


def test_bootstrap_interval_holds_the_ratio_and_is_seeded():
    a, b = [110, 111, 112, 113, 114], [100, 101, 102, 103, 104]
    lo, hi = stats.bootstrap_ratio_ci(a, b, "seed")
    assert lo <= 112 / 102 <= hi and lo > 1.0
    assert stats.bootstrap_ratio_ci(a, b, "seed") == (lo, hi)
    assert stats.bootstrap_ratio_ci([1, 2], [0, 0], "s") is None


def test_verdicts_need_test_interval_and_two_percent():
    # a 0.02% difference without overlap is noise; 10% apart is a verdict
    same = stats.compare([1011.2] * 4 + [1011.3], [1011.0] * 4 + [1010.9], "lower", "t")
    worse = stats.compare([110, 111, 112, 113, 114], [100, 101, 102, 103, 104], "lower", "t")
    better = stats.compare([1100, 1110, 1120, 1130, 1140], [1000, 1010, 1020, 1030, 1040],
                           "higher", "t")
    assert same["p"] < stats.ALPHA and same["verdict"] == stats.NOISE
    assert worse["verdict"] == stats.WORSE
    assert better["verdict"] == stats.BETTER
    lower_is_better = stats.compare([100, 101, 102, 103, 104], [110, 111, 112, 113, 114],
                                    "lower", "t")
    assert lower_is_better["verdict"] == stats.BETTER


def test_two_runs_are_always_noise():
    c = stats.compare([1, 2], [100, 200], "lower", "t")
    assert c["verdict"] == stats.NOISE and c["ratio"] == 1.5 / 150


def test_one_run_and_no_direction():
    assert stats.compare([1], [2, 3], "lower", "t")["verdict"] == stats.ONE_RUN
    assert stats.compare([1], [2], None, "t")["verdict"] == stats.NO_DIRECTION
    assert stats.verdict(1, 2, (0.4, 0.6), 0.001, None) == stats.NO_DIRECTION


def test_overlapping_interval_is_noise():
    assert stats.verdict(90, 100, (0.8, 1.1), 0.01, "lower") == stats.NOISE


def test_directions():
    assert stats.direction("save_rps") == "higher"
    assert stats.direction("steady_thp_huge_after_mb") == "higher"
    assert stats.direction("save_max_ms") == "lower"
    assert stats.direction("keys") is None
    assert stats.direction("steady_pass_outlasted_load") is None
