#!/usr/bin/env bash
# sentinel-scripts.sh -- Sentinel runs its scripts with posix_spawn.
#
# A sentinel monitors a master that is down, so it raises warning events at
# once (+monitor, +sdown, +odown, ...) and runs its notification-script for
# each. Checked, for redis-afork and for stock Redis side by side:
#  - the script gets the same arguments and environment from both;
#  - under strace, ours creates the script's process with CLONE_VM|CLONE_VFORK
#    (posix_spawn) and never forks, stock forks (so the check can fail);
#  - a script that is no longer executable is reported by both as
#    "-script-error <path> 0 2" and not retried.
. "$(dirname "$0")/lib.sh"


# start_sentinel NAME BINARY: a sentinel under strace, watching a dead port.
start_sentinel() {
    local name=$1 bin=$2 d=$work/$1
    mkdir -p "$d"
    cat >"$d/notify.sh" <<EOF
#!/bin/sh
echo "args=\$* env=\$AFORK_TEST_ENV" >>"$d/calls.txt"
EOF
    chmod +x "$d/notify.sh"
    sport=$(free_port)
    cat >"$d/sentinel.conf" <<EOF
port $sport
bind 127.0.0.1
dir $d
logfile $d/log.txt
loglevel debug
sentinel monitor mymaster 127.0.0.1 $(free_port) 1
sentinel down-after-milliseconds mymaster 200
sentinel notification-script mymaster $d/notify.sh
EOF
    AFORK_TEST_ENV=inherited-$name strace -ff -qq -o "$d/trace" \
        -e trace=clone,clone3,fork,vfork,execve \
        "$bin" "$d/sentinel.conf" --sentinel >/dev/null 2>&1 &
    eval "pid_$name=\$!"
}

stop_sentinel() {
    local p
    eval "p=\$pid_$1"
    "$tree/src/redis-cli" -p "$(sed -n 's/^port //p' "$work/$1/sentinel.conf")" \
        shutdown >/dev/null 2>&1 || kill "$p"
    wait "$p" 2>/dev/null
}

# wait_calls NAME N: until the script ran N times (10 s).
wait_calls() {
    for _ in $(seq 100); do
        [ "$(cat "$work/$1/calls.txt" 2>/dev/null | wc -l)" -ge "$2" ] && return 0
        sleep 0.1
    done
    return 1
}

# wait_log NAME PATTERN: until the log has PATTERN (10 s).
wait_log() {
    for _ in $(seq 100); do
        grep -qE -- "$2" "$work/$1/log.txt" 2>/dev/null && return 0
        sleep 0.1
    done
    return 1
}

need_strace_and_stock "sentinel scripts"

start_sentinel afork "$tree/src/redis-server"
start_sentinel stock "$stock/src/redis-server"
wait_calls afork 2 || err "sentinel scripts: redis-afork runs the script" "fewer than 2 calls"
wait_calls stock 2 || err "sentinel scripts: stock runs the script" "fewer than 2 calls"

# Same arguments (ports aside) and environment as stock, for the first
# event (the later ones run in parallel, in no fixed order).
norm() { grep '^args=+monitor' "$1" | sed -E 's/[0-9]{4,5}/PORT/g; s/inherited-(afork|stock)/inherited/'; }
if [ "$(norm "$work/afork/calls.txt")" = "$(norm "$work/stock/calls.txt")" ] &&
    grep -q "env=inherited-afork" "$work/afork/calls.txt" &&
    [ -n "$(norm "$work/afork/calls.txt")" ]; then
    ok "sentinel scripts: same arguments and environment as stock"
else
    err "sentinel scripts: same arguments and environment as stock" \
        "ours: $(head -2 "$work/afork/calls.txt" | tr '\n' '|') stock: $(head -2 "$work/stock/calls.txt" | tr '\n' '|')"
fi

# A script that cannot be executed any more.
chmod -x "$work/afork/notify.sh" "$work/stock/notify.sh"
"$tree/src/redis-cli" -p "$(sed -n 's/^port //p' "$work/afork/sentinel.conf")" \
    sentinel reset mymaster >/dev/null
"$tree/src/redis-cli" -p "$(sed -n 's/^port //p' "$work/stock/sentinel.conf")" \
    sentinel reset mymaster >/dev/null
errline='-script-error .*notify.sh 0 2'
if wait_log afork "$errline" && wait_log stock "$errline"; then
    ok "sentinel scripts: a script that cannot run is reported as '-script-error <path> 0 2', as by stock"
    # Not retried: every child that exited 2 gave its error line at once.
    sleep 1
    c=$(grep -cE -- '-script-child [0-9]+ 2 0' "$work/afork/log.txt")
    e=$(grep -cE -- "$errline" "$work/afork/log.txt")
    if [ "$c" -eq "$e" ]; then
        ok "sentinel scripts: a script that cannot run is not retried"
    else
        err "sentinel scripts: a script that cannot run is not retried" \
            "$c children exited 2, $e errors reported"
    fi
else
    err "sentinel scripts: exec failure reported as stock does" \
        "ours: $(grep -- '-script-error' "$work/afork/log.txt" | head -1) stock: $(grep -- '-script-error' "$work/stock/log.txt" | head -1)"
fi

stop_sentinel afork
stop_sentinel stock

# How the script processes were created, from the sentinel's main thread
# (strace -ff: one file per thread; the main thread's has the execve of
# the server). A fork is a clone without CLONE_VM; posix_spawn's is
# CLONE_VM|CLONE_VFORK; threads carry CLONE_THREAD.
main_trace() { grep -l 'execve(.*redis-server' "$work/$1"/trace.* | head -1; }
forks() { grep -E '^(clone|clone3)\(' "$1" | grep -v CLONE_VM | grep -cE '= [0-9]+$'; }
spawns() { grep -E '^(clone|clone3)\(' "$1" | grep CLONE_VFORK | grep CLONE_VM | grep -cE '= [0-9]+$'; }
af=$(forks "$(main_trace afork)")
as=$(spawns "$(main_trace afork)")
sf=$(forks "$(main_trace stock)")
# Ours forks once per failing script (that is how exit code 2 is kept).
afail=$(grep -cE -- "$errline" "$work/afork/log.txt")
if [ "$as" -ge 2 ] && [ "$af" -eq "$afail" ]; then
    ok "sentinel scripts: redis-afork starts scripts with posix_spawn ($as spawns, $af forks = failing scripts)"
else
    err "sentinel scripts: redis-afork starts scripts with posix_spawn" \
        "$as vfork-style clones, $af forks, $afail failing scripts"
fi
if [ "$sf" -ge 2 ]; then
    ok "sentinel scripts: stock forks for its scripts ($sf forks; the check can fail)"
else
    err "sentinel scripts: stock forks for its scripts" "found $sf forks in the stock trace"
fi
exit $status
