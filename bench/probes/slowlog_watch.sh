#!/usr/bin/env bash
# slowlog_watch.sh -- record a benchmark server's slow commands beside a run.
#
#   bench/probes/slowlog_watch.sh OUT.txt [MICROSECONDS]
#
# Waits for the redis-server a bench.py or stalls.py run starts (the first
# one listening on 127.0.0.1), sets slowlog-log-slower-than (default 2000
# us) and a long slowlog, then every 5 s appends SLOWLOG GET -1 to OUT.txt,
# after a "== unix time" line, and resets it, until the server is gone.
# Each entry gives its unix time (s), its duration (us) and the command:
# whether a long PING round trip is one slow command (a lock, a fault) or
# many slowed ones. forkbench.slowlog_split reads OUT.txt.
set -u
out=$1
slower=${2:-2000}
cli=$(dirname "$0")/../build/redis-8.0.6/src/redis-cli
port=
while [ -z "$port" ]; do
    port=$(pgrep -a redis-server | grep -o '127\.0\.0\.1:[0-9]*$' | head -1 | cut -d: -f2)
    [ -n "$port" ] && "$cli" -p "$port" ping >/dev/null 2>&1 || { port=; sleep 0.5; }
done
echo "port $port" >>"$out"
"$cli" -p "$port" config set slowlog-log-slower-than "$slower" >/dev/null
"$cli" -p "$port" config set slowlog-max-len 100000 >/dev/null
while "$cli" -p "$port" ping >/dev/null 2>&1; do
    {
        echo "== $(date +%s.%N)"
        "$cli" -p "$port" slowlog get -1
        "$cli" -p "$port" slowlog reset >/dev/null
    } >>"$out" 2>&1
    sleep 5
done
