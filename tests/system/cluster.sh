#!/usr/bin/env bash
# cluster.sh -- a Redis Cluster of redis-afork nodes: 3 primaries, 3
# replicas, made by `redis-cli --cluster create ... --cluster-replicas 1`.
#
#  - writes 1-3 keys into every one of the 16384 slots (32767 keys, each to
#    its slot's primary with redis-cli --pipe), then checks every node:
#    DBSIZE and the key names (SCAN) are its slots' keys as written, each
#    replica's DEBUG DIGEST is its primary's, every value reads back
#    through `redis-cli -c` (MOVED redirects followed);
#  - a full resync: one replica is stopped, its dump.rdb removed, and
#    started again with its nodes.conf: its primary's sync_full and
#    total_forks each rise by 1, INFO fork shows that fork, and the replica
#    holds its primary's data again;
#  - a manual failover (CLUSTER FAILOVER on a replica): roles swap, the old
#    primary continues by partial sync (no fork anywhere);
#  - an automatic failover: a primary is killed (SIGKILL), its replica is
#    elected, the killed node comes back empty as the new primary's
#    replica, which forks once for its full sync;
#  - after each step: cluster_state ok on every node, every node's data as
#    written, and every node's INFO fork present and consistent with the
#    syncs that happened (no saves are configured, so on every node
#    total_forks = sync_full; the fork times, percentiles and child fields
#    agree with that count); the nodes' logs show each of those syncs,
#    full or partial.
# Runs in about 25 s on an idle 2-CPU machine, up to 45 s on a busy one.
# Extra node configuration (one directive a line) from AFORK_CLUSTER_CONF,
# e.g. AFORK_CLUSTER_CONF='fork-thp yes'. With AFORK_CLUSTER_MIX=1 every
# other node (a primary and two replicas) is stock Redis of the same
# release (build/stock), so that stock and redis-afork nodes replicate
# from each other; stock nodes have no INFO fork, so on them only
# total_forks = sync_full is checked.
. "$(dirname "$0")/lib.sh"

cli=$tree/src/redis-cli
server=$tree/src/redis-server
t_start=$(date +%s)
declare -A pid bus

cleanup() {
    local p n
    for n in "${!pid[@]}"; do
        p=${pid[$n]}
        [ -n "$p" ] && kill -KILL "$p" 2>/dev/null
    done
    for n in "${!pid[@]}"; do
        p=${pid[$n]}
        [ -n "$p" ] && wait "$p" 2>/dev/null
    done
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# 12 distinct free ports (6 clients, 6 cluster buses), bound together so
# none is given twice.
mapfile -t ports < <(python3 -c '
import socket
ss = [socket.socket() for _ in range(12)]
for s in ss: s.bind(("127.0.0.1", 0))
for s in ss: print(s.getsockname()[1])')
nodes=("${ports[@]:0:6}")
declare -A is_stock=()
if [ "${AFORK_CLUSTER_MIX:-0}" = 1 ]; then
    if [ ! -x "$stock/src/redis-server" ]; then
        err "mixed cluster" "no stock build at $stock (make stock)"
        exit 1
    fi
    for i in 1 3 5; do is_stock[${nodes[$i]}]=1; done
fi
for i in 0 1 2 3 4 5; do bus[${nodes[$i]}]=${ports[$((i + 6))]}; done

# Helpers ------------------------------------------------------------------

c() { local p=$1; shift; timeout 20 "$cli" -p "$p" "$@" 2>&1 | tr -d '\r'; }
# field PORT SECTION NAME: one INFO field.
field() { c "$1" info "$2" | sed -n "s/^$3://p"; }
# wait_until SECONDS CMD...: until CMD succeeds (every 0.1 s).
wait_until() {
    local end=$(( $(date +%s%N) / 1000000 + $1 * 1000 ))
    shift
    until "$@"; do
        [ $(( $(date +%s%N) / 1000000 )) -lt "$end" ] || return 1
        sleep 0.1
    done
}
node_log() {
    { tail -n 5 "$work/$1/stderr.txt"; tail -n "${2:-15}" "$work/$1/log.txt"; } 2>/dev/null | sed "s/^/    [$1] /"
}
# log_lines PORT: the length of its log; log_since PORT N: the log after
# line N (grep -c PATTERN in it: log_count PORT N PATTERN).
log_lines() { wc -l <"$work/$1/log.txt"; }
log_count() { tail -n +"$(($2 + 1))" "$work/$1/log.txt" | grep -c -- "$3"; }

start_node() {
    local p=$1 d=$work/$1
    mkdir -p "$d"
    [ -f "$d/redis.conf" ] || cat >"$d/redis.conf" <<EOF
port $p
cluster-port ${bus[$p]}
bind 127.0.0.1
dir $d
logfile $d/log.txt
daemonize no
cluster-enabled yes
cluster-config-file nodes.conf
cluster-node-timeout 2000
save ""
appendonly no
repl-diskless-sync-delay 0
enable-debug-command local
${AFORK_CLUSTER_CONF:-}
EOF
    local bin=$server
    [ -z "${is_stock[$p]:-}" ] || bin=$stock/src/redis-server
    "$bin" "$d/redis.conf" >>"$d/stderr.txt" 2>&1 &
    pid[$p]=$!
}

stop_node() {  # SIGKILL, as a crash: nothing saved
    kill -KILL "${pid[$1]}" 2>/dev/null
    wait "${pid[$1]}" 2>/dev/null
    pid[$1]=
}

pongs() { local p; for p in "${nodes[@]}"; do [ "$(c "$p" ping)" = PONG ] || return 1; done; }
state_ok() { [ "$(c "$1" cluster info | sed -n 's/^cluster_state://p')" = ok ]; }
all_ok() { local p; for p in "${nodes[@]}"; do state_ok "$p" || return 1; done; }
cluster_check() { timeout 20 "$cli" --cluster check "127.0.0.1:$1" >"$work/check.out" 2>&1 &&
    ! grep -q '^\[ERR\]' "$work/check.out"; }
no_child() { [ "$(field "$1" persistence rdb_bgsave_in_progress)" = 0 ]; }
link_up() { [ "$(field "$1" replication master_link_status)" = up ] &&
    [ "$(field "$1" replication master_sync_in_progress)" = 0 ]; }
role_is() { [ "$(field "$1" replication role)" = "$2" ] &&
    { [ -z "${3:-}" ] || [ "$(field "$1" replication master_port)" = "$3" ]; }; }

# The data: keys and values as written, the node of each slot (py helper).
cat >"$work/cl.py" <<'PY'
import hashlib, random, sys

def crc16(b):
    crc = 0
    for x in b:
        crc ^= x << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
            crc &= 0xFFFF
    return crc

def parse_nodes(path):
    """cluster nodes output -> {port: (role, master_port, [slot ranges])}."""
    rows = [l.split() for l in open(path) if l.strip()]
    port_of = {r[0]: int(r[1].split("@")[0].rsplit(":", 1)[1]) for r in rows}
    out = {}
    for r in rows:
        flags = r[2].split(",")
        role = "master" if "master" in flags else "slave"
        ranges = []
        for s in r[8:]:
            if s.startswith("["):
                continue
            a, _, b = s.partition("-")
            ranges.append((int(a), int(b or a)))
        out[port_of[r[0]]] = (role, port_of.get(r[3]), ranges)
    return out

def load_keys(d):
    return [l.rstrip("\n").split("\t") for l in open(d + "/keys.tsv")]

cmd, d = sys.argv[1], sys.argv[2]
if cmd == "gen":
    # For every slot a hash tag that maps to it, then 1-3 keys per slot.
    tags, n = {}, 0
    while len(tags) < 16384:
        s = crc16(str(n).encode()) % 16384
        tags.setdefault(s, str(n))
        n += 1
    with open(d + "/keys.tsv", "w") as f:
        for s in range(16384):
            for j in range(1 + s % 3):
                k = "{%s}:k%d" % (tags[s], j)
                v = hashlib.sha1(k.encode()).hexdigest() * 2 + ":" + k
                f.write("%d\t%s\t%s\n" % (s, k, v))
    # The GETs in slot order (a redirect where the next node's slots begin)
    # and shuffled (a redirect for about 2 keys in 3).
    keys = load_keys(d)
    for order in ("slots", "shuffled"):
        if order == "shuffled":
            random.Random(38).shuffle(keys)
        with open("%s/gets.%s" % (d, order), "w") as g, open("%s/values.%s" % (d, order), "w") as v:
            for _, k, val in keys:
                g.write("GET %s\n" % k)
                v.write(val + "\n")
elif cmd == "topo":
    # port role master_port shard (a shard: its primary's first slot), and
    # for every node the keys it must hold (exp.PORT, sorted), for primaries
    # the RESP of their SETs (pipe.PORT).
    nodes = parse_nodes(sys.argv[3])
    owner = [None] * 16384
    for p, (role, _, ranges) in nodes.items():
        if role == "master":
            for a, b in ranges:
                for s in range(a, b + 1):
                    owner[s] = p
    first = {}
    for p, (role, _, ranges) in nodes.items():
        if role == "master" and ranges:
            first[p] = min(a for a, _ in ranges)
    per = {p: [] for p in nodes}
    for s, k, v in load_keys(d):
        per[owner[int(s)]].append((k, v))
    for p, (role, m, _) in sorted(nodes.items()):
        prim = p if role == "master" else m
        print(p, role, m or "-", first.get(prim, "-"))
        with open("%s/exp.%d" % (d, p), "w") as f:
            f.writelines(k + "\n" for k in sorted(k for k, _ in per.get(prim, [])))
        if role == "master":
            with open("%s/pipe.%d" % (d, p), "wb") as f:
                for k, v in per[p]:
                    f.write(b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n" % (
                        len(k), k.encode(), len(v), v.encode()))
PY

# topo NODE: the topology as NODE sees it into role[], master[], shard[],
# and exp.PORT/pipe.PORT.
declare -A role master shard
topo() {
    local p r m s
    c "$1" cluster nodes >"$work/nodes.txt"
    role=() master=() shard=()
    while read -r p r m s; do
        role[$p]=$r master[$p]=$m shard[$p]=$s
    done < <(python3 "$work/cl.py" topo "$work" "$work/nodes.txt")
    [ "${#role[@]}" -eq 6 ]
}
primaries() { local p; for p in "${nodes[@]}"; do [ "${role[$p]}" = master ] && echo "$p"; done; }
replica_of() { local p; for p in "${nodes[@]}"; do [ "${master[$p]}" = "$1" ] && echo "$p"; done; }

# wait_cluster WHAT: every node up, cluster_state ok on all, the nodes
# agree (redis-cli --cluster check), each replica linked and synced, no
# sync child left; then the topology.
wait_cluster() {
    local p
    if ! wait_until 30 all_ok; then
        err "$1: cluster_state ok on every node" "$(for p in "${nodes[@]}"; do
            echo "  :$p $(c "$p" cluster info | grep cluster_state)"; done)"
        return 1
    fi
    ok "$1: cluster_state ok on all 6 nodes"
    if ! wait_until 20 cluster_check "${nodes[0]}"; then
        err "$1: redis-cli --cluster check" "$(grep -E 'ERR|WARN|OK' "$work/check.out" | head)"
        return 1
    fi
    ok "$1: redis-cli --cluster check: all 16384 slots covered, all nodes agree"
    if wait_until 20 topo_ok; then
        ok "$1: 3 primaries, each with 1 replica linked and in sync ($(for p in $(primaries); do
            printf ':%s<-:%s ' "$p" "$(replica_of "$p")"; done | sed 's/ $//'))"
    else
        err "$1: 3 primaries with 1 replica each, linked" "$topo_why; as :${nodes[0]} sees it: $(cat "$work/nodes.txt")"
        return 1
    fi
}

# topo_ok: as nodes[0] sees it, 3 primaries with 1 replica each, and every
# node agrees on its own role (INFO replication): replicas linked and
# synced, primaries without a sync child.
topo_ok() {
    local p n
    topo_why=
    topo "${nodes[0]}" || { topo_why="not 6 nodes"; return 1; }
    n=$(primaries | wc -l)
    [ "$n" -eq 3 ] || topo_why+=" $n primaries;"
    for p in $(primaries); do
        [ "$(replica_of "$p" | wc -l)" -eq 1 ] || topo_why+=" :$p has $(replica_of "$p" | wc -l) replicas;"
    done
    for p in "${nodes[@]}"; do
        if [ "${role[$p]}" = slave ]; then
            link_up "$p" && role_is "$p" slave "${master[$p]}" || topo_why+=" :$p not a linked replica of :${master[$p]};"
        else
            no_child "$p" && role_is "$p" master || topo_why+=" :$p not a primary without a child;"
        fi
    done
    [ -z "$topo_why" ]
}

# check_data WHAT [ORDER]: every node holds its shard's keys as written
# (count and names), each node's digest is its shard's, every value reads
# back through redis-cli -c (keys in ORDER: slots or shuffled).
declare -A digest
check_data() {
    local p n e d
    for p in "${nodes[@]}"; do
        # replicas: their primary has nothing unsent
        [ "${role[$p]}" = master ] && c "$p" wait 1 5000 >/dev/null
    done
    for p in "${nodes[@]}"; do
        n=$(c "$p" dbsize)
        e=$(wc -l <"$work/exp.$p")
        timeout 20 "$cli" -p "$p" --scan --count 1000 2>/dev/null | tr -d '\r' | sort >"$work/scan.$p"
        if [ "$n" = "$e" ] && cmp -s "$work/scan.$p" "$work/exp.$p"; then
            ok "$1: :$p (${role[$p]}) holds its slots' $e keys, as written (DBSIZE and SCAN)"
        else
            err "$1: :$p (${role[$p]}) holds its slots' keys" \
                "DBSIZE $n, expected $e; SCAN vs written: $(diff "$work/exp.$p" "$work/scan.$p" | grep -c '^[<>]') keys differ, e.g. $(diff "$work/exp.$p" "$work/scan.$p" | grep '^[<>]' | head -3 | tr '\n' ' ')"
        fi
        d=$(c "$p" debug digest)
        if [ "$d" = "${digest[${shard[$p]}]}" ] && [ ${#d} -eq 40 ]; then
            ok "$1: :$p (${role[$p]}) DEBUG DIGEST is its shard's as written (${d:0:12}...)"
        else
            err "$1: :$p (${role[$p]}) DEBUG DIGEST is its shard's as written" \
                "$d, expected ${digest[${shard[$p]}]} (shard of slot ${shard[$p]})"
        fi
    done
    # Every value through redis-cli -c, from one node, in slot order or
    # shuffled (ORDER).
    local order=${2:-slots}
    local moved
    timeout 60 "$cli" -c -p "${nodes[0]}" <"$work/gets.$order" 2>&1 | tr -d '\r' >"$work/got.raw"
    grep -v '^-> Redirected' "$work/got.raw" >"$work/got.txt"
    moved=$(grep -c '^-> Redirected' "$work/got.raw")
    if cmp -s "$work/got.txt" "$work/values.$order" && [ "$moved" -ge 1 ]; then
        ok "$1: all $(wc -l <"$work/values.$order") values read back as written through redis-cli -c (keys in $order order, $moved MOVED redirects followed)"
    else
        err "$1: all values read back through redis-cli -c (keys in $order order)" \
            "$(diff "$work/values.$order" "$work/got.txt" | grep -c '^[<>]') lines differ, e.g. $(diff "$work/values.$order" "$work/got.txt" | grep '^[<>]' | head -4 | tr '\n' ' ')"
    fi
}

# counters PORT: the node's INFO (all of it) into info.PORT, and its fork
# and sync counters into forks[PORT], fulls[PORT], partials[PORT] and
# fork_usec[PORT] (INFO fork's total_fork_usec).
declare -A forks fulls partials fork_usec
counters() {
    c "$1" info everything >"$work/info.$1"
    forks[$1]=$(sed -n 's/^total_forks://p' "$work/info.$1")
    fulls[$1]=$(sed -n 's/^sync_full://p' "$work/info.$1")
    partials[$1]=$(sed -n 's/^sync_partial_ok://p' "$work/info.$1")
    fork_usec[$1]=$(sed -n 's/^total_fork_usec://p' "$work/info.$1")
}

# check_fork WHAT PORT: counters PORT, then: INFO fork is there and agrees
# with the node's forks and syncs.
check_fork() {
    local w=$1 p=$2 i=$work/info.$2 why=
    counters "$p"
    if [ -n "${is_stock[$p]:-}" ]; then
        if [ "${forks[$p]}" = "${fulls[$p]}" ]; then
            ok "$w: :$p (stock) ${forks[$p]} forks = ${fulls[$p]} full syncs"
        else
            err "$w: :$p (stock) forks" "total_forks ${forks[$p]} != sync_full ${fulls[$p]}"
        fi
        return
    fi
    f() { sed -n "s/^$1://p" "$i"; }
    grep -q '^# Fork$' "$i" || why+=" no '# Fork' section;"
    local k
    for k in max_fork_usec total_fork_usec fork_p50_usec fork_p99_usec fork_p999_usec \
            latest_fork_rate_gb_per_sec latest_fork_child_ready_usec max_fork_child_ready_usec \
            current_fork_cow_minor_faults latest_fork_cow_minor_faults \
            latest_fork_cow_max_eventloop_usec latest_fork_child_life_usec latest_fork_hook_usec \
            fork_quiet_window_enabled fork_quiet_window_active fork_quiet_windows \
            page_table_bytes thp_enabled fork_thp fork_thp_heap fork_thp_quiet_saves \
            fork_async_kernel fork_async_enabled; do
        [ -n "$(f $k)" ] || why+=" no $k;"
    done
    local n=${forks[$p]:-x} max total p50 p99 p999 life ready cow
    max=$(f max_fork_usec) total=$(f total_fork_usec) p50=$(f fork_p50_usec)
    p99=$(f fork_p99_usec) p999=$(f fork_p999_usec) life=$(f latest_fork_child_life_usec)
    ready=$(f latest_fork_child_ready_usec) cow=$(f latest_fork_cow_minor_faults)
    if [ -z "$why" ]; then
        [ "$n" = "${fulls[$p]}" ] || why+=" total_forks $n != sync_full ${fulls[$p]} (no saves are configured: only full syncs fork);"
        [ "$(f rdb_bgsave_in_progress)" = 0 ] && [ "$(f current_fork_cow_minor_faults)" = 0 ] ||
            why+=" a child lives;"
        [ "$(f fork_quiet_window_active)" = 0 ] || why+=" a quiet window is open;"
        if [ "$(f fork_quiet_window_enabled)" = 1 ]; then
            [ "$(f fork_quiet_windows)" = "$n" ] || why+=" fork_quiet_windows $(f fork_quiet_windows) != $n forks;"
        else
            [ "$(f fork_quiet_windows)" = 0 ] || why+=" fork_quiet_windows $(f fork_quiet_windows) with the window off;"
        fi
        local want_thp=0
        grep -qx 'fork-thp yes' <<<"${AFORK_CLUSTER_CONF:-}" && want_thp=1
        [ "$(f fork_thp)" = "$want_thp" ] || why+=" fork_thp $(f fork_thp), configured $want_thp;"
        if [ "$(f fork_thp_heap)" = on ]; then
            [ "$(f fork_thp_quiet_saves)" = "$n" ] || why+=" fork_thp_quiet_saves $(f fork_thp_quiet_saves) != $n forks;"
        else
            # Not on: off (no), off or waiting (auto, the default).
            [ "$want_thp" = 0 ] && [[ "$(f fork_thp_heap)" =~ ^(off|waiting: auto: ) ]] ||
                why+=" fork_thp_heap $(f fork_thp_heap);"
        fi
        if [ "$n" -eq 0 ]; then
            [ "$max" = 0 ] && [ "$total" = 0 ] && [ "$p50" = 0 ] && [ "$life" = -1 ] && [ "$cow" = -1 ] ||
                why+=" no fork, but max_fork_usec $max total_fork_usec $total fork_p50_usec $p50 latest_fork_child_life_usec $life latest_fork_cow_minor_faults $cow;"
        else
            [ "$max" -gt 0 ] && [ "$total" -ge "$max" ] && [ "$total" -le $((n * max)) ] ||
                why+=" $n forks: max_fork_usec $max, total_fork_usec $total;"
            [ "$p50" -gt 0 ] && [ "$p50" -le "$p99" ] && [ "$p99" -le "$p999" ] && [ "$p999" -le "$max" ] ||
                why+=" percentiles p50 $p50 p99 $p99 p999 $p999 max $max;"
            [ "$life" -gt 0 ] && [ "$ready" -ge 0 ] && [ "$ready" -lt "$life" ] && [ "$cow" -ge 0 ] ||
                why+=" latest child: life $life ready $ready cow faults $cow;"
            [ "$n" -gt 1 ] || [ "$max" -le "$(f latest_fork_usec)" ] ||
                why+=" max_fork_usec $max above upstream's latest_fork_usec $(f latest_fork_usec) for the only fork;"
        fi
    fi
    if [ -z "$why" ]; then
        ok "$w: :$p INFO fork sane: $n forks = $n full syncs, max_fork_usec $max, total_fork_usec $total, latest child life ${life} us, fork_quiet_windows $(f fork_quiet_windows), fork_thp_heap $(f fork_thp_heap), fork_thp_quiet_saves $(f fork_thp_quiet_saves)"
    else
        err "$w: :$p INFO fork sane" "${why# }"
    fi
}
check_forks() { local p; for p in "${nodes[@]}"; do check_fork "$1" "$p"; done; }

finish() {
    echo "== cluster.sh: $(( $(date +%s) - t_start )) s"
    exit $status
}

# 1. The cluster ----------------------------------------------------------

python3 "$work/cl.py" gen "$work"

for p in "${nodes[@]}"; do start_node "$p"; done
if wait_until 20 pongs; then
    ok "6 redis-afork nodes (cluster-enabled) serve PING on ${nodes[*]}${AFORK_CLUSTER_CONF:+ (with: $AFORK_CLUSTER_CONF)}"
else
    err "6 cluster nodes start" "$(for p in "${nodes[@]}"; do node_log "$p" 5; done)"
    finish
fi
v=$(field "${nodes[0]}" server redis_afork_version)
if [ -n "$v" ] && [ "$(field "${nodes[0]}" server redis_version)" = "$REDIS_VERSION" ]; then
    ok "the nodes are redis-afork $v on Redis $REDIS_VERSION"
else
    err "the nodes are redis-afork" "redis_afork_version '$v', redis_version $(field "${nodes[0]}" server redis_version)"
fi

if timeout 60 "$cli" --cluster create $(printf '127.0.0.1:%s ' "${nodes[@]}") \
        --cluster-replicas 1 --cluster-yes >"$work/create.out" 2>&1 &&
        grep -q 'All 16384 slots covered' "$work/create.out"; then
    ok "redis-cli --cluster create ... --cluster-replicas 1 --cluster-yes"
else
    err "redis-cli --cluster create" "$(tail -n 15 "$work/create.out")"
    finish
fi
wait_cluster "created" || finish

# 2. The data -------------------------------------------------------------

topo "${nodes[0]}"
nkeys=$(wc -l <"$work/keys.tsv")
bad=
for p in $(primaries); do
    out=$(timeout 60 "$cli" -p "$p" --pipe <"$work/pipe.$p" 2>&1 | tr -d '\r')
    grep -qE "errors: 0, replies: $(wc -l <"$work/exp.$p")\$" <<<"$out" || bad+=" :$p: $out"
done
if [ -z "$bad" ]; then
    ok "wrote $nkeys keys, 1-3 in each of the 16384 slots, to their primaries (redis-cli --pipe): $(for p in $(primaries); do
        printf ':%s %s, ' "$p" "$(wc -l <"$work/exp.$p")"; done | sed 's/, $//')"
else
    err "writing $nkeys keys to their primaries" "$bad"
fi
# Each shard's digest, from its primary right after the writes (the GETs
# below check the values themselves).
for p in $(primaries); do digest[${shard[$p]}]=$(c "$p" debug digest); done
check_data "written" shuffled
check_forks "created"
declare -A forks0 fulls0 fork_usec0
for p in "${nodes[@]}"; do forks0[$p]=${forks[$p]} fulls0[$p]=${fulls[$p]} fork_usec0[$p]=${fork_usec[$p]}; done

# 3. A replica's full resync: stopped, its RDB removed, started again with
# its nodes.conf (it then has no replication ID or offset: PSYNC ? -1).
mapfile -t prim < <(primaries)
pa=${prim[0]} ra=$(replica_of "${prim[0]}")
la=$(log_lines "$pa") lr=$(log_lines "$ra")
stop_node "$ra"
rm -f "$work/$ra/dump.rdb"
start_node "$ra"
if wait_until 20 link_up "$ra" && role_is "$ra" slave "$pa"; then
    ok "resync: replica :$ra restarted without its RDB is linked to :$pa again"
else
    err "resync: replica :$ra restarted without its RDB links to :$pa" "$(node_log "$ra")"
fi
wait_until 10 no_child "$pa"
check_fork "resync" "$pa"
if [ "${fulls[$pa]}" -eq $((fulls0[$pa] + 1)) ] && [ "${forks[$pa]}" -eq $((forks0[$pa] + 1)) ] &&
    { [ -n "${is_stock[$pa]:-}" ] || [ "${fork_usec[$pa]}" -gt "${fork_usec0[$pa]}" ]; }; then
    ok "resync: primary :$pa sync_full ${fulls0[$pa]} -> ${fulls[$pa]}, total_forks ${forks0[$pa]} -> ${forks[$pa]}, INFO fork total_fork_usec ${fork_usec0[$pa]} -> ${fork_usec[$pa]} (one fork for the full sync)"
else
    err "resync: primary :$pa made one full sync and one fork" \
        "sync_full ${fulls0[$pa]} -> ${fulls[$pa]}, total_forks ${forks0[$pa]} -> ${forks[$pa]}, total_fork_usec ${fork_usec0[$pa]} -> ${fork_usec[$pa]}"
fi
# (Redis 8's defaults: diskless, over a second connection, the rdb channel.)
if [ "$(log_count "$pa" "$la" "Full resync requested by replica 127.0.0.1:$ra")" = 1 ] &&
    [ "$(log_count "$ra" "$lr" "Done loading RDB, keys loaded: $(wc -l <"$work/exp.$ra"),")" = 1 ] &&
    [ "$(log_count "$ra" "$lr" 'MASTER <-> REPLICA sync: Finished with success')" = 1 ]; then
    ok "resync: the logs show one full resync (primary: 'Full resync requested by replica', replica: all its keys loaded from the RDB)"
else
    err "resync: the logs show one full resync" "$(node_log "$pa" 8; node_log "$ra" 8)"
fi
wait_cluster "resync" && check_data "resync"

# 4. A manual failover: CLUSTER FAILOVER on a replica.
pb=${prim[1]} rb=$(replica_of "${prim[1]}")
for p in "$pb" "$rb"; do counters "$p"; done
declare -A forks1 fulls1 partials1 fork_usec1
for p in "$pb" "$rb"; do
    forks1[$p]=${forks[$p]} fulls1[$p]=${fulls[$p]} partials1[$p]=${partials[$p]} fork_usec1[$p]=${fork_usec[$p]}
done
lb=$(log_lines "$pb") lrb=$(log_lines "$rb")
r=$(c "$rb" cluster failover)
if [ "$r" = OK ] && wait_until 20 role_is "$rb" master && wait_until 20 link_up "$pb" &&
    role_is "$pb" slave "$rb"; then
    ok "manual failover: CLUSTER FAILOVER on :$rb made it the primary, :$pb its replica"
else
    err "manual failover: CLUSTER FAILOVER on :$rb" "reply $r; $(node_log "$rb" 8; node_log "$pb" 8)"
fi
wait_cluster "manual failover" && check_data "manual failover"
check_fork "manual failover" "$rb"
check_fork "manual failover" "$pb"
if [ "${forks[$rb]}" -eq "${forks1[$rb]}" ] && [ "${fulls[$rb]}" -eq "${fulls1[$rb]}" ] &&
    [ "${partials[$rb]}" -eq $((partials1[$rb] + 1)) ] && [ "${forks[$pb]}" -eq "${forks1[$pb]}" ] &&
    [ "${fork_usec[$rb]}" = "${fork_usec1[$rb]}" ] && [ "${fork_usec[$pb]}" = "${fork_usec1[$pb]}" ]; then
    ok "manual failover: the old primary went on by partial sync (new primary :$rb sync_partial_ok ${partials1[$rb]} -> ${partials[$rb]}), no fork on either node (total_forks and INFO fork total_fork_usec unchanged)"
else
    err "manual failover: partial sync, no fork" \
        ":$rb sync_partial_ok ${partials1[$rb]} -> ${partials[$rb]}, sync_full ${fulls1[$rb]} -> ${fulls[$rb]}, total_forks ${forks1[$rb]} -> ${forks[$rb]}, total_fork_usec ${fork_usec1[$rb]} -> ${fork_usec[$rb]}; :$pb total_forks ${forks1[$pb]} -> ${forks[$pb]}, total_fork_usec ${fork_usec1[$pb]} -> ${fork_usec[$pb]}"
fi
if [ "$(log_count "$pb" "$lb" 'Successful partial resynchronization with master')" = 1 ] &&
    [ "$(log_count "$rb" "$lrb" 'Partial resynchronization request from .* accepted')" = 1 ] &&
    [ "$(log_count "$rb" "$lrb" 'Full resync requested')" = 0 ]; then
    ok "manual failover: the logs show the partial resync (old primary: 'Successful partial resynchronization', new primary: 'request ... accepted', no full resync)"
else
    err "manual failover: the logs show the partial resync" "$(node_log "$pb" 8; node_log "$rb" 8)"
fi

# 5. An automatic failover: a primary killed, its replica elected; the
# killed node comes back (no RDB: it never saved) as the replica of the new
# primary and syncs in full from it.
pc=${prim[2]} rc=$(replica_of "${prim[2]}")
counters "$rc"
fc0=${forks[$rc]} sc0=${fulls[$rc]} uc0=${fork_usec[$rc]}
lc=$(log_lines "$pc") lrc=$(log_lines "$rc")
t0=$(date +%s%N)
stop_node "$pc"
if wait_until 30 role_is "$rc" master; then
    ok "automatic failover: :$pc killed, its replica :$rc elected primary in $(( ($(date +%s%N) - t0) / 1000000 )) ms"
else
    err "automatic failover: :$rc elected after :$pc was killed" "$(node_log "$rc" 10)"
fi
up6=("${nodes[@]}")
nodes=()
for p in "${up6[@]}"; do [ "$p" = "$pc" ] || nodes+=("$p"); done
if wait_until 30 all_ok; then
    ok "automatic failover: cluster_state ok on the 5 nodes left"
else
    err "automatic failover: cluster_state ok on the 5 nodes left" "$(c "$rc" cluster info | head -3)"
fi
nodes=("${up6[@]}")
rm -f "$work/$pc/dump.rdb"
start_node "$pc"
if wait_until 30 role_is "$pc" slave "$rc" && wait_until 20 link_up "$pc"; then
    ok "automatic failover: :$pc restarted rejoined as the replica of :$rc"
else
    err "automatic failover: :$pc rejoins as the replica of :$rc" "$(node_log "$pc" 10)"
fi
wait_until 10 no_child "$rc"
wait_cluster "automatic failover" && check_data "automatic failover" shuffled
check_forks "automatic failover"
if [ "${fulls[$rc]}" -eq $((sc0 + 1)) ] && [ "${forks[$rc]}" -eq $((fc0 + 1)) ] &&
    { [ -n "${is_stock[$rc]:-}" ] || [ "${fork_usec[$rc]}" -gt "$uc0" ]; }; then
    ok "automatic failover: new primary :$rc sync_full $sc0 -> ${fulls[$rc]}, total_forks $fc0 -> ${forks[$rc]}, INFO fork total_fork_usec $uc0 -> ${fork_usec[$rc]} (one fork for the rejoined node)"
else
    err "automatic failover: new primary :$rc made one full sync and one fork" \
        "sync_full $sc0 -> ${fulls[$rc]}, total_forks $fc0 -> ${forks[$rc]}, total_fork_usec $uc0 -> ${fork_usec[$rc]}"
fi
if [ "$(log_count "$rc" "$lrc" "Full resync requested by replica 127.0.0.1:$pc")" = 1 ] &&
    [ "$(log_count "$pc" "$lc" "Done loading RDB, keys loaded: $(wc -l <"$work/exp.$rc"),")" = 1 ]; then
    ok "automatic failover: the logs show the rejoined node's one full resync"
else
    err "automatic failover: the logs show the rejoined node's one full resync" "$(node_log "$rc" 8; node_log "$pc" 8)"
fi
finish
