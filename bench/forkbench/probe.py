"""forkbench.probe -- a PING-gap probe: how long the server keeps one client waiting.

Runs as its own process beside the load, on its own connection: sends PING,
waits for PONG, records (send time, round trip), pauses 100 us, repeats,
until SIGTERM. Prints "ready" once connected (the bench starts the load then).
Writes every sample to a gzipped CSV (unix time, rtt ms), so the benchmark
can plot the latency timeline and list every gap over 1 ms.

The samples go into two arrays of doubles, and the garbage collector is off:
kept as a list of tuples, they made Python's full collections walk every
sample once in a while, and such a pause, tens of milliseconds after a
minute of samples, landed inside a round trip as if the server had
stalled.

    python3 -m forkbench.probe PORT OUT.csv.gz
"""
import gc
import gzip
import signal
import sys
import time

from array import array

from .resp import Conn

PAUSE_S = 0.0001
running = True


def stop(signum, frame):
    global running
    running = False


def main():
    port, out = int(sys.argv[1]), sys.argv[2]
    signal.signal(signal.SIGTERM, stop)
    conn = Conn(port, timeout=60)
    print("ready", flush=True)
    ping = b"*1\r\n$4\r\nPING\r\n"
    gc.disable()
    sent, rtts = array("d"), array("d")
    clock = time.time
    while running:
        t0 = clock()
        conn.sock.sendall(ping)
        conn.reply()
        rtt = (clock() - t0) * 1000.0
        sent.append(t0)
        rtts.append(rtt)
        time.sleep(PAUSE_S)
    with gzip.open(out, "wt", compresslevel=6) as f:
        f.write("unix_time,rtt_ms\n")
        for t, rtt in zip(sent, rtts):
            f.write("%.6f,%.3f\n" % (t, rtt))


if __name__ == "__main__":
    main()
