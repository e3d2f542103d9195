#!/usr/bin/env python3
"""info_cost.py -- what the `# Fork` section adds to each INFO call.

Starts the given redis-server on a free loopback port, fills it with
--keys keys, then, --repeat times in alternating order, runs --calls INFO
calls asking for upstream's default sections without `fork` and the same
with `fork`, and reads the server's own time per call (INFO commandstats,
cmdstat_info usec_per_call, reset before each batch by CONFIG RESETSTAT).
Prints the median and the spread (min-max, IQR) of both, of their difference,
and the reply sizes. Calls are pipelined in batches: the server-side time
does not depend on it.

    bench/info_cost.py build/redis-8.0.6/src/redis-server [--repeat 9]
"""
import argparse
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import resp  # noqa: E402
import stats  # noqa: E402
from bench import Server, free_port  # noqa: E402

# Upstream 8.0's default INFO sections.
DEFAULT = ["server", "clients", "memory", "persistence", "stats", "replication",
           "threads", "cpu", "module_list", "errorstats", "cluster", "keyspace",
           "keysizes"]


def batch(conn, args, calls, chunk=200):
    """Run INFO args calls times; return the server's usec per call."""
    conn.call("CONFIG", "RESETSTAT")
    cmd = resp.encode(["INFO"] + args)
    done = 0
    while done < calls:
        n = min(chunk, calls - done)
        conn.sock.sendall(cmd * n)
        for _ in range(n):
            conn.reply()
        done += n
    line = resp.parse_info(conn.call("INFO", "commandstats"))["cmdstat_info"]
    fields = dict(kv.split("=") for kv in line.split(","))
    assert int(fields["calls"]) == calls, fields
    return float(fields["usec"]) / calls


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("server")
    p.add_argument("--repeat", type=int, default=9)
    p.add_argument("--calls", type=int, default=20000)
    p.add_argument("--keys", type=int, default=100000)
    a = p.parse_args()
    work = tempfile.mkdtemp(prefix="info-cost.")
    srv = Server(os.path.abspath(a.server), free_port(), work, ["--enable-debug-command", "yes"])
    conn = srv.conn
    try:
        conn.call("DEBUG", "POPULATE", str(a.keys))
        conn.call("BGSAVE")   # so the fork fields hold real values
        while resp.parse_info(conn.call("INFO", "persistence"))["rdb_bgsave_in_progress"] != "0":
            time.sleep(0.05)
        variants = {"without": DEFAULT, "with": DEFAULT + ["fork"], "fork": ["fork"]}
        res = {v: [] for v in variants}
        for r in range(a.repeat):
            order = ["without", "with", "fork"] if r % 2 == 0 else ["fork", "with", "without"]
            for v in order:
                res[v].append(batch(conn, variants[v], a.calls))
        diff = [w - o for w, o in zip(res["with"], res["without"])]
        size = {v: len(conn.call("INFO", *variants[v])) for v in variants}
        print("INFO cost, server time per call (usec), n=%d repetitions x %d calls"
              % (a.repeat, a.calls))
        for name, vals in (("default sections", res["without"]),
                           ("default + fork", res["with"]), ("difference", diff),
                           ("INFO fork alone", res["fork"])):
            sp = stats.spread(vals)
            print("  %-17s median %.2f  min %.2f  max %.2f  (IQR %.2f-%.2f)"
                  % (name, sp["median"], sp["min"], sp["max"], sp["q1"], sp["q3"]))
        print("  reply bytes: default %d, default + fork %d (fork alone %d)"
              % (size["without"], size["with"], size["fork"]))
    finally:
        srv.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
