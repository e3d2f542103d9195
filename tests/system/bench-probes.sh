#!/usr/bin/env bash
# bench-probes.sh -- the investigation probes (bench/probes/, what each is
# for: docs/investigations/), built by make bench-probes and each run tiny
# (a few MB, a second or so), so none rots: every one must run and print
# what its investigation reads. No figure is asserted: runs this small
# measure nothing. About 40 s.
. "$(dirname "$0")/lib.sh"
probes=$work/probes
if out=$(make -s -C "$top" bench-probes 2>&1) &&
        [ -x "$top/build/bench-probes/collapse_stall" ]; then
    ok "make bench-probes builds the C probes"
else
    err "make bench-probes" "$out"
    exit 1
fi
cp -r "$top/build/bench-probes" "$probes"
num='[0-9]+(\.[0-9]+)?'

# collapse_stall: the write timings after the child, the collapses.
if out=$("$probes/collapse_stall" 64 8 0.5 0.5 256 warm 2>&1) &&
        grep -qE "^writes [0-9]+ over_1ms [0-9]+ over_5ms [0-9]+ over_10ms [0-9]+ worst_ms $num$" <<<"$out" &&
        grep -qE "^size_mb 64 split_mb 8 collapse 1 populate 0 hogs 0 collapses [1-9][0-9]* failures [0-9]+ collapse_max_ms $num populate_ms $num$" <<<"$out"; then
    ok "collapse_stall: writes timed after the child while a thread collapses 8 MiB VMAs"
else
    err "collapse_stall" "$out"
fi

# read_stall: every stretch of 4096 reads over SLOW_MS (0: all of them).
if out=$("$probes/read_stall" 0.3 8 0 2>&1) &&
        [ "$(grep -cE "^$num $num $num $num $num$" <<<"$out")" -gt 10 ]; then
    ok "read_stall: a line per stretch: time, wall, waiting, not waiting, on a CPU"
else
    err "read_stall" "$(head -5 <<<"$out")"
fi

# report_copy: the three kinds of copy and the warm one, with their spreads.
if out=$("$probes/report_copy" 0.5 20 4 1000 2>&1) &&
        [ "$(grep -cE "^(kept|fresh|scratch|warm) +copies [1-9][0-9]* +median $num ms +p99 $num +max $num +over 1000 ms: [0-9]+$" <<<"$out")" = 4 ]; then
    ok "report_copy: 2 MiB copies into kept, fresh and warmed pages, with a churning child"
else
    err "report_copy" "$out"
fi

# collapse_parts.sh with two modes, then its reader collapse_parts.py: a row
# per window.
parts=$work/parts
if out=$(PROBES=$probes PARTS_RUN="32 8 0.5 0.5 256" PARTS_SETTLE=0.5 PARTS_CONTROL=0.5 \
        PARTS_REST=0.2 "$top/bench/probes/collapse_parts.sh" "$parts" collapse none 2>&1) &&
        md=$(python3 "$top/bench/probes/collapse_parts.py" "$parts" 2>&1) &&
        grep -qE '^\| control \|' <<<"$md" &&
        grep -qE '^\| collapse \(run 1\), after the child \|' <<<"$md" &&
        grep -qE '^\| none \(run 2\), fill and child \|' <<<"$md"; then
    ok "collapse_parts.sh: collapse_stall's modes in turn with read_stall beside, by window"
else
    err "collapse_parts.sh" "$out ${md:-}"
fi

# idle_cow.sh: both servers get every key, each save prints its copy-on-write,
# fork-thp's with the parent's fault count.
if out=$(TREE=$tree STOCK=$stock IDLE_COW_PORT=$(free_port) \
        "$top/bench/probes/idle_cow.sh" 20000 1 0.5 2>&1) &&
        grep -qE '^stock 1 cow_bytes=[0-9]+ parent_cow_faults=n/a$' <<<"$out" &&
        grep -qE '^fork-thp 1 cow_bytes=[0-9]+ parent_cow_faults=[0-9]+$' <<<"$out"; then
    ok "idle_cow.sh: an idle save of stock and of fork-thp, their copy-on-write"
else
    err "idle_cow.sh" "$out"
fi

# fork_faults.sh (root and perf): the main thread's first writes after each fork.
if [ "$(id -u)" != 0 ] || ! command -v perf >/dev/null; then
    echo "[skip]: fork_faults.sh needs root and perf"
elif out=$(PORT=$(free_port) "$top/bench/probes/fork_faults.sh" "$work/faults" \
        "$tree/src/redis-server" 2>&1) &&
        grep -qE '^faults per fork \[[0-9]+(, [0-9]+){9}\]$' <<<"$out" &&
        grep -qE '^inside fork\(\): distinct 2 MiB tables \[' <<<"$out" &&
        grep -qE "^last fork's pages by mapping: .*\[anon\] [0-9]+" <<<"$out"; then
    ok "fork_faults.sh: the parent's page faults after each of 10 forks, by mapping"
else
    err "fork_faults.sh" "$out"
fi

# trace_collapse.sh (root, tracefs) around a tiny fork-thp save of
# redis-afork: the collapse thread's MADV_COLLAPSE calls recorded, and its
# reader's (trace_collapse.py) summary.
if [ "$(id -u)" != 0 ]; then
    echo "[skip]: trace_collapse.sh needs root"
elif ! BUFFER_KB=20000 "$top/bench/probes/trace_collapse.sh" start >"$work/trace.log" 2>&1; then
    echo "[skip]: trace_collapse.sh: no tracefs here: $(tail -1 "$work/trace.log")"
else
    port=$(free_port)
    "$tree/src/redis-server" --port "$port" --save '' --appendonly no --dir "$work" \
        --daemonize no --fork-thp yes --enable-debug-command yes >"$work/thp.log" 2>&1 &
    thp=$!
    cli() { "$tree/src/redis-cli" -p "$port" "$@"; }
    for _ in $(seq 50); do cli ping >/dev/null 2>&1 && break; sleep 0.1; done
    cli debug populate 200000 key 256 >/dev/null
    cli bgsave >/dev/null
    for _ in $(seq 100); do
        [ "$(cli info fork | tr -d '\r' | sed -n 's/^fork_thp_collapse_passes://p')" = 1 ] && break
        sleep 0.1
    done
    cli shutdown nosave >/dev/null 2>&1 || kill "$thp"
    wait "$thp" 2>/dev/null
    "$top/bench/probes/trace_collapse.sh" stop "$work/trace.gz" >>"$work/trace.log" 2>&1
    collapses=$(zcat "$work/trace.gz" | grep -cE 'sys_madvise\(.*behavior: 0x(0000000000000)?19' || true)
    if summary=$(python3 "$top/bench/probes/trace_collapse.py" "$work/trace.gz" 2>&1) &&
            [ "$collapses" -gt 0 ] && grep -q '^main thread: mmap-lock waits over 3 ms: ' <<<"$summary"; then
        ok "trace_collapse.sh: $collapses MADV_COLLAPSE calls of a fork-thp save traced and read"
    else
        err "trace_collapse.sh" "collapses traced: $collapses; $(cat "$work/trace.log") $summary"
    fi
fi
exit $status
