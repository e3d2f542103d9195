"""forkbench.sched_waits -- how long each process of a benchmark waited for a CPU.

On this 2-core machine the server's main thread, its save child, the
re-collapse thread, redis-benchmark and the PING probe share two CPUs. A
client's worst latency can therefore be the load generator's own wait for
a CPU, not the server's. This reads a system-wide record of
sched:sched_switch (`perf record -a -k mono -e sched:sched_switch`) and
prints, per command name, the longest times a task was preempted while
runnable (prev_state R, until it ran again) and who held the CPUs
meanwhile, and the longest times it slept (S/D) for comparison.

    python3 -m forkbench.sched_waits SCHED.DATA [--comm redis-benchmark --comm redis-server]
        [--top 10] [--from T0 --to T1]   (perf's mono clock, seconds)

Needs perf (Debian linux-perf). Prints Markdown tables.
"""
import argparse
import collections
import re
import subprocess
import sys

SWITCH = re.compile(r"^\s*(?P<comm>.+?)\s+(?P<pid>-?\d+)\s+\[(?P<cpu>\d+)\]\s+(?P<ts>\d+\.\d+):\s+"
                    r"sched:sched_switch:\s+prev_comm=(?P<pcomm>.+?) prev_pid=(?P<ppid>\d+) "
                    r"prev_prio=\d+ prev_state=(?P<state>\S+) ==> next_comm=(?P<ncomm>.+?) "
                    r"next_pid=(?P<npid>\d+) next_prio=\d+\s*$")


def switches(path):
    """(ts, cpu, prev_comm, prev_pid, prev_state, next_comm, next_pid) in order."""
    proc = subprocess.Popen(["perf", "script", "-i", path, "-F", "comm,pid,cpu,time,event,trace"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    for line in proc.stdout:
        m = SWITCH.match(line)
        if m:
            yield (float(m["ts"]), int(m["cpu"]), m["pcomm"], int(m["ppid"]), m["state"],
                   m["ncomm"], int(m["npid"]))
    proc.wait()


def waits(events, comms, t0, t1):
    """Per comm: [(duration_s, start_ts, state, {comm: seconds on CPUs meanwhile}, pid)]."""
    out = collections.defaultdict(list)
    away = {}            # pid -> (ts, state, comm, {comm: s})
    running = {}         # cpu -> (comm, since)
    for ts, cpu, pcomm, ppid, state, ncomm, npid in events:
        if (t0 is not None and ts < t0) or (t1 is not None and ts > t1):
            running[cpu] = (ncomm, ts)
            continue
        prev = running.get(cpu)
        if prev:
            for since, _, _, held in away.values():
                held[prev[0]] += ts - max(prev[1], since)
        if npid in away:   # the other CPUs' current holders, up to now
            for c, (comm, since) in running.items():
                if c != cpu:
                    away[npid][3][comm] += ts - max(since, away[npid][0])
        running[cpu] = (ncomm, ts)
        if pcomm in comms and ppid != 0:
            away[ppid] = (ts, state, pcomm, collections.Counter())
        if npid in away:
            start, st, comm, held = away.pop(npid)
            out[comm].append((ts - start, start, st, held, npid))
    return out


def table(comm, rows, top):
    lines = ["", "### %s" % comm, "",
             "| kind | longest waits (ms) | at (s, perf clock) | pid | on the CPUs meanwhile (ms) |",
             "|---|---|---|---|---|"]
    for kind, pick in (("preempted, runnable", lambda s: s.startswith("R")),
                       ("asleep", lambda s: not s.startswith("R"))):
        sel = sorted((r for r in rows if pick(r[2])), key=lambda r: -r[0])[:top]
        for dur, start, _, held, pid in sel:
            who = ", ".join("%s %.0f" % (c, s * 1000) for c, s in held.most_common(4))
            lines.append("| %s | %.1f | %.3f | %d | %s |" % (kind, dur * 1000, start, pid, who or "-"))
    return lines


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("data")
    p.add_argument("--comm", action="append", default=None,
                   help="command names to follow (default: redis-benchmark, redis-server, python3)")
    p.add_argument("--top", type=int, default=10)
    p.add_argument("--from", dest="t0", type=float, default=None)
    p.add_argument("--to", dest="t1", type=float, default=None)
    a = p.parse_args()
    comms = set(a.comm or ["redis-benchmark", "redis-server", "python3"])
    res = waits(switches(a.data), comms, a.t0, a.t1)
    if not res:
        sys.exit("no sched_switch of %s in %s" % (", ".join(sorted(comms)), a.data))
    lines = ["# Waits for a CPU and sleeps, from %s" % a.data]
    for comm in sorted(res):
        lines += table(comm, res[comm], a.top)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
