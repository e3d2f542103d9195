"""forkbench.targets: fork-thp's targets of a steady run, met or not."""
import os

from forkbench import report, targets

from conftest import write_results


def steady(tmp_path):
    v = {}
    for size, stock_fork, thp_fork, stock_max, thp_max in ((4.0, 126, 2.7, 129, 27),
                                                           (8.0, 270, 5.0, 274, 27)):
        for name, fork, mx in (("stock", stock_fork, stock_max),
                               ("afork-thp-collapse", thp_fork, thp_max)):
            n = 5
            v[(size, name, "steady_fork_ms_median")] = [fork + i * 0.01 * fork for i in range(n)]
            v[(size, name, "steady_max_ms_median")] = [mx + i * 0.01 * mx for i in range(n)]
            v[(size, name, "save_vs_control_max")] = [1.5, 1.6, 1.7, 1.8, 3.0]
            for rnd, rps in ((1, 50000), (2, 100000 if name == "stock" else 120000),
                             (3, 100000 if name == "stock" else 120000)):
                v[(size, name, "round%d_rps" % rnd)] = [rps + i for i in range(n)]
    return report.read(write_results(str(tmp_path / "steady"), v,
                                     variants=("stock", "afork-thp-collapse"),
                                     scenario="steady"))


def rows(res, size):
    return {r[0]: r for r in (targets.check_target(res, size, "afork-thp-collapse", t)
                              for t in targets.TARGETS) if r}


def test_fork_target_only_at_8_gb(tmp_path):
    res = steady(tmp_path)
    assert "steady fork, parent blocked" not in rows(res, 4.0)
    fork = rows(res, 8.0)["steady fork, parent blocked"]
    assert fork[-1] == "met" and fork[4] == "≤ 0.0667"


def test_client_max_target_met_at_8_not_at_4(tmp_path):
    res = steady(tmp_path)
    assert rows(res, 4.0)["client max during a save"][-1] == "**not met**"
    assert rows(res, 8.0)["client max during a save"][-1] == "met"


def test_control_ratio_is_the_median_with_its_spread(tmp_path):
    row = rows(steady(tmp_path), 4.0)["client max during a save vs the no-save max"]
    assert row[3] == "1.70 [1.50–3.00]" and row[-1] == "met"


def test_throughput_from_rounds_two_and_later(tmp_path):
    res = steady(tmp_path)
    assert targets.later_rounds(res, 4.0, "stock", "rps") == [100000 + i for i in range(5)]
    row = rows(res, 4.0)["throughput during saves"]
    assert row[4] == "≥ 1" and row[-1] == "met"


def test_tables_name_every_size(tmp_path):
    lines = targets.tables(steady(tmp_path))
    assert "| 4 GB: afork-thp-collapse's targets | afork-thp-collapse | stock | ratio | target | |" in lines
    assert any(l.startswith("| 8 GB: ") for l in lines)


def test_committed_steady_run_has_its_targets():
    top = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    res = report.read(os.path.join(top, "bench/results/steady-8-5rep-20261126"))
    lines = targets.tables(res)
    assert any("steady fork, parent blocked" in l and l.endswith("| met |") for l in lines)
