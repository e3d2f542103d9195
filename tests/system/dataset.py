"""dataset.py -- the dataset of the drop-in tests (tests/system/drop-in.sh,
tests/deb/upgrade.sh), as RESP for redis-cli --pipe: every data type in its
small and large encodings, hash fields with TTLs, a stream with consumer
groups and pending entries, a second database and a function library.

    python3 dataset.py ROUND | redis-cli -p PORT --pipe

ROUND 1 writes everything, ROUND 2 changes some of it (for an AOF's incr
part and the partial resyncs).
"""
import sys

def cmd(*args):
    out = ["*%d\r\n" % len(args)]
    for a in args:
        a = str(a).encode()
        out.append("$%d\r\n" % len(a))
        out.append(a.decode() + "\r\n")
    sys.stdout.write("".join(out))

rnd = int(sys.argv[1])
FAR = 4102444800  # 2100-01-01: TTLs that stay far in the future, so that a
                  # dataset written once can be read again later
if rnd == 1:
    cmd("SET", "str", "hello")
    cmd("SET", "int", 12345)
    cmd("SET", "big", "x" * 100000)
    cmd("SET", "ttl", "v", "EXAT", FAR)
    cmd("RPUSH", "list:small", *range(10))
    cmd("RPUSH", "list:big", *["item-%d-%s" % (i, "y" * 50) for i in range(3000)])
    cmd("SADD", "set:int", *range(100))
    cmd("SADD", "set:str", *["m%d" % i for i in range(20)])
    cmd("SADD", "set:big", *["member-%d" % i for i in range(2000)])
    cmd("ZADD", "zset:small", *sum([[i, "z%d" % i] for i in range(20)], []))
    cmd("ZADD", "zset:big", *sum([[i * 0.5, "zm%d" % i] for i in range(2000)], []))
    cmd("HSET", "hash:small", *sum([["f%d" % i, i] for i in range(10)], []))
    cmd("HSET", "hash:big", *sum([["field%d" % i, "v" * 20] for i in range(2000)], []))
    cmd("HSET", "hfe:small", *sum([["f%d" % i, i] for i in range(10)], []))
    cmd("HEXPIREAT", "hfe:small", FAR, "FIELDS", 3, "f1", "f2", "f3")
    cmd("HSET", "hfe:big", *sum([["field%d" % i, "v" * 20] for i in range(1000)], []))
    cmd("HPEXPIREAT", "hfe:big", FAR * 1000 + 123, "FIELDS", 100, *["field%d" % i for i in range(100)])
    for i in range(500):
        cmd("XADD", "stream", "%d-1" % (i + 1), "k", i, "v", "val%d" % i)
    cmd("XGROUP", "CREATE", "stream", "g1", "0")
    cmd("XGROUP", "CREATE", "stream", "g2", "$")
    cmd("XREADGROUP", "GROUP", "g1", "alice", "COUNT", 50, "STREAMS", "stream", ">")
    cmd("XREADGROUP", "GROUP", "g1", "bob", "COUNT", 20, "STREAMS", "stream", ">")
    cmd("XACK", "stream", "g1", "1-1", "2-1", "3-1")
    cmd("PFADD", "hll", *["e%d" % i for i in range(1000)])
    cmd("SETBIT", "bitmap", 100000, 1)
    cmd("GEOADD", "geo", 13.361389, 38.115556, "Palermo", 15.087269, 37.502669, "Catania")
    cmd("SELECT", 3)
    cmd("SET", "db3:key", "in db 3")
    cmd("SELECT", 0)
    cmd("FUNCTION", "LOAD", "#!lua name=dropin\nredis.register_function{function_name='dropin_echo', callback=function(keys, args) return args[1] end, flags={'no-writes'}}")
else:
    cmd("SET", "str", "changed")
    cmd("INCRBY", "int", 10)
    cmd("LPUSH", "list:big", "head")
    cmd("SREM", "set:big", "member-7")
    cmd("ZINCRBY", "zset:big", 5, "zm9")
    cmd("HDEL", "hash:big", "field3")
    cmd("HEXPIREAT", "hfe:small", FAR - 1000, "FIELDS", 1, "f4")
    cmd("HPERSIST", "hfe:big", "FIELDS", 1, "field5")
    for i in range(500, 600):
        cmd("XADD", "stream", "%d-1" % (i + 1), "k", i)
    cmd("XREADGROUP", "GROUP", "g2", "carol", "COUNT", 10, "STREAMS", "stream", ">")
    cmd("XACK", "stream", "g1", "10-1")
    cmd("DEL", "bitmap")
    cmd("SET", "round2", "yes")
