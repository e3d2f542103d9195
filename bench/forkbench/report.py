"""forkbench.report -- make bench's tables: every figure over its repetitions.

  read()        a results folder: results.csv (one row per size, variant,
                repetition and metric; older folders without a rep column
                count as one repetition), machine.json, runs.csv
  summarize()   per size, variant and metric: median, min-max and quartiles
                over the repetitions; against the baseline (stock): ratio of
                the medians, its 95% bootstrap interval, the rank test's p and
                the verdict (forkbench.stats)
  write()       summary.csv and results.md of a results folder
  problems()    what makes a folder unfit to publish (uncommitted changes,
                key counts that differ between servers of a size)

forkbench.tables builds the docs' tables from the same summaries.
"""
import collections
import csv
import json
import os
import shlex

from . import stats

Results = collections.namedtuple("Results", "outdir values sizes variants baseline machine runs")

# metric -> label; the order of the tables.
LABELS = [
    ("used_memory_mb", "dataset (used_memory, MB)"),
    ("keys", "keys"),
    ("idle_fork_ms_median", "idle fork, parent blocked (ms, median of the idle saves)"),
    ("idle_fork_ms_max", "idle fork, parent blocked (ms, max of the idle saves)"),
    ("idle_child_ready_ms_median", "idle fork, child ready (ms)"),
    ("idle_save_s", "idle save duration (s)"),
    ("idle_cow_mb", "idle COW (MB)"),
    ("idle_rewrite_fork_ms", "idle BGREWRITEAOF: fork, parent blocked (ms)"),
    ("idle_rewrite_s", "idle BGREWRITEAOF: rewrite time (s)"),
    ("idle_rewrite_cow_mb", "idle BGREWRITEAOF: COW (MB)"),
    ("first_collapse_wait_s", "re-collapse after the idle fork (s)"),
    ("nosave_rps", "no save: SET throughput (req/s)"),
    ("nosave_p50_ms", "no save: p50 (ms)"),
    ("nosave_p99_ms", "no save: p99 (ms)"),
    ("nosave_p999_ms", "no save: p99.9 (ms)"),
    ("nosave_max_ms", "no save: max (ms)"),
    ("nosave_gaps_over_1ms", "no save: PING gaps > 1 ms"),
    ("nosave_max_gap_ms", "no save: longest PING gap (ms)"),
    ("nosave_ping_p99_ms", "no save: PING p99 (ms)"),
    ("save_fork_ms", "under load: fork, parent blocked (ms)"),
    ("save_save_s", "under load: save duration (s)"),
    ("save_cow_mb", "under load: COW (MB)"),
    ("save_rps", "with save: SET throughput (req/s)"),
    ("save_p50_ms", "with save: p50 (ms)"),
    ("save_p99_ms", "with save: p99 (ms)"),
    ("save_p999_ms", "with save: p99.9 (ms)"),
    ("save_max_ms", "with save: max (ms)"),
    ("save_vs_control_max", "save max / control max (no-save run)"),
    ("save_vs_control_p99", "save p99 / control p99 (no-save run)"),
    ("save_gaps_over_1ms", "during save: PING gaps > 1 ms"),
    ("save_max_gap_ms", "during save: longest PING gap (ms)"),
    ("save_total_gap_ms", "during save: sum of PING gaps > 1 ms (ms)"),
    ("first_fork_ms", "first fork, idle (ms)"),
    ("steady_fork_ms_median", "steady state: fork, parent blocked (ms, median of rounds 2+)"),
    ("steady_fork_ms_max", "steady state: fork, parent blocked (ms, max of rounds 2+)"),
    ("steady_max_ms_median", "steady state: client max during the save (ms, median of rounds 2+)"),
    ("steady_p99_ms_median", "steady state: client p99 during the save (ms, median of rounds 2+)"),
    ("steady_max_gap_ms_median", "steady state: longest PING gap during the save (ms, median of rounds 2+)"),
    ("steady_after_child_max_gap_ms_median",
     "steady state: longest PING gap after the child, to the load's end (ms, median of rounds 2+)"),
    ("steady_load_s", "steady state: load length of the control and each round (s)"),
    ("steady_pass_outlasted_load", "steady state: rounds whose re-collapse outlasted the load"),
]


def site_labels(p, what, during):
    """The rows of a fork site's figures (forkbench.sites): prefix p
    (rewrite, sync), `what` names the site, `during` its window."""
    return [
        (p + "_load_s", "load length of the control and the %s's run (s)" % what),
        (p + "_anon_huge_mb", "at the %s's start: the server's memory in whole huge pages (MB)"
         % what),
        (p + "_split_ranges", "at the %s's start: ranges fork-thp split since startup" % what),
        (p + "_fork_ms", "under load: fork for the %s, parent blocked (ms)" % what),
        (p + "_child_s", "under load: life of the %s's child (s, polled)" % what),
        (p + "_child_life_ms", "under load: life of the %s's child (ms, INFO fork)" % what),
        (p + "_s", "under load: %s" % during),
        (p + "_cow_mb", "under load: COW of the %s (MB)" % what),
        (p + "_rps", "with %s: SET throughput (req/s)" % what),
        (p + "_p50_ms", "with %s: p50 (ms)" % what),
        (p + "_p99_ms", "with %s: p99 (ms)" % what),
        (p + "_p999_ms", "with %s: p99.9 (ms)" % what),
        (p + "_max_ms", "with %s: max (ms)" % what),
        (p + "_vs_control_max", "%s max / control max (no-save run)" % what),
        (p + "_vs_control_p99", "%s p99 / control p99 (no-save run)" % what),
        (p + "_window_rps", "during the %s: SET throughput (req/s)" % what),
        (p + "_vs_control_rps", "during the %s: throughput / control's" % what),
        (p + "_ping_p99_ms", "during the %s: PING p99 (ms)" % what),
        (p + "_vs_control_ping_p99", "during the %s: PING p99 / control's" % what),
        (p + "_gaps_over_1ms", "during the %s: PING gaps > 1 ms" % what),
        (p + "_max_gap_ms", "during the %s: longest PING gap (ms)" % what),
        (p + "_vs_control_max_gap", "during the %s: longest PING gap / control's" % what),
        (p + "_total_gap_ms", "during the %s: sum of PING gaps > 1 ms (ms)" % what),
        (p + "_child_max_gap_ms", "while the %s's child lived: longest PING gap (ms)" % what),
        (p + "_child_ping_p99_ms", "while the %s's child lived: PING p99 (ms)" % what),
        (p + "_after_child_ping_p99_ms", "from the child's end to the %s's end: PING p99 (ms)"
         % what),
        (p + "_after_max_gap_ms", "after the %s, to the load's end: longest PING gap (ms)"
         % what),
        (p + "_outlasted_load", "the %s outlasted the load (runs)" % what),
    ]


LABELS += site_labels("rewrite", "rewrite", "rewrite time, BGREWRITEAOF to done (s)")
LABELS += site_labels("sync", "sync", "sync time, REPLICAOF to the replica synced (s)")
def probe_labels(p, what):
    """The PING probe over a window (phases.probe_figures)."""
    return [(p + "max_ping_ms", "%s: worst PING round trip (ms)" % what),
            (p + "ping_p999_ms", "%s: PING p99.9 (ms)" % what),
            (p + "ping_p99_ms", "%s: PING p99 (ms)" % what),
            (p + "ping_per_s", "%s: PING round trips per second" % what),
            (p + "ping_count", "%s: PING round trips completed" % what),
            (p + "gaps_over_1ms", "%s: PING round trips > 1 ms" % what)]


def vm_labels(p, what):
    """The machine's /proc/vmstat deltas over a fill (phases.VMSTAT_FIELDS)."""
    return [(p + "vm_" + f, "%s: %s (machine, /proc/vmstat)" % (what, f))
            for f in ("thp_fault_alloc", "thp_fault_fallback", "compact_stall",
                      "compact_success", "compact_fail", "thp_collapse_alloc")]


def thp_labels(p, what):
    """What fork-thp chose, the keyspace tables it held and the slack
    arena's memory (INFO fork)."""
    return [(p + "fork_thp_on", "%sfork-thp on (1) or off (0), INFO fork_thp" % what),
            (p + "fork_thp_tables_held", "%stables held in small pages now" % what),
            (p + "fork_thp_tables_held_total", "%stables held in small pages, total" % what),
            (p + "fork_thp_tables_not_held", "%stables not held" % what),
            (p + "fork_thp_slack_mb", "%slarge allocations kept in small pages, the slack "
                                      "arena (MB)" % what)]


# The growth scenarios (forkbench.growth): the fill.
GROWTH_LABELS = [
    ("fragment_mapped_mb", "fragmenter: memory mapped and touched (MB)"),
    ("fragment_kept_mb", "fragmenter: memory kept, every other 4 KiB page (MB)"),
    ("fragment_share", "fragmenter: share of the free memory left fragmented"),
    ("fragment_s", "fragmenter: time to fragment (s)"),
    ("free_2m_before_mb", "free in 2 MiB blocks before fragmenting (MB, buddyinfo)"),
    ("free_2m_after_mb", "free in 2 MiB blocks after fragmenting (MB)"),
    ("free_2m_end_mb", "free in 2 MiB blocks at the fill's end (MB)"),
    ("empty_rss_mb", "RSS of the empty server (MB)"),
    ("fill_s", "fill time (s)"),
    ("fill_rps", "fill: SET throughput (req/s)"),
    ("fill_p99_ms", "fill: SET p99 (ms, redis-benchmark)"),
    ("fill_max_ms", "fill: SET max (ms, redis-benchmark)"),
] + probe_labels("fill_", "fill") + [
    ("fill_dbsize", "keys at the fill's end (DBSIZE)"),
    ("anon_huge_mb", "the server's anonymous huge pages at the end (MB)"),
] + vm_labels("fill_", "fill") + thp_labels("", "")


def shape_labels():
    """The shapes scenario (forkbench.shapes), but the large values'
    (large_labels, one block per value size)."""
    mem = lambda p, what: [(p + "rss_mb", "%s: RSS (MB)" % what),  # noqa: E731
                           (p + "used_memory_mb", "%s: used_memory (MB)" % what),
                           (p + "frag_ratio", "%s: fragmentation ratio" % what),
                           (p + "host_used_mb",
                            "%s: host memory in use since the server started (MB)" % what),
                           (p + "partly_mapped_mb",
                            "%s: huge pages mapped only in part, machine-wide (MB)" % what)]
    return ([("small_empty_rss_mb", "small: RSS of an empty server (MB)"),
             ("small_rss_mb", "small: RSS with its data (MB)"),
             ("small_used_memory_mb", "small: used_memory with its data (MB)")]
            + thp_labels("small_", "small: ")
            + [("many_empty_rss_mb", "many: total RSS of the empty servers (MB)"),
               ("many_rss_mb", "many: total RSS with their data (MB)"),
               ("many_rss_per_server_mb", "many: RSS per server (MB)")]
            + thp_labels("many_", "many: ")
            + mem("churn_before_", "churn: before")
            + [("churn_s", "churn: delete 2 of 3 keys and write them again, resized (s)")]
            + probe_labels("churn_", "churn") + mem("churn_", "churn: after")
            + probe_labels("churn_defrag_", "activedefrag")
            + mem("churn_defrag_", "churn: after activedefrag")
            + [("churn_defrag_s", "activedefrag: time until it stopped (s)"),
               ("churn_defrag_hits", "activedefrag: hits"),
               ("churn_defrag_running", "activedefrag: still running at the end (its CPU %)")]
            + thp_labels("churn_", "churn: ")
            + probe_labels("maxmem_fill_", "maxmemory: to the limit")
            + probe_labels("maxmem_", "maxmemory: at the limit")
            + [("maxmem_rps", "maxmemory: SET throughput at the limit (req/s)"),
               ("maxmem_at_limit_s", "maxmemory: time at the limit (s)"),
               ("maxmem_evicted_keys", "maxmemory: evicted keys"),
               ("maxmem_peak_rss_mb", "maxmemory: peak RSS (MB)"),
               ("maxmem_rss_vs_maxmemory", "maxmemory: peak RSS / maxmemory")]
            + mem("maxmem_", "maxmemory: at the end")
            + thp_labels("maxmem_", "maxmemory: "))


def large_labels(name):
    """One value size of the large shape (name: large128k, large1m)."""
    text = name[len("large"):]
    what = "%s %s values" % (text[:-1], {"b": "B", "k": "KB", "m": "MB"}[text[-1]])
    p = name + "_"
    return ([(p + "fill_s", "%s: fill time (s)" % what),
             (p + "fill_rps", "%s: fill throughput (req/s)" % what)]
            + probe_labels(p + "fill_", "%s: fill" % what)
            + [(p + "rss_mb", "%s: RSS after the fill (MB)" % what),
               (p + "used_memory_mb", "%s: used_memory after the fill (MB)" % what),
               (p + "frag_ratio", "%s: fragmentation ratio after the fill" % what),
               (p + "host_used_mb", "%s: host memory in use after the fill (MB)" % what),
               (p + "partly_mapped_mb",
                "%s: huge pages mapped only in part after the fill, machine-wide (MB)" % what),
               (p + "anon_huge_mb", "%s: anonymous huge pages after the fill (MB)" % what),
               (p + "save_fork_ms", "%s: BGSAVE under writes, fork (ms)" % what),
               (p + "save_s", "%s: BGSAVE under writes, save time (s)" % what),
               (p + "save_cow_mb", "%s: BGSAVE under writes, COW (MB)" % what)]
            + probe_labels(p + "save_", "%s: during the BGSAVE" % what)
            + [(p + "peak_rss_mb", "%s: peak RSS (MB)" % what)]
            + vm_labels(p + "fill_", "%s: fill" % what) + thp_labels(p, "%s: " % what))


LABELS += GROWTH_LABELS + shape_labels()
LABELS += [
    ("sync_catchup_s", "after the load: the replica's catch-up (s)"),
    ("sync_rdb_channel", "the sync's RDB over the rdb channel (1) or not (0)"),
    ("peak_rss_mb", "peak RSS of the server (MB)"),
    ("rss_mb", "RSS at the end (MB)"),
    ("fragmentation_ratio", "fragmentation ratio (RSS / used)"),
]

ROUND_LABELS = [
    ("fork_ms", "fork, parent blocked (ms)"), ("max_ms", "with save: max (ms)"),
    ("p999_ms", "with save: p99.9 (ms)"), ("p99_ms", "with save: p99 (ms)"),
    ("rps", "with save: throughput (req/s)"), ("cow_mb", "COW (MB)"),
    ("max_gap_ms", "during save: longest PING gap (ms)"),
    ("after_child_max_gap_ms", "after the child: longest PING gap (ms)"),
    ("save_s", "save duration (s)"), ("collapse_wait_s", "re-collapse after the load (s)"),
    ("huge_after_mb", "huge after the re-collapse (MB)"),
]

SUMMARY_FIELDS = ["size_gb", "variant", "metric", "n", "median", "min", "max", "q1", "q3",
                  "ratio", "ci_low", "ci_high", "p", "verdict"]


# ---------------------------------------------------------------- reading

def fmt_size(size):
    return "%g" % size


def fmt_value(v):
    """A figure for results.csv."""
    if isinstance(v, float):
        return "%.3f" % v if abs(v) >= 1 else "%.6g" % v
    return str(v)


def read_json(path, default=None):
    try:
        with open(path) as f:
            return json.load(f)
    except OSError:
        return default


def read_runs(outdir):
    path = os.path.join(outdir, "runs.csv")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return list(csv.DictReader(f))


def read(outdir):
    """A results folder as Results; values[(size, variant, metric)] lists
    one value per repetition, in repetition order."""
    values, sizes, seen = {}, [], []
    with open(os.path.join(outdir, "results.csv")) as f:
        rows = list(csv.DictReader(f))
    rows.sort(key=lambda r: int(r.get("rep") or 1))
    for r in rows:
        size = float(r["size_gb"])
        values.setdefault((size, r["variant"], r["metric"]), []).append(float(r["value"]))
        if size not in sizes:
            sizes.append(size)
        if r["variant"] not in seen:
            seen.append(r["variant"])
    m = read_json(os.path.join(outdir, "machine.json"), {})
    variants = [v for v in m.get("variants", {}) if v in seen]
    variants += [v for v in seen if v not in variants]
    baseline = m.get("baseline") or ("stock" if "stock" in variants else variants[0])
    if baseline not in variants:
        baseline = variants[0]
    return Results(outdir, values, sizes, variants, baseline, m, read_runs(outdir))


# ---------------------------------------------------------------- summaries

def summarize(res, metrics=None):
    """(size, variant, metric) -> spread, plus ratio/ci/p/verdict against
    the baseline for the other variants."""
    out = {}
    for (size, variant, metric), vals in res.values.items():
        if metrics is not None and metric not in metrics:
            continue
        s = stats.spread(vals)
        base = res.values.get((size, res.baseline, metric))
        if variant != res.baseline and base:
            seed = "%s|%s|%s" % (fmt_size(size), variant, metric)
            s.update(stats.compare(vals, base, stats.direction(metric), seed))
        out[(size, variant, metric)] = s
    return out


def value_bytes(name):
    """large128k -> 131072, large1m -> 1048576, large300b -> 300 (shapes.value_name)."""
    text = name[len("large"):]
    return int(text[:-1]) * {"b": 1, "k": 1024, "m": 1 << 20}[text[-1]]


def large_names(res):
    """The large shape's value sizes in a folder (large128k, ...), smallest first."""
    names = {m.split("_")[0] for (_, _, m) in res.values
             if m.startswith("large") and m.split("_")[0][-1:] in ("b", "k", "m")}
    return sorted(names, key=value_bytes)


def all_labels(res):
    """The fixed labels, one block per value size of the large shape, then
    one block per steady-state round."""
    labels = list(LABELS)
    for name in large_names(res):
        labels += large_labels(name)
    rounds = sorted({int(m[5:].split("_")[0]) for (_, _, m) in res.values
                     if m.startswith("round")})
    for rnd in rounds:
        labels += [("round%d_%s" % (rnd, k), "round %d: %s" % (rnd, text))
                   for k, text in ROUND_LABELS]
    return labels


def fmt_num(x):
    if x is None:
        return "n/a"
    if abs(x) >= 1000 or float(x).is_integer() and abs(x) >= 10:
        return "%.0f" % x
    if abs(x) >= 10:
        return "%.1f" % x
    if abs(x) >= 0.1 or x == 0:
        return "%.2f" % x
    return "%.2g" % x


def fmt_spread(s):
    """median [min–max] (the median alone for one repetition)."""
    if s is None:
        return "n/a"
    if s["n"] < 2:
        return fmt_num(s["median"])
    return "%s [%s–%s]" % (fmt_num(s["median"]), fmt_num(s["min"]), fmt_num(s["max"]))


def fmt_ratio(s):
    """ratio (low–high)."""
    if s is None or s.get("ratio") is None:
        return "n/a"
    if s.get("ci") is None:
        return "%.2f" % s["ratio"]
    return "%.2f (%.2f–%.2f)" % (s["ratio"], s["ci"][0], s["ci"][1])


def table(res, summary, size, labels):
    """One markdown table: a column per variant, then ratio and verdict per
    variant other than the baseline."""
    others = [v for v in res.variants if v != res.baseline]
    variants = [res.baseline] + others
    head = ["metric"] + variants
    for v in others:
        head += ["%s / %s" % (v, res.baseline), "verdict"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for metric, label in labels:
        cells = [summary.get((size, v, metric)) for v in variants]
        if all(c is None for c in cells):
            continue
        row = [label] + [fmt_spread(c) for c in cells]
        for c in cells[1:]:
            row += [fmt_ratio(c), c.get("verdict", "n/a") if c else "n/a"]
        lines.append("| " + " | ".join(row) + " |")
    return lines


# ---------------------------------------------------------------- checks

def unequal_keys(res):
    """{size: {variant: sorted key counts}} where servers of a size differ."""
    out = {}
    for size in res.sizes:
        counts = {v: sorted({int(x) for x in res.values.get((size, v, "keys"), [])})
                  for v in res.variants}
        counts = {v: c for v, c in counts.items() if c}
        if len({x for c in counts.values() for x in c}) > 1:
            out[size] = counts
    return out


def commit_of(m):
    return (m.get("source", {}).get("checkout", {}).get("describe")
            or m.get("redis_afork_commit", "n/a"))


def is_dirty(m):
    return bool(m.get("dirty")) or commit_of(m).endswith("-dirty")


def problems(res):
    """Sentences saying why a folder should not be published as it is."""
    out = []
    if is_dirty(res.machine):
        out.append("taken on uncommitted changes (%s)" % commit_of(res.machine))
    for size, counts in unequal_keys(res).items():
        out.append("key counts differ between servers at %s GB (%s)" % (
            fmt_size(size), "; ".join("%s %s" % (v, "/".join(map(str, c)))
                                      for v, c in counts.items())))
    return out


def repetitions(res):
    return max((len(v) for v in res.values.values()), default=0)


def orders_run(res):
    """rep -> variants in the order they ran at the first size (runs.csv)."""
    out = {}
    first = fmt_size(res.sizes[0]) if res.sizes else None
    for r in sorted(res.runs, key=lambda r: int(r["seq"])):
        if r["size_gb"] == first:
            out.setdefault(int(r["rep"]), []).append(r["variant"])
    return out


# ---------------------------------------------------------------- results.md

def machine_lines(m):
    """The machine block at the top of results.md."""
    virt = m.get("virtualization") or {}
    lines = ["- kernel %s, %s x %s, VM: %s, container: %s; %s GiB RAM (%s available), "
             "swap %s GiB" % (m.get("kernel"), m.get("cpus"), m.get("cpu"),
                              virt.get("vm", "n/a"), virt.get("container", "n/a"),
                              m.get("mem_total_gib"), m.get("mem_available_gib", "n/a"),
                              m.get("swap_total_gib", "n/a")),
             "- THP enabled `%s`, defrag `%s`, khugepaged defrag `%s`; overcommit_memory %s"
             % (m.get("thp_enabled"), m.get("thp_defrag"),
                m.get("thp_khugepaged_defrag", "n/a"), m.get("overcommit_memory", "n/a"))]
    b = m.get("before")
    if b:
        lines.append("- before the run: load average %s; other processes used %.2f CPUs, "
                     "steal %.1f%%" % (" / ".join("%.2f" % x for x in b["loadavg"]),
                                       b.get("others_cpus_mean", 0), b.get("steal_pct_mean", 0)))
    d = m.get("during")
    if d and d.get("samples"):
        lines.append("- during the run (%d samples, 1/s): other processes used %.2f CPUs on "
                     "average (max %.2f); steal %.1f%% (max %.1f%%); load average up to %.2f"
                     % (d["samples"], d["others_cpus_mean"], d["others_cpus_max"],
                        d["steal_pct_mean"], d["steal_pct_max"], d["load1_max"]))
    if m.get("reporting_held"):
        held = m.get("reporting_held_ms")
        lines.append("- the VM's free page reporting held back for the run (`--hold-reporting`%s): "
                     "it stands in for a host that does not take freed memory back"
                     % (", a block reported once free for %g s" % (held / 1000) if held else ""))
    p = m.get("pretouch")
    if p:
        lines.append("- memory pre-touched once before the run: %.2f GiB in %.2f s"
                     % (p["gib"], p["seconds"]))
        if p.get("reported_kib"):
            lines.append("- **the hold did not hold it all**: the VM reported %d MiB of it to "
                         "its host within seconds (the run's output says how much after each "
                         "touch before a run): a server's first new huge pages can wait while "
                         "the host backs them again" % (p["reported_kib"] // 1024))
    for w in m.get("warnings", []):
        lines.append("- **warning**: " + w)
    return lines


def server_lines(res):
    m = res.machine
    src = m.get("source", {})
    lines = ["- stock `%s`; redis-afork `%s`" % (m.get("stock"), m.get("redis_afork"))]
    for name, p in m.get("peers", {}).items():
        command = " ".join([p["binary"]] + [shlex.quote(a) for a in p["args"]])
        lines.append("- peer %s: `%s` (`%s`)" % (name, command, p.get("version", "n/a")))
    lines.append("- source: checkout %s, redis-afork tree %s, stock tree %s"
                 % (commit_of(m), src.get("afork_tree", {}).get("describe", "n/a"),
                    src.get("stock_tree", {}).get("describe", "n/a")))
    n = repetitions(res)
    lines.append("- %d repetition%s; variant order (%s%s): %s" % (
        n, "" if n == 1 else "s", m.get("order", "n/a"),
        ", seed %s" % m.get("seed") if m.get("order") == "random" else "",
        "; ".join("%d: %s" % (rep, " ".join(o)) for rep, o in sorted(orders_run(res).items()))
        or "n/a"))
    for name, why in m.get("skipped_peers", {}).items():
        lines.append("- peer %s skipped: %s" % (name, why))
    for name, why in m.get("failed_peers", {}).items():
        lines.append("- peer %s failed, later runs dropped: %s" % (name, why))
    if m.get("scenario_config"):
        lines.append("- the %s scenario's settings: `%s`" % (
            m.get("scenario"), " ".join(shlex.quote(a) for a in m["scenario_config"])))
    if m.get("replica_config"):
        rv = m.get("replica_variant")
        lines.append("- the replica: a fresh server per run, of %s, with `%s`"
                     % ("variant " + rv if rv else "the same variant",
                        " ".join(shlex.quote(a) for a in m["replica_config"])))
    if m.get("growth"):
        return lines + growth_lines(res)
    idle = {"aofrewrite": "one idle BGREWRITEAOF", "sync-disk": "one idle save",
            "sync-diskless": "one idle save"}.get(m.get("scenario"),
                                                  "%s idle saves" % m.get("idle_saves", 3))
    lines.append("- values %s bytes, load runs ~%s s: `redis-benchmark -t set -r <keys> -d %s "
                 "-c 50 -P 4`; %s" % (m.get("value_size"), m.get("load_seconds"),
                                      m.get("value_size"), idle))
    return lines


def growth_lines(res):
    """The growth scenarios' settings, and what fork-thp chose in each run
    (fork_thp_heap.csv)."""
    m, g = res.machine, res.machine["growth"]
    lines = ["- values %s bytes; the fill: `redis-benchmark -t set -r <keys> -n %gx<keys> -d "
             "<value size> -c %s -P %s`, the PING probe beside it; no fork (checked)"
             % (m.get("value_size"), g["fill_requests"], g["fill_clients"],
                g["fill_pipeline"])]
    if m.get("scenario") == "fill-fragmented":
        cap = g.get("fragment_max_gb")
        lines.append("- before each fill, the machine's free memory fragmented "
                     "(forkbench.fragment)%s" % (", at most %g GB" % cap if cap else ""))
    if m.get("scenario") == "shapes":
        lines.append("- shapes %s: small %g MB; many %d x %g MB; churn in batches of %d, "
                     "values written again as %s bytes, activedefrag for at most %g s; large values %s "
                     "(-P %d, BGSAVE after %g s of writes); maxmemory keyspace %gx, %g s at "
                     "the limit"
                     % (" ".join(g["shapes"]), g["small_mb"], g["many_servers"], g["many_mb"],
                        g["churn_batch"], g.get("churn_value_size", "the same"),
                        g["defrag_seconds"],
                        " ".join(str(v) for v in g["large_values"]), g["large_pipeline"],
                        g["save_lead_seconds"], g["maxmemory_keyspace"],
                        g["maxmemory_seconds"]))
    chose = {}
    path = os.path.join(res.outdir, "fork_thp_heap.csv")
    if os.path.exists(path):
        with open(path) as f:
            for r in csv.DictReader(f):
                chose.setdefault(r["variant"], set()).add(r["fork_thp_heap"])
    for v in res.variants:
        if v in chose:
            lines.append("- %s: INFO fork_thp_heap %s" % (
                v, "; ".join("`%s`" % c for c in sorted(chose[v]))))
    return lines


HOW_TO_READ = """Each cell: median [min–max] over the repetitions. Ratio: the variant's
median / {base}'s median, with a 95% bootstrap interval. Verdict: better or
worse when a rank-sum test gives p < 0.05 and the interval excludes 1, else
within noise; with fewer than 4 repetitions no difference can reach p < 0.05.
"save max / control max" divides client latency during the save by the same
server's no-save run of the same repetition: near 1, the save is lost in
the machine's own noise."""


def markdown(res, summary):
    m = res.machine
    title = {"fill": "A dataset growing", "fill-fragmented": "A dataset growing",
             "shapes": "Where huge pages have hurt"}.get(m.get("scenario"), "Fork cost")
    lines = ["# %s (%s scenario): %s side by side"
             % (title, m.get("scenario", "fork"), ", ".join(res.variants)), ""]
    for p in problems(res):
        lines += ["**Not fit to publish: %s.**" % p, ""]
    lines += ["## Machine", ""] + machine_lines(m) + [""]
    lines += ["## Servers and runs", ""] + server_lines(res) + [""]
    lines += [HOW_TO_READ.format(base=res.baseline), ""]
    labels = all_labels(res)
    for size in res.sizes:
        lines += ["## %s GB" % fmt_size(size), ""] + table(res, summary, size, labels)
        for p, what in (("save", "save"), ("rewrite", "rewrite"), ("sync", "sync")):
            outlasted = [v for v in res.variants
                         if any(res.values.get((size, v, p + "_outlasted_load"), []))]
            if outlasted:
                lines += ["", "Note: the %s outlasted the load for %s in some repetitions; "
                          "raise --load-seconds." % (what, ", ".join(outlasted))]
        lines.append("")
    return "\n".join(lines)


def write_summary_csv(summary, path):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(SUMMARY_FIELDS)
        for (size, variant, metric), s in summary.items():
            ci = s.get("ci") or (None, None)
            row = [fmt_size(size), variant, metric, s["n"]]
            row += [fmt_value(s[k]) for k in ("median", "min", "max", "q1", "q3")]
            row += ["" if x is None else fmt_value(x) for x in (s.get("ratio"),) + tuple(ci)]
            row += ["" if s.get("p") is None else "%.4f" % s["p"], s.get("verdict", "")]
            w.writerow(row)


def write(outdir):
    """summary.csv and results.md from the folder's raw figures."""
    res = read(outdir)
    summary = summarize(res)
    write_summary_csv(summary, os.path.join(outdir, "summary.csv"))
    with open(os.path.join(outdir, "results.md"), "w") as f:
        f.write(markdown(res, summary))
    return res, summary
