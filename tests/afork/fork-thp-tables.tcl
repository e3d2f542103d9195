# fork-thp-tables.tcl -- with fork-thp, a keyspace table that is being
# rehashed into stays in 4 KiB pages until the rehash is done
# (afork_thp_tables.c), and the re-collapse pass goes on past it.
#
# activerehashing is off so that a rehash lasts until commands finish it.
# The MADV_NOHUGEPAGE advice is read from /proc/<pid>/smaps, from outside
# the server, so the tests see what the kernel sees.

source tests/unit/afork/support/afork.tcl

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
    }
}

start_server {tags {"afork external:skip"} overrides {fork-thp no enable-debug-command yes activerehashing no}} {
    test {fork-thp no: tables are never held} {
        start_rehash k
        assert_equal [tables_info fork_thp_tables_held] 0
        assert_equal [tables_info fork_thp_tables_held_total] 0
    }
}
