#!/usr/bin/env python3
"""strace_window.py -- find what a redis-server parent did inside fork windows.

Reads the output of `strace -f -ttt` run on redis-server (the first pid in
the trace is the server's main thread) and, for every fork the main thread
made, lists the calls that change the memory map or open a file made by any
thread of the parent between the clone and the end of the window:

  ready  the main thread's read of the 8-byte ready message (or its EOF) on
         the read end of a pipe it created just before the clone: the
         window as redis-afork defines it;
  loop   when there is no such read (stock Redis has no ready pipe): the
         main thread's next wait in the event loop. Every implementation's
         window lasts at least this long, so a call found here is a
         violation for any server.

Prints one block per fork and a summary; the exit status is 0 when the
trace was read (the caller judges the result from --json or the text).
"""

import argparse
import json
import re
import sys

FORBIDDEN = {"open", "openat", "openat2", "creat", "mmap", "munmap", "mremap",
             "mprotect", "madvise", "brk"}
LINE = re.compile(r"^(\d+)\s+(\d+\.\d+)\s+(.*)$")
CALL = re.compile(r"^([a-z0-9_]+)\((.*)$")
RESUMED = re.compile(r"^<\.\.\. ([a-z0-9_]+) resumed>(.*)$")
RETVAL = re.compile(r"\)\s+=\s+(-?\d+|\?)(?:\s|$)")
PIPE_FDS = re.compile(r"^\[(\d+),\s*(\d+)\]")
FIRST_ARG = re.compile(r"^(\d+),")


class Call:
    """One system call, joined from its entry and resumed lines."""

    def __init__(self, tid, ts, name, args):
        self.tid, self.ts, self.name, self.args = tid, ts, name, args
        self.ret = None

    def finish(self, rest):
        self.args += rest
        m = RETVAL.search(self.args)
        if m and m.group(1) != "?":
            self.ret = int(m.group(1))


def parse(lines):
    """Yield Calls as they complete; each keeps its entry time."""
    pending = {}
    for raw in lines:
        m = LINE.match(raw.rstrip("\n"))
        if not m:
            continue
        tid, ts, body = int(m.group(1)), float(m.group(2)), m.group(3)
        r = RESUMED.match(body)
        if r:
            c = pending.pop(tid, None)
            if c is None:
                continue
            c.finish(r.group(2))
            yield c
            continue
        c = CALL.match(body)
        if not c:
            continue  # signals (---), exits (+++)
        call = Call(tid, ts, c.group(1), c.group(2))
        if body.endswith("<unfinished ...>"):
            call.args = call.args[:-len("<unfinished ...>")].rstrip()
            pending[tid] = call
        else:
            call.finish("")
            yield call


def windows(calls):
    """Return the forks of the main thread with the parent's calls in each."""
    calls = sorted(calls, key=lambda c: c.ts)
    if not calls:
        return []
    main = calls[0].tid
    threads = {main}
    forks, pipes = [], []   # pipes: read ends made since the last fork
    for c in calls:
        if c.name in ("clone", "clone3") and c.tid in threads and c.ret and c.ret > 0:
            if "CLONE_THREAD" in c.args:
                threads.add(c.ret)
            elif c.tid == main:
                forks.append({"child": c.ret, "start": c.ts, "end": None,
                              "end_kind": None, "pipes": pipes, "calls": []})
                pipes = []
        elif c.name == "pipe2" and c.tid == main and c.ret == 0:
            m = PIPE_FDS.match(c.args.lstrip())
            if m:
                pipes.append(int(m.group(1)))
    # Window ends, then the calls inside.
    for f in forks:
        for c in calls:
            if c.tid != main or c.ts <= f["start"]:
                continue
            m = FIRST_ARG.match(c.args)
            if (c.name == "read" and m and int(m.group(1)) in f["pipes"]
                    and re.search(r",\s*8\)\s+=\s+(8|0)\b", c.args)):
                f["end"], f["end_kind"] = c.ts, "ready"
                break
        if f["end"] is None:
            for c in calls:
                if c.tid == main and c.ts > f["start"] and c.name.startswith("epoll_wait"):
                    f["end"], f["end_kind"] = c.ts, "loop"
                    break
        if f["end"] is None:
            f["end"], f["end_kind"] = float("inf"), "none"
        f["reads"] = sum(1 for c in calls if c.tid == main and c.name == "read"
                         and c.ret and c.ret > 0 and f["start"] < c.ts < f["end"])
        f["calls"] = [c for c in calls
                      if c.tid in threads and c.name in FORBIDDEN
                      and f["start"] < c.ts < f["end"]]
    return forks


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace", help="strace -f -ttt output file")
    ap.add_argument("--labels", default="",
                    help="comma-separated names for the forks, in order")
    ap.add_argument("--json", help="also write the result as JSON here")
    a = ap.parse_args()
    with open(a.trace, errors="replace") as fh:
        forks = windows(parse(fh))
    labels = [x for x in a.labels.split(",") if x]
    out = []
    for i, f in enumerate(forks):
        label = labels[i] if i < len(labels) else "fork-%d" % (i + 1)
        found = {}
        for c in f["calls"]:
            found[c.name] = found.get(c.name, 0) + 1
        span = (f["end"] - f["start"]) * 1000 if f["end"] != float("inf") else -1
        print("%s: child %d, window %.1f ms (ends at: %s), %d reads served, "
              "%d forbidden call(s)%s"
              % (label, f["child"], span, f["end_kind"], f["reads"], len(f["calls"]),
                 ": " + ", ".join("%s x%d" % kv for kv in sorted(found.items()))
                 if found else ""))
        for c in f["calls"][:20]:
            print("    tid %d +%.3f ms %s(%s" % (c.tid, (c.ts - f["start"]) * 1000,
                                                c.name, c.args[:100]))
        out.append({"label": label, "child": f["child"], "window_ms": span,
                    "end_kind": f["end_kind"], "reads": f["reads"],
                    "forbidden": found})
    print("forks: %d" % len(forks))
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(out, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
