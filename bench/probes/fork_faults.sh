#!/usr/bin/env bash
# fork_faults.sh -- which pages does a Redis server's main thread write first
# after fork()? Every such write is a copy-on-write fault on a page the fork
# write-protected, and on an Async-fork kernel often the copy of a whole page
# table the child has not reached yet, all inside the parent's fork cost.
#
#   bench/probes/fork_faults.sh OUTDIR REDIS-SERVER [VAR=VALUE ...]
#
# Starts REDIS-SERVER (environment VAR=VALUE, e.g. JE_MALLOC_CONF=narenas:1)
# on port $PORT (7100), fills 10,000 keys of 1 KB, records the main thread's
# page faults with perf (tracepoints exceptions:page_fault_user/_kernel,
# syscalls:sys_exit_clone, syscalls:sys_enter_epoll_wait) over 10 BGSAVEs,
# and prints per fork the faults from clone()'s return in the parent to its
# next epoll_wait, the distinct pages and the distinct 2 MiB page tables,
# and the same for the part inside fork() (to the return of libc's fork(),
# a uretprobe: jemalloc's and libc's atfork handlers), with the mapping of
# each 2 MiB table written inside fork() and whether it lies wholly in one
# anonymous mapping (what an Async-fork kernel leaves to the child, so that
# a write there copies the whole table inside fork()).
# OUTDIR gets the perf data, the script output, the server's maps and its
# arenas (MEMORY MALLOC-STATS). Needs root, perf and redis-cli ($REDIS_CLI,
# default: next to REDIS-SERVER). Counts, not times: it may run beside
# other work.
set -euo pipefail
out=$1 bin=$2
shift 2
port=${PORT:-7100}
cli=${REDIS_CLI:-$(dirname "$bin")/redis-cli}
rc() { "$cli" -p "$port" "$@"; }
mkdir -p "$out"
env "$@" "$bin" --port "$port" --save '' --appendonly no --dir "$out" --daemonize yes \
    --logfile "$out/redis.log" --enable-debug-command yes
for _ in $(seq 50); do rc ping >/dev/null 2>&1 && break; sleep 0.1; done
trap 'rc shutdown nosave >/dev/null 2>&1 || true' EXIT
rc debug populate 10000 key 1024 >/dev/null
pid=$(rc info server | tr -d '\r' | sed -n 's/^process_id://p')
rc memory malloc-stats | grep -E '^arenas\[' | tr '\n' ' ' >"$out/arenas.txt"
echo "$(wc -l <"/proc/$pid/maps") VMAs, $(ls "/proc/$pid/task" | wc -l) threads" >>"$out/arenas.txt"
cp "/proc/$pid/maps" "$out/maps.txt"
libc=$(awk '$6 ~ /\/libc\.so/ { print $6; exit }' "/proc/$pid/maps")
perf probe -q -d 'probe_libc:fork__return' 2>/dev/null || true
perf probe -q -x "$libc" 'fork%return' >/dev/null
trap 'rc shutdown nosave >/dev/null 2>&1 || true; perf probe -q -d "probe_libc:fork__return" 2>/dev/null || true' EXIT
perf record -q -o "$out/perf.data" -t "$pid" -e syscalls:sys_exit_clone -e probe_libc:fork__return \
    -e syscalls:sys_enter_epoll_wait -e exceptions:page_fault_user \
    -e exceptions:page_fault_kernel 2>/dev/null &
perf_pid=$!
sleep 1
for _ in $(seq 10); do
    rc bgsave >/dev/null
    while [ "$(rc info persistence | tr -d '\r' | sed -n 's/^rdb_bgsave_in_progress://p')" != 0 ]; do
        sleep 0.05
    done
    sleep 0.2
done
kill -INT "$perf_pid"
wait "$perf_pid" || true
perf script -i "$out/perf.data" -F tid,time,event,trace 2>/dev/null >"$out/script.txt"
python3 - "$out/script.txt" "$out/maps.txt" <<'PY' | tee -a "$out/arenas.txt"
import re, sys
forks, cur = [], None
for line in open(sys.argv[1]):
    if "sys_exit_clone" in line:
        m = re.search(r"0x([0-9a-f]+)", line.split("sys_exit_clone", 1)[1])
        if m and int(m.group(1), 16) != 0:     # the parent's return
            cur = {"faults": 0, "pages": set(), "tables": set(), "inside": None}
            forks.append(cur)
    elif "fork__return" in line:
        if cur is not None and cur["inside"] is None:
            cur["inside"] = {"faults": cur["faults"], "pages": set(cur["pages"]),
                             "tables": set(cur["tables"])}
    elif "epoll_wait" in line:
        cur = None
    elif cur is not None and "page_fault" in line:
        a = int(re.search(r"address=0x([0-9a-f]+)", line).group(1), 16)
        cur["faults"] += 1
        cur["pages"].add(a >> 12)
        cur["tables"].add(a >> 21)
maps = []
for line in open(sys.argv[2]):
    f = line.split()
    lo, hi = (int(x, 16) for x in f[0].split("-"))
    maps.append((lo, hi, f[5] if len(f) > 5 else "[anon]"))
def where(page):
    a = page << 12
    return next((n for lo, hi, n in maps if lo <= a < hi), "?")
print("faults per fork", [f["faults"] for f in forks])
print("distinct pages", [len(f["pages"]) for f in forks])
print("distinct 2 MiB tables", [len(f["tables"]) for f in forks])
inside = [f["inside"] or {"faults": 0, "pages": set(), "tables": set()} for f in forks]
print("inside fork(): faults per fork", [i["faults"] for i in inside])
print("inside fork(): distinct 2 MiB tables", [len(i["tables"]) for i in inside])
def table_kind(t):
    lo, hi = t << 21, (t + 1) << 21
    for mlo, mhi, n in maps:
        if mlo <= lo and hi <= mhi:
            return n + (" (whole table)" if n in ("[anon]", "[heap]") else "")
    return where(lo >> 12) + " (part of the table)"
if forks:
    print("inside fork(), last fork's tables:",
          "; ".join(f"{t << 21:#x} {table_kind(t)}: {sum(1 for p in inside[-1]['pages'] if p >> 9 == t)} pages"
                    for t in sorted(inside[-1]["tables"])))
if forks:
    by = {}
    for p in forks[-1]["pages"]:
        by[where(p)] = by.get(where(p), 0) + 1
    print("last fork's pages by mapping:", ", ".join(f"{k} {v}" for k, v in sorted(by.items(), key=lambda x: -x[1])))
PY
