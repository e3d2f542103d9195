#!/usr/bin/env bash
# run.sh -- make test-exporter: a real Prometheus exporter sees our events.
#
# Builds oliver006/redis_exporter (a Go module, from the Go module proxy)
# into build/exporter/, makes redis-afork record its LATENCY events
# fork-child-ready and fork-cow-stall, scrapes the exporter and checks that
# both are exported. Needs Go (>= 1.22) on PATH; not part of make test,
# because building the exporter takes minutes on a 2-core machine.
. "$(dirname "$0")/../system/lib.sh"

version=${REDIS_EXPORTER_VERSION:-v1.61.0}
bin=$top/build/exporter/redis_exporter
if ! command -v go >/dev/null; then
    err "exporter" "Go is not installed (needed to build redis_exporter $version)"
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
for _ in $(seq 50); do
    [ "$(cli info fork | tr -d '\r' | sed -n 's/^latest_fork_child_ready_usec://p')" -ge 30000 ] && break
    sleep 0.1
done
cli debug sleep 0.02 >/dev/null
pkill -USR1 -P "$rpid"
for _ in $(seq 50); do
    cli info fork | tr -d '\r' | grep -qx 'fork_cow_child_active:0' && break
    sleep 0.1
done

eport=$(free_port)
"$bin" -redis.addr "redis://127.0.0.1:$port" -web.listen-address "127.0.0.1:$eport" \
    >"$work/exporter.log" 2>&1 &
epid=$!
metrics=$work/metrics.txt
for _ in $(seq 50); do
    python3 -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1]).read().decode())' \
        "http://127.0.0.1:$eport/metrics" >"$metrics" 2>/dev/null && break
    sleep 0.2
done
for ev in fork-child-ready fork-cow-stall; do
    line=$(grep -E "^redis_latency_spike_last\{event_name=\"$ev\"\}" "$metrics")
    if [ -n "$line" ]; then
        ok "redis_exporter $version exports the LATENCY event $ev: $line"
    else
        err "redis_exporter exports $ev" "not in the scrape ($(grep -c . "$metrics") lines; see $metrics)"
    fi
done
kill "$epid" "$rpid" 2>/dev/null
wait 2>/dev/null
exit $status
