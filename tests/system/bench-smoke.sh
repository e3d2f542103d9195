#!/usr/bin/env bash
# bench-smoke.sh -- make bench's tools end to end on tiny sizes (a few MB):
# python3 -m forkbench with REPEAT=2 and stock Redis once more as a peer,
# the steady scenario, the other fork sites
# (aofrewrite, sync-disk, sync-diskless; 45-60 s of the total), the growth
# scenarios (fill, fill-fragmented, shapes; about 40 s),
# forkbench.stalls without perf, forkbench.tables on the run's own results;
# about 150 s. So
# the benchmark cannot rot: every figure has its spread and verdict, the
# order of the variants changed between repetitions, unusable peers are
# skipped and reported, the machine is recorded, the plots are real PNGs,
# sizes that do not fit are refused up front. No timing is asserted:
# figures this small mean nothing. The modules' own rules (statistics,
# run plan, tables' refusals, targets) are tests/bench's unit tests.
. "$(dirname "$0")/lib.sh"
need_strace_and_stock "bench smoke run"

out=$work/bench
peers=(--peer "stock-peer=$stock/src/redis-server"
       --peer "broken=/bin/false"
       --peer "noscript=$stock/src/redis-server:--rename-command EVALSHA \"\"")
if ! log=$("$top/bench/run.sh" --sizes "0.004 0.008" --repeat 2 --load-seconds 0.5 \
        --calibrate-seconds 0.3 --idle-check-seconds 1 "${peers[@]}" \
        --out "$out" --scratch "$work" 2>&1); then
    err "bench smoke run" "bench/run.sh failed: $(tail -5 <<<"$log")"
    exit 1
fi
ok "bench smoke run: two sizes, REPEAT=2, stock, redis-afork and stock again as a peer"
printf '%s\n' "$log" >"$work/bench.log"

if grep -qE '^\[bench +[0-9.]+s, ~[0-9hms ]+ left\] rep 2/2 +0.008 GB +stock-peer +load with BGSAVE' \
        <<<"$log"; then
    ok "bench prints a progress line per phase with the time left"
else
    err "bench progress lines" "missing in: $log"
fi

# Every check reads the outputs; none looks at a timing's value.
if check=$(python3 - "$out" "$work/bench.log" <<'PY' 2>&1
import csv, json, os, re, struct, sys
out = sys.argv[1]
log = open(sys.argv[2]).read()
sizes, reps = ("0.004", "0.008"), ("1", "2")
variants = ("stock", "redis-afork", "stock-peer")
need = ["used_memory_mb", "keys", "idle_fork_ms_median", "idle_save_s", "idle_cow_mb",
        "nosave_rps", "nosave_p99_ms", "nosave_p999_ms", "nosave_max_ms", "save_fork_ms",
        "save_rps", "save_p50_ms", "save_p99_ms", "save_p999_ms", "save_max_ms",
        "save_vs_control_max", "save_vs_control_p99", "save_gaps_over_1ms",
        "save_cow_mb", "save_save_s", "peak_rss_mb"]
problems = []
def check(cond, what):
    if not cond:
        problems.append(what)

# results.csv: every figure of every repetition, numeric; equal key counts.
raw = {}
for r in csv.DictReader(open(os.path.join(out, "results.csv"))):
    raw[(r["size_gb"], r["variant"], r["rep"], r["metric"])] = float(r["value"])
for s in sizes:
    for v in variants:
        for rep in reps:
            for m in need:
                check((s, v, rep, m) in raw, "results.csv lacks %s %s rep %s %s" % (s, v, rep, m))
            check(raw.get((s, v, rep, "save_fork_ms"), 0) > 0, "no fork time: %s %s %s" % (s, v, rep))
            check(((s, v, rep, "idle_child_ready_ms_median") in raw) == (v == "redis-afork"),
                  "child-ready time only for redis-afork (%s %s)" % (s, v))
    keys = {raw.get((s, v, rep, "keys")) for v in variants for rep in reps}
    check(len(keys) == 1, "key counts differ at %s GB: %s" % (s, keys))
check(not any(k[1] in ("broken", "noscript") for k in raw), "a skipped peer has figures")

# summary.csv: the spread of every figure, its ratio, interval and verdict.
summ = {(r["size_gb"], r["variant"], r["metric"]): r
        for r in csv.DictReader(open(os.path.join(out, "summary.csv")))}
verdicts = {"better", "worse", "within noise"}
for s in sizes:
    for v in variants:
        for m in need:
            r = summ.get((s, v, m))
            check(r is not None, "summary.csv lacks %s %s %s" % (s, v, m))
            if r is None:
                continue
            check(r["n"] == "2", "%s %s %s: n=%s, not 2" % (s, v, m, r["n"]))
            check(float(r["min"]) <= float(r["median"]) <= float(r["max"]),
                  "%s %s %s: median outside min-max" % (s, v, m))
            if v == "stock":
                continue
            want = {"-"} if m == "keys" else verdicts
            check(r["verdict"] in want, "%s %s %s: verdict %r" % (s, v, m, r["verdict"]))
            # two runs against two: the rank test cannot reach p < 0.05
            check(m == "keys" or r["verdict"] == "within noise",
                  "%s %s %s: %s from 2 runs" % (s, v, m, r["verdict"]))
            if r["ratio"] and r["ci_low"]:
                check(float(r["ci_low"]) <= float(r["ratio"]) <= float(r["ci_high"]),
                      "%s %s %s: ratio outside its interval" % (s, v, m))

# results.md: every row of every table has its spread, ratios and verdicts.
md = open(os.path.join(out, "results.md")).read()
head = "| metric | stock | redis-afork | stock-peer | redis-afork / stock | verdict | stock-peer / stock | verdict |"
spread = r"(n/a|[0-9.e+-]+ \[[0-9.e+-]+–[0-9.e+-]+\])"
for s in sizes:
    section = md.split("## %s GB" % s)[1].split("\n## ")[0]
    check(head in section, "results.md %s GB: table header" % s)
    rows = [l for l in section.splitlines() if l.startswith("| ") and "---" not in l][1:]
    check(len(rows) >= len(need), "results.md %s GB: %d rows" % (s, len(rows)))
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        ok_row = (len(cells) == 8 and all(re.fullmatch(spread, c) for c in cells[1:4])
                  and cells[5] in verdicts | {"-", "n/a"} and cells[7] in verdicts | {"-", "n/a"})
        check(ok_row, "results.md row without spread or verdict: " + row)
    check("| save max / control max (no-save run) |" in section, "no save/control max row")
    check("| save p99 / control p99 (no-save run) |" in section, "no save/control p99 row")

# The order changed between repetitions: runs.csv and the progress lines agree.
runs = list(csv.DictReader(open(os.path.join(out, "runs.csv"))))
check(len(runs) == 12 and all(r["status"] == "ok" for r in runs), "runs.csv: 12 ok runs")
logged = {}
for m in re.finditer(r"\] rep (\d)/2 +([0-9.]+) GB +(\S+) +populate$", log, re.M):
    logged.setdefault((m.group(1), m.group(2)), []).append(m.group(3))
for s in sizes:
    order = {rep: [r["variant"] for r in sorted(runs, key=lambda r: int(r["seq"]))
                   if r["rep"] == rep and r["size_gb"] == s] for rep in reps}
    check(sorted(order["1"]) == sorted(variants), "rep 1 at %s GB ran %s" % (s, order["1"]))
    check(order["1"] != order["2"], "same order in both repetitions at %s GB" % s)
    for rep in reps:
        check(logged.get((rep, s)) == order[rep], "progress lines and runs.csv disagree")

# Peers that cannot be benchmarked are skipped and say why.
mj = json.load(open(os.path.join(out, "machine.json")))
sk = mj.get("skipped_peers", {})
check("failed to start" in sk.get("broken", ""), "broken peer not reported: %s" % sk)
check("EVALSHA" in sk.get("noscript", ""), "peer without EVALSHA not reported: %s" % sk)
check("peer broken skipped" in md and "peer noscript skipped" in md, "skips not in results.md")

# The machine, before and during the run.
for k in ("kernel", "cpu", "cpus", "thp_enabled", "thp_defrag", "stock", "redis_afork"):
    check(mj.get(k) not in (None, "", "n/a"), "machine.json lacks " + k)
check(len(mj.get("before", {}).get("loadavg", [])) == 3, "no load average before the run")
check("steal_pct_mean" in mj.get("before", {}), "no steal time before the run")
check(mj.get("during", {}).get("samples", 0) > 0, "no samples during the run")
check(mj.get("pretouch", {}).get("gib", 0) > 0, "memory not pre-touched")
check(len(mj.get("source", {}).get("checkout", {}).get("commit", "")) == 40, "no commit")
for text in ("## Machine", "THP enabled", "before the run: load average",
             "during the run", "pre-touched", "variant order"):
    check(text in md.split("## 0.004 GB")[0], "results.md's top lacks %r" % text)

# Plots: real PNGs; timelines overlay every repetition of every server,
# the plots vs size have a series per server over both sizes.
for png in ("latency_timeline_0.004gb.png", "latency_timeline_0.008gb.png",
            "fork_time_vs_size.png", "client_latency_vs_size.png"):
    data = open(os.path.join(out, png), "rb").read()
    check(data[:8] == b"\x89PNG\r\n\x1a\n", png + " is not a PNG")
    w, h = struct.unpack(">II", data[16:24])
    check(w >= 600 and h >= 400 and len(data) > 10000, png + " is too small")
plots = {p["file"]: p["series"] for p in json.load(open(os.path.join(out, "plots.json")))}
for s in sizes:
    lines = {(x["variant"], x["rep"]) for x in plots["latency_timeline_%sgb.png" % s]
             if x["points"] > 0}
    check(lines == {(v, int(r)) for v in variants for r in reps},
          "timeline %s GB overlays %s" % (s, sorted(lines)))
    check(all(x["fork_aligned"] for x in plots["latency_timeline_%sgb.png" % s]),
          "timeline %s GB: not every line aligned on the fork (server log)" % s)
for name, metric in (("fork_time_vs_size.png", "idle_fork_ms_median"),
                     ("client_latency_vs_size.png", "save_max_ms")):
    got = {x["variant"] for x in plots[name] if x["metric"] == metric and x["points"] == 2}
    check(got == set(variants), "%s: error-bar series for %s" % (name, sorted(got)))

print("\n".join(problems) if problems else "ok")
sys.exit(1 if problems else 0)
PY
); then
    ok "every figure has its spread, ratio and verdict; the order changed; peers; machine; plots"
else
    err "bench outputs" "$check"
fi

# The steady scenario (fork-thp's): its control and rounds load the server
# past the save and the re-collapse; the round and after-child figures.
steady=$work/steady
if log=$("$top/bench/run.sh" --scenario steady --sizes 0.004 --repeat 1 --rounds 2 \
        --load-seconds 0.5 --calibrate-seconds 0.3 --idle-check-seconds 1 \
        --pass-margin-seconds 0.5 --out "$steady" --scratch "$work" 2>&1); then
    if check=$(python3 - "$steady" <<'PY' 2>&1
import csv, os, sys
raw = {(r["variant"], r["metric"]): float(r["value"])
       for r in csv.DictReader(open(os.path.join(sys.argv[1], "results.csv")))}
problems = []
for v in ("stock", "afork-thp-collapse"):
    for m in ("steady_load_s", "steady_pass_outlasted_load", "nosave_max_gap_ms",
              "round1_after_child_max_gap_ms", "round2_max_gap_ms",
              "steady_after_child_max_gap_ms_median", "steady_fork_ms_median"):
        if (v, m) not in raw:
            problems.append("%s lacks %s" % (v, m))
    # 2 x the idle save + the pass + 0.5 s, times 1.5: never under 0.75 s
    if raw.get((v, "steady_load_s"), 0) < 0.75:
        problems.append("%s: load of %s s does not cover the margin" % (v, raw.get((v, "steady_load_s"))))
md = open(os.path.join(sys.argv[1], "results.md")).read()
for text in ("after the child: longest PING gap (ms)", "load length of the control and each round"):
    if text not in md:
        problems.append("results.md lacks %r" % text)
print("\n".join(problems) or "ok")
sys.exit(1 if problems else 0)
PY
); then
        ok "bench steady scenario: the load covers the save and the re-collapse; round and after-child figures"
    else
        err "bench steady scenario" "$check"
    fi
else
    err "bench steady run" "bench/run.sh --scenario steady failed: $(tail -5 <<<"$log")"
fi

# The other fork sites (forkbench.sites): BGREWRITEAOF with appendonly
# yes, a replica's full sync disk-based and diskless, each under the write
# load beside its no-fork control, stock, redis-afork and fork-thp. The
# bench itself fails a run whose site did not happen as claimed (one fork,
# aof_rewrites or sync_full up by one, the primary's log naming the sync's
# target, the replica caught up with every key); here: every figure of
# every server, the plots, and the tables made from such a folder.
site_start=$SECONDS
for scenario in aofrewrite sync-disk sync-diskless; do
    reps=1
    [ $scenario = aofrewrite ] && reps=2
    if ! log=$("$top/bench/run.sh" --scenario $scenario --sizes 0.004 --repeat $reps \
            --load-seconds 0.5 --calibrate-seconds 0.3 --idle-check-seconds 1 \
            --out "$work/$scenario" --scratch "$work" 2>&1); then
        err "bench $scenario scenario" "bench/run.sh failed: $(tail -5 <<<"$log")"
        continue
    fi
    if check=$(python3 - "$work/$scenario" $scenario $reps <<'PY' 2>&1
import csv, json, os, struct, sys
out, scenario, reps = sys.argv[1], sys.argv[2], int(sys.argv[3])
p = "rewrite" if scenario == "aofrewrite" else "sync"
variants = ("stock", "redis-afork", "afork-thp-collapse")
need = ["keys", "nosave_rps", "nosave_max_ms", "nosave_max_gap_ms", "nosave_ping_p99_ms",
        p + "_load_s", p + "_fork_ms", p + "_child_s", p + "_s", p + "_cow_mb", p + "_rps",
        p + "_p99_ms", p + "_max_ms", p + "_vs_control_max", p + "_gaps_over_1ms",
        p + "_max_gap_ms", p + "_child_max_gap_ms", p + "_after_max_gap_ms",
        p + "_outlasted_load", "peak_rss_mb", p + "_anon_huge_mb"]
need += (["idle_rewrite_fork_ms", "idle_rewrite_s", "idle_rewrite_cow_mb"] if p == "rewrite"
         else ["idle_fork_ms_median", "idle_save_s", "sync_catchup_s", "sync_rdb_channel"])
raw = {}
for r in csv.DictReader(open(os.path.join(out, "results.csv"))):
    raw[(r["variant"], r["rep"], r["metric"])] = float(r["value"])
problems = []
for v in variants:
    for rep in range(1, reps + 1):
        # the load's throughput over the site's window, unless the site
        # began after a load this short was over
        window = [] if raw.get((v, str(rep), p + "_outlasted_load")) else [
            p + "_window_rps", p + "_vs_control_rps"]
        for m in need + window:
            if (v, str(rep), m) not in raw:
                problems.append("%s rep %d lacks %s" % (v, rep, m))
        if raw.get((v, str(rep), p + "_fork_ms"), 0) <= 0:
            problems.append("%s rep %d: no fork time" % (v, rep))
        # redis-afork's INFO fork counts fork-thp's splits, stock's has not
        if ((v, str(rep), p + "_split_ranges") in raw) == (v == "stock"):
            problems.append("%s: fork-thp's split ranges only on redis-afork" % v)
        # redis-afork's INFO fork has the child's exact life, stock's has not
        if ((v, str(rep), p + "_child_life_ms") in raw) == (v == "stock"):
            problems.append("%s: the child's life from INFO fork only on redis-afork" % v)
        want = {"sync-disk": 0, "sync-diskless": 1}.get(scenario)
        if want is not None and raw.get((v, str(rep), "sync_rdb_channel")) != want:
            problems.append("%s: sync_rdb_channel %s, expected %d (Redis 8's default)"
                            % (v, raw.get((v, str(rep), "sync_rdb_channel")), want))
md = open(os.path.join(out, "results.md")).read()
for text in ("# Fork cost (%s scenario)" % scenario, "the %s scenario's settings" % scenario,
             "under load: fork for the %s, parent blocked (ms)" % p,
             "during the %s: longest PING gap (ms)" % p):
    if text not in md:
        problems.append("results.md lacks %r" % text)
if p == "sync" and "the replica: a fresh server per run, of the same variant" not in md:
    problems.append("results.md does not say how the replica ran")
plots = {x["file"]: x["series"] for x in json.load(open(os.path.join(out, "plots.json")))}
name = "latency_timeline_0.004gb_%s.png" % p
lines = {x["variant"] for x in plots.get(name, []) if x["points"] > 0 and x["fork_aligned"]}
if lines != set(variants):
    problems.append("%s: fork-aligned lines for %s" % (name, sorted(lines)))
for png in (name, "fork_time_vs_size.png", "client_latency_vs_size.png"):
    data = open(os.path.join(out, png), "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n" or struct.unpack(">II", data[16:24])[0] < 600:
        problems.append(png + " is not a real PNG")
print("\n".join(problems) or "ok")
sys.exit(1 if problems else 0)
PY
); then
        ok "bench $scenario scenario: every server's fork, child, site and window figures; plots"
    else
        err "bench $scenario scenario" "$check"
    fi
done
# forkbench.tables on the aofrewrite folder: the site's rows, spreads and
# verdicts, and the headline naming the site.
site_repo=$work/site-repo
mkdir -p "$site_repo/res"
cp "$work/aofrewrite"/{results.csv,machine.json,runs.csv} "$site_repo/res/"
python3 - "$site_repo/res/machine.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
m["dirty"] = False                      # the smoke runs on any checkout
m["source"]["checkout"]["describe"] = "abc1234"
json.dump(m, open(sys.argv[1], "w"))
PY
printf '# t\n\n<!-- bench-headline: res -->\n<!-- /bench-headline -->\n\n<!-- bench-tables: res -->\n<!-- /bench-tables -->\n' \
    >"$site_repo/README.md"
git -C "$site_repo" init -q && git -C "$site_repo" add -A &&
    git -C "$site_repo" -c user.name=t -c user.email=t@localhost commit -qm results
if PYTHONPATH=$top/bench python3 -m forkbench.tables --update "$site_repo/README.md" &&
        grep -q '^\*\*aofrewrite scenario\*\*' "$site_repo/README.md" &&
        grep -qE '^\| under load: fork for the rewrite, parent blocked \(ms\) \| [0-9.]+ \[[0-9.]+–[0-9.]+\] \|.*within noise' \
            "$site_repo/README.md" &&
        grep -qE '^\| 0.004 GB, AOF rewrite \| redis-afork, fork-thp yes \| [0-9.]+ \[' "$site_repo/README.md"; then
    ok "forkbench.tables: an aofrewrite folder's tables and headline"
else
    err "forkbench.tables on the aofrewrite scenario" "$(cat "$site_repo/README.md")"
fi
echo "bench smoke: the fork sites took $((SECONDS - site_start)) s"

# The growth scenarios (forkbench.growth, forkbench.shapes): a fill from
# empty by redis-benchmark with the probe beside it (REPEAT=2, the four
# servers), the same on a host whose free memory is fragmented (the
# fragmenter capped at 32 MB), and every shape at a tiny size; no fork in
# any (the runs check it). Here: every figure of every server, what
# fork-thp chose, the plots, the tables of a fill folder, and the
# fragmenter's and the many shape's refusals.
growth_start=$SECONDS
fill_ok=no
if log=$("$top/bench/run.sh" --scenario fill --sizes 0.004 --repeat 2 \
        --idle-check-seconds 1 --out "$work/fill" --scratch "$work" 2>&1); then
    fill_ok=yes
else
    err "bench fill scenario" "bench/run.sh failed: $(tail -5 <<<"$log")"
fi
if log2=$("$top/bench/run.sh" --scenario fill-fragmented --sizes 0.004 --repeat 1 \
        --variants "stock afork-thp-collapse" --fragment-max-gb 0.032 \
        --idle-check-seconds 1 --out "$work/fill-frag" --scratch "$work" 2>&1); then
    fill_ok=$fill_ok-yes
else
    err "bench fill-fragmented scenario" "bench/run.sh failed: $(tail -5 <<<"$log2")"
fi
if log3=$("$top/bench/run.sh" --scenario shapes --sizes 0.004 --repeat 1 \
        --variants "stock afork-thp-auto" --small-mb 2 --many-servers 2 --many-mb 2 \
        --defrag-seconds 0.3 --large-values "131072 1048576" --save-lead-seconds 0.3 \
        --maxmemory-seconds 0.3 --idle-check-seconds 1 --out "$work/shapes" \
        --scratch "$work" 2>&1); then
    fill_ok=$fill_ok-yes
else
    err "bench shapes scenario" "bench/run.sh failed: $(tail -5 <<<"$log3")"
fi
if [ $fill_ok = yes-yes-yes ]; then
    if check=$(python3 - "$work" <<'PY' 2>&1
import csv, json, os, struct, sys
work = sys.argv[1]
problems = []
def rows(folder):
    raw = {}
    for r in csv.DictReader(open(os.path.join(work, folder, "results.csv"))):
        raw[(r["variant"], r["rep"], r["metric"])] = float(r["value"])
    return raw
def png(folder, name):
    data = open(os.path.join(work, folder, name), "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n" or struct.unpack(">II", data[16:24])[0] < 600:
        problems.append("%s/%s is not a real PNG" % (folder, name))
fill_need = ["keys", "empty_rss_mb", "fill_s", "fill_rps", "fill_p99_ms", "fill_max_ping_ms",
             "fill_ping_p999_ms", "fill_ping_p99_ms", "fill_ping_count", "fill_ping_per_s",
             "fill_dbsize", "used_memory_mb", "rss_mb", "peak_rss_mb", "anon_huge_mb",
             "fill_vm_thp_fault_alloc", "fill_vm_compact_stall"]
raw = rows("fill")
variants = ("stock", "redis-afork", "afork-thp-auto", "afork-thp-collapse")
for v in variants:
    for rep in ("1", "2"):
        for m in fill_need:
            if (v, rep, m) not in raw:
                problems.append("fill: %s rep %s lacks %s" % (v, rep, m))
        # INFO fork's fork_thp: redis-afork's servers only, forced on for yes
        on = raw.get((v, rep, "fork_thp_on"))
        if (on is None) != (v == "stock") or (v == "afork-thp-collapse" and on != 1):
            problems.append("fill: %s rep %s fork_thp_on %s" % (v, rep, on))
        if raw.get((v, rep, "fill_ping_count"), 0) < 1:
            problems.append("fill: %s rep %s: no PING round trip during the fill" % (v, rep))
keys = {raw.get((v, r, "keys")) for v in variants for r in ("1", "2")}
if len(keys) != 1:
    problems.append("fill: keyspaces differ between servers: %s" % keys)
chose = list(csv.DictReader(open(os.path.join(work, "fill", "fork_thp_heap.csv"))))
if {r["variant"] for r in chose} != set(variants[1:]) or len(chose) != 6:
    problems.append("fill: fork_thp_heap.csv has %s" % chose)
md = open(os.path.join(work, "fill", "results.md")).read()
for text in ("# A dataset growing (fill scenario)", "| fill: worst PING round trip (ms) |",
             "| fill: PING p99.9 (ms) |", "afork-thp-auto: INFO fork_thp_heap `",
             "-c 20 -P 16`"):
    if text not in md:
        problems.append("fill results.md lacks %r" % text)
plots = {x["file"]: x["series"] for x in json.load(open(os.path.join(work, "fill", "plots.json")))}
lines = {(x["variant"], x["rep"]) for x in plots.get("fill_timeline_0.004gb.png", [])
         if x["points"] > 0}
if lines != {(v, r) for v in variants for r in (1, 2)}:
    problems.append("fill timeline overlays %s" % sorted(lines))
png("fill", "fill_timeline_0.004gb.png")
png("fill", "fill_latency_vs_size.png")

raw = rows("fill-frag")
for v in ("stock", "afork-thp-collapse"):
    for m in fill_need + ["fragment_mapped_mb", "fragment_kept_mb", "fragment_share",
                          "free_2m_before_mb", "free_2m_after_mb", "free_2m_end_mb"]:
        if (v, "1", m) not in raw:
            problems.append("fill-fragmented: %s lacks %s" % (v, m))
    # capped at 32 MB: mapped 32 MB (less a page pair at most), half of it kept
    mapped = raw.get((v, "1", "fragment_mapped_mb"), 0)
    if not 32.7 < mapped <= 32.77 or raw.get((v, "1", "fragment_kept_mb")) != mapped / 2:
        problems.append("fill-fragmented: %s mapped %s MB, kept %s" % (
            v, mapped, raw.get((v, "1", "fragment_kept_mb"))))

raw = rows("shapes")
shape_need = ["small_empty_rss_mb", "small_rss_mb", "many_empty_rss_mb", "many_rss_mb",
              "keys", "churn_before_rss_mb", "churn_rss_mb", "churn_defrag_rss_mb",
              "churn_host_used_mb", "churn_defrag_host_used_mb", "churn_defrag_s",
              "churn_max_ping_ms", "churn_ping_p99_ms", "churn_defrag_max_ping_ms",
              "churn_defrag_hits", "maxmem_max_ping_ms", "maxmem_ping_p99_ms",
              "maxmem_fill_max_ping_ms", "maxmem_evicted_keys", "maxmem_peak_rss_mb",
              "maxmem_rss_vs_maxmemory", "maxmem_rps"]
for name in ("large128k", "large1m"):
    shape_need += [name + k for k in ("_fill_max_ping_ms", "_fill_ping_p99_ms", "_rss_mb",
                                      "_save_fork_ms", "_save_s", "_save_max_ping_ms",
                                      "_save_ping_p99_ms", "_peak_rss_mb")]
for v in ("stock", "afork-thp-auto"):
    for m in shape_need:
        if (v, "1", m) not in raw:
            problems.append("shapes: %s lacks %s" % (v, m))
    if (os.path.exists("/sys/kernel/mm/transparent_hugepage/hugepages-2048kB/stats/"
                       "nr_anon_partially_mapped")
            and (v, "1", "churn_defrag_partly_mapped_mb") not in raw):
        problems.append("shapes: %s lacks churn_defrag_partly_mapped_mb (the kernel has it)" % v)
    if raw.get((v, "1", "maxmem_evicted_keys"), 0) < 1:
        problems.append("shapes: %s evicted no key past maxmemory" % v)
for m in ("small_fork_thp_on", "many_fork_thp_on", "maxmem_fork_thp_on"):
    if ("afork-thp-auto", "1", m) not in raw or ("stock", "1", m) in raw:
        problems.append("shapes: %s only for redis-afork's servers" % m)
md = open(os.path.join(work, "shapes", "results.md")).read()
for text in ("# Where huge pages have hurt (shapes scenario)",
             "| small: RSS of an empty server (MB) |", "| 1 MB values: RSS after the fill (MB) |",
             "| maxmemory: peak RSS / maxmemory |", "| activedefrag: worst PING round trip (ms) |"):
    if text not in md:
        problems.append("shapes results.md lacks %r" % text)
png("shapes", "shapes_vs_stock_0.004gb.png")
print("\n".join(problems) or "ok")
sys.exit(1 if problems else 0)
PY
); then
        ok "bench fill, fill-fragmented and shapes: every server's figures, fork-thp's choice, plots"
    else
        err "bench growth scenarios" "$check"
    fi
    # forkbench.tables on the fill folder: its rows with spreads and verdicts.
    fill_repo=$work/fill-repo
    mkdir -p "$fill_repo/res"
    cp "$work/fill"/{results.csv,machine.json,runs.csv} "$fill_repo/res/"
    python3 - "$fill_repo/res/machine.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
m["dirty"] = False                      # the smoke runs on any checkout
m["source"]["checkout"]["describe"] = "abc1234"
json.dump(m, open(sys.argv[1], "w"))
PY
    printf '# t\n\n<!-- bench-tables: res -->\n<!-- /bench-tables -->\n' >"$fill_repo/README.md"
    git -C "$fill_repo" init -q && git -C "$fill_repo" add -A &&
        git -C "$fill_repo" -c user.name=t -c user.email=t@localhost commit -qm results
    if PYTHONPATH=$top/bench python3 -m forkbench.tables --update "$fill_repo/README.md" &&
            grep -q '^\*\*fill scenario\*\*' "$fill_repo/README.md" &&
            grep -qE '^\| fill: worst PING round trip \(ms\) \| [0-9.]+ \[[0-9.]+–[0-9.]+\] \|.*\| (within noise|one run) \|' \
                "$fill_repo/README.md"; then
        ok "forkbench.tables: a fill folder's tables"
    else
        err "forkbench.tables on the fill scenario" "$(cat "$fill_repo/README.md")"
    fi
fi
# Fragmenting all but a tenth of what the servers would need: refused up
# front, the share it could fragment said.
avail_gb=$(awk '/^MemAvailable:/ { print $2 / 1048576 }' /proc/meminfo)
frag_size=$(python3 -c "print('%g' % round(0.9 * ($avail_gb - 0.5) / 1.3, 2))")   # as the bench says it
expect_fail "bench refuses to fragment when the servers would be left too little" \
    "fill-fragmented at $frag_size GB: the servers need .* only [0-9]+% of the free memory" \
    "$top/bench/run.sh" --scenario fill-fragmented --sizes "$frag_size" --variants stock \
    --out "$work/refused"
expect_fail "bench refuses a many shape that does not fit" \
    'the many shape does not fit: 100000 servers of 100 MB need' \
    "$top/bench/run.sh" --scenario shapes --sizes 0.004 --many-servers 100000 --variants stock \
    --out "$work/refused"
echo "bench smoke: the growth scenarios took $((SECONDS - growth_start)) s"

# forkbench.stalls (make bench-stalls) without perf: its tables, and the
# host's steal time beside each of the worst round trips.
stalls=$work/stalls
if log=$(BENCH_MODULE=forkbench.stalls "$top/bench/run.sh" --size 0.004 --rounds 1 --top 3 \
        --load-seconds 0.5 --calibrate-seconds 0.3 --pass-margin-seconds 0.5 --no-perf \
        --out "$stalls" --scratch "$work" 2>&1); then
    if check=$(python3 - "$stalls" <<'PY' 2>&1
import gzip, os, sys
out = sys.argv[1]
problems = []
rows = gzip.open(os.path.join(out, "steal.csv.gz"), "rt").read().splitlines()
if not rows[0].startswith("unix_time,cpu0_steal_ms") or len(rows) < 50:
    problems.append("steal.csv.gz: %d rows, header %r" % (len(rows), rows[0]))
md = open(os.path.join(out, "stalls.md")).read()
worst = [l for l in md.split("## The worst PING round trips")[1].splitlines()
         if l.startswith("| ") and l[2].isdigit()]
if len(worst) < 4:
    problems.append("stalls.md: %d worst round trips" % len(worst))
for l in worst:
    if not __import__("re").search(r"\| \d+ / \d+ \|", l):
        problems.append("no host steal figure: " + l)
if "of which half or more host steal" not in md:
    problems.append("stalls.md: the classes table has no steal column")
print("\n".join(problems) or "ok")
sys.exit(1 if problems else 0)
PY
); then
        ok "forkbench.stalls --no-perf: tables, and the host's steal time beside each worst round trip"
    else
        err "forkbench.stalls" "$check"
    fi
else
    err "forkbench.stalls run" "forkbench.stalls --no-perf failed: $(tail -5 <<<"$log")"
fi

# forkbench.tables on this run's own results, committed in a scratch
# checkout: --update fills both kinds of block, --check accepts them.
repo=$work/repo
mkdir -p "$repo/res"
cp "$out"/{results.csv,machine.json,runs.csv} "$repo/res/"
python3 - "$repo/res/machine.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
m["dirty"] = False                      # the smoke runs on any checkout
m["source"]["checkout"]["describe"] = "abc1234"
json.dump(m, open(sys.argv[1], "w"))
PY
printf '# t\n\n<!-- bench-headline: res -->\n<!-- /bench-headline -->\n\n<!-- bench-tables: res -->\nstale\n<!-- /bench-tables -->\n' \
    >"$repo/README.md"
git -C "$repo" init -q && git -C "$repo" add -A &&
    git -C "$repo" -c user.name=t -c user.email=t@localhost commit -qm results
tables() { PYTHONPATH=$top/bench python3 -m forkbench.tables "$@"; }
if tables --update "$repo/README.md" &&
        grep -qE '^\| 0.008 GB \| stock \| redis-afork \| stock-peer \|' "$repo/README.md" &&
        grep -qE '^\| save max / control max .*\] \| .*within noise' "$repo/README.md" &&
        grep -qE '^\| 0.004 GB \| redis-afork, fork-thp auto \| [0-9.]+ \[[0-9.]+–[0-9.]+\] \([0-9.]+x\) \|' "$repo/README.md" &&
        ! grep -q stale "$repo/README.md"; then
    ok "forkbench.tables --update fills the tables and the headline with spreads and verdicts"
else
    err "forkbench.tables --update" "$(cat "$repo/README.md")"
fi
expect_ok "forkbench.tables --check accepts the blocks it made" tables --check "$repo/README.md"

expect_fail "bench refuses a sync size that does not fit, the replica counted" \
    'size 5000 GB does not fit: .*4x the dataset during a full sync under writes, the replica' \
    "$top/bench/run.sh" --scenario sync-disk --sizes 5000 --variants stock --out "$work/refused"
expect_fail "bench refuses a size that does not fit, for its largest variant" \
    'size 100000 GB does not fit: it needs [0-9.]+ GiB .*big, the largest variant.* [0-9.]+ GiB is available' \
    "$top/bench/run.sh" --sizes 100000 --peer "big=$stock/src/redis-server" --out "$work/refused"
if [ -e "$work/refused" ]; then
    err "refused bench writes nothing" "$work/refused was created"
else
    ok "refused bench writes nothing"
fi
exit $status
