#!/usr/bin/env python3
"""e2e-table.py -- the Redis latency experiment's table (and plot).

    e2e-table.py RESULTS_DIR LABEL[=NAME]... [--plot FILE] [--check]

Reads the AFORK-E2E lines (guest/redis-e2e latency) of
RESULTS_DIR/LABEL/console.txt for each boot LABEL (e2e-stock, e2e-patched,
e2e-optin; LABEL=NAME pools the boots given the same NAME, e.g. two
interleaved boots of one kernel: v2a=v2 v3a=v3 v2b=v2 v3b=v3), writes
RESULTS_DIR/e2e.tsv (every round) and prints per
kernel x size x cell the median and maximum over the rounds of: the
parent's fork time (latest_fork_usec), the worst PING within 1 s after the
fork, the worst PING over the save (or the AOF rewrite, or the replica's
full sync: the cells stock-rewrite, afork-rewrite, stock-sync, afork-sync),
and the event's length. The controls
(control-idle: the same load, no save; control-hog: a CPU hog of the save's
length on the child's CPU) have no fork. Then, per kernel and size, the
target ratios. --plot FILE draws fork time and worst PING per cell against
size (matplotlib; skipped with a message when it is missing). On the
patched kernels, the async_fork counters read around each save (the
"counters over the save" lines) give a second table: the page tables the
fork left to the child, how many the child copied, and each the parent
copied itself, by cause, with the parent's copy time. A third table gives
redis-afork's own account of its forks (the "# info" lines: its
after-fork hook's share of the fork time, CPU time, faults and involuntary
switches across fork(), child ready, quiet window). A fourth, when a boot
ran redis-forkcost: forktest's fork time with N page tables written inside
fork() and with N more mappings (the slopes: what one table, one mapping
costs the parent) and the idle BGSAVEs' fork cost per server. --check:
exit 1 when, on a patched kernel, redis-afork (quiet window on) has a
median fork time over 1.5x stock Redis's + 1 ms, or a median worst PING
within 1 s after the fork over 2x stock's + 5 ms (the CI comparison: 3
rounds on a 2-vCPU TCG guest are noisy, so only a clear loss fails), or
when a save's counters do not add up (deferred = child + parent copies)."""

# The CI comparison's tolerance: field -> (factor, ms).
CHECK_LIMITS = {"fork_ms": (1.5, 1.0), "worst1s_ms": (2.0, 5.0)}

import os
import statistics
import sys

FIELDS = ("fork_usec", "worst1s_ms", "worst_ms", "dur_ms", "base_ms", "p99_ms")
CELLS = ("stock", "afork-on", "afork-off", "afork-preempt", "stock-rewrite", "afork-rewrite",
         "stock-sync", "afork-sync", "control-idle", "control-hog")
# The other fork sites: (site, stock's cell, redis-afork's cell).
SITES = (("BGREWRITEAOF", "stock-rewrite", "afork-rewrite"), ("full sync", "stock-sync", "afork-sync"))
KERNELS = {"e2e-stock": "stock", "e2e-patched": "patched =2", "e2e-optin": "patched =1"}
PARENT_CAUSES = ("fault", "gup", "vma", "madvise", "zap", "exit", "fork")
COUNTERS_MARK = "async_fork counters over the save: "
INFO_MARK = "# info "
# redis-afork's INFO fork fields of its own account of a fork, as (field,
# column, divisor to ms or 1 for counts): where latest_fork_usec (the
# first table's fork) goes.
ACCOUNT = (("latest_fork_hook_usec", "hook ms", 1000.0),
           ("latest_fork_cpu_usec", "CPU ms", 1000.0), ("latest_fork_minor_faults", "faults", 1),
           ("latest_fork_involuntary_switches", "invol", 1),
           ("latest_fork_child_ready_usec", "ready ms", 1000.0),
           ("latest_fork_quiet_window_usec", "window ms", 1000.0))


def boots(labels):
    """LABEL[=NAME] arguments as (boot folder, kernel name) pairs."""
    return [tuple(a.split("=", 1)) if "=" in a else (a, a) for a in labels]


def read_rounds(results, labels):
    rows = []
    for folder, label in boots(labels):
        path = os.path.join(results, folder, "console.txt")
        if not os.path.exists(path):
            continue
        for line in open(path, errors="replace"):
            if COUNTERS_MARK in line:
                attach_counters(rows, label, line)
                continue
            if INFO_MARK in line:
                attach_info(rows, label, line)
                continue
            if "AFORK-E2E " not in line:
                continue
            kv = dict(w.split("=", 1) for w in line.split("AFORK-E2E ", 1)[1].split() if "=" in w)
            row = {"kernel": label, "mib": int(kv["mib"]), "round": int(kv["round"]), "cell": kv["cell"]}
            for f in FIELDS:
                row[f] = float(kv.get(f, "nan"))
            row["fork_ms"] = row["fork_usec"] / 1000.0
            rows.append(row)
    return rows


def attach_counters(rows, label, line):
    """A "# CELL: async_fork counters over the save: k=v ..." line belongs
    to the last round of that boot and cell."""
    cell = line.split("# ", 1)[-1].split(":", 1)[0].strip()
    kv = dict(w.split("=", 1) for w in line.split(COUNTERS_MARK, 1)[1].split() if "=" in w)
    for row in reversed(rows):
        if row["kernel"] == label and row["cell"] == cell:
            row["counters"] = {k: int(v) for k, v in kv.items()}
            return


def attach_info(rows, label, line):
    """A "# info CELL: field:value ..." line (redis-afork's INFO fork after
    that cell's save) belongs to the last round of that boot and cell."""
    cell, _, rest = line.split(INFO_MARK, 1)[1].partition(":")
    fields = dict(w.split(":", 1) for w in rest.split() if ":" in w)
    for row in reversed(rows):
        if row["kernel"] == label and row["cell"] == cell.strip():
            row["info"] = fields
            return


def print_account(rows):
    """Per kernel x size x redis-afork cell: the median / max over the
    rounds of where its fork time went, by its own INFO: the after-fork
    hook's share of latest_fork_usec, the main thread's CPU time,
    minor faults and involuntary switches across fork(), the child's ready
    time and the quiet window."""
    groups = {}
    for r in rows:
        if "info" in r:
            groups.setdefault((r["kernel"], r["mib"], r["cell"]), []).append(r["info"])
    if not groups:
        return
    print("\nredis-afork's account of its forks (INFO fork after each save; median / max over the rounds)")
    print(f"{'kernel':<11} {'MiB':>5} {'cell':<10} {'n':>3} " + " ".join(f"{c:>15}" for _, c, _ in ACCOUNT))
    for (kernel, mib, cell), infos in sorted(groups.items(), key=lambda kv: (str(kv[0][0]), kv[0][1], str(kv[0][2]))):
        cols = []
        for field, _, div in ACCOUNT:
            # With the window off, the field is still the last window's.
            skip = cell == "afork-off" and field == "latest_fork_quiet_window_usec"
            vals = [float(i[field]) / div for i in infos
                    if field in i and float(i[field]) >= 0 and not skip]
            cols.append(f"{statistics.median(vals):6.2f} /{max(vals):7.2f}" if vals else f"{'-':>15}")
        print(f"{KERNELS.get(kernel, kernel):<11} {mib:>5} {cell:<10} {len(infos):>3} " + " ".join(cols))


def parent_copies(c):
    """The tables the parent copied itself, all causes."""
    return sum(c.get("copied_" + k, 0) for k in PARENT_CAUSES)


def print_counters(rows):
    """Per kernel x size x cell: what the forks left to the child and who
    copied it; every round must add up."""
    groups, bad = {}, []
    for r in rows:
        c = r.get("counters")
        if not c:
            continue
        groups.setdefault((r["kernel"], r["mib"], r["cell"]), []).append(c)
        parent = parent_copies(c)
        if c.get("sessions_failed", 0) == 0 and c.get("deferred", 0) != c.get("child_copied", 0) + parent:
            bad.append(f"{KERNELS.get(r['kernel'], r['kernel'])} {r['mib']} MiB {r['cell']} round {r['round']}: "
                       f"deferred {c.get('deferred')} != child {c.get('child_copied')} + parent {parent}")
    if not groups:
        return bad
    print("\nasync_fork counters per save (median over the rounds; parent copies summed over the rounds, by cause; "
          "parent ms = its copy and wait time, median / max)")
    print(f"{'kernel':<11} {'MiB':>5} {'cell':<10} {'n':>3} {'deferred':>9} {'child':>7} {'parent':>7}  "
          f"{'parent copies by cause (all rounds)':<44} {'parent ms':>15} {'failed':>6}")
    for (kernel, mib, cell), cs in sorted(groups.items(), key=lambda kv: (str(kv[0][0]), kv[0][1], str(kv[0][2]))):
        med = lambda k: statistics.median(c.get(k, 0) for c in cs)
        totals = [(k, sum(c.get("copied_" + k, 0) for c in cs)) for k in PARENT_CAUSES]
        causes = ", ".join(f"{k} {n}" for k, n in totals if n)
        parent = statistics.median(parent_copies(c) for c in cs)
        ms = [c.get("parent_ns", 0) / 1e6 for c in cs]
        print(f"{KERNELS.get(kernel, kernel):<11} {mib:>5} {cell:<10} {len(cs):>3} {med('deferred'):>9.0f} "
              f"{med('child_copied'):>7.0f} {parent:>7.0f}  {causes or 'none':<44} "
              f"{statistics.median(ms):6.2f} /{max(ms):7.2f} {sum(c.get('sessions_failed', 0) for c in cs):>6}")
    for b in bad:
        print(f"e2e-table: counters do not add up: {b}")
    return bad


def write_tsv(results, rows):
    cols = ["kernel", "mib", "round", "cell", "fork_ms", "worst1s_ms", "worst_ms", "dur_ms", "base_ms", "p99_ms"]
    with open(os.path.join(results, "e2e.tsv"), "w") as out:
        out.write("\t".join(cols) + "\n")
        for r in rows:
            out.write("\t".join(str(r[c]) for c in cols) + "\n")


def summary(rows):
    """(kernel, mib, cell) -> {field: (median, max, n)}"""
    groups = {}
    for r in rows:
        groups.setdefault((r["kernel"], r["mib"], r["cell"]), []).append(r)
    out = {}
    for key, rs in groups.items():
        out[key] = {f: (statistics.median(x[f] for x in rs), max(x[f] for x in rs), len(rs))
                    for f in ("fork_ms", "worst1s_ms", "worst_ms", "dur_ms")}
    return out


def fmt(cell, f):
    med, mx, _ = cell[f]
    return f"{med:7.2f} /{mx:7.2f}"


def print_table(summ):
    print("\nredis-latency: median / max over the rounds (ms); fork = latest_fork_usec; "
          "worst PING within 1 s after the fork and over the whole save")
    print(f"{'kernel':<11} {'MiB':>5} {'cell':<13} {'n':>3} {'fork':>16} {'worst 1s':>16} {'worst save':>16} {'save/ctl s':>11}")
    for (kernel, mib, cell) in sorted(summ, key=lambda k: (list(KERNELS).index(k[0]) if k[0] in KERNELS else 9,
                                                           k[1], CELLS.index(k[2]) if k[2] in CELLS else 9)):
        s = summ[(kernel, mib, cell)]
        fork = fmt(s, "fork_ms") if not cell.startswith("control") else f"{'-':>16}"
        print(f"{KERNELS.get(kernel, kernel):<11} {mib:>5} {cell:<13} {s['fork_ms'][2]:>3} {fork} "
              f"{fmt(s, 'worst1s_ms')} {fmt(s, 'worst_ms')} {s['dur_ms'][0] / 1000:>11.1f}")


def ratio(a, b):
    """a / b; not a number when either is missing (a cell not run)."""
    if a != a or b != b:
        return float("nan")
    return a / b if b > 0 else float("inf")


def fmt_ratio(v):
    """A ratio as "1.23x", or "-" when a cell it needs was not run."""
    return "    -" if v != v else f"{v:5.2f}x"


def print_ratios(summ):
    print("\nratios (medians): afork-on fork vs stock fork; afork-on worst 1 s vs no-save control; "
          "afork-on worst save vs the worse control")
    for (kernel, mib) in sorted({(k, m) for k, m, _ in summ}):
        g = lambda c, f: summ.get((kernel, mib, c), {}).get(f, (float("nan"),))[0]
        ctl = max(g("control-idle", "worst_ms"), g("control-hog", "worst_ms"))
        rx = lambda a, b: fmt_ratio(ratio(a, b))
        print(f"  {KERNELS.get(kernel, kernel):<11} {mib:>5} MiB: fork {rx(g('afork-on', 'fork_ms'), g('stock', 'fork_ms'))} stock; "
              f"worst 1 s {rx(g('afork-on', 'worst1s_ms'), g('control-idle', 'worst1s_ms'))} idle control; "
              f"worst save {rx(g('afork-on', 'worst_ms'), ctl)} worse control; "
              f"CPU hog vs idle worst {rx(g('control-hog', 'worst_ms'), g('control-idle', 'worst_ms'))}")
        for site, stock_cell, afork_cell in SITES:
            if (kernel, mib, afork_cell) in summ or (kernel, mib, stock_cell) in summ:
                print(f"  {'':<11} {mib:>5} MiB, {site}: fork {rx(g(afork_cell, 'fork_ms'), g(stock_cell, 'fork_ms'))} stock's; "
                      f"worst 1 s {rx(g(afork_cell, 'worst1s_ms'), g(stock_cell, 'worst1s_ms'))} stock's; "
                      f"worst over the site {rx(g(afork_cell, 'worst_ms'), g(stock_cell, 'worst_ms'))} stock's, "
                      f"{rx(g(afork_cell, 'worst_ms'), ctl)} the worse control")
    base = [(m, summ[("e2e-stock", m, "stock")]["worst_ms"][0]) for k, m, c in summ if k == "e2e-stock" and c == "stock"]
    for mib, stock_worst in base:
        for kernel in ("e2e-patched", "e2e-optin"):
            s = summ.get((kernel, mib, "afork-on"))
            if s:
                print(f"  stock kernel + stock Redis vs {KERNELS[kernel]} + redis-afork at {mib} MiB, worst PING over the save: "
                      f"{ratio(stock_worst, s['worst_ms'][0]):.1f}x lower")


def plot(summ, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"e2e-table: no matplotlib: no plot ({path}); utils/install-deps.sh bench installs it")
        return
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    # One colour per series in every panel (the fork panel has no controls).
    series = [(k, c) for k in sorted({k for k, _, _ in summ}) for c in CELLS
              if any(kk == k and cc == c for kk, _, cc in summ)]
    colour = {sc: f"C{i % 10}" for i, sc in enumerate(series)}
    for (title, field, ax) in (("fork (latest_fork_usec)", "fork_ms", axes[0]),
                               ("worst PING within 1 s after fork", "worst1s_ms", axes[1]),
                               ("worst PING over the save", "worst_ms", axes[2])):
        for kernel in sorted({k for k, _, _ in summ}):
            for cell in CELLS:
                if field == "fork_ms" and cell.startswith("control"):
                    continue
                pts = sorted((m, s[field][0]) for (k, m, c), s in summ.items() if k == kernel and c == cell)
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", color=colour[(kernel, cell)],
                            label=f"{KERNELS.get(kernel, kernel)} kernel: {cell}")
        ax.set_title(title)
        ax.set_xlabel("data (MiB of 4 KiB values)")
        ax.set_ylabel("ms (median over rounds)")
        ax.set_yscale("log")
    axes[2].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    print(f"e2e-table: plot in {path}")


def fields_of(line):
    return dict(kv.split("=", 1) for kv in line.split()[1:] if "=" in kv)


def slope(points):
    """Least-squares slope of (x, y) points; None with fewer than 2 x."""
    if len({x for x, _ in points}) < 2:
        return None
    mx = sum(x for x, _ in points) / len(points)
    my = sum(y for _, y in points) / len(points)
    return sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x, _ in points)


def print_forkcost(results, labels):
    """The redis-forkcost step's lines (guest/redis-e2e forkcost), pooled
    per kernel name."""
    pooled = {}
    for folder, label in boots(labels):
        path = os.path.join(results, folder, "console.txt")
        if os.path.exists(path):
            pooled.setdefault(label, []).append(path)
    for label, paths in pooled.items():
        touch, vmas, saves = [], [], {}
        for line in (ln for path in paths for ln in open(path, errors="replace")):
            if line.startswith("AFORK-FORKTOUCH "):
                touch.append(fields_of(line))
            elif line.startswith("AFORK-FORKVMAS "):
                vmas.append(fields_of(line))
            elif line.startswith("AFORK-FORKCOST "):
                f = fields_of(line)
                saves.setdefault(f["cell"], []).append(f)
        if not touch and not vmas and not saves:
            continue
        print(f"\nFork cost, idle ({KERNELS.get(label, label)} kernel; median [min-max], us):")
        for lines, key, what in ((touch, "touch", "table written inside fork()"),
                                 (vmas, "vmas", "more mapping")):
            if not lines:
                continue
            pts = [(int(t[key]), float(t["fork_median_us"])) for t in lines]
            b = slope(pts)
            by_n = {}
            for n, us in pts:
                by_n.setdefault(n, []).append(us)
            print(f"  forktest, fork() by {key}: " +
                  ", ".join(f"{n}: {statistics.median(v):.0f}" for n, v in sorted(by_n.items())) +
                  (f"; one {what} costs the parent {b:.1f} us (slope)" if b is not None else ""))
        cols = ("fork_usec", "alone_usec", "cpu_usec", "hook_usec", "faults", "parent_tables")
        print("  " + "cell".ljust(12) + "".join(c.rjust(20) for c in cols))
        for cell, rs in saves.items():
            out = []
            for c in cols:
                v = [float(r[c]) for r in rs if c in r]
                out.append(f"{statistics.median(v):.0f} [{min(v):.0f}-{max(v):.0f}]" if v else "-")
            print("  " + f"{cell} x{len(rs)}".ljust(12) + "".join(o.rjust(20) for o in out))
        med = {cell: statistics.median(float(r["fork_usec"]) for r in rs) for cell, rs in saves.items()}
        for cell, base in (("stock", "stock Redis's"), ("afork-empty", "the empty redis-afork's")):
            if "afork" in med and cell in med and med[cell] > 0:
                print(f"  redis-afork's fork (median) {med['afork'] / med[cell]:.2f}x {base}")


def check(summ):
    bad = []
    for (kernel, mib, cell), s in summ.items():
        if kernel == "e2e-stock" or cell != "afork-on" or (kernel, mib, "stock") not in summ:
            continue
        st = summ[(kernel, mib, "stock")]
        for f, (factor, ms) in CHECK_LIMITS.items():
            verdict = "WORSE" if s[f][0] > factor * st[f][0] + ms else "ok"
            print(f"e2e-table: check {KERNELS.get(kernel, kernel)} {mib} MiB {f}: redis-afork {s[f][0]:.2f} ms, "
                  f"stock {st[f][0]:.2f} ms, limit {factor} x stock + {ms:g} ms: {verdict}")
            if verdict != "ok":
                bad.append(f"{KERNELS.get(kernel, kernel)} {mib} MiB: redis-afork {f} {s[f][0]:.2f} ms > {factor} x stock {st[f][0]:.2f} ms + {ms:g} ms")
    for b in bad:
        print(f"e2e-table: WORSE THAN STOCK: {b}")
    return not bad


def main(argv):
    args = argv[1:]
    plot_path = None
    do_check = "--check" in args
    args = [a for a in args if a != "--check"]
    if "--plot" in args:
        i = args.index("--plot")
        plot_path = args[i + 1]
        del args[i:i + 2]
    results, labels = args[0], args[1:]
    rows = read_rounds(results, labels)
    if not rows:
        print("e2e-table: no AFORK-E2E lines")
        print_forkcost(results, labels)
        return 1
    write_tsv(results, rows)
    summ = summary(rows)
    print_table(summ)
    print_ratios(summ)
    print_account(rows)
    unexplained = print_counters(rows)
    print_forkcost(results, labels)
    if plot_path:
        plot(summ, plot_path)
    if do_check:
        return 0 if check(summ) and not unexplained else 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
