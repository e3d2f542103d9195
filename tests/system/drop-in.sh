#!/usr/bin/env bash
# drop-in.sh -- redis-afork takes the place of stock Redis of the same
# release (build/stock, make stock) on the same data and in the same
# replication set, seen from outside: files, replication and digests.
#
#  - data files: stock Redis writes a dataset of every data type (strings,
#    integers, lists, sets and sorted sets in their small and large
#    encodings, hashes with and without field TTLs, streams with consumer
#    groups and pending entries, HyperLogLog, bitmaps, geo, keys with a
#    TTL, a function library) to an RDB (SAVE) and, after more writes, to a
#    multi-part AOF (a base written by BGREWRITEAOF plus an incr file);
#    redis-afork started on each has the writer's DEBUG DIGEST, field TTLs,
#    stream groups and functions; the same for the files of older
#    releases below;
#  - replication both ways (stock primary, redis-afork replica; redis-afork
#    primary, stock replica), disk-based and diskless full sync: the
#    replica's digest is the primary's; then the link is dropped, the
#    primary takes writes, and the replica catches up by a partial resync
#    (the primary's sync_partial_ok rises, sync_full does not);
#  - an RDB of a newer format than this release's (the version in its
#    header raised by one): redis-afork refuses to start on it, with
#    upstream's "Can't handle RDB format version" message, and leaves the
#    file as it was.
# The files of older releases are test assets (tests/system/drop-in-assets/
# redis-X.Y.Z/, each written by that release with --write-files); each is
# read the same way.
# Runs in about 20 s on an idle 2-CPU machine.
. "$(dirname "$0")/lib.sh"

afork=$tree/src/redis-server
stockd=$stock/src/redis-server
cli=$tree/src/redis-cli
declare -A pid=()

cleanup() {
    local p
    for p in "${pid[@]}"; do kill -KILL "$p" 2>/dev/null; done
    for p in "${pid[@]}"; do wait "$p" 2>/dev/null; done
    rm -rf "$work"
}
trap cleanup EXIT

if [ ! -x "$stockd" ]; then
    err "drop-in" "no stock build at $stock (make stock)"
    exit 1
fi

c() { local p=$1; shift; timeout 20 "$cli" -p "$p" "$@" 2>&1 | tr -d '\r'; }
field() { c "$1" info "$2" | sed -n "s/^$3://p"; }
wait_until() {
    local end=$(( $(date +%s) + $1 ))
    shift
    until "$@"; do
        [ "$(date +%s)" -lt "$end" ] || return 1
        sleep 0.1
    done
}

# start NAME BINARY PORT [DIRECTIVE...]: a server in $work/NAME.
start() {
    local name=$1 bin=$2 port=$3 d=$work/$1
    shift 3
    mkdir -p "$d"
    {
        echo "port $port"
        echo "bind 127.0.0.1"
        echo "dir $d"
        echo "logfile $d/log.txt"
        echo "save \"\""
        echo "enable-debug-command local"
        echo "repl-diskless-sync-delay 0"
        printf '%s\n' "$@"
    } >"$d/redis.conf"
    "$bin" "$d/redis.conf" >>"$d/stderr.txt" 2>&1 &
    pid[$name]=$!
    wait_until 10 sh -c "[ \"\$(timeout 2 '$cli' -p $port ping 2>/dev/null)\" = PONG ]" ||
        { err "start $name" "no PONG on port $port: $(tail -n 5 "$d/log.txt" 2>/dev/null)"; return 1; }
}

stop() {  # SHUTDOWN NOSAVE: the files stay as they are
    local name=$1 port=$2
    c "$port" shutdown nosave >/dev/null
    wait "${pid[$name]}" 2>/dev/null
    unset "pid[$name]"
}

same_state() {  # same_state NAME PORT_A PORT_B
    local a b
    a=$(dataset_state "$2") b=$(dataset_state "$3")
    if [ "$a" = "$b" ] && [ "$(head -n 1 <<<"$a")" != 0000000000000000000000000000000000000000 ]; then
        ok "$1"
    else
        err "$1" "port $2 and port $3 differ: $(diff <(echo "$a") <(echo "$b") | head -n 8 | tr '\n' '|')"
    fi
}
same_as_file() {  # same_as_file NAME PORT FILE
    local a
    a=$(dataset_state "$2")
    if [ "$a" = "$(cat "$3")" ] && [ "$(head -n 1 <<<"$a")" != 0000000000000000000000000000000000000000 ]; then ok "$1"; else
        err "$1" "differs from the writer's: $(diff "$3" <(echo "$a") | head -n 8 | tr '\n' '|')"
    fi
}

# 1. Files written by stock Redis --------------------------------------------
# write_files BINARY OUT: BINARY writes the dataset's RDB (OUT/dump.rdb,
# its state OUT/rdb.state) and, after round 2, its multi-part AOF
# (OUT/appendonlydir, OUT/aof.state).
write_files() {
    local bin=$1 out=$2 p
    p=$(free_port)
    start writer "$bin" "$p" "appendonly yes" "appendfsync always" || return 1
    dataset_load "$p" 1
    c "$p" save >/dev/null
    mkdir -p "$out"
    dataset_state "$p" >"$out/rdb.state"
    cp "$work/writer/dump.rdb" "$out/dump.rdb"
    c "$p" bgrewriteaof >/dev/null
    wait_until 30 sh -c "[ \"\$(timeout 2 '$cli' -p $p info persistence | tr -d '\r' | grep -c '^aof_rewrite_in_progress:0\|^aof_rewrite_scheduled:0')\" = 2 ]" ||
        err "AOF rewrite" "did not end"
    dataset_load "$p" 2
    dataset_state "$p" >"$out/aof.state"
    stop writer "$p"
    rm -rf "$out/appendonlydir"
    cp -r "$work/writer/appendonlydir" "$out/"
    rm -rf "$work/writer"
}

# read_files WHO DIR: redis-afork started on DIR's RDB, then on its AOF,
# has the writer's state.
read_files() {
    local who=$1 dir=$2 p m
    m=$(cat "$dir/appendonlydir/"*.manifest 2>/dev/null)
    if grep -q 'type b' <<<"$m" && grep -q 'type i' <<<"$m"; then
        ok "$who wrote a multi-part AOF (a base and an incr part)"
    else
        err "$who wrote a multi-part AOF" "manifest: $(tr '\n' '|' <<<"$m")"
    fi
    rm -rf "$work/reader"; mkdir -p "$work/reader"
    cp "$dir/dump.rdb" "$work/reader/"
    p=$(free_port)
    if start reader "$afork" "$p" "appendonly no"; then
        same_as_file "redis-afork loads $who's RDB: same digest, field TTLs, groups, functions" "$p" "$dir/rdb.state"
        stop reader "$p"
    fi
    rm -rf "$work/reader"; mkdir -p "$work/reader"
    cp -r "$dir/appendonlydir" "$work/reader/"
    p=$(free_port)
    if start reader "$afork" "$p" "appendonly yes"; then
        same_as_file "redis-afork loads $who's multi-part AOF: same digest, field TTLs, groups, functions" "$p" "$dir/aof.state"
        stop reader "$p"
    fi
}

# drop-in.sh --write-files BINARY DIR: write DIR for a test asset (the
# files of an older Redis, tests/system/drop-in-assets/).
if [ "${1:-}" = --write-files ]; then
    write_files "$2" "$3" && echo "wrote $3 with $("$2" --version)"
    exit "$status"
fi

write_files "$stockd" "$work/stock" || exit 1
read_files "stock Redis $REDIS_VERSION" "$work/stock"
assets=0
for asset in "$(dirname "$0")"/drop-in-assets/redis-*/; do
    [ -d "$asset" ] || continue
    assets=$((assets + 1))
    read_files "Redis $(basename "$asset" | sed 's/^redis-//')" "$asset"
done
[ "$assets" -gt 0 ] || err "older releases' files" "no tests/system/drop-in-assets/redis-*/"

# 2. Replication both ways ------------------------------------------------------
link_up() { [ "$(field "$1" replication master_link_status)" = up ] &&
    [ "$(field "$1" replication master_sync_in_progress)" = 0 ]; }
offsets_met() { [ "$(field "$1" replication master_repl_offset)" = "$(field "$2" replication master_repl_offset)" ]; }

# replicate NAME PRIMARY_BIN REPLICA_BIN DISKLESS(yes|no)
replicate() {
    local name=$1 pbin=$2 rbin=$3 diskless=$4 pp rp full0 part0 d
    pp=$(free_port) rp=$(free_port)
    d=repl$((++repl_n))
    start "$d-p" "$pbin" "$pp" "repl-diskless-sync $diskless" || return
    dataset_load "$pp" 1
    start "$d-r" "$rbin" "$rp" || return
    c "$rp" replicaof 127.0.0.1 "$pp" >/dev/null
    if wait_until 30 link_up "$rp" && wait_until 10 offsets_met "$pp" "$rp"; then
        same_state "$name: full sync (repl-diskless-sync $diskless): replica's digest is the primary's" "$pp" "$rp"
    else
        err "$name: full sync (repl-diskless-sync $diskless)" "link not up: $(tail -n 5 "$work/$d-r/log.txt")"
        return
    fi
    full0=$(field "$pp" stats sync_full) part0=$(field "$pp" stats sync_partial_ok)
    c "$rp" client kill type master >/dev/null
    dataset_load "$pp" 2
    if wait_until 30 link_up "$rp" && wait_until 10 offsets_met "$pp" "$rp" &&
        [ "$(field "$pp" stats sync_partial_ok)" -gt "$part0" ] &&
        [ "$(field "$pp" stats sync_full)" = "$full0" ]; then
        same_state "$name: partial resync after a link drop: replica's digest is the primary's" "$pp" "$rp"
    else
        err "$name: partial resync after a link drop" "sync_full $full0 -> $(field "$pp" stats sync_full), sync_partial_ok $part0 -> $(field "$pp" stats sync_partial_ok)"
    fi
    stop "$d-r" "$rp"
    stop "$d-p" "$pp"
}
repl_n=0
replicate "stock primary, redis-afork replica" "$stockd" "$afork" no
replicate "stock primary, redis-afork replica" "$stockd" "$afork" yes
replicate "redis-afork primary, stock replica" "$afork" "$stockd" no
replicate "redis-afork primary, stock replica" "$afork" "$stockd" yes

# 3. An RDB of a newer format ------------------------------------------------------
mkdir -p "$work/newer"
python3 - "$work/stock/dump.rdb" "$work/newer/dump.rdb" <<'PY'
import sys
data = open(sys.argv[1], "rb").read()
assert data[:5] == b"REDIS", data[:9]
version = int(data[5:9])
open(sys.argv[2], "wb").write(b"REDIS%04d" % (version + 1) + data[9:])
PY
before=$(sha256sum <"$work/newer/dump.rdb")
p4=$(free_port)
cat >"$work/newer/redis.conf" <<EOF
port $p4
bind 127.0.0.1
dir $work/newer
logfile $work/newer/log.txt
save 60 1
appendonly no
EOF
timeout 20 "$afork" "$work/newer/redis.conf" >"$work/newer/stderr.txt" 2>&1
rc=$?
if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && grep -q "Can't handle RDB format version" "$work/newer/log.txt" &&
    [ "$(sha256sum <"$work/newer/dump.rdb")" = "$before" ]; then
    ok "an RDB of a newer format is refused with upstream's message and left as it was"
else
    err "an RDB of a newer format is refused" "exit $rc, log: $(tail -n 3 "$work/newer/log.txt" | tr '\n' '|'), file $( [ "$(sha256sum <"$work/newer/dump.rdb")" = "$before" ] && echo kept || echo changed)"
fi
exit "$status"
