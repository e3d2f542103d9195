"""One server under test: start it on a free port, fill it, save, read its fork figures."""
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time

from .resp import Conn, RedisError
from .variants import GIB, MIB, VARIANTS


POPULATE_LUA = """
local v = string.rep('x', tonumber(ARGV[3]))
for i = tonumber(ARGV[1]), tonumber(ARGV[2]) do
    redis.call('SET', string.format('key:%012d', i), v)
end
return 1
"""


# The parent logs one of these lines, with a millisecond timestamp, when
# fork() returns: a BGSAVE or a disk-based sync's save, a diskless sync's
# transfer, an AOF rewrite.
FORK_LOG = re.compile(r"^\d+:[MS] (\d+ \w+ \d{4} \d\d:\d\d:\d\d)\.(\d{3}) . "
                      r"Background (?:saving|RDB transfer|append only file rewriting) started")


class Server:
    """A RESP server child of ours, with its own data folder."""

    def __init__(self, binary, port, workdir, extra):
        self.port = port
        self.dir = workdir
        self.log = os.path.join(workdir, "server.log")
        os.makedirs(workdir, exist_ok=True)
        args = [binary, "--port", str(port), "--bind", "127.0.0.1",
                "--save", "", "--appendonly", "no", "--dir", workdir,
                "--dbfilename", "dump.rdb", "--logfile", "server.log",
                "--daemonize", "no"] + extra
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.STDOUT, cwd=workdir)
        try:
            self.conn = self._connect()
        except BaseException:
            self.kill()
            raise

    def _connect(self):
        deadline = time.time() + 20
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError("exited at startup (status %d)%s"
                                   % (self.proc.returncode, self.log_tail()))
            try:
                c = Conn(self.port, timeout=600)
                if c.call("PING") == "PONG":
                    return c
            except (OSError, RedisError):
                if time.time() > deadline:
                    raise RuntimeError("no PONG on port %d within 20 s%s"
                                       % (self.port, self.log_tail()))
            time.sleep(0.05)

    def log_tail(self, lines=3):
        try:
            with open(self.log, errors="replace") as f:
                tail = f.read().strip().splitlines()[-lines:]
        except OSError:
            return ""
        return "; log: " + " | ".join(tail) if tail else ""

    def info(self, section=None):
        return self.conn.info(section)

    def peak_rss(self):
        with open("/proc/%d/status" % self.proc.pid) as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
        return 0

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()

    def stop(self):
        try:
            self.conn.call("SHUTDOWN", "NOSAVE")
        except (OSError, RedisError, ConnectionError):
            pass
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.kill()


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def server_binary(variant, args):
    if variant in args.peers:
        return args.peers[variant]["binary"], args.peers[variant]["args"]
    build, extra = VARIANTS[variant]
    return os.path.join(args.stock_bin if build == "stock" else args.afork_bin,
                        "redis-server"), extra


def start_server(variant, args, config=()):
    """A fresh server of `variant` in a folder of its own; `config` (a
    scenario's settings, e.g. appendonly) goes before the variant's own."""
    binary, extra = server_binary(variant, args)
    work = tempfile.mkdtemp(prefix="afork-bench-", dir=args.scratch)
    try:
        return Server(binary, free_port(), work, list(config) + list(extra)), work
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise


def populate(srv, size_gb, value_size, keys=None):
    """Fill to size_gb of used memory, or to `keys` keys when given (the
    count the first server of this size got, so all get the same data);
    check the count with DBSIZE and return it."""
    sha = srv.conn.call("SCRIPT", "LOAD", POPULATE_LUA)
    base = int(srv.info("memory")["used_memory"])
    sample = 20000 if keys is None else min(20000, keys)
    srv.conn.call("EVALSHA", sha, 0, 0, sample - 1, value_size)
    if keys is None:
        per_key = (int(srv.info("memory")["used_memory"]) - base) / sample
        keys = max(sample, int(size_gb * GIB / per_key))
    batch = 200000
    for first in range(sample, keys, batch):
        srv.conn.call("EVALSHA", sha, 0, first, min(first + batch, keys) - 1, value_size)
    have = srv.conn.call("DBSIZE")
    if have != keys:
        raise RuntimeError("DBSIZE says %s keys after populating %d" % (have, keys))
    return keys


def fork_fields(srv):
    """The parent's fork time and, on redis-afork, the child-ready time
    (what the server reports of them)."""
    stats = srv.info("stats")
    fork = srv.info("fork")
    out = {}
    if "latest_fork_usec" in stats:
        out["fork_ms"] = int(stats["latest_fork_usec"]) / 1000.0
    if "latest_fork_child_ready_usec" in fork:
        out["child_ready_ms"] = int(fork["latest_fork_child_ready_usec"]) / 1000.0
    return out


def cow_mb(srv):
    cow = srv.info("persistence").get("rdb_last_cow_size")
    return int(cow) / MIB if cow is not None else None


def bgsave_and_wait(srv, poll=0.02):
    """BGSAVE, poll until it ends; return (start, end) unix times."""
    path = os.path.join(srv.dir, "dump.rdb")
    if os.path.exists(path):
        os.unlink(path)
    t0 = time.time()
    srv.conn.call("BGSAVE")
    while srv.info("persistence")["rdb_bgsave_in_progress"] == "1":
        time.sleep(poll)
    t1 = time.time()
    p = srv.info("persistence")
    if p["rdb_last_bgsave_status"] != "ok":
        raise RuntimeError("BGSAVE failed; see %s" % srv.log)
    return t0, t1


def fork_started_at(srv, t_save, fork_ms):
    """Unix time the last fork began: the log line the parent writes when
    fork() returns (ms, local time), minus the fork's duration; None when
    the log does not say (then plots align on the BGSAVE instead)."""
    last = None
    try:
        with open(srv.log, errors="replace") as f:
            for line in f:
                m = FORK_LOG.match(line)
                if m:
                    last = m
    except OSError:
        return None
    if last is None or fork_ms is None:
        return None
    returned = time.mktime(time.strptime(last.group(1), "%d %b %Y %H:%M:%S"))
    started = returned + int(last.group(2)) / 1000.0 - fork_ms / 1000.0
    return started if t_save - 1.0 <= started <= t_save + 60.0 else None


def version(binary):
    try:
        return subprocess.run([binary, "--version"], capture_output=True, text=True,
                              timeout=10).stdout.strip() or "n/a"
    except (OSError, subprocess.TimeoutExpired):
        return "n/a"

