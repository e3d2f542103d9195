#!/usr/bin/env bash
# run.sh -- make test-exporter: a real Prometheus exporter sees our fork.
#
# Builds oliver006/redis_exporter (a Go module, from the Go module proxy)
# into build/exporter/, makes redis-afork fork a child that reports late
# (30 ms) while the server stalls (20 ms) and writes, then scrapes the
# exporter, run with contrib/monitoring/afork-fork-info.lua as its --script,
# and checks (check_scrape.py) that every INFO fork field is exported with
# INFO's value, that the fork time, child-ready, COW and THP fields hold
# what the scenario made, and that the LATENCY events fork-child-ready and
# fork-cow-stall are exported; a second server, whose fork-thp is refused,
# must show it (fork_thp_heap_refused 1). On success the scrape's metric names go to
# contrib/monitoring/metrics.txt, which make test checks the dashboard and
# the alert rules against. Needs Go (>= 1.22) on PATH; not part of make
# test, because building the exporter takes minutes on a 2-core machine.
. "$(dirname "$0")/../system/lib.sh"

version=${REDIS_EXPORTER_VERSION:-v1.61.0}
bin=$top/build/exporter/redis_exporter
if ! command -v go >/dev/null; then
    err "exporter" "Go >= 1.22 is not installed (needed to build redis_exporter $version; utils/install-deps.sh installs golang-go where apt has 1.22 or newer, Debian 13)"
    exit 1
fi
# Built from a throw-away module that requires it ("go install pkg@v" would
# also ask the proxy for the module's version list, which may be refused).
if [ ! -x "$bin" ] || [ "$(cat "$bin.version" 2>/dev/null)" != "$version" ]; then
    echo "building redis_exporter $version..."
    mod=$top/build/exporter/mod
    rm -rf "$mod" && mkdir -p "$mod"
    printf 'module afork/exporter\n\ngo 1.22\n\nrequire github.com/oliver006/redis_exporter %s\n' \
        "$version" >"$mod/go.mod"
    (cd "$mod" && GOFLAGS=-mod=mod go build -o "$bin" github.com/oliver006/redis_exporter) ||
        { err "exporter" "building redis_exporter $version failed"; exit 1; }
    echo "$version" >"$bin.version"
fi

port=$(free_port)
cli() { "$tree/src/redis-cli" -p "$port" "$@"; }
"$tree/src/redis-server" --port "$port" --bind 127.0.0.1 --save '' --dir "$work" \
    --enable-debug-command yes --latency-monitor-threshold 1 --daemonize no \
    --logfile "$work/redis.log" &
rpid=$!
for _ in $(seq 50); do cli ping >/dev/null 2>&1 && break; sleep 0.1; done

# A child that takes 30 ms to report, a 20 ms iteration while it lives.
cli debug populate 100000 >/dev/null
cli config set fork-debug-ready-delay 30 >/dev/null
cli config set rdb-key-save-delay 100 >/dev/null
cli bgsave >/dev/null
for _ in $(seq 20000); do echo "SET cow:$_ x"; done | cli >/dev/null
for _ in $(seq 50); do
    [ "$(cli info fork | tr -d '\r' | sed -n 's/^latest_fork_child_ready_usec://p')" -ge 30000 ] && break
    sleep 0.1
done
cli debug sleep 0.02 >/dev/null
pkill -USR1 -P "$rpid"
for _ in $(seq 50); do
    cli info persistence | tr -d '\r' | grep -qx 'rdb_bgsave_in_progress:0' && break
    sleep 0.1
done

eport=$(free_port)
script=$top/contrib/monitoring/afork-fork-info.lua
"$bin" -redis.addr "redis://127.0.0.1:$port" -web.listen-address "127.0.0.1:$eport" \
    -script "$script" >"$work/exporter.log" 2>&1 &
epid=$!
metrics=$work/metrics.txt
scrape() {
    python3 -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1]).read().decode())' \
        "http://127.0.0.1:$eport/metrics" >"$metrics" 2>/dev/null
}
for _ in $(seq 50); do scrape && break; sleep 0.2; done
# A field that changes between these two reads (page_table_bytes, refreshed
# every second) may match either.
cli info fork >"$work/before.txt"
scrape || err "scrape" "the exporter does not answer (see $work/exporter.log)"
cli info fork >"$work/after.txt"
cli info stats >"$work/stats.txt"
thp=$(sed -n 's/.*\[\(.*\)\].*/\1/p' /sys/kernel/mm/transparent_hugepage/enabled)
names=$top/contrib/monitoring/metrics.txt
python3 "$top/tests/exporter/check_scrape.py" "$metrics" "$work/before.txt" "$work/after.txt" \
    --scenario "$work/stats.txt" "$thp" --names "$names" || status=1
if [ -n "$(git -C "$top" status --porcelain -- "$names" 2>/dev/null)" ]; then
    echo "NOTE: contrib/monitoring/metrics.txt changed: git diff it, then commit it"
fi
for ev in fork-child-ready fork-cow-stall; do
    line=$(grep -E "^redis_latency_spike_last\{event_name=\"$ev\"\}" "$metrics")
    if [ -n "$line" ]; then
        ok "redis_exporter $version exports the LATENCY event $ev: $line"
    else
        err "redis_exporter exports $ev" "not in the scrape ($(grep -c . "$metrics") lines; see $metrics)"
    fi
done

# A second server whose fork-thp yes is refused (its config on stdin),
# scraped through the exporter's multi-target /scrape endpoint.
port2=$(free_port)
printf 'port %s\nbind 127.0.0.1\nsave ""\nfork-thp yes\n' "$port2" |
    "$tree/src/redis-server" - --dir "$work" --logfile "$work/redis2.log" >/dev/null &
rpid2=$!
for _ in $(seq 50); do "$tree/src/redis-cli" -p "$port2" ping >/dev/null 2>&1 && break; sleep 0.1; done
"$tree/src/redis-cli" -p "$port2" info fork >"$work/before2.txt"
python3 -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1]).read().decode())' \
    "http://127.0.0.1:$eport/scrape?target=redis://127.0.0.1:$port2" >"$work/metrics2.txt" ||
    err "scrape ?target=" "the exporter does not answer"
"$tree/src/redis-cli" -p "$port2" info fork >"$work/after2.txt"
python3 "$top/tests/exporter/check_scrape.py" "$work/metrics2.txt" "$work/before2.txt" \
    "$work/after2.txt" --want fork_thp_heap_refused=1 --want fork_thp_heap_off=0 || status=1
kill "$epid" "$rpid" "$rpid2" 2>/dev/null
wait 2>/dev/null
exit $status
