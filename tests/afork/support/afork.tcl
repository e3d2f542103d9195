# afork.tcl -- helpers shared by redis-afork's Tcl tests (tests/afork).
#
# Sourced by the test files; the tree sees this directory as
# tests/unit/afork/support.

# afork_skip WHY: the tests that follow cannot run on this machine. They
# are reported the way the harness reports tests that their tags exclude
# ("[ignore]: WHY", counted as skipped, never as passed).
proc afork_skip {why} {
    incr ::num_aborted
    send_data_packet $::test_server_fd ignore $why
}

proc afork_log_lines {path pattern} {
    if {![file exists $path]} { return {} }
    set fd [open $path]
    set lines [split [read $fd] "\n"]
    close $fd
    return [lsearch -all -inline $lines $pattern]
}

# "pid:R 21 Nov 2026 21:49:23.547 * msg" -> milliseconds since the epoch
proc afork_log_ms {line} {
    regexp {^\d+:\w (\d+ \w+ \d+ \d+:\d+:\d+)\.(\d+)} $line -> when ms
    # "089" is not octal: read the milliseconds as decimal.
    scan $ms %d ms
    return [expr {[clock scan $when -format {%d %b %Y %H:%M:%S}] * 1000 + $ms}]
}

proc afork_fork_info {field} {
    getInfoProperty [afork_r info fork] $field
}

proc wait_for_window_closed {} {
    wait_for_condition 100 50 {
        [afork_fork_info fork_quiet_window_active] == 0
    } else {
        fail "the quiet window did not close"
    }
}

# The harness reads a server's stdout to see it start, so a server that
# logs to a file is started here by hand.
proc afork_start_server {logfile args} {
    set port [find_available_port $::baseport $::portcount]
    set dir [file normalize [tmpdir afork-quiet]]
    set pid [exec src/redis-server --port $port --dir $dir --logfile $logfile \
        --save "" --enable-debug-command yes --loglevel verbose {*}$args \
        >/dev/null 2>@1 &]
    wait_for_condition 100 50 {
        ![catch {redis $::host $port 0 $::tls} c] && ![catch {$c ping}]
    } else {
        fail "redis-server logging to $logfile did not start"
    }
    set ::afork_client $c
    return $pid
}
proc afork_r {args} { $::afork_client {*}$args }

# Descriptors the server holds now.
proc afork_fd_count {pid} {
    llength [glob -nocomplain /proc/$pid/fd/*]
}

# The server's child processes (fork children of any type).
proc afork_children {pid} {
    if {[catch {exec pgrep -P $pid} out]} { return {} }
    return $out
}

# Wait until the server has no child process left.
proc afork_wait_no_child {pid} {
    wait_for_condition 200 50 {
        [afork_children $pid] eq {}
    } else {
        fail "a fork child is still running: [afork_children $pid]"
    }
}

# End the running save the way upstream stops its own children (SIGUSR1).
proc stop_bg_child {pid} {
    catch {exec pkill -USR1 -P $pid}
}

# fork-thp: a whole BGSAVE, then the collapse pass after it.
proc save_and_wait_pass {} {
    set passes [getInfoProperty [r info fork] fork_thp_collapse_passes]
    r bgsave
    waitForBgsave r
    wait_for_condition 300 100 {
        [getInfoProperty [r info fork] fork_thp_collapse_passes] > $passes &&
        [getInfoProperty [r info fork] fork_thp_collapse_status] eq "ready"
    } else {
        fail "no collapse pass after the save within 30 s"
    }
}
