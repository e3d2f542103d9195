"""forkbench.resp -- the smallest Redis client the benchmark needs (RESP2 over TCP).

Only what the bench and its probe use: send a command, read one reply, parse
INFO. No third-party client, so the figures depend on nothing but Redis.
"""
import socket


class RedisError(Exception):
    """An error reply (-ERR ...) from the server."""


class Conn:
    """One blocking connection to a Redis server."""

    def __init__(self, port, host="127.0.0.1", timeout=None):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def close(self):
        self.sock.close()

    def call(self, *args):
        """Send one command, return its reply (str, int, list or None)."""
        self.sock.sendall(encode(args))
        return self.reply()

    def reply(self):
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            raise RedisError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else self._bulk(n).decode(errors="replace")
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self.reply() for _ in range(n)]
        raise RedisError("protocol error: %r" % line)

    def info(self, section=None):
        """INFO as a dict of field -> str."""
        text = self.call("INFO", section) if section else self.call("INFO")
        return parse_info(text)

    def _fill(self):
        data = self.sock.recv(65536)
        if not data:
            raise ConnectionError("server closed the connection")
        self.buf += data

    def _line(self):
        while b"\r\n" not in self.buf:
            self._fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _bulk(self, n):
        while len(self.buf) < n + 2:
            self._fill()
        data, self.buf = self.buf[:n], self.buf[n + 2:]
        return data


def encode(args):
    """A command in RESP: an array of bulk strings."""
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        b = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(b), b))
    return b"".join(out)


def parse_info(text):
    fields = {}
    for line in text.splitlines():
        if line and not line.startswith("#") and ":" in line:
            k, v = line.split(":", 1)
            fields[k] = v
    return fields
