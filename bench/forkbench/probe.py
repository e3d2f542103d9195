"""forkbench.probe -- a PING-gap probe: how long the server keeps one client waiting.

Runs as its own process beside the load, on its own connection: sends PING,
waits for PONG, records (send time, round trip), pauses 100 us, repeats,
until SIGTERM. Prints "ready" once connected (the bench starts the load then).
Writes every sample to a gzipped CSV (unix time, rtt ms), so the benchmark
can plot the latency timeline and list every gap over 1 ms.

    python3 -m forkbench.probe PORT OUT.csv.gz
"""
import gzip
import signal
import sys
import time

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
    samples = []
    clock = time.time
    while running:
        t0 = clock()
        conn.sock.sendall(ping)
        conn.reply()
        samples.append((t0, (clock() - t0) * 1000.0))
        time.sleep(PAUSE_S)
    with gzip.open(out, "wt", compresslevel=6) as f:
        f.write("unix_time,rtt_ms\n")
        for t, rtt in samples:
            f.write("%.6f,%.3f\n" % (t, rtt))


if __name__ == "__main__":
    main()
