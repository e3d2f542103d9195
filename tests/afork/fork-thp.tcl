# fork-thp.tcl -- the keyspace in transparent huge pages (fork-thp) and the
# re-collapse of huge pages split by copy-on-write (fork-thp-collapse-rate);
# at the end, the keyspace tables kept in 4 KiB pages while rehashed into,
# large values with slack kept in 4 KiB pages, and the replica hold.
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

# Write a fake /proc + /sys tree under dir (fork-probe-root): a list of
# path content pairs.
proc thp_fake_tree {dir files} {
    file delete -force $dir
    foreach {path content} $files {
        file mkdir [file dirname $dir/$path]
        set fd [open $dir/$path w]
        puts -nonewline $fd $content
        close $fd
    }
    return $dir
}

# A fake machine for fork-thp auto (fork-probe-root): kernel release, THP
# mode, then more path content pairs. Its /proc/self/status gives the page
# tables that auto compares with its threshold (thp_fake_page_tables).
proc thp_fake_machine {name release mode {more {}}} {
    set dir [file normalize [tmpdir fake-$name]]
    set modes [string trim [string map [list " $mode " " \[$mode\] "] " always madvise never "]]
    thp_fake_tree $dir [concat [list \
        proc/sys/kernel/osrelease "$release\n" \
        sys/kernel/mm/transparent_hugepage/enabled "$modes\n" \
        proc/self/status "VmPTE:\t     100 kB\n"] $more]
}

# Set the page tables (kB) that the fake machine under root reports.
proc thp_fake_page_tables {root kb} {
    set fd [open $root/proc/self/status w]
    puts $fd "VmPTE:\t$kb kB"
    close $fd
}

# Wait past two serverCron checks of fork-thp auto (once a second).
proc thp_wait_auto_checks {} {
    after 2200
}

# The log lines of server 0 that match pattern.
proc thp_log_lines {pattern} {
    afork_log_lines [srv 0 stdout] $pattern
}

set ::thp_auto_machine {kernel 6.18 with MADV_COLLAPSE and PAGEMAP_SCAN, THP madvise}
set ::thp_balloon {sys/bus/virtio/devices/virtio0/device "0x0005\n"
                   sys/bus/virtio/devices/virtio0/features "0000010000000000000000000000000000000000\n"}

start_server {tags {"afork external:skip"}} {
    test {fork-thp is auto by default, and waits or says why it is off} {
        assert_equal [lindex [r config get fork-thp] 1] auto
        assert_equal [thp_info fork_thp_auto] 1
        assert_equal [thp_info fork_thp] 0
        assert_match {*: auto: *} [thp_info fork_thp_heap]
        assert {[regexp {^(waiting|off): } [thp_info fork_thp_heap]]}
        # Until it switches on, upstream's server: no thread, no re-exec,
        # jemalloc as upstream has it, no arena of ours.
        assert_equal [thp_info fork_thp_collapse_status] off
        assert_equal [thp_info jemalloc_opt_thp] default
        assert_equal [thp_info fork_thp_slack_arena] -1
        assert_equal [thp_log_lines {*restarting once*}] {}
        assert_equal [thp_info fork_thp_auto_page_tables_bytes] [expr {6 << 20}]
        assert_equal [thp_info fork_thp_auto_fork_usec] 200000
    }
}

start_server {tags {"afork external:skip"} overrides {fork-thp no}} {
    test {fork-thp no: off, and it cannot change at runtime} {
        assert_equal [lindex [r config get fork-thp] 1] no
        assert_equal [thp_info fork_thp] 0
        assert_equal [thp_info fork_thp_auto] 0
        assert_equal [thp_info fork_thp_heap] off
        assert_equal [thp_info fork_thp_collapse_status] off
        assert_error {*fork-thp*immutable*} {r config set fork-thp yes}
        assert_error {*fork-thp*immutable*} {r config set fork-thp auto}
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

    test {Users see fork-thp and fork-thp-collapse-rate; the debug switches are hidden} {
        assert_equal [lsort [dict keys [r config get fork-thp*]]] {fork-thp fork-thp-collapse-rate}
        assert_equal [r config get fork-debug-thp-vma-size] [list fork-debug-thp-vma-size [expr {64 << 20}]]
        assert_equal [r config get fork-debug-thp-collapse-warm] {fork-debug-thp-collapse-warm auto}
        assert_equal [r config get fork-debug-thp-auto-fork-ms] {fork-debug-thp-auto-fork-ms 200}
        foreach gone {fork-thp-vma-size fork-thp-quiet-save fork-thp-collapse-warm} {
            assert_equal [r config get $gone] {}
            assert_error "*Unknown option*$gone*" [list r config set $gone no]
        }
    }

    test {fork-debug-thp-vma-size: 0 or whole huge pages, at least 4mb} {
        foreach bad {3mb 2mb 5mb 1} {
            assert_error {*fork-debug-thp-vma-size*must be 0 (one VMA) or a multiple of 2mb, at least 4mb*} \
                [list r config set fork-debug-thp-vma-size $bad]
        }
        assert_error {*fork-debug-thp-vma-size*} {r config set fork-debug-thp-vma-size big}
        r config set fork-debug-thp-vma-size 0
        assert_equal [thp_info fork_thp_vma_size] 0
        r config set fork-debug-thp-vma-size 1gb
        assert_equal [thp_info fork_thp_vma_size] [expr {1 << 30}]
        r config set fork-debug-thp-vma-size 64mb
        assert_equal [thp_info fork_thp_vma_size] [expr {64 << 20}]
    }

    test {fork-debug-thp-collapse-warm: auto, yes or no; auto-fork-ms at least 1} {
        assert_error "*fork-debug-thp-collapse-warm*argument(s) must be one of the following: auto, yes, no*" \
            {r config set fork-debug-thp-collapse-warm sometimes}
        assert_error {*fork-debug-thp-auto-fork-ms*argument must be between 1 and 3600000*} \
            {r config set fork-debug-thp-auto-fork-ms 0}
        # Without the collapse thread there is nothing to warm.
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

    test {A bad or removed fork-thp setting stops the server at startup, naming it} {
        catch {exec src/redis-server --port 0 --fork-thp maybe 2>@1} out
        assert_match {*fork-thp*argument(s) must be one of the following: auto, yes, no*} $out
        catch {exec src/redis-server --port 0 --fork-debug-thp-vma-size 3mb 2>@1} out
        assert_match {*fork-debug-thp-vma-size*3mb*must be*} $out
        foreach gone {fork-thp-vma-size fork-thp-quiet-save fork-thp-collapse-warm} {
            catch {exec src/redis-server --port 0 --$gone no 2>@1} out
            # Upstream's message for a name no config table has.
            assert_match "*Unresolved Configuration*$gone no*aborting*" $out
        }
    }
}

# fork-thp auto's refusals, each forced through a fake machine
# (fork-probe-root): off for good, whatever the page tables grow to.
foreach {name release mode more reason} [list \
    old-kernel 5.4.0 madvise {} \
        {off: auto: kernel 5.4 copies 2 MiB on a copy-on-write fault of a huge page*} \
    never 6.18.4 never {} \
        {off: auto: transparent huge pages are 'never' on this system} \
    no-collapse 6.0.9 madvise {} \
        {off: auto: kernel 6.0 has no MADV_COLLAPSE (6.1+)*} \
    no-scan 6.1.0 always {} \
        {off: auto: kernel 6.1 has no PAGEMAP_SCAN (6.7+)*} \
    reporting-balloon 6.18.4 madvise $::thp_balloon \
        {off: auto: this VM reports free memory to its host (virtio balloon), so the first write to each huge page waits for the host to back 2 MiB} \
    reporting-not-held 6.18.4 madvise [concat $::thp_balloon {sys/module/page_reporting/parameters/min_free_ms "59999\n"}] \
        {off: auto: this VM reports free memory to its host*} \
] {
    set root [thp_fake_machine $name $release $mode $more]
    start_server [list tags {"afork external:skip"} overrides [list fork-probe-root $root]] {
        test "fork-thp auto says off, and why: $name" {
            assert_equal [lindex [r config get fork-thp] 1] auto
            assert_equal [thp_info fork_thp_auto] 1
            assert_equal [thp_info fork_thp] 0
            assert_match $reason [thp_info fork_thp_heap]
            assert_equal [thp_info fork_thp_collapse_status] off
            set lines [thp_log_lines "*fork-thp auto: off: [string range $reason 11 end]*"]
            assert_equal [llength $lines] 1
            assert_equal [thp_log_lines {*restarting once*}] {}
            # Off is final: page tables past the threshold change nothing.
            thp_fake_page_tables $root 20000
            thp_wait_auto_checks
            assert_match $reason [thp_info fork_thp_heap]
            assert_equal [thp_info fork_thp] 0
            assert_equal [thp_info jemalloc_opt_thp] default
        }
    }
}

# A balloon whose reports are held back (min_free_ms of a minute or more,
# as the bench's --hold-reporting sets it; 59999 ms above is not held) hands
# back nothing the heap frees and soon takes again: auto decides as on a
# host without reporting.
set root [thp_fake_machine reporting-held 6.18.4 madvise \
    [concat $::thp_balloon {sys/module/page_reporting/parameters/min_free_ms "60000\n"}]]
start_server [list tags {"afork external:skip"} overrides [list fork-probe-root $root]] {
    test {fork-thp auto on a VM whose free page reporting is held back: waiting} {
        assert_equal [thp_info vm_free_page_reporting] 0
        assert_equal [thp_info vm_free_page_reporting_held] 1
        assert_match {waiting: auto: page tables * of 6 MiB*} [thp_info fork_thp_heap]
    }
}

# On an Async-fork kernel the child copies the page tables: auto waits,
# however large they grow, and says why.
set root [thp_fake_machine async-kernel 6.18.4 madvise {proc/sys/kernel/async_fork_enabled "2\n"}]
start_server [list tags {"afork external:skip"} overrides [list fork-probe-root $root]] {
    test {fork-thp auto on an Async-fork kernel: waits, page tables or not} {
        assert_equal [thp_info fork_async_enabled] 1
        thp_fake_page_tables $root 20000
        thp_wait_auto_checks
        assert_equal [thp_info fork_thp_heap] \
            {waiting: auto: the Async-fork kernel copies the page tables in the child, so forks stay cheap}
        assert_equal [thp_info fork_thp] 0
    }
}

# The kernel's release, "6.18" -> {6 18}.
proc thp_kernel_release {} {
    set fd [open /proc/sys/kernel/osrelease]
    set rel [read $fd]
    close $fd
    regexp {^(\d+)\.(\d+)} $rel -> major minor
    return [list $major $minor]
}

set why [thp_unavailable]
lassign [thp_kernel_release] kmajor kminor
if {$why eq "" && ($kmajor < 6 || ($kmajor == 6 && $kminor < 7))} {
    set why "kernel $kmajor.$kminor has no PAGEMAP_SCAN (6.7+): fork-thp auto stays off"
}
if {$why ne ""} {
    afork_skip "fork-thp with transparent huge pages: $why"
} else {
start_server {tags {"afork external:skip"}} {
    if {[thp_info vm_free_page_reporting]} {
        test {fork-thp auto on this machine, a VM that reports free memory to its host: off, and why} {
            assert_equal [thp_info fork_thp] 0
            assert_match "off: auto: this VM reports free memory to its host*" [thp_info fork_thp_heap]
            assert_equal [llength [thp_log_lines {*fork-thp auto: off: this VM reports free memory*}]] 1
        }
    } else {
        test {fork-thp auto on this machine: waiting, and for what} {
            assert_equal [thp_info fork_thp] 0
            assert_match "waiting: auto: page tables * of 6 MiB, latest fork * of 200 ms" \
                [thp_info fork_thp_heap]
            assert_equal [llength [thp_log_lines "*fork-thp auto: waiting: *6 MiB*200 ms (kernel $kmajor.$kminor with MADV_COLLAPSE and PAGEMAP_SCAN, THP *)*"]] 1
        }
    }
}

# fork-thp auto waits, then switches on with a dataset in place, on a fake
# machine whose page tables the test sets; the memory is real.
set root [thp_fake_machine switch 6.18.4 madvise]
start_server [list tags {"afork external:skip"} overrides [list fork-probe-root $root enable-debug-command yes save {}]] {
    set pid [srv 0 pid]
    test {fork-thp auto waits: no thread, no huge pages, and the figures it waits for} {
        assert_equal [thp_info fork_thp_heap] \
            {waiting: auto: page tables 0.1 of 6 MiB, latest fork 0 of 200 ms}
        assert_equal [llength [thp_log_lines "*fork-thp auto: waiting: the keyspace stays in 4 KiB pages until the page tables reach 6 MiB or a fork blocks the server for 200 ms ($::thp_auto_machine)*"]] 1
        r debug populate 200000 key 1000
        assert_lessthan [thp_anon_huge_kb $pid] 4096
        assert_equal [thp_info fork_thp_collapse_status] off
        assert_equal [thp_info jemalloc_opt_thp] default
    }

    test {fork-thp auto: a fork under the threshold, page tables just under it: waiting} {
        r bgsave
        waitForBgsave r
        set ms [expr {[s latest_fork_usec] / 1000}]
        assert_lessthan $ms 200
        thp_fake_page_tables $root 6143
        thp_wait_auto_checks
        assert_equal [thp_info fork_thp_heap] \
            "waiting: auto: page tables 6.0 of 6 MiB, latest fork $ms of 200 ms"
        assert_equal [thp_info fork_thp] 0
        assert_lessthan [thp_anon_huge_kb $pid] 4096
    }

    test {fork-thp auto switches on at the threshold once no child lives, the dataset in place} {
        set digest [r debug digest]
        r config set rdb-key-save-delay 100
        save_start
        thp_fake_page_tables $root 6144
        thp_wait_auto_checks
        # Not while a child shares the pages: the switch changes the map.
        assert_match {waiting: auto: *} [thp_info fork_thp_heap]
        r config set rdb-key-save-delay 0
        save_stop $pid
        wait_for_condition 50 100 {[thp_info fork_thp] == 1} else {
            fail "fork-thp auto did not switch on: [thp_info fork_thp_heap]"
        }
        assert_equal [thp_info fork_thp_heap] \
            {on: auto: the page tables reached 6.0 MiB (6 MiB switches on)}
        assert_equal [thp_info jemalloc_opt_thp] always
        assert_morethan_equal [thp_info fork_thp_slack_arena] 0
        # The first pass collapses what is resident, outside any save.
        wait_for_condition 100 100 {
            [thp_info fork_thp_collapse_status] eq "ready" && [thp_info fork_thp_collapse_passes] >= 1
        } else {
            fail "no collapse pass after the switch: [thp_info fork_thp_collapse_status]"
        }
        assert_morethan [thp_info fork_thp_collapse_ranges] 50
        assert_morethan [thp_anon_huge_kb $pid] [expr {100 * 1024}]
        assert_equal [llength [thp_log_lines {*fork-thp auto: on: the page tables reached 6.0 MiB*collapsed at 256 MB/s*}]] 1
        # In place: the same process, the same data.
        assert_equal [s process_id] $pid
        assert_equal [r debug digest] $digest
    }

    test {fork-thp auto, on: new memory is in huge pages, saves are quiet, it stays on} {
        set before [thp_anon_huge_kb $pid]
        r debug populate 100000 more 1000
        assert_morethan [thp_anon_huge_kb $pid] [expr {$before + 50 * 1024}]
        r config set rdb-key-save-delay 100
        save_start
        assert_equal [thp_process_enabled $pid] 0
        assert_equal [thp_info fork_thp_quiet_saves] 1
        r config set rdb-key-save-delay 0
        save_stop $pid
        thp_fake_page_tables $root 100
        thp_wait_auto_checks
        assert_match {on: auto: *} [thp_info fork_thp_heap]
        assert_equal [thp_process_enabled $pid] 1
    }
}

# The other trigger: a fork that blocked the server for
# fork-debug-thp-auto-fork-ms (1 ms here, so that a small dataset's fork
# reaches it); the page tables stay far under theirs.
set root [thp_fake_machine slow-fork 6.18.4 madvise]
start_server [list tags {"afork external:skip"} overrides [list fork-probe-root $root enable-debug-command yes save {} fork-debug-thp-auto-fork-ms 1]] {
    test {fork-thp auto switches on after a fork that blocked the server long enough} {
        assert_equal [thp_info fork_thp_auto_fork_usec] 1000
        r debug populate 300000 key 1000
        thp_wait_auto_checks
        assert_match {waiting: auto: page tables 0.1 of 6 MiB, latest fork 0 of 1 ms} [thp_info fork_thp_heap]
        r bgsave
        waitForBgsave r
        set ms [expr {[s latest_fork_usec] / 1000}]
        if {$ms < 1} { fail "the fork took under 1 ms: the test cannot show the trigger" }
        wait_for_condition 50 100 {[thp_info fork_thp] == 1} else {
            fail "fork-thp auto did not switch on: [thp_info fork_thp_heap]"
        }
        assert_equal [thp_info fork_thp_heap] \
            "on: auto: a fork blocked the server for $ms ms (1 ms switches on)"
    }
}

# The warm-up follows the VM's free page reporting unless
# fork-debug-thp-collapse-warm sets it: fork-thp yes on a fake machine with
# and without a reporting virtio balloon.
foreach {name more warm} [list no-balloon {} 0 reporting-balloon $::thp_balloon 1] {
    set root [thp_fake_machine $name 6.18.4 madvise $more]
    start_server [list tags {"afork external:skip"} overrides [list fork-thp yes fork-probe-root $root]] {
        test "fork-thp yes on a fake machine, $name: warm-up $warm" {
            assert_equal [thp_info fork_thp_heap] on
            assert_equal [thp_info vm_free_page_reporting] $warm
            assert_equal [thp_info fork_thp_collapse_warm] $warm
            # Forced on where auto would stay off: the log says what it costs.
            assert_equal [llength [thp_log_lines {*fork-thp yes on a VM that reports free memory*}]] $warm
            r config set fork-debug-thp-collapse-warm [expr {$warm ? "no" : "yes"}]
            assert_equal [thp_info fork_thp_collapse_warm] [expr {!$warm}]
            r config set fork-debug-thp-collapse-warm auto
            assert_equal [thp_info fork_thp_collapse_warm] $warm
        }
    }
}

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
        # 30 s, as save_and_wait_pass: each collapse may wait for a busy VM host.
        wait_for_condition 300 100 {
            [s rdb_bgsave_in_progress] == 0 &&
            [thp_info fork_thp_collapse_status] eq "ready" &&
            [thp_info fork_thp_collapse_passes] >= 1
        } else {
            fail "no collapse pass after the child exited: [r info fork]"
        }
        set now [thp_anon_huge_kb $pid]
        assert_morethan $now [expr {$::thp_populated * 9 / 10}]
        assert_morethan [thp_info fork_thp_collapse_ranges] 50
        assert_morethan [thp_info latest_fork_thp_collapse_huge_after_bytes] \
                        [thp_info latest_fork_thp_collapse_huge_before_bytes]
        assert_morethan [thp_info fork_thp_collapse_usec] 0
        assert_equal [thp_info fork_thp_collapse_failures] 0
        # The longest collapse is one of them.
        assert_morethan [thp_info latest_fork_thp_collapse_max_usec] 0
        assert_lessthan [thp_info latest_fork_thp_collapse_max_usec] \
                        [expr {[thp_info fork_thp_collapse_usec] + 1}]
        # Each was warmed first where the VM reports free pages to its host
        # (fork-debug-thp-collapse-warm not set: chosen from the machine).
        set ::thp_reporting [thp_info vm_free_page_reporting]
        assert_equal [thp_info fork_thp_collapse_warm] $::thp_reporting
        if {$::thp_reporting} {
            assert_morethan [thp_info fork_thp_collapse_warm_usec] 0
        } else {
            assert_equal [thp_info fork_thp_collapse_warm_usec] 0
        }
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

    test {fork-debug-thp-collapse-warm no: the pass collapses without warming} {
        r config set fork-debug-thp-collapse-warm no
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
            fail "no collapse pass: [r info fork]"
        }
        assert_equal [thp_info fork_thp_collapse_warm_usec] $warm
        r config set fork-debug-thp-collapse-warm yes
        assert_equal [thp_info fork_thp_collapse_warm] 1
        r config set fork-debug-thp-collapse-warm auto
        assert_equal [thp_info fork_thp_collapse_warm] $::thp_reporting
    }

    test {The collapse pass cut the keyspace into VMAs of 64 MiB} {
        set size [expr {64 << 20}]
        # ~300 MB of data: at least one mapping of 128 MB was there to cut.
        assert_morethan [thp_info fork_thp_vma_cuts] 1
        assert_equal [thp_uncut_mappings $pid $size $size] {}
        # Smaller pieces at the next pass; 0 cuts nothing more and undoes.
        r config set rdb-key-save-delay 0
        r config set fork-debug-thp-vma-size 16mb
        set cuts [thp_info fork_thp_vma_cuts]
        save_and_wait_pass
        assert_morethan [thp_info fork_thp_vma_cuts] $cuts
        assert_equal [thp_uncut_mappings $pid [expr {16 << 20}] [expr {16 << 20}]] {}
        r config set fork-debug-thp-vma-size 0
        set cuts [thp_info fork_thp_vma_cuts]
        r debug populate 200000 more 400
        save_and_wait_pass
        assert_equal [thp_info fork_thp_vma_cuts] $cuts
        # ... and the pieces merged again.
        assert_morethan [llength [thp_uncut_mappings $pid $size $size]] 0
        r config set fork-debug-thp-vma-size 64mb
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

    test {The quiet save: no huge page is made while the child lives} {
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

    # A fork can start between the collapse thread's gate and its
    # MADV_COLLAPSE; the quiet save's PR_SET_THP_DISABLE then makes the
    # kernel refuse with EINVAL, which must end the pass, not be taken for
    # a kernel without MADV_COLLAPSE (that would stop the re-collapse for
    # good). Saves started as soon as each pass has begun.
    test {A save that starts during a collapse pass leaves the re-collapse on} {
        r config set rdb-key-save-delay 0
        r config set fork-thp-collapse-rate 100000
        for {set i 0} {$i < 8} {incr i} {
            set passes [thp_info fork_thp_collapse_passes]
            r config set rdb-key-save-delay 100
            r bgsave
            after 100
            r eval {for i = 0, 599999, 8 do redis.call('setrange', 'key:' .. i, 1, 'w') end} 0
            stop_bg_child $pid
            wait_for_condition 100 10 {
                [s rdb_bgsave_in_progress] == 0 &&
                [thp_info fork_thp_collapse_status] ne "ready"
            } else {
                fail "no collapse pass began after the child"
            }
            r config set rdb-key-save-delay 0
            r bgsave
            waitForBgsave r
            assert_not_equal [thp_info fork_thp_collapse_status] khugepaged-only
        }
        wait_for_condition 300 100 {[thp_info fork_thp_collapse_status] eq "ready"} else {
            fail "the re-collapse did not come back: [r info fork]"
        }
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

# ---------------------------------------------------------------------------
# A keyspace table that is being rehashed into stays in 4 KiB pages until
# the rehash is done (afork_thp_tables.c), and the re-collapse pass goes on
# past it. In this file, not its own, so that it never runs beside the
# tests above (their collapse passes are timed). activerehashing is off so
# that a rehash lasts until commands finish it. The MADV_NOHUGEPAGE advice
# is read from /proc/<pid>/smaps, from outside the server.

proc tables_info {field} {
    getInfoProperty [r info fork] $field
}

# The mappings of pid that carry MADV_NOHUGEPAGE (VmFlags "nh"), as
# {start end} pairs.
proc nohuge_ranges {pid} {
    set fd [open /proc/$pid/smaps]
    set lines [split [read $fd] "\n"]
    close $fd
    set ranges {}
    foreach line $lines {
        if {[regexp {^([0-9a-f]+)-([0-9a-f]+) } $line -> a b]} {
            set range [list [expr {"0x$a"}] [expr {"0x$b"}]]
        } elseif {[regexp {^VmFlags:.* nh( |$)} $line]} {
            lappend ranges $range
        }
    }
    return $ranges
}

# The bytes of ranges that overlap none of others (thread stacks and the
# like are nh too, and the collapse thread's cut splits mappings).
proc ranges_outside {ranges others} {
    set bytes 0
    foreach r $ranges {
        lassign $r a b
        set alone 1
        foreach o $others {
            lassign $o oa ob
            if {$a < $ob && $oa < $b} { set alone 0 }
        }
        if {$alone} { incr bytes [expr {$b - $a}] }
    }
    return $bytes
}

proc rehashing {} {
    string match "*rehashing target*" [r debug htstats [expr {$::singledb ? 0 : 9}]]
}

# 500000 keys fill a table of 512Ki buckets (4 MiB); 100000 more make it
# grow to 1Mi buckets (8 MiB), and the rehash is under way when the
# command returns (each insert moves a bucket or two of the 512Ki).
proc start_rehash {prefix} {
    r debug populate 500000 $prefix:a 10
    r debug populate 100000 $prefix:b 10
    if {![rehashing]} { fail "the keyspace is not being rehashed: [r debug htstats [expr {$::singledb ? 0 : 9}]]" }
}

start_server {tags {"afork external:skip"} overrides {fork-thp yes enable-debug-command yes activerehashing no}} {
    set pid [srv 0 pid]
    if {[tables_info fork_thp_heap] ne "on"} {
        afork_skip "fork-thp tables: the keyspace is not in huge pages here ([tables_info fork_thp_heap])"
    } else {
        test {fork-thp: a keyspace table being rehashed into is held in 4 KiB pages} {
            assert_equal [tables_info fork_thp_tables_held] 0
            set before [nohuge_ranges $pid]
            start_rehash k
            set total [tables_info fork_thp_tables_held_total]
            assert_equal [tables_info fork_thp_tables_held] 1
            # The populate of an empty keyspace sized its table at once (a
            # hold and a release), the growth is the second.
            assert_equal $total 2
            assert_equal [tables_info fork_thp_tables_not_held] 0
            # The 8 MiB table's whole huge pages: 6 MiB at least.
            set ::tables_held [nohuge_ranges $pid]
            assert_morethan_equal [ranges_outside $::tables_held $before] [expr {6 << 20}]
            set ::tables_before $before
        }

        test {fork-thp: a collapse pass goes on past a held table} {
            set failures [tables_info fork_thp_collapse_failures]
            save_and_wait_pass
            assert_equal [tables_info fork_thp_collapse_status] ready
            assert_equal [tables_info fork_thp_collapse_failures] $failures
            assert_equal [tables_info fork_thp_tables_held] 1
            # A second pass: a refusal must not have switched collapses off.
            set ranges [tables_info fork_thp_collapse_ranges]
            r eval {for i = 0, 499999, 16 do redis.call('setrange', 'k:a:' .. i, 0, 'y') end} 0
            save_and_wait_pass
            assert_equal [tables_info fork_thp_collapse_status] ready
        }

        test {fork-thp: the rehash done, the table is released and collapsed after the next save} {
            r debug populate 300000 k:c 10
            assert_equal [rehashing] 0
            assert_equal [tables_info fork_thp_tables_held] 0
            # What was held is no longer nh.
            assert_equal [ranges_outside [nohuge_ranges $pid] $::tables_before] 0
            set ranges [tables_info fork_thp_collapse_ranges]
            save_and_wait_pass
            # The 8 MiB table, written all over in 4 KiB pages: 4 ranges at least.
            assert_morethan_equal [tables_info fork_thp_collapse_ranges] [expr {$ranges + 4}]
        }

        test {fork-thp: FLUSHALL during a rehash releases the table, ASYNC in a bio thread too} {
            foreach how {SYNC ASYNC} {
                r flushall
                set before [nohuge_ranges $pid]
                start_rehash f$how
                assert_equal [tables_info fork_thp_tables_held] 1
                set held [nohuge_ranges $pid]
                assert_morethan_equal [ranges_outside $held $before] [expr {6 << 20}]
                r flushall $how
                wait_for_condition 100 50 {[tables_info fork_thp_tables_held] == 0} else {
                    fail "FLUSHALL $how left a table held"
                }
                # None of the held table is nh any more: the ranges held
                # then overlap none of the nh ranges now.
                set now [nohuge_ranges $pid]
                foreach r [lrange $held 0 end] {
                    if {[ranges_outside [list $r] $before] == 0} continue
                    assert_equal [ranges_outside [list $r] $now] [expr {[lindex $r 1] - [lindex $r 0]}]
                }
            }
        }

        # A collection with millions of members has its own dict, whose
        # table grows like the keyspace's. 500000 members, then 100000 more:
        # the table grows from 512Ki to 1Mi buckets (8 MiB), and each command
        # on the key moves a bucket or two, so the rehash is under way.
        test {fork-thp: the table of a big hash, set or sorted set being rehashed into is held too} {
            r flushall
            set add {
                for i = tonumber(ARGV[1]), tonumber(ARGV[2]) do
                    if ARGV[3] == 'hash' then redis.call('hset', KEYS[1], 'f' .. i, 'v')
                    elseif ARGV[3] == 'set' then redis.call('sadd', KEYS[1], 'm' .. i)
                    else redis.call('zadd', KEYS[1], i, 'm' .. i) end
                end
            }
            foreach type {hash set zset} {
                set before [nohuge_ranges $pid]
                set total [tables_info fork_thp_tables_held_total]
                r eval $add 1 big 1 500000 $type
                r eval $add 1 big 500001 600000 $type
                assert_equal $type [r type big]
                assert_match "*rehashing target*" [r debug htstats-key big]
                assert_equal [tables_info fork_thp_tables_held] 1
                assert_morethan [tables_info fork_thp_tables_held_total] $total
                assert_morethan_equal [ranges_outside [nohuge_ranges $pid] $before] [expr {6 << 20}]
                r del big
                assert_equal [tables_info fork_thp_tables_held] 0
                assert_equal [ranges_outside [nohuge_ranges $pid] $before] 0
            }
        }
    }
}

start_server {tags {"afork external:skip"} overrides {fork-thp no enable-debug-command yes activerehashing no}} {
    test {fork-thp no: tables are never held} {
        start_rehash k
        assert_equal [tables_info fork_thp_tables_held] 0
        assert_equal [tables_info fork_thp_tables_held_total] 0
    }
}

# ---------------------------------------------------------------------------
# The slack arena (afork_thp_slack.c): a large allocation whose size class
# leaves a page or more unused is kept in 4 KiB pages, so that its unused
# tail is never resident. Values are made by EVAL (string.rep), whose sds
# is exactly the length asked: 131072 bytes take a 160 KiB extent (32 KiB
# unused), 163830 bytes fill one (sds header and terminator included).

# The mappings of pid that carry MADV_NOHUGEPAGE (thread stacks, held
# tables and the slack arena), summed: {rss_kb anon_huge_kb}.
proc nohuge_usage {pid} {
    set fd [open /proc/$pid/smaps]
    set lines [split [read $fd] "\n"]
    close $fd
    set rss 0
    set huge 0
    foreach line $lines {
        if {[regexp {^Rss:\s+(\d+) kB} $line -> kb]} {
            set range_rss $kb
        } elseif {[regexp {^AnonHugePages:\s+(\d+) kB} $line -> kb]} {
            set range_huge $kb
        } elseif {[regexp {^VmFlags:.* nh( |$)} $line]} {
            incr rss $range_rss
            incr huge $range_huge
        }
    }
    return [list $rss $huge]
}

proc set_values {prefix count bytes} {
    r eval {for i = 1, tonumber(ARGV[2]) do
                redis.call('set', ARGV[1] .. i, string.rep('v', tonumber(ARGV[3])))
            end} 0 $prefix $count $bytes
}

start_server {tags {"afork external:skip"} overrides {fork-thp yes enable-debug-command yes}} {
    set pid [srv 0 pid]
    if {[thp_info fork_thp_heap] ne "on"} {
        afork_skip "fork-thp slack arena: the keyspace is not in huge pages here ([thp_info fork_thp_heap])"
    } else {
        test {fork-thp: large values with a page of slack are in 4 KiB pages, their tails not resident} {
            assert_morethan_equal [thp_info fork_thp_slack_arena] 0
            lassign [nohuge_usage $pid] rss0 huge0
            set active [thp_info fork_thp_slack_active_bytes]
            set_values slack: 200 131072
            # 200 extents of 160 KiB in the arena.
            assert_morethan_equal [expr {[thp_info fork_thp_slack_active_bytes] - $active}] \
                                  [expr {200 * 160 * 1024}]
            lassign [nohuge_usage $pid] rss huge
            assert_equal $huge 0
            # Resident in nh mappings: the values (128 KiB and the header's
            # page each), not the 32 KiB tails (which would make 200 x 160 KiB).
            assert_morethan_equal [expr {$rss - $rss0}] [expr {200 * 128}]
            assert_lessthan [expr {$rss - $rss0}] [expr {200 * 144}]
            assert_equal [thp_info fork_thp_slack_untracked] 0
        }

        test {fork-thp: large values that fill their size class stay in huge pages} {
            set active [thp_info fork_thp_slack_active_bytes]
            set huge [thp_anon_huge_kb $pid]
            set_values full: 200 163830
            assert_lessthan [expr {[thp_info fork_thp_slack_active_bytes] - $active}] [expr {160 * 1024}]
            # 200 x 160 KiB = 32000 KiB written into huge pages.
            assert_morethan [expr {[thp_anon_huge_kb $pid] - $huge}] 16000
        }

        test {fork-thp: values move between the arenas as they grow, and read back intact} {
            # APPEND reallocates (sds grows greedily): each value resized in
            # place or moved to the arena its new size class calls for.
            r append slack:1 [string repeat a [expr {163830 - 131072}]]
            r append full:1 [string repeat b 10]
            assert_equal [r strlen slack:1] 163830
            assert_equal [r strlen full:1] 163840
            assert_equal [r getrange slack:1 131070 131073] vvaa
            assert_equal [r getrange full:1 163828 163831] vvbb
            set digest [r debug digest]
            r debug reload
            assert_equal [r debug digest] $digest
            assert_equal [r dbsize] 400
        }

        test {fork-thp: a collapse pass goes on past the slack arena} {
            # 36854 bytes take a 40 KiB extent with one page unused: 9 of
            # every 10 pages resident, enough for the pass to try them.
            set active [thp_info fork_thp_slack_active_bytes]
            set_values tight: 800 36854
            assert_morethan_equal [expr {[thp_info fork_thp_slack_active_bytes] - $active}] \
                                  [expr {800 * 40 * 1024}]
            set failures [thp_info fork_thp_collapse_failures]
            set ranges [thp_info fork_thp_collapse_ranges]
            r config set rdb-key-save-delay 2000
            r bgsave
            after 50
            # Split the huge pages of the values that fill their class.
            r eval {for i = 1, 200 do redis.call('setrange', 'full:' .. i, 0, 'y') end} 0
            waitForBgsave r
            r config set rdb-key-save-delay 0
            save_and_wait_pass
            save_and_wait_pass
            assert_equal [thp_info fork_thp_collapse_status] ready
            assert_equal [thp_info fork_thp_collapse_failures] $failures
            # Nothing collapsed in the arena, nothing split by the saves left
            # uncollapsed elsewhere.
            assert_equal [lindex [nohuge_usage $pid] 1] 0
            assert_morethan [thp_info fork_thp_collapse_ranges] $ranges
        }
    }
}

start_server {tags {"afork external:skip"} overrides {fork-thp no}} {
    test {fork-thp no: no slack arena, large values where upstream puts them} {
        set_values slack: 50 131072
        assert_equal [thp_info fork_thp_slack_arena] -1
        assert_equal [thp_info fork_thp_slack_active_bytes] 0
        assert_equal [thp_info fork_thp_slack_ranges] 0
    }
}

# ---------------------------------------------------------------------------
# Huge pages jemalloc purged in part (deletes, then MEMORY PURGE): their
# unmapped 4 KiB pages leave RSS, but the kernel keeps each 2 MiB page
# whole, and in use, until it splits it. When jemalloc has given memory
# back, the collapse thread makes a split-only pass (afork_thp_collapse.c, splitPurgedRange).
# Linux 6.11+ counts such pages, machine-wide.

proc thp_partly_mapped_mb {} {
    set path /sys/kernel/mm/transparent_hugepage/hugepages-2048kB/stats/nr_anon_partially_mapped
    if {![file readable $path]} { return -1 }
    set fd [open $path]
    set n [string trim [read $fd]]
    close $fd
    return [expr {$n * 2}]
}

start_server {tags {"afork external:skip"} overrides {fork-thp yes enable-debug-command yes}} {
    set pid [srv 0 pid]
    if {[thp_info fork_thp_heap] ne "on" || [thp_info fork_thp_collapse_status] ne "ready"} {
        afork_skip "fork-thp split of purged huge pages: no keyspace in huge pages or no re-collapse here ([thp_info fork_thp_heap], collapse [thp_info fork_thp_collapse_status])"
    } else {
        test {fork-thp: after deletes, the huge pages jemalloc purged in part are split and freed} {
            r debug populate 400000 key 400
            assert_morethan [thp_anon_huge_kb $pid] [expr {100 * 1024}]
            set digest_keys [r eval {local n = 0
                for i = 0, 399999, 600 do n = n + #redis.call('get', 'key:' .. i) end
                return n} 0]
            # No pass while the deletes are made: the pages stay as purged.
            r config set fork-thp-collapse-rate 0
            set passes [thp_info fork_thp_collapse_passes]
            set splits [thp_info fork_thp_collapse_split_ranges]
            set collapsed [thp_info fork_thp_collapse_ranges]
            # Two runs of 200 keys of every three: whole 4 KiB pages freed
            # inside each huge page, a third of the keys left in each.
            r eval {for i = 0, 399999 do
                        if math.floor(i / 200) % 3 ~= 0 then redis.call('del', 'key:' .. i) end
                    end} 0
            r memory purge
            set before [thp_partly_mapped_mb]
            if {$before >= 0} { assert_morethan $before 64 }
            after 500
            assert_equal [thp_info fork_thp_collapse_passes] $passes
            # jemalloc purged far more than 32 MB and 1/64 of RSS:
            # a pass within a second.
            r config set fork-thp-collapse-rate 256
            wait_for_condition 100 100 {
                [thp_info fork_thp_collapse_passes] > $passes &&
                [thp_info fork_thp_collapse_status] eq "ready"
            } else {
                fail "no pass after the purge: [r info fork]"
            }
            assert_morethan [thp_info fork_thp_collapse_split_ranges] [expr {$splits + 20}]
            assert_equal [thp_info fork_thp_collapse_failures] 0
            # A pass for memory given back fills no hole: nothing collapsed.
            assert_equal [thp_info fork_thp_collapse_ranges] $collapsed
            if {$before >= 0} {
                # Machine-wide: what other processes hold stays in the figure.
                assert_lessthan [thp_partly_mapped_mb] [expr {$before / 2}]
            }
            # Runs 0, 3, 6 ... of 200 keys are left: 667 of the 2000.
            assert_equal [r dbsize] [expr {(400000 / 200 + 2) / 3 * 200}]
            assert_equal [r eval {local n = 0
                for i = 0, 399999, 600 do n = n + #redis.call('get', 'key:' .. i) end
                return n} 0] $digest_keys
        }

        test {fork-thp-collapse-rate 0: no pass when memory is given back} {
            r config set fork-thp-collapse-rate 0
            set passes [thp_info fork_thp_collapse_passes]
            r flushall
            r memory purge
            after 1000
            assert_equal [thp_info fork_thp_collapse_passes] $passes
        }
    }
}

# ---------------------------------------------------------------------------
# A primary's full sync: once the child is gone, huge pages stay off (and
# the re-collapse waits) until the replica has loaded the RDB and received
# the writes buffered for it meanwhile (afork_thp.c, replicaCatchingUp).
# The replica loads slowly (key-load-delay), the primary takes writes
# bigger than its replication backlog in the meantime.

start_server {tags {"afork external:skip repl"} overrides {fork-thp yes fork-thp-collapse-rate 256 repl-diskless-sync no repl-backlog-size 1mb}} {
    set primary [srv 0 client]
    set ppid [srv 0 pid]
    if {[thp_info fork_thp_heap] ne "on" || [thp_info fork_thp_collapse_status] ne "ready"} {
        afork_skip "fork-thp replica hold: no keyspace in huge pages or no re-collapse here ([thp_info fork_thp_heap], collapse [thp_info fork_thp_collapse_status])"
    } else {
        start_server {tags {"afork"} overrides {key-load-delay 500 loading-process-events-interval-bytes 1024}} {
            test {fork-thp: huge pages stay off until a fully synced replica has caught up} {
                $primary eval {for i = 1, 20000 do redis.call('set', 'k' .. i, string.rep('v', 100)) end} 0
                set holds [getInfoProperty [$primary info fork] fork_thp_replica_holds]
                set passes [getInfoProperty [$primary info fork] fork_thp_collapse_passes]
                r replicaof [srv -1 host] [srv -1 port]
                # The child is gone, the replica still loads (20000 keys at 0.5 ms).
                wait_for_condition 100 100 {
                    [getInfoProperty [$primary info persistence] rdb_bgsave_in_progress] == 0 &&
                    [s loading] == 1
                } else {
                    fail "the replica was not loading after the primary's child was gone"
                }
                # Writes meanwhile: 40 MB buffered for the replica, 40 times the backlog.
                $primary eval {for i = 1, 4000 do redis.call('set', 'w' .. i, string.rep('x', 10000)) end} 0
                assert_equal [s loading] 1
                set info [$primary info fork]
                assert_equal [getInfoProperty $info current_fork_thp_replica_hold] 1
                assert_equal [getInfoProperty $info current_fork_thp_paused] 1
                assert_equal [getInfoProperty $info fork_thp_replica_holds] [expr {$holds + 1}]
                assert_equal [getInfoProperty $info fork_thp_collapse_passes] $passes
                assert_equal [thp_process_enabled $ppid] 0
                # Loaded and caught up: huge pages again, then the re-collapse pass.
                wait_for_condition 300 100 {
                    [s loading] == 0 &&
                    [status $primary master_repl_offset] == [status r master_repl_offset]
                } else {
                    fail "the replica did not load and catch up"
                }
                wait_for_condition 300 100 {
                    [getInfoProperty [$primary info fork] current_fork_thp_replica_hold] == 0 &&
                    [getInfoProperty [$primary info fork] current_fork_thp_paused] == 0 &&
                    [getInfoProperty [$primary info fork] fork_thp_collapse_passes] > $passes
                } else {
                    fail "huge pages still off after the replica caught up: [$primary info fork]"
                }
                assert_equal [thp_process_enabled $ppid] 1
                assert_equal [r dbsize] 24000
            }
        }
    }
}
