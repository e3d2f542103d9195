# lib.sh -- what the Debian package tests (tests/deb/run.sh, upgrade.sh)
# share, sourced after tests/system/lib.sh. The caller sets unit (the path
# of redis-server.service) and server_pid (the server it started, or
# empty).

# The counts, and the last line: "N passed, N failed, N skipped".
passed=0 failed=0 skipped=0
ok() { echo "[ok]: $1"; passed=$((passed + 1)); }
err() { echo "[err]: $1: $2"; failed=$((failed + 1)); status=1; }
skip() { echo "[skip]: $1"; skipped=$((skipped + 1)); }
finish() {
    echo "$passed passed, $failed failed, $skipped skipped"
    [ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
    exit $?
}

# unit_value KEY: the last KEY= of the unit file.
unit_value() { sed -n "s/^$1=//p" "$unit" | tail -n 1; }

# stop_server [SIGNAL]: systemd stops the unit with SIGTERM; Redis saves
# and exits 0. Killed after 10 s; returns the server's exit status.
stop_server() {
    local sig=${1:-TERM}
    [ -n "$server_pid" ] || return 0
    kill -"$sig" "$server_pid" 2>/dev/null
    for _ in $(seq 100); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$server_pid" 2>/dev/null && kill -KILL "$server_pid" 2>/dev/null
    wait "$server_pid" 2>/dev/null
    local rc=$?
    server_pid=
    return $rc
}
