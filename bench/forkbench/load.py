"""The write load (redis-benchmark) with the PING probe beside it, with or without a save."""
import gzip
import math
import os
import re
import signal
import subprocess
import sys
import threading
import time

from .server import fork_fields, cow_mb, bgsave_and_wait, fork_started_at

# bench/, so that a child Python finds the package.
PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


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


def start_module(module, argv, **popen):
    """python3 -m forkbench.<module> ARGV in a process of its own, which finds
    the package wherever the bench was started from (popen: subprocess.Popen's
    options)."""
    env = dict(os.environ, PYTHONPATH=PACKAGE_PARENT)
    return subprocess.Popen([sys.executable, "-m", "forkbench." + module] + list(argv),
                            env=env, **popen)


def start_probe(port, path):
    """The PING probe (forkbench.probe) in a process of its own, on its own
    connection; returns once it has connected."""
    proc = start_module("probe", [str(port), path], stdout=subprocess.PIPE, text=True)
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


# redis-benchmark's live line, printed every 250 ms (ending in \r): the
# rate over the last interval, then the run's overall rate.
LIVE_RATE = re.compile(r"rps=([0-9.]+) \(overall: ([0-9.]+)\)")


class Benchmark:
    """redis-benchmark running, its output read as it comes so that each
    live line gets the time it arrived (window_rps: the throughput during
    part of the run)."""

    def __init__(self, cmd):
        self.t_start = time.time()
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self.chunks = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        fd = self.proc.stdout.fileno()
        while True:
            data = os.read(fd, 65536)
            if not data:
                self.t_end = time.time()
                return
            self.chunks.append((time.time(), data.decode(errors="replace")))

    def wait(self):
        """The whole output, once the run is over."""
        self.reader.join()
        self.proc.wait()
        return "".join(text for _, text in self.chunks)

    def live(self, requests):
        """[(time, rate, overall)]: the start, every live line, and the
        end (close_live), once the run is over."""
        return close_live([(self.t_start, None, None)] + live_rates(self.chunks),
                          self.t_end, requests)


def live_rates(chunks):
    """[(unix time, requests/s over the interval ending then, overall
    requests/s since the start)] from the timed chunks of redis-benchmark's
    output; a line cut across two chunks counts when its end arrives."""
    out, pending = [], ""
    for t, text in chunks:
        pending += text
        parts = re.split(r"[\r\n]", pending)
        pending = parts.pop()
        for line in parts:
            m = LIVE_RATE.search(line)
            if m:
                out.append((t, float(m.group(1)), float(m.group(2))))
    return out


def close_live(live, t_end, requests):
    """The live rates with the last stretch added, from the last line to
    the load's end, at the rate that completes `requests` (the last line's
    overall rate times its time since the start says how many were done):
    a window near the end, or a run shorter than one line's interval, is
    covered too."""
    t_start, t_last = live[0][0], live[-1][0]
    done = live[-1][2] * (t_last - t_start) if len(live) > 1 else 0.0
    if t_end <= t_last:
        return list(live)
    return list(live) + [(t_end, max(0.0, requests - done) / (t_end - t_last), None)]


def window_rps(live, since, until):
    """Requests per second between `since` and `until`, from [(time,
    rate, ...)] (Benchmark.live: the first entry only marks the start):
    each rate covers the interval from the entry before it to its own time,
    weighted by how much of that interval lies in the window; None when no
    interval does (a window after the load)."""
    done = covered = 0.0
    for (t0, *_), (t1, rate, *_) in zip(live, live[1:]):
        overlap = min(t1, until) - max(t0, since)
        if overlap > 0:
            done += rate * overlap
            covered += overlap
    return done / covered if covered > 0 else None


def ping_percentile(samples, q, since=None, until=None):
    """The q-th percentile (0-100) of the PING round trips in the window
    (as gap_summary counts them), None without any."""
    rtts = sorted(r for t, r in samples
                  if (since is None or t + r / 1000.0 >= since)
                  and (until is None or t <= until))
    if not rtts:
        return None
    return rtts[min(len(rtts) - 1, max(0, int(math.ceil(q / 100.0 * len(rtts))) - 1))]


class LoadRun:
    """The PING probe and the write load on one server, started together;
    what happens meanwhile (a save, a rewrite, a replica's sync) is the
    caller's. finish() waits for the load and returns its figures and the
    probe's samples."""

    def __init__(self, srv, args, keys, requests, tag):
        self.requests = requests
        self.probe_csv = os.path.join(args.out, "probe_%s.csv.gz" % tag)
        self.probe = start_probe(srv.port, self.probe_csv)
        self.bench = Benchmark(benchmark_cmd(args.tools, srv.port, keys, args.value_size,
                                             requests))

    def finish(self):
        """(redis-benchmark's figures, probe samples, when the load ended)."""
        out = self.bench.wait()
        self.live = self.bench.live(self.requests)
        time.sleep(0.3)
        samples = stop_probe(self.probe, self.probe_csv)
        # redis-benchmark's own end (its output closed), not this call's
        # time: a save or sync waited for before this call may have
        # outlasted the load, and the figures say so.
        return parse_benchmark(out), samples, self.bench.t_end


def load_run(srv, args, keys, requests, tag, with_save, seconds):
    """One redis-benchmark run of about `seconds`, a BGSAVE a third of the
    way in if asked."""
    run = LoadRun(srv, args, keys, requests, tag)
    t_save = t_done = None
    if with_save:
        time.sleep(seconds / 3.0)
        t_save, t_done = bgsave_and_wait(srv, poll=0.05)
    res, samples, t_end = run.finish()
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


def load_requests(srv, args, keys, idle_save_s, seconds=None):
    """Requests for a run long enough that a save under load (about twice
    the idle one) ends before the load, when the BGSAVE comes a third in
    (or for `seconds`, when given)."""
    if seconds is None:
        seconds = max(args.load_seconds, 3.0 * idle_save_s)
    rate = calibrate(srv, args, keys)
    return max(20000, int(rate * seconds)), seconds

