#!/bin/bash
# usage: stopwin.sh LABEL OUTFILE -- server args. Populated 1 GB, the SET
# load overwriting it; the main thread's commands per CPU-second in 2.5 s
# windows: before the BGSAVE, while the child runs, while the child is
# stopped (SIGSTOP), and while it runs again; perf cpu-clock of the main
# thread in the running and the stopped windows.
label=$1; outf=$2; shift 3
R=/work/main/build/redis-8.0.6/src
d=$(mktemp -d /tmp/trace/run.XXXX); keys=2626716
trap 'kill -CONT $child 2>/dev/null; kill $bench 2>/dev/null; $R/redis-cli -p 7100 shutdown nosave >/dev/null 2>&1; rm -rf $d' EXIT
$R/redis-server --port 7100 --dir $d --save "" --logfile $d/p.log "$@" &
sleep 1.5; cli="$R/redis-cli -p 7100"
sha=$($cli SCRIPT LOAD "local v = string.rep('x', tonumber(ARGV[3])) for i = tonumber(ARGV[1]), tonumber(ARGV[2]) do redis.call('SET', string.format('key:%012d', i), v) end return 1")
for s in $(seq 0 200000 $((keys-1))); do e=$((s+199999)); [ $e -ge $keys ] && e=$((keys-1)); $cli EVALSHA $sha 0 $s $e 256 > /dev/null; done
[ "$($cli DBSIZE)" = "$keys" ] || { echo "$label populate failed" >> $outf; exit 1; }
$cli BGSAVE >/dev/null; sleep 0.5; while $cli INFO persistence | grep -q 'rdb_bgsave_in_progress:1'; do sleep 0.2; done; sleep 4
pid=$($cli INFO server | awk -F: '/process_id/{print $2}' | tr -d '\r')
$R/redis-benchmark -p 7100 -t set -r $keys -d 256 -c 50 -P 4 -n 100000000 -q >/dev/null 2>&1 & bench=$!
sleep 3
win() { local s0 s1 q0 q1; s0=$(awk '{print $1}' /proc/$pid/task/$pid/schedstat); q0=$($cli INFO stats | awk -F: '/^total_commands_processed/{print $2}' | tr -d '\r'); if [ -n "$2" ]; then perf record -q -e cpu-clock -F 2000 -g -t $pid -o /tmp/trace/perf/$label.$1.data -- sleep 2.5 2>/dev/null; else sleep 2.5; fi; s1=$(awk '{print $1}' /proc/$pid/task/$pid/schedstat); q1=$($cli INFO stats | awk -F: '/^total_commands_processed/{print $2}' | tr -d '\r'); echo "$label $1 ran $(( (s1-s0)/1000000 )) ms commands $((q1-q0)) per-cpu-s $(( (q1-q0)*1000000000/(s1-s0) ))"; }
{ win before; $cli BGSAVE >/dev/null; sleep 0.3; child=$(pgrep -P $pid | head -1); win running perf; kill -STOP $child; win stopped perf; kill -CONT $child; win resumed; } >> $outf
while $cli INFO persistence | grep -q 'rdb_bgsave_in_progress:1'; do sleep 0.1; done
