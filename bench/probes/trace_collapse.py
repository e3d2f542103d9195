"""trace_collapse.py -- read a trace of trace_collapse.sh (beside it): how long
each MADV_COLLAPSE of the re-collapse took in the kernel, whether the slow
ones began while the VM's free page reporting ran, and how long the main
thread waited for the mmap lock
(docs/investigations/2026-11-26-fork-thp-collapse-warm-up.md).

    python3 bench/probes/trace_collapse.py TRACE.gz [--slow-ms 15] [--near-ms 100]

Per pass (a run of collapses with no gap over 2 s, over 1000 calls): the
median and longest collapse, the collapses over --slow-ms and how many of
them began within --near-ms after a page_reporting_process work item
started, and the collapse warm-ups (MADV_POPULATE_WRITE)
over 2 ms. Then the mmap-lock waits (rwsem contention) of the threads
named redis-server (the main thread, and jemalloc's) over 3 ms, the longest first, each with
the collapse write-lock holds that overlapped it.
"""
import argparse
import gzip
import re
import statistics

LINE = re.compile(r'^\s*(.+?)-(\d+)\s+\[(\d+)\]\s+\S+\s+([\d.]+):\s+(\w+)[:(]?\s*(.*)$')
COLLAPSE, POPULATE_WRITE = "0x19", "0x17"


def read(path):
    """Collapse calls, warm-ups, reporting starts, main-thread lock waits
    and the collapse thread's write-lock holds, from one trace."""
    calls, warms, reporting, waits, holds = [], [], [], [], []
    entered, waiting, held = None, {}, None
    with gzip.open(path, "rt", errors="replace") as f:
        for line in f:
            m = LINE.match(line)
            if not m:
                continue
            comm, tid, t, ev, rest = m.group(1).strip(), int(m.group(2)), float(m.group(4)), m.group(5), m.group(6)
            if comm == "afork_collapse":
                if ev == "sys_madvise" and not rest.startswith("->"):
                    entered = (t, rest.rsplit("behavior: ", 1)[-1].rstrip(")"))
                elif ev == "sys_madvise" and entered:
                    (calls if entered[1] == COLLAPSE else warms if entered[1] == POPULATE_WRITE else []).append((entered[0], t))
                    entered = None
                elif ev == "mmap_lock_acquire_returned" and "write=true" in rest:
                    held = t
                elif ev == "mmap_lock_released" and "write=true" in rest and held:
                    holds.append((held, t))
                    held = None
            elif ev == "workqueue_execute_start" and "page_reporting_process" in rest:
                reporting.append(t)
            elif comm == "redis-server" and ev == "contention_begin" and ("READ" in rest or "WRITE" in rest):
                waiting[tid] = t
            elif comm == "redis-server" and ev == "contention_end" and tid in waiting:
                b = waiting.pop(tid)
                waits.append((t - b, b, tid))
    return calls, warms, reporting, waits, holds


def passes_of(calls):
    passes = []
    for c in calls:
        if not passes or c[0] - passes[-1][-1][1] > 2:
            passes.append([])
        passes[-1].append(c)
    return [p for p in passes if len(p) > 1000]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--slow-ms", type=float, default=15.0)
    ap.add_argument("--near-ms", type=float, default=100.0)
    a = ap.parse_args()
    calls, warms, reporting, waits, holds = read(a.trace)
    slow, near = a.slow_ms / 1e3, a.near_ms / 1e3
    for p in passes_of(calls):
        ms = [(b - e) * 1e3 for e, b in p]
        slow_calls = [(e, b) for e, b in p if b - e > slow]
        after_rep = sum(1 for e, b in slow_calls if any(0 <= e - r < near or e <= r <= b for r in reporting))
        pw = [w for w in warms if p[0][0] <= w[0] <= p[-1][1]]
        print("pass at %.3f: %d collapses in %.1f s, median %.2f ms, longest %.1f ms; over %g ms: %d, "
              "%d of them begun within %g ms after page reporting started; reporting runs in the pass: %d; "
              "warm-ups over 2 ms: %d of %d" % (
                  p[0][0], len(p), p[-1][1] - p[0][0], statistics.median(ms), max(ms), a.slow_ms,
                  len(slow_calls), after_rep, a.near_ms,
                  sum(1 for r in reporting if p[0][0] <= r <= p[-1][1]),
                  sum(1 for e, b in pw if b - e > 0.002), len(pw)))
        for e, b in slow_calls:
            r = [x for x in reporting if x <= b]
            print("   %.1f ms at +%.3f s; page reporting began %s" % (
                (b - e) * 1e3, e - p[0][0], "%.1f ms before" % ((e - r[-1]) * 1e3) if r else "never before"))
    waits.sort(reverse=True)
    print("main thread: mmap-lock waits over 3 ms: %d; longest:" % sum(1 for w in waits if w[0] > 0.003))
    for d, b, tid in waits[:5]:
        over = [(y - x) * 1e3 for x, y in holds if x < b + d and y > b]
        print("   %.1f ms at %.3f (thread %d); collapse write-lock holds meanwhile: %s" % (
            d * 1e3, b, tid, ", ".join("%.1f ms" % o for o in over) or "none"))


if __name__ == "__main__":
    main()
