"""plots.py -- the benchmark's pictures, drawn from a results folder.

  latency_timeline_<size>gb.png  PING round trips around the BGSAVE under load,
                                 one line per server (worst per 10 ms bin), from
                                 the probe files probe_<size>gb_<variant>_save.csv.gz
  fork_time_vs_size.png          parent-blocked fork time vs dataset size
  steady_rounds_<size>gb.png     steady scenario: fork time and client max
                                 latency per round, one line per variant

    python3 plots.py RESULTS_DIR     (bench.py calls draw() itself)
"""
import csv
import gzip
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

BIN_S = 0.01
COLORS = ["#c0392b", "#2471a3", "#229954", "#7d3c98", "#b7950b"]


def read_results(outdir):
    val, sizes, variants = {}, [], []
    with open(os.path.join(outdir, "results.csv")) as f:
        for r in csv.DictReader(f):
            size = float(r["size_gb"])
            val[(size, r["variant"], r["metric"])] = float(r["value"])
            if size not in sizes:
                sizes.append(size)
            if r["variant"] not in variants:
                variants.append(r["variant"])
    return val, sizes, variants


def read_probe(outdir, size, variant, run="save"):
    """(seconds after BGSAVE, rtt ms) of one load-with-save run, or None."""
    tag = "%sgb_%s_%s" % ("%g" % size, variant, run)
    path = os.path.join(outdir, "probe_%s.csv.gz" % tag)
    mark = os.path.join(outdir, "probe_%s.bgsave" % tag)
    if not (os.path.exists(path) and os.path.exists(mark)):
        return None
    with open(mark) as f:
        t0 = float(f.read())
    pts = []
    with gzip.open(path, "rt") as f:
        for r in csv.DictReader(f):
            pts.append((float(r["unix_time"]) - t0, float(r["rtt_ms"])))
    return pts


def worst_per_bin(pts):
    bins = {}
    for t, r in pts:
        b = int(t // BIN_S)
        bins[b] = max(bins.get(b, 0.0), r)
    keys = sorted(bins)
    return [k * BIN_S for k in keys], [bins[k] for k in keys]


def timeline(outdir, val, size, variants, run="save"):
    """run: "save" (fork scenario) or "roundN" (steady scenario)."""
    fig, ax = plt.subplots(figsize=(10, 4.8))
    end = 1.0
    pre = "save" if run == "save" else run
    for i, v in enumerate(variants):
        pts = read_probe(outdir, size, v, run)
        if not pts:
            continue
        save_s = val.get((size, v, pre + "_save_s"), 0.0)
        end = max(end, save_s)
        xs, ys = worst_per_bin([p for p in pts if -1.0 <= p[0] <= save_s + 1.0])
        label = "%s: fork %.1f ms, max client latency %.1f ms, save %.1f s" % (
            v, val.get((size, v, pre + "_fork_ms"), float("nan")),
            val.get((size, v, pre + "_max_ms"), float("nan")), save_s)
        ax.plot(xs, ys, color=COLORS[i % len(COLORS)], lw=0.9, label=label)
    ax.axvline(0, color="black", ls="--", lw=0.8)
    ax.text(0, 0.96, " BGSAVE sent", transform=ax.get_xaxis_transform(), fontsize=9)
    ax.set_yscale("log")
    ax.set_xlim(-1.0, end + 1.0)
    ax.set_xlabel("seconds since BGSAVE was sent")
    ax.set_ylabel("PING round trip, worst per 10 ms (ms, log)")
    what = "a BGSAVE" if run == "save" else "the BGSAVE of steady-state " + run
    ax.set_title("PING latency around %s under SET load, %g GB dataset" % (what, size))
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    suffix = "" if run == "save" else "_" + run
    path = os.path.join(outdir, "latency_timeline_%sgb%s.png" % ("%g" % size, suffix))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def fork_vs_size(outdir, val, sizes, variants):
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    for i, v in enumerate(variants):
        pts = [(val[(s, v, "used_memory_mb")] / 1024.0, val[(s, v, "idle_fork_ms_median")],
                val.get((s, v, "save_fork_ms")))
               for s in sizes if (s, v, "idle_fork_ms_median") in val]
        if not pts:
            continue
        c = COLORS[i % len(COLORS)]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", color=c,
                label="%s, idle (median of 3)" % v)
        loaded = [p for p in pts if p[2] is not None]
        ax.plot([p[0] for p in loaded], [p[2] for p in loaded], "x--", color=c,
                label="%s, under SET load" % v)
    ax.set_xlabel("dataset (used_memory, GB)")
    ax.set_ylabel("parent blocked in fork() (ms)")
    ax.set_title("Fork cost vs dataset size")
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = os.path.join(outdir, "fork_time_vs_size.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def steady_rounds(outdir, val, size, variants, rounds):
    """Fork time and client max latency per steady-state round."""
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4.5))
    xs = list(range(1, rounds + 1))
    for i, v in enumerate(variants):
        c = COLORS[i % len(COLORS)]
        a1.plot(xs, [val.get((size, v, "round%d_fork_ms" % r), float("nan")) for r in xs],
                "o-", color=c, label=v)
        a2.plot(xs, [val.get((size, v, "round%d_max_ms" % r), float("nan")) for r in xs],
                "o-", color=c, label=v)
    a1.set_title("parent blocked in fork(), %g GB" % size)
    a1.set_ylabel("ms")
    a2.set_title("client max latency during the save, %g GB" % size)
    a2.set_ylabel("ms")
    for a in (a1, a2):
        a.set_xlabel("round (write load over the keyspace, then BGSAVE)")
        a.set_xticks(xs)
        a.set_ylim(bottom=0)
        a.grid(True, alpha=0.3)
        a.legend(fontsize=8)
    fig.tight_layout()
    path = os.path.join(outdir, "steady_rounds_%sgb.png" % ("%g" % size))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def draw(outdir):
    val, sizes, variants = read_results(outdir)
    rounds = sorted({int(m[5:].split("_")[0]) for (_, _, m) in val if m.startswith("round")})
    if rounds:
        made = [steady_rounds(outdir, val, s, variants, rounds[-1]) for s in sizes]
        made += [timeline(outdir, val, s, variants, "round%d" % rounds[-1]) for s in sizes]
        return made
    made = [timeline(outdir, val, s, variants) for s in sizes]
    made.append(fork_vs_size(outdir, val, sizes, variants))
    return made


if __name__ == "__main__":
    for p in draw(sys.argv[1]):
        print(p)
