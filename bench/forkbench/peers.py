"""Peers: any RESP server as one more variant, checked before the run."""
import os
import re
import shlex
import shutil

from .resp import RedisError
from .variants import VARIANTS
from .progress import note
from .server import start_server, populate, bgsave_and_wait, version
from .sites import site_config


def parse_peer(text):
    """NAME=BINARY[:ARGS] -> (name, binary, [args]); ARGS split like a shell."""
    name, eq, rest = text.partition("=")
    if not eq or not rest:
        raise ValueError("%r: expected NAME=BINARY[:ARGS]" % text)
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name):
        raise ValueError("%r: NAME may hold letters, digits, '.', '_' and '-'" % name)
    if name in VARIANTS:
        raise ValueError("%r: NAME is one of the built-in variants" % name)
    binary, _, extra = rest.partition(":")
    return name, binary, shlex.split(extra)


def check_peer(name, args):
    """Start the peer once and try every command the bench needs; None
    when it can be benchmarked, else why not."""
    binary = args.peers[name]["binary"]
    if not (os.path.isfile(binary) and os.access(binary, os.X_OK)):
        return "%s is not an executable file" % binary
    try:
        # with the scenario's settings (appendonly, replication), which it must take
        srv, work = start_server(name, args, site_config(args.scenario))
    except (RuntimeError, OSError) as e:
        return "failed to start: %s" % e
    try:
        srv.conn.sock.settimeout(30)   # a peer that never answers is skipped, not waited for
        populate(srv, 0, args.value_size, keys=10)
        for section, field in (("memory", "used_memory"),
                               ("persistence", "rdb_bgsave_in_progress"),
                               ("persistence", "rdb_last_bgsave_status")):
            if field not in srv.info(section):
                return "INFO %s has no %s" % (section, field)
        bgsave_and_wait(srv)
        srv.conn.call("DBSIZE")
        return None
    except (RedisError, RuntimeError, OSError, ConnectionError) as e:
        return "a command the bench needs failed: %s" % e
    finally:
        srv.stop()
        shutil.rmtree(work, ignore_errors=True)


def check_peers(args):
    """Drop peers that cannot be benchmarked; return {name: why}."""
    skipped = {}
    for name in list(args.peers):
        why = check_peer(name, args)
        if why:
            skipped[name] = why
            note("peer %s skipped: %s" % (name, why))
            args.variants.remove(name)
        else:
            note("peer %s: %s" % (name, version(args.peers[name]["binary"])))
    return skipped

