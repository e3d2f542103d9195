"""forkbench.sites and what it relies on in load and server: the other
fork sites' parsing (the primary's log, redis-benchmark's live lines),
when a rewrite is done and a replica synced, the checks that the site
really ran, the window figures, and the memory a sync needs."""
import types

import pytest

from forkbench import load, registry, runplan, server, sites, stats, variants
from forkbench.report import LABELS


# ---------------------------------------------------------------- the rewrite

def pers(in_progress="0", scheduled="0", rewrites="3", status="ok"):
    return {"aof_rewrite_in_progress": in_progress, "aof_rewrite_scheduled": scheduled,
            "aof_rewrites": rewrites, "aof_last_bgrewrite_status": status}


def test_rewrite_running_done_failed():
    # sent when aof_rewrites was 2: counted at the fork, done when no child
    # is in progress or scheduled
    assert sites.rewrite_state(pers(in_progress="1"), 2) == "running"
    assert sites.rewrite_state(pers(scheduled="1", rewrites="2"), 2) == "running"
    assert sites.rewrite_state(pers(), 2) == "done"
    assert sites.rewrite_state(pers(status="err"), 2) == "failed"
    # no child and never counted: it did not start
    assert sites.rewrite_state(pers(rewrites="2"), 2) == "failed"


# ---------------------------------------------------------------- the sync

SYNCED = {"role": "slave", "master_link_status": "up", "master_sync_in_progress": "0"}
LOADED = {"loading": "0", "async_loading": "0"}


def test_sync_done_needs_link_loaded_and_keyspace():
    assert sites.sync_done(SYNCED, LOADED, 1000, 1000)
    assert sites.sync_done(SYNCED, LOADED, "1000", 1000)
    assert not sites.sync_done(SYNCED, LOADED, 999, 1000)          # keyspace not there
    assert not sites.sync_done(SYNCED, LOADED, None, 1000)         # DBSIZE not asked
    assert not sites.sync_done(dict(SYNCED, master_link_status="down"), LOADED, 1000, 1000)
    assert not sites.sync_done(dict(SYNCED, master_sync_in_progress="1"), LOADED, 1000, 1000)
    assert not sites.sync_done(dict(SYNCED, role="master"), LOADED, 1000, 1000)
    assert not sites.sync_done(SYNCED, dict(LOADED, loading="1"), 1000, 1000)
    assert not sites.sync_done(SYNCED, dict(LOADED, async_loading="1"), 1000, 1000)
    # a replica not yet connected: no link status at all
    assert not sites.replica_ready({"role": "slave"}, LOADED)


LOG = """\
100:M 27 Nov 2026 04:03:59.244 * Full resync requested by replica 127.0.0.1:37485 (rdb-channel)
100:M 27 Nov 2026 04:03:59.244 * Starting BGSAVE for SYNC with target: replicas sockets (rdb-channel)
100:M 27 Nov 2026 04:03:59.248 * Background RDB transfer started by pid 14134 to replica socket
"""


def test_sync_target_from_the_primarys_log():
    assert sites.sync_target(LOG) == ("replicas sockets", True)
    disk = LOG + ("100:M 27 Nov 2026 04:05:00.000 * Starting BGSAVE for SYNC with "
                  "target: disk\n")
    assert sites.sync_target(disk) == ("disk", False)            # the last one counts
    pipe = "1:M 1 Jan 2026 00:00:00.000 * Starting BGSAVE for SYNC with target: replicas sockets\n"
    assert sites.sync_target(pipe) == ("replicas sockets", False)
    assert sites.sync_target("1:M 1 Jan 2026 00:00:00.000 * Ready\n") is None


def test_check_target_refuses_the_wrong_kind_of_sync(tmp_path):
    log = tmp_path / "server.log"
    log.write_text(LOG)
    srv = types.SimpleNamespace(log=str(log))
    assert sites.check_target(srv, "sync-diskless") == 1
    with pytest.raises(RuntimeError, match="target 'replicas sockets'"):
        sites.check_target(srv, "sync-disk")
    log.write_text("nothing\n")
    assert sites.check_target(srv, "sync-disk") is None


def counters(**kw):
    base = {"total_forks": "5", "sync_full": "1", "sync_partial_ok": "0", "aof_rewrites": "2"}
    base.update({k: str(v) for k, v in kw.items()})
    return base


def test_the_site_really_ran():
    before = counters()
    assert sites.delta_problems(before, counters(total_forks=6, sync_full=2), "sync-disk") == []
    assert sites.delta_problems(before, counters(total_forks=6, aof_rewrites=3),
                                "aofrewrite") == []
    got = sites.delta_problems(before, counters(total_forks=6), "sync-diskless")
    assert got == ["sync_full rose by 0, expected 1 (a full sync)"]
    got = sites.delta_problems(before, counters(total_forks=6, sync_full=2, sync_partial_ok=1),
                               "sync-disk")
    assert got == ["sync_partial_ok rose by 1: a partial resync"]
    got = sites.delta_problems(before, counters(total_forks=7, sync_full=3), "sync-disk")
    assert got[0] == "2 forks during the sync-disk, expected 1" and len(got) == 2
    got = sites.delta_problems(before, counters(total_forks=6), "aofrewrite")
    assert got == ["aof_rewrites rose by 0, expected 1"]


class FakeServer:
    """INFO sections from a script: each call of info(section) takes the
    next dict of that section (the last one repeats)."""

    def __init__(self, port=7000, dbsize=None, **sections):
        self.port, self.log, self.dbsize = port, "/nonexistent", dbsize
        self.script = {k: list(v) for k, v in sections.items()}
        self.calls = []
        self.conn = types.SimpleNamespace(call=self.call)

    def info(self, section):
        steps = self.script[section]
        return steps.pop(0) if len(steps) > 1 else steps[0]

    def call(self, *cmd):
        self.calls.append(cmd)
        if cmd[0] == "DBSIZE":
            return self.dbsize
        return "OK"

    def log_tail(self):
        return ""


@pytest.fixture
def no_sleep(monkeypatch):
    monkeypatch.setattr(sites.time, "sleep", lambda s: None)


def test_full_sync_waits_for_the_replica_and_the_child(no_sleep):
    stats_ = [{"total_forks": "1"}, {"total_forks": "1"}, {"total_forks": "2"}]
    bgsave = [{"rdb_bgsave_in_progress": "0"}, {"rdb_bgsave_in_progress": "0"},
              {"rdb_bgsave_in_progress": "1"}, {"rdb_bgsave_in_progress": "1"},
              {"rdb_bgsave_in_progress": "1"}, {"rdb_bgsave_in_progress": "0"}]
    primary = FakeServer(stats=stats_, persistence=bgsave)
    # the replica: connecting, loading, up with its keys (before the child
    # is gone, as with the rdb channel)
    repl = [{"role": "slave", "master_link_status": "down", "master_sync_in_progress": "1"},
            {"role": "slave", "master_link_status": "down", "master_sync_in_progress": "1"},
            SYNCED]
    replica = FakeServer(replication=repl, persistence=[dict(LOADED, loading="1"), LOADED],
                         dbsize=1000)
    ev = sites.full_sync(primary, replica, 1000, limit_s=60)
    assert replica.calls[0] == ("REPLICAOF", "127.0.0.1", 7000)
    assert ("DBSIZE",) in replica.calls
    assert ev["before"]["total_forks"] == "1"
    assert ev["t_start"] <= ev["t_fork_seen"] <= ev["t_child_gone"]
    assert ev["t_done"] <= ev["t_child_gone"]
    # the primary was asked until its child was gone: its script ran out
    assert len(primary.script["persistence"]) == 1


def test_full_sync_that_never_completes_is_an_error(no_sleep, monkeypatch):
    clock = iter(range(0, 1000, 10))
    monkeypatch.setattr(sites.time, "time", lambda: next(clock))
    primary = FakeServer(stats=[{"total_forks": "1"}, {"total_forks": "2"}],
                         persistence=[{"rdb_bgsave_in_progress": "0"}])
    # the keyspace never matches (a replica that lost keys)
    replica = FakeServer(replication=[SYNCED], persistence=[LOADED], dbsize=999)
    with pytest.raises(RuntimeError, match="full sync not over in 60 s .synced: False"):
        sites.full_sync(primary, replica, 1000, limit_s=60)


def test_rewrite_waits_until_done_and_fails_loudly(no_sleep):
    srv = FakeServer(stats=[{"total_forks": "4"}],
                     persistence=[pers(rewrites="2"), pers(in_progress="1"), pers(in_progress="1"),
                                  pers()])
    ev = sites.rewrite(srv, limit_s=60)
    assert srv.calls == [("BGREWRITEAOF",)] and ev["t_done"] >= ev["t_start"]
    assert len(srv.script["persistence"]) == 1
    bad = FakeServer(stats=[{"total_forks": "4"}],
                     persistence=[pers(rewrites="2"), pers(in_progress="1"), pers(status="err")])
    with pytest.raises(RuntimeError, match="BGREWRITEAOF failed"):
        sites.rewrite(bad, limit_s=60)


# ---------------------------------------------------------------- the load's view

def test_live_rates_get_the_time_their_line_ended():
    chunks = [(10.0, "SET: rps=1000.0 (overall: 1000.0) avg_msec=0.5 (overall: 0.5)\r"),
              (10.25, "   \rSET: rps=2000.0 (overall: 15"),
              (10.5, "00.0) avg_msec=0.5 (overall: 0.5)\rSET: rps=0.0 (overall: 1000.0) "
                     "avg_msec=0.0 (overall: 0.5)\r"),
              (11.0, "\n====== SET ======\n  throughput summary: 99.0 requests per second\n")]
    assert load.live_rates(chunks) == [(10.0, 1000.0, 1000.0), (10.5, 2000.0, 1500.0),
                                       (10.5, 0.0, 1000.0)]


def test_the_last_stretch_completes_the_requests():
    # started at 0; at 2 s, 300 requests/s overall: 600 done; 1000 in all
    # by 4 s: the last 2 s ran at 200/s
    live = [(0.0, None, None), (1.0, 400.0, 400.0), (2.0, 200.0, 300.0)]
    got = load.close_live(live, 4.0, 1000)
    assert got[:3] == live and got[3] == (4.0, 200.0, None)
    assert load.window_rps(got, 3.0, 4.0) == 200.0
    # a run over before its first line: all of it at one rate
    assert load.close_live([(0.0, None, None)], 0.2, 100) == [(0.0, None, None),
                                                             (0.2, 500.0, None)]
    assert load.close_live(live, 2.0, 1000) == live


def test_window_rps_weighs_the_intervals_in_the_window():
    live = [(0.0, None), (1.0, 100.0), (2.0, 300.0), (3.0, 500.0)]
    assert load.window_rps(live, 1.0, 3.0) == 400.0
    assert load.window_rps(live, 0.5, 1.5) == 200.0      # half of 100, half of 300
    assert load.window_rps(live, 0.0, 3.0) == 300.0
    # a line late by a second (the server stalled the benchmark's loop too)
    # weighs twice
    assert load.window_rps([(0.0, None), (1.0, 100.0), (3.0, 400.0)], 0.0, 3.0) == 300.0
    assert load.window_rps(live, 5.0, 6.0) is None
    assert load.window_rps([(0.0, None)], 0.0, 1.0) is None


def test_ping_percentile_in_a_window():
    samples = [(float(t), float(t)) for t in range(1, 101)]   # rtt t ms sent at t s
    assert load.ping_percentile(samples, 99) == 99.0
    assert load.ping_percentile(samples, 50) == 50.0
    assert load.ping_percentile(samples, 99, 90.0, 100.0) == 100.0
    assert load.ping_percentile(samples, 99, 500.0) is None


def test_window_figures_split_the_run():
    # site from 100 s to 110 s, child from 100.5 s to 105 s, load to 120 s
    samples = [(99.0, 40.0), (100.6, 30.0), (104.0, 2.0), (107.0, 12.0), (115.0, 8.0),
               (118.0, 0.5)]
    live = [(95.0, None), (100.0, 1000.0), (110.0, 500.0), (120.0, 1000.0)]
    got = sites.window_figures(samples, live, 100.0, 100.5, 105.0, 110.0, 120.0)
    assert got["max_gap_ms"] == 30.0 and got["gaps_over_1ms"] == 3
    assert got["child_max_gap_ms"] == 30.0
    assert got["after_max_gap_ms"] == 8.0
    assert got["child_ping_p99_ms"] == 30.0
    assert got["after_child_ping_p99_ms"] == 12.0
    assert got["window_rps"] == 500.0
    assert got["ping_p99_ms"] == 30.0
    assert got["outlasted_load"] == 0
    assert sites.window_figures(samples, live, 100.0, 100.5, 105.0, 125.0,
                                120.0)["outlasted_load"] == 1


def test_site_figures_against_the_control():
    fig = {"nosave_max_ms": 10.0, "nosave_p99_ms": 2.0, "nosave_max_gap_ms": 5.0,
           "nosave_ping_p99_ms": 1.0, "nosave_rps": 200000.0,
           "sync_max_ms": 30.0, "sync_p99_ms": 3.0, "sync_max_gap_ms": 20.0,
           "sync_ping_p99_ms": 1.5, "sync_window_rps": 150000.0}
    sites.site_control_ratios(fig, "sync")
    assert (fig["sync_vs_control_max"], fig["sync_vs_control_p99"]) == (3.0, 1.5)
    assert (fig["sync_vs_control_max_gap"], fig["sync_vs_control_ping_p99"]) == (4.0, 1.5)
    assert fig["sync_vs_control_rps"] == 0.75
    assert "save_vs_control_max" not in fig


def test_the_timeline_aligns_on_every_sites_fork(tmp_path):
    # the parent's line when fork() returns: a save (BGSAVE, disk-based
    # sync), a diskless sync's transfer, an AOF rewrite
    for text in ("Background saving started by pid 7",
                 "Background RDB transfer started by pid 7 to replica socket",
                 "Background append only file rewriting started by pid 7"):
        log = tmp_path / "server.log"
        log.write_text("100:M 27 Nov 2026 04:03:59.248 * %s\n" % text)
        srv = types.SimpleNamespace(log=str(log))
        t = server.time.mktime(server.time.strptime("27 Nov 2026 04:03:59", "%d %b %Y %H:%M:%S"))
        got = server.fork_started_at(srv, t, 8.0)
        assert got is not None and abs(got - (t + 0.248 - 0.008)) < 1e-6, text


# ---------------------------------------------------------------- plan and memory

def test_sync_memory_counts_the_replica_and_the_buffered_writes():
    gib = variants.GIB
    assert variants.memory_needed(1, "stock", "sync-disk") == 4 * gib + variants.MEMORY_EXTRA
    assert variants.memory_needed(1, "stock", "aofrewrite") == 2 * gib + variants.MEMORY_EXTRA
    assert variants.largest_need(4, ["stock", "afork-thp-collapse"], "sync-diskless") == (
        int(4.1 * 4 * gib) + variants.MEMORY_EXTRA, "afork-thp-collapse")
    for scenario in sites.SITES:
        assert set(registry.SCENARIOS[scenario].variants.split()) <= set(variants.VARIANTS)
        assert scenario in variants.SITE_LOAD_FACTOR


def test_site_settings():
    assert sites.site_config("fork") == [] and sites.site_config("steady") == []
    aof = " ".join(sites.site_config("aofrewrite"))
    for want in ("--appendonly yes", "--appendfsync everysec", "--aof-use-rdb-preamble yes",
                 "--auto-aof-rewrite-percentage 0"):
        assert want in aof
    for scenario, diskless in (("sync-disk", "no"), ("sync-diskless", "yes")):
        conf = " ".join(sites.site_config(scenario))
        assert "--repl-diskless-sync %s " % diskless in conf
        assert "--repl-diskless-sync-delay 0" in conf
        assert "--client-output-buffer-limit replica 0 0 0" in conf


def test_site_runs_are_modelled():
    args = types.SimpleNamespace(load_seconds=15, calibrate_seconds=1.5, idle_saves=3,
                                 rounds=3, scenario="fork")
    run = runplan.Run(1, 1, 8, "stock", 1)
    fork = runplan.model_seconds(run, args)
    args.scenario = "sync-disk"
    sync = runplan.model_seconds(run, args)
    args.scenario = "aofrewrite"
    aof = runplan.model_seconds(run, args)
    assert sync > aof > 0 and sync > fork


def test_site_figures_have_labels_and_directions():
    labels = dict(LABELS)
    for p in ("rewrite", "sync"):
        for m in ("fork_ms", "child_s", "child_life_ms", "s", "cow_mb", "max_ms", "p99_ms",
                  "window_rps", "ping_p99_ms", "max_gap_ms", "vs_control_max",
                  "vs_control_max_gap", "vs_control_rps", "child_max_gap_ms",
                  "after_max_gap_ms", "child_ping_p99_ms", "after_child_ping_p99_ms",
                  "outlasted_load", "load_s"):
            assert p + "_" + m in labels, p + "_" + m
    for m in ("idle_rewrite_fork_ms", "nosave_ping_p99_ms", "sync_catchup_s",
              "sync_rdb_channel", "first_collapse_wait_s"):
        assert m in labels, m
    assert stats.direction("sync_window_rps") == "higher"
    assert stats.direction("rewrite_vs_control_rps") == "higher"
    assert stats.direction("sync_max_gap_ms") == "lower"
    for m in ("sync_rdb_channel", "rewrite_load_s", "sync_outlasted_load", "steady_load_s"):
        assert stats.direction(m) is None, m
