"""forkbench.phases, registry, variants and peers: the steady load's length,
the save-vs-control ratios, the scenarios and their servers, what a size
needs, peers' names."""
import types

import pytest

from forkbench import fork, peers, phases, registry, variants


def test_steady_load_covers_save_and_pass():
    args = types.SimpleNamespace(load_seconds=15, pass_margin_seconds=3.0)
    # 4 GB: 2 x 17.7 s of idle save + a 16 s pass at 256 MB/s + 3 s, x 1.5
    got = phases.steady_load_seconds(args, 4.0, 17.7)
    assert abs(got - 1.5 * (2 * 17.7 + 4096 / variants.COLLAPSE_RATE_MB_S + 3.0)) < 1e-9
    # tiny: --load-seconds is the least
    assert phases.steady_load_seconds(args, 0.001, 0.01) == 15


def test_control_ratios():
    fig = {"nosave_max_ms": 4.0, "nosave_p99_ms": 1.0, "save_max_ms": 10.0,
           "save_p99_ms": 1.5}
    phases.control_ratios(fig, "save_max_ms", "save_p99_ms")
    assert fig["save_vs_control_max"] == 2.5 and fig["save_vs_control_p99"] == 1.5
    none = {"nosave_max_ms": 0, "save_max_ms": 3.0}
    phases.control_ratios(none, "save_max_ms", "save_p99_ms")
    assert "save_vs_control_max" not in none


def test_collapse_figures_are_the_pass_deltas():
    info = lambda ranges, usec, warm, mx: {
        "fork_thp_collapse_passes": "1", "fork_thp_collapse_ranges": str(ranges),
        "fork_thp_collapse_usec": str(usec), "fork_thp_collapse_warm_usec": str(warm),
        "latest_fork_thp_collapse_max_usec": str(mx)}
    before = phases.collapse_counters(info(100, 50000, 10000, 9000))
    after = phases.collapse_counters(info(300, 250000, 50000, 25000))
    assert phases.collapse_figures(before, after) == {
        "collapse_max_ms": 25.0, "collapse_ranges": 200, "collapse_ms_per_range": 1.0,
        "warm_ms_per_range": 0.2}
    # stock has no collapse thread: no figures
    assert phases.collapse_counters({"latest_fork_usec": "5"}) == {}
    assert phases.collapse_figures({}, after) == {}


def test_memory_needed_by_the_largest_variant():
    gib = variants.GIB
    assert variants.memory_needed(1, "stock") == 2 * gib + variants.MEMORY_EXTRA
    assert variants.memory_needed(1, "afork-thp-collapse") == int(2.1 * gib) + variants.MEMORY_EXTRA
    assert variants.memory_needed(1, "a-peer") == int(2.25 * gib) + variants.MEMORY_EXTRA
    assert variants.largest_need(8, ["stock", "afork-thp-collapse"])[1] == "afork-thp-collapse"


def test_every_scenario_is_registered_with_its_run_and_servers():
    assert sorted(registry.SCENARIOS) == ["aofrewrite", "fill", "fill-fragmented", "fork",
                                          "shapes", "steady", "sync-disk", "sync-diskless"]
    for scenario in registry.SCENARIOS.values():
        assert callable(scenario.run)
        assert set(scenario.variants.split()) <= set(variants.VARIANTS)
    assert registry.SCENARIOS["fork"].run is fork.run_fork
    assert registry.SCENARIOS["steady"].variants == "stock afork-thp-collapse"


def test_parse_peer():
    assert peers.parse_peer("valkey=/usr/bin/valkey-server") == (
        "valkey", "/usr/bin/valkey-server", [])
    assert peers.parse_peer("keydb=/opt/keydb:--server-threads 1 --x 'a b'") == (
        "keydb", "/opt/keydb", ["--server-threads", "1", "--x", "a b"])
    for bad in ("novalue", "x=", "bad name=/bin/true", "stock=/bin/true"):
        with pytest.raises(ValueError):
            peers.parse_peer(bad)
