"""forkbench.phases -- the phases the scenarios share, and what they read of a server.

  populated       a server of the run's variant holding the run's keys (the
                  fork, steady and fork-site scenarios' run): its memory
                  after populating and at the end;
  saves           idle BGSAVEs, fork-thp's re-collapse after a save and its
                  counters, the steady load's length, a save's figures
                  against the no-save control;
  the server      its RSS and anonymous huge pages (/proc), the machine's
                  /proc/vmstat;
  the fill        an empty server filled by redis-benchmark with the PING
                  probe beside (the fill scenarios and the shapes'), and
                  what fork-thp chose for it.

The scenario modules (forkbench.registry lists them) build on these and
never import one another; make bench-stalls (forkbench.stalls) runs the
steady scenario's phases from here too.
"""
import contextlib
import math
import os
import shutil
import statistics
import time

from .load import Benchmark, parse_benchmark, start_probe, stop_probe
from .progress import fmt_size
from .server import POPULATE_LUA, bgsave_and_wait, cow_mb, fork_fields, populate, start_server
from .variants import COLLAPSE_RATE_MB_S, GIB, MIB

# The fill's redis-benchmark: what the issue of a new user ran.
FILL_CLIENTS = 20
FILL_PIPELINE = 16
FILL_REQUESTS = 1.5          # requests, as a multiple of the keyspace (-n / -r)

# /proc/vmstat counters the fill reports the change of.
VMSTAT_FIELDS = ("thp_fault_alloc", "thp_fault_fallback", "compact_stall", "compact_success",
                 "compact_fail", "thp_collapse_alloc")

# INFO fork fields of a keyspace table held in small pages while it is
# rehashed; reported when the server has them.
TABLES_FIELDS = ("fork_thp_tables_held", "fork_thp_tables_held_total",
                 "fork_thp_tables_not_held")

# INFO fork field of the slack arena (large values kept in small pages),
# reported in MB as fork_thp_slack_mb when the server has it.
SLACK_FIELD = "fork_thp_slack_active_bytes"


# ---------------------------------------------------------------- a populated server

def run_tag(run):
    """What names one run's files: <size>gb_<variant>_r<rep>."""
    return "%sgb_%s_r%d" % (fmt_size(run.size), run.variant, run.rep)


@contextlib.contextmanager
def populated(run, args, say, config=()):
    """(server, keys, figures) of a fresh server of the run's variant,
    started with `config` and holding the run's keys (the same count for
    every server of a size); its memory goes into the figures after
    populating and, when the block ends without an error, at the end, with
    whether fork-thp was on then (server_thp: what auto chose). The
    server is stopped and its folder removed either way."""
    srv, work = start_server(run.variant, args, config)
    try:
        say("populate")
        keys = populate(srv, run.size, args.value_size, args.keys_by_size.get(run.size))
        args.keys_by_size.setdefault(run.size, keys)
        mem = srv.info("memory")
        fig = {"keys": keys, "used_memory_mb": int(mem["used_memory"]) / MIB,
               "rss_after_populate_mb": int(mem["used_memory_rss"]) / MIB}
        yield srv, keys, fig
        finish_memory(srv, fig)
        server_thp(srv, args, run, fig)
    finally:
        srv.stop()
        shutil.rmtree(work, ignore_errors=True)


def finish_memory(srv, fig):
    mem = srv.info("memory")
    fig["peak_rss_mb"] = srv.peak_rss() / MIB
    fig["rss_mb"] = int(mem["used_memory_rss"]) / MIB
    if "mem_fragmentation_ratio" in mem:
        fig["fragmentation_ratio"] = float(mem["mem_fragmentation_ratio"])


# ---------------------------------------------------------------- saves

def idle_saves(srv, rounds):
    forks, ready, secs, cow = [], [], [], []
    for _ in range(rounds):
        t0, t1 = bgsave_and_wait(srv)
        f = fork_fields(srv)
        if "fork_ms" in f:
            forks.append(f["fork_ms"])
        if "child_ready_ms" in f:
            ready.append(f["child_ready_ms"])
        secs.append(t1 - t0)
        c = cow_mb(srv)
        if c is not None:
            cow.append(c)
    out = {"idle_save_s": statistics.median(secs)}
    if forks:
        out["idle_fork_ms_median"] = statistics.median(forks)
        out["idle_fork_ms_max"] = max(forks)
    if ready:
        out["idle_child_ready_ms_median"] = statistics.median(ready)
    if cow:
        out["idle_cow_mb"] = max(cow)
    return out


def steady_load_seconds(args, used_gb, idle_save_s):
    """The steady rounds' load also covers the re-collapse after the child
    (the pass is where fork-thp's after-child stalls are):
    after the BGSAVE, a third in, the save under load (about twice the idle
    one) and a pass over the whole heap at the collapse rate, with a
    margin (--pass-margin-seconds). Every variant gets the same formula,
    stock included, so their loads are about as long."""
    after_save = (2.0 * idle_save_s + used_gb * 1024.0 / COLLAPSE_RATE_MB_S
                  + args.pass_margin_seconds)
    return max(args.load_seconds, 3.0 * idle_save_s, 1.5 * after_save)


def control_ratios(fig, max_key, p99_key, out="save"):
    """Client latency during the save against this server's no-save control
    of the same repetition: what the save adds beyond the machine's noise
    (<out>_vs_control_max and _p99)."""
    if fig.get("nosave_max_ms") and max_key in fig:
        fig[out + "_vs_control_max"] = fig[max_key] / fig["nosave_max_ms"]
    if fig.get("nosave_p99_ms") and p99_key in fig:
        fig[out + "_vs_control_p99"] = fig[p99_key] / fig["nosave_p99_ms"]


# fork-thp auto checks its thresholds once a second, and switches on only
# when no child lives: give it this long after a save before deciding that
# no pass will come.
AUTO_CHECK_S = 2.5


def wait_collapse(srv, passes_before, limit_s=300):
    """Let the re-collapse pass after a save finish; with fork-thp auto
    still waiting, first let it switch on if it is going to (its first
    pass collapses the heap as it is)."""
    t0 = time.time()
    while time.time() - t0 < limit_s:
        f = srv.info("fork")
        if (f.get("fork_thp_heap", "").startswith("waiting")
                and time.time() - t0 < AUTO_CHECK_S):
            time.sleep(0.1)
            continue
        if f.get("fork_thp_collapse_status") not in ("ready", "running"):
            return 0.0
        if (int(f["fork_thp_collapse_passes"]) > passes_before
                and f["fork_thp_collapse_status"] == "ready"):
            return time.time() - t0
        time.sleep(0.1)
    return time.time() - t0


def collapse_counters(f):
    """The collapse thread's running totals from an INFO fork dict, {}
    without the thread."""
    if "fork_thp_collapse_passes" not in f:
        return {}
    return {k: int(f.get(k, 0)) for k in ("fork_thp_collapse_ranges", "fork_thp_collapse_usec",
                                           "fork_thp_collapse_warm_usec",
                                           "latest_fork_thp_collapse_max_usec")}


def collapse_figures(before, after):
    """One pass's collapse figures from the counters around it: its
    longest MADV_COLLAPSE, and per range the time in MADV_COLLAPSE and in
    the warm-up before each collapse."""
    if not before or not after:
        return {}
    ranges = after["fork_thp_collapse_ranges"] - before["fork_thp_collapse_ranges"]
    fig = {"collapse_max_ms": after["latest_fork_thp_collapse_max_usec"] / 1000.0,
           "collapse_ranges": ranges}
    if ranges > 0:
        fig["collapse_ms_per_range"] = (after["fork_thp_collapse_usec"]
                                        - before["fork_thp_collapse_usec"]) / 1000.0 / ranges
        fig["warm_ms_per_range"] = (after["fork_thp_collapse_warm_usec"]
                                    - before["fork_thp_collapse_warm_usec"]) / 1000.0 / ranges
    return fig


# ---------------------------------------------------------------- the server

def read_text(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def proc_field(pid, name, path="status"):
    """A kB field of /proc/PID/status (or smaps_rollup) in bytes, None when absent."""
    for line in read_text("/proc/%d/%s" % (pid, path)).splitlines():
        if line.startswith(name + ":"):
            return int(line.split()[1]) * 1024
    return None


def rss_mb(srv):
    return (proc_field(srv.proc.pid, "VmRSS") or 0) / MIB


def anon_huge_mb(srv):
    v = proc_field(srv.proc.pid, "AnonHugePages", "smaps_rollup")
    return None if v is None else v / MIB


def parse_vmstat(text):
    """/proc/vmstat as {name: int}."""
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].lstrip("-").isdigit():
            out[parts[0]] = int(parts[1])
    return out


def vmstat_deltas(before, after, fields=VMSTAT_FIELDS):
    """{field: after - before} for the fields both have."""
    return {f: after[f] - before[f] for f in fields if f in before and f in after}


def vmstat():
    return parse_vmstat(read_text("/proc/vmstat"))


# ---------------------------------------------------------------- the fill

def keys_for_size(size_gb, per_key, requests_factor=FILL_REQUESTS):
    """The keyspace N (redis-benchmark -r) so that -n requests_factor*N
    random SETs write about size_gb of keys: a random key is written at
    least once with probability 1 - exp(-requests_factor)."""
    distinct = 1.0 - math.exp(-requests_factor)
    return max(1, int(round(size_gb * GIB / (per_key * distinct))))


def fill_cmd(tools, port, keyspace, value_size, requests_factor=FILL_REQUESTS,
             clients=FILL_CLIENTS, pipeline=FILL_PIPELINE, requests=None):
    """redis-benchmark writing random keys of a keyspace."""
    n = requests if requests is not None else int(math.ceil(requests_factor * keyspace))
    return [os.path.join(tools, "redis-benchmark"), "-p", str(port), "-t", "set",
            "-r", str(keyspace), "-n", str(n), "-d", str(value_size), "-c", str(clients),
            "-P", str(pipeline)]


def percentile(sorted_values, q):
    """The q-th percentile (0-100) of sorted values, nearest rank (as
    load.ping_percentile)."""
    n = len(sorted_values)
    return sorted_values[min(n - 1, max(0, int(math.ceil(q / 100.0 * n)) - 1))]


def probe_figures(samples, t0, t1):
    """The PING probe over [t0, t1] (the round trips sent in it): worst,
    p99.9, p99, how many and how many per second, how many over 1 ms."""
    rtts = sorted(r for t, r in samples if t0 <= t <= t1)
    fig = {"ping_count": len(rtts), "ping_per_s": len(rtts) / (t1 - t0) if t1 > t0 else 0.0,
           "gaps_over_1ms": sum(1 for r in rtts if r > 1.0)}
    if rtts:
        fig.update(max_ping_ms=rtts[-1], ping_p999_ms=percentile(rtts, 99.9),
                   ping_p99_ms=percentile(rtts, 99))
    return fig


def prefixed(prefix, fig):
    return {prefix + k: v for k, v in fig.items()}


def thp_fields(fork_info):
    """fork_thp_on (1/0), the fork_thp_tables_* fields and the slack
    arena's MB of an INFO fork dict, {} for a server without INFO fork; and
    the heap's status text."""
    if "fork_thp" not in fork_info:
        return {}, None
    fig = {"fork_thp_on": int(fork_info["fork_thp"])}
    for f in TABLES_FIELDS:
        if f in fork_info:
            fig[f] = int(fork_info[f])
    if SLACK_FIELD in fork_info:
        fig["fork_thp_slack_mb"] = int(fork_info[SLACK_FIELD]) / MIB
    return fig, fork_info.get("fork_thp_heap")


class ProbedLoad:
    """redis-benchmark with the PING probe beside it on its own connection;
    the probe's samples go to probe_<tag>.csv.gz, the load's start to
    probe_<tag>.start (what the timelines align on)."""

    def __init__(self, srv, args, cmd, tag):
        self.tag, self.out = tag, args.out
        self.probe_csv = os.path.join(args.out, "probe_%s.csv.gz" % tag)
        self.probe = start_probe(srv.port, self.probe_csv)
        try:
            self.bench = Benchmark(cmd)
        except BaseException:
            self.probe.kill()
            raise

    def running(self):
        return self.bench.proc.poll() is None

    def cut(self):
        """End the load now (a load sized to run until told)."""
        if self.running():
            self.bench.proc.terminate()

    def finish(self):
        """(redis-benchmark's output, probe samples) once the load is over."""
        out = self.bench.wait()
        time.sleep(0.2)
        samples = stop_probe(self.probe, self.probe_csv)
        with open(os.path.join(self.out, "probe_%s.start" % self.tag), "w") as f:
            f.write("%.6f\n" % self.bench.t_start)
        return out, samples

    def close(self):
        """After a failure: nothing left running."""
        for p in (self.bench.proc, self.probe):
            if p.poll() is None:
                p.kill()
                p.wait()


def per_key_bytes(args, value_size):
    """used_memory per key of `value_size` bytes (and a name of
    redis-benchmark's), measured once on a scratch stock server so that
    every server of a run gets the same keyspace."""
    cache = args.__dict__.setdefault("per_key", {})
    if value_size in cache:
        return cache[value_size]
    sample = max(16, min(20000, (64 * MIB) // value_size))
    srv, work = start_server("stock", args)
    try:
        base = int(srv.info("memory")["used_memory"])
        sha = srv.conn.call("SCRIPT", "LOAD", POPULATE_LUA)
        srv.conn.call("EVALSHA", sha, 0, 0, sample - 1, value_size)
        cache[value_size] = (int(srv.info("memory")["used_memory"]) - base) / sample
    finally:
        srv.stop()
        shutil.rmtree(work, ignore_errors=True)
    return cache[value_size]


def fill_keyspace(args, size, value_size, name="fill"):
    """A fill's keyspace at a size, the same for every server (kept in
    args.keys_by_size under "<name> <size> GB, <value_size>-byte values")."""
    key = "%s %g GB, %d-byte values" % (name, size, value_size)
    if key not in args.keys_by_size:
        args.keys_by_size[key] = keys_for_size(size, per_key_bytes(args, value_size),
                                               args.fill_requests)
    return args.keys_by_size[key]


def fill(srv, args, keyspace, value_size, tag, pipeline=None):
    """An empty server filled by redis-benchmark, the probe beside it: the
    fill's figures (not prefixed), the machine's vmstat deltas with vm_."""
    cmd = fill_cmd(args.tools, srv.port, keyspace, value_size, args.fill_requests,
                   args.fill_clients, args.fill_pipeline if pipeline is None else pipeline)
    before = vmstat()
    pl = ProbedLoad(srv, args, cmd, tag)
    try:
        out, samples = pl.finish()
    finally:
        pl.close()
    after = vmstat()
    t0, t1 = pl.bench.t_start, pl.bench.t_end
    if pl.bench.proc.returncode != 0:
        raise RuntimeError("redis-benchmark failed (status %d): %s"
                           % (pl.bench.proc.returncode, out[-500:]))
    res = parse_benchmark(out)
    fig = probe_figures(samples, t0, t1)
    fig.update({"s": t1 - t0, "rps": res["rps"], "p99_ms": res["p99_ms"],
                "max_ms": res["max_ms"]})
    fig.update(prefixed("vm_", vmstat_deltas(before, after)))
    return fig


def no_forks(srv, what):
    forks = int(srv.info("stats").get("total_forks", 0))
    if forks:
        raise RuntimeError("%d forks during %s: the scenario must not fork" % (forks, what))


def server_thp(srv, args, run, fig, prefix=""):
    """fork_thp_on and the tables fields into fig; the heap's status to
    fork_thp_heap.csv (what auto chose and why)."""
    got, status = thp_fields(srv.info("fork"))
    fig.update(prefixed(prefix, got))
    if status is not None:
        path = os.path.join(args.out, "fork_thp_heap.csv")
        new = not os.path.exists(path)
        with open(path, "a") as f:
            if new:
                f.write("size_gb,variant,rep,server,fork_thp_heap\n")
            f.write("%g,%s,%d,%s,\"%s\"\n" % (run.size, run.variant, run.rep,
                                             prefix.rstrip("_") or "fill",
                                             status.replace('"', "'")))
