#!/bin/sh
# collapse_parts.sh -- runs collapse_stall.c once per MODE, in the order
# given, with read_stall.c beside and a 30 s control (no run) first; the
# marks file gives each run's window for collapse_parts.py (beside it). A MODE written
# held-MODE runs with the VM's free page reporting held back: this guest
# kernel's page_reporting module reports a freed block only after
# min_free_ms, or at once when more than max_waiting_mib wait; both are
# raised for the run (100 s, 20000 MiB), after 110 s for what waits to be
# reported, and put back after it. collapse_stall prints the module's
# reporting passes when the child exits and at the end; reporting.txt
# samples the passes and the KiB reported every second.
#
#   make bench-probes
#   bench/probes/collapse_parts.sh OUT_DIR MODE...
#   bench/probes/collapse_parts.sh /tmp/parts redo held-redo collapse held-collapse
#   python3 bench/probes/collapse_parts.py /tmp/parts
#
# Environment (defaults: the runs of the investigation): PROBES, where make
# bench-probes put the programs (build/bench-probes); PARTS_RUN, collapse_stall's
# SIZE SPLIT LIFE RUN RATE ("4096 64 20 30 256"); PARTS_SETTLE, PARTS_CONTROL,
# PARTS_REST: seconds before the control, of the control, after each run
# (20, 30, 10).
set -e
out=$1; shift
top=$(cd "$(dirname "$0")/../.." && pwd)
probes=${PROBES:-$top/build/bench-probes}
reporting=/sys/module/page_reporting/parameters
for p in collapse_stall read_stall; do
    [ -x "$probes/$p" ] || { echo "no $probes/$p: run make bench-probes" >&2; exit 1; }
done
mkdir -p "$out"
"$probes/read_stall" 3600 512 3 > "$out/read_stall.txt" &
probe=$!
(while :; do
    echo "$(date +%s.%N) $(cat $reporting/passes $reporting/reported_kib 2>/dev/null | tr '\n' ' ')"
    sleep 1
done) > "$out/reporting.txt" &
sampler=$!
booted_ms=$(cat $reporting/min_free_ms 2>/dev/null || echo 0)
booted_mib=$(cat $reporting/max_waiting_mib 2>/dev/null || echo 1024)
hold() {                                   # hold MIN_FREE_MS MAX_WAITING_MIB
    echo "$1" > $reporting/min_free_ms
    echo "$2" > $reporting/max_waiting_mib
}
put_back() {
    kill $probe $sampler 2>/dev/null || true
    [ -w $reporting/min_free_ms ] || return 0
    hold "$booted_ms" "$booted_mib"
}
trap put_back EXIT
sleep "${PARTS_SETTLE:-20}"                  # the probe's memory written
echo "$(date +%s.%N) start control" >> "$out/marks.txt"
sleep "${PARTS_CONTROL:-30}"
echo "$(date +%s.%N) end control" >> "$out/marks.txt"
for mode in "$@"; do
    run=${mode#held-}
    if [ "$run" != "$mode" ]; then
        [ -w $reporting/min_free_ms ] || { echo "no page_reporting parameters here" >&2; exit 1; }
        hold 100000 20000
        sleep 110
    fi
    echo "$(date +%s.%N) start $mode" >> "$out/marks.txt"
    echo "mode $mode" >> "$out/collapse_stall.txt"
    "$probes/collapse_stall" ${PARTS_RUN:-4096 64 20 30 256} "$run" >> "$out/collapse_stall.txt"
    echo "$(date +%s.%N) end $mode" >> "$out/marks.txt"
    [ "$run" = "$mode" ] || hold "$booted_ms" "$booted_mib"
    sleep "${PARTS_REST:-10}"
done
