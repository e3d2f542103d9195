"""forkbench.sites -- the fork sites other than BGSAVE, under the same write load.

  aofrewrite     BGREWRITEAOF on a server started with appendonly yes,
                 appendfsync everysec, aof-use-rdb-preamble yes (and
                 auto-aof-rewrite-percentage 0, so that no rewrite starts
                 but the bench's);
  sync-disk      a replica's full sync, repl-diskless-sync no on the
                 primary: the child writes the RDB to disk, then the
                 primary sends the file;
  sync-diskless  the same with repl-diskless-sync yes: the child streams
                 the RDB to the replica (Redis 8 by default over a
                 dedicated rdb channel, the child writing to the socket
                 itself; with repl-rdb-channel no, or a peer without it,
                 through a pipe that the parent drains to the socket).

Both syncs run with repl-diskless-sync-delay 0 and, on both servers,
client-output-buffer-limit replica 0 0 0 (the writes made during the sync
are buffered whatever their size: the default 256 MB limit would cut this
load's sync and restart it forever) and repl-timeout 300.

One run (one server, one size, one repetition), as the fork scenario's:

  populate  the same keys as every other scenario;
  idle      one fork of the site with no load: aofrewrite a BGREWRITEAOF,
            the syncs a BGSAVE; it sizes the load, and fork-thp's
            re-collapse after it is waited for (so the fork under load
            meets the steady state, not a heap just populated);
  control   the SET load and the PING probe, no fork (checked:
            total_forks does not move, so no automatic rewrite or save);
  site      the same load; a third in, the site starts: BGREWRITEAOF,
            or REPLICAOF to a second server of the same build and
            configuration, started fresh and empty in a folder of its own
            before the control; then until the site is over: the rewrite
            done (aof_rewrite_in_progress 0, aof_rewrites risen by one),
            or the replica synced (sync_done: master_link_status up, not
            loading, its DBSIZE the primary's) and the primary's child
            gone. Checked: exactly one fork (total_forks), and for a
            sync sync_full risen by one, sync_partial_ok not, the
            primary's log naming the target the scenario claims (disk or
            replicas sockets); after the load the replica must catch up
            (its offset reaching the primary's, DBSIZE equal, a sample of
            the primary's keys present).

Figures (prefix `rewrite_` or `sync_`): the memory as the site starts
(in whole huge pages, ranges fork-thp split), fork time, the child's life
(polled, every server; redis-afork's exact INFO fork figure beside), the
site's length (rewrite: BGREWRITEAOF to done; sync: REPLICAOF to synced),
COW, the load's figures over the run, and over the site's window the
PING probe's gaps and p99 and the SET throughput (from redis-benchmark's
live lines), each also against the control of the same repetition.
"""
import re
import shutil
import time

from .load import (LoadRun, gap_summary, load_requests, ping_percentile, window_rps,
                   write_save_marks)
from .phases import (anon_huge_mb, control_ratios, idle_saves, populated, run_tag,
                     wait_collapse)
from .progress import fmt_secs
from .resp import RedisError
from .server import fork_fields, fork_started_at, start_server
from .variants import MIB, SITE_LOAD_FACTOR

POLL_S = 0.05

REPLICATION = ["--repl-diskless-sync-delay", "0",
               "--client-output-buffer-limit", "replica", "0", "0", "0",
               "--repl-timeout", "300"]

# scenario -> prefix of its figures and the primary's settings (the
# load's length: variants.SITE_LOAD_FACTOR).
SITES = {
    "aofrewrite": {"prefix": "rewrite",
                   "config": ["--appendonly", "yes", "--appendfsync", "everysec",
                              "--aof-use-rdb-preamble", "yes",
                              "--auto-aof-rewrite-percentage", "0"]},
    "sync-disk": {"prefix": "sync", "target": "disk",
                  "config": ["--repl-diskless-sync", "no"] + REPLICATION},
    "sync-diskless": {"prefix": "sync", "target": "replicas sockets",
                      "config": ["--repl-diskless-sync", "yes"] + REPLICATION},
}

# The replica's own settings (besides its variant's): it buffers the
# primary's stream while it loads (replica-full-sync-buffer-limit inherits
# this limit).
REPLICA_CONFIG = ["--client-output-buffer-limit", "replica", "0", "0", "0",
                  "--repl-timeout", "300"]

# The primary logs where a sync's RDB goes when it forks for it.
SYNC_TARGET = re.compile(r"Starting BGSAVE for SYNC with target: (disk|replicas sockets)"
                         r"( \(rdb-channel\))?")


def site_config(scenario):
    """The primary's settings for a scenario ([] for BGSAVE's)."""
    return list(SITES[scenario]["config"]) if scenario in SITES else []


# ---------------------------------------------------------------- pure logic

def rewrite_state(pers, rewrites_before):
    """"running", "done" or "failed" of the BGREWRITEAOF sent when INFO
    persistence said aof_rewrites = rewrites_before. aof_rewrites counts
    the rewrite when it forks; the rewrite is over once no child is in
    progress or scheduled, and done when it also succeeded."""
    if pers.get("aof_rewrite_in_progress") == "1" or pers.get("aof_rewrite_scheduled") == "1":
        return "running"
    if int(pers.get("aof_rewrites", 0)) <= rewrites_before:
        # not forked yet: BGREWRITEAOF's reply comes after the fork, so a
        # rewrite that never counted did not start
        return "failed"
    return "done" if pers.get("aof_last_bgrewrite_status") == "ok" else "failed"


def replica_ready(repl, pers):
    """The replica's link is up and its dataset loaded (DBSIZE answers)."""
    return (repl.get("role") == "slave" and repl.get("master_link_status") == "up"
            and repl.get("master_sync_in_progress") == "0"
            and pers.get("loading", "0") == "0" and pers.get("async_loading", "0") == "0")


def sync_done(repl, pers, dbsize, want_keys):
    """A full sync is over: the link up, nothing loading, and the
    replica's keyspace the primary's (the load overwrites existing keys,
    so the count stays `want_keys`)."""
    return replica_ready(repl, pers) and dbsize is not None and int(dbsize) == want_keys


def sync_target(log_text):
    """(target, rdb channel) of the last sync the primary's log names:
    ("disk", False), ("replicas sockets", True|False); None when the log
    names none (a server that does not say)."""
    last = None
    for m in SYNC_TARGET.finditer(log_text):
        last = m
    if last is None:
        return None
    return last.group(1), bool(last.group(2))


def counter(info, field):
    return int(info.get(field, 0))


def delta_problems(before, after, scenario):
    """What says the experiment did not exercise its site: exactly one
    fork, and a sync that was full (sync_full up by one, no partial
    resync) or a rewrite counted (aof_rewrites up by one)."""
    out = []
    forks = counter(after, "total_forks") - counter(before, "total_forks")
    if forks != 1:
        out.append("%d forks during the %s, expected 1" % (forks, scenario))
    if scenario.startswith("sync"):
        full = counter(after, "sync_full") - counter(before, "sync_full")
        if full != 1:
            out.append("sync_full rose by %d, expected 1 (a full sync)" % full)
        partial = counter(after, "sync_partial_ok") - counter(before, "sync_partial_ok")
        if partial:
            out.append("sync_partial_ok rose by %d: a partial resync" % partial)
    else:
        rewrites = counter(after, "aof_rewrites") - counter(before, "aof_rewrites")
        if rewrites != 1:
            out.append("aof_rewrites rose by %d, expected 1" % rewrites)
    return out


def window_figures(samples, live, t_start, t_fork, t_child_gone, t_done, t_end):
    """The probe's and the load's figures over the site's window [t_start,
    t_done], during the child's life and after the window to the load's
    end."""
    fig = gap_summary(samples, t_start, t_done)
    p99 = ping_percentile(samples, 99, t_start, t_done)
    if p99 is not None:
        fig["ping_p99_ms"] = p99
    rps = window_rps(live, t_start, t_done)
    if rps is not None:
        fig["window_rps"] = rps
    fig["child_max_gap_ms"] = gap_summary(samples, t_fork, t_child_gone)["max_gap_ms"]
    # The window split at the child's end: what the child costs, and what
    # the parent's own work after it costs (a disk-based sync's transfer,
    # the re-collapse, the replica loading beside it).
    for key, since, until in (("child_ping_p99_ms", t_fork, t_child_gone),
                              ("after_child_ping_p99_ms", t_child_gone, t_done)):
        p99 = ping_percentile(samples, 99, since, until) if until > since else None
        if p99 is not None:
            fig[key] = p99
    fig["after_max_gap_ms"] = gap_summary(samples, t_done, t_end)["max_gap_ms"]
    fig["outlasted_load"] = int(t_done > t_end)
    return fig


def site_control_ratios(fig, p):
    """The site's figures against the control of the same repetition."""
    control_ratios(fig, p + "_max_ms", p + "_p99_ms", out=p)
    for mine, ctl, name in (("max_gap_ms", "max_gap_ms", "max_gap"),
                            ("ping_p99_ms", "ping_p99_ms", "ping_p99"),
                            ("window_rps", "rps", "rps")):
        if fig.get("nosave_" + ctl) and (p + "_" + mine) in fig:
            fig["%s_vs_control_%s" % (p, name)] = fig[p + "_" + mine] / fig["nosave_" + ctl]


# ---------------------------------------------------------------- the sites

def both_infos(srv):
    """INFO stats and persistence in one dict."""
    out = srv.info("stats")
    out.update(srv.info("persistence"))
    return out


def child_life_ms(srv):
    """redis-afork's exact life of the latest child (INFO fork), None elsewhere."""
    v = srv.info("fork").get("latest_fork_child_life_usec")
    return int(v) / 1000.0 if v is not None and int(v) >= 0 else None


def rewrite(srv, limit_s):
    """BGREWRITEAOF and wait until it is done; the times it started, the
    child was last seen and the rewrite was done, and the counters before."""
    before = both_infos(srv)
    t_start = time.time()
    srv.conn.call("BGREWRITEAOF")
    while True:
        pers = srv.info("persistence")
        state = rewrite_state(pers, counter(before, "aof_rewrites"))
        now = time.time()
        if state == "failed":
            raise RuntimeError("BGREWRITEAOF failed; see %s" % srv.log)
        if state == "done":
            return {"t_start": t_start, "t_fork_seen": t_start, "t_child_gone": now,
                    "t_done": now, "before": before}
        if now - t_start > limit_s:
            raise RuntimeError("BGREWRITEAOF not done in %d s" % limit_s)
        time.sleep(POLL_S)


def full_sync(primary, replica, keys, limit_s):
    """REPLICAOF the primary, then watch both until the replica is synced
    and the primary's child is gone."""
    before = both_infos(primary)
    t_start = time.time()
    replica.conn.call("REPLICAOF", "127.0.0.1", primary.port)
    seen = gone = synced = None
    while True:
        now = time.time()
        info = both_infos(primary)
        if seen is None and counter(info, "total_forks") > counter(before, "total_forks"):
            seen = now
        if seen is not None and gone is None and info.get("rdb_bgsave_in_progress") == "0":
            gone = now
        if synced is None:
            repl, pers = replica.info("replication"), replica.info("persistence")
            dbsize = replica.conn.call("DBSIZE") if replica_ready(repl, pers) else None
            if sync_done(repl, pers, dbsize, keys):
                synced = now
        if synced is not None and gone is not None:
            return {"t_start": t_start, "t_fork_seen": seen, "t_child_gone": gone,
                    "t_done": synced, "before": before}
        if now - t_start > limit_s:
            raise RuntimeError("the replica's full sync not over in %d s (synced: %s, "
                               "child gone: %s)%s" % (limit_s, synced is not None,
                                                      gone is not None, replica.log_tail()))
        time.sleep(POLL_S)


def catch_up(primary, replica, keys, limit_s=120, sample=100):
    """After the load: the replica's offset reaches the primary's, both
    hold `keys` keys, and a sample of the primary's keys exists on the
    replica; the seconds it took to catch up."""
    t0 = time.time()
    while True:
        want = counter(primary.info("replication"), "master_repl_offset")
        got = counter(replica.info("replication"), "slave_repl_offset")
        if got >= want:
            break
        if time.time() - t0 > limit_s:
            raise RuntimeError("the replica did not catch up in %d s (offset %d of %d)"
                               % (limit_s, got, want))
        time.sleep(POLL_S)
    took = time.time() - t0
    sizes = (primary.conn.call("DBSIZE"), replica.conn.call("DBSIZE"))
    if sizes != (keys, keys):
        raise RuntimeError("after the sync DBSIZE is %s on the primary and %s on the "
                           "replica, expected %d" % (sizes[0], sizes[1], keys))
    names = [primary.conn.call("RANDOMKEY") for _ in range(sample)]
    present = replica.conn.call("EXISTS", *names)
    if present != len(names):
        raise RuntimeError("%d of %d of the primary's keys are missing on the replica"
                           % (len(names) - present, len(names)))
    return took


def read_log(srv):
    try:
        with open(srv.log, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def check_target(srv, scenario):
    """The primary's log names the sync's target the scenario claims (when
    it names one); 1 when the RDB went over the rdb channel, else 0."""
    got = sync_target(read_log(srv))
    if got is None:
        return None
    want = SITES[scenario]["target"]
    if got[0] != want:
        raise RuntimeError("the primary synced with target %r, the scenario is %r"
                           % (got[0], want))
    return int(got[1])


def heap_at_start(srv, p, fig):
    """The server's memory as the site starts: how much of it huge pages
    map whole (a fork copies one entry per 2 MiB of it, one per 4 KiB of
    the rest), and with fork-thp how many ranges its collapse thread has
    split since the server started."""
    huge = anon_huge_mb(srv)
    if huge is not None:
        fig[p + "_anon_huge_mb"] = huge
    split = srv.info("fork").get("fork_thp_collapse_split_ranges")
    if split is not None:
        fig[p + "_split_ranges"] = int(split)


def site_run(srv, args, keys, requests, seconds, tag, scenario, fig, replica=None):
    """The load with the site started a third in; its figures into fig."""
    p = SITES[scenario]["prefix"]
    limit = 600 + 120 * fig["used_memory_mb"] / 1024.0
    run = LoadRun(srv, args, keys, requests, tag)
    time.sleep(seconds / 3.0)
    heap_at_start(srv, p, fig)
    if replica is None:
        ev = rewrite(srv, limit)
    else:
        ev = full_sync(srv, replica, keys, limit)
    res, samples, t_end = run.finish()
    after = both_infos(srv)
    problems = delta_problems(ev["before"], after, scenario)
    if problems:
        raise RuntimeError("%s: %s" % (scenario, "; ".join(problems)))
    if replica is not None:
        fig["sync_catchup_s"] = catch_up(srv, replica, keys)
        channel = check_target(srv, scenario)
        if channel is not None:
            fig["sync_rdb_channel"] = channel
    forks = fork_fields(srv)
    t_fork = (fork_started_at(srv, ev["t_start"], forks.get("fork_ms"))
              or ev["t_fork_seen"] or ev["t_start"])
    fig[p + "_s"] = ev["t_done"] - ev["t_start"]
    fig[p + "_child_s"] = max(0.0, ev["t_child_gone"] - t_fork)
    if "fork_ms" in forks:
        fig[p + "_fork_ms"] = forks["fork_ms"]
    life = child_life_ms(srv)
    if life is not None:
        fig[p + "_child_life_ms"] = life
    cow = after.get("aof_last_cow_size" if p == "rewrite" else "rdb_last_cow_size")
    if cow is not None:
        fig[p + "_cow_mb"] = int(cow) / MIB
    for k, v in res.items():
        fig[p + "_" + k] = v
    win = window_figures(samples, run.live, ev["t_start"], t_fork,
                         ev["t_child_gone"], ev["t_done"], t_end)
    for k, v in win.items():
        fig[p + "_" + k] = v
    site_control_ratios(fig, p)
    write_save_marks(args.out, tag, samples, ev["t_start"],
                     fork_started_at(srv, ev["t_start"], forks.get("fork_ms")))


def control_run(srv, args, keys, requests, seconds, tag, fig):
    """The no-fork control; no fork may happen in it."""
    before = counter(srv.info("stats"), "total_forks")
    run = LoadRun(srv, args, keys, requests, tag)
    res, samples, _ = run.finish()
    forks = counter(srv.info("stats"), "total_forks") - before
    if forks:
        raise RuntimeError("%d forks during the no-save control" % forks)
    res.update(gap_summary(samples))
    p99 = ping_percentile(samples, 99)
    if p99 is not None:
        res["ping_p99_ms"] = p99
    for k in ("rps", "p50_ms", "p99_ms", "p999_ms", "max_ms", "gaps_over_1ms",
              "max_gap_ms", "ping_p99_ms"):
        if k in res:
            fig["nosave_" + k] = res[k]


def idle_fork(srv, scenario, fig, limit_s):
    """The site's fork once with no load; its length (s), which sizes the load."""
    if scenario == "aofrewrite":
        ev = rewrite(srv, limit_s)
        took = ev["t_done"] - ev["t_start"]
        fig["idle_rewrite_s"] = took
        forks = fork_fields(srv)
        if "fork_ms" in forks:
            fig["idle_rewrite_fork_ms"] = forks["fork_ms"]
        cow = srv.info("persistence").get("aof_last_cow_size")
        if cow is not None:
            fig["idle_rewrite_cow_mb"] = int(cow) / MIB
        return took
    idle = idle_saves(srv, 1)
    fig.update(idle)
    return idle["idle_save_s"]


def site_scenario(srv, args, keys, tag, fig, say, run):
    """One run of an aofrewrite or sync scenario (see the module's comment)."""
    scenario = args.scenario
    site = SITES[scenario]
    if scenario == "aofrewrite" and srv.info("persistence").get("aof_enabled") != "1":
        raise RuntimeError("appendonly is not on (aof_enabled is not 1)")
    limit = 600 + 120 * fig["used_memory_mb"] / 1024.0
    passes = int(srv.info("fork").get("fork_thp_collapse_passes", 0))
    say("idle: one %s" % ("BGREWRITEAOF" if scenario == "aofrewrite" else "BGSAVE"))
    idle_s = idle_fork(srv, scenario, fig, limit)
    # fork-thp: the fork under load meets the heap re-collapsed, as in steady.
    waited = wait_collapse(srv, passes)
    if "fork_thp_collapse_passes" in srv.info("fork"):
        fig["first_collapse_wait_s"] = waited
    seconds = max(args.load_seconds, SITE_LOAD_FACTOR[scenario] * idle_s)
    replica = work = None
    try:
        if scenario.startswith("sync"):
            variant = args.replica_variant or run.variant
            say("replica: a fresh %s server" % variant)
            replica, work = start_server(variant, args, REPLICA_CONFIG)
        requests, seconds = load_requests(srv, args, keys, idle_s, seconds)
        fig[site["prefix"] + "_load_s"] = seconds
        say("load without a fork (%d requests, ~%ss)" % (requests, fmt_secs(seconds)))
        control_run(srv, args, keys, requests, seconds, tag + "_nosave", fig)
        say("load with %s" % ("BGREWRITEAOF" if replica is None else
                              "the replica's full sync (%s)" % site["target"]))
        site_run(srv, args, keys, requests, seconds, "%s_%s" % (tag, site["prefix"]),
                 scenario, fig, replica)
    finally:
        if replica is not None:
            try:
                replica.stop()
            except (OSError, RedisError):
                replica.kill()
            shutil.rmtree(work, ignore_errors=True)


def run_site(run, args, say):
    """One server, one size, one repetition of the aofrewrite, sync-disk or
    sync-diskless scenario (args.scenario says which): its figures."""
    with populated(run, args, say, site_config(args.scenario)) as (srv, keys, fig):
        site_scenario(srv, args, keys, run_tag(run), fig, say, run)
    return fig
