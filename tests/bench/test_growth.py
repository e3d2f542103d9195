"""forkbench.growth, forkbench.shapes and the fill of forkbench.phases: the
fill's keyspace and command, /proc/vmstat and /proc/buddyinfo, the probe's
figures over a window, INFO fork's fork-thp fields, how much memory the
fragmenter may take, the shapes' names and options, and the tables, labels
and verdicts of their folders."""
import math
import types

import pytest

from conftest import write_results
from forkbench import (cli, growth, phases, registry, report, runplan, shapes, stats, tables,
                       variants)
from forkbench.variants import GIB, MIB


# ---------------------------------------------------------------- the fill

def test_keyspace_reaches_the_size():
    # 1.5N random SETs write N(1 - e^-1.5) distinct keys: 77.7% of N
    n = phases.keys_for_size(2, 400)
    assert n == round(2 * GIB / (400 * (1 - math.exp(-1.5))))
    assert abs(n * (1 - math.exp(-1.5)) * 400 - 2 * GIB) < 400
    # more requests per key: a smaller keyspace for the same size
    assert phases.keys_for_size(2, 400, 3.0) < n
    assert phases.keys_for_size(1e-9, 400) == 1


def test_fill_command_is_the_new_users():
    cmd = phases.fill_cmd("/t", 7000, 5400000, 256)
    assert cmd[0] == "/t/redis-benchmark"
    assert cmd[1:] == ["-p", "7000", "-t", "set", "-r", "5400000", "-n", "8100000",
                       "-d", "256", "-c", "20", "-P", "16"]
    cut = phases.fill_cmd("/t", 1, 10, 131072, clients=5, pipeline=1, requests=99)
    assert cut[cut.index("-n") + 1] == "99" and cut[cut.index("-P") + 1] == "1"
    assert cut[cut.index("-c") + 1] == "5"


VMSTAT = """nr_free_pages 12345
thp_fault_alloc 836
thp_fault_fallback 3
compact_stall 0
compact_success 7
weird line here
"""


def test_vmstat_deltas():
    before = phases.parse_vmstat(VMSTAT)
    assert before["thp_fault_alloc"] == 836 and "weird" not in before
    after = dict(before, thp_fault_alloc=1672, compact_stall=2)
    d = phases.vmstat_deltas(before, after)
    assert d == {"thp_fault_alloc": 836, "thp_fault_fallback": 0, "compact_stall": 2,
                 "compact_success": 0}
    # a kernel without a counter: left out, not 0
    assert "compact_fail" not in d and "thp_collapse_alloc" not in d


BUDDY = """Node 0, zone      DMA      1      1      1      0      2      1      1      0      1      1      3
Node 0, zone    DMA32    100     50     20     10      5      2      1      1      0      2      4
Node 0, zone   Normal   9000   4000    800     50     10      4      2      0      0      1      0
"""


def test_free_memory_in_2m_blocks():
    # order 9 counts one 2 MiB block, order 10 two: DMA 1+2*3, DMA32 2+2*4, Normal 1
    assert growth.free_huge_mb(BUDDY) == (7 + 10 + 1) * 2.0
    assert growth.free_huge_mb("") == 0.0
    # only small pieces free: nothing for a huge page
    assert growth.free_huge_mb("Node 0, zone Normal 10 10 10 10 10 10 10 10 10 0 0\n") == 0.0


def test_probe_figures_over_the_window():
    samples = [(0.5, 9.0)] + [(1.0 + i / 1000.0, 0.1) for i in range(1000)] + [
        (1.5005, 175.0), (1.6, 3.0), (2.5, 50.0)]
    fig = phases.probe_figures(samples, 1.0, 2.0)
    # the round trips sent before the fill or after it do not count
    assert fig["ping_count"] == 1002
    assert fig["max_ping_ms"] == 175.0
    assert fig["gaps_over_1ms"] == 2
    assert fig["ping_per_s"] == pytest.approx(1002.0)
    # nearest rank: the 1001st of 1002 for p99.9, the 992nd for p99
    assert fig["ping_p999_ms"] == 3.0
    assert fig["ping_p99_ms"] == 0.1
    empty = phases.probe_figures(samples, 3.0, 4.0)
    assert empty["ping_count"] == 0 and "max_ping_ms" not in empty


def test_fork_thp_fields_optional():
    info = {"fork_thp": "1", "fork_thp_heap": "on: auto: why", "fork_thp_tables_held": "1",
            "fork_thp_tables_held_total": "12", "fork_thp_tables_not_held": "0",
            "fork_thp_slack_active_bytes": str(3 << 20)}
    fig, status = phases.thp_fields(info)
    assert fig == {"fork_thp_on": 1, "fork_thp_tables_held": 1,
                   "fork_thp_tables_held_total": 12, "fork_thp_tables_not_held": 0,
                   "fork_thp_slack_mb": 3.0}
    assert status == "on: auto: why"
    # a server without the tables fields: reported without them
    fig, _ = phases.thp_fields({"fork_thp": "0", "fork_thp_heap": "off"})
    assert fig == {"fork_thp_on": 0}
    # stock has no INFO fork
    assert phases.thp_fields({}) == ({}, None)


# ---------------------------------------------------------------- fragmenting

def test_fragment_plan_leaves_the_servers_their_need():
    plan = growth.fragment_plan(22 * GIB, 6 * GIB)
    # never more than MemAvailable less 0.5 GiB touched at once
    assert plan["mapped"] == 22 * GIB - variants.MEMORY_EXTRA
    assert plan["left"] >= 6 * GIB
    assert plan["share"] > 0.9
    # tight: the servers' need is what limits it, exactly
    plan = growth.fragment_plan(10 * GIB, 6 * GIB, min_share=0)
    assert plan["mapped"] == 8 * GIB and plan["left"] == 6 * GIB


def test_fragment_plan_refuses():
    with pytest.raises(growth.FragmentRefused, match="no memory left to fragment"):
        growth.fragment_plan(4 * GIB, 5 * GIB)
    # room for a little only: most of the free memory would not be fragmented
    with pytest.raises(growth.FragmentRefused, match=r"only \d+% of the free memory"):
        growth.fragment_plan(10 * GIB, 9 * GIB)
    # the user's cap limits it: a small share is what was asked
    plan = growth.fragment_plan(22 * GIB, 1 * GIB, max_bytes=64 * MIB)
    assert plan["mapped"] == 64 * MIB and plan["share"] < 0.01


def test_fragmenter_frees_every_other_page():
    from forkbench import fragment
    mm, info = fragment.fragment(16 * 4096 + 100)
    try:
        assert info["mapped"] == 16 * 4096 and info["kept"] == info["freed"] == 8 * 4096
        page = 4096
        # MADV_DONTNEED: the odd pages read back as zeros, the kept ones as touched
        assert [mm[i * page] for i in range(16)] == [1, 0] * 8
    finally:
        mm.close()


# ---------------------------------------------------------------- shapes

def test_shape_names_and_options():
    assert shapes.value_name(131072) == "128k"
    assert shapes.value_name(1048576) == "1m"
    assert shapes.value_name(300) == "300b"
    for n in ("large128k", "large1m", "large300b"):
        assert report.value_bytes(n) == {"large128k": 131072, "large1m": 1048576,
                                         "large300b": 300}[n]
    assert shapes.parse_shapes("churn small") == ["churn", "small"]
    with pytest.raises(ValueError, match="tiny"):
        shapes.parse_shapes("small tiny")
    with pytest.raises(ValueError):
        shapes.parse_shapes("")


def test_limit_figures_split_at_the_first_eviction():
    samples = [(t / 10.0, 1.0 + t) for t in range(0, 40)]
    live = [(0.0, None, None), (1.0, 100.0, 100.0), (3.0, 50.0, 75.0), (4.0, 30.0, 60.0)]
    fig = shapes.limit_figures(samples, live, 0.0, 2.0, 4.0)
    assert fig["fill_max_ping_ms"] == 21.0 and fig["fill_ping_count"] == 21
    assert fig["max_ping_ms"] == 40.0 and fig["ping_count"] == 20
    # 2..3 at 50/s, 3..4 at 30/s
    assert fig["rps"] == pytest.approx(40.0)
    assert fig["at_limit_s"] == 2.0


def args_for(**kw):
    base = dict(scenario="shapes", shapes=list(shapes.SHAPES), many_servers=8, many_mb=100,
                defrag_seconds=30, large_values=[131072, 1048576], save_lead_seconds=1.0,
                maxmemory_seconds=20, load_seconds=15, calibrate_seconds=1.5)
    base.update(kw)
    return types.SimpleNamespace(**base)


def test_model_of_the_growth_scenarios():
    run = runplan.Run(1, 1, 4.0, "stock", 1)
    fill = runplan.model_seconds(run, args_for(scenario="fill"))
    frag = runplan.model_seconds(run, args_for(scenario="fill-fragmented"))
    assert fill == pytest.approx(runplan.SETUP_S + 4 * runplan.FILL_S_PER_GB + runplan.PROBE_S)
    assert frag == pytest.approx(fill + runplan.FRAGMENT_S)
    every = runplan.model_seconds(run, args_for())
    one = runplan.model_seconds(run, args_for(shapes=["small"]))
    assert one == pytest.approx(runplan.SETUP_S + 1.0)
    # each shape's time counts, the defrag's as configured
    longer = runplan.model_seconds(run, args_for(defrag_seconds=90))
    assert longer == pytest.approx(every + 60)


def test_memory_of_the_growth_scenarios():
    # no fork in a fill: 1.3x for every server, whatever fork-thp does
    assert variants.memory_needed(4, "stock", "fill") == int(1.3 * 4 * GIB + 512 * MIB)
    assert variants.memory_needed(4, "afork-thp-collapse", "fill-fragmented") == \
        variants.memory_needed(4, "stock", "fill")
    assert variants.memory_factor("afork-thp-auto", "shapes") == 2.7
    # the fork scenarios keep theirs
    assert variants.memory_factor("afork-thp-auto") == 2.1
    assert shapes.many_need(args_for()) == int(1.3 * 800 * MIB + 512 * MIB)


def test_growth_options_checked():
    p = cli.argparse.ArgumentParser()
    cli.add_growth_args(p)

    def check(*argv):
        a = p.parse_args(list(argv))
        cli.check_growth_args(p, a)
        return a
    a = check()
    assert a.shapes == list(shapes.SHAPES) and a.large_values == [131072, 1048576]
    assert (a.fill_clients, a.fill_pipeline, a.fill_requests) == (20, 16, 1.5)
    for bad in (["--shapes", "small huge"], ["--large-values", "1m"], ["--many-servers", "0"],
                ["--maxmemory-keyspace", "1"], ["--defrag-seconds", "-1"],
                ["--fragment-max-gb", "0"], ["--fill-requests", "0"]):
        with pytest.raises(SystemExit):
            check(*bad)


def test_variants_of_the_growth_scenarios():
    for s in ("fill", "fill-fragmented", "shapes"):
        assert registry.SCENARIOS[s].variants.split() == ["stock", "redis-afork", "afork-thp-auto",
                                                 "afork-thp-collapse"]
    assert variants.VARIANTS["afork-thp-auto"] == ("afork", ["--fork-thp", "auto"])
    assert variants.VARIANTS["redis-afork"] == ("afork", [])


# ---------------------------------------------------------------- tables

def test_directions_of_the_growth_figures():
    for m in ("fill_max_ping_ms", "fill_ping_p999_ms", "fill_s", "rss_mb", "churn_defrag_rss_mb",
              "maxmem_rss_vs_maxmemory", "large1m_save_max_ping_ms", "small_empty_rss_mb"):
        assert stats.direction(m) == "lower", m
    for m in ("fill_ping_per_s", "fill_rps", "maxmem_rps", "large128k_fill_rps"):
        assert stats.direction(m) == "higher", m
    for m in ("fill_vm_thp_fault_alloc", "fill_vm_compact_stall", "fork_thp_on",
              "maxmem_fork_thp_on", "fork_thp_tables_held_total", "fragment_share",
              "free_2m_after_mb", "anon_huge_mb", "fill_dbsize", "maxmem_evicted_keys",
              "churn_defrag_hits", "fill_ping_count", "maxmem_at_limit_s"):
        assert stats.direction(m) is None, m


def fill_values(size=1.0):
    vals = {}
    for v, worst in (("stock", [8.0, 21.0, 5.0, 6.0, 7.0]),
                     ("afork-thp-auto", [172.0, 183.0, 175.0, 176.0, 180.0])):
        vals[(size, v, "fill_max_ping_ms")] = worst
        vals[(size, v, "fill_ping_p999_ms")] = [x / 10 for x in worst]
        vals[(size, v, "fill_vm_thp_fault_alloc")] = [836] * 5
        vals[(size, v, "keys")] = [1000] * 5
    return vals


def test_fill_tables(tmp_path):
    folder = write_results(tmp_path / "fill", fill_values(),
                           variants=("stock", "afork-thp-auto"), scenario="fill")
    text = tables.folder_tables("fill", str(tmp_path), set())
    assert text.startswith("**fill scenario**")
    row = [l for l in text.splitlines() if l.startswith("| fill: worst PING round trip")][0]
    assert "| 7.00 [5.00–21] | 176 [172–183] |" in row and row.endswith("| worse |")
    vm = [l for l in text.splitlines() if "thp_fault_alloc" in l][0]
    assert vm.endswith("| - |")               # a machine counter: no verdict
    assert folder


def test_no_headline_for_a_growth_folder(tmp_path):
    write_results(tmp_path / "fill", fill_values(), variants=("stock", "afork-thp-auto"),
                  scenario="fill")
    with pytest.raises(tables.Refused, match="the fill scenario has no fork for a headline"):
        tables.headline(["fill"], str(tmp_path), set())


def shapes_values(size=1.0):
    vals = {}
    for v, k in (("stock", 1.0), ("afork-thp-auto", 1.5)):
        vals[(size, v, "small_empty_rss_mb")] = [6.8 * k, 6.9 * k, 6.7 * k]
        vals[(size, v, "large1m_rss_mb")] = [1100.0 * k] * 3
        vals[(size, v, "large300b_rss_mb")] = [1000.0] * 3
        vals[(size, v, "large128k_rss_mb")] = [1200.0] * 3
        vals[(size, v, "large128k_used_memory_mb")] = [1000.0] * 3
        vals[(size, v, "maxmem_rss_vs_maxmemory")] = [1.1 * k] * 3
    return vals


def test_shapes_tables_have_a_block_per_value_size(tmp_path):
    write_results(tmp_path / "sh", shapes_values(), variants=("stock", "afork-thp-auto"),
                  scenario="shapes")
    text = tables.folder_tables("sh", str(tmp_path), set())
    lines = [l.split(" | ")[0] for l in text.splitlines() if l.startswith("| ")]
    want = ["| small: RSS of an empty server (MB)", "| 300 B values: RSS after the fill (MB)",
            "| 128 KB values: RSS after the fill (MB)",
            "| 1 MB values: RSS after the fill (MB)", "| maxmemory: peak RSS / maxmemory"]
    assert [l for l in lines if l in want] == want       # the smaller values first
    res = report.read(str(tmp_path / "sh"))
    assert report.large_names(res) == ["large300b", "large128k", "large1m"]
    labels = dict(report.all_labels(res))
    assert labels["large1m_save_max_ping_ms"] == \
        "1 MB values: during the BGSAVE: worst PING round trip (ms)"


def test_growth_labels_unique_and_cover_the_tables():
    keys = [k for k, _ in report.LABELS]
    assert len(keys) == len(set(keys))
    known = set(keys)
    for s in ("fill", "fill-fragmented"):
        assert set(tables.DOC_METRICS[s]) <= known, s
    assert set(tables.SHAPES_DOC) <= known
    large = dict(report.large_labels("large128k"))
    assert {"large128k_" + k for k in tables.LARGE_DOC} <= set(large)


class FakeServer:
    """What growth asks of a server: INFO sections."""

    def __init__(self, **sections):
        self.sections = sections

    def info(self, section):
        return dict(self.sections.get(section, {}))


def test_a_fork_fails_the_run():
    phases.no_forks(FakeServer(stats={"total_forks": "0"}), "the fill")
    phases.no_forks(FakeServer(stats={}), "the fill")          # a peer that does not count
    with pytest.raises(RuntimeError, match="2 forks during the fill"):
        phases.no_forks(FakeServer(stats={"total_forks": "2"}), "the fill")


def test_what_fork_thp_chose_is_recorded(tmp_path):
    args = types.SimpleNamespace(out=str(tmp_path))
    run = runplan.Run(1, 2, 0.5, "afork-thp-auto", 1)
    fig = {}
    heap = 'off: auto: "maxmemory is 4 MiB"'
    phases.server_thp(FakeServer(fork={"fork_thp": "0", "fork_thp_heap": heap}), args, run,
                      fig, "maxmem_")
    phases.server_thp(FakeServer(fork={"fork_thp": "1", "fork_thp_heap": "on"}), args,
                      run._replace(variant="redis-afork"), fig)
    assert fig == {"maxmem_fork_thp_on": 0, "fork_thp_on": 1}
    import csv
    rows = list(csv.DictReader(open(tmp_path / "fork_thp_heap.csv")))
    assert [(r["variant"], r["rep"], r["server"], r["fork_thp_heap"]) for r in rows] == [
        ("afork-thp-auto", "2", "maxmem", "off: auto: 'maxmemory is 4 MiB'"),
        ("redis-afork", "2", "fill", "on")]
    # stock: nothing recorded
    phases.server_thp(FakeServer(), args, run._replace(variant="stock"), fig)
    assert len(list(csv.DictReader(open(tmp_path / "fork_thp_heap.csv")))) == 2
