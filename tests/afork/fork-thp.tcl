# fork-thp.tcl -- the keyspace in transparent huge pages (fork-thp) and the
# re-collapse of huge pages split by copy-on-write (fork-thp-collapse-rate).
#
# AnonHugePages is read from /proc/<pid>/smaps_rollup, from outside the
# server, so the tests see what the kernel sees.

source tests/unit/afork/support/afork.tcl

proc thp_info {field} {
    getInfoProperty [r info fork] $field
}

proc thp_anon_huge_kb {pid} {
    set fd [open /proc/$pid/smaps_rollup]
    set text [read $fd]
    close $fd
    if {![regexp {AnonHugePages:\s+(\d+) kB} $text -> kb]} { return -1 }
    return $kb
}

# Why THP tests cannot run here, or "" when they can.
# THP_enabled of /proc/<pid>/status: 0 while PR_SET_THP_DISABLE is set.
proc thp_process_enabled {pid} {
    set fd [open /proc/$pid/status]
    set text [read $fd]
    close $fd
    if {![regexp {THP_enabled:\s+(\d+)} $text -> on]} { return -1 }
    return $on
}

# Anonymous private writable mappings of at least min bytes that cross a
# multiple of size (so are not cut at size), from /proc/<pid>/maps.
proc thp_uncut_mappings {pid size min} {
    set fd [open /proc/$pid/maps]
    set lines [split [read $fd] "\n"]
    close $fd
    set uncut {}
    foreach line $lines {
        if {![regexp {^([0-9a-f]+)-([0-9a-f]+) rw-p \S+ \S+ 0\s*(\S*)$} $line -> a b name]} continue
        if {$name ne "" && $name ne {[heap]}} continue
        set a [expr {"0x$a"}]
        set b [expr {"0x$b"}]
        if {$b - $a >= $min && $a / $size != ($b - 1) / $size} { lappend uncut $line }
    }
    return $uncut
}

# The MADV_DONTFORK mappings of <pid> as {range rss_kb} pairs, from smaps.
proc thp_dontfork_mappings {pid} {
    set fd [open /proc/$pid/smaps]
    set lines [split [read $fd] "\n"]
    close $fd
    set found {}
    foreach line $lines {
        if {[regexp {^([0-9a-f]+-[0-9a-f]+) } $line -> range]} continue
        if {[regexp {^Rss:\s+(\d+) kB} $line -> rss]} continue
        if {[regexp {^VmFlags:.* dc( |$)} $line]} { lappend found [list $range $rss] }
    }
    return $found
}

# A whole BGSAVE, then the collapse pass after it.
proc save_and_wait_pass {} {
    set passes [thp_info fork_thp_collapse_passes]
    r bgsave
    waitForBgsave r
    wait_for_condition 300 100 {
        [thp_info fork_thp_collapse_passes] > $passes &&
        [thp_info fork_thp_collapse_status] eq "ready"
    } else {
        fail "no collapse pass after the save within 30 s"
    }
}

# A BGSAVE that runs until save_stop (with rdb-key-save-delay set).
proc save_start {} {
    r bgsave
    wait_for_condition 50 100 {[s rdb_bgsave_in_progress] == 1} else {
        fail "the save did not start"
    }
}

proc save_stop {pid} {
    stop_bg_child $pid
    wait_for_condition 50 100 {[s rdb_bgsave_in_progress] == 0} else {
        fail "the save did not end"
    }
}

proc thp_unavailable {} {
    if {![file readable /sys/kernel/mm/transparent_hugepage/enabled]} {
        return "this kernel has no transparent huge pages"
    }
    set fd [open /sys/kernel/mm/transparent_hugepage/enabled]
    set mode [read $fd]
    close $fd
    if {[string match {*\[never\]*} $mode]} { return "THP is 'never' on this machine" }
    if {![file readable /proc/self/smaps_rollup]} { return "no /proc/self/smaps_rollup" }
    return ""
}

start_server {tags {"afork external:skip"}} {
    test {fork-thp is off by default and cannot change at runtime} {
        assert_equal [lindex [r config get fork-thp] 1] no
        assert_equal [thp_info fork_thp] 0
        assert_equal [thp_info fork_thp_heap] off
        assert_equal [thp_info fork_thp_collapse_status] off
        assert_error {*fork-thp*immutable*} {r config set fork-thp yes}
    }

    test {fork-thp-collapse-rate is validated and modifiable} {
        assert_equal [lindex [r config get fork-thp-collapse-rate] 1] 256
        assert_error {*fork-thp-collapse-rate*argument must be between 0 and 100000*} \
            {r config set fork-thp-collapse-rate -1}
        assert_error {*fork-thp-collapse-rate*argument must be between 0 and 100000*} \
            {r config set fork-thp-collapse-rate 100001}
        assert_error {*fork-thp-collapse-rate*argument couldn't be parsed*} \
            {r config set fork-thp-collapse-rate fast}
        r config set fork-thp-collapse-rate 0
        assert_equal [thp_info fork_thp_collapse_rate_mb_per_sec] 0
        r config set fork-thp-collapse-rate 256
    }

    test {fork-thp-vma-size is 64mb by default, validated and modifiable} {
        assert_equal [lindex [r config get fork-thp-vma-size] 1] [expr {64 << 20}]
        foreach bad {3mb 2mb 1} {
            assert_error {*fork-thp-vma-size*must be 0 (off) or a multiple of 2mb, at least 4mb*} \
                [list r config set fork-thp-vma-size $bad]
        }
        foreach bad {big -1} {
            assert_error {*fork-thp-vma-size*argument must be a memory value*} \
                [list r config set fork-thp-vma-size $bad]
        }
        r config set fork-thp-vma-size 0
        assert_equal [thp_info fork_thp_vma_size] 0
        r config set fork-thp-vma-size 1gb
        assert_equal [thp_info fork_thp_vma_size] [expr {1 << 30}]
        r config set fork-thp-vma-size 64mb
    }

    test {fork-thp-quiet-save is on by default, validated and modifiable} {
        assert_equal [lindex [r config get fork-thp-quiet-save] 1] yes
        assert_error {*fork-thp-quiet-save*argument must be 'yes' or 'no'*} \
            {r config set fork-thp-quiet-save sometimes}
        r config set fork-thp-quiet-save no
        assert_equal [thp_info fork_thp_quiet_save] 0
        r config set fork-thp-quiet-save yes
        assert_equal [thp_info fork_thp_quiet_save] 1
    }

    test {fork-thp-collapse-warm is on by default, validated and modifiable} {
        assert_equal [lindex [r config get fork-thp-collapse-warm] 1] yes
        assert_error {*fork-thp-collapse-warm*argument must be 'yes' or 'no'*} \
            {r config set fork-thp-collapse-warm often}
        r config set fork-thp-collapse-warm no
        assert_equal [lindex [r config get fork-thp-collapse-warm] 1] no
        r config set fork-thp-collapse-warm yes
        # Without fork-thp there is no collapse thread, so nothing to warm.
        assert_equal [thp_info fork_thp_collapse_warm] 0
        assert_equal [thp_info fork_thp_collapse_warm_usec] 0
        assert_equal [thp_info fork_thp_collapse_host_waits] 0
    }

    test {Without fork-thp, a save leaves the process's THP setting alone} {
        set before [thp_process_enabled [srv 0 pid]]
        r set k v
        r config set rdb-key-save-delay 100000
        save_start
        assert_equal [thp_process_enabled [srv 0 pid]] $before
        assert_equal [thp_info current_fork_thp_paused] 0
        r config set rdb-key-save-delay 0
        save_stop [srv 0 pid]
        assert_equal [thp_info fork_thp_quiet_saves] 0
    }

    test {A bad fork-thp value stops the server at startup, naming the option} {
        catch {exec src/redis-server --port 0 --fork-thp maybe 2>@1} out
        assert_match {*fork-thp*argument must be 'yes' or 'no'*} $out
    }
}

set why [thp_unavailable]
if {$why ne ""} {
    afork_skip "fork-thp with transparent huge pages: $why"
} else {
start_server {tags {"afork external:skip"} overrides {fork-thp yes enable-debug-command yes}} {
    set pid [srv 0 pid]

    test {fork-thp yes: jemalloc uses huge pages, disable-thp is not applied} {
        assert_equal [thp_info fork_thp_heap] on
        assert_equal [thp_info jemalloc_opt_thp] always
        assert_equal [thp_info thp_process_disabled] 0
        assert_equal [s 0 process_id] $pid
        assert_match {ready} [thp_info fork_thp_collapse_status]
    }

    test {fork-thp yes: the populated keyspace is in huge pages} {
        r debug populate 600000 key 400
        set ::thp_populated [thp_anon_huge_kb $pid]
        # 600000 x 400 bytes is ~300 MB of data.
        assert_morethan $::thp_populated [expr {200 * 1024}]
    }

    test {Writes during a save split the huge pages; no re-collapse while the child lives} {
        r config set fork-thp-collapse-rate 100000
        set passes [thp_info fork_thp_collapse_passes]
        r config set rdb-key-save-delay 200
        r bgsave
        wait_for_condition 50 100 {[s rdb_bgsave_in_progress] == 1} else {
            fail "the save did not start"
        }
        # Touch every 2 MiB of the data: copy-on-write splits each huge page.
        r eval {for i = 0, 599999, 8 do redis.call('setrange', 'key:' .. i, 0, 'y') end} 0
        set split [thp_anon_huge_kb $pid]
        assert_lessthan $split [expr {$::thp_populated / 2}]
        # The collapse thread would need a few hundred ms; give it 2 s.
        after 2000
        assert_equal [s rdb_bgsave_in_progress] 1
        assert_lessthan [thp_anon_huge_kb $pid] [expr {$split + 8 * 1024}]
        assert_equal [thp_info fork_thp_collapse_passes] $passes
        set ::thp_split $split
    }

    test {After the child exits, the split huge pages are collapsed again} {
        stop_bg_child $pid
        wait_for_condition 100 100 {
            [s rdb_bgsave_in_progress] == 0 &&
            [thp_info fork_thp_collapse_status] eq "ready" &&
            [thp_info fork_thp_collapse_passes] >= 1
        } else {
            fail "no collapse pass after the child exited"
        }
        set now [thp_anon_huge_kb $pid]
        assert_morethan $now [expr {$::thp_populated * 9 / 10}]
        assert_morethan [thp_info fork_thp_collapse_ranges] 50
        assert_morethan [thp_info latest_fork_thp_collapse_huge_after_bytes] \
                        [thp_info latest_fork_thp_collapse_huge_before_bytes]
        assert_morethan [thp_info fork_thp_collapse_usec] 0
        assert_equal [thp_info fork_thp_collapse_failures] 0
        # The longest collapse is one of them; each was warmed first.
        assert_morethan [thp_info latest_fork_thp_collapse_max_usec] 0
        assert_lessthan [thp_info latest_fork_thp_collapse_max_usec] \
                        [expr {[thp_info fork_thp_collapse_usec] + 1}]
        assert_equal [thp_info fork_thp_collapse_warm] 1
        assert_morethan [thp_info fork_thp_collapse_warm_usec] 0
        # Waits for a slow host happen only when the host reclaims memory.
        assert_morethan [thp_info fork_thp_collapse_host_waits] -1
    }

    test {The collapse thread's scratch huge page is empty and not in the child} {
        # It is the process's one MADV_DONTFORK mapping ("dc" in smaps).
        set scratch [thp_dontfork_mappings $pid]
        assert_equal [llength $scratch] 1
        lassign [lindex $scratch 0] range rss
        assert_equal $rss 0
        r config set rdb-key-save-delay 1000000
        save_start
        set child [get_child_pid 0]
        set fd [open /proc/$child/maps]
        set child_maps [read $fd]
        close $fd
        assert_equal [string first $range $child_maps] -1
        r config set rdb-key-save-delay 0
        save_stop $pid
    }

    test {fork-thp-collapse-warm no: the pass collapses without warming} {
        r config set fork-thp-collapse-warm no
        assert_equal [thp_info fork_thp_collapse_warm] 0
        set warm [thp_info fork_thp_collapse_warm_usec]
        set ranges [thp_info fork_thp_collapse_ranges]
        r config set rdb-key-save-delay 0
        r bgsave
        after 200
        r eval {for i = 0, 599999, 8 do redis.call('setrange', 'key:' .. i, 0, 'z') end} 0
        waitForBgsave r
        wait_for_condition 300 100 {
            [thp_info fork_thp_collapse_status] eq "ready" &&
            [thp_info fork_thp_collapse_ranges] > $ranges
        } else {
            fail "no collapse pass"
        }
        assert_equal [thp_info fork_thp_collapse_warm_usec] $warm
        r config set fork-thp-collapse-warm yes
        assert_equal [thp_info fork_thp_collapse_warm] 1
    }

    test {The collapse pass cut the keyspace into VMAs of fork-thp-vma-size} {
        set size [expr {64 << 20}]
        # ~300 MB of data: at least one mapping of 128 MB was there to cut.
        assert_morethan [thp_info fork_thp_vma_cuts] 1
        assert_equal [thp_uncut_mappings $pid $size $size] {}
        # Smaller pieces at the next pass; 0 cuts nothing more and undoes.
        r config set rdb-key-save-delay 0
        r config set fork-thp-vma-size 16mb
        set cuts [thp_info fork_thp_vma_cuts]
        save_and_wait_pass
        assert_morethan [thp_info fork_thp_vma_cuts] $cuts
        assert_equal [thp_uncut_mappings $pid [expr {16 << 20}] [expr {16 << 20}]] {}
        r config set fork-thp-vma-size 0
        set cuts [thp_info fork_thp_vma_cuts]
        r debug populate 200000 more 400
        save_and_wait_pass
        assert_equal [thp_info fork_thp_vma_cuts] $cuts
        # ... and the pieces merged again.
        assert_morethan [llength [thp_uncut_mappings $pid $size $size]] 0
        r config set fork-thp-vma-size 64mb
        r eval {for i = 0, 199999 do redis.call('del', 'more:' .. i) end} 0
        r config set rdb-key-save-delay 200
    }

    test {fork-thp-collapse-rate 0: split pages stay split after the child exits} {
        r config set fork-thp-collapse-rate 0
        set passes [thp_info fork_thp_collapse_passes]
        r bgsave
        wait_for_condition 50 100 {[s rdb_bgsave_in_progress] == 1} else {
            fail "the save did not start"
        }
        r eval {for i = 0, 599999, 8 do redis.call('setrange', 'key:' .. i, 0, 'z') end} 0
        stop_bg_child $pid
        wait_for_condition 50 100 {[s rdb_bgsave_in_progress] == 0} else {
            fail "the save did not end"
        }
        after 1000
        assert_equal [thp_info fork_thp_collapse_passes] $passes
        assert_lessthan [thp_anon_huge_kb $pid] [expr {$::thp_populated / 2}]
        assert_equal [thp_info fork_thp_collapse_status] off
    }

    test {fork-thp-quiet-save: no huge page is made while the child lives} {
        r config set rdb-key-save-delay 100000
        set saves [thp_info fork_thp_quiet_saves]
        assert_equal [thp_process_enabled $pid] 1
        save_start
        # khugepaged and page faults skip the process (PR_SET_THP_DISABLE).
        assert_equal [thp_process_enabled $pid] 0
        assert_equal [thp_info current_fork_thp_paused] 1
        save_stop $pid
        # The collapse thread turns them on again (off the main thread).
        wait_for_condition 50 100 {
            [thp_process_enabled $pid] == 1 && [thp_info current_fork_thp_paused] == 0
        } else {
            fail "huge pages still off after the child exited"
        }
        assert_equal [thp_info fork_thp_quiet_saves] [expr {$saves + 1}]
    }

    test {fork-thp-quiet-save no: huge pages stay allowed during a save} {
        r config set fork-thp-quiet-save no
        save_start
        assert_equal [thp_process_enabled $pid] 1
        assert_equal [thp_info current_fork_thp_paused] 0
        save_stop $pid
        r config set fork-thp-quiet-save yes
        r config set rdb-key-save-delay 0
    }

    test {CONFIG RESETSTAT clears the collapse counters} {
        r config resetstat
        assert_equal [thp_info fork_thp_collapse_ranges] 0
        assert_equal [thp_info fork_thp_collapse_passes] 0
        assert_equal [thp_info fork_thp_collapse_warm_usec] 0
        assert_equal [thp_info fork_thp_collapse_host_waits] 0
        # What huge pages cost in memory is upstream's fragmentation field.
        assert_morethan [getInfoProperty [r info memory] mem_fragmentation_bytes] 0
    }

    test {The save still works and restarts cleanly with fork-thp} {
        r config set rdb-key-save-delay 0
        r config set fork-thp-collapse-rate 256
        r bgsave
        waitForBgsave r
        r debug reload
        assert_equal [r dbsize] 600000
        assert_equal [r getrange key:8 0 0] z
    }
}
}
