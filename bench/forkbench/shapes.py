"""forkbench.shapes -- the shapes where transparent huge pages have hurt Redis before.

The shapes scenario runs, per server and size, every shape of --shapes on
fresh servers of that variant, one after the other (each bounded by its
options):

  small     one server empty, then filled to --small-mb (10): its RSS
            both times (the fixed memory cost of an instance);
  many      --many-servers (8) servers of --many-mb (100) each on this
            host: their total RSS empty and filled;
  churn     a server filled to the size (the fork scenario's keys), 2 of
            every 3 keys deleted, then written again with values of
            --churn-value-size (512) bytes (Lua, --churn-batch keys a call):
            the survivors leave their pages part empty, as a workload whose
            values change size does; the PING probe beside it; then
            activedefrag yes until it stops, at most --defrag-seconds
            (300): how long it ran, RSS, fragmentation, the host's
            memory in use and the huge pages mapped only in part after the
            churn and after the defrag, the probe's worst, p99.9 and p99 during both;
  large     per value size of --large-values (128 KB and 1 MB): an empty
            server filled to the size by redis-benchmark (the fill's
            command, --large-pipeline 1), then a BGSAVE under the same
            write load: RSS, the probe during the fill and during the save,
            the save's fork, length and COW;
  maxmemory a server with maxmemory at the size and allkeys-lru, a write
            load over --maxmemory-keyspace (2) times the keys that fit:
            the probe before the limit and for --maxmemory-seconds (20)
            at it (from the first eviction), the throughput at the limit,
            evicted keys, RSS against maxmemory.

No shape but large forks (checked). Figures are prefixed by the shape
(`large128k_`, `large1m_` for the value sizes).
"""
import shutil
import time

from .machine import host_used, partly_mapped_huge, settled_host_used
from .load import live_rates, start_probe, stop_probe, window_rps
from .phases import (ProbedLoad, anon_huge_mb, fill, fill_cmd, fill_keyspace, no_forks,
                     per_key_bytes, prefixed, probe_figures, rss_mb, run_tag, server_thp)
from .server import bgsave_and_wait, cow_mb, fork_fields, populate, start_server
from .variants import GIB, MIB

SHAPES = ("small", "many", "churn", "large", "maxmemory")

# A load that runs until the shape cuts it (redis-benchmark's -n is an int).
UNTIL_CUT = 2000000000

CHURN_LUA = """
local v = string.rep('x', tonumber(ARGV[4]))
for i = tonumber(ARGV[1]), tonumber(ARGV[2]) do
    if i % 3 ~= 0 then
        local k = string.format('key:%012d', i)
        if ARGV[3] == 'del' then redis.call('DEL', k) else redis.call('SET', k, v) end
    end
end
return 1
"""

POLL_S = 0.25


def value_name(size):
    """128k, 1m, 300b: a value size in the figures' names."""
    if size % MIB == 0:
        return "%dm" % (size // MIB)
    if size % 1024 == 0:
        return "%dk" % (size // 1024)
    return "%db" % size


def parse_shapes(text):
    """--shapes: names of SHAPES, in the order given; ValueError otherwise."""
    names = text.split()
    bad = [n for n in names if n not in SHAPES]
    if bad or not names:
        raise ValueError("%s (known: %s)" % (", ".join(bad) or "none given", " ".join(SHAPES)))
    return names


def many_need(args):
    """Bytes the many shape needs at once: its servers filled, with what
    huge pages and the allocator add (1.3x), and 0.5 GiB."""
    return int(1.3 * args.many_servers * args.many_mb * MIB + 512 * MIB)


class Servers:
    """Fresh servers of one variant, all stopped (and their folders gone) on exit."""

    def __init__(self, variant, args, config=()):
        self.variant, self.args, self.config, self.all = variant, args, list(config), []

    def start(self):
        srv, work = start_server(self.variant, self.args, self.config)
        self.all.append((srv, work))
        return srv

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for srv, work in self.all:
            srv.stop()
            shutil.rmtree(work, ignore_errors=True)


def keys_of_mb(args, mb):
    return max(1, int(mb * MIB / per_key_bytes(args, args.value_size)))


# ---------------------------------------------------------------- the shapes

def shape_small(run, args, say, tag, fig):
    with Servers(run.variant, args) as s:
        srv = s.start()
        time.sleep(0.3)
        fig["small_empty_rss_mb"] = rss_mb(srv)
        say("small: an empty server, then %g MB" % args.small_mb)
        populate(srv, 0, args.value_size, keys_of_mb(args, args.small_mb))
        fig["small_rss_mb"] = rss_mb(srv)
        fig["small_used_memory_mb"] = int(srv.info("memory")["used_memory"]) / MIB
        server_thp(srv, args, run, fig, "small_")
        no_forks(srv, "the small shape")


def shape_many(run, args, say, tag, fig):
    say("many: %d servers of %g MB" % (args.many_servers, args.many_mb))
    with Servers(run.variant, args) as s:
        servers = [s.start() for _ in range(args.many_servers)]
        time.sleep(0.3)
        fig["many_empty_rss_mb"] = sum(rss_mb(srv) for srv in servers)
        keys = keys_of_mb(args, args.many_mb)
        for srv in servers:
            populate(srv, 0, args.value_size, keys)
        fig["many_rss_mb"] = sum(rss_mb(srv) for srv in servers)
        fig["many_rss_per_server_mb"] = fig["many_rss_mb"] / len(servers)
        server_thp(servers[0], args, run, fig, "many_")
        for srv in servers:
            no_forks(srv, "the many shape")


def churn(srv, keys, batch, value_size):
    """Delete 2 of every 3 keys, then write them again with values of
    value_size bytes, `batch` keys a call."""
    sha = srv.conn.call("SCRIPT", "LOAD", CHURN_LUA)
    for op in ("del", "set"):
        for first in range(0, keys, batch):
            srv.conn.call("EVALSHA", sha, 0, first, min(first + batch, keys) - 1, op,
                          value_size)


def memory_state(srv, host_base):
    """RSS, used_memory, fragmentation, the host's memory in use since
    host_base (machine.host_used() before the server started) and the
    machine's huge pages mapped only in part (the shape's server is the
    only one running)."""
    mem = srv.info("memory")
    out = {"rss_mb": rss_mb(srv), "used_memory_mb": int(mem["used_memory"]) / MIB,
           "host_used_mb": (host_used() - host_base) / MIB}
    partly = partly_mapped_huge()
    if partly is not None:
        out["partly_mapped_mb"] = partly / MIB
    if "mem_fragmentation_ratio" in mem:
        out["frag_ratio"] = float(mem["mem_fragmentation_ratio"])
    return out


def defrag_until_done(srv, deadline, start_s=5.0):
    """Wait until activedefrag has run and stopped (INFO's
    active_defrag_running back to 0), it has not started within start_s,
    or the deadline; the time it ended."""
    started, t_start = False, time.time()
    while time.time() < deadline:
        running = int(srv.info("memory").get("active_defrag_running", 0)) > 0
        started = started or running
        if (started and not running) or (not started and time.time() - t_start > start_s):
            break
        time.sleep(POLL_S)
    return time.time()


def shape_churn(run, args, say, tag, fig):
    host_base = settled_host_used()
    with Servers(run.variant, args) as s:
        srv = s.start()
        say("churn: populate")
        keys = populate(srv, run.size, args.value_size, args.keys_by_size.get(run.size))
        args.keys_by_size.setdefault(run.size, keys)
        fig["keys"] = keys
        fig.update(prefixed("churn_before_", memory_state(srv, host_base)))
        path = "%s/probe_%s_churn.csv.gz" % (args.out, tag)
        probe = start_probe(srv.port, path)
        try:
            say("churn: delete 2 of every 3 keys, write them again as %d bytes"
                % args.churn_value_size)
            t0 = time.time()
            churn(srv, keys, args.churn_batch, args.churn_value_size)
            t1 = time.time()
            fig.update(prefixed("churn_", memory_state(srv, host_base)))
            hits = int(srv.info("stats").get("active_defrag_hits", 0))
            try:
                srv.conn.call("CONFIG", "SET", "activedefrag", "yes")
            except Exception as e:  # noqa: BLE001 -- the server's reply, said as is
                raise RuntimeError("CONFIG SET activedefrag yes: %s" % e)
            say("churn: activedefrag yes, until it stops (at most %gs)" % args.defrag_seconds)
            t2 = defrag_until_done(srv, t1 + args.defrag_seconds)
        finally:
            samples = stop_probe(probe, path)
        fig["churn_s"] = t1 - t0
        fig.update(prefixed("churn_", probe_figures(samples, t0, t1)))
        fig.update(prefixed("churn_defrag_", probe_figures(samples, t1, t2)))
        fig.update(prefixed("churn_defrag_", memory_state(srv, host_base)))
        fig["churn_defrag_s"] = t2 - t1
        fig["churn_defrag_hits"] = int(srv.info("stats").get("active_defrag_hits", 0)) - hits
        fig["churn_defrag_running"] = int(srv.info("memory").get("active_defrag_running", 0))
        server_thp(srv, args, run, fig, "churn_")
        no_forks(srv, "the churn shape")


def save_under_load(srv, args, keyspace, value_size, tag):
    """A BGSAVE under the fill's write load (cut once the save is over):
    the probe's figures over the save, its fork, length and COW."""
    cmd = fill_cmd(args.tools, srv.port, keyspace, value_size, clients=args.fill_clients,
                   pipeline=args.large_pipeline, requests=UNTIL_CUT)
    pl = ProbedLoad(srv, args, cmd, tag)
    try:
        time.sleep(args.save_lead_seconds)
        if not pl.running():
            raise RuntimeError("the write load ended before the BGSAVE")
        t_save, t_done = bgsave_and_wait(srv, poll=0.05)
        time.sleep(0.3)
        pl.cut()
        _, samples = pl.finish()
    finally:
        pl.close()
    fig = probe_figures(samples, t_save, t_done)
    fig["s"] = t_done - t_save
    fig.update(fork_fields(srv))
    fig.pop("child_ready_ms", None)
    c = cow_mb(srv)
    if c is not None:
        fig["cow_mb"] = c
    return fig


def shape_large(run, args, say, tag, fig):
    for value_size in args.large_values:
        name = "large" + value_name(value_size)
        keyspace = fill_keyspace(args, run.size, value_size, "large")
        host_base = settled_host_used()
        with Servers(run.variant, args) as s:
            srv = s.start()
            say("%s: fill, -r %d -d %d" % (name, keyspace, value_size))
            got = fill(srv, args, keyspace, value_size, "%s_%s_fill" % (tag, name),
                       pipeline=args.large_pipeline)
            no_forks(srv, "the %s fill" % name)
            fig.update(prefixed(name + "_fill_", got))
            fig.update(prefixed(name + "_", memory_state(srv, host_base)))
            huge = anon_huge_mb(srv)
            if huge is not None:
                fig[name + "_anon_huge_mb"] = huge
            server_thp(srv, args, run, fig, name + "_")
            say("%s: BGSAVE under the write load" % name)
            fig.update(prefixed(name + "_save_", save_under_load(
                srv, args, keyspace, value_size, "%s_%s_save" % (tag, name))))
            fig[name + "_peak_rss_mb"] = srv.peak_rss() / MIB


def limit_figures(samples, live, t0, t_limit, t_end):
    """The probe before the limit and at it, the throughput at it."""
    fig = prefixed("fill_", probe_figures(samples, t0, t_limit))
    fig.update(probe_figures(samples, t_limit, t_end))
    rps = window_rps(live, t_limit, t_end)
    if rps is not None:
        fig["rps"] = rps
    fig["at_limit_s"] = t_end - t_limit
    return fig


def shape_maxmemory(run, args, say, tag, fig):
    limit = int(run.size * GIB)
    keyspace = max(1, int(args.maxmemory_keyspace * limit
                          / per_key_bytes(args, args.value_size)))
    config = ["--maxmemory", str(limit), "--maxmemory-policy", "allkeys-lru"]
    host_base = settled_host_used()
    with Servers(run.variant, args, config) as s:
        srv = s.start()
        say("maxmemory: writes over %d keys to the limit, then %gs at it"
            % (keyspace, args.maxmemory_seconds))
        cmd = fill_cmd(args.tools, srv.port, keyspace, args.value_size,
                       clients=args.fill_clients, pipeline=args.fill_pipeline,
                       requests=UNTIL_CUT)
        pl = ProbedLoad(srv, args, cmd, tag + "_maxmemory")
        t_limit = None
        deadline = 600 + 120 * run.size
        try:
            while pl.running():
                now = time.time()
                if t_limit is None and int(srv.info("stats")["evicted_keys"]) > 0:
                    t_limit = now
                if t_limit is not None and now - t_limit >= args.maxmemory_seconds:
                    break
                if now - pl.bench.t_start > deadline:
                    break
                time.sleep(POLL_S)
            pl.cut()
            _, samples = pl.finish()
        finally:
            pl.close()
        if t_limit is None:
            raise RuntimeError("maxmemory: no key evicted in %d s" % deadline)
        live = [(pl.bench.t_start, None, None)] + live_rates(pl.bench.chunks)
        got = limit_figures(samples, live, pl.bench.t_start, t_limit, pl.bench.t_end)
        fig.update(prefixed("maxmem_", got))
        fig["maxmem_evicted_keys"] = int(srv.info("stats")["evicted_keys"])
        fig.update(prefixed("maxmem_", memory_state(srv, host_base)))
        fig["maxmem_peak_rss_mb"] = srv.peak_rss() / MIB
        fig["maxmem_rss_vs_maxmemory"] = srv.peak_rss() / limit
        server_thp(srv, args, run, fig, "maxmem_")
        no_forks(srv, "the maxmemory shape")


SHAPE_RUNS = {"small": shape_small, "many": shape_many, "churn": shape_churn,
              "large": shape_large, "maxmemory": shape_maxmemory}


def run_shapes(run, args, say):
    """Every shape of --shapes on fresh servers of one variant, one size,
    one repetition: their figures."""
    fig, tag = {}, run_tag(run)
    for name in args.shapes:
        SHAPE_RUNS[name](run, args, say, tag, fig)
    return fig
