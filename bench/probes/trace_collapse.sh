#!/usr/bin/env bash
# trace_collapse.sh -- record, with tracefs, what the re-collapse and the
# main thread do during a save, and what the VM's free page reporting does
# meanwhile (docs/investigations/2026-11-26-fork-thp-collapse-warm-up.md).
#
#   bench/probes/trace_collapse.sh start            # a tracefs instance, recording
#   make bench-stalls STALLS_FLAGS="--size 4 --rounds 3 --no-perf --out DIR"
#   bench/probes/trace_collapse.sh stop DIR/trace.gz
#   python3 bench/probes/trace_collapse.py DIR/trace.gz
#
# Events: madvise() entry and exit, mmap lock and rwsem contention, the
# scheduling of the server's threads and save children, THP collapses,
# page reporting's work items and interrupts, IPIs, timers and softirqs.
# The ring buffer keeps the newest BUFFER_KB per CPU (500000): when
# "overrun" is not 0 the oldest events were dropped; the analysis says
# which passes it saw whole. Needs root and tracefs (mounted here if not).
set -euo pipefail
T=/sys/kernel/tracing
I=$T/instances/afork
EVENTS="syscalls:sys_enter_madvise syscalls:sys_exit_madvise
mmap_lock:mmap_lock_start_locking mmap_lock:mmap_lock_acquire_returned
mmap_lock:mmap_lock_released lock:contention_begin lock:contention_end
sched:sched_switch sched:sched_wakeup huge_memory:mm_collapse_huge_page
compaction:mm_compaction_begin compaction:mm_compaction_end
csd:csd_queue_cpu csd:csd_function_entry csd:csd_function_exit
workqueue:workqueue_queue_work workqueue:workqueue_execute_start
workqueue:workqueue_execute_end irq:softirq_entry irq:softirq_exit
irq:irq_handler_entry irq:irq_handler_exit irq_vectors:local_timer_entry
irq_vectors:local_timer_exit"
SERVER='comm == "redis-server" || comm ~ "afork*" || comm ~ "redis-rdb*"'
SWITCH='prev_comm == "redis-server" || next_comm == "redis-server" || prev_comm ~ "afork*" || next_comm ~ "afork*" || prev_comm ~ "redis-rdb*" || next_comm ~ "redis-rdb*"'

start() {
    [ -d $T/instances ] || mount -t tracefs nodev $T
    [ -d $I ] || mkdir $I
    echo 0 > $I/tracing_on
    echo mono > $I/trace_clock   # the clock perf -k mono and forkbench.stalls use
    echo "${BUFFER_KB:-500000}" > $I/buffer_size_kb
    echo > $I/set_event
    for e in $EVENTS; do
        echo "$e" >> $I/set_event || { echo "trace_collapse: no event $e" >&2; exit 1; }
    done
    echo "$SWITCH" > $I/events/sched/sched_switch/filter
    echo "$SERVER" > $I/events/sched/sched_wakeup/filter
    echo 1 > $I/tracing_on
    echo "trace_collapse: recording in $I"
}

stop() {
    [ -d $I ] || { echo "trace_collapse: not started" >&2; exit 1; }
    echo 0 > $I/tracing_on
    grep -h overrun $I/per_cpu/cpu*/stats | sed 's/^/trace_collapse: /'
    gzip -1 < $I/trace > "$1"
    echo > $I/set_event
    rmdir $I
    echo "trace_collapse: wrote $1"
}

case "${1:-}" in
    start) start ;;
    stop) [ $# -eq 2 ] || { echo "usage: $0 stop FILE.gz" >&2; exit 2; }; stop "$2" ;;
    *) echo "usage: $0 start | stop FILE.gz" >&2; exit 2 ;;
esac
