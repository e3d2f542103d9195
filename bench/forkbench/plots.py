"""forkbench.plots -- the benchmark's pictures, drawn from a results folder.

  latency_timeline_<size>gb.png  PING round trips around the BGSAVE under load
                                 (worst per 10 ms bin): every repetition of every
                                 server overlaid, aligned on the fork's start
                                 (from the server log; on the BGSAVE where the
                                 log does not say), from the probe files
                                 probe_<size>gb_<variant>_r<rep>_save.csv.gz
                                 (the other fork sites: around the BGREWRITEAOF
                                 or the REPLICAOF, from ..._rewrite / ..._sync)
  fork_time_vs_size.png          parent-blocked fork time vs dataset size:
                                 median, error bars min to max over repetitions
  client_latency_vs_size.png     client max and p99 during the save vs size,
                                 per variant (median, min-max), with the no-save
                                 control of the same runs dotted
  steady_rounds_<size>gb.png     steady scenario: fork time and client max per
                                 round (median, min-max)
  fill_timeline_<size>gb.png     fill scenarios: PING round trips during the fill
                                 from empty, every repetition of every server,
                                 aligned on the fill's start (probe_..._fill.start)
  fill_latency_vs_size.png       fill scenarios: worst PING and p99.9 during the
                                 fill vs size (median, min-max)
  shapes_vs_stock_<size>gb.png   shapes: each shape's memory and PING figures as
                                 a ratio to stock's, per server (median, min-max
                                 of the repetitions' ratios)
  plots.json                     what each picture holds (series and points),
                                 so a test can check them without reading PNGs

    python3 -m forkbench.plots RESULTS_DIR     (make bench runs it so once the runs are done)
"""
import csv
import gzip
import json
import os
import re
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from . import report  # noqa: E402

BIN_S = 0.01
COLORS = ["#c0392b", "#2471a3", "#229954", "#7d3c98", "#b7950b", "#148f77", "#6e2c00"]
NAN = float("nan")


def color(res, variant):
    return COLORS[res.variants.index(variant) % len(COLORS)]


def spread_of(res, size, variant, metric):
    """(median, below, above) of a metric over repetitions, or None."""
    vals = res.values.get((size, variant, metric))
    if not vals:
        return None
    med = statistics.median(vals)
    return med, med - min(vals), max(vals) - med


# ---------------------------------------------------------------- timelines

def probe_files(outdir, size, variant, run, mark_ext=".bgsave"):
    """(rep, probe csv, marks file) of every repetition of one load run;
    folders from before repetitions have one, without _r<rep> (rep None).
    mark_ext: .bgsave (the save's marks), .start (a growth load's start)."""
    pattern = re.compile(r"probe_%sgb_%s(?:_r(\d+))?_%s\.csv\.gz$"
                         % (re.escape("%g" % size), re.escape(variant), re.escape(run)))
    found = []
    for name in os.listdir(outdir):
        m = pattern.match(name)
        mark = os.path.join(outdir, name[:-len(".csv.gz")] + mark_ext)
        if m and os.path.exists(mark):
            rep = int(m.group(1)) if m.group(1) else None
            found.append((rep, os.path.join(outdir, name), mark))
    return sorted(found, key=lambda f: f[0] or 0)


def read_probe(path, mark):
    """(seconds since the fork began, rtt ms), and whether the fork's start
    was known (else the zero is when BGSAVE was sent)."""
    with open(mark) as f:
        times = [float(x) for x in f.read().split()]
    t0 = times[1] if len(times) > 1 else times[0]
    pts = []
    with gzip.open(path, "rt") as f:
        for r in csv.DictReader(f):
            pts.append((float(r["unix_time"]) - t0, float(r["rtt_ms"])))
    return pts, len(times) > 1


def worst_per_bin(pts):
    bins = {}
    for t, r in pts:
        b = int(t // BIN_S)
        bins[b] = max(bins.get(b, 0.0), r)
    keys = sorted(bins)
    return [k * BIN_S for k in keys], [bins[k] for k in keys]


def timeline_label(res, size, variant, pre, reps):
    fork = spread_of(res, size, variant, pre + "_fork_ms")
    worst = spread_of(res, size, variant, pre + "_max_ms")
    return "%s (%d runs): fork %s ms, client max %s ms" % (
        variant, reps, report.fmt_num(fork[0]) if fork else "n/a",
        report.fmt_num(worst[0]) if worst else "n/a")


# The other fork sites (forkbench.sites): scenario -> (run and prefix of
# its figures, what the timeline calls it).
SITE_RUNS = {"aofrewrite": ("rewrite", "a BGREWRITEAOF"),
             "sync-disk": ("sync", "a replica's full sync (disk-based)"),
             "sync-diskless": ("sync", "a replica's full sync (diskless)")}


def timeline(outdir, res, size, run="save"):
    """run: "save" (fork scenario), "roundN" (steady scenario), or a fork
    site's prefix (rewrite, sync)."""
    fig, ax = plt.subplots(figsize=(10, 4.8))
    pre = "save" if run == "save" else run
    site = SITE_RUNS.get(res.machine.get("scenario"))
    length = pre + "_s" if site and run == site[0] else pre + "_save_s"
    end, series, aligned_all = 1.0, [], True
    for v in res.variants:
        files = probe_files(outdir, size, v, run)
        saves = res.values.get((size, v, length), [0.0])
        end = max(end, max(saves))
        for i, (rep, path, mark) in enumerate(files):
            pts, aligned = read_probe(path, mark)
            aligned_all = aligned_all and aligned
            xs, ys = worst_per_bin([p for p in pts if -1.0 <= p[0] <= max(saves) + 1.0])
            label = timeline_label(res, size, v, pre, len(files)) if i == 0 else None
            ax.plot(xs, ys, color=color(res, v), lw=0.8, alpha=0.65, label=label)
            series.append({"variant": v, "rep": rep, "points": len(xs), "fork_aligned": aligned})
    ax.axvline(0, color="black", ls="--", lw=0.8)
    zero = "fork starts" if aligned_all else "fork starts (BGSAVE sent where the log lacks it)"
    ax.text(0, 0.96, " " + zero, transform=ax.get_xaxis_transform(), fontsize=9)
    ax.set_yscale("log")
    ax.set_xlim(-1.0, end + 1.0)
    ax.set_xlabel("seconds since the fork began")
    ax.set_ylabel("PING round trip, worst per 10 ms (ms, log)")
    what = ("a BGSAVE" if run == "save" else site[1] if length == pre + "_s"
            else "the BGSAVE of steady-state " + run)
    ax.set_title("PING latency around %s under SET load, %g GB, every repetition"
                 % (what, size))
    ax.grid(True, which="both", alpha=0.3)
    if series:
        ax.legend(loc="upper right", fontsize=8)
    suffix = "" if run == "save" else "_" + run
    return save(fig, outdir, "latency_timeline_%sgb%s.png" % ("%g" % size, suffix),
                "timeline", series)


# ---------------------------------------------------------------- vs size

def dataset_gb(res, size, variant):
    s = spread_of(res, size, variant, "used_memory_mb")
    return s[0] / 1024.0 if s else size


def errorbar_series(ax, res, variant, metric, fmt, label, **kw):
    """Median with min-max bars over the sizes that have `metric`."""
    pts = [(dataset_gb(res, s, variant), spread_of(res, s, variant, metric))
           for s in res.sizes]
    pts = [(x, sp) for x, sp in pts if sp]
    if not pts:
        return None
    ax.errorbar([x for x, _ in pts], [sp[0] for _, sp in pts],
                yerr=[[sp[1] for _, sp in pts], [sp[2] for _, sp in pts]],
                fmt=fmt, color=color(res, variant), capsize=4, label=label, **kw)
    return {"variant": variant, "metric": metric, "points": len(pts),
            "x_max": max(x for x, _ in pts)}


def fork_vs_size(outdir, res, idle="idle_fork_ms_median", loaded="save_fork_ms"):
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    series = []
    for v in res.variants:
        series.append(errorbar_series(ax, res, v, idle, "o-", "%s, idle" % v))
        series.append(errorbar_series(ax, res, v, loaded, "x--",
                                      "%s, under SET load" % v))
    ax.set_xlabel("dataset (used_memory, GB)")
    ax.set_ylabel("parent blocked in fork() (ms)")
    ax.set_title("Fork cost vs dataset size (median, bars: min to max)")
    finish_axes(ax, series)
    return save(fig, outdir, "fork_time_vs_size.png", "errorbars", series)


def client_vs_size(outdir, res, pre="save", during="the save"):
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    series = []
    for ax, what, ctl, title in ((axes[0], pre + "_max_ms", "nosave_max_ms", "client max"),
                                 (axes[1], pre + "_p99_ms", "nosave_p99_ms", "client p99")):
        mine = []
        for v in res.variants:
            mine.append(errorbar_series(ax, res, v, what, "o-", "%s, during %s" % (v, during)))
            mine.append(errorbar_series(ax, res, v, ctl, "s:", "%s, no save" % v, alpha=0.5))
        ax.set_title("%s (median, bars: min to max)" % title)
        ax.set_xlabel("dataset (used_memory, GB)")
        ax.set_ylabel("ms")
        finish_axes(ax, mine)
        series += mine
    return save(fig, outdir, "client_latency_vs_size.png", "errorbars", series)


def steady_rounds(outdir, res, size, rounds):
    """Fork time and client max latency per steady-state round."""
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4.5))
    xs = list(range(1, rounds + 1))
    series = []
    for v in res.variants:
        for ax, key in ((a1, "fork_ms"), (a2, "max_ms")):
            sp = [spread_of(res, size, v, "round%d_%s" % (r, key)) for r in xs]
            ax.errorbar(xs, [s[0] if s else NAN for s in sp],
                        yerr=[[s[1] if s else 0 for s in sp], [s[2] if s else 0 for s in sp]],
                        fmt="o-", color=color(res, v), capsize=4, label=v)
            series.append({"variant": v, "metric": key, "points": sum(1 for s in sp if s)})
    a1.set_title("parent blocked in fork(), %g GB" % size)
    a2.set_title("client max latency during the save, %g GB" % size)
    for a in (a1, a2):
        a.set_ylabel("ms")
        a.set_xlabel("round (write load over the keyspace, then BGSAVE)")
        finish_axes(a)
        a.set_xticks(xs)
        a.set_xlim(0.5, rounds + 0.5)
    return save(fig, outdir, "steady_rounds_%sgb.png" % ("%g" % size), "errorbars", series)


# ---------------------------------------------------------------- growth

def fill_timeline(outdir, res, size):
    """The fill scenarios: the PING round trip during the fill from empty,
    every repetition of every server, aligned on the fill's start."""
    fig, ax = plt.subplots(figsize=(10, 4.8))
    end, series = 1.0, []
    for v in res.variants:
        files = probe_files(outdir, size, v, "fill", ".start")
        end = max([end] + res.values.get((size, v, "fill_s"), []))
        worst = spread_of(res, size, v, "fill_max_ping_ms")
        for i, (rep, path, mark) in enumerate(files):
            pts, _ = read_probe(path, mark)
            xs, ys = worst_per_bin([p for p in pts if -1.0 <= p[0]])
            label = ("%s (%d runs): worst PING %s ms" % (
                v, len(files), report.fmt_num(worst[0]) if worst else "n/a")
                     if i == 0 else None)
            ax.plot(xs, ys, color=color(res, v), lw=0.8, alpha=0.65, label=label)
            series.append({"variant": v, "rep": rep, "points": len(xs)})
    ax.set_yscale("log")
    ax.set_xlim(-1.0, end + 1.0)
    ax.set_xlabel("seconds since the fill began")
    ax.set_ylabel("PING round trip, worst per 10 ms (ms, log)")
    ax.set_title("PING latency while redis-benchmark fills an empty server to %g GB%s"
                 % (size, ", free memory fragmented"
                    if res.machine.get("scenario") == "fill-fragmented" else ""))
    ax.grid(True, which="both", alpha=0.3)
    if series:
        ax.legend(loc="upper right", fontsize=8)
    return save(fig, outdir, "fill_timeline_%sgb.png" % ("%g" % size), "timeline", series)


def fill_vs_size(outdir, res):
    """Worst PING and p99.9 during the fill against the size."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    series = []
    for ax, metric, title in ((axes[0], "fill_max_ping_ms", "worst PING during the fill"),
                              (axes[1], "fill_ping_p999_ms", "PING p99.9 during the fill")):
        mine = [errorbar_series(ax, res, v, metric, "o-", v) for v in res.variants]
        ax.set_title("%s (median, bars: min to max)" % title)
        ax.set_xlabel("dataset at the end (used_memory, GB)")
        ax.set_ylabel("ms")
        finish_axes(ax, mine)
        series += mine
    return save(fig, outdir, "fill_latency_vs_size.png", "errorbars", series)


# The shapes' figures in shapes_vs_stock.png: memory, then the probe.
SHAPE_MEMORY = ["small_empty_rss_mb", "small_rss_mb", "many_rss_mb", "churn_rss_mb",
                "churn_defrag_rss_mb", "churn_defrag_host_used_mb", "maxmem_peak_rss_mb"]
SHAPE_STALLS = ["churn_max_ping_ms", "churn_ping_p99_ms", "maxmem_max_ping_ms",
                "maxmem_ping_p99_ms"]


def ratio_spread(res, size, variant, metric):
    """(median, below, above) of variant / baseline, repetition by
    repetition (the runs of a repetition are interleaved), or None."""
    mine, base = res.values.get((size, variant, metric)), res.values.get(
        (size, res.baseline, metric))
    if not mine or not base:
        return None
    ratios = [a / b for a, b in zip(mine, base) if b]
    if not ratios:
        return None
    med = statistics.median(ratios)
    return med, med - min(ratios), max(ratios) - med


def shapes_vs_stock(outdir, res, size):
    """Each shape's memory and stalls as a ratio to the baseline's, per
    variant: median with min-max bars over the repetitions."""
    large = report.large_names(res)
    rows = [("memory", SHAPE_MEMORY + [n + "_rss_mb" for n in large]),
            ("PING", SHAPE_STALLS + [n + k for n in large
                                     for k in ("_fill_max_ping_ms", "_save_max_ping_ms")])]
    fig, axes = plt.subplots(2, 1, figsize=(11, 8))
    others = [v for v in res.variants if v != res.baseline]
    series = []
    for ax, (what, metrics) in zip(axes, rows):
        metrics = [m for m in metrics if (size, res.baseline, m) in res.values]
        width = 0.8 / max(1, len(others))
        for i, v in enumerate(others):
            sp = [ratio_spread(res, size, v, m) for m in metrics]
            xs = [k + (i - (len(others) - 1) / 2.0) * width for k in range(len(metrics))]
            ax.bar(xs, [s[0] if s else NAN for s in sp], width,
                   yerr=[[s[1] if s else 0 for s in sp], [s[2] if s else 0 for s in sp]],
                   color=color(res, v), capsize=3, label=v)
            series.append({"variant": v, "metric": what, "points": sum(1 for s in sp if s)})
        ax.axhline(1.0, color="black", lw=0.8)
        ax.set_xticks(range(len(metrics)))
        ax.set_xticklabels(metrics, rotation=20, ha="right", fontsize=7)
        ax.set_ylabel("ratio to %s" % res.baseline)
        ax.set_title("%s, %g GB: %s / %s (median, bars: min to max over the repetitions)"
                     % (what, size, "each server", res.baseline))
        ax.grid(True, axis="y", alpha=0.3)
        if others:
            ax.legend(fontsize=7)
    return save(fig, outdir, "shapes_vs_stock_%sgb.png" % ("%g" % size), "bars", series)


# ---------------------------------------------------------------- common

def finish_axes(ax, series=()):
    """Axes from 0, a margin right of the last point, a grid, a legend."""
    right = max([s["x_max"] for s in series if s and "x_max" in s] or [0])
    if right > 0:
        ax.set_xlim(0, right * 1.08)
    else:
        ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)


def save(fig, outdir, name, kind, series):
    fig.tight_layout()
    fig.savefig(os.path.join(outdir, name), dpi=110)
    plt.close(fig)
    return {"file": name, "kind": kind, "series": [s for s in series if s]}


def draw(outdir):
    res = report.read(outdir)
    rounds = sorted({int(m[5:].split("_")[0]) for (_, _, m) in res.values
                     if m.startswith("round")})
    site = SITE_RUNS.get(res.machine.get("scenario"))
    scenario = res.machine.get("scenario")
    if scenario in ("fill", "fill-fragmented"):
        made = [fill_timeline(outdir, res, s) for s in res.sizes] + [fill_vs_size(outdir, res)]
    elif scenario == "shapes":
        made = [shapes_vs_stock(outdir, res, s) for s in res.sizes]
    elif rounds:
        made = [steady_rounds(outdir, res, s, rounds[-1]) for s in res.sizes]
        made += [timeline(outdir, res, s, "round%d" % rounds[-1]) for s in res.sizes]
    elif site:
        pre = site[0]
        idle = "idle_rewrite_fork_ms" if pre == "rewrite" else "idle_fork_ms_median"
        made = [timeline(outdir, res, s, pre) for s in res.sizes]
        made += [fork_vs_size(outdir, res, idle, pre + "_fork_ms"),
                 client_vs_size(outdir, res, pre, "the " + pre)]
    else:
        made = [timeline(outdir, res, s) for s in res.sizes]
        made += [fork_vs_size(outdir, res), client_vs_size(outdir, res)]
    with open(os.path.join(outdir, "plots.json"), "w") as f:
        json.dump(made, f, indent=1)
    return [os.path.join(outdir, m["file"]) for m in made]


if __name__ == "__main__":
    for p in draw(sys.argv[1]):
        print(p)
