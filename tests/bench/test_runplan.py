"""forkbench.runplan: the order of the variants, the runs, the time left."""
import types

from forkbench import runplan


def test_rotations_then_reversed_and_again():
    got = runplan.variant_orders(["a", "b", "c"], 8)
    assert got[:6] == [list("abc"), list("bca"), list("cab"),
                       list("cba"), list("bac"), list("acb")]
    assert got[6:] == got[:2]


def test_no_two_repetitions_in_a_row_share_an_order():
    for n in (2, 3, 4):
        variants = [str(i) for i in range(n)]
        for how in ("rotate", "random"):
            orders = runplan.variant_orders(variants, 12, how, seed=7)
            assert all(sorted(o) == variants for o in orders)
            assert all(a != b for a, b in zip(orders, orders[1:]))
    assert runplan.variant_orders(["only"], 3) == [["only"]] * 3


def test_random_order_replays_from_its_seed():
    a = runplan.variant_orders(list("abcd"), 6, "random", seed=42)
    assert a == runplan.variant_orders(list("abcd"), 6, "random", seed=42)
    assert a != runplan.variant_orders(list("abcd"), 6, "random", seed=43)


def test_first_position_moves():
    orders = runplan.variant_orders(list("abc"), 6)
    assert {o[0] for o in orders} == set("abc")


def test_plan_runs_repetitions_outermost():
    runs = runplan.plan_runs([1, 4], [["a", "b"], ["b", "a"]])
    assert [(r.seq, r.rep, r.size, r.variant, r.position) for r in runs] == [
        (1, 1, 1, "a", 1), (2, 1, 1, "b", 2), (3, 1, 4, "a", 1), (4, 1, 4, "b", 2),
        (5, 2, 1, "b", 1), (6, 2, 1, "a", 2), (7, 2, 4, "b", 1), (8, 2, 4, "a", 2)]


def args(**kw):
    base = dict(load_seconds=15, calibrate_seconds=1.5, idle_saves=3, rounds=3,
                scenario="fork")
    base.update(kw)
    return types.SimpleNamespace(**base)


def test_estimate_follows_the_machine():
    runs = runplan.plan_runs([1], [["a", "b"]])
    est = runplan.Estimate(runs, args())
    model = est.total()
    assert model == sum(runplan.model_seconds(r, args()) for r in runs)
    est.finished(runs[0], 2 * est.model[0])      # this machine is twice as slow
    assert abs(est.total() - 2 * model) < 1e-6
    assert abs(est.left() - 2 * est.model[1]) < 1e-6
    assert abs(est.left(runs[1], 1.0) - (2 * est.model[1] - 1.0)) < 1e-6


def test_steady_runs_take_longer_than_fork_runs():
    run = runplan.Run(1, 1, 4, "a", 1)
    assert (runplan.model_seconds(run, args(scenario="steady"))
            > runplan.model_seconds(run, args()))


def test_fmt_duration():
    assert runplan.fmt_duration(45) == "45s"
    assert runplan.fmt_duration(750) == "12m 30s"
    assert runplan.fmt_duration(3900) == "1h 05m"
