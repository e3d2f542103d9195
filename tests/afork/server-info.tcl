# server-info.tcl -- a redis-afork build identifies itself.
#
# INFO server carries redis_afork_version (the value compiled from
# src/afork.h), while redis_version and --version keep naming the upstream
# release, so that clients and tools that key off them see no change;
# --version appends afork=<version> after upstream's fields.

# This file is symlinked into the upstream tree; find our repository from it.
set afork_top [file dirname [file dirname [file dirname [file normalize [info script]]]]]

proc afork_header_version {top} {
    set fd [open $top/src/afork.h]
    set text [read $fd]
    close $fd
    if {![regexp {#define AFORK_VERSION "([^"]+)"} $text -> v]} {
        error "AFORK_VERSION not found in $top/src/afork.h"
    }
    return $v
}

# The upstream release the build is made from: REDIS_VERSION in upstream/pin.
proc afork_pinned_version {top} {
    set fd [open $top/upstream/pin]
    set text [read $fd]
    close $fd
    if {![regexp -line {^REDIS_VERSION=(\S+)$} $text -> v]} {
        error "REDIS_VERSION not found in $top/upstream/pin"
    }
    return $v
}

start_server {tags {"afork"}} {
    test {INFO server reports redis_afork_version as built from afork.h} {
        set v [getInfoProperty [r info server] redis_afork_version]
        assert_equal [afork_header_version $afork_top] $v
    }

    test {redis_afork_version is in INFO, INFO all and INFO everything} {
        foreach args {{} {all} {everything} {server}} {
            assert_match "*redis_afork_version:*" [r info {*}$args]
        }
        assert_no_match "*redis_afork_version:*" [r info memory]
    }

    test {redis_version and --version still name the pinned upstream release} {
        set pinned [afork_pinned_version $afork_top]
        assert_equal $pinned [getInfoProperty [r info server] redis_version]
        set out [exec src/redis-server --version]
        assert_match "Redis server v=$pinned *" $out
    }

    # Upstream's fields stay first and in order, so a tool that splits the
    # line or matches v=X.Y.Z reads what it always read; afork= comes last.
    test {--version of redis-server and the check tools ends with afork=<version>} {
        set v [afork_header_version $afork_top]
        set fields {v=[0-9]+\.[0-9]+\.[0-9]+ sha=[0-9a-f]+:[01] malloc=\S+ bits=(32|64) build=[0-9a-f]+}
        foreach {prog name} {
            src/redis-server {Redis server}
            src/redis-check-rdb redis-check-rdb
            src/redis-check-aof redis-check-aof
        } {
            set out [exec $prog --version]
            if {![regexp "^$name $fields afork=(\\S+)\$" $out -> _ got]} {
                fail "$prog --version: $out"
            }
            assert_equal $v $got
        }
    }
}
