"""forkbench.probe and the load against a real redis-server: every round
trip lands in its file, the probe keeps Python's collector off while it
samples, and a load's end is redis-benchmark's own."""
import gzip
import os
import signal
import socket
import subprocess
import sys
import time
import types

import pytest

from conftest import BENCH, TOP
from forkbench.server import free_port


def _pinned_version():
    with open(os.path.join(TOP, "upstream", "pin")) as pin:
        for line in pin:
            if line.startswith("REDIS_VERSION="):
                return line.split("=", 1)[1].strip()
    raise RuntimeError("upstream/pin has no REDIS_VERSION")


# the built tree: TREE as tests/run.sh gives it, else make's default
SERVER = os.path.join(os.environ.get("TREE") or os.path.join(TOP, "build", "redis-" + _pinned_version()),
                      "src", "redis-server")


@pytest.fixture
def server():
    if not os.access(SERVER, os.X_OK):
        pytest.skip("no %s (make builds it)" % SERVER)
    port = free_port()
    proc = subprocess.Popen([SERVER, "--port", str(port), "--save", "", "--appendonly", "no"],
                            stdout=subprocess.DEVNULL)
    deadline = time.time() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", port)).close()
            break
        except OSError:
            if time.time() > deadline:
                proc.kill()
                raise
            time.sleep(0.05)
    yield port
    proc.kill()
    proc.wait()


def test_probe_writes_every_round_trip_and_keeps_the_collector_off(server, tmp_path):
    out = str(tmp_path / "probe.csv.gz")
    # the collector stays off while the probe samples: a full collection
    # walks every object, and its pause would land inside a round trip
    code = ("import gc, sys; sys.argv = ['probe', '%d', %r]; "
            "from forkbench import probe; probe.main(); "
            "print('collector on' if gc.isenabled() else 'collector off')" % (server, out))
    env = dict(os.environ, PYTHONPATH=BENCH)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                            env=env)
    assert proc.stdout.readline().strip() == "ready"
    time.sleep(2)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    assert proc.stdout.read().strip() == "collector off"
    with gzip.open(out, "rt") as f:
        assert next(f) == "unix_time,rtt_ms\n"
        rows = [tuple(map(float, line.split(","))) for line in f]
    assert len(rows) > 500
    assert all(b[0] > a[0] for a, b in zip(rows, rows[1:]))
    assert all(0 < rtt < 1000 for _, rtt in rows)


def test_a_load_ends_when_redis_benchmark_ends_not_when_it_is_collected(server, tmp_path):
    # A save or sync the caller waited for before finish() may outlast the
    # load: the end finish() gives must be redis-benchmark's own, or the
    # bench could never flag it (t_done > t_end).
    from forkbench import load
    args = types.SimpleNamespace(out=str(tmp_path), tools=os.path.dirname(SERVER),
                                 value_size=16)
    srv = types.SimpleNamespace(port=server)
    run = load.LoadRun(srv, args, 1000, 20000, "t")
    time.sleep(3)                      # 20000 SETs take well under a second
    t_collected = time.time()
    res, samples, t_end = run.finish()
    assert run.bench.t_start < t_end < t_collected - 1.0
    assert res["rps"] > 0 and samples
