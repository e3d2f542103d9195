# quiet-window.tcl -- the fork quiet window, seen from outside.
#
# The server logs to a real file (upstream's test config logs to stdout,
# which hides the fopen() per line this window exists to avoid). The hidden
# fork-debug-ready-delay makes the child wait before it reports, which keeps
# the window open long enough to look inside it.

source tests/unit/afork/support/afork.tcl

set logfile [file normalize [tmpfile afork-quiet.log]]
tags {"afork external:skip"} {
    set server_pid [afork_start_server $logfile --fork-quiet-window yes]
    afork_r debug populate 1000

    test {Config: fork-quiet-window and its timeout are validated and settable} {
        assert_error "*fork-quiet-window*auto, yes, no*" {afork_r config set fork-quiet-window maybe}
        assert_error "*fork-quiet-window-timeout*between 1 and 60000*" {afork_r config set fork-quiet-window-timeout 0}
        assert_error "*fork-quiet-window-timeout*" {afork_r config set fork-quiet-window-timeout abc}
        afork_r config set fork-quiet-window no
        assert_equal 0 [afork_fork_info fork_quiet_window_enabled]
        afork_r config set fork-quiet-window yes
        assert_equal 1 [afork_fork_info fork_quiet_window_enabled]
        afork_r config set fork-quiet-window-timeout 250
        assert_equal {fork-quiet-window-timeout 250} [afork_r config get fork-quiet-window-timeout]
        afork_r config set fork-quiet-window-timeout 1000
    }

    test {BGSAVE: the child reports and the window closes} {
        set before [afork_fork_info fork_quiet_windows]
        afork_r bgsave
        waitForBgsave afork_r
        wait_for_window_closed
        assert_equal [expr {$before + 1}] [afork_fork_info fork_quiet_windows]
        assert {[afork_fork_info latest_fork_child_ready_usec] >= 0}
        assert {[afork_fork_info max_fork_child_ready_usec] >= [afork_fork_info latest_fork_child_ready_usec]}
        assert {[afork_fork_info fork_quiet_deferred_logs] >= 1}
        assert_equal 1 [llength [afork_log_lines $logfile "*Background saving started by pid*"]]
    }

    test {Inside the window the log file is not written; afterwards it is, with original times} {
        afork_r config set fork-debug-ready-delay 600
        set deferred [afork_fork_info fork_quiet_deferred_logs]
        afork_r bgsave
        after 200
        assert_equal 1 [afork_fork_info fork_quiet_window_active]
        # Only the first BGSAVE's line is in the file so far.
        assert_equal 1 [llength [afork_log_lines $logfile "*Background saving started by pid*"]]
        afork_r debug log "afork-inside-window"
        assert_equal {} [afork_log_lines $logfile "*afork-inside-window*"]
        wait_for_window_closed
        waitForBgsave afork_r
        set started [lindex [afork_log_lines $logfile "*Background saving started by pid*"] end]
        set inside [lindex [afork_log_lines $logfile "*afork-inside-window*"] 0]
        assert_match "*:M *" $started
        assert {$inside ne {}}
        # Written after the window closed (>= 600 ms after the fork), yet
        # stamped with the time each line was logged.
        set saved [lindex [afork_log_lines $logfile "*DB saved on disk*"] end]
        assert {[afork_log_ms $saved] - [afork_log_ms $started] >= 500}
        assert {[afork_log_ms $inside] - [afork_log_ms $started] >= 150}
        assert {[afork_log_ms $inside] < [afork_log_ms $saved]}
        assert_equal [expr {$deferred + 2}] [afork_fork_info fork_quiet_deferred_logs]
        afork_r config set fork-debug-ready-delay 0
    }

    test {Deferred lines keep their order} {
        afork_r config set fork-debug-ready-delay 500
        afork_r bgsave
        for {set i 0} {$i < 20} {incr i} { afork_r debug log "afork-order-$i" }
        wait_for_window_closed
        waitForBgsave afork_r
        set got {}
        foreach l [afork_log_lines $logfile "*afork-order-*"] {
            regexp {afork-order-(\d+)} $l -> n
            lappend got $n
        }
        set want {}
        for {set i 0} {$i < 20} {incr i} { lappend want $i }
        assert_equal $want $got
        afork_r config set fork-debug-ready-delay 0
    }

    test {Ring overflow: lines beyond the ring are counted and the loss is logged} {
        afork_r config set fork-debug-ready-delay 800
        set dropped [afork_fork_info fork_quiet_dropped_logs]
        afork_r bgsave
        for {set i 0} {$i < 100} {incr i} { afork_r debug log "afork-flood-$i" }
        wait_for_window_closed
        waitForBgsave afork_r
        set lost [expr {[afork_fork_info fork_quiet_dropped_logs] - $dropped}]
        # 1 "started" line + 100 floods into a ring of 64
        assert_equal 37 $lost
        assert_equal 63 [llength [afork_log_lines $logfile "*afork-flood-*"]]
        assert_equal 1 [llength [afork_log_lines $logfile "*37 log lines were lost*"]]
        assert_equal PONG [afork_r ping]
        afork_r config set fork-debug-ready-delay 0
    }

    test {Timeout: a child that never reports does not hold the window} {
        afork_r config set fork-debug-ready-delay 5000
        afork_r config set fork-quiet-window-timeout 300
        set timeouts [afork_fork_info fork_quiet_window_timeouts]
        set n [llength [afork_log_lines $logfile "*Background saving started by pid*"]]
        afork_r bgsave
        wait_for_window_closed
        assert_equal [expr {$timeouts + 1}] [afork_fork_info fork_quiet_window_timeouts]
        assert_equal [expr {$n + 1}] [llength [afork_log_lines $logfile "*Background saving started by pid*"]]
        assert_equal 1 [llength [afork_log_lines $logfile "*closed after 300 ms without a ready message*"]]
        waitForBgsave afork_r
        # The late message is still read: the child-ready time is recorded.
        wait_for_condition 50 100 {
            [afork_fork_info latest_fork_child_ready_usec] >= 5000000
        } else {
            fail "late ready message not recorded"
        }
        afork_r config set fork-debug-ready-delay 0
        afork_r config set fork-quiet-window-timeout 1000
    }

    test {EOF: a child killed before it reports closes the window} {
        afork_r config set fork-debug-ready-delay 10000
        afork_r config set fork-quiet-window-timeout 60000
        set eofs [afork_fork_info fork_quiet_window_eofs]
        afork_r bgsave
        after 100
        assert_equal 1 [afork_fork_info fork_quiet_window_active]
        exec kill -9 [exec pgrep -P $server_pid]
        wait_for_window_closed
        assert_equal [expr {$eofs + 1}] [afork_fork_info fork_quiet_window_eofs]
        assert_equal -1 [afork_fork_info latest_fork_child_ready_usec]
        wait_for_condition 50 100 {
            [getInfoProperty [afork_r info persistence] rdb_bgsave_in_progress] == 0
        } else {
            fail "killed child not reaped"
        }
        assert_equal PONG [afork_r ping]
        afork_r config set fork-debug-ready-delay 0
        afork_r config set fork-quiet-window-timeout 1000
    }

    test {BGREWRITEAOF gets a window too} {
        set before [afork_fork_info fork_quiet_windows]
        afork_r bgrewriteaof
        waitForBgrewriteaof afork_r
        wait_for_window_closed
        assert_equal [expr {$before + 1}] [afork_fork_info fork_quiet_windows]
        assert {[afork_fork_info latest_fork_child_ready_usec] >= 0}
        assert {[llength [afork_log_lines $logfile "*Background append only file rewriting started by pid*"]] >= 1}
    }

    test {fork-quiet-window no: upstream behaviour, nothing deferred} {
        afork_r config set fork-quiet-window no
        set deferred [afork_fork_info fork_quiet_deferred_logs]
        set windows [afork_fork_info fork_quiet_windows]
        afork_r bgsave
        waitForBgsave afork_r
        assert_equal $deferred [afork_fork_info fork_quiet_deferred_logs]
        assert_equal $windows [afork_fork_info fork_quiet_windows]
        # The ready message is still read.
        assert {[afork_fork_info latest_fork_child_ready_usec] >= 0}
        afork_r config set fork-quiet-window yes
    }

    test {CONFIG RESETSTAT clears the counters} {
        afork_r config resetstat
        assert_equal 0 [afork_fork_info fork_quiet_windows]
        assert_equal 0 [afork_fork_info fork_quiet_deferred_logs]
        assert_equal 0 [afork_fork_info max_fork_child_ready_usec]
    }

    test {Shutdown inside a window writes the held lines} {
        afork_r config set fork-debug-ready-delay 10000
        afork_r config set fork-quiet-window-timeout 60000
        set n [llength [afork_log_lines $logfile "*Background saving started by pid*"]]
        afork_r bgsave
        after 100
        assert_equal 1 [afork_fork_info fork_quiet_window_active]
        catch {afork_r shutdown nosave}
        wait_for_condition 50 100 {
            [llength [afork_log_lines $logfile "*ready to exit, bye bye*"]] >= 1
        } else {
            fail "server did not shut down"
        }
        assert_equal [expr {$n + 1}] [llength [afork_log_lines $logfile "*Background saving started by pid*"]]
    }
    catch {exec kill -9 $server_pid}
}

# Diskless replication forks a child that writes the RDB to replica sockets.
start_server [list tags {"afork repl external:skip"} overrides [list fork-quiet-window yes]] {
    start_server [list overrides [list repl-diskless-sync yes repl-diskless-sync-delay 0 fork-quiet-window yes]] {
        set master [srv 0 client]
        set replica [srv -1 client]
        $master debug populate 1000
        test {Full sync to a replica socket gets a window} {
            set before [getInfoProperty [$master info fork] fork_quiet_windows]
            $replica replicaof [srv 0 host] [srv 0 port]
            wait_for_sync $replica
            assert_equal [expr {$before + 1}] [getInfoProperty [$master info fork] fork_quiet_windows]
            assert {[getInfoProperty [$master info fork] latest_fork_child_ready_usec] >= 0}
            assert_equal 1000 [$replica dbsize]
        }
    }
}

# A bio thread's first allocation makes its jemalloc arena (a 2 MB mmap).
# redis-afork does not warm the bio threads up at startup (every arena
# costs every fork: jemalloc's atfork handlers lock and unlock them all),
# so the first job of one may be queued inside a window: its arena must
# come after the window, and no bio job must have run before this test.
start_server {tags {"afork external:skip"} overrides {fork-quiet-window yes}} {
    proc malloc_arenas {} {
        regexp -all -line {^arenas\[\d+\]:} [r memory malloc-stats]
    }

    test {A bio thread's first job, queued inside a window, makes its arena after the window} {
        r eval {for i=1,2000 do redis.call('hset','afork-big',i,i) end return 1} 0
        set arenas [malloc_arenas]
        r config set fork-debug-ready-delay 800
        r bgsave
        r unlink afork-big
        after 300
        assert_equal 1 [getInfoProperty [r info fork] fork_quiet_window_active]
        assert_equal 1 [s lazyfree_pending_objects]
        assert_equal $arenas [malloc_arenas]
        wait_for_condition 100 50 {[s lazyfreed_objects] == 1} else {
            fail "the lazy free did not run after the window"
        }
        assert_equal 0 [getInfoProperty [r info fork] fork_quiet_window_active]
        assert_equal [expr {$arenas + 1}] [malloc_arenas]
        waitForBgsave r
    }
}
