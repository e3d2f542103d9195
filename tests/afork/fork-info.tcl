# fork-info.tcl -- INFO fork, Async-fork detection, THP state, LATENCY
# events and advice, --check-system.

source tests/unit/afork/support/afork.tcl

set forkmodule [file normalize tests/modules/fork.so]

proc fork_info {field} {
    getInfoProperty [r info fork] $field
}

# Write a fake /proc + /sys tree under dir: a list of path content pairs.
proc fake_tree {dir files} {
    file delete -force $dir
    foreach {path content} $files {
        file mkdir [file dirname $dir/$path]
        set fd [open $dir/$path w]
        puts -nonewline $fd $content
        close $fd
    }
}

# Point the probes at a fake tree and return kind, mode, enabled.
proc probe_fake {dir files} {
    fake_tree $dir $files
    # An unchanged value is not applied: go through "" to probe again.
    r config set fork-probe-root ""
    r config set fork-probe-root $dir
    list [fork_info fork_async_kernel] [fork_info fork_async_kernel_mode] [fork_info fork_async_enabled]
}

# The bracketed value of a /sys THP mode file.
proc sys_thp {name} {
    set fd [open /sys/kernel/mm/transparent_hugepage/$name]
    set text [read $fd]
    close $fd
    regexp {\[([^\]]+)\]} $text -> v
    return $v
}

# 1 if a virtio balloon of this machine negotiated free page reporting
# (feature bit 5: the sixth character of its features file), else 0.
proc sys_vm_page_reporting {} {
    foreach dev [glob -nocomplain /sys/bus/virtio/devices/*] {
        if {[catch {set fd [open $dev/device]}]} continue
        set id [string trim [read $fd]]
        close $fd
        if {$id ne "0x0005"} continue
        set fd [open $dev/features]
        set bits [read $fd]
        close $fd
        if {[string index $bits 5] eq "1"} { return 1 }
    }
    return 0
}

# A "Field:   N kB" line of a /proc file, in bytes.
proc proc_kb {path field} {
    set fd [open $path]
    set text [read $fd]
    close $fd
    if {![regexp -line "^$field:\\s+(\\d+) kB" $text -> kb]} { return -1 }
    return [expr {$kb * 1024}]
}

set cost_fields {
    max_fork_usec total_fork_usec fork_p50_usec fork_p99_usec
    fork_p999_usec latest_fork_rate_gb_per_sec
    latest_fork_child_ready_usec max_fork_child_ready_usec
    latest_fork_async_observed current_fork_cow_minor_faults
    current_fork_cow_max_eventloop_usec latest_fork_cow_minor_faults
    latest_fork_cow_max_eventloop_usec latest_fork_child_life_usec
    fork_async_kernel_mode fork_async_enabled page_table_bytes
    thp_process_disabled thp_anon_huge_pages_bytes
}

start_server [list tags {"afork external:skip"} overrides [list loadmodule $forkmodule]] {
    r debug populate 100000

    test {INFO fork: in INFO fork, all and everything, not in plain INFO nor other sections} {
        foreach args {{all} {everything} {fork} {stats fork}} {
            assert_match "*# Fork*max_fork_usec:*" [r info {*}$args]
        }
        foreach args {{} {default} {stats} {persistence}} {
            assert_no_match "*# Fork*" [r info {*}$args]
        }
        assert_no_match "*max_fork_usec*" [r info memory]
    }

    test {INFO fork after BGSAVE, BGREWRITEAOF and a module fork: numbers, consistent} {
        r config resetstat
        r bgsave
        waitForBgsave r
        r bgrewriteaof
        waitForBgrewriteaof r
        r fork.create 0 0
        wait_for_condition 100 50 {[r fork.exitcode] == 0} else { fail "module fork" }
        wait_for_condition 100 50 {
            [s module_fork_in_progress] == 0 &&
            [fork_info latest_fork_child_ready_usec] >= 0
        } else { fail "child not done" }
        foreach f $cost_fields {
            assert {[string is double -strict [fork_info $f]]}
        }
        set max [fork_info max_fork_usec]
        assert {$max > 0}
        assert {[fork_info total_fork_usec] >= $max}
        set p50 [fork_info fork_p50_usec]
        set p99 [fork_info fork_p99_usec]
        set p999 [fork_info fork_p999_usec]
        assert {$p50 > 0 && $p50 <= $p99 && $p99 <= $p999 && $p999 <= $max}
        assert {[fork_info latest_fork_child_ready_usec] >= 0}
        assert {[fork_info max_fork_child_ready_usec] >= [fork_info latest_fork_child_ready_usec]}
        assert {[fork_info latest_fork_rate_gb_per_sec] > 0}
        assert {[fork_info latest_fork_child_life_usec] > 0}
        assert {[fork_info latest_fork_cow_minor_faults] >= 0}
        # Upstream's own fields keep their meaning.
        assert_equal 3 [getInfoProperty [r info stats] total_forks]
        assert {[getInfoProperty [r info stats] latest_fork_usec] > 0}
    }

    test {max_fork_usec and total_fork_usec aggregate the time of upstream's latest_fork_usec} {
        # Ours is timed around fork() alone; upstream's latest_fork_usec also
        # counts the parent's first steps after it (our hook among them), so
        # for one fork ours is at most upstream's.
        r config resetstat
        r bgsave
        waitForBgsave r
        set max [fork_info max_fork_usec]
        assert_equal $max [fork_info total_fork_usec]
        assert_equal $max [fork_info fork_p50_usec]
        set latest [s latest_fork_usec]
        assert {$max > 0 && $max <= $latest + 50}
        assert_equal 1 [s total_forks]
    }

    test {Copy-on-write stall: faults and the longest iteration while a child lives} {
        r config set rdb-key-save-delay 200
        r bgsave
        wait_for_condition 100 20 {[s rdb_bgsave_in_progress] == 1} else { fail "no child" }
        # Writes to shared pages fault; a slow command makes a long iteration.
        for {set i 0} {$i < 2000} {incr i} { r set key:$i [string repeat x 100] }
        r debug sleep 0.05
        after 200
        assert {[fork_info current_fork_cow_minor_faults] > 0}
        assert {[fork_info current_fork_cow_max_eventloop_usec] >= 50000}
        r config set rdb-key-save-delay 0
        stop_bg_child [srv 0 pid]
        wait_for_condition 100 50 {[s rdb_bgsave_in_progress] == 0} else { fail "child alive" }
        assert {[fork_info latest_fork_cow_minor_faults] > 0}
        assert {[fork_info latest_fork_cow_max_eventloop_usec] >= 50000}
        assert_equal 0 [fork_info current_fork_cow_minor_faults]
    }

    test {A child that becomes ready long after fork() returned is observed asynchronous} {
        r config set fork-debug-ready-delay 100
        r bgsave
        waitForBgsave r
        wait_for_condition 50 50 {[fork_info latest_fork_child_ready_usec] >= 100000} else {
            fail "ready time not recorded"
        }
        assert_equal 1 [fork_info latest_fork_async_observed]
        r config set fork-debug-ready-delay 0
    }

    test {CONFIG RESETSTAT resets the fork counters} {
        r config resetstat
        assert_equal 0 [s total_forks]
        assert_equal 0 [fork_info max_fork_usec]
        assert_equal 0 [fork_info total_fork_usec]
        assert_equal 0 [fork_info fork_p99_usec]
        assert_equal 0 [fork_info max_fork_child_ready_usec]
        assert_equal 0 [fork_info fork_quiet_windows]
    }

    test {THP and page-table fields agree with /sys and /proc read here} {
        set pid [srv 0 pid]
        assert_equal [sys_thp enabled] [fork_info thp_enabled]
        assert_equal [sys_thp defrag] [fork_info thp_defrag]
        assert_equal [sys_vm_page_reporting] [fork_info vm_free_page_reporting]
        # PR_GET_THP_DISABLE is the negation of the kernel's THP_enabled line.
        set fd [open /proc/$pid/status]
        regexp -line {^THP_enabled:\s+(\d)} [read $fd] -> thp_on
        close $fd
        assert_equal [expr {!$thp_on}] [fork_info thp_process_disabled]
        # VmPTE is cached (refreshed each second): close to a fresh read.
        after 1100
        set pte [proc_kb /proc/$pid/status VmPTE]
        assert {abs([fork_info page_table_bytes] - $pte) <= 64 * 1024}
        set ahp [proc_kb /proc/$pid/smaps_rollup AnonHugePages]
        assert {abs([fork_info thp_anon_huge_pages_bytes] - $ahp) <= 8 * 1024 * 1024}
        assert_match {default} [fork_info jemalloc_opt_thp]
        assert_match {disabled} [fork_info jemalloc_opt_metadata_thp]
    }

    set fake [file normalize [tmpdir afork-fake-root]]

    test {Detection: no interface at all} {
        assert_equal {none -1 0} [probe_fake $fake {proc/self/status "VmPTE:\t12 kB\n"}]
    }

    test {Detection: ByteDance kernel.async_fork_enabled 0/1/2} {
        assert_equal {bytedance 0 0} [probe_fake $fake {proc/sys/kernel/async_fork_enabled "0\n"}]
        assert_equal {bytedance 1 0} [probe_fake $fake {proc/sys/kernel/async_fork_enabled "1\n"}]
        assert_equal {bytedance 2 1} [probe_fake $fake {proc/sys/kernel/async_fork_enabled "2\n"}]
    }

    test {Detection: redis-afork vm.async_fork 0/1/2} {
        # 1 = per-process opt-in, read back with prctl from the real kernel:
        # 0 unless it is an Async-fork kernel that has this process opted
        # in, which the real probe shows when the real mode is 1 too.
        r config set fork-probe-root ""
        lassign [list [fork_info fork_async_kernel] [fork_info fork_async_kernel_mode] \
                     [fork_info fork_async_enabled]] real_kind real_mode real_enabled
        if {$real_kind eq "afork" && $real_mode == 1} {
            set opted_in $real_enabled
        } elseif {$real_kind eq "afork"} {
            set opted_in {[01]}   ;# the prctl answer cannot be seen from here
        } else {
            set opted_in 0
        }
        assert_equal {afork 0 0} [probe_fake $fake {proc/sys/vm/async_fork "0\n"}]
        assert_match "afork 1 $opted_in" [probe_fake $fake {proc/sys/vm/async_fork "1\n"}]
        assert_equal {afork 2 1} [probe_fake $fake {proc/sys/vm/async_fork "2\n"}]
        # And auto turns the quiet window on for it.
        r config set fork-quiet-window auto
        assert_equal 1 [fork_info fork_quiet_window_enabled]
        probe_fake $fake {}
        assert_equal 0 [fork_info fork_quiet_window_enabled]
    }

    # A fake /proc/vmstat with contrib/async-fork's counters, each at base
    # plus its own small offset.
    proc fake_vmstat {base {later {taken_over sync_pinned sync_notifiers sync_merge_any sync_nomem}}} {
        set text "nr_free_pages 1000\npgfault 5\n"
        set i 0
        foreach c [concat {sessions deferred child_copied copied_fault copied_gup copied_vma
                   copied_madvise copied_zap copied_exit copied_fork parent_ns sessions_failed} $later] {
            append text "async_fork_$c [expr {$base * [incr i]}]\n"
        }
        return $text
    }

    test {Async-fork counters: the latest fork's deltas from /proc/vmstat} {
        # Without the counters in vmstat (an older patch) INFO has no field.
        probe_fake $fake {proc/sys/vm/async_fork "2\n" proc/vmstat "nr_free_pages 1\n"}
        assert_equal {} [fork_info latest_fork_async_tables_deferred]
        # With them, the fields (-1 until a fork read them).
        probe_fake $fake [list proc/sys/vm/async_fork "2\n" proc/vmstat [fake_vmstat 1000]]
        assert {[regexp {^-?[0-9]+$} [fork_info latest_fork_async_tables_deferred]]}
        # The counters move while the child is held back: read before the
        # fork and when the child is ready, the deltas are base 7 x offset.
        r config set fork-debug-ready-delay 500
        r bgsave
        # (replaced whole, by a rename, so no probe finds it missing)
        set fd [open $fake/proc/vmstat.new w]
        puts -nonewline $fd [fake_vmstat 1007]
        close $fd
        file rename -force $fake/proc/vmstat.new $fake/proc/vmstat
        waitForBgsave r
        wait_for_condition 100 20 {[fork_info latest_fork_async_tables_deferred] == 14} else {
            fail "the counters were not read after the child: [fork_info latest_fork_async_tables_deferred]"
        }
        r config set fork-debug-ready-delay 0
        assert_equal 14 [fork_info latest_fork_async_tables_deferred]
        assert_equal 21 [fork_info latest_fork_async_tables_child]
        assert_equal 28 [fork_info latest_fork_async_tables_parent_fault]
        assert_equal 70 [fork_info latest_fork_async_tables_parent_fork]
        assert_equal [expr {7 * (4 + 5 + 6 + 7 + 8 + 9 + 10)}] [fork_info latest_fork_async_tables_parent]
        assert_equal 0 [fork_info latest_fork_async_parent_copy_usec] ;# 77 ns
        assert_equal 84 [fork_info latest_fork_async_sessions_failed]
        assert_equal 91 [fork_info latest_fork_async_tables_taken_over]
        assert_equal 98 [fork_info latest_fork_async_tables_pinned]
        assert_equal 105 [fork_info latest_fork_async_sync_notifiers]
        assert_equal 112 [fork_info latest_fork_async_sync_merge_any]
        assert_equal 119 [fork_info latest_fork_async_sync_nomem]
        # A fork over which nothing moved reads 0.
        r bgsave
        waitForBgsave r
        wait_for_condition 100 20 {[fork_info latest_fork_async_tables_deferred] == 0} else {
            fail "the second fork's counters were not read"
        }
        # A version of the series without the later counter: the others
        # still, and -1 for it.
        probe_fake $fake [list proc/sys/vm/async_fork "2\n" proc/vmstat [fake_vmstat 1000 {}]]
        r bgsave
        waitForBgsave r
        wait_for_condition 100 20 {[fork_info latest_fork_async_tables_taken_over] == -1} else {
            fail "a counter the kernel lacks: [fork_info latest_fork_async_tables_taken_over]"
        }
        assert_equal 0 [fork_info latest_fork_async_tables_deferred]
        assert_equal -1 [fork_info latest_fork_async_tables_pinned]
        assert_equal -1 [fork_info latest_fork_async_sync_nomem]
        probe_fake $fake {}
        assert_equal {} [fork_info latest_fork_async_tables_deferred]
    }

    test {Detection: OpenAnolis memory.async_fork, cgroup v2} {
        set files {
            proc/self/cgroup "0::/system.slice/redis.service\n"
            proc/self/mountinfo "22 1 8:1 / / rw - ext4 /dev/sda1 rw\n30 22 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw\n"
        }
        assert_equal {anolis 1 1} [probe_fake $fake [concat $files {sys/fs/cgroup/system.slice/redis.service/memory.async_fork "1\n"}]]
        assert_equal {anolis 0 0} [probe_fake $fake [concat $files {sys/fs/cgroup/system.slice/redis.service/memory.async_fork "0\n"}]]
    }

    test {Detection: OpenAnolis memory.async_fork, cgroup v1, and a container's view} {
        set files {
            proc/self/cgroup "5:cpu,cpuacct:/app\n4:memory:/app\n0::/\n"
            proc/self/mountinfo "22 1 8:1 / / rw - ext4 /dev/sda1 rw\n35 25 0:30 / /cgroup/mem rw - cgroup cgroup rw,memory\n36 25 0:31 / /cgroup/cpu rw - cgroup cgroup rw,cpu,cpuacct\n"
            cgroup/mem/app/memory.async_fork "1\n"
        }
        assert_equal {anolis 1 1} [probe_fake $fake $files]
        # In a container the mount's root is our own cgroup.
        set files {
            proc/self/cgroup "0::/kubepods/pod1/c1\n"
            proc/self/mountinfo "40 30 0:26 /kubepods/pod1/c1 /sys/fs/cgroup ro - cgroup2 cgroup2 rw\n"
            sys/fs/cgroup/memory.async_fork "1\n"
        }
        assert_equal {anolis 1 1} [probe_fake $fake $files]
    }

    test {Detection: garbage and unreadable files mean none, never a crash} {
        foreach content {"" "abc" "7\n" "-1" "2x" "99999999999999999999999"} {
            assert_equal {none -1 0} [probe_fake $fake [list proc/sys/kernel/async_fork_enabled $content]]
            assert_equal {none -1 0} [probe_fake $fake [list proc/sys/vm/async_fork $content]]
            assert_equal {none -1 0} [probe_fake $fake [list \
                proc/self/cgroup "0::/x\n" \
                proc/self/mountinfo "30 22 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n" \
                sys/fs/cgroup/x/memory.async_fork $content]]
        }
        # Broken cgroup and mountinfo lines.
        assert_equal {none -1 0} [probe_fake $fake {proc/self/cgroup "garbage" proc/self/mountinfo "1 2"}]
        assert_equal {none -1 0} [probe_fake $fake {proc/self/cgroup "0::/x\n" proc/self/mountinfo "30 22 0:26 / /m rw\n"}]
        file mkdir $fake/proc/sys/vm/async_fork
        assert_equal {none -1 0} [probe_fake $fake {}]
        assert_equal PONG [r ping]
    }

    test {THP state read from a fake tree} {
        probe_fake $fake {
            sys/kernel/mm/transparent_hugepage/enabled "always madvise [never]\n"
            sys/kernel/mm/transparent_hugepage/defrag "[always] defer defer+madvise madvise never\n"
            proc/self/status "Name:\tredis\nVmPTE:\t     2048 kB\n"
        }
        wait_for_condition 50 50 {[fork_info thp_enabled] eq "never"} else { fail "not refreshed" }
        assert_equal always [fork_info thp_defrag]
        wait_for_condition 50 50 {[fork_info page_table_bytes] == 2097152} else { fail "VmPTE" }
        probe_fake $fake {sys/kernel/mm/transparent_hugepage/enabled "garbage"}
        wait_for_condition 50 50 {[fork_info thp_enabled] eq "unknown"} else { fail "not refreshed" }
        assert_equal -1 [fork_info page_table_bytes]
        r config set fork-probe-root ""
    }

    test {VM free page reporting read from a fake tree} {
        # A balloon (device 5) without the reporting bit, a block device with
        # bit 5 set: no reporting. Then the balloon with it, then without.
        set devices sys/bus/virtio/devices
        set without [list $devices/virtio0/device "0x0005\n" \
                          $devices/virtio0/features "0110000100000000\n" \
                          $devices/virtio1/device "0x0002\n" \
                          $devices/virtio1/features "0010011001100100\n"]
        set with [list $devices/virtio0/device "0x0005\n" \
                       $devices/virtio0/features "0110010100000000\n" \
                       $devices/virtio1/device "0x0002\n" \
                       $devices/virtio1/features "0010011001100100\n"]
        probe_fake $fake $without
        wait_for_condition 50 50 {[fork_info vm_free_page_reporting] == 0} else { fail "not refreshed" }
        probe_fake $fake $with
        wait_for_condition 50 50 {[fork_info vm_free_page_reporting] == 1} else { fail "not refreshed" }
        probe_fake $fake [list $devices/virtio0/device "0x0005\n" $devices/virtio0/features "011"]
        wait_for_condition 50 50 {[fork_info vm_free_page_reporting] == 0} else { fail "not refreshed" }
        r config set fork-probe-root ""
    }

    test {LATENCY events fork-child-ready and fork-cow-stall, and DOCTOR's fork advice} {
        r latency reset
        r config set latency-monitor-threshold 1
        r config set fork-debug-ready-delay 30
        r config set rdb-key-save-delay 100
        r bgsave
        wait_for_condition 100 20 {[fork_info latest_fork_child_ready_usec] >= 30000} else {
            fail "no ready message"
        }
        r debug sleep 0.02
        r config set rdb-key-save-delay 0
        stop_bg_child [srv 0 pid]
        wait_for_condition 100 50 {[s rdb_bgsave_in_progress] == 0} else { fail "child alive" }
        set events {}
        foreach e [r latency latest] { lappend events [lindex $e 0] }
        assert {[lsearch $events fork-child-ready] >= 0}
        assert {[lsearch $events fork-cow-stall] >= 0}
        assert {[lindex [lindex [r latency history fork-cow-stall] 0] 1] >= 20}
        assert {[lindex [lindex [r latency history fork-child-ready] 0] 1] >= 30}
        set doctor [r latency doctor]
        assert_match "*fork-child-ready*page-table copy*" $doctor
        assert_match "*fork-cow-stall*minor page faults*" $doctor
        r config set fork-debug-ready-delay 0
        r config set latency-monitor-threshold 0
    }

    test {LATENCY DOCTOR's fork line names page tables and the Async-fork state} {
        r latency reset
        r config set latency-monitor-threshold 1
        # Make the "fork" event certain: a fork of a larger dataset.
        # (2M keys, ~200 MB: fork() takes about 10 ms here, far above 1 ms).
        r debug populate 2000000 big
        r bgsave
        waitForBgsave r
        r config set latency-monitor-threshold 0
        assert {[lsearch [join [r latency latest]] fork] >= 0}
        set doctor [r latency doctor]
        assert_match "*fork:*page tables*MB per GB*" $doctor
        # The Async-fork sentence follows the real kernel (afork_kernel.c).
        set kind [fork_info fork_async_kernel]
        if {$kind eq "none"} {
            assert_match "*no Async-fork support*" $doctor
        } elseif {[fork_info fork_async_enabled]} {
            assert_match "*Async-fork ($kind) is enabled for this process*" $doctor
        } else {
            assert_match "*supports Async-fork ($kind) but it is not enabled*" $doctor
        }
    }
}

tags {"afork"} {
    test {redis-server --check-system reports Async-fork and THP findings} {
        catch {exec src/redis-server --check-system} out
        assert_match {*Async-fork kernel:*\[async-fork\]...*} $out
        assert_match {*THP: enabled=*\[fork-thp\]...*} $out
        if {[sys_vm_page_reporting]} {
            assert_match {*VM free page reporting: yes (a virtio balloon*} $out
        } else {
            assert_match {*VM free page reporting: no*} $out
        }
    }
}

# fork-probe-root points the kernel and THP probes at another /proc and /sys
# (for tests): like upstream's dir, it may only be set where protected
# configs are enabled.
start_server {tags {"afork external:skip"} overrides {enable-protected-configs no}} {
    test {fork-probe-root is a protected config} {
        catch {r config set fork-probe-root /tmp} err
        assert_match {*fork-probe-root*protected config*} $err
        assert_equal {} [lindex [r config get fork-probe-root] 1]
    }
}

# The CPUs a process may run on, from /proc/<pid>/status.
proc cpus_allowed {pid} {
    set fd [open /proc/$pid/status]
    set text [read $fd]
    close $fd
    regexp {Cpus_allowed_list:\s*(\S+)} $text -> list
    return $list
}

# On an Async-fork kernel the child copies its page tables before it runs
# Redis code, so before upstream's child binds itself to bgsave-cpulist:
# the main thread forks with the child's CPUs added to its own (so that
# fork() may queue the child there, not on the main thread's CPU), takes
# its own back right after, and binds the child at once.
# fork-debug-ready-delay holds the child at the start of its code, before
# upstream's own call, so its CPUs then are the parent's doing. With the
# kernel faked as synchronous, they are the parent's own (the check can
# fail). The CPUs added across fork() are not seen here (bindChildEarly
# narrows the child before its code runs): the e2e experiment shows their
# effect (contrib/async-fork/README.md).
set fake [file normalize [tmpdir afork-fake-cpus]]
fake_tree $fake {proc/sys/vm/async_fork "2\n"}
set parent_cpus [cpus_allowed [pid]]
if {![regexp {^0(-|,1(,|-|$))} $parent_cpus]} {
    afork_skip "the child bound from the parent: needs CPUs 0 and 1, this test may use $parent_cpus"
} else {
start_server [list tags {"afork external:skip"} overrides [list server-cpulist 0 bgsave-cpulist 1 fork-probe-root $fake enable-debug-command yes]] {
    set srv [srv 0 pid]

    # The child of a BGSAVE held in its first code: its CPUs, or "" if none.
    proc held_child_cpus {srv} {
        r config set fork-debug-ready-delay 1000
        r bgsave
        set child [wait_for_child_of $srv]
        set cpus [cpus_allowed $child]
        waitForBgsave r
        r config set fork-debug-ready-delay 0
        return $cpus
    }

    proc wait_for_child_of {srv} {
        wait_for_condition 100 10 {[catch {exec pgrep -P $srv} child] == 0} else {
            fail "no child of $srv"
        }
        return [lindex $child 0]
    }

    test {Async fork: the child is bound to bgsave-cpulist by the parent, before its own code} {
        assert_equal 1 [fork_info fork_async_enabled]
        assert_equal 0 [cpus_allowed $srv]
        assert_equal 1 [held_child_cpus $srv]
        # ... and the main thread has its own CPU back.
        assert_equal 0 [cpus_allowed $srv]
    }

    test {Async fork: fork-debug-fork-preempt (no added CPUs) binds the child the same} {
        r config set fork-debug-fork-preempt yes
        assert_equal 1 [held_child_cpus $srv]
        assert_equal 0 [cpus_allowed $srv]
        r config set fork-debug-fork-preempt no
    }

    test {Synchronous fork: the child keeps the parent's CPUs until its own code binds it} {
        fake_tree $fake {proc/sys/vm/async_fork "0\n"}
        r config set fork-probe-root ""
        r config set fork-probe-root $fake
        assert_equal 0 [fork_info fork_async_enabled]
        assert_equal 0 [held_child_cpus $srv]
        assert_equal 0 [cpus_allowed $srv]
    }
}
}

