#!/bin/sh
# idle_cow.sh -- what the parent copies on its own while a save child lives:
# stock Redis and redis-afork with fork-thp, both populated with the same
# keys (DEBUG POPULATE), then BGSAVEs with no client load, the two servers
# alternating; prints each save's rdb_last_cow_size and the parent's
# copy-on-write faults. With no load, what is copied is what the server
# writes by itself (serverCron, its own bookkeeping), the part of a save's
# copy-on-write that no client causes (issue 17 item 3).
#
#   bench/probes/idle_cow.sh [KEYS [SAVES]]     (default 3000000 keys, 5 saves)
#
# Binaries: build/stock/redis-8.0.6/src and build/redis-8.0.6/src.
set -e
keys=${1:-3000000}
saves=${2:-5}
top=$(cd "$(dirname "$0")/../.." && pwd)
stock=$top/build/stock/redis-8.0.6/src
afork=$top/build/redis-8.0.6/src
work=$(mktemp -d /tmp/idle_cow.XXXXXX)
trap 'for p in 7391 7392; do "$afork/redis-cli" -p $p shutdown nosave >/dev/null 2>&1 || true; done; rm -rf "$work"' EXIT

start() {                                   # start NAME BINDIR PORT ARGS...
    name=$1 bin=$2 port=$3; shift 3
    mkdir -p "$work/$name"
    "$bin/redis-server" --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
        --dir "$work/$name" --logfile server.log --daemonize yes \
        --enable-debug-command local "$@"
    until "$afork/redis-cli" -p "$port" ping >/dev/null 2>&1; do sleep 0.1; done
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
    sleep 8                                 # the re-collapse of the last pass
}

start stock "$stock" 7391
start fork-thp "$afork" 7392 --fork-thp yes
echo "used_memory stock=$(field 7391 memory used_memory) fork-thp=$(field 7392 memory used_memory)"
echo "fork_thp_heap=$(field 7392 fork fork_thp_heap)"
i=0
while [ $i -lt "$saves" ]; do
    i=$((i + 1))
    if [ $((i % 2)) = 1 ]; then save stock 7391; save fork-thp 7392
    else save fork-thp 7392; save stock 7391; fi
done
