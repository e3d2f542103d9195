"""bench.py -- stock Redis, redis-afork and any peer side by side: what a fork costs.

--repeat N repetitions (default 5): each runs every variant once per size, on
a fresh server with the same keys, in an order that changes from one
repetition to the next (runplan.py). One run of one server:

  populate   keys key:000000000000 .. key:<N-1> (the names redis-benchmark -r
             writes), values of --value-size bytes; the first server of a
             size fills up to the size asked for and fixes N for every
             other server of that size (checked with DBSIZE);
  idle       --idle-saves BGSAVEs with no load: parent blocked time
             (latest_fork_usec, and redis-afork's INFO fork fields), save
             time, COW bytes;
  load       redis-benchmark -t set -r N -d <size> -c 50 -P 4 for a fixed
             time, once without a save (the control) and once with a BGSAVE
             started a third of the way in; a PING probe on its own
             connection records every round trip (probe.py); client latency
             during the save is also given against the control;
  memory     peak RSS (VmHWM), fragmentation.

--scenario steady replaces idle + load by a first BGSAVE, the control, and
--rounds rounds of load + BGSAVE (fork-thp's steady state).

--peer NAME=BINARY[:ARGS] adds any RESP server as one more variant; a peer
that fails to start or lacks a command the bench needs is reported and
skipped. The machine is checked before and watched during the run
(machine.py).

Writes to the output folder: results.csv (every figure of every run),
runs.csv (what ran when, and what else used the CPU meanwhile),
machine.json, monitor.csv.gz, summary.csv and results.md (report.py: median
and spread, ratio to the baseline with its confidence interval, verdict),
the probe timelines and the plots (plots.py). Run through bench/run.sh.
"""
import argparse
import gzip
import json
import os
import platform
import random
import re
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import machine
import report
import runplan
from resp import Conn, RedisError

HERE = os.path.dirname(os.path.abspath(__file__))
GIB = 1 << 30
MIB = 1 << 20

# fork-thp-collapse-rate (MB/s) of the variants that re-collapse; the
# steady load lasts a whole pass at this rate (steady_load_seconds).
COLLAPSE_RATE_MB_S = 256

# name -> (which build, extra config).
VARIANTS = {
    "stock": ("stock", []),
    "redis-afork": ("afork", []),
    # fork-thp: the keyspace in huge pages, without / with the re-collapse.
    "afork-thp": ("afork", ["--fork-thp", "yes", "--fork-thp-collapse-rate", "0"]),
    "afork-thp-collapse": ("afork", ["--fork-thp", "yes", "--fork-thp-collapse-rate",
                                     str(COLLAPSE_RATE_MB_S)]),
    # The same without warming the huge page before each collapse: the
    # ablation of fork-thp-collapse-warm and its back-off (bench/README.md,
    # "The slow collapses traced").
    "afork-thp-nowarm": ("afork", ["--fork-thp", "yes", "--fork-thp-collapse-rate",
                                   str(COLLAPSE_RATE_MB_S),
                                   "--fork-thp-collapse-warm", "no"]),
    # The same with the keyspace left in one VMA (fork-thp-vma-size 0): the
    # ablation of the cut (bench/README.md, "The heap in several VMAs").
    "afork-thp-onevma": ("afork", ["--fork-thp", "yes", "--fork-thp-collapse-rate",
                                   str(COLLAPSE_RATE_MB_S),
                                   "--fork-thp-vma-size", "0"]),
}
# scenario -> default variants
SCENARIOS = {
    "fork": "stock redis-afork",
    # afork-thp (no re-collapse) is the ablation: --variants adds it.
    "steady": "stock afork-thp-collapse",
}
# Memory a server may need during a save under writes, as a multiple of its
# dataset: every page copied once (2x); huge pages add fragmentation; a peer
# is unknown, so it gets a margin.
MEMORY_FACTOR = {"stock": 2.0, "redis-afork": 2.0, "afork-thp": 2.1,
                 "afork-thp-collapse": 2.1, "afork-thp-onevma": 2.1,
                 "afork-thp-nowarm": 2.1}
PEER_MEMORY_FACTOR = 2.25
MEMORY_EXTRA = 512 * MIB

POPULATE_LUA = """
local v = string.rep('x', tonumber(ARGV[3]))
for i = tonumber(ARGV[1]), tonumber(ARGV[2]) do
    redis.call('SET', string.format('key:%012d', i), v)
end
return 1
"""
# The parent logs this line, with a millisecond timestamp, when fork() returns.
FORK_LOG = re.compile(r"^\d+:[MS] (\d+ \w+ \d{4} \d\d:\d\d:\d\d)\.(\d{3}) . "
                      r"Background saving started")

START = time.time()


class Progress:
    """One line per phase of a run, with the time left (runplan.Estimate)."""

    def __init__(self, runs, args):
        self.estimate = runplan.Estimate(runs, args)
        self.repeat = args.repeat
        self.run = None
        self.run_started = time.time()

    def start(self, run):
        self.run, self.run_started = run, time.time()

    def finish(self, run):
        self.estimate.finished(run, time.time() - self.run_started)

    def say(self, phase):
        r = self.run
        left = self.estimate.left(r, time.time() - self.run_started)
        print("[bench %6.1fs, ~%s left] rep %d/%d %6s GB  %-12s %s"
              % (time.time() - START, runplan.fmt_duration(left), r.rep, self.repeat,
                 fmt_size(r.size), r.variant, phase), flush=True)


def note(text):
    print("bench: " + text, flush=True)


def fmt_size(size):
    return "%g" % size


def fmt_secs(seconds):
    return "%d" % seconds if seconds >= 10 else "%.1f" % seconds


# ---------------------------------------------------------------- memory check

def memory_needed(size_gb, variant):
    """Free memory a variant needs at a size (see MEMORY_FACTOR)."""
    factor = MEMORY_FACTOR.get(variant, PEER_MEMORY_FACTOR)
    return int(factor * size_gb * GIB + MEMORY_EXTRA)


def largest_need(size_gb, variants):
    """(bytes, variant) of the variant that needs the most at this size;
    servers run one at a time, so that is what must fit."""
    return max((memory_needed(size_gb, v), v) for v in variants)


def refuse_sizes_that_do_not_fit(sizes, variants):
    free = machine.meminfo("MemAvailable")
    bad = False
    for s in sizes:
        need, v = largest_need(s, variants)
        if need > free:
            bad = True
            factor = MEMORY_FACTOR.get(v, PEER_MEMORY_FACTOR)
            print("bench: size %s GB does not fit: it needs %.1f GiB of free memory "
                  "(%s, the largest variant: %gx the dataset during a save under writes, "
                  "plus 0.5 GiB), and %.1f GiB is available"
                  % (fmt_size(s), need / GIB, v, factor, free / GIB), file=sys.stderr)
    if bad:
        sys.exit(2)


# ---------------------------------------------------------------- servers

class Server:
    """A RESP server child of ours, with its own data folder."""

    def __init__(self, binary, port, workdir, extra):
        self.port = port
        self.dir = workdir
        self.log = os.path.join(workdir, "server.log")
        os.makedirs(workdir, exist_ok=True)
        args = [binary, "--port", str(port), "--bind", "127.0.0.1",
                "--save", "", "--appendonly", "no", "--dir", workdir,
                "--dbfilename", "dump.rdb", "--logfile", "server.log",
                "--daemonize", "no"] + extra
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.STDOUT, cwd=workdir)
        try:
            self.conn = self._connect()
        except BaseException:
            self.kill()
            raise

    def _connect(self):
        deadline = time.time() + 20
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError("exited at startup (status %d)%s"
                                   % (self.proc.returncode, self.log_tail()))
            try:
                c = Conn(self.port, timeout=600)
                if c.call("PING") == "PONG":
                    return c
            except (OSError, RedisError):
                if time.time() > deadline:
                    raise RuntimeError("no PONG on port %d within 20 s%s"
                                       % (self.port, self.log_tail()))
            time.sleep(0.05)

    def log_tail(self, lines=3):
        try:
            with open(self.log, errors="replace") as f:
                tail = f.read().strip().splitlines()[-lines:]
        except OSError:
            return ""
        return "; log: " + " | ".join(tail) if tail else ""

    def info(self, section=None):
        return self.conn.info(section)

    def peak_rss(self):
        with open("/proc/%d/status" % self.proc.pid) as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
        return 0

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()

    def stop(self):
        try:
            self.conn.call("SHUTDOWN", "NOSAVE")
        except (OSError, RedisError, ConnectionError):
            pass
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.kill()


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def server_binary(variant, args):
    if variant in args.peers:
        return args.peers[variant]["binary"], args.peers[variant]["args"]
    build, extra = VARIANTS[variant]
    return os.path.join(args.stock_bin if build == "stock" else args.afork_bin,
                        "redis-server"), extra


def start_server(variant, args):
    binary, extra = server_binary(variant, args)
    work = tempfile.mkdtemp(prefix="afork-bench-", dir=args.scratch)
    try:
        return Server(binary, free_port(), work, extra), work
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise


# ---------------------------------------------------------------- phases

def populate(srv, size_gb, value_size, keys=None):
    """Fill to size_gb of used memory, or to `keys` keys when given (the
    count the first server of this size got, so all get the same data);
    check the count with DBSIZE and return it."""
    sha = srv.conn.call("SCRIPT", "LOAD", POPULATE_LUA)
    base = int(srv.info("memory")["used_memory"])
    sample = 20000 if keys is None else min(20000, keys)
    srv.conn.call("EVALSHA", sha, 0, 0, sample - 1, value_size)
    if keys is None:
        per_key = (int(srv.info("memory")["used_memory"]) - base) / sample
        keys = max(sample, int(size_gb * GIB / per_key))
    batch = 200000
    for first in range(sample, keys, batch):
        srv.conn.call("EVALSHA", sha, 0, first, min(first + batch, keys) - 1, value_size)
    have = srv.conn.call("DBSIZE")
    if have != keys:
        raise RuntimeError("DBSIZE says %s keys after populating %d" % (have, keys))
    return keys


def fork_fields(srv):
    """The parent's fork time and, on redis-afork, the child-ready time
    (what the server reports of them)."""
    stats = srv.info("stats")
    fork = srv.info("fork")
    out = {}
    if "latest_fork_usec" in stats:
        out["fork_ms"] = int(stats["latest_fork_usec"]) / 1000.0
    if "latest_fork_child_ready_usec" in fork:
        out["child_ready_ms"] = int(fork["latest_fork_child_ready_usec"]) / 1000.0
    return out


def cow_mb(srv):
    cow = srv.info("persistence").get("rdb_last_cow_size")
    return int(cow) / MIB if cow is not None else None


def bgsave_and_wait(srv, poll=0.02):
    """BGSAVE, poll until it ends; return (start, end) unix times."""
    path = os.path.join(srv.dir, "dump.rdb")
    if os.path.exists(path):
        os.unlink(path)
    t0 = time.time()
    srv.conn.call("BGSAVE")
    while srv.info("persistence")["rdb_bgsave_in_progress"] == "1":
        time.sleep(poll)
    t1 = time.time()
    p = srv.info("persistence")
    if p["rdb_last_bgsave_status"] != "ok":
        raise RuntimeError("BGSAVE failed; see %s" % srv.log)
    return t0, t1


def fork_started_at(srv, t_save, fork_ms):
    """Unix time the last fork began: the log line the parent writes when
    fork() returns (ms, local time), minus the fork's duration; None when
    the log does not say (then plots align on the BGSAVE instead)."""
    last = None
    try:
        with open(srv.log, errors="replace") as f:
            for line in f:
                m = FORK_LOG.match(line)
                if m:
                    last = m
    except OSError:
        return None
    if last is None or fork_ms is None:
        return None
    returned = time.mktime(time.strptime(last.group(1), "%d %b %Y %H:%M:%S"))
    started = returned + int(last.group(2)) / 1000.0 - fork_ms / 1000.0
    return started if t_save - 1.0 <= started <= t_save + 60.0 else None


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


def benchmark_cmd(tools, port, keys, value_size, requests):
    return [os.path.join(tools, "redis-benchmark"), "-p", str(port), "-t", "set",
            "-r", str(keys), "-d", str(value_size), "-c", "50", "-P", "4",
            "-n", str(requests)]


def parse_benchmark(text):
    """Throughput and percentiles from redis-benchmark's full report."""
    text = text.replace("\r", "\n")
    dist, rps = [], None
    in_dist = False
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("Latency by percentile distribution"):
            in_dist = True
            continue
        if in_dist:
            if "% <=" not in line:
                in_dist = False
                continue
            pct = float(line.split("%")[0])
            ms = float(line.split("<=")[1].split()[0])
            dist.append((pct, ms))
        if line.startswith("throughput summary:"):
            rps = float(line.split(":")[1].split()[0])
    if not dist or rps is None:
        raise RuntimeError("cannot parse redis-benchmark output:\n" + text[-2000:])

    def pct(q):
        for p, ms in dist:
            if p >= q:
                return ms
        return dist[-1][1]
    return {"rps": rps, "p50_ms": pct(50), "p99_ms": pct(99), "p999_ms": pct(99.9),
            "max_ms": dist[-1][1]}


def run_benchmark(tools, port, keys, value_size, requests):
    out = subprocess.run(benchmark_cmd(tools, port, keys, value_size, requests),
                         capture_output=True, text=True, check=True).stdout
    return parse_benchmark(out)


def calibrate(srv, args, keys):
    """Requests per second of the load: a short run, then one of about
    --calibrate-seconds (a short run alone underestimates: connection
    set-up weighs more)."""
    n = 20000
    t0 = time.time()
    rate = run_benchmark(args.tools, srv.port, keys, args.value_size, n)["rps"]
    if time.time() - t0 >= args.calibrate_seconds:
        return rate
    n = min(10000000, max(n, int(rate * args.calibrate_seconds)))
    return run_benchmark(args.tools, srv.port, keys, args.value_size, n)["rps"]


def start_probe(port, path):
    """probe.py on its own connection; returns once it has connected."""
    proc = subprocess.Popen([sys.executable, os.path.join(HERE, "probe.py"),
                             str(port), path], stdout=subprocess.PIPE, text=True)
    if proc.stdout.readline().strip() != "ready":
        proc.wait()
        raise RuntimeError("the PING probe could not connect")
    return proc


def stop_probe(proc, path):
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    samples = []
    with gzip.open(path, "rt") as f:
        next(f)
        for line in f:
            t, rtt = line.split(",")
            samples.append((float(t), float(rtt)))
    return samples


def gap_summary(samples, since=None, until=None):
    """Round trips over 1 ms (when given, those that end after `since` and
    begin before `until`: a PING sent just before the BGSAVE and answered
    after the fork is the fork's)."""
    gaps = [r for t, r in samples
            if r > 1.0 and (since is None or t + r / 1000.0 >= since)
            and (until is None or t <= until)]
    return {"gaps_over_1ms": len(gaps), "max_gap_ms": max(gaps) if gaps else 0.0,
            "total_gap_ms": sum(gaps)}


def load_run(srv, args, keys, requests, tag, with_save, seconds):
    """One redis-benchmark run of about `seconds`, a BGSAVE a third of the
    way in if asked."""
    probe_csv = os.path.join(args.out, "probe_%s.csv.gz" % tag)
    probe = start_probe(srv.port, probe_csv)
    bench = subprocess.Popen(benchmark_cmd(args.tools, srv.port, keys, args.value_size,
                                           requests),
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    t_save = t_done = None
    if with_save:
        time.sleep(seconds / 3.0)
        t_save, t_done = bgsave_and_wait(srv, poll=0.05)
    out = bench.communicate()[0]
    t_end = time.time()
    time.sleep(0.3)
    samples = stop_probe(probe, probe_csv)
    res = parse_benchmark(out)
    if not with_save:
        res.update(gap_summary(samples))
        return res
    res.update(fork_fields(srv))
    res.pop("child_ready_ms", None)
    res["save_s"] = t_done - t_save
    c = cow_mb(srv)
    if c is not None:
        res["cow_mb"] = c
    res["outlasted_load"] = int(t_done > t_end)
    res.update(gap_summary(samples, t_save, t_done))
    # After the child, to the end of the load: the re-collapse's time.
    res["after_child_max_gap_ms"] = gap_summary(samples, t_done)["max_gap_ms"]
    write_save_marks(args.out, tag, samples, t_save,
                     fork_started_at(srv, t_save, res.get("fork_ms")))
    return res


def write_save_marks(outdir, tag, samples, t_save, t_fork):
    """gaps_<tag>.csv: round trips over 1 ms, seconds after the BGSAVE;
    probe_<tag>.bgsave: when BGSAVE was sent and, on a second line, when
    the fork began (what the timeline plots align on)."""
    with open(os.path.join(outdir, "gaps_%s.csv" % tag), "w") as f:
        f.write("seconds_after_bgsave,rtt_ms\n")
        for t, r in samples:
            if r > 1.0:
                f.write("%.6f,%.3f\n" % (t - t_save, r))
    with open(os.path.join(outdir, "probe_%s.bgsave" % tag), "w") as f:
        f.write("%.6f\n" % t_save)
        if t_fork is not None:
            f.write("%.6f\n" % t_fork)


# ---------------------------------------------------------------- one server

def load_requests(srv, args, keys, idle_save_s, seconds=None):
    """Requests for a run long enough that a save under load (about twice
    the idle one) ends before the load, when the BGSAVE comes a third in
    (or for `seconds`, when given)."""
    if seconds is None:
        seconds = max(args.load_seconds, 3.0 * idle_save_s)
    rate = calibrate(srv, args, keys)
    return max(20000, int(rate * seconds)), seconds


def steady_load_seconds(args, used_gb, idle_save_s):
    """The steady rounds' load also covers the re-collapse after the child
    (the pass is where fork-thp's after-child stalls are, bench/README.md):
    after the BGSAVE, a third in, the save under load (about twice the idle
    one) and a pass over the whole heap at the collapse rate, with a
    margin (--pass-margin-seconds). Every variant gets the same formula,
    stock included, so their loads are about as long."""
    after_save = (2.0 * idle_save_s + used_gb * 1024.0 / COLLAPSE_RATE_MB_S
                  + args.pass_margin_seconds)
    return max(args.load_seconds, 3.0 * idle_save_s, 1.5 * after_save)


def control_ratios(fig, max_key, p99_key):
    """Client latency during the save against this server's no-save control
    of the same repetition: what the save adds beyond the machine's noise."""
    if fig.get("nosave_max_ms") and max_key in fig:
        fig["save_vs_control_max"] = fig[max_key] / fig["nosave_max_ms"]
    if fig.get("nosave_p99_ms") and p99_key in fig:
        fig["save_vs_control_p99"] = fig[p99_key] / fig["nosave_p99_ms"]


def fork_scenario(srv, args, keys, tag, fig, say):
    say("idle: %d BGSAVEs" % args.idle_saves)
    idle = idle_saves(srv, args.idle_saves)
    fig.update(idle)
    requests, seconds = load_requests(srv, args, keys, idle["idle_save_s"])
    say("load without save (%d requests, ~%ss)" % (requests, fmt_secs(seconds)))
    ctl = load_run(srv, args, keys, requests, tag + "_nosave", False, seconds)
    for k in ("rps", "p50_ms", "p99_ms", "p999_ms", "max_ms", "gaps_over_1ms", "max_gap_ms"):
        fig["nosave_" + k] = ctl[k]
    say("load with BGSAVE")
    sv = load_run(srv, args, keys, requests, tag + "_save", True, seconds)
    for k in ("fork_ms", "save_s", "cow_mb", "rps", "p50_ms", "p99_ms", "p999_ms",
              "max_ms", "gaps_over_1ms", "max_gap_ms", "total_gap_ms", "outlasted_load"):
        if k in sv:
            fig["save_" + k] = sv[k]
    control_ratios(fig, "save_max_ms", "save_p99_ms")


def wait_collapse(srv, passes_before, limit_s=300):
    """Steady scenario: let the re-collapse pass after a save finish."""
    t0 = time.time()
    while time.time() - t0 < limit_s:
        f = srv.info("fork")
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
    the warm-up (fork-thp-collapse-warm)."""
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


def steady_round(srv, args, keys, requests, seconds, tag, rnd, fig):
    f = srv.info("fork")
    passes, counters = int(f.get("fork_thp_collapse_passes", 0)), collapse_counters(f)
    r = load_run(srv, args, keys, requests, "%s_round%d" % (tag, rnd), True, seconds)
    for k in ("fork_ms", "max_ms", "p999_ms", "p99_ms", "rps", "cow_mb", "save_s",
              "max_gap_ms", "after_child_max_gap_ms"):
        if k in r:
            fig["round%d_%s" % (rnd, k)] = r[k]
    waited = wait_collapse(srv, passes)
    f = srv.info("fork")
    if "fork_thp_collapse_passes" in f:
        fig["round%d_collapse_wait_s" % rnd] = waited
        fig["round%d_huge_after_mb" % rnd] = \
            max(0, int(f["latest_fork_thp_collapse_huge_after_bytes"])) / MIB
        for k, v in collapse_figures(counters, collapse_counters(f)).items():
            fig["round%d_%s" % (rnd, k)] = v
    return r


def steady_scenario(srv, args, keys, tag, fig, say):
    """A first BGSAVE, the control, then rounds of {write load over the
    whole keyspace, BGSAVE under it}; the summary skips round 1 (the first
    fork after populating is cheap for huge pages either way)."""
    say("first BGSAVE (idle)")
    passes = int(srv.info("fork").get("fork_thp_collapse_passes", 0))
    idle = idle_saves(srv, 1)
    if "idle_fork_ms_median" in idle:
        fig["first_fork_ms"] = idle["idle_fork_ms_median"]
    # The control starts once the pass after that save is over, as each
    # round does: a control during the pass would be no control.
    waited = wait_collapse(srv, passes)
    if "fork_thp_collapse_passes" in srv.info("fork"):
        fig["first_collapse_wait_s"] = waited
    seconds = steady_load_seconds(args, fig["used_memory_mb"] / 1024.0, idle["idle_save_s"])
    requests, seconds = load_requests(srv, args, keys, idle["idle_save_s"], seconds)
    fig["steady_load_s"] = seconds
    say("steady: load without save (%d requests, ~%ss)" % (requests, fmt_secs(seconds)))
    ctl = load_run(srv, args, keys, requests, tag + "_nosave", False, seconds)
    for k in ("rps", "p99_ms", "p999_ms", "max_ms", "max_gap_ms"):
        fig["nosave_" + k] = ctl[k]
    rounds = []
    for rnd in range(1, args.rounds + 1):
        say("steady: round %d/%d, load + BGSAVE" % (rnd, args.rounds))
        rounds.append(steady_round(srv, args, keys, requests, seconds, tag, rnd, fig))
    # Rounds whose pass went on after the load: their after-child figures
    # miss part of it.
    fig["steady_pass_outlasted_load"] = sum(
        1 for rnd in range(1, args.rounds + 1)
        if fig.get("round%d_collapse_wait_s" % rnd, 0.0) > 1.0)
    later = rounds[1:] or rounds
    for k, name in (("fork_ms", "steady_fork_ms"), ("max_ms", "steady_max_ms"),
                    ("p99_ms", "steady_p99_ms"), ("max_gap_ms", "steady_max_gap_ms"),
                    ("after_child_max_gap_ms", "steady_after_child_max_gap_ms")):
        vals = [r[k] for r in later if k in r]
        if vals:
            fig[name + "_median"] = statistics.median(vals)
            if k == "fork_ms":
                fig[name + "_max"] = max(vals)
    control_ratios(fig, "steady_max_ms_median", "steady_p99_ms_median")


def finish_memory(srv, fig):
    mem = srv.info("memory")
    fig["peak_rss_mb"] = srv.peak_rss() / MIB
    fig["rss_mb"] = int(mem["used_memory_rss"]) / MIB
    if "mem_fragmentation_ratio" in mem:
        fig["fragmentation_ratio"] = float(mem["mem_fragmentation_ratio"])


def run_one(run, args, say):
    """One server, one size, one repetition: its figures (metric -> value)."""
    tag = "%sgb_%s_r%d" % (fmt_size(run.size), run.variant, run.rep)
    srv, work = start_server(run.variant, args)
    fig = {}
    try:
        say("populate")
        keys = populate(srv, run.size, args.value_size, args.keys_by_size.get(run.size))
        args.keys_by_size.setdefault(run.size, keys)
        mem = srv.info("memory")
        fig["keys"] = keys
        fig["used_memory_mb"] = int(mem["used_memory"]) / MIB
        fig["rss_after_populate_mb"] = int(mem["used_memory_rss"]) / MIB
        if args.scenario == "steady":
            steady_scenario(srv, args, keys, tag, fig, say)
        else:
            fork_scenario(srv, args, keys, tag, fig, say)
        finish_memory(srv, fig)
    finally:
        srv.stop()
        shutil.rmtree(work, ignore_errors=True)
    return fig


# ---------------------------------------------------------------- peers

def parse_peer(text):
    """NAME=BINARY[:ARGS] -> (name, binary, [args]); ARGS split like a shell."""
    name, eq, rest = text.partition("=")
    if not eq or not rest:
        raise ValueError("%r: expected NAME=BINARY[:ARGS]" % text)
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name):
        raise ValueError("%r: NAME may hold letters, digits, '.', '_' and '-'" % name)
    if name in VARIANTS:
        raise ValueError("%r: NAME is one of the built-in variants" % name)
    binary, _, extra = rest.partition(":")
    return name, binary, shlex.split(extra)


def check_peer(name, args):
    """Start the peer once and try every command the bench needs; None
    when it can be benchmarked, else why not."""
    binary = args.peers[name]["binary"]
    if not (os.path.isfile(binary) and os.access(binary, os.X_OK)):
        return "%s is not an executable file" % binary
    try:
        srv, work = start_server(name, args)
    except (RuntimeError, OSError) as e:
        return "failed to start: %s" % e
    try:
        srv.conn.sock.settimeout(30)   # a peer that never answers is skipped, not waited for
        populate(srv, 0, args.value_size, keys=10)
        for section, field in (("memory", "used_memory"),
                               ("persistence", "rdb_bgsave_in_progress"),
                               ("persistence", "rdb_last_bgsave_status")):
            if field not in srv.info(section):
                return "INFO %s has no %s" % (section, field)
        bgsave_and_wait(srv)
        srv.conn.call("DBSIZE")
        return None
    except (RedisError, RuntimeError, OSError, ConnectionError) as e:
        return "a command the bench needs failed: %s" % e
    finally:
        srv.stop()
        shutil.rmtree(work, ignore_errors=True)


def check_peers(args):
    """Drop peers that cannot be benchmarked; return {name: why}."""
    skipped = {}
    for name in list(args.peers):
        why = check_peer(name, args)
        if why:
            skipped[name] = why
            note("peer %s skipped: %s" % (name, why))
            args.variants.remove(name)
        else:
            note("peer %s: %s" % (name, version(args.peers[name]["binary"])))
    return skipped


# ---------------------------------------------------------------- records

def version(binary):
    try:
        return subprocess.run([binary, "--version"], capture_output=True, text=True,
                              timeout=10).stdout.strip() or "n/a"
    except (OSError, subprocess.TimeoutExpired):
        return "n/a"


def git_state(path):
    """`git describe --always --dirty` and the full commit of the checkout
    holding `path` ("n/a" outside git)."""
    def git(*cmd):
        try:
            return subprocess.run(["git", "-C", path] + list(cmd), capture_output=True,
                                  text=True).stdout.strip() or "n/a"
        except OSError:
            return "n/a"
    return {"describe": git("describe", "--always", "--dirty"),
            "commit": git("rev-parse", "HEAD")}


def source_state(args):
    """The checkout (bench and patches) and both build trees; dirty when
    any has uncommitted changes to tracked files."""
    state = {"checkout": git_state(HERE), "afork_tree": git_state(args.afork_bin),
             "stock_tree": git_state(args.stock_bin)}
    state["dirty"] = any(s["describe"].endswith("-dirty") for s in state.values())
    return state


def machine_record(args, source, before, pretouched):
    try:
        import matplotlib
        mpl = matplotlib.__version__
    except ImportError:
        mpl = "not installed"
    rec = {"date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())}
    rec.update(machine.describe())
    rec.update({
        "before": before, "pretouch": pretouched,
        "stock": version(os.path.join(args.stock_bin, "redis-server")),
        "redis_afork": version(os.path.join(args.afork_bin, "redis-server")),
        "redis_afork_commit": source["checkout"]["describe"],
        "source": source, "dirty": source["dirty"],
        "python": platform.python_version(), "matplotlib": mpl,
        "value_size": args.value_size, "load_seconds": args.load_seconds,
        "calibrate_seconds": args.calibrate_seconds, "idle_saves": args.idle_saves,
        "variants": {v: server_binary(v, args)[1] for v in args.variants},
        "baseline": "stock" if "stock" in args.variants else args.variants[0],
        "peers": {n: dict(p, version=version(p["binary"])) for n, p in args.peers.items()
                  if n in args.variants},
        "scenario": args.scenario, "rounds": args.rounds,
        "sizes": args.sizes, "repeat": args.repeat,
        "order": args.order, "seed": args.seed,
    })
    return rec


def write_json(obj, path):
    with open(path, "w") as f:
        json.dump(obj, f, indent=2)
        f.write("\n")


RUNS_HEADER = ("seq,rep,size_gb,variant,position,started_utc,seconds,status,"
               "others_cpus_mean,steal_pct_mean,load1_max\n")


def append_run(path, run, started, seconds, status, during):
    with open(path, "a") as f:
        f.write("%d,%d,%s,%s,%d,%s,%.1f,%s,%s,%s,%s\n" % (
            run.seq, run.rep, fmt_size(run.size), run.variant, run.position,
            time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)), seconds,
            status.replace(",", ";").replace("\n", " "),
            during.get("others_cpus_mean", ""), during.get("steal_pct_mean", ""),
            during.get("load1_max", "")))


def append_figures(path, run, fig):
    with open(path, "a") as f:
        for metric, value in fig.items():
            f.write("%s,%s,%d,%s,%s\n" % (fmt_size(run.size), run.variant, run.rep,
                                          metric, report.fmt_value(value)))


# ---------------------------------------------------------------- main

def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", default="1", help="dataset sizes in GB, e.g. '1 4 8'")
    p.add_argument("--repeat", type=int, default=5,
                   help="repetitions: every variant runs once per size in each")
    p.add_argument("--order", default="rotate", choices=("rotate", "random"),
                   help="variant order per repetition: rotations, or shuffled (--seed)")
    p.add_argument("--seed", type=int, default=None, help="for --order random")
    p.add_argument("--scenario", default="fork", choices=sorted(SCENARIOS),
                   help="fork: idle forks and one save under load; steady: rounds of "
                        "load + save (steady state, fork-thp)")
    p.add_argument("--variants", default=None, help="default: per scenario")
    p.add_argument("--peer", action="append", default=[], metavar="NAME=BINARY[:ARGS]",
                   help="one more variant: any RESP server (repeatable)")
    p.add_argument("--rounds", type=int, default=3,
                   help="steady scenario rounds (the summary skips round 1)")
    p.add_argument("--pass-margin-seconds", type=float, default=3.0,
                   help="steady scenario: how long the load goes on past the expected end "
                        "of the re-collapse")
    p.add_argument("--afork-bin", required=True, help="folder with redis-afork's programs")
    p.add_argument("--stock-bin", required=True, help="folder with stock's redis-server")
    p.add_argument("--out", required=True, help="results folder (created)")
    p.add_argument("--value-size", type=int, default=256)
    p.add_argument("--load-seconds", type=float, default=15)
    p.add_argument("--calibrate-seconds", type=float, default=1.5,
                   help="length of the run that measures a server's request rate")
    p.add_argument("--idle-saves", type=int, default=3, help="fork scenario: idle BGSAVEs")
    p.add_argument("--idle-check-seconds", type=float, default=3.0,
                   help="how long the machine is watched before the run")
    p.add_argument("--no-pretouch", action="store_true",
                   help="skip touching the run's memory once before it starts")
    p.add_argument("--require-clean", action="store_true",
                   help="refuse to run on uncommitted changes (else results are marked -dirty)")
    p.add_argument("--scratch", default=None, help="where servers keep their RDB files")
    a = p.parse_args()
    check_args(p, a)
    return a


def check_args(p, a):
    try:
        a.sizes = [float(s) for s in a.sizes.split()]
    except ValueError:
        p.error("--sizes: %r is not a list of numbers (GB)" % a.sizes)
    if not a.sizes or any(s <= 0 for s in a.sizes):
        p.error("--sizes: give one or more sizes above 0 (GB)")
    if a.repeat < 1:
        p.error("--repeat: give 1 or more repetitions")
    if a.idle_saves < 1 or a.rounds < 1:
        p.error("--idle-saves and --rounds: give 1 or more")
    if a.pass_margin_seconds < 0:
        p.error("--pass-margin-seconds: give 0 or more")
    a.variants = (a.variants or SCENARIOS[a.scenario]).split()
    for v in a.variants:
        if v not in VARIANTS:
            p.error("--variants: unknown variant %r (known: %s)" % (v, ", ".join(VARIANTS)))
    a.peers = {}
    for text in a.peer:
        try:
            name, binary, extra = parse_peer(text)
        except ValueError as e:
            p.error("--peer: %s" % e)
        if name in a.peers:
            p.error("--peer: %r given twice" % name)
        a.peers[name] = {"binary": shutil.which(binary) or binary, "args": extra}
        a.variants.append(name)
    if a.seed is None:
        a.seed = random.SystemRandom().randrange(1 << 31)
    a.tools = a.afork_bin
    a.keys_by_size = {}
    for d in (a.afork_bin, a.stock_bin):
        if not os.access(os.path.join(d, "redis-server"), os.X_OK):
            p.error("no redis-server in %s (run make and make stock)" % d)


def prepare_machine(args):
    """Watch the machine idle, pre-touch the memory of the largest run."""
    note("checking the machine for %gs before the run" % args.idle_check_seconds)
    before = machine.idle_check(args.idle_check_seconds)
    for w in before["warnings"]:
        note("warning: " + w)
    pretouched = None
    if not args.no_pretouch:
        need = max(largest_need(s, args.variants)[0] for s in args.sizes)
        pretouched = machine.pretouch(need)
        note("pre-touched %.2f GiB of memory in %.2f s" % (pretouched["gib"],
                                                         pretouched["seconds"]))
    return before, pretouched


def print_plan(args, orders, progress):
    note("%d repetitions x %d sizes x %d variants = %d runs; variant order %s%s"
         % (args.repeat, len(args.sizes), len(args.variants),
            args.repeat * len(args.sizes) * len(args.variants), args.order,
            " (seed %d)" % args.seed if args.order == "random" else ""))
    for rep, order in enumerate(orders, 1):
        note("  rep %d: %s" % (rep, " ".join(order)))
    note("estimated time: %s (a model of the phases, refit as runs finish)"
         % runplan.fmt_duration(progress.estimate.total()))


def run_all(args, runs, progress, monitor):
    """Every run in plan order; a peer that fails is reported and dropped,
    a built-in variant that fails stops the bench."""
    runs_csv = os.path.join(args.out, "runs.csv")
    results_csv = os.path.join(args.out, "results.csv")
    with open(runs_csv, "w") as f:
        f.write(RUNS_HEADER)
    with open(results_csv, "w") as f:
        f.write("size_gb,variant,rep,metric,value\n")
    failed = {}
    for run in runs:
        if run.variant in failed:
            continue
        progress.start(run)
        mark, started = monitor.mark(), time.time()
        status = "ok"
        try:
            fig = run_one(run, args, progress.say)
            append_figures(results_csv, run, fig)
        except Exception as e:  # noqa: BLE001 -- a peer's failure is reported, not fatal
            if run.variant not in args.peers:
                raise
            status = "failed: %s" % e
            failed[run.variant] = "rep %d, %s GB: %s" % (run.rep, fmt_size(run.size), e)
            note("peer %s failed and is dropped: %s" % (run.variant, e))
        during = monitor.since(mark)
        append_run(runs_csv, run, started, time.time() - started, status, during)
        progress.finish(run)
        for w in machine.warnings_for(during, "this run"):
            note("warning: " + w)
    return failed


def main():
    args = parse_args()
    refuse_sizes_that_do_not_fit(args.sizes, args.variants)
    source = source_state(args)
    if source["dirty"] and args.require_clean:
        sys.exit("bench: uncommitted changes (%s); commit them or drop --require-clean"
                 % ", ".join(k for k, s in source.items()
                             if k != "dirty" and s["describe"].endswith("-dirty")))
    os.makedirs(args.out, exist_ok=True)
    before, pretouched = prepare_machine(args)
    skipped = check_peers(args)
    rec = machine_record(args, source, before, pretouched)
    orders = runplan.variant_orders(args.variants, args.repeat, args.order, args.seed)
    rec.update(orders=orders, skipped_peers=skipped)
    write_json(rec, os.path.join(args.out, "machine.json"))
    runs = runplan.plan_runs(args.sizes, orders)
    progress = Progress(runs, args)
    print_plan(args, orders, progress)
    monitor = machine.Monitor()
    monitor.start()
    try:
        failed = run_all(args, runs, progress, monitor)
    finally:
        monitor.stop()
        monitor.write_csv(os.path.join(args.out, "monitor.csv.gz"))
    during = monitor.since()
    rec.update(during=during, failed_peers=failed, keys_by_size=args.keys_by_size,
               duration_s=round(time.time() - START, 1),
               warnings=before["warnings"] + machine.warnings_for(during, "during the run"))
    write_json(rec, os.path.join(args.out, "machine.json"))
    report.write(args.out)
    note("plots")
    import plots
    plots.draw(args.out)
    note("done in %s: %s/results.md" % (runplan.fmt_duration(time.time() - START), args.out))


if __name__ == "__main__":
    main()
