#!/bin/sh
# idle_cow.sh -- what a save copies when no client writes: stock Redis and
# redis-afork with fork-thp, both populated with the same keys (DEBUG
# POPULATE), then BGSAVEs with no client load, the two servers alternating;
# prints each save's rdb_last_cow_size (the child's private dirty memory:
# the pages either process wrote after the fork) and the parent's
# copy-on-write faults. With no load that is what the server writes by
# itself (serverCron, its bookkeeping, the child's own buffers), the part
# of a save's copy-on-write that no client causes.
#
#   bench/probes/idle_cow.sh [KEYS [SAVES [PAUSE]]]
#
# Defaults: 3000000 keys (1.16 GB), 5 saves each, 8 s after each save for
# the re-collapse. Binaries: $TREE/src and $STOCK/src (build/redis-<version>
# and build/stock/redis-<version>, the version from upstream/pin); ports
# IDLE_COW_PORT and the next (7391).
set -e
keys=${1:-3000000}
saves=${2:-5}
pause=${3:-8}
p1=${IDLE_COW_PORT:-7391}
p2=$((p1 + 1))
top=$(cd "$(dirname "$0")/../.." && pwd)
. "$top/upstream/pin"
stock=${STOCK:-$top/build/stock/redis-$REDIS_VERSION}/src
afork=${TREE:-$top/build/redis-$REDIS_VERSION}/src
work=$(mktemp -d /tmp/idle_cow.XXXXXX)
# Stopped by their pid files: never a server of someone else's on a port.
# Each is waited for (at most 5 s) before its folder goes.
stop_all() {
    for f in "$work"/*/pid; do
        [ -f "$f" ] || continue
        pid=$(cat "$f")
        kill "$pid" 2>/dev/null || continue
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    done
    rm -rf "$work"
}
trap stop_all EXIT

start() {                                   # start NAME BINDIR PORT ARGS...
    name=$1 bin=$2 port=$3; shift 3
    mkdir -p "$work/$name"
    if "$afork/redis-cli" -p "$port" ping >/dev/null 2>&1; then
        echo "idle_cow: port $port is in use (set IDLE_COW_PORT)" >&2; exit 1
    fi
    "$bin/redis-server" --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
        --dir "$work/$name" --logfile server.log --daemonize yes \
        --pidfile "$work/$name/pid" --enable-debug-command local "$@"
    tries=0
    until "$afork/redis-cli" -p "$port" ping >/dev/null 2>&1; do
        tries=$((tries + 1))
        [ $tries -lt 100 ] || { echo "idle_cow: $name did not start:" >&2
                                tail -5 "$work/$name/server.log" >&2; exit 1; }
        sleep 0.1
    done
    "$afork/redis-cli" -p "$port" debug populate "$keys" key 256 >/dev/null
    n=$("$afork/redis-cli" -p "$port" dbsize)
    [ "$n" = "$keys" ] || { echo "idle_cow: $name has $n keys, not $keys" >&2; exit 1; }
}
field() {                                   # field PORT SECTION NAME
    "$afork/redis-cli" -p "$1" info "$2" | tr -d '\r' | sed -n "s/^$3://p"
}
save() {                                    # save NAME PORT
    "$afork/redis-cli" -p "$2" bgsave >/dev/null
    sleep 0.5
    while [ "$(field "$2" persistence rdb_bgsave_in_progress)" = 1 ]; do sleep 0.2; done
    cow=$(field "$2" persistence rdb_last_cow_size)
    faults=$(field "$2" fork latest_fork_cow_minor_faults)
    echo "$1 $i cow_bytes=$cow parent_cow_faults=${faults:-n/a}"
    sleep "$pause"                          # the re-collapse of the last pass
}

start stock "$stock" $p1
start fork-thp "$afork" $p2 --fork-thp yes
echo "used_memory stock=$(field $p1 memory used_memory) fork-thp=$(field $p2 memory used_memory)"
echo "fork_thp_heap=$(field $p2 fork fork_thp_heap)"
i=0
while [ $i -lt "$saves" ]; do
    i=$((i + 1))
    if [ $((i % 2)) = 1 ]; then save stock $p1; save fork-thp $p2
    else save fork-thp $p2; save stock $p1; fi
done
