"""make bench-stalls: what the server's main thread was doing during the
worst client stalls of a save.

One server, one size: populate, a first idle BGSAVE, a no-save control run
of the steady load, then --rounds rounds of {SET load over the whole
keyspace, BGSAVE a third of the way in, wait for the re-collapse} -- the
steady scenario of make bench, on the same code. Meanwhile:

- `perf record -k mono -g -p PID -e cpu-clock -e sched:sched_switch`
  on the server (threads and save children): the main thread's on-CPU
  stacks, ~1 per ms, and where it left the CPU and why (prev_state);
- `perf record -a -e sched:sched_switch` without stacks: who held each
  CPU while the main thread waited (--no-system to skip);
- /proc/vmstat before and after every run (THP, compaction, faults);
- the host's steal time per CPU from /proc/stat every 10 ms
  (steal.csv.gz): on a VM, time the hypervisor took the vCPU away looks
  like time on the CPU from inside, so each stall gets its steal beside;
- make bench's PING probe, every round trip with its time.

The control and every round load the server for the same time, long
enough to cover the save and the re-collapse after it
(phases.steady_load_seconds; --load-seconds is the least).

Then each of the --top worst round trips of the save runs (and of the
control, for comparison) is explained from the main thread's timeline over
that round trip: milliseconds on CPU by kernel path class (page fault with
COW copy, huge page split, huge zeroing, compaction, mmap lock, ...),
milliseconds off CPU by reason (preempted while runnable: by whom;
blocked: at which kernel function), and milliseconds idle in epoll (the
server was ready; the delay was elsewhere). Written to DIR/stalls.md and
DIR/stalls.json; DIR/vmstat.csv has the deltas per run.

    python3 -m forkbench.stalls --afork-bin B --stock-bin B --out DIR \
        [--variant afork-thp-collapse] [--size 4] [--rounds 5] [--top 10]

Needs root (or perf_event_paranoid <= 1) and perf (Debian linux-perf,
installed by utils/install-deps.sh bench).
"""
import argparse
import bisect
import collections
import gzip
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time

from .load import load_requests, load_run
from .phases import (collapse_counters, collapse_figures, idle_saves, steady_load_seconds,
                     wait_collapse)
from .progress import START
from .server import populate, start_server
from .variants import GIB, VARIANTS

VMSTAT_KEYS = ("thp_fault_alloc", "thp_fault_fallback", "thp_split_pmd",
               "thp_deferred_split_page", "thp_collapse_alloc", "thp_split_page",
               "compact_stall", "compact_fail", "compact_success",
               "pgmajfault", "pgfault", "thp_zero_page_alloc",
               "nr_anon_transparent_hugepages", "pgfree", "pgalloc_normal")

# Kernel functions that name what the main thread was doing, most specific
# first: the first one found in a stack (innermost first) gives its class.
CLASSES = (
    ("compaction", ("compact_zone", "try_to_compact_pages", "__alloc_pages_direct_compact",
                    "isolate_migratepages", "migrate_pages")),
    ("direct reclaim", ("try_to_free_pages", "shrink_node", "__alloc_pages_direct_reclaim")),
    ("huge page split", ("__split_huge_pmd", "split_huge_pmd", "__split_huge_page",
                         "split_folio", "deferred_split_scan")),
    ("huge page zeroing", ("clear_huge_page", "folio_zero_user", "clear_subpage")),
    ("huge page fault", ("do_huge_pmd_anonymous_page", "do_huge_pmd_wp_page",
                         "vma_alloc_folio", "__do_huge_pmd_anonymous_page")),
    ("COW copy", ("wp_page_copy", "do_wp_page", "copy_mc_to_kernel", "copy_user_highpage",
                  "__wp_page_copy_user")),
    ("mmap lock", ("rwsem_down_read_slowpath", "rwsem_down_write_slowpath",
                   "lock_mm_and_find_vma", "mmap_read_lock", "mmap_write_lock")),
    ("TLB flush", ("flush_tlb_mm_range", "smp_call_function_many_cond",
                   "native_flush_tlb_multi", "flush_tlb_func")),
    ("unmap/purge", ("zap_pte_range", "unmap_page_range", "do_madvise", "madvise_vma_behavior",
                     "__x64_sys_munmap", "do_vmi_munmap")),
    ("page fault (other)", ("do_anonymous_page", "handle_mm_fault", "exc_page_fault",
                            "do_user_addr_fault")),
    ("fork", ("copy_process", "dup_mmap", "copy_page_range", "kernel_clone")),
    ("network I/O", ("tcp_sendmsg", "tcp_recvmsg", "sock_write_iter", "sock_read_iter",
                     "__x64_sys_write", "__x64_sys_read", "__x64_sys_sendto",
                     "__x64_sys_recvfrom")),
    ("epoll", ("ep_poll", "do_epoll_wait")),
    ("other syscall", ("do_syscall_64",)),
    ("interrupt", ("asm_sysvec_apic_timer_interrupt", "asm_common_interrupt",
                   "sysvec_call_function", "irq_exit_rcu")),
)


def classify(stack):
    names = set(strip(stack))
    for name, funcs in CLASSES:
        if names.intersection(funcs):
            return name
    return "user space" if not stack or not stack[0].startswith("k:") else "kernel (other)"


def kernel_frames(stack, n=6):
    return [f for f in stack if f not in ("__schedule", "schedule", "finish_task_switch.isra.0",
                                          "preempt_schedule_irq", "schedule_preempt_disabled")][:n]


# ---------------------------------------------------------------- perf

def start_perf(out, pid, system):
    """perf.data: on-CPU stacks of the server (-p: its threads and
    children); switch.data: every switch-out of the main thread and of
    khugepaged, with stacks (system-wide with a filter: a -p record misses
    some); sched.data: every switch, without stacks (who held each CPU)."""
    cmds = [["-p", str(pid), "-g", "-e", "cpu-clock", "-F", "997", "-o", "perf.data"],
            ["-a", "-g", "-e", "sched:sched_switch", "--filter",
             'prev_pid == %d || prev_comm == "khugepaged"' % pid, "-o", "switch.data"]]
    if system:
        cmds.append(["-a", "-e", "sched:sched_switch", "-o", "sched.data"])
    procs = []
    for c in cmds:
        c[-1] = os.path.join(out, c[-1])
        procs.append(subprocess.Popen(["perf", "record", "-q", "-k", "mono", "-m", "1024"] + c,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                      text=True))
    time.sleep(1.5)
    for p in procs:
        if p.poll() is not None:
            raise RuntimeError("perf record failed: %s" % p.stderr.read().strip())
    return procs


def stop_perf(procs):
    for p in procs:
        p.send_signal(signal.SIGINT)
    for p in procs:
        p.wait(timeout=600)


HEAD = re.compile(r"^\s*(\S.*?)\s+(\d+)/(\d+)\s+(?:\[(\d+)\]\s+)?(\d+\.\d+):\s+(\S+):\s*(.*)$")
FRAME = re.compile(r"^\s+([0-9a-f]+)\s+(\S+)")
SWITCH = re.compile(r"prev_comm=(.*) prev_pid=(\d+) prev_prio=\d+ prev_state=(\S+) ==> "
                    r"next_comm=(.*) next_pid=(\d+)")


def perf_events(path, cpu=False):
    """(time, pid, tid, cpu, event, trace, stack) from perf script, stack
    innermost first, kernel frames as 'k:name'; cpu only for -a records."""
    fields = "comm,pid,tid,%stime,event,trace,ip,sym" % ("cpu," if cpu else "")
    cmd = ["perf", "script", "-i", path, "-F", fields, "--ns"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            errors="replace")
    ev = None
    for line in proc.stdout:
        m = HEAD.match(line)
        if m:
            if ev:
                yield ev
            ev = (float(m.group(5)), int(m.group(2)), int(m.group(3)), int(m.group(4) or -1),
                  m.group(6).rstrip(":"), m.group(7), [])
            continue
        f = FRAME.match(line)
        if f and ev is not None:
            addr = int(f.group(1), 16)
            ev[6].append(("k:" if addr >= 0xffff800000000000 else "") + f.group(2))
    if ev:
        yield ev
    proc.wait()


def strip(stack):
    return [f[2:] if f.startswith("k:") else f for f in stack]


class MainThread:
    """The main thread's timeline: on-CPU samples (perf.data) and off-CPU
    spans. perf -p sees only the thread's own switch-outs (with a stack);
    the switch-in comes from the system-wide record when there is one."""

    def __init__(self, tid):
        self.tid = tid
        self.samples = []   # (t, class, frames)
        self.outs = []      # (t, state, class, frames): switch-outs with stacks
        self.off = []       # (start, end, state, class, frames)
        self.khugepaged = []  # (t, state, frames): khugepaged's switch-outs

    def add(self, t, tid, event, trace, stack):
        if tid != self.tid and not trace.startswith("prev_comm=khugepaged "):
            return
        if event == "cpu-clock":
            self.samples.append((t, classify(stack), kernel_frames(strip(stack))))
            return
        m = SWITCH.search(trace) if event == "sched:sched_switch" else None
        if m and m.group(1) == "khugepaged":
            self.khugepaged.append((t, m.group(3), kernel_frames(strip(stack), 8)))
        elif m and int(m.group(2)) == self.tid:
            state = m.group(3)
            self.outs.append((t, "preempted (runnable)" if state.startswith("R") else
                              "blocked (%s)" % state, classify(stack), kernel_frames(strip(stack))))

    def close_spans(self, switch_ins):
        """Pair each switch-out with the next switch-in (sorted times)."""
        for t, state, cls, frames in self.outs:
            i = bisect.bisect_right(switch_ins, t)
            if i < len(switch_ins):
                self.off.append((t, switch_ins[i], state, cls, frames))


class CpuHolders:
    """From the system-wide sched_switch: who ran on each CPU when."""

    def __init__(self, tid):
        self.tid = tid
        self.spans = collections.defaultdict(list)   # cpu -> [(start, comm, pid)]
        self.switch_ins = []                         # when tid got a CPU

    def add(self, t, cpu, trace):
        m = SWITCH.search(trace)
        if m:
            self.spans[cpu].append((t, m.group(4), int(m.group(5))))
            if int(m.group(5)) == self.tid:
                self.switch_ins.append(t)

    def during(self, t0, t1, exclude_pid):
        """comm -> ms of [t0, t1] it held a CPU (all CPUs)."""
        out = collections.Counter()
        if not hasattr(self, "_times"):
            self._times = {cpu: [s[0] for s in spans] for cpu, spans in self.spans.items()}
        for cpu, spans in self.spans.items():
            times = self._times[cpu]
            i = max(0, bisect.bisect_right(times, t0) - 1)
            while i < len(spans) and spans[i][0] < t1:
                start = max(t0, spans[i][0])
                end = min(t1, spans[i + 1][0] if i + 1 < len(spans) else t1)
                comm, pid = spans[i][1], spans[i][2]
                if end > start and pid != exclude_pid and pid != 0:
                    out[comm] += (end - start) * 1000
                i += 1
        return out


def explain(main, holders, t0, t1):
    """What the main thread did in [t0, t1] (monotonic seconds)."""
    on = collections.Counter()
    stacks = collections.Counter()
    if not hasattr(main, "sample_times"):
        main.sample_times = [s[0] for s in main.samples]
        main.off.sort()
        main.off_starts = [o[0] for o in main.off]
    times = main.sample_times
    i = bisect.bisect_left(times, t0)
    period = 1.0 / 997 * 1000
    while i < len(main.samples) and main.samples[i][0] <= t1:
        _, cls, frames = main.samples[i]
        on[cls] += period
        stacks[(cls, " < ".join(frames[:5]))] += period
        i += 1
    off = collections.Counter()
    # Off-CPU spans are short and disjoint: those that start from 10 s
    # before t0 (a longer one is not a stall of this run) up to t1.
    lo = bisect.bisect_left(main.off_starts, t0 - 10.0)
    hi = bisect.bisect_right(main.off_starts, t1)
    for start, end, state, cls, frames in main.off[lo:hi]:
        if end < t0 or start > t1:
            continue
        ms = (min(end, t1) - max(start, t0)) * 1000
        key = "%s in %s" % (state, cls) if not state.startswith("preempted") else state
        off[key] += ms
        if not state.startswith("preempted"):
            stacks[("off: " + state, " < ".join(frames[:5]))] += ms
    held = holders.during(t0, t1, main.tid) if holders else {}
    khuge = [(round((t - t0) * 1000, 1), st, " < ".join(fr[:6])) for t, st, fr in main.khugepaged
             if t0 - 0.05 <= t <= t1]
    return {"khugepaged": khuge[:4], "on_cpu_ms": dict(on), "off_cpu_ms": dict(off), "top_stacks":
            [(k[0], k[1], round(v, 1)) for k, v in stacks.most_common(3)],
            "others_on_cpu_ms": dict(collections.Counter(held).most_common(4))}


# ---------------------------------------------------------------- host steal

class StealSampler:
    """Steal time per CPU from /proc/stat, read every `period` s by a
    thread: the time the hypervisor ran something else on the VM's vCPU.
    Inside the guest that time looks like time on the CPU (perf samples it
    as whatever was running), so it is the test of "the host took the CPU"
    for a stall that perf shows as on-CPU work. USER_HZ ticks: 10 ms
    steps."""

    def __init__(self, path, period=0.01):
        self.path, self.period = path, period
        self.rows = []
        self.tick_ms = 1000.0 / os.sysconf("SC_CLK_TCK")
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self.loop, daemon=True)

    def read(self):
        with open("/proc/stat") as f:
            return [int(line.split()[8]) for line in f
                    if line.startswith("cpu") and line[3].isdigit()]

    def loop(self):
        while not self.stop_event.is_set():
            self.rows.append((time.time(), self.read()))
            time.sleep(self.period)

    def start(self):
        self.thread.start()
        return self

    def stop(self):
        self.stop_event.set()
        self.thread.join()
        with gzip.open(self.path, "wt") as f:
            f.write("unix_time," + ",".join("cpu%d_steal_ms" % i
                                            for i in range(len(self.rows[0][1]))) + "\n")
            for t, ticks in self.rows:
                f.write("%.4f,%s\n" % (t, ",".join("%.0f" % (v * self.tick_ms) for v in ticks)))


class Steal:
    """steal.csv.gz read back: steal ms per CPU over a span of unix time."""

    def __init__(self, path):
        self.t, self.ms = [], []
        if not os.path.exists(path):
            return
        with gzip.open(path, "rt") as f:
            next(f)
            for line in f:
                v = line.split(",")
                self.t.append(float(v[0]))
                self.ms.append([float(x) for x in v[1:]])

    def at(self, t, cpu):
        i = bisect.bisect_left(self.t, t)
        if i == 0 or i == len(self.t):
            return self.ms[min(i, len(self.t) - 1)][cpu]
        t0, t1 = self.t[i - 1], self.t[i]
        a, b = self.ms[i - 1][cpu], self.ms[i][cpu]
        return a + (b - a) * (t - t0) / (t1 - t0) if t1 > t0 else b

    def during(self, t0, t1):
        """(the most any one CPU lost, all CPUs together) in ms, or None."""
        if not self.t or t1 < self.t[0] or t0 > self.t[-1]:
            return None
        per_cpu = [self.at(t1, c) - self.at(t0, c) for c in range(len(self.ms[0]))]
        return max(per_cpu), sum(per_cpu)


# ---------------------------------------------------------------- the runs

KHUGEPAGED = "/sys/kernel/mm/transparent_hugepage/khugepaged/"


def vmstat():
    out = {}
    for k in ("pages_collapsed", "full_scans"):
        try:
            with open(KHUGEPAGED + k) as f:
                out["khugepaged_" + k] = int(f.read())
        except OSError:
            pass
    with open("/proc/vmstat") as f:
        for line in f:
            k, v = line.split()
            if k in VMSTAT_KEYS:
                out[k] = int(v)
    return out


def clock_offset():
    """unix time - monotonic time, the smallest-bracket estimate."""
    best = None
    for _ in range(50):
        a = time.monotonic()
        u = time.time()
        b = time.monotonic()
        if best is None or b - a < best[0]:
            best = (b - a, u - (a + b) / 2)
    return best[1]


def read_probe(path):
    with gzip.open(path, "rt") as f:
        next(f)
        return [tuple(map(float, line.split(","))) for line in f]


def run(args):
    srv, work = start_server(args.variant, args)
    runs = []
    try:
        say("%s: populating %g GB" % (args.variant, args.size))
        keys = populate(srv, args.size, args.value_size)
        say("%d keys; first (idle) BGSAVE" % keys)
        passes = int(srv.info("fork").get("fork_thp_collapse_passes", 0))
        idle = idle_saves(srv, 1)
        wait_collapse(srv, passes)   # the control after that pass, as make bench
        # As make bench's steady scenario: the load covers the re-collapse.
        used_gb = int(srv.info("memory")["used_memory"]) / float(GIB)
        seconds = steady_load_seconds(args, used_gb, idle["idle_save_s"])
        requests, seconds = load_requests(srv, args, keys, idle["idle_save_s"], seconds)
        offset = clock_offset()
        with open(os.path.join(args.out, "server.pid"), "w") as f:
            f.write("%d\n" % srv.proc.pid)
        perf = start_perf(args.out, srv.proc.pid, not args.no_system) if not args.no_perf else []
        steal = StealSampler(os.path.join(args.out, "steal.csv.gz")).start()
        try:
            plan = [("control", False)] + [("round%d" % r, True) for r in range(1, args.rounds + 1)]
            for tag, with_save in plan:
                say("%s (%d requests, ~%.0f s)" % (tag, requests, seconds))
                f = srv.info("fork")
                passes = int(f.get("fork_thp_collapse_passes", 0))
                counters = collapse_counters(f)
                before = vmstat()
                res = load_run(srv, args, keys, requests, tag, with_save, seconds)
                after = vmstat()
                if with_save:
                    res["collapse_wait_s"] = wait_collapse(srv, passes)
                    res.update(collapse_figures(counters,
                                                      collapse_counters(srv.info("fork"))))
                res["vmstat"] = {k: after[k] - before.get(k, 0) for k in after}
                res["tag"] = tag
                res["save"] = with_save
                runs.append(res)
        finally:
            stop_perf(perf)
            steal.stop()
        return runs, offset, keys
    finally:
        srv.stop()
        shutil.rmtree(work, ignore_errors=True)


def run_with_khugepaged(args):
    if not args.pause_khugepaged:
        return run(args)
    path = KHUGEPAGED + "scan_sleep_millisecs"
    with open(path) as f:
        saved = f.read().strip()
    with open(path, "w") as f:
        f.write("3600000\n")
    say("khugepaged paused (scan_sleep_millisecs 3600000, was %s)" % saved)
    try:
        return run(args)
    finally:
        with open(path, "w") as f:
            f.write(saved + "\n")


def say(text):
    print("[stalls %6.1fs] %s" % (time.time() - START, text), flush=True)


def cpu_by_class(args, r, main, offset):
    """The main thread's on-CPU ms by class: in the first second after the
    fork, and over the whole save (or the whole control run)."""
    marks = os.path.join(args.out, "probe_%s.bgsave" % r["tag"])
    probe = read_probe(os.path.join(args.out, "probe_%s.csv.gz" % r["tag"]))
    spans = {"run": (probe[0][0], probe[-1][0])}
    if os.path.exists(marks):
        with open(marks) as f:
            fork_at = [float(x) for x in f.read().split()][-1]
        spans = {"first_second": (fork_at, fork_at + 1.0),
                 "save": (fork_at, fork_at + r.get("save_s", 0))}
    out = {}
    period = 1000.0 / 997
    times = [s[0] for s in main.samples]
    for name, (a, b) in spans.items():
        c = collections.Counter()
        i = bisect.bisect_left(times, a - offset)
        while i < len(times) and times[i] <= b - offset:
            c[main.samples[i][1]] += period
            i += 1
        out[name] = {k: round(v, 1) for k, v in c.most_common()}
    return out


def runs_pid(args):
    with open(os.path.join(args.out, "server.pid")) as f:
        return int(f.read())


def analyse(args, runs, offset):
    main = holders = None
    worst = []
    steal = Steal(os.path.join(args.out, "steal.csv.gz"))
    for r in runs:
        samples = read_probe(os.path.join(args.out, "probe_%s.csv.gz" % r["tag"]))
        fork_at = None
        marks = os.path.join(args.out, "probe_%s.bgsave" % r["tag"])
        if os.path.exists(marks):
            with open(marks) as f:
                vals = [float(x) for x in f.read().split()]
            fork_at = vals[-1]
        top = sorted(samples, key=lambda s: -s[1])[:args.top if r["save"] else 3]
        for t, rtt in top:
            worst.append({"run": r["tag"], "save": r["save"], "rtt_ms": rtt,
                          "t_unix": t, "after_fork_s": (t - fork_at) if fork_at else None,
                          "steal_ms": steal.during(t, t + rtt / 1000.0)})
    if args.no_perf:
        return worst, []
    say("reading perf data")
    main = MainThread(runs_pid(args))
    for name in ("perf.data", "switch.data"):
        for t, p, tid, cpu, event, trace, stack in perf_events(os.path.join(args.out, name)):
            main.add(t, tid, event, trace, stack)
    if not args.no_system and os.path.exists(os.path.join(args.out, "sched.data")):
        holders = CpuHolders(main.tid)
        for t, p, tid, cpu, event, trace, stack in perf_events(os.path.join(args.out,
                                                                          "sched.data"), cpu=True):
            holders.add(t, cpu, trace)
        main.close_spans(sorted(holders.switch_ins))
    for r in runs:
        r["main_cpu"] = cpu_by_class(args, r, main, offset)
    for w in worst:
        t0 = w["t_unix"] - offset
        w.update(explain(main, holders, t0, t0 + w["rtt_ms"] / 1000.0))
    classes = stall_classes(args, runs, main, holders, offset, steal)
    return worst, classes


def dominant(expl):
    """The largest part of a stall's explanation."""
    parts = dict(expl["on_cpu_ms"])
    for k, v in expl["off_cpu_ms"].items():
        parts["off CPU: " + k] = parts.get("off CPU: " + k, 0) + v
    return max(parts.items(), key=lambda kv: kv[1])[0] if parts else "no record"


def stall_classes(args, runs, main, holders, offset, steal):
    """Every PING round trip over --class-ms, by the largest part of what
    the main thread did meanwhile: per class and run kind (control; save
    runs while the child lived, and after it) the count, the median and the
    longest, and how many of them lost half their time or more to host
    steal on one CPU."""
    out = collections.defaultdict(list)
    for r in runs:
        child_end = None
        marks = os.path.join(args.out, "probe_%s.bgsave" % r["tag"])
        if r["save"] and os.path.exists(marks):
            with open(marks) as f:
                child_end = [float(x) for x in f.read().split()][-1] + r.get("save_s", 0)
        for t, rtt in read_probe(os.path.join(args.out, "probe_%s.csv.gz" % r["tag"])):
            if rtt < args.class_ms:
                continue
            kind = ("control" if not r["save"] else "save, child alive"
                    if child_end is None or t < child_end else "save, after the child")
            t0 = t - offset
            st = steal.during(t, t + rtt / 1000.0)
            out[(kind, dominant(explain(main, holders, t0, t0 + rtt / 1000.0)))].append(
                (rtt, st is not None and st[0] >= rtt / 2))
    return [{"kind": k[0], "class": k[1], "count": len(v),
             "median_ms": statistics.median(x[0] for x in v), "max_ms": max(x[0] for x in v),
             "host_steal": sum(1 for x in v if x[1])}
            for k, v in sorted(out.items(), key=lambda kv: (kv[0][0], -max(x[0] for x in kv[1])))]


def fmt_counter(d, unit="ms"):
    return ", ".join("%s %.0f%s" % (k, v, unit) for k, v in
                     sorted(d.items(), key=lambda kv: -kv[1]) if v >= 0.5) or "-"


def report(args, runs, worst, classes, keys):
    with open(os.path.join(args.out, "stalls.json"), "w") as f:
        json.dump({"args": {k: v for k, v in vars(args).items() if k != "peers"},
                   "runs": runs, "worst": worst, "classes": classes, "keys": keys}, f,
                  indent=1, default=str)
    with open(os.path.join(args.out, "vmstat.csv"), "w") as f:
        keys_ = sorted(runs[0]["vmstat"])
        f.write("run,max_ms,fork_ms,cow_mb," + ",".join(keys_) + "\n")
        for r in runs:
            f.write("%s,%s,%s,%s,%s\n" % (r["tag"], r.get("max_ms"), r.get("fork_ms", ""),
                                          r.get("cow_mb", ""),
                                          ",".join(str(r["vmstat"][k]) for k in keys_)))
    lines = ["# Stall attribution: %s, %g GB (%d keys), %d rounds" %
             (args.variant, args.size, keys, args.rounds), "",
             "| run | fork ms | client max ms | PING max ms (child alive; control: all) | "
             "PING max ms (after the child) | COW MB | thp_split_pmd | "
             "thp_fault_alloc | thp_fault_fallback | compact_stall | khugepaged collapses | "
             "thp_collapse_alloc |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in runs:
        v = r["vmstat"]
        after = r.get("after_child_max_gap_ms")
        lines.append("| %s | %s | %.1f | %.1f | %s | %s | %d | %d | %d | %d | %d | %d |" % (
            r["tag"], "%.2f" % r["fork_ms"] if "fork_ms" in r else "-", r["max_ms"],
            r.get("max_gap_ms", 0), "%.1f" % after if after is not None else "-",
            "%.0f" % r["cow_mb"] if "cow_mb" in r else "-",
            v.get("thp_split_pmd", 0), v.get("thp_fault_alloc", 0),
            v.get("thp_fault_fallback", 0), v.get("compact_stall", 0),
            v.get("khugepaged_pages_collapsed", 0), v.get("thp_collapse_alloc", 0)))
    lines += ["", "## Every PING round trip over %g ms, by what took most of it" % args.class_ms,
              "", "| run kind | the main thread was | count | median ms | longest ms | "
              "of which half or more host steal |",
              "|---|---|---|---|---|---|"]
    for c in classes:
        lines.append("| %s | %s | %d | %.1f | %.1f | %d |" % (
            c["kind"], c["class"], c["count"], c["median_ms"], c["max_ms"],
            c.get("host_steal", 0)))
    lines += ["", "## The main thread's CPU time by kernel path (ms)", ""]
    for r in runs:
        for span, c in r.get("main_cpu", {}).items():
            lines.append("- %s, %s: %s" % (r["tag"], span.replace("_", " "), fmt_counter(c)))
    lines += ["", "## The worst PING round trips and the main thread meanwhile", "",
              "| # | run | s after fork | PING ms | host steal ms (one CPU / all) | "
              "main thread on CPU | off CPU | "
              "others on the CPUs | top stack | khugepaged switch-outs (ms into the stall) |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for i, w in enumerate(sorted(worst, key=lambda w: (not w["save"], -w["rtt_ms"])), 1):
        stack = w.get("top_stacks", [])
        st = w.get("steal_ms")
        lines.append("| %d | %s | %s | %.1f | %s | %s | %s | %s | %s | %s |" % (
            i, w["run"], "%.2f" % w["after_fork_s"] if w["after_fork_s"] is not None else "-",
            w["rtt_ms"], "%.0f / %.0f" % tuple(st) if st else "-",
            fmt_counter(w.get("on_cpu_ms", {})), fmt_counter(w.get("off_cpu_ms", {})),
            fmt_counter(w.get("others_on_cpu_ms", {})),
            "%s: %s" % (stack[0][0], stack[0][1]) if stack else "-",
            "; ".join("%s %s %s" % k for k in w.get("khugepaged", [])) or "-"))
    text = "\n".join(lines) + "\n"
    with open(os.path.join(args.out, "stalls.md"), "w") as f:
        f.write(text)
    print(text)


def parse_args():
    p = argparse.ArgumentParser(prog="python3 -m forkbench.stalls",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--afork-bin", required=True)
    p.add_argument("--stock-bin", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--variant", default="afork-thp-collapse", choices=sorted(VARIANTS))
    p.add_argument("--size", type=float, default=4.0, help="GB")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--top", type=int, default=10, help="worst round trips per save run")
    p.add_argument("--class-ms", type=float, default=10.0,
                   help="round trips over this are classified (stall classes table)")
    p.add_argument("--value-size", type=int, default=256)
    p.add_argument("--load-seconds", type=float, default=15,
                   help="the least load length (it covers the save and the re-collapse)")
    p.add_argument("--pass-margin-seconds", type=float, default=3.0,
                   help="how long the load goes on past the expected end of the re-collapse")
    p.add_argument("--calibrate-seconds", type=float, default=1.5)
    p.add_argument("--scratch", default=None)
    p.add_argument("--no-perf", action="store_true", help="the same runs without perf")
    p.add_argument("--no-system", action="store_true", help="no system-wide sched_switch")
    p.add_argument("--pause-khugepaged", action="store_true",
                   help="khugepaged sleeps during the run (scan_sleep_millisecs, restored "
                        "after): is it a cause?")
    p.add_argument("--reanalyse", action="store_true",
                   help="only analyse what an earlier run left in --out")
    a = p.parse_args()
    if a.size <= 0 or a.rounds < 1 or a.top < 1:
        p.error("--size, --rounds and --top must be above 0")
    if a.pass_margin_seconds < 0:
        p.error("--pass-margin-seconds: give 0 or more")
    a.tools = a.afork_bin
    a.peers = {}
    if a.reanalyse and not os.path.exists(os.path.join(a.out, "runs.json")):
        p.error("--reanalyse: no runs.json in %s" % a.out)
    if not a.no_perf and not shutil.which("perf"):
        p.error("perf not found (utils/install-deps.sh bench installs linux-perf)")
    return a


def main():
    args = parse_args()
    os.makedirs(args.out, exist_ok=True)
    saved = os.path.join(args.out, "runs.json")
    if args.reanalyse:
        with open(saved) as f:
            runs, offset, keys = json.load(f)
    else:
        runs, offset, keys = run_with_khugepaged(args)
        with open(saved, "w") as f:
            json.dump([runs, offset, keys], f)
    worst, classes = analyse(args, runs, offset)
    report(args, runs, worst, classes, keys)


if __name__ == "__main__":
    sys.exit(main())
