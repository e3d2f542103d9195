"""forkbench.machine -- what make bench knows about the machine it runs on.

  describe()     kernel, CPU, memory, THP and defrag modes, virtualization
  idle_check()   CPU use by others, steal time and load average over a few
                 seconds before the run (warns when another process competes)
  Monitor        a thread that samples, once a second during the run, the load
                 average, steal time, and the CPU time of processes that are
                 not the bench's own (servers, save children, redis-benchmark
                 and the probe are ours; anything else competes with them)
  pretouch()     touch the memory the run will need once, then free it: on a
                 VM the first touch of guest memory can be slow, and it would
                 otherwise land in the first server's figures

Everything goes to machine.json and the top of results.md (the bench).
"""
import errno
import gzip
import mmap
import os
import platform
import subprocess
import threading
import time

TICK = os.sysconf("SC_CLK_TCK")
GIB = 1 << 30
MIB = 1 << 20
THP = "/sys/kernel/mm/transparent_hugepage/"

# Thresholds for the warnings: another process competes when it uses this
# much CPU on average, the hypervisor when it steals this share of the time.
OTHERS_CPU_WARN = 0.25
STEAL_PCT_WARN = 2.0
LOAD1_WARN = 1.0


def read(path, default="n/a"):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return default


def meminfo(field):
    """A /proc/meminfo field in bytes."""
    for line in read("/proc/meminfo", "").splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no %s in /proc/meminfo" % field)


def host_used():
    """Bytes of this machine's memory in use, as free(1) counts them (neither
    free nor page cache). Unlike a process's RSS, it includes the huge pages
    a process unmapped only partly, which the kernel keeps whole until it
    splits them under memory pressure."""
    total = meminfo("MemTotal")
    return total - sum(meminfo(f) for f in ("MemFree", "Buffers", "Cached", "SReclaimable"))


PARTLY_MAPPED = "/sys/kernel/mm/transparent_hugepage/hugepages-2048kB/stats/nr_anon_partially_mapped"


def partly_mapped_huge():
    """Bytes of anonymous 2 MiB huge pages mapped only in part, machine-wide
    (Linux 6.11+; None before): a process freed some of their 4 KiB pages
    (munmap, MADV_DONTNEED), which leaves its RSS, but the huge page stays
    whole, and in use, until memory pressure makes the kernel split it."""
    v = read(PARTLY_MAPPED, "")
    return int(v) * 2 * MIB if v.isdigit() else None


def settled_host_used(steady=3.0, timeout=20.0, tolerance=8 << 20):
    """host_used() once it has stayed within tolerance for `steady` seconds
    (a server that just exited may still be handing its memory back, and a
    VM's free page reporting takes freed blocks off the free lists for a
    while), or the last read after timeout seconds."""
    reads, deadline = [host_used()], time.time() + timeout
    while time.time() < deadline:
        time.sleep(0.5)
        reads.append(host_used())
        recent = reads[-int(steady / 0.5) - 1:]
        if len(recent) > steady / 0.5 and max(recent) - min(recent) <= tolerance:
            return recent[-1]
    return reads[-1]


def loadavg():
    return [float(x) for x in read("/proc/loadavg", "0 0 0").split()[:3]]


def cpu_model():
    for line in read("/proc/cpuinfo", "").splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "n/a"


def detect_virt(kind):
    """systemd-detect-virt --vm / --container: "none", a name, or None."""
    try:
        return subprocess.run(["systemd-detect-virt", kind], capture_output=True,
                              text=True, timeout=5).stdout.strip() or None
    except (OSError, subprocess.TimeoutExpired):
        return None


def virtualization():
    """The hypervisor and container, as systemd-detect-virt sees them; the
    CPU's 'hypervisor' flag when that tool is missing."""
    flag = "hypervisor flag" if " hypervisor" in read("/proc/cpuinfo", "") else "none"
    return {"vm": detect_virt("--vm") or flag,
            "container": detect_virt("--container") or "n/a"}


def describe():
    """The machine's fixed facts."""
    return {
        "kernel": platform.release(),
        "kernel_build": platform.version(),
        "cpu": cpu_model(),
        "cpus": os.cpu_count(),
        "virtualization": virtualization(),
        "mem_total_gib": round(meminfo("MemTotal") / GIB, 1),
        "mem_available_gib": round(meminfo("MemAvailable") / GIB, 1),
        "swap_total_gib": round(meminfo("SwapTotal") / GIB, 1),
        "thp_enabled": read(THP + "enabled"),
        "thp_defrag": read(THP + "defrag"),
        "thp_khugepaged_defrag": read(THP + "khugepaged/defrag"),
        "overcommit_memory": read("/proc/sys/vm/overcommit_memory"),
    }


# ---------------------------------------------------------------- CPU time

def cpu_ticks():
    """System-wide (busy, steal, total) ticks from /proc/stat."""
    f = [int(x) for x in read("/proc/stat", "cpu 0").splitlines()[0].split()[1:9]]
    f += [0] * (8 - len(f))
    user, nice, system, idle, iowait, irq, softirq, steal = f
    return user + nice + system + irq + softirq, steal, sum(f)


def process_table():
    """pid -> (ppid, utime + stime + cutime + cstime ticks)."""
    table = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                data = f.read()
        except OSError:
            continue
        rest = data[data.rindex(")") + 2:].split()   # field 3 (state) onwards
        table[int(d)] = (int(rest[1]), sum(int(x) for x in rest[11:15]))
    return table


def our_ticks():
    """CPU ticks used by this process and everything it started (live
    descendants, plus the reaped ones their parents or we account for)."""
    table = process_table()
    children = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    total, todo = 0, list(children.get(os.getpid(), []))
    while todo:
        pid = todo.pop()
        total += table[pid][1]
        todo += children.get(pid, [])
    t = os.times()
    own = t.user + t.system + t.children_user + t.children_system
    return total + own * TICK


def sample():
    busy, steal, total = cpu_ticks()
    return {"t": time.time(), "busy": busy, "steal": steal, "total": total,
            "ours": our_ticks(), "load1": loadavg()[0]}


def interval(a, b):
    """CPU use between two samples: steal %, our CPUs, others' CPUs."""
    dt = max(b["t"] - a["t"], 1e-3)
    dtotal = max(b["total"] - a["total"], 1)
    ours = (b["ours"] - a["ours"]) / TICK / dt
    busy = (b["busy"] - a["busy"]) / TICK / dt
    return {"t": b["t"], "load1": b["load1"],
            "steal_pct": 100.0 * (b["steal"] - a["steal"]) / dtotal,
            "ours_cpus": ours, "others_cpus": max(0.0, busy - ours)}


def summarize(intervals):
    """Means and maxima of a list of interval()s."""
    if not intervals:
        return {"samples": 0}
    n = len(intervals)

    def mean(k):
        return round(sum(i[k] for i in intervals) / n, 3)
    return {"samples": n,
            "others_cpus_mean": mean("others_cpus"),
            "others_cpus_max": round(max(i["others_cpus"] for i in intervals), 3),
            "steal_pct_mean": mean("steal_pct"),
            "steal_pct_max": round(max(i["steal_pct"] for i in intervals), 3),
            "load1_max": max(i["load1"] for i in intervals)}


def warnings_for(summary, when):
    """Sentences for what competed with the bench (empty when nothing)."""
    out = []
    if summary.get("others_cpus_mean", 0) > OTHERS_CPU_WARN:
        out.append("%s: other processes used %.2f CPUs on average (max %.2f): "
                   "not an idle machine" % (when, summary["others_cpus_mean"],
                                            summary["others_cpus_max"]))
    if summary.get("steal_pct_mean", 0) > STEAL_PCT_WARN:
        out.append("%s: the hypervisor stole %.1f%% of CPU time on average (max %.1f%%)"
                   % (when, summary["steal_pct_mean"], summary["steal_pct_max"]))
    return out


def idle_check(seconds=2.0):
    """Before the run: others' CPU use and steal over `seconds`, load average."""
    first = sample()
    time.sleep(seconds)
    s = summarize([interval(first, sample())])
    s["loadavg"] = loadavg()
    warn = warnings_for(s, "before the run")
    if s["loadavg"][0] > LOAD1_WARN:
        warn.append("before the run: load average %.2f (1 min) on %d CPUs"
                    % (s["loadavg"][0], os.cpu_count()))
    s["warnings"] = warn
    return s


class Monitor(threading.Thread):
    """Samples the machine once a second until stop(); mark() and since()
    summarize a stretch of the run (a phase, one server's run)."""

    def __init__(self, every=1.0):
        super().__init__(daemon=True)
        self.every = every
        self.intervals = []
        self.halt = threading.Event()

    def run(self):
        prev = sample()
        while not self.halt.wait(self.every):
            cur = sample()
            self.intervals.append(interval(prev, cur))
            prev = cur

    def stop(self):
        self.halt.set()
        self.join(timeout=10)

    def mark(self):
        return len(self.intervals)

    def since(self, mark=0):
        return summarize(self.intervals[mark:])

    def write_csv(self, path):
        """Every sample, gzipped (a line a second: long runs make many)."""
        with gzip.open(path, "wt") as f:
            f.write("unix_time,load1,steal_pct,ours_cpus,others_cpus\n")
            for i in self.intervals:
                f.write("%.1f,%.2f,%.2f,%.3f,%.3f\n" % (i["t"], i["load1"], i["steal_pct"],
                                                          i["ours_cpus"], i["others_cpus"]))


# ------------------------------------------------- free page reporting

# Where a VM's balloon driver reports freed memory to its host, which takes
# it back: the next write to it faults in the host, 4 KiB at a time, which
# makes every new huge page slow. These parameters (of the kernels that have
# them) delay the report: a block is reported once it has stayed free for
# min_free_ms, or at once when more than max_waiting_mib wait.
REPORTING = "/sys/module/page_reporting/parameters"
HOLD_MS = 24 * 3600 * 1000


def reporting_state():
    """min_free_ms and max_waiting_mib now, or None where they are absent."""
    try:
        return {k: int(read(os.path.join(REPORTING, k), "")) for k in
                ("min_free_ms", "max_waiting_mib")}
    except ValueError:
        return None


def set_reporting(state):
    for k, v in state.items():
        write_parameter(os.path.join(REPORTING, k), v)


def hold_reporting():
    """Hold free page reporting back for the run (no free block is reported
    for a day, however many wait): the memory the run touches first stays
    backed by the host, as on a host without reporting. Returns the values to
    put back; ValueError where the machine cannot. A kernel that caps
    min_free_ms gets its cap: a block free for longer is reported."""
    was = reporting_state()
    if was is None:
        raise ValueError("no %s/min_free_ms here: this machine's kernel cannot hold free page "
                         "reporting back" % REPORTING)
    if not os.access(os.path.join(REPORTING, "min_free_ms"), os.W_OK):
        raise ValueError("%s is not writable (run as root)" % REPORTING)
    set_reporting({"max_waiting_mib": int(meminfo("MemTotal") // MIB) * 2})
    set_largest(os.path.join(REPORTING, "min_free_ms"), HOLD_MS)
    return was


def reported_kib():
    """What the VM has reported to its host so far (KiB), or None."""
    try:
        return int(read(os.path.join(REPORTING, "reported_kib"), ""))
    except ValueError:
        return None


def pretouch_reported(nbytes, settle_s=3.0):
    """pretouch(), then how much of the memory the VM reported to its host
    in the settle_s after it (KiB, None where it cannot tell): a kernel
    may report some freed blocks at once under a hold all the same, and a
    server given them waits while the host backs them again."""
    t = pretouch(nbytes)
    before = reported_kib()
    time.sleep(settle_s)
    t["reported_kib"] = None if before is None else reported_kib() - before
    return t


def set_largest(path, want, floor=1000):
    """Write `want` into the parameter at `path`, or, where the kernel caps it
    (EINVAL: some kernels cap min_free_ms at minutes), the largest value it
    takes between `floor` and `want`; return the value written."""
    def takes(v):
        try:
            write_parameter(path, v)
            return True
        except OSError as e:
            if e.errno != errno.EINVAL:
                raise
            return False
    if takes(want):
        return want
    if not takes(floor):
        raise ValueError("%s refuses even %d" % (path, floor))
    lo, hi = floor, want
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if takes(mid) else (lo, mid)
    return lo  # the last value taken; a refused write changes nothing


def write_parameter(path, value):
    with open(path, "w") as f:
        f.write("%d\n" % value)


# ---------------------------------------------------------------- pre-touch

def pretouch(nbytes, keep_free=512 * MIB):
    """Fault in `nbytes` of anonymous memory once (at most MemAvailable minus
    `keep_free`), then give it back; return what was touched and how fast.
    In huge pages where the kernel gives them (MADV_HUGEPAGE): a server
    whose heap is in huge pages is given whole 2 MiB blocks, the kind this
    then backs."""
    nbytes = int(min(nbytes, meminfo("MemAvailable") - keep_free))
    if nbytes <= 0:
        return {"gib": 0.0, "seconds": 0.0}
    t0 = time.time()
    mm = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if hasattr(mm, "madvise") and hasattr(mmap, "MADV_HUGEPAGE"):
        try:
            mm.madvise(mmap.MADV_HUGEPAGE)
        except OSError:
            pass  # THP "never" or absent: 4 KiB pages
    page = mmap.PAGESIZE
    mm[::page] = b"\x01" * len(range(0, nbytes, page))
    mm.close()
    secs = time.time() - t0
    return {"gib": round(nbytes / GIB, 2), "seconds": round(secs, 2),
            "gib_per_s": round(nbytes / GIB / secs, 2) if secs > 0 else None}
