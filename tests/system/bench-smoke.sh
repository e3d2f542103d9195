#!/usr/bin/env bash
# bench-smoke.sh -- a tiny run of make bench's harness (a few MB, seconds),
# so the benchmark cannot rot: every output exists and parses, bad sizes are
# refused up front. No timing is asserted: figures this small mean nothing.
. "$(dirname "$0")/lib.sh"
need_strace_and_stock "bench smoke run"

out=$work/bench
if ! log=$("$top/bench/run.sh" --sizes "0.004 0.008" --load-seconds 1 \
        --out "$out" --scratch "$work" 2>&1); then
    err "bench smoke run" "bench/run.sh failed: $(tail -5 <<<"$log")"
    exit 1
fi
ok "bench smoke run: two sizes, stock and redis-afork"

if grep -qE '^\[bench +[0-9.]+s\] +0.008 GB +redis-afork +load with BGSAVE' <<<"$log"; then
    ok "bench prints a progress line per server, size and phase"
else
    err "bench progress lines" "missing in: $log"
fi

# results.csv: every metric of the table, for both servers and sizes, numeric;
# results.md: a table per size; machine.json: the machine; PNGs: real images.
if check=$(python3 - "$out" <<'PY' 2>&1
import csv, json, os, struct, sys
out = sys.argv[1]
rows = list(csv.DictReader(open(os.path.join(out, "results.csv"))))
need = ["used_memory_mb", "idle_fork_ms_median", "idle_save_s", "idle_cow_mb",
        "nosave_rps", "nosave_p999_ms", "save_fork_ms", "save_rps", "save_p50_ms",
        "save_p99_ms", "save_p999_ms", "save_max_ms", "save_gaps_over_1ms",
        "save_cow_mb", "save_save_s", "peak_rss_mb"]
have = {(r["size_gb"], r["variant"], r["metric"]): float(r["value"]) for r in rows}
for size in ("0.004", "0.008"):
    for v in ("stock", "redis-afork"):
        for m in need:
            assert (size, v, m) in have, "results.csv lacks %s %s %s" % (size, v, m)
        assert have[(size, v, "save_fork_ms")] > 0, "no fork time for %s" % v
        assert have[(size, v, "nosave_rps")] > 0, "no throughput for %s" % v
    assert ("0.008", "redis-afork", "idle_child_ready_ms_median") in have, \
        "redis-afork's child-ready time missing"
    assert ("0.008", "stock", "idle_child_ready_ms_median") not in have, \
        "stock cannot have a child-ready time"
md = open(os.path.join(out, "results.md")).read()
for size in ("0.004", "0.008"):
    assert "## %s GB" % size in md, "results.md has no table for %s GB" % size
assert "| metric | stock | redis-afork | redis-afork / stock |" in md, "table header"
m = json.load(open(os.path.join(out, "machine.json")))
for k in ("kernel", "cpus", "mem_total_gib", "thp_enabled", "stock", "redis_afork"):
    assert m.get(k) not in (None, "", "n/a"), "machine.json lacks " + k
for png in ("latency_timeline_0.004gb.png", "latency_timeline_0.008gb.png",
            "fork_time_vs_size.png"):
    data = open(os.path.join(out, png), "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", png + " is not a PNG"
    w, h = struct.unpack(">II", data[16:24])
    assert w >= 600 and h >= 400 and len(data) > 10000, png + " is too small"
print("ok")
PY
); then
    ok "bench outputs exist and parse (results.csv, results.md, machine.json, plots)"
else
    err "bench outputs" "$check"
fi

expect_fail "bench refuses a size that does not fit, saying what it needs" \
    'size 100000 GB does not fit: it needs [0-9.]+ GiB .* [0-9.]+ GiB is available' \
    "$top/bench/run.sh" --sizes 100000 --out "$work/refused"
if [ -e "$work/refused" ]; then
    err "refused bench writes nothing" "$work/refused was created"
else
    ok "refused bench writes nothing"
fi
expect_fail "bench rejects sizes that are not numbers" 'error: --sizes: .1 lots. is not' \
    "$top/bench/run.sh" --sizes "1 lots" --out "$work/bad"
exit $status
