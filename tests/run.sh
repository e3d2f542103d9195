#!/usr/bin/env bash
# run.sh -- redis-afork's test driver (make test, make test-upstream).
#
#   tests/run.sh                 our Tcl tests (tests/afork, run by upstream's
#                                harness) + the upstream units in UNITS below
#                                with --config fork-quiet-window yes
#                                --config fork-thp yes (with the defaults they
#                                run in --upstream-all's whole suite)
#                                + our system tests (tests/system/*.sh)
#                                + the bench's unit tests (tests/bench, pytest)
#   tests/run.sh --upstream-all  upstream's whole Tcl suite (runtest: units,
#                                integration, unit/cluster) and its legacy
#                                cluster suite (runtest-cluster)
#
# A Tcl test file with a failed test runs once more; failures it does not
# repeat are flaky: listed, counted apart, not failed. Ends with the flaky
# and the failed tests again (CI shows only the end of a long log), then one
# line "N passed, N failed, N skipped, N flaky"; exits non-zero on any
# failure. Skipped: tests the harness did not run ("[skip]:" and
# "[ignore]:" lines: tags, or a machine that cannot run them).
# Environment: TREE (the built tree), TEST_CLIENTS (parallel Tcl clients),
# TCL_ARGS (extra runtest arguments, e.g. "--verbose").
set -uo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
. "$top/upstream/pin"
tree=$(cd "${TREE:-$top/build/redis-$REDIS_VERSION}" && pwd)
clients=${TEST_CLIENTS:-4}
logdir=$top/build/test-logs
mkdir -p "$logdir"

# Upstream units that exercise fork, persistence, replication, INFO, config
# and the latency monitor: the code our patches touch or depend on.
UNITS="
unit/info
unit/info-command
unit/latency-monitor
unit/introspection
unit/other
unit/aofrw
unit/multi
unit/shutdown
unit/oom-score-adj
integration/rdb
integration/aof
integration/aof-multi-part
integration/aof-race
integration/dismiss-mem
integration/replication
"

passed=0
failed=0
skipped=0
flaky=0
failures=()
flaky_tests=()

# A phase that cannot start (a helper function or program missing: exit
# status 127) is a failure, not a silently shorter run.
set -o errtrace
trap 'err_status=$?; [ "$err_status" -ne 127 ] || { echo "[err]: tests/run.sh line $LINENO: $BASH_COMMAND: not found";
      failed=$((failed + 1)); failures+=("[err]: tests/run.sh: $BASH_COMMAND: not found"); }' ERR

# Add a log's "[ok]:", "[err]:"/"[exception]:" and "[skip]:"/"[ignore]:"
# lines (colour stripped) to the totals; log_errors is the failures of this
# log.
count_log() {
    local plain
    plain=$(sed 's/\x1b\[[0-9;]*m//g' "$1")
    log_errors=$(grep -cE '^\[(err|exception)\]:' <<<"$plain")
    passed=$((passed + $(grep -c '^\[ok\]:' <<<"$plain")))
    failed=$((failed + log_errors))
    skipped=$((skipped + $(grep -cE '^\[(skip|ignore)\]:' <<<"$plain")))
    [ "$log_errors" -eq 0 ] ||
        mapfile -t -O "${#failures[@]}" failures < <(grep -E '^\[(err|exception)\]:' <<<"$plain" |
            sed "s|\$| ($(basename "$1"))|")
}

# rerun_failed LOG RUNTEST-ARGS...: the test files with an "[err]:" in LOG
# run once more (the same arguments, those files only). When all of them
# pass, their failures count as flaky, not failed, and are listed so.
# Upstream's own units time things on a shared 2-core machine; a failure
# that the same file does not repeat is reported, not hidden. An
# "[exception]:" ends the whole run and is never retried.
rerun_failed() {
    local log=$1 plain files args=() f again rc_again
    shift
    plain=$(sed 's/\x1b\[[0-9;]*m//g' "$log")
    grep -q '^\[exception\]:' <<<"$plain" && return 0
    files=$(sed -n 's/^\[err\]: .* in tests\/\(.*\)\.tcl$/\1/p' <<<"$plain" | sort -u)
    [ -n "$files" ] || return 0
    while [ $# -gt 0 ]; do
        if [ "$1" = --single ]; then shift 2; else args+=("$1"); shift; fi
    done
    for f in $files; do args+=(--single "$f"); done
    again=${log%.log}-rerun.log
    echo "== re-running the failed test files once: $(echo $files); log: $again"
    (cd "$tree" && ./runtest --clients "$clients" --dump-logs ${TCL_ARGS:-} "${args[@]}") 2>&1 |
        tee "$again"
    rc_again=${PIPESTATUS[0]}
    plain=$(sed 's/\x1b\[[0-9;]*m//g' "$again")
    if [ "$rc_again" -eq 0 ] && ! grep -qE '^\[(err|exception)\]:' <<<"$plain" &&
        grep -q '^\[ok\]:' <<<"$plain"; then
        failed=$((failed - log_errors))
        flaky=$((flaky + log_errors))
        flaky_tests+=("${failures[@]:$((${#failures[@]} - log_errors))}")
        failures=("${failures[@]:0:$((${#failures[@]} - log_errors))}")
        log_errors=0
    fi
}

# run_tcl LOGNAME RUNTEST-ARGS...
run_tcl() {
    local log=$logdir/$1.log rc
    shift
    echo "== Tcl suite ($*), $clients clients; log: $log"
    make -s -C "$tree/tests/modules" fork.so >/dev/null || echo "[err]: cannot build tests/modules/fork.so"
    (cd "$tree" && ./runtest --clients "$clients" --dump-logs ${TCL_ARGS:-} "$@") 2>&1 |
        tee "$log"
    rc=${PIPESTATUS[0]}
    count_log "$log"
    if [ "$log_errors" -gt 0 ]; then
        rerun_failed "$log" "$@"
        [ "$log_errors" -gt 0 ] || rc=0
    fi
    if [ "$rc" -ne 0 ] && [ "$log_errors" -eq 0 ]; then
        echo "[err]: runtest exited with status $rc without a failed test (see $log)"
        failed=$((failed + 1))
        failures+=("[err]: runtest exited with status $rc without a failed test ($(basename "$log"))")
    fi
}

# start_cluster LOGNAME: upstream's legacy cluster suite (runtest-cluster,
# tests/cluster) in the background, into LOGNAME's log: it runs beside the
# Tcl suite (its instances use ports 30000 and up, the Tcl suite's end
# below that), as both spend most of their time waiting. count_cluster
# waits for it and counts its log: its harness prints "HH:MM:SS> name: OK"
# for a passed test and "FAILED: ..." for a failed one (or one whose unit
# broke off).
start_cluster() {
    cluster_log=$logdir/$1.log
    echo "== legacy cluster suite (runtest-cluster ${TCL_ARGS:-}), beside the Tcl suite; log: $cluster_log"
    (cd "$tree" && exec ./runtest-cluster ${TCL_ARGS:-}) >"$cluster_log" 2>&1 &
    cluster_pid=$!
}
count_cluster() {
    local rc plain n_ok n_err log=$cluster_log
    wait "$cluster_pid"
    rc=$?
    echo "== legacy cluster suite ended (status $rc); its last lines:"
    tail -n 5 "$log"
    plain=$(sed 's/\x1b\[[0-9;]*m//g' "$log")
    n_ok=$(grep -cE '^[0-9:]{8}> .*: OK$' <<<"$plain")
    n_err=$(grep -c 'FAILED' <<<"$plain")
    passed=$((passed + n_ok))
    failed=$((failed + n_err))
    [ "$n_err" -eq 0 ] || mapfile -t -O "${#failures[@]}" failures < <(grep 'FAILED' <<<"$plain" |
        sed "s|^|[err]: |; s|\$| ($(basename "$log"))|")
    if [ "$rc" -ne 0 ] && [ "$n_err" -eq 0 ]; then
        failed=$((failed + 1))
        failures+=("[err]: runtest-cluster exited with status $rc without a failed test ($(basename "$log"))")
    fi
}

run_system() {
    local t log
    for t in "$top"/tests/system/*.sh; do
        [ -e "$t" ] && [ "$(basename "$t")" != lib.sh ] || continue
        log=$logdir/system-$(basename "$t" .sh).log
        echo "== system test $(basename "$t")"
        TREE=$tree bash "$t" 2>&1 | tee "$log"
        if [ "${PIPESTATUS[0]}" -ne 0 ] && ! grep -q '^\[err\]:' "$log"; then
            echo "[err]: $(basename "$t") exited non-zero" | tee -a "$log"
        fi
        count_log "$log"
    done
}

# The bench's unit tests: pytest from the bench's venv (bench/run.sh --venv
# makes it from bench/requirements.txt, pytest pinned there). Its passed,
# failed and skipped counts join the totals; a run that fails without a
# failed test (the venv, a collection error) counts as one failure.
run_pytest() {
    local log=$logdir/pytest-bench.log venv=${BENCH_VENV:-$top/build/bench-venv} rc summary n
    echo "== bench unit tests (pytest tests/bench); log: $log"
    if ! "$top/bench/run.sh" --venv >"$log" 2>&1; then
        cat "$log"
        echo "[err]: the bench's venv could not be made (see $log)"
        failed=$((failed + 1))
        failures+=("[err]: the bench's venv could not be made (pytest-bench.log)")
        return
    fi
    (cd "$top" && TREE=$tree PYTHONDONTWRITEBYTECODE=1 "$venv/bin/python3" -m pytest -p no:cacheprovider \
        -rfEs tests/bench) 2>&1 | tee -a "$log"
    rc=${PIPESTATUS[0]}
    summary=$(grep -E '^=+ .* in [0-9.]+s' "$log" | tail -1)
    for n in passed failed skipped; do
        local count
        count=$(grep -oE "[0-9]+ $n" <<<"$summary" | cut -d' ' -f1)
        count=${count:-0}
        case $n in
            passed) passed=$((passed + count)) ;;
            failed) failed=$((failed + count)) ;;
            skipped) skipped=$((skipped + count)) ;;
        esac
    done
    n=$(grep -oE '[0-9]+ errors?' <<<"$summary" | cut -d' ' -f1)
    failed=$((failed + ${n:-0}))
    mapfile -t -O "${#failures[@]}" failures < <(grep -E '^(FAILED|ERROR) ' "$log" |
        sed 's|$| (pytest-bench.log)|')
    if [ "$rc" -ne 0 ] && ! grep -qE '[0-9]+ (failed|errors?)' <<<"$summary"; then
        echo "[err]: pytest exited with status $rc without a failed test (see $log)"
        failed=$((failed + 1))
        failures+=("[err]: pytest exited with status $rc without a failed test (pytest-bench.log)")
    fi
}

start=$(date +%s)
if [ "${1:-}" = "--upstream-all" ]; then
    start_cluster cluster-all
    run_tcl tcl-all
    count_cluster
else
    "$top/upstream/tree.sh" check "$tree" ||
        echo "WARNING: the tests run the build tree, which patches/ does not match (see above)."
    singles=()
    for t in "$top"/tests/afork/*.tcl; do
        [ -e "$t" ] && singles+=(--single "unit/afork/$(basename "$t" .tcl)")
    done
    units=()
    for u in $UNITS; do units+=(--single "$u"); done
    run_tcl tcl "${singles[@]}"
    # The upstream units around fork, with the quiet window forced on (it
    # is off by default on a kernel without Async-fork) and the keyspace in
    # huge pages from the start, re-collapsed after each child (fork-thp
    # auto, the default, waits for page tables larger than these tests
    # make). With the defaults they run in make test-upstream's whole
    # suite.
    run_tcl tcl-quiet-window-thp --config fork-quiet-window yes --config fork-thp yes "${units[@]}"
    run_pytest
    run_system
fi
echo "== done in $(( $(date +%s) - start )) s"
if [ "${#flaky_tests[@]}" -gt 0 ]; then
    echo "== flaky (failed, then passed when their file ran again):"
    printf '  %s\n' "${flaky_tests[@]}"
fi
if [ "${#failures[@]}" -gt 0 ]; then
    echo "== failed:"
    printf '  %s\n' "${failures[@]}"
fi
echo "$passed passed, $failed failed, $skipped skipped, $flaky flaky"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
