#!/usr/bin/env bash
# monitoring.sh -- contrib/monitoring/: the alert rules, the dashboard and
# the metric names they use.
#
#  - promtool check rules and promtool test rules (fixture series in
#    contrib/monitoring/tests/) on afork-alerts.yml;
#  - the Grafana dashboard's JSON model, its queries parsed by promtool,
#    and every metric the dashboard and the rules name found in
#    contrib/monitoring/metrics.txt, the names of a real redis_exporter
#    scrape (written by make test-exporter);
#  - metrics.txt holds exactly the INFO fork fields of the build under
#    test (a renamed field fails here until make test-exporter ran), and
#    docs/reference.md documents each of them (the Async-fork counters'
#    fields too) and each fork-* option, the hidden ones of
#    src/afork_config.h (deprecated, for tests) too; metrics-async-fork.txt
#    exactly the fields only an Async-fork kernel's counters add (INFO
#    fork with those counters in a fake /proc), which the dashboard may
#    name too;
#  - each check fails on a copy broken on purpose: a rule threshold, a
#    metric name in the dashboard and in a rule, a query's syntax, a panel
#    overlapping another, an INFO field renamed, a field, an option or a
#    hidden option undocumented.
# Needs promtool (Debian's prometheus package; utils/install-deps.sh).
. "$(dirname "$0")/lib.sh"

mon=$top/contrib/monitoring
check=$top/tests/system/monitoring_check.py
names=$mon/metrics.txt
knames=$mon/metrics-async-fork.txt
ref=$top/docs/reference.md
if ! command -v promtool >/dev/null; then
    err "monitoring" "promtool is not installed (sudo utils/install-deps.sh installs Debian's prometheus package)"
    exit 1
fi

expect_ok "promtool check rules afork-alerts.yml" promtool check rules "$mon/afork-alerts.yml"
expect_ok "promtool test rules: each alert fires on its fixtures and only there" \
    promtool test rules "$mon/tests/afork-alerts.test.yml"
expect_ok "dashboard JSON model; dashboard and rules name only exported metrics" \
    python3 "$check" --names "$names" --names "$knames" --dashboard "$mon/afork-dashboard.json" \
    --rules "$mon/afork-alerts.yml" --promql-out "$work/dashboard-queries.yml"
expect_ok "promtool parses every dashboard query" promtool check rules "$work/dashboard-queries.yml"

# info_fork OUT [SERVER-ARGS...]: INFO fork of this build, started with
# those arguments, into OUT.
info_fork() {
    local out=$1 port rpid
    shift
    port=$(free_port)
    "$tree/src/redis-server" --port "$port" --bind 127.0.0.1 --save '' --dir "$work" \
        --daemonize no --logfile "$out.log" "$@" &
    rpid=$!
    for _ in $(seq 50); do "$tree/src/redis-cli" -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
    "$tree/src/redis-cli" -p "$port" info fork | tr -d '\r' >"$out"
    "$tree/src/redis-cli" -p "$port" config get 'fork-*' | tr -d '\r' >"$out.config"
    kill "$rpid"
    wait "$rpid" 2>/dev/null
}

# metrics.txt against the INFO fork of this build.
info_fork "$work/info-fork.txt"
expect_ok "metrics.txt holds this build's INFO fork fields (else: make test-exporter)" \
    python3 "$check" --names "$names" --info-fork "$work/info-fork.txt"

# metrics-async-fork.txt: the fields of contrib/async-fork's counters, which
# this machine's kernel lacks. INFO fork with the kernel probes pointed at a
# fake /proc that has the sysctl and the counters (the hidden
# fork-probe-root, as tests/afork/fork-info.tcl does).
fake=$work/fake-root
mkdir -p "$fake/proc/sys/vm"
echo 2 >"$fake/proc/sys/vm/async_fork"
for c in sessions deferred child_copied copied_fault copied_gup copied_vma copied_madvise \
        copied_zap copied_exit copied_fork parent_ns sessions_failed taken_over \
        sync_pinned sync_notifiers sync_merge_any sync_nomem; do
    echo "async_fork_$c 0"
done >"$fake/proc/vmstat"
info_fork "$work/info-fork-async.txt" --fork-probe-root "$fake"
expect_ok "metrics-async-fork.txt holds the INFO fork fields of contrib/async-fork's counters" \
    python3 "$check" --names "$names" --kernel-names "$knames" --info-fork "$work/info-fork.txt" \
    --info-fork-kernel "$work/info-fork-async.txt"
expect_ok "docs/reference.md documents every INFO fork field and fork-* option" \
    python3 "$check" --names "$names" --info-fork "$work/info-fork.txt" \
    --info-fork-kernel "$work/info-fork-async.txt" --reference "$ref" --config "$work/info-fork.txt.config" \
    --config-rows "$top/src/afork_config.h"

# The same checks on copies broken on purpose must fail.
mkdir -p "$work/broken/tests"
cp "$mon/tests/afork-alerts.test.yml" "$work/broken/tests/"
sed 's/> 0\.1$/> 0.3/' "$mon/afork-alerts.yml" >"$work/broken/afork-alerts.yml"
expect_fail "promtool test rules fails on a changed threshold" "FAILED" \
    promtool test rules "$work/broken/tests/afork-alerts.test.yml"
sed 's/key=\\"max_fork_usec\\"/key=\\"max_fork_parent_usec\\"/' "$mon/afork-dashboard.json" >"$work/broken/d1.json"
expect_fail "the dashboard check fails on an unexported key" 'max_fork_parent_usec.*not in metrics.txt' \
    python3 "$check" --names "$names" --names "$knames" --dashboard "$work/broken/d1.json"
sed 's/redis_latest_fork_seconds/redis_latest_fork_usec/' "$mon/afork-dashboard.json" >"$work/broken/d2.json"
expect_fail "the dashboard check fails on an unexported metric" 'redis_latest_fork_usec is not in' \
    python3 "$check" --names "$names" --names "$knames" --dashboard "$work/broken/d2.json"
python3 - "$mon/afork-dashboard.json" "$work/broken/d3.json" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
d["panels"][1]["gridPos"] = dict(d["panels"][0]["gridPos"])
json.dump(d, open(sys.argv[2], "w"))
EOF
expect_fail "the dashboard check fails on overlapping panels" 'overlaps panel' \
    python3 "$check" --names "$names" --names "$knames" --dashboard "$work/broken/d3.json"
sed 's/1 \/ (redis_script_values/1 \/ ((redis_script_values/' "$mon/afork-dashboard.json" >"$work/broken/d4.json"
python3 "$check" --names "$names" --names "$knames" --dashboard "$work/broken/d4.json" \
    --promql-out "$work/broken/d4-queries.yml" >/dev/null
expect_fail "promtool fails on a dashboard query with a syntax error" 'unclosed|parse error|unexpected' \
    promtool check rules "$work/broken/d4-queries.yml"
sed 's/key="fork_thp_heap_refused"/key="fork_thp_refused"/' "$mon/afork-alerts.yml" >"$work/broken/r1.yml"
expect_fail "the rules check fails on an unexported key" 'fork_thp_refused.*not in metrics.txt' \
    python3 "$check" --names "$names" --names "$knames" --rules "$work/broken/r1.yml"
sed 's/^max_fork_usec:/max_fork_parent_usec:/' "$work/info-fork.txt" >"$work/broken/info-fork.txt"
expect_fail "the metrics.txt check fails when an INFO field is renamed" 'max_fork_parent_usec' \
    python3 "$check" --names "$names" --info-fork "$work/broken/info-fork.txt"
grep -v 'tables_parent_vma' "$knames" >"$work/broken/k1.txt"
expect_fail "the metrics-async-fork.txt check fails on a missing counter field" \
    'missing.*latest_fork_async_tables_parent_vma' \
    python3 "$check" --names "$names" --kernel-names "$work/broken/k1.txt" \
    --info-fork "$work/info-fork.txt" --info-fork-kernel "$work/info-fork-async.txt"
sed 's/key=\\"latest_fork_async_tables_child\\"/key=\\"latest_fork_async_tables_kid\\"/' \
    "$mon/afork-dashboard.json" >"$work/broken/d5.json"
expect_fail "the dashboard check fails on a key in neither names file" 'latest_fork_async_tables_kid' \
    python3 "$check" --names "$names" --names "$knames" --dashboard "$work/broken/d5.json"
{ cat "$work/info-fork.txt"; echo "fork_new_field_usec:0"; } >"$work/broken/info-fork2.txt"
expect_fail "the reference check fails on an undocumented field" 'does not document.*fork_new_field_usec' \
    python3 "$check" --names "$names" --info-fork "$work/broken/info-fork2.txt" --reference "$ref"
grep -v 'latest_fork_async_tables_parent_zap' "$ref" >"$work/broken/reference1.md"
expect_fail "the reference check fails on an undocumented Async-fork counter field" \
    'does not document.*latest_fork_async_tables_parent_zap' \
    python3 "$check" --names "$names" --info-fork "$work/info-fork.txt" \
    --info-fork-kernel "$work/info-fork-async.txt" --reference "$work/broken/reference1.md"
{ cat "$work/info-fork.txt.config"; printf 'fork-new-option\nyes\n'; } >"$work/broken/config.txt"
expect_fail "the reference check fails on an undocumented option" 'does not document.*fork-new-option' \
    python3 "$check" --names "$names" --info-fork "$work/info-fork.txt" --reference "$ref" \
    --config "$work/broken/config.txt"
grep -v '^| `fork-debug-thp-vma-size` |' "$ref" >"$work/broken/reference2.md"
expect_fail "the reference check fails on an undocumented hidden option" \
    'does not document.*fork-debug-thp-vma-size' \
    python3 "$check" --names "$names" --info-fork "$work/info-fork.txt" --reference "$work/broken/reference2.md" \
    --config-rows "$top/src/afork_config.h"
exit $status
