#!/usr/bin/env bash
# make-run.sh -- `make run` serves on loopback with the shipped config, keeps
# its data in the given directory, and Ctrl-C (SIGINT to the foreground
# process group, as a terminal sends it) saves and stops it cleanly.
. "$(dirname "$0")/lib.sh"

cli=$tree/src/redis-cli
port=$(free_port)
data=$work/data
# Build first: make run's own (re)build can outlast the wait for PING below
# on a loaded machine, and this test is about serving, not building.
make -s -C "$top" build >/dev/null 2>&1 || { err "make build" "failed"; exit 1; }
# setsid: own process group, so the SIGINT below reaches make and the server
# together, like a terminal's Ctrl-C.
setsid make -s -C "$top" run PORT="$port" DATA="$data" >"$work/run.log" 2>&1 &
pgid=$!
for _ in $(seq 1 100); do
    [ "$("$cli" -p "$port" ping 2>/dev/null)" = PONG ] && break
    sleep 0.1
done
if [ "$("$cli" -p "$port" ping 2>/dev/null)" = PONG ]; then
    ok "make run serves PING on 127.0.0.1:$port"
else
    err "make run" "no PONG; log: $(tail -n 20 "$work/run.log")"
    kill -TERM -- -"$pgid" 2>/dev/null
    exit 1
fi

conf() { "$cli" -p "$port" config get "$1" | sed -n 2p; }
if [ "$(conf bind)" = "127.0.0.1 -::1" ] && [ "$(conf appendonly)" = yes ] &&
    [ "$(conf save)" = "3600 1 300 100 60 10000" ] && [ "$(conf dir)" = "$data" ]; then
    ok "loopback only, AOF on, RDB save points, data in DATA"
else
    err "shipped config" "bind=$(conf bind) appendonly=$(conf appendonly) save=$(conf save) dir=$(conf dir)"
fi

"$cli" -p "$port" set afork:run-test kept >/dev/null
kill -INT -- -"$pgid"
for _ in $(seq 1 100); do
    "$cli" -p "$port" ping >/dev/null 2>&1 || break
    sleep 0.1
done
sleep 0.5
if grep -q "ready to exit, bye bye" "$work/run.log" && [ -s "$data/dump.rdb" ] &&
    ! pgrep -g "$pgid" >/dev/null; then
    ok "Ctrl-C saves (dump.rdb written) and exits cleanly"
else
    err "Ctrl-C" "$(tail -n 15 "$work/run.log"; ls -la "$data")"
fi
exit $status
