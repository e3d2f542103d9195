"""The benchmark tables in the docs, generated from committed results.

    python3 -m forkbench.tables [--allow-dirty] [--allow-unequal-keys] DIR...
        print the tables of these results folders (markdown)
    python3 -m forkbench.tables --headline DIR...
        print the headline table of these folders
    python3 -m forkbench.tables --update FILE
        regenerate FILE's marked blocks from the folders their markers name
    python3 -m forkbench.tables --check FILE
        fail when a block differs from what its folders give

(with bench/ on PYTHONPATH, e.g. `PYTHONPATH=bench python3 -m forkbench.tables`
from the checkout's top). Two kinds of block, each generated in place:

    <!-- bench-tables: [--allow-dirty] [--allow-unequal-keys] DIR... -->
    (every figure the docs show, per folder and size; do not edit)
    <!-- /bench-tables -->

    <!-- bench-headline: [--allow-dirty] [--allow-unequal-keys] DIR... -->
    (a few lines: per size, fork time and worst client stall during a save,
    redis-afork against stock, median with spread; do not edit)
    <!-- /bench-headline -->

each marker at the start of its line (one quoted in an indented code block
is not a block).

DIRs are relative to the top of the git checkout holding FILE (so
README.md and docs/results.md name the same folders). With --update
and --check every folder must be committed (tracked by git and
unmodified), so the docs never show figures that are not in the
repository. A folder taken on uncommitted changes, or whose servers of a
size got different key counts, is refused unless the marker allows it; it
is then marked as not fit to publish. Each scenario's folders show its
rows (DOC_METRICS; the other fork sites': site_doc_metrics; the shapes':
doc_metrics); steady-scenario
folders also get fork-thp's targets (forkbench.targets). Only the standard
library is needed.
"""
import argparse
import os
import re
import shlex
import subprocess
import sys

from . import report, targets

# A marker counts at the start of a line only (not quoted in a code block).
BLOCK = re.compile(r"^<!-- bench-(?P<kind>tables|headline): (?P<args>.*?) -->\n"
                   r"(?P<body>.*?)^<!-- /bench-(?P=kind) -->", re.S | re.M)

# The figures the docs show, per scenario (results.md has them all).
DOC_METRICS = {
    "fork": ["idle_fork_ms_median", "save_fork_ms", "save_max_ms", "save_p99_ms",
             "save_p999_ms", "save_vs_control_max", "save_vs_control_p99", "nosave_rps",
             "save_cow_mb", "save_save_s"],
    "steady": ["first_fork_ms", "steady_fork_ms_median", "steady_max_ms_median",
               "save_vs_control_max", "nosave_rps", "rss_mb"],
}


def site_doc_metrics(p, idle):
    """The other fork sites (forkbench.sites): fork, child, length, COW,
    the clients' worst stall, p99 and throughput during it and against
    the control, memory."""
    return [idle, p + "_fork_ms", p + "_child_s", p + "_s", p + "_cow_mb", p + "_max_ms",
            p + "_max_gap_ms", p + "_vs_control_max", p + "_vs_control_max_gap",
            p + "_p99_ms", p + "_ping_p99_ms", p + "_window_rps", "nosave_rps",
            "peak_rss_mb"]


DOC_METRICS["aofrewrite"] = site_doc_metrics("rewrite", "idle_rewrite_fork_ms")
DOC_METRICS["sync-disk"] = site_doc_metrics("sync", "idle_fork_ms_median")
DOC_METRICS["sync-diskless"] = DOC_METRICS["sync-disk"]

# The growth scenarios (forkbench.growth): the probe during the fill, the
# fill's throughput and length, memory, what huge pages the machine gave,
# what fork-thp chose.
DOC_METRICS["fill"] = ["fill_max_ping_ms", "fill_ping_p999_ms", "fill_ping_p99_ms",
                       "fill_ping_per_s", "fill_ping_count", "fill_rps", "fill_s", "rss_mb",
                       "anon_huge_mb", "fill_vm_thp_fault_alloc", "fill_vm_compact_stall",
                       "fork_thp_on", "fork_thp_tables_held_total", "fork_thp_tables_not_held"]
DOC_METRICS["fill-fragmented"] = (["fragment_share", "free_2m_after_mb"]
                                  + DOC_METRICS["fill"])
SHAPES_DOC = ["small_empty_rss_mb", "small_rss_mb", "many_rss_mb", "churn_rss_mb",
              "churn_defrag_rss_mb", "churn_defrag_host_used_mb", "churn_defrag_partly_mapped_mb",
              "churn_defrag_s", "churn_max_ping_ms", "churn_ping_p99_ms",
              "churn_defrag_max_ping_ms", "churn_defrag_ping_p99_ms",
              "maxmem_peak_rss_mb", "maxmem_rss_vs_maxmemory", "maxmem_max_ping_ms",
              "maxmem_ping_p99_ms", "maxmem_rps", "maxmem_evicted_keys", "small_fork_thp_on",
              "maxmem_fork_thp_on"]
LARGE_DOC = ["rss_mb", "fill_max_ping_ms", "fill_ping_p99_ms", "save_max_ping_ms",
             "save_ping_p99_ms", "save_fork_ms"]


def doc_metrics(res):
    """The rows a folder shows: its scenario's, and for shapes one block
    per value size of the large shape."""
    scenario = res.machine.get("scenario", "fork")
    if scenario != "shapes":
        return DOC_METRICS.get(scenario, DOC_METRICS["fork"])
    large = [n + "_" + k for n in report.large_names(res) for k in LARGE_DOC]
    return SHAPES_DOC[:7] + large + SHAPES_DOC[7:]


class Refused(Exception):
    """A results folder that may not be shown as it is."""


def thp_mode(text):
    m = re.search(r"\[(\w+)\]", text or "")
    return m.group(1) if m else (text or "n/a")


def heading(res, path):
    """One line on where the figures come from."""
    m = res.machine
    n = report.repetitions(res)
    during = m.get("during") or {}
    busy = ("; other processes used %.2f CPUs on average during the run"
            % during["others_cpus_mean"]) if during.get("samples") else ""
    if m.get("reporting_held"):
        busy += "; the VM's free page reporting held back (`--hold-reporting`)"
    return ("**%s scenario**, `%s` (%s, %d repetition%s, commit %s; kernel %s, %s x %s, "
            "THP `%s`%s). Whole tables: `%s/results.md`." % (
                m.get("scenario", "fork"), path, (m.get("date_utc") or "n/a")[:10], n,
                "" if n == 1 else "s", report.commit_of(m), m.get("kernel"), m.get("cpus"),
                m.get("cpu"), thp_mode(m.get("thp_enabled")), busy, path))


def check_publishable(res, path, allow):
    """Refused unless the folder was taken on a clean commit and every
    server of a size got the same keys (or the marker allows it)."""
    if report.is_dirty(res.machine) and "dirty" not in allow:
        raise Refused("%s: taken on uncommitted changes (%s); rerun on a clean commit "
                      "or pass --allow-dirty" % (path, report.commit_of(res.machine)))
    if report.unequal_keys(res) and "unequal-keys" not in allow:
        raise Refused("%s: key counts differ between servers of a size; rerun or pass "
                      "--allow-unequal-keys" % path)


def folder_tables(path, top, allow):
    """Markdown for one results folder, or Refused."""
    res = report.read(os.path.join(top, path))
    problems = report.problems(res)
    check_publishable(res, path, allow)
    metrics = doc_metrics(res)
    summary = report.summarize(res, set(metrics))
    known = dict(report.all_labels(res))
    labels = [(k, known[k]) for k in metrics]
    lines = [heading(res, path), ""]
    lines += ["- **Not fit to publish**: %s." % p for p in problems]
    if problems:
        lines.append("")
    for size in res.sizes:
        body = report.table(res, summary, size, labels)
        body[0] = body[0].replace("| metric |", "| %s GB |" % report.fmt_size(size), 1)
        lines += body + [""]
    if res.machine.get("scenario") == "steady":
        lines += ["fork-thp's targets (`forkbench.targets`: medians over the repetitions, "
                  "ratio to stock with its 95% interval):", ""]
        lines += targets.tables(res)
    return "\n".join(lines)


def generate(dirs, top, allow):
    parts = [folder_tables(d, top, allow) for d in dirs]
    note = ("<!-- generated by forkbench.tables from the folders above; "
            "do not edit by hand -->\n")
    return note + "\n".join(parts)


# The headline's two figures per scenario: (fork time, worst client stall
# during a save), each over the saves the scenario counts (steady: rounds
# 2 and later, the steady state).
HEADLINE_METRICS = {
    "fork": ("save_fork_ms", "save_max_ms"),
    "steady": ("steady_fork_ms_median", "steady_max_ms_median"),
    "aofrewrite": ("rewrite_fork_ms", "rewrite_max_ms"),
    "sync-disk": ("sync_fork_ms", "sync_max_ms"),
    "sync-diskless": ("sync_fork_ms", "sync_max_ms"),
}
# What the headline's dataset cell adds per scenario.
HEADLINE_SITES = {"steady": ", steady state", "aofrewrite": ", AOF rewrite",
                  "sync-disk": ", full sync (disk)", "sync-diskless": ", full sync (diskless)"}
# How the headline names a variant (others by their own name).
HEADLINE_NAMES = {
    "afork-thp-collapse": "redis-afork, fork-thp yes",
}
# redis-afork with no fork option set: fork-thp's default changed to auto
# in 0.3.0 (before: no), so the name says which default the run had.
AUTO_DEFAULT_SINCE = (0, 3, 0)


def headline_name(res, variant):
    if variant != "redis-afork":
        return HEADLINE_NAMES.get(variant, variant)
    m = re.search(r"afork=(\d+)\.(\d+)\.(\d+)", res.machine.get("redis_afork") or "")
    version = tuple(int(x) for x in m.groups()) if m else (0, 0, 0)
    return "redis-afork, fork-thp %s" % ("auto" if version >= AUTO_DEFAULT_SINCE else "no")


def headline_cell(summary, size, variant, metric, baseline):
    s = summary.get((size, variant, metric))
    cell = report.fmt_spread(s)
    if variant != baseline and s and s.get("ratio") is not None:
        cell += " (%.2fx)" % s["ratio"]
    return cell


def headline(dirs, top, allow):
    """A short table: per folder and size, each server's fork time and
    worst client stall during a save, median [min-max] over the
    repetitions, with the ratio to the baseline (stock)."""
    lines = ["<!-- generated by forkbench.tables from the folders above; "
             "do not edit by hand -->",
             "| dataset | server | fork (ms) | worst client stall during a save (ms) |",
             "|---|---|---|---|"]
    sources = []
    for path in dirs:
        res = report.read(os.path.join(top, path))
        check_publishable(res, path, allow)
        scenario = res.machine.get("scenario", "fork")
        if scenario not in HEADLINE_METRICS:
            # the growth scenarios fork nowhere: nothing for these columns
            raise Refused("%s: the %s scenario has no fork for a headline; show it with a "
                          "bench-tables block" % (path, scenario))
        fork, stall = HEADLINE_METRICS[scenario]
        summary = report.summarize(res, {fork, stall})
        variants = [res.baseline] + [v for v in res.variants if v != res.baseline]
        for size in res.sizes:
            for v in variants:
                lines.append("| %s GB%s | %s | %s | %s |" % (
                    report.fmt_size(size), HEADLINE_SITES.get(scenario, ""),
                    headline_name(res, v),
                    headline_cell(summary, size, v, fork, res.baseline),
                    headline_cell(summary, size, v, stall, res.baseline)))
        sources.append("`%s` (%d repetitions, %s)" % (
            path, report.repetitions(res), (res.machine.get("date_utc") or "n/a")[:10]))
    lines += ["", "Median [min–max] over the repetitions, then (the ratio of the medians "
              "to stock's); from " +
              ", ".join(sources) + ". All the tables: docs/results.md; how each figure is "
              "measured: docs/benchmarks.md.", ""]
    return "\n".join(lines)


GENERATORS = {"tables": generate, "headline": headline}


def require_committed(top, path):
    """The folder is tracked by git and has no uncommitted change."""
    results = os.path.join(path, "results.csv")
    tracked = subprocess.run(["git", "-C", top, "ls-files", "--error-unmatch", results],
                             capture_output=True)
    changed = subprocess.run(["git", "-C", top, "status", "--porcelain", "--", path],
                             capture_output=True, text=True).stdout.strip()
    if tracked.returncode != 0 or changed:
        raise Refused("%s: not committed (commit the results folder first)" % path)


def parse_marker(text):
    p = argparse.ArgumentParser(prog="bench-tables marker")
    p.add_argument("--allow-dirty", action="store_true")
    p.add_argument("--allow-unequal-keys", action="store_true")
    p.add_argument("dirs", nargs="+")
    return p.parse_args(shlex.split(text))


def allowed(a):
    return {name for name, on in (("dirty", a.allow_dirty),
                                  ("unequal-keys", a.allow_unequal_keys)) if on}


def checkout_top(path):
    """The top of the git checkout holding `path` (its folder outside git)."""
    folder = os.path.dirname(os.path.abspath(path))
    out = subprocess.run(["git", "-C", folder, "rev-parse", "--show-toplevel"],
                         capture_output=True, text=True)
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else folder


def regenerate(path):
    """(current text, text with every marked block regenerated)."""
    with open(path) as f:
        text = f.read()
    blocks = list(BLOCK.finditer(text))
    if not blocks:
        raise Refused("%s has no <!-- bench-tables: DIR... --> or "
                      "<!-- bench-headline: DIR... --> block" % path)
    top = checkout_top(path)
    out, at = [], 0
    for m in blocks:
        a = parse_marker(m.group("args"))
        for d in a.dirs:
            require_committed(top, d)
        out += [text[at:m.start("body")], GENERATORS[m.group("kind")](a.dirs, top, allowed(a))]
        at = m.end("body")
    return text, "".join(out) + text[at:]


def main():
    p = argparse.ArgumentParser(prog="python3 -m forkbench.tables",
                                description=__doc__.split("\n")[0])
    p.add_argument("--update", metavar="FILE", help="regenerate its blocks in place")
    p.add_argument("--check", metavar="FILE", help="fail if a block is stale")
    p.add_argument("--headline", action="store_true",
                   help="print the headline table of DIRs instead of every table")
    p.add_argument("--allow-dirty", action="store_true")
    p.add_argument("--allow-unequal-keys", action="store_true")
    p.add_argument("dirs", nargs="*")
    a = p.parse_args()
    try:
        if a.update or a.check:
            old, new = regenerate(a.update or a.check)
            if a.update:
                with open(a.update, "w") as f:
                    f.write(new)
            elif old != new:
                sys.exit("tables: %s's benchmark tables differ from the committed results; "
                         "run PYTHONPATH=bench python3 -m forkbench.tables --update %s"
                         % (a.check, a.check))
            return
        if not a.dirs:
            p.error("give results folders, --update FILE or --check FILE")
        make = headline if a.headline else generate
        print(make(a.dirs, os.getcwd(), allowed(a)), end="")
    except Refused as e:
        sys.exit("tables: refused: %s" % e)


if __name__ == "__main__":
    main()
