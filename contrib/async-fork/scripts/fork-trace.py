#!/usr/bin/env python3
"""fork-trace.py -- where a traced process's fork() time goes in the guest.

    fork-trace.py CONSOLE TASK [--faults N]

Reads the function_graph trace a guest prints between AFORK-TRACE-BEGIN
and AFORK-TRACE-END (init's afork.trace_filter, funcgraph-proc on, trace
kernel: make kernel-trace) and, for every clone() of a task whose name
contains TASK (e.g. "redis-s", the ring buffer keeps the latest), prints
its duration, the time of each traced function called inside it (summed by
name, with the number of calls), and the time of the first N
handle_mm_fault() of that task after clone() returned (N = the faults
INFO counts inside fork(), 28 by default), with the part in faults over
40 us (those that copied a page table). Trace only a few functions: each
traced call adds its own overhead to the times it measures."""

import collections
import re
import statistics
import sys

LINE = re.compile(r"^\s*(\d+)\)\s+(\S+)\s+\|\s+(?:[+!#*@$]\s*)?(?:([\d.]+) us)?\s*\|(\s+)(.*)$")
TABLE_COPY_US = 40.0


def parse(path):
    text = open(path, errors="replace").read()
    if "AFORK-TRACE-BEGIN" not in text:
        sys.exit(f"fork-trace: no AFORK-TRACE-BEGIN in {path}")
    for line in text.split("AFORK-TRACE-BEGIN", 1)[1].split("AFORK-TRACE-END", 1)[0].splitlines():
        m = LINE.match(line)
        if m:
            task, dur, body = m.group(2), m.group(3), m.group(5).strip()
            yield task, float(dur) if dur else None, body


def name_of(body):
    m = re.search(r"/\* (\S+) \*/", body)
    if m:
        return m.group(1)
    return body.split("(", 1)[0] if "(" in body else None


def forks(events, pattern, nfaults):
    stacks = collections.defaultdict(list)
    open_clone = {}
    for task, dur, body in events:
        if body.endswith("{"):
            stacks[task].append(name_of(body))
            if name_of(body) == "__x64_sys_clone" and pattern in task:
                open_clone[task] = {"callees": collections.Counter(), "calls": collections.Counter()}
            continue
        name = stacks[task].pop() if body.startswith("}") and stacks[task] else name_of(body)
        if name == "__x64_sys_clone" and pattern in task and task not in open_clone:
            open_clone[task] = {"callees": collections.Counter(), "calls": collections.Counter()}
        if task in open_clone and dur is not None:
            f = open_clone[task]
            if name == "__x64_sys_clone" and "clone_us" not in f:
                f["clone_us"], f["faults"] = dur, []
            elif "clone_us" not in f:
                f["callees"][name] += dur
                f["calls"][name] += 1
            elif name == "handle_mm_fault" and not stacks[task]:
                f["faults"].append(dur)
                if len(f["faults"]) == nfaults:
                    yield task, open_clone.pop(task)
    for task, f in open_clone.items():
        if "clone_us" in f:
            yield task, f


def main(argv):
    args = argv[1:]
    nfaults = 28
    if "--faults" in args:
        i = args.index("--faults")
        nfaults = int(args[i + 1])
        del args[i:i + 2]
    if len(args) != 2:
        sys.exit(__doc__)
    by_task = collections.defaultdict(list)
    for task, f in forks(parse(args[0]), args[1], nfaults):
        by_task[task].append(f)
        callees = " ".join(f"{k}={v:.0f}us/{f['calls'][k]}" for k, v in f["callees"].most_common())
        print(f"{task}: clone {f['clone_us']:.0f} us; first {len(f['faults'])} faults "
              f"{sum(f['faults']):.0f} us (copies {sum(x for x in f['faults'] if x > TABLE_COPY_US):.0f}); "
              f"{callees}")
    for task, fs in by_task.items():
        med = lambda v: f"{statistics.median(v):.0f} [{min(v):.0f}-{max(v):.0f}]"
        print(f"{task}: {len(fs)} forks, clone {med([f['clone_us'] for f in fs])} us, "
              f"faults {med([sum(f['faults']) for f in fs])} us, of which copies "
              f"{med([sum(x for x in f['faults'] if x > TABLE_COPY_US) for f in fs])} us")
    return 0 if by_task else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
