#!/bin/sh
# collapse_parts.sh -- runs collapse_stall.c once per MODE, in the order
# given, with read_stall.c beside and a 30 s control (no run) first; the
# marks file gives each run's window for collapse_parts.py. A MODE written
# held-MODE runs with the VM's free page reporting held back: this guest
# kernel's page_reporting module reports a freed block only after
# min_free_ms, or at once when more than max_waiting_mib wait; both are
# raised for the run (100 s, 20000 MiB), after 110 s for what waits to be
# reported, and put back after it. collapse_stall prints the module's
# reporting passes when the child exits and at the end; reporting.txt
# samples the passes and the KiB reported every second.
#
#   bench/probes/collapse_parts.sh OUT_DIR MODE...
#   bench/probes/collapse_parts.sh /tmp/parts redo held-redo collapse held-collapse
#   PYTHONPATH=bench python3 -m forkbench.collapse_parts /tmp/parts
set -e
out=$1; shift
here=$(cd "$(dirname "$0")" && pwd)
reporting=/sys/module/page_reporting/parameters
mkdir -p "$out"
cc -O2 -pthread -o "$out/collapse_stall" "$here/collapse_stall.c"
cc -O2 -o "$out/read_stall" "$here/read_stall.c"
"$out/read_stall" 3600 512 3 > "$out/read_stall.txt" 2> "$out/read_stall.err" &
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
sleep 20                                   # the probe's memory written
echo "$(date +%s.%N) start control" >> "$out/marks.txt"
sleep 30
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
    "$out/collapse_stall" 4096 64 20 30 256 "$run" >> "$out/collapse_stall.txt"
    echo "$(date +%s.%N) end $mode" >> "$out/marks.txt"
    [ "$run" = "$mode" ] || hold "$booted_ms" "$booted_mib"
    sleep 10
done
