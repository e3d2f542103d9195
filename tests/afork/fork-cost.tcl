# fork-cost.tcl -- fork-async-optin (PR_SET_ASYNC_FORK at startup and on
# CONFIG SET, its result in INFO), the parent's own usage across fork()
# (CPU time, switches, minor faults, our hook's time) and the smaps_rollup
# reader's gate (no page-table walk when no huge page is possible), and
# the quiet window's timeout following the expected copy time.
# The opt-in itself (vm.async_fork=1) is tested in the kernel harness's
# guest (contrib/async-fork, redis-latency on the opt-in kernel run).

source tests/unit/afork/support/afork.tcl

proc fork_info {field} {
    getInfoProperty [r info fork] $field
}

# Does this kernel have contrib/async-fork's sysctl?
proc afork_kernel {} {
    file exists /proc/sys/vm/async_fork
}

start_server {tags {"afork external:skip"}} {
    test {fork-async-optin: default yes, tried at startup, result in INFO fork} {
        assert_equal {fork-async-optin yes} [r config get fork-async-optin]
        set result [fork_info fork_async_optin]
        if {[afork_kernel]} {
            assert_equal in $result
        } else {
            # Without the patch the prctl answers EINVAL.
            assert_equal unsupported $result
            assert_equal 22 [fork_info fork_async_optin_errno]
        }
    }

    test {fork-async-optin: only yes or no, the message names the option} {
        catch {r config set fork-async-optin maybe} err
        assert_match {*fork-async-optin*yes*no*} $err
        assert_equal {fork-async-optin yes} [r config get fork-async-optin]
    }

    test {fork-async-optin no: opts out on CONFIG SET (or reports the prctl missing)} {
        r config set fork-async-optin no
        assert_equal {fork-async-optin no} [r config get fork-async-optin]
        assert_equal [expr {[afork_kernel] ? "out" : "unsupported"}] [fork_info fork_async_optin]
        r config set fork-async-optin yes
        assert_equal [expr {[afork_kernel] ? "in" : "unsupported"}] [fork_info fork_async_optin]
    }

    test {INFO fork: the parent's CPU time, switches and faults across fork(), and our after-fork work} {
        foreach f {latest_fork_cpu_usec latest_fork_minor_faults latest_fork_voluntary_switches
                   latest_fork_involuntary_switches latest_fork_hook_usec} {
            assert_equal -1 [fork_info $f]
        }
        r debug populate 100000 key 100
        r bgsave
        waitForBgsave r
        # fork() of a 100k-key heap takes this thread's CPU time in the
        # kernel, and the atfork handlers of jemalloc touch memory.
        assert {[fork_info latest_fork_cpu_usec] > 0}
        assert {[fork_info latest_fork_minor_faults] > 0}
        assert {[fork_info latest_fork_voluntary_switches] >= 0}
        assert {[fork_info latest_fork_involuntary_switches] >= 0}
        # Our after-fork work is recorded. It runs once upstream has timed
        # the fork, so it may take longer than latest_fork_usec.
        assert {[fork_info latest_fork_hook_usec] >= 0}
    }
}

start_server {tags {"afork external:skip"} overrides {fork-thp no}} {
    test {smaps_rollup reader: no walk when no huge page is possible} {
        set fd [open /sys/kernel/mm/transparent_hugepage/enabled]
        set thp [read $fd]
        close $fd
        set reads [fork_info fork_smaps_reads]
        if {[string match {*\[never\]*} $thp] || [fork_info thp_process_disabled] == 1} {
            assert_equal 0 $reads
            assert_equal 0 [fork_info thp_anon_huge_pages_bytes]
        } elseif {[string match {*\[madvise\]*} $thp] &&
                  [fork_info jemalloc_opt_thp] ne "always" &&
                  [fork_info jemalloc_opt_metadata_thp] in {disabled n/a}} {
            assert_equal 0 $reads
        } else {
            assert_equal 1 $reads
        }
        assert_equal 0 [fork_info fork_smaps_collisions]
    }
}

start_server {tags {"afork external:skip"} overrides {fork-quiet-window yes}} {
    test {Quiet-window timeout: the configured value for a quick child, not raised by a held-back one} {
        r debug populate 10000 key 100
        r bgsave
        waitForBgsave r
        # A child ready within a few ms: the configured timeout rules.
        assert_equal 1000000 [fork_info fork_quiet_window_timeout_usec]
        # A child held back by fork-debug-ready-delay plays a stuck one:
        # its delay is not learnt as copy time (the window must still time
        # out at the configured value).
        r config set fork-debug-ready-delay 400
        r bgsave
        waitForBgsave r
        wait_for_condition 100 20 {[fork_info latest_fork_child_ready_usec] >= 400000} else {
            fail "the child did not report"
        }
        r config set fork-debug-ready-delay 0
        r bgsave
        waitForBgsave r
        assert_equal 1000000 [fork_info fork_quiet_window_timeout_usec]
    }

    test {Quiet-window timeout: grows to 4x the copy time the last child needed, scaled by memory} {
        # 1 ms configured, and a dataset whose child needs more than a
        # quarter of that to be ready (a fork of ~60 MB takes over 1 ms).
        r config set fork-quiet-window-timeout 1
        r debug populate 500000 big 100
        r bgsave
        waitForBgsave r
        wait_for_condition 100 20 {[fork_info latest_fork_child_ready_usec] > 0} else {
            fail "the child did not report"
        }
        set ready [fork_info latest_fork_child_ready_usec]
        assert_morethan $ready 300
        set used_then [s used_memory]
        r bgsave
        waitForBgsave r
        set used_now [s used_memory]
        set expected [expr {4.0 * $ready * $used_now / $used_then}]
        set timeout [fork_info fork_quiet_window_timeout_usec]
        assert_range $timeout [expr {int($expected * 0.99)}] [expr {int($expected * 1.01) + 1}]
        # Back to the configured value once the copy is quick again.
        r flushall
        r config set fork-quiet-window-timeout 1000
        r bgsave
        waitForBgsave r
        r bgsave
        waitForBgsave r
        assert_equal 1000000 [fork_info fork_quiet_window_timeout_usec]
    }
}
