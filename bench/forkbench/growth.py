"""forkbench.growth -- what fork-thp costs while a dataset grows, and the evidence for `auto`.

No fork anywhere in these scenarios (checked: total_forks stays 0, except
the large-values shape's own BGSAVE): they measure what huge pages cost
a server while its memory grows, which the fork scenarios never see.

  fill             an empty server filled to the size by redis-benchmark the
                   way a new user would: `-t set -r N -n 1.5N -d 256 -c 20
                   -P 16` (N: keys_for_size, so that the keys written reach
                   the size), the PING probe beside it;
  fill-fragmented  the same, with most of the machine's other free memory
                   fragmented first (forkbench.fragment, sized by
                   fragment_plan so that the servers keep what they need);
  shapes           where THP has hurt Redis before (forkbench.shapes):
                   small instance, many instances, delete churn with
                   activedefrag, large values, maxmemory with eviction.

Fill figures: the probe's worst round trip, p99.9, p99 and round trips
completed (and per second) during the fill; redis-benchmark's throughput
and latency; the fill's length; RSS empty and at the end, the server's
anonymous huge pages; the machine's /proc/vmstat deltas over the fill
(thp_fault_alloc, thp_fault_fallback, compact_stall, ...: machine-wide
counters, so another process's faults count too); redis-afork's INFO
fork: whether fork-thp is on (fork_thp_on; the reason, fork_thp_heap, in
fork_thp_heap.csv) and the fork_thp_tables_* fields when the server has
them. fill-fragmented adds the fragmenter's figures and the free memory
in 2 MiB blocks (/proc/buddyinfo) before, after fragmenting and at the
fill's end.
"""
import json
import math
import os
import shutil
import subprocess
import sys
import time

from .load import Benchmark, PACKAGE_PARENT, parse_benchmark, start_probe, stop_probe
from .server import POPULATE_LUA, start_server
from .variants import GIB, MIB, MEMORY_EXTRA, memory_needed

SCENARIOS = ("fill", "fill-fragmented", "shapes")

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

# A 2 MiB block is order 9 of 4 KiB pages.
HUGE_ORDER = 9

# fill-fragmented: the fragmented share of the free memory left to the
# servers must be at least this ("most"), unless --fragment-max-gb caps it.
FRAGMENT_MIN_SHARE = 0.5


# ---------------------------------------------------------------- pure logic

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


def free_huge_mb(buddyinfo, order=HUGE_ORDER, page_kib=4):
    """Free memory in blocks of 2 MiB or more (order >= 9 of 4 KiB pages),
    MB, over every zone of /proc/buddyinfo."""
    total_pages = 0
    for line in buddyinfo.splitlines():
        if "zone" not in line:
            continue
        counts = [int(x) for x in line.split("zone", 1)[1].split()[1:]]
        total_pages += sum(n << k for k, n in enumerate(counts) if k >= order)
    return total_pages * page_kib / 1024.0


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


class FragmentRefused(Exception):
    """The machine has not the free memory to fragment beside the servers."""


def fragment_plan(available, need, max_bytes=None, min_share=FRAGMENT_MIN_SHARE,
                  keep=MEMORY_EXTRA):
    """How much the fragmenter maps when `available` bytes are free
    (MemAvailable) and the servers need `need`: it keeps half of what it
    maps, so the servers are left available - mapped/2, which must hold
    `need`; and it never maps more than available - `keep` (it touches it
    all first). Refused (FragmentRefused, saying why) when nothing can be
    fragmented, or when less than `min_share` of the free memory left to
    the servers would be fragmented, unless max_bytes (the user's cap)
    is what limits it."""
    room = min(2 * (available - need), available - keep)
    if room <= 0:
        raise FragmentRefused(
            "the servers need %.1f GiB and %.1f GiB is available: no memory left to fragment"
            % (need / GIB, available / GIB))
    mapped = room if max_bytes is None else min(room, max_bytes)
    left = available - mapped / 2
    share = (mapped / 2) / left
    if share < min_share and (max_bytes is None or mapped < max_bytes):
        raise FragmentRefused(
            "the servers need %.1f GiB and %.1f GiB is available: only %.0f%% of the free "
            "memory left to them could be fragmented (at least %.0f%% is asked); use a "
            "smaller size or free some memory"
            % (need / GIB, available / GIB, 100 * share, 100 * min_share))
    return {"mapped": int(mapped), "left": int(left), "share": share}


# ---------------------------------------------------------------- the machine

def read_text(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def vmstat():
    return parse_vmstat(read_text("/proc/vmstat"))


def buddy_free_huge_mb():
    return free_huge_mb(read_text("/proc/buddyinfo"))


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


def available():
    for line in read_text("/proc/meminfo").splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no MemAvailable in /proc/meminfo")


class Fragmenter:
    """forkbench.fragment running: most of the free memory fragmented
    until stop()."""

    def __init__(self, nbytes):
        env = dict(os.environ, PYTHONPATH=PACKAGE_PARENT)
        self.free_before = buddy_free_huge_mb()
        t0 = time.time()
        self.proc = subprocess.Popen([sys.executable, "-m", "forkbench.fragment", str(nbytes)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     env=env)
        line = self.proc.stdout.readline().strip()
        if not line.startswith("ready "):
            self.stop()
            raise RuntimeError("the fragmenter failed (exit status %s)" % self.proc.returncode)
        self.info = json.loads(line[len("ready "):])
        self.seconds = time.time() - t0

    def figures(self, share):
        return {"fragment_mapped_mb": self.info["mapped"] / MIB,
                "fragment_kept_mb": self.info["kept"] / MIB,
                "fragment_share": share, "fragment_s": self.seconds,
                "free_2m_before_mb": self.free_before,
                "free_2m_after_mb": buddy_free_huge_mb()}

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


# ---------------------------------------------------------------- the load

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


# ---------------------------------------------------------------- the fill

def fill_keyspace(args, size, value_size):
    """The fill's keyspace at a size, the same for every server."""
    key = "fill %g GB, %d-byte values" % (size, value_size)
    if key not in args.keys_by_size:
        args.keys_by_size[key] = keys_for_size(size, per_key_bytes(args, value_size),
                                               args.fill_requests)
    return args.keys_by_size[key]


def start_fragmenter(args, run, say):
    need = memory_needed(run.size, run.variant, args.scenario)
    cap = None if args.fragment_max_gb is None else int(args.fragment_max_gb * GIB)
    plan = fragment_plan(available(), need, cap)
    say("fragmenting %.2f GiB of free memory (%.0f%% of what the server is left)"
        % (plan["mapped"] / GIB, 100 * plan["share"]))
    frag = Fragmenter(plan["mapped"])
    return frag, frag.figures(plan["share"])


def fill_scenario(run, args, say, tag):
    """One fill (see the module's comment)."""
    fig = {"keys": fill_keyspace(args, run.size, args.value_size)}
    frag = None
    try:
        if args.scenario == "fill-fragmented":
            frag, got = start_fragmenter(args, run, say)
            fig.update(got)
        srv, work = start_server(run.variant, args)
        try:
            time.sleep(0.2)
            fig["empty_rss_mb"] = rss_mb(srv)
            say("fill: redis-benchmark -r %d -n %.3gx, %d clients, -P %d"
                % (fig["keys"], args.fill_requests, args.fill_clients, args.fill_pipeline))
            fig.update(prefixed("fill_", fill(srv, args, fig["keys"], args.value_size,
                                              tag + "_fill")))
            no_forks(srv, "the fill")
            fig["fill_dbsize"] = srv.conn.call("DBSIZE")
            fig["used_memory_mb"] = int(srv.info("memory")["used_memory"]) / MIB
            huge = anon_huge_mb(srv)
            if huge is not None:
                fig["anon_huge_mb"] = huge
            server_thp(srv, args, run, fig)
            if frag is not None:
                fig["free_2m_end_mb"] = buddy_free_huge_mb()
            from .scenarios import finish_memory
            finish_memory(srv, fig)
        finally:
            srv.stop()
            shutil.rmtree(work, ignore_errors=True)
    finally:
        if frag is not None:
            frag.stop()
    return fig


def run_one(run, args, say):
    """One server (or the shapes' servers), one size, one repetition."""
    tag = "%sgb_%s_r%d" % ("%g" % run.size, run.variant, run.rep)
    if args.scenario == "shapes":
        from . import shapes
        return shapes.run_shapes(run, args, say, tag)
    return fill_scenario(run, args, say, tag)
