# lib.sh -- what the Debian package tests (tests/deb/run.sh, upgrade.sh)
# share, sourced after tests/system/lib.sh. The caller sets unit (the path
# of redis-server.service) and server_pid (the server it started, or
# empty).

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
