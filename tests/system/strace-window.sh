#!/usr/bin/env bash
# strace-window.sh -- prove the fork quiet window from outside the server.
#
# Runs redis-server under `strace -f` with a log file and an append-only
# file, fills it, then BGSAVE and BGREWRITEAOF, idle and under a write load
# from redis-benchmark. strace_window.py then lists the openat, mmap, munmap,
# mremap, mprotect, madvise and brk calls any thread of the parent made
# between the clone and the read of the child's ready message.
#
# The load overwrites a small keyspace, so the dataset does not grow: a
# dataset that grows during the window makes jemalloc map more heap (an
# mmap of a new extent), which the window does not hold back
# (docs/design.md, "The quiet window"), so a growing load (LPUSH) made
# this check fail now and then.
#
# redis-afork (fork-quiet-window yes; the child waits 200 ms before it
# signals, as a child copying a large page table would) must show none.
# Stock Redis, checked over the shorter span from the clone to its next
# event-loop wait, must show some (the log file is opened to say
# "Background saving started"): the check can fail.
#
# Environment: STRACE_KEEP=dir keeps the traces and reports there.
. "$(dirname "$0")/lib.sh"

checker=$top/tests/system/strace_window.py
labels=bgsave-idle,bgrewriteaof-idle,bgsave-load,bgrewriteaof-load
out=${STRACE_KEEP:-$work}
mkdir -p "$out"

cli() { "$tree/src/redis-cli" -p "$port" "$@"; }

wait_for() {   # wait_for FIELD VALUE: poll INFO until FIELD:VALUE (60 s)
    for _ in $(seq 600); do
        cli info persistence | tr -d '\r' | grep -qx "$1:$2" && return 0
        sleep 0.1
    done
    return 1
}

# bg_job CMD FIELD: run CMD and wait until the child it forks is done.
bg_job() {
    cli "$1" >/dev/null || return 1
    sleep 0.3
    wait_for "$2" 0
}

load_start() {
    "$tree/src/redis-benchmark" -p "$port" -q -c 8 -n 100000000 -r 1000 \
        -d 64 -t set >/dev/null 2>&1 &
    load_pid=$!
    sleep 1
}

load_stop() { kill "$load_pid" 2>/dev/null; wait "$load_pid" 2>/dev/null; }

# run_server NAME BINARY EXTRA-ARGS...: trace one server through the four
# forks; leaves $out/NAME.trace.
run_server() {
    local name=$1 bin=$2 dir
    dir=$out/$name
    shift 2
    mkdir -p "$dir"
    port=$(free_port)
    strace -f -ttt -qq -o "$out/$name.trace" \
        -e trace=clone,clone3,fork,vfork,pipe2,read,epoll_wait,epoll_pwait,open,openat,openat2,creat,mmap,munmap,mremap,mprotect,madvise,brk \
        "$bin" --port "$port" --bind 127.0.0.1 --dir "$dir" --logfile "$dir/log.txt" \
        --save '' --appendonly yes --enable-debug-command yes "$@" >/dev/null 2>&1 &
    local spid=$!
    for _ in $(seq 100); do cli ping >/dev/null 2>&1 && break; sleep 0.1; done
    cli debug populate 200000 key 100 >/dev/null &&
        bg_job bgsave rdb_bgsave_in_progress &&
        bg_job bgrewriteaof aof_rewrite_in_progress &&
        load_start &&
        bg_job bgsave rdb_bgsave_in_progress &&
        bg_job bgrewriteaof aof_rewrite_in_progress
    local rc=$?
    load_stop
    cli shutdown nosave >/dev/null 2>&1
    wait "$spid"
    return $rc
}

# check NAME: run the checker, keep its report in $out/NAME.report.
check() {
    python3 "$checker" "$out/$1.trace" --labels "$labels" --json "$out/$1.json" \
        >"$out/$1.report" 2>&1
    sed 's/^/    /' "$out/$1.report"
}

# jq-free JSON reading: python3 prints "forks ready violations".
summary() {
    python3 -c '
import json, sys
f = json.load(open(sys.argv[1]))
print(len(f), sum(x["end_kind"] == "ready" for x in f),
      sum(sum(x["forbidden"].values()) for x in f))' "$out/$1.json"
}

need_strace_and_stock "strace window"

if run_server afork "$tree/src/redis-server" \
        --fork-quiet-window yes --fork-debug-ready-delay 200; then
    check afork
    read -r n ready bad < <(summary afork)
    if [ "$n" -ne 4 ]; then
        err "strace: redis-afork window" "expected 4 forks in the trace, found $n"
    elif [ "$ready" -ne 4 ]; then
        err "strace: redis-afork window" "only $ready of 4 windows ended with a ready message"
    elif [ "$bad" -ne 0 ]; then
        err "strace: redis-afork window" "$bad forbidden call(s) in the parent's window"
    else
        ok "strace: redis-afork parent makes no open/mmap/munmap/mremap/mprotect/madvise/brk in the window (BGSAVE, BGREWRITEAOF, idle and under load)"
    fi
else
    err "strace: redis-afork window" "the traced server did not complete the forks"
fi

if run_server stock "$stock/src/redis-server"; then
    check stock
    read -r n ready bad < <(summary stock)
    if [ "$n" -ne 4 ]; then
        err "strace: stock shows the violation" "expected 4 forks in the trace, found $n"
    elif [ "$bad" -eq 0 ]; then
        err "strace: stock shows the violation" "no forbidden call found: the check cannot fail"
    else
        ok "strace: stock $REDIS_VERSION parent makes $bad forbidden call(s) right after fork (the check can fail)"
    fi
else
    err "strace: stock shows the violation" "the traced stock server did not complete the forks"
fi
exit $status
