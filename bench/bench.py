"""bench.py -- stock Redis 8.0.6 and redis-afork side by side: what a fork costs.

For each dataset size and each server variant (servers run one at a time,
on the same data shape, in the same run):

  populate   keys key:000000000000 .. key:<N-1> (the names redis-benchmark -r
             writes), values of --value-size bytes, up to the size asked for;
  idle       3 BGSAVEs with no load: parent blocked time (latest_fork_usec,
             and redis-afork's INFO fork fields), save time, COW bytes;
  load       redis-benchmark -t set -r N -d <size> -c 50 -P 4 for a fixed
             time, once without a save (the control) and once with a BGSAVE
             started a third of the way in; a PING probe on its own
             connection records every round trip (probe.py);
  memory     peak RSS (VmHWM), fragmentation.

Writes results.md, results.csv, machine.json, the probe timelines and the
plots (plots.py) to the output folder. Run through bench/run.sh.
"""
import argparse
import gzip
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from resp import Conn, RedisError

HERE = os.path.dirname(os.path.abspath(__file__))
GIB = 1 << 30
MIB = 1 << 20

# name -> (which build, extra config).
VARIANTS = {
    "stock": ("stock", []),
    "redis-afork": ("afork", []),
    # fork-thp: the keyspace in huge pages, without / with the re-collapse.
    "afork-thp": ("afork", ["--fork-thp", "yes", "--fork-thp-collapse-rate", "0"]),
    "afork-thp-collapse": ("afork", ["--fork-thp", "yes", "--fork-thp-collapse-rate", "256"]),
}
# scenario -> default variants
SCENARIOS = {
    "fork": "stock redis-afork",
    "steady": "stock afork-thp afork-thp-collapse",
}

POPULATE_LUA = """
local v = string.rep('x', tonumber(ARGV[3]))
for i = tonumber(ARGV[1]), tonumber(ARGV[2]) do
    redis.call('SET', string.format('key:%012d', i), v)
end
return 1
"""

START = time.time()


def progress(size, variant, phase):
    """One line per step, so a long run is never silent."""
    print("[bench %6.1fs] %6s GB  %-12s %s" % (time.time() - START, fmt_size(size),
                                                variant, phase), flush=True)


def fmt_size(size):
    return ("%g" % size)


# ---------------------------------------------------------------- memory check

def mem_available():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no MemAvailable in /proc/meminfo")


def memory_needed(size_gb):
    """A server needs up to ~2x its dataset during a save under writes."""
    return int(2 * size_gb * GIB + 512 * MIB)


def refuse_sizes_that_do_not_fit(sizes):
    free = mem_available()
    bad = [s for s in sizes if memory_needed(s) > free]
    for s in bad:
        print("bench: size %s GB does not fit: it needs %.1f GiB of free memory "
              "(2x the dataset during a save under writes, plus 0.5 GiB), and "
              "%.1f GiB is available" % (fmt_size(s), memory_needed(s) / GIB, free / GIB),
              file=sys.stderr)
    if bad:
        sys.exit(2)


# ---------------------------------------------------------------- servers

class Server:
    """A redis-server child of ours, with its own data folder."""

    def __init__(self, binary, port, workdir, extra):
        self.port = port
        self.dir = workdir
        os.makedirs(workdir, exist_ok=True)
        args = [binary, "--port", str(port), "--bind", "127.0.0.1",
                "--save", "", "--appendonly", "no", "--dir", workdir,
                "--dbfilename", "dump.rdb", "--logfile", "server.log",
                "--daemonize", "no"] + extra
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.STDOUT)
        self.conn = self._connect()

    def _connect(self):
        deadline = time.time() + 20
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError("redis-server exited at startup; see %s/server.log"
                                   % self.dir)
            try:
                c = Conn(self.port, timeout=600)
                if c.call("PING") == "PONG":
                    return c
            except (OSError, RedisError):
                if time.time() > deadline:
                    raise
            time.sleep(0.05)

    def info(self, section=None):
        return self.conn.info(section)

    def peak_rss(self):
        with open("/proc/%d/status" % self.proc.pid) as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
        return 0

    def stop(self):
        try:
            self.conn.call("SHUTDOWN", "NOSAVE")
        except (OSError, RedisError, ConnectionError):
            pass
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def free_port():
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


# ---------------------------------------------------------------- phases

def populate(srv, size_gb, value_size, keys=None):
    """Fill to size_gb of used memory, or to `keys` keys when given (the
    count the first server of this size got, so all get the same data);
    return the number of keys."""
    sha = srv.conn.call("SCRIPT", "LOAD", POPULATE_LUA)
    base = int(srv.info("memory")["used_memory"])
    sample = 20000
    srv.conn.call("EVALSHA", sha, 0, 0, sample - 1, value_size)
    if keys is None:
        per_key = (int(srv.info("memory")["used_memory"]) - base) / sample
        keys = max(sample, int(size_gb * GIB / per_key))
    batch = 200000
    for first in range(sample, keys, batch):
        srv.conn.call("EVALSHA", sha, 0, first, min(first + batch, keys) - 1, value_size)
    return keys


def fork_fields(srv):
    """The parent's fork time and, on redis-afork, the child-ready time."""
    stats = srv.info("stats")
    fork = srv.info("fork")
    out = {"fork_ms": int(stats["latest_fork_usec"]) / 1000.0}
    if "latest_fork_child_ready_usec" in fork:
        out["child_ready_ms"] = int(fork["latest_fork_child_ready_usec"]) / 1000.0
    return out


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
        raise RuntimeError("BGSAVE failed; see %s/server.log" % srv.dir)
    return t0, t1


def idle_saves(srv, rounds=3):
    forks, ready, secs, cow = [], [], [], []
    for _ in range(rounds):
        t0, t1 = bgsave_and_wait(srv)
        f = fork_fields(srv)
        forks.append(f["fork_ms"])
        if "child_ready_ms" in f:
            ready.append(f["child_ready_ms"])
        secs.append(t1 - t0)
        cow.append(int(srv.info("persistence")["rdb_last_cow_size"]))
    out = {"idle_fork_ms_median": statistics.median(forks),
           "idle_fork_ms_max": max(forks),
           "idle_save_s": statistics.median(secs),
           "idle_cow_mb": max(cow) / MIB}
    if ready:
        out["idle_child_ready_ms_median"] = statistics.median(ready)
    return out, forks


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


def calibrate(tools, port, keys, value_size):
    """Requests per second of the load, from a ~2 s run (a shorter one
    underestimates: connection set-up weighs more)."""
    n = 100000
    while True:
        t0 = time.time()
        out = subprocess.run(benchmark_cmd(tools, port, keys, value_size, n),
                             capture_output=True, text=True, check=True).stdout
        if time.time() - t0 >= 1.5 or n >= 10000000:
            return parse_benchmark(out)["rps"]
        n *= 4


def start_probe(port, path):
    return subprocess.Popen([sys.executable, os.path.join(HERE, "probe.py"),
                             str(port), path])


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
    """Round trips over 1 ms (in [since, until] when given)."""
    gaps = [r for t, r in samples
            if r > 1.0 and (since is None or t >= since) and (until is None or t <= until)]
    return {"gaps_over_1ms": len(gaps), "max_gap_ms": max(gaps) if gaps else 0.0,
            "total_gap_ms": sum(gaps)}


def load_run(srv, tools, keys, args, requests, tag, outdir, with_save, seconds):
    """One redis-benchmark run of about `seconds`, a BGSAVE a third of the
    way in if asked."""
    probe_csv = os.path.join(outdir, "probe_%s.csv.gz" % tag)
    probe = start_probe(srv.port, probe_csv)
    time.sleep(0.3)
    bench = subprocess.Popen(benchmark_cmd(tools, srv.port, keys, args.value_size, requests),
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    res = {}
    t_save = t_done = None
    if with_save:
        time.sleep(seconds / 3.0)
        t_save, t_done = bgsave_and_wait(srv, poll=0.05)
    out = bench.communicate()[0]
    t_end = time.time()
    time.sleep(0.3)
    samples = stop_probe(probe, probe_csv)
    res.update(parse_benchmark(out))
    if with_save:
        res["fork_ms"] = fork_fields(srv)["fork_ms"]
        res["save_s"] = t_done - t_save
        res["cow_mb"] = int(srv.info("persistence")["rdb_last_cow_size"]) / MIB
        res["save_outlasted_load"] = int(t_done > t_end)
        res.update(gap_summary(samples, t_save, t_done))
        with open(os.path.join(outdir, "gaps_%s.csv" % tag), "w") as f:
            f.write("seconds_after_bgsave,rtt_ms\n")
            for t, r in samples:
                if r > 1.0:
                    f.write("%.6f,%.3f\n" % (t - t_save, r))
        with open(os.path.join(outdir, "probe_%s.bgsave" % tag), "w") as f:
            f.write("%.6f\n" % t_save)
    else:
        res.update(gap_summary(samples))
    return res


# ---------------------------------------------------------------- one server

def load_requests(srv, args, keys, idle_save_s):
    """Requests for a run long enough that a save under load (about twice
    the idle one) ends before the load, when the BGSAVE comes a third in."""
    seconds = max(args.load_seconds, 3.0 * idle_save_s)
    rate = calibrate(args.tools, srv.port, keys, args.value_size)
    return max(20000, int(rate * seconds)), seconds


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


def steady_rounds(srv, size, name, args, keys, idle_save_s, tag, outdir, rows):
    """Rounds of {write load over the whole keyspace, BGSAVE under it}."""
    requests, seconds = load_requests(srv, args, keys, idle_save_s)
    progress(size, name, "steady: load without save (%d requests, ~%ds)" % (requests, seconds))
    ctl = load_run(srv, args.tools, keys, args, requests, tag + "_nosave", outdir, False,
                   seconds)
    record(rows, size, name, "nosave_rps", ctl["rps"])
    forks = []
    for rnd in range(1, args.rounds + 1):
        passes = int(srv.info("fork").get("fork_thp_collapse_passes", 0))
        progress(size, name, "steady: round %d/%d, load + BGSAVE" % (rnd, args.rounds))
        r = load_run(srv, args.tools, keys, args, requests, "%s_round%d" % (tag, rnd),
                     outdir, True, seconds)
        for k in ("fork_ms", "max_ms", "p999_ms", "p99_ms", "rps", "cow_mb", "save_s"):
            record(rows, size, name, "round%d_%s" % (rnd, k), r[k])
        forks.append(r["fork_ms"])
        waited = wait_collapse(srv, passes)
        if "fork_thp_collapse_passes" in srv.info("fork"):
            f = srv.info("fork")
            record(rows, size, name, "round%d_collapse_wait_s" % rnd, waited)
            record(rows, size, name, "round%d_huge_after_mb" % rnd,
                   max(0, int(f["fork_thp_collapse_huge_after_bytes"])) / MIB)
    record(rows, size, name, "steady_fork_ms_median", statistics.median(forks[1:] or forks))
    record(rows, size, name, "steady_fork_ms_max", max(forks[1:] or forks))


def run_variant(size, name, args, outdir, rows, forks_by):
    build, extra = VARIANTS[name]
    binary = os.path.join(args.stock_bin if build == "stock" else args.afork_bin,
                          "redis-server")
    tag = "%sgb_%s" % (fmt_size(size), name)
    work = tempfile.mkdtemp(prefix="afork-bench-", dir=args.scratch)
    srv = Server(binary, free_port(), work, extra)
    try:
        progress(size, name, "populate")
        keys = populate(srv, size, args.value_size, args.keys_by_size.get(size))
        args.keys_by_size[size] = keys
        mem = srv.info("memory")
        record(rows, size, name, "keys", keys)
        record(rows, size, name, "used_memory_mb", int(mem["used_memory"]) / MIB)
        record(rows, size, name, "rss_after_populate_mb", int(mem["used_memory_rss"]) / MIB)

        if args.scenario == "steady":
            progress(size, name, "first BGSAVE (idle)")
            idle, forks = idle_saves(srv, rounds=1)
            record(rows, size, name, "first_fork_ms", idle["idle_fork_ms_median"])
            steady_rounds(srv, size, name, args, keys, idle["idle_save_s"], tag, outdir, rows)
            finish_memory(srv, size, name, rows)
            return
        progress(size, name, "idle: 3 BGSAVEs")
        idle, forks = idle_saves(srv)
        forks_by[(size, name)] = forks
        for k, v in idle.items():
            record(rows, size, name, k, v)

        requests, seconds = load_requests(srv, args, keys, idle["idle_save_s"])
        progress(size, name, "load without save (%d requests, ~%ds)" % (requests, seconds))
        ctl = load_run(srv, args.tools, keys, args, requests, tag + "_nosave", outdir, False,
                       seconds)
        for k in ("rps", "p50_ms", "p99_ms", "p999_ms", "max_ms",
                  "gaps_over_1ms", "max_gap_ms"):
            record(rows, size, name, "nosave_" + k, ctl[k])

        progress(size, name, "load with BGSAVE")
        sv = load_run(srv, args.tools, keys, args, requests, tag + "_save", outdir, True,
                      seconds)
        for k in ("fork_ms", "save_s", "cow_mb", "rps", "p50_ms", "p99_ms", "p999_ms",
                  "max_ms", "gaps_over_1ms", "max_gap_ms", "total_gap_ms",
                  "save_outlasted_load"):
            record(rows, size, name, "save_" + k, sv[k])

        finish_memory(srv, size, name, rows)
    finally:
        srv.stop()
        shutil.rmtree(work, ignore_errors=True)


def finish_memory(srv, size, name, rows):
    mem = srv.info("memory")
    record(rows, size, name, "peak_rss_mb", srv.peak_rss() / MIB)
    record(rows, size, name, "rss_mb", int(mem["used_memory_rss"]) / MIB)
    record(rows, size, name, "fragmentation_ratio", float(mem["mem_fragmentation_ratio"]))


def record(rows, size, variant, metric, value):
    rows.append({"size_gb": size, "variant": variant, "metric": metric, "value": value})


# ---------------------------------------------------------------- output

def machine_info(args):
    def read(path):
        try:
            with open(path) as f:
                return f.read().strip()
        except OSError:
            return "n/a"

    def version(binary):
        try:
            return subprocess.run([binary, "--version"], capture_output=True,
                                  text=True).stdout.strip()
        except OSError:
            return "n/a"
    cpu = "n/a"
    for line in read("/proc/cpuinfo").splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    mem_total = read("/proc/meminfo").splitlines()[0].split()[1]
    try:
        import matplotlib
        mpl = matplotlib.__version__
    except ImportError:
        mpl = "not installed"
    return {
        "date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
        "kernel": platform.release(),
        "cpu": cpu, "cpus": os.cpu_count(),
        "mem_total_gib": round(int(mem_total) / (1 << 20), 1),
        "thp_enabled": read("/sys/kernel/mm/transparent_hugepage/enabled"),
        "thp_defrag": read("/sys/kernel/mm/transparent_hugepage/defrag"),
        "stock": version(os.path.join(args.stock_bin, "redis-server")),
        "redis_afork": version(os.path.join(args.afork_bin, "redis-server")),
        "redis_afork_commit": git_commit(),
        "python": platform.python_version(), "matplotlib": mpl,
        "value_size": args.value_size, "load_seconds": args.load_seconds,
        "variants": {k: VARIANTS[k][1] for k in args.variants},
        "scenario": args.scenario, "rounds": args.rounds,
    }


def git_commit():
    try:
        return subprocess.run(["git", "-C", HERE, "describe", "--always", "--dirty"],
                              capture_output=True, text=True).stdout.strip() or "n/a"
    except OSError:
        return "n/a"


def write_csv(rows, path):
    with open(path, "w") as f:
        f.write("size_gb,variant,metric,value\n")
        for r in rows:
            f.write("%s,%s,%s,%s\n" % (fmt_size(r["size_gb"]), r["variant"], r["metric"],
                                       fmt_value(r["value"])))


def fmt_value(v):
    if isinstance(v, float):
        return "%.3f" % v
    return str(v)


# metric -> label in results.md; the order of the table.
LABELS = [
    ("used_memory_mb", "dataset (used_memory, MB)"),
    ("keys", "keys"),
    ("idle_fork_ms_median", "idle fork, parent blocked (ms, median of 3)"),
    ("idle_fork_ms_max", "idle fork, parent blocked (ms, max of 3)"),
    ("idle_child_ready_ms_median", "idle fork, child ready (ms, median)"),
    ("idle_save_s", "idle save duration (s)"),
    ("idle_cow_mb", "idle COW (MB)"),
    ("nosave_rps", "no save: SET throughput (req/s)"),
    ("nosave_p50_ms", "no save: p50 (ms)"),
    ("nosave_p99_ms", "no save: p99 (ms)"),
    ("nosave_p999_ms", "no save: p99.9 (ms)"),
    ("nosave_max_ms", "no save: max (ms)"),
    ("nosave_gaps_over_1ms", "no save: PING gaps > 1 ms"),
    ("nosave_max_gap_ms", "no save: longest PING gap (ms)"),
    ("save_fork_ms", "under load: fork, parent blocked (ms)"),
    ("save_save_s", "under load: save duration (s)"),
    ("save_cow_mb", "under load: COW (MB)"),
    ("save_rps", "with save: SET throughput (req/s)"),
    ("save_p50_ms", "with save: p50 (ms)"),
    ("save_p99_ms", "with save: p99 (ms)"),
    ("save_p999_ms", "with save: p99.9 (ms)"),
    ("save_max_ms", "with save: max (ms)"),
    ("save_gaps_over_1ms", "during save: PING gaps > 1 ms"),
    ("save_max_gap_ms", "during save: longest PING gap (ms)"),
    ("save_total_gap_ms", "during save: sum of PING gaps > 1 ms (ms)"),
    ("first_fork_ms", "first fork, idle (ms)"),
    ("steady_fork_ms_median", "steady state: fork, parent blocked (ms, median of rounds 2+)"),
    ("steady_fork_ms_max", "steady state: fork, parent blocked (ms, max of rounds 2+)"),
    ("peak_rss_mb", "peak RSS of the server (MB)"),
    ("rss_mb", "RSS at the end (MB)"),
    ("fragmentation_ratio", "fragmentation ratio (RSS / used)"),
]


ROUND_LABELS = [
    ("fork_ms", "fork, parent blocked (ms)"), ("max_ms", "with save: max (ms)"),
    ("p999_ms", "with save: p99.9 (ms)"), ("p99_ms", "with save: p99 (ms)"),
    ("rps", "with save: throughput (req/s)"), ("cow_mb", "COW (MB)"),
    ("save_s", "save duration (s)"), ("collapse_wait_s", "re-collapse after the save (s)"),
    ("huge_after_mb", "huge after the re-collapse (MB)"),
]


def all_labels(rows):
    """The fixed labels, then one block per steady-state round."""
    labels = list(LABELS)
    rounds = sorted({int(r["metric"][5:].split("_")[0]) for r in rows
                     if r["metric"].startswith("round")})
    for rnd in rounds:
        labels += [("round%d_%s" % (rnd, k), "round %d: %s" % (rnd, text))
                   for k, text in ROUND_LABELS]
    return labels


def write_markdown(rows, machine, variants, sizes, path):
    val = {(r["size_gb"], r["variant"], r["metric"]): r["value"] for r in rows}
    base = variants[0]
    lines = ["# Fork cost (%s scenario): %s side by side"
             % (machine["scenario"], ", ".join(variants)), ""]
    lines += ["Machine: kernel %s, %s x %s, %.1f GiB RAM, THP enabled `%s`, defrag `%s`."
              % (machine["kernel"], machine["cpus"], machine["cpu"], machine["mem_total_gib"],
                 machine["thp_enabled"], machine["thp_defrag"]),
              "Servers: stock `%s`; redis-afork `%s` (commit %s). Values %d bytes, "
              "load runs ~%d s: `redis-benchmark -t set -r <keys> -d %d -c 50 -P 4`."
              % (machine["stock"], machine["redis_afork"], machine["redis_afork_commit"],
                 machine["value_size"], machine["load_seconds"], machine["value_size"]),
              "Ratio = variant / %s (below 1: the variant is lower)." % base, ""]
    for size in sizes:
        lines += ["## %s GB" % fmt_size(size), ""]
        head = ["metric"] + list(variants) + ["%s / %s" % (v, base) for v in variants[1:]]
        lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for metric, label in all_labels(rows):
            vals = [val.get((size, v, metric)) for v in variants]
            if all(x is None for x in vals):
                continue
            cells = [label] + [fmt_cell(x) for x in vals]
            for x in vals[1:]:
                b = vals[0]
                cells.append("%.2f" % (x / b) if x is not None and b else "")
            lines.append("| " + " | ".join(cells) + " |")
        outlasted = [v for v in variants if val.get((size, v, "save_save_outlasted_load"))]
        if outlasted:
            lines += ["", "Note: the save outlasted the load for %s; raise "
                      "--load-seconds." % ", ".join(outlasted)]
        lines.append("")
    with open(path, "w") as f:
        f.write("\n".join(lines))


def fmt_cell(x):
    if x is None:
        return "n/a"
    if isinstance(x, int):
        return str(x)
    if abs(x) >= 1000:
        return "%.0f" % x
    if abs(x) >= 10:
        return "%.1f" % x
    return "%.2f" % x


# ---------------------------------------------------------------- main

def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", default="1", help="dataset sizes in GB, e.g. '1 4 8'")
    p.add_argument("--scenario", default="fork", choices=sorted(SCENARIOS),
                   help="fork: idle forks and one save under load; steady: rounds of "
                        "load + save (steady state, fork-thp)")
    p.add_argument("--variants", default=None, help="default: per scenario")
    p.add_argument("--rounds", type=int, default=5, help="steady scenario rounds")
    p.add_argument("--afork-bin", required=True, help="folder with redis-afork's programs")
    p.add_argument("--stock-bin", required=True, help="folder with stock's redis-server")
    p.add_argument("--out", required=True, help="results folder (created)")
    p.add_argument("--value-size", type=int, default=256)
    p.add_argument("--load-seconds", type=float, default=15)
    p.add_argument("--scratch", default=None, help="where servers keep their RDB files")
    a = p.parse_args()
    try:
        a.sizes = [float(s) for s in a.sizes.split()]
    except ValueError:
        p.error("--sizes: %r is not a list of numbers (GB)" % a.sizes)
    if not a.sizes or any(s <= 0 for s in a.sizes):
        p.error("--sizes: give one or more sizes above 0 (GB)")
    a.variants = (a.variants or SCENARIOS[a.scenario]).split()
    for v in a.variants:
        if v not in VARIANTS:
            p.error("--variants: unknown variant %r (known: %s)" % (v, ", ".join(VARIANTS)))
    a.tools = a.afork_bin
    a.keys_by_size = {}
    for d in (a.afork_bin, a.stock_bin):
        if not os.access(os.path.join(d, "redis-server"), os.X_OK):
            p.error("no redis-server in %s (run make and make stock)" % d)
    return a


def main():
    args = parse_args()
    refuse_sizes_that_do_not_fit(args.sizes)
    os.makedirs(args.out, exist_ok=True)
    machine = machine_info(args)
    with open(os.path.join(args.out, "machine.json"), "w") as f:
        json.dump(machine, f, indent=2)
    rows, forks_by = [], {}
    for size in args.sizes:
        for name in args.variants:
            run_variant(size, name, args, args.out, rows, forks_by)
            write_csv(rows, os.path.join(args.out, "results.csv"))
    write_markdown(rows, machine, args.variants, args.sizes,
                   os.path.join(args.out, "results.md"))
    progress(args.sizes[-1], "all", "plots")
    import plots
    plots.draw(args.out)
    progress(args.sizes[-1], "all", "done: %s/results.md" % args.out)


if __name__ == "__main__":
    main()
