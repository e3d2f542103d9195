"""make bench: stock Redis, redis-afork and any peer side by side: what a fork costs.

--repeat N repetitions (default 5): each runs every variant once per size, on
a fresh server with the same keys, in an order that changes from one
repetition to the next (runplan). One run of one server:

  populate   keys key:000000000000 .. key:<N-1> (the names redis-benchmark -r
             writes), values of --value-size bytes; the first server of a
             size fills up to the size asked for and fixes N for every
             other server of that size (checked with DBSIZE);
  idle       --idle-saves BGSAVEs with no load: parent blocked time
             (latest_fork_usec, and redis-afork's INFO fork fields), save
             time, COW bytes;
  load       redis-benchmark -t set -r N -d <size> -c 50 -P 4 for a fixed
             time, once without a save (the control) and once with a BGSAVE
             started a third of the way in; a PING probe on its own
             connection records every round trip (probe); client latency
             during the save is also given against the control;
  memory     peak RSS (VmHWM), fragmentation.

That is the fork scenario (forkbench.fork). forkbench.registry names the
function that runs each --scenario; the phases they share are
forkbench.phases'.

--scenario steady replaces idle + load by a first BGSAVE, the control, and
--rounds rounds of load + BGSAVE (fork-thp's steady state, forkbench.steady). --scenario
aofrewrite, sync-disk and sync-diskless fork at the other sites under the
same load: BGREWRITEAOF with appendonly yes, a replica's full sync
(forkbench.sites).

--scenario fill, fill-fragmented and shapes fork nowhere: an empty server
filled by redis-benchmark (on a host whose free memory is fragmented),
and the shapes where huge pages have hurt Redis (forkbench.growth,
forkbench.shapes).

--peer NAME=BINARY[:ARGS] adds any RESP server as one more variant; a peer
that fails to start or lacks a command the bench needs is reported and
skipped. The machine is checked before and watched during the run
(machine); --hold-reporting holds a VM's free page reporting back for the
run, standing in for a host that does not take freed memory back.

Writes to the output folder: results.csv (every figure of every run),
runs.csv (what ran when, and what else used the CPU meanwhile),
machine.json, monitor.csv.gz, summary.csv and results.md (report: median
and spread, ratio to the baseline with its confidence interval, verdict),
the probe timelines and the plots (plots, in a process of its own). Run through
bench/run.sh (python3 -m forkbench).
"""
import argparse
import atexit
import os
import random
import shutil
import subprocess
import sys
import time

from . import machine, report, runplan
from .variants import GIB, VARIANTS, largest_need, memory_factor
from .progress import START, Progress, note, fmt_size
from .registry import SCENARIOS
from . import growth, phases, shapes
from .load import start_module
from .peers import parse_peer, check_peers
from .records import source_state, machine_record, write_json, RUNS_HEADER, append_run, append_figures


def refuse_sizes_that_do_not_fit(sizes, variants, scenario="fork"):
    free = machine.meminfo("MemAvailable")
    bad = False
    for s in sizes:
        need, v = largest_need(s, variants, scenario)
        if need > free:
            bad = True
            what = ("during a full sync under writes, the replica and the writes "
                    "buffered meanwhile included" if scenario.startswith("sync")
                    else GROWTH_NEEDS.get(scenario, "during a save under writes"))
            print("bench: size %s GB does not fit: it needs %.1f GiB of free memory "
                  "(%s, the largest variant: %gx the dataset %s, "
                  "plus 0.5 GiB), and %.1f GiB is available"
                  % (fmt_size(s), need / GIB, v, memory_factor(v, scenario), what,
                     free / GIB), file=sys.stderr)
    if bad:
        sys.exit(2)


# What a growth scenario's memory factor covers (variants.GROWTH_MEMORY_FACTOR).
GROWTH_NEEDS = {"fill": "while filled from empty",
                "fill-fragmented": "while filled from empty",
                "shapes": "for the large values' BGSAVE under writes"}


def refuse_many_that_do_not_fit(args):
    """The shapes' many instances run at once, whatever the size."""
    if args.scenario != "shapes" or "many" not in args.shapes:
        return
    need, free = shapes.many_need(args), machine.meminfo("MemAvailable")
    if need > free:
        print("bench: the many shape does not fit: %d servers of %g MB need %.1f GiB of free "
              "memory (1.3x, plus 0.5 GiB), and %.1f GiB is available"
              % (args.many_servers, args.many_mb, need / GIB, free / GIB), file=sys.stderr)
        sys.exit(2)


def refuse_fragment_that_does_not_fit(args):
    """fill-fragmented: the fragmenter must leave every size's servers
    what they need (growth.fragment_plan)."""
    if args.scenario != "fill-fragmented":
        return
    cap = None if args.fragment_max_gb is None else int(args.fragment_max_gb * GIB)
    for s in args.sizes:
        need, _ = largest_need(s, args.variants, args.scenario)
        try:
            growth.fragment_plan(growth.available(), need, cap)
        except growth.FragmentRefused as e:
            print("bench: fill-fragmented at %s GB: %s" % (fmt_size(s), e), file=sys.stderr)
            sys.exit(2)


def add_growth_args(p):
    """Options of the fill, fill-fragmented and shapes scenarios."""
    g = p.add_argument_group("fill, fill-fragmented and shapes scenarios (forkbench.growth)")
    g.add_argument("--fill-clients", type=int, default=phases.FILL_CLIENTS,
                   help="the fill's redis-benchmark -c")
    g.add_argument("--fill-pipeline", type=int, default=phases.FILL_PIPELINE,
                   help="the fill's redis-benchmark -P")
    g.add_argument("--fill-requests", type=float, default=phases.FILL_REQUESTS,
                   help="the fill's requests as a multiple of its keyspace (-n / -r)")
    g.add_argument("--fragment-max-gb", type=float, default=None,
                   help="fill-fragmented: fragment at most this much memory (GB; default: "
                        "most of what the servers leave free)")
    g.add_argument("--shapes", default=" ".join(shapes.SHAPES),
                   help="shapes scenario: which shapes, of '%s'" % " ".join(shapes.SHAPES))
    g.add_argument("--small-mb", type=float, default=10, help="small: the filled server (MB)")
    g.add_argument("--many-servers", type=int, default=8, help="many: how many servers")
    g.add_argument("--many-mb", type=float, default=100, help="many: each server's data (MB)")
    g.add_argument("--churn-batch", type=int, default=1000,
                   help="churn: keys deleted or written per Lua call")
    g.add_argument("--churn-value-size", type=int, default=512,
                   help="churn: the size of the values written again (bytes); another size "
                        "class than --value-size's leaves the survivors' pages part empty, "
                        "which is what activedefrag compacts")
    g.add_argument("--defrag-seconds", type=float, default=300,
                   help="churn: how long activedefrag may run before the shape stops it")
    g.add_argument("--large-values", default="131072 1048576",
                   help="large: value sizes (bytes)")
    g.add_argument("--large-pipeline", type=int, default=1,
                   help="large: the fill's and the save's load's redis-benchmark -P")
    g.add_argument("--save-lead-seconds", type=float, default=1.0,
                   help="large: the write load before the BGSAVE")
    g.add_argument("--maxmemory-keyspace", type=float, default=2.0,
                   help="maxmemory: the load's keys, as a multiple of those that fit")
    g.add_argument("--maxmemory-seconds", type=float, default=20,
                   help="maxmemory: how long the load goes on at the limit")


def check_growth_args(p, a):
    try:
        a.shapes = shapes.parse_shapes(a.shapes)
    except ValueError as e:
        p.error("--shapes: %s" % e)
    try:
        a.large_values = [int(v) for v in a.large_values.split()]
    except ValueError:
        p.error("--large-values: %r is not a list of byte counts" % a.large_values)
    if not a.large_values or any(v < 1 for v in a.large_values):
        p.error("--large-values: give one or more sizes of 1 byte or more")
    for name in ("fill_clients", "fill_pipeline", "many_servers", "churn_batch",
                 "churn_value_size", "large_pipeline"):
        if getattr(a, name) < 1:
            p.error("--%s: give 1 or more" % name.replace("_", "-"))
    for name in ("fill_requests", "small_mb", "many_mb", "maxmemory_keyspace"):
        if getattr(a, name) <= 0:
            p.error("--%s: give a number above 0" % name.replace("_", "-"))
    if a.maxmemory_keyspace <= 1:
        p.error("--maxmemory-keyspace: give more than 1 (the load must go past the limit)")
    for name in ("defrag_seconds", "save_lead_seconds", "maxmemory_seconds"):
        if getattr(a, name) < 0:
            p.error("--%s: give 0 or more" % name.replace("_", "-"))
    if a.fragment_max_gb is not None and a.fragment_max_gb <= 0:
        p.error("--fragment-max-gb: give a number above 0")


def parse_args():
    p = argparse.ArgumentParser(prog="python3 -m forkbench", description=__doc__.split("\n")[0])
    p.add_argument("--sizes", default="1", help="dataset sizes in GB, e.g. '1 4 8'")
    p.add_argument("--repeat", type=int, default=5,
                   help="repetitions: every variant runs once per size in each")
    p.add_argument("--order", default="rotate", choices=("rotate", "random"),
                   help="variant order per repetition: rotations, or shuffled (--seed)")
    p.add_argument("--seed", type=int, default=None, help="for --order random")
    p.add_argument("--scenario", default="fork", choices=sorted(SCENARIOS),
                   help="fork: idle forks and one save under load; steady: rounds of "
                        "load + save (steady state, fork-thp); aofrewrite: BGREWRITEAOF "
                        "under load; sync-disk, sync-diskless: a replica's full sync "
                        "under load; fill, fill-fragmented: a server filled from empty "
                        "(free memory fragmented); shapes: where huge pages hurt Redis")
    p.add_argument("--variants", default=None, help="default: per scenario")
    p.add_argument("--peer", action="append", default=[], metavar="NAME=BINARY[:ARGS]",
                   help="one more variant: any RESP server (repeatable)")
    p.add_argument("--replica-variant", default=None, metavar="VARIANT",
                   help="sync scenarios: the replica's variant (default: the primary's own)")
    p.add_argument("--rounds", type=int, default=3,
                   help="steady scenario rounds (the summary skips round 1)")
    p.add_argument("--pass-margin-seconds", type=float, default=3.0,
                   help="steady scenario: how long the load goes on past the expected end "
                        "of the re-collapse")
    p.add_argument("--afork-bin", required=True, help="folder with redis-afork's programs")
    p.add_argument("--stock-bin", required=True, help="folder with stock's redis-server")
    p.add_argument("--out", required=True, help="results folder (created)")
    p.add_argument("--value-size", type=int, default=256)
    p.add_argument("--load-seconds", type=float, default=15)
    p.add_argument("--calibrate-seconds", type=float, default=1.5,
                   help="length of the run that measures a server's request rate")
    p.add_argument("--idle-saves", type=int, default=3, help="fork scenario: idle BGSAVEs")
    p.add_argument("--idle-check-seconds", type=float, default=3.0,
                   help="how long the machine is watched before the run")
    p.add_argument("--no-pretouch", action="store_true",
                   help="skip touching the run's memory once before it starts")
    p.add_argument("--hold-reporting", action="store_true",
                   help="a VM whose balloon reports free memory to its host: hold the reports "
                        "back for the run, after the pre-touch, to stand in for a host without "
                        "them; where the kernel caps the hold, the run's memory is touched again "
                        "before each run (needs root and a kernel with page_reporting parameters)")
    p.add_argument("--require-clean", action="store_true",
                   help="refuse to run on uncommitted changes (else results are marked -dirty)")
    p.add_argument("--scratch", default=None, help="where servers keep their RDB files")
    add_growth_args(p)
    a = p.parse_args()
    check_args(p, a)
    check_growth_args(p, a)
    return a


def check_args(p, a):
    try:
        a.sizes = [float(s) for s in a.sizes.split()]
    except ValueError:
        p.error("--sizes: %r is not a list of numbers (GB)" % a.sizes)
    if not a.sizes or any(s <= 0 for s in a.sizes):
        p.error("--sizes: give one or more sizes above 0 (GB)")
    if a.repeat < 1:
        p.error("--repeat: give 1 or more repetitions")
    if a.idle_saves < 1 or a.rounds < 1:
        p.error("--idle-saves and --rounds: give 1 or more")
    if a.pass_margin_seconds < 0:
        p.error("--pass-margin-seconds: give 0 or more")
    a.variants = (a.variants or SCENARIOS[a.scenario].variants).split()
    for v in a.variants:
        if v not in VARIANTS:
            p.error("--variants: unknown variant %r (known: %s)" % (v, ", ".join(VARIANTS)))
    a.peers = {}
    for text in a.peer:
        try:
            name, binary, extra = parse_peer(text)
        except ValueError as e:
            p.error("--peer: %s" % e)
        if name in a.peers:
            p.error("--peer: %r given twice" % name)
        # Servers run in folders of their own: a relative path is made absolute.
        found = shutil.which(binary) or binary
        a.peers[name] = {"binary": os.path.abspath(found) if "/" in found else found,
                         "args": extra}
        a.variants.append(name)
    a.replica_variant = getattr(a, "replica_variant", None)
    if a.replica_variant is not None:
        if not a.scenario.startswith("sync"):
            p.error("--replica-variant: only the sync scenarios start a replica")
        if a.replica_variant not in VARIANTS and a.replica_variant not in a.peers:
            p.error("--replica-variant: unknown variant %r" % a.replica_variant)
    if a.seed is None:
        a.seed = random.SystemRandom().randrange(1 << 31)
    a.tools = a.afork_bin
    a.keys_by_size = {}
    a.reporting_was = a.reporting_held = None
    for d in (a.afork_bin, a.stock_bin):
        if not os.access(os.path.join(d, "redis-server"), os.X_OK):
            p.error("no redis-server in %s (run make and make stock)" % d)


def prepare_machine(args):
    """Watch the machine idle, pre-touch the memory of the largest run."""
    note("checking the machine for %gs before the run" % args.idle_check_seconds)
    before = machine.idle_check(args.idle_check_seconds)
    for w in before["warnings"]:
        note("warning: " + w)
    pretouched = None
    if args.hold_reporting:
        try:
            args.reporting_was = machine.hold_reporting()
        except (ValueError, OSError) as e:
            sys.exit("bench: --hold-reporting: %s" % e)
        atexit.register(machine.set_reporting, args.reporting_was)
        args.reporting_held = machine.reporting_state()
        note("free page reporting held back for the run: %s (was %s)"
             % (args.reporting_held, args.reporting_was))
    args.pretouch_bytes = 0
    if not args.no_pretouch:
        need = max(largest_need(s, args.variants, args.scenario)[0] for s in args.sizes)
        args.pretouch_bytes = need
        pretouched = (machine.pretouch_reported(need) if args.reporting_held
                      else machine.pretouch(need))
        note("pre-touched %.2f GiB of memory in %.2f s" % (pretouched["gib"],
                                                         pretouched["seconds"]))
    return before, pretouched


def print_plan(args, orders, progress):
    note("%d repetitions x %d sizes x %d variants = %d runs; variant order %s%s"
         % (args.repeat, len(args.sizes), len(args.variants),
            args.repeat * len(args.sizes) * len(args.variants), args.order,
            " (seed %d)" % args.seed if args.order == "random" else ""))
    for rep, order in enumerate(orders, 1):
        note("  rep %d: %s" % (rep, " ".join(order)))
    note("estimated time: %s (a model of the phases, refit as runs finish)"
         % runplan.fmt_duration(progress.estimate.total()))


def touch_again(args, say):
    """Under a hold that the kernel capped (min_free_ms below the bench's
    day), memory left free longer than the cap between runs is reported
    and would be backed again inside the next server's figures, in the
    main thread of a server that faults in huge pages: touch the run's
    memory again before each run, and say how much of it the VM reported
    at once all the same."""
    held = args.reporting_held
    if not held or not args.pretouch_bytes or held["min_free_ms"] >= machine.HOLD_MS:
        return
    t = machine.pretouch_reported(args.pretouch_bytes)
    say("memory touched again before the run (reports held for %d s at most): %.2f GiB in "
        "%.2f s, %s KiB reported to the host right after"
        % (held["min_free_ms"] // 1000, t["gib"], t["seconds"], t["reported_kib"]))


def run_all(args, runs, progress, monitor):
    """Every run in plan order; a peer that fails is reported and dropped,
    a built-in variant that fails stops the bench."""
    runs_csv = os.path.join(args.out, "runs.csv")
    results_csv = os.path.join(args.out, "results.csv")
    with open(runs_csv, "w") as f:
        f.write(RUNS_HEADER)
    with open(results_csv, "w") as f:
        f.write("size_gb,variant,rep,metric,value\n")
    failed = {}
    for run in runs:
        if run.variant in failed:
            continue
        progress.start(run)
        touch_again(args, progress.say)
        mark, started = monitor.mark(), time.time()
        status = "ok"
        try:
            fig = SCENARIOS[args.scenario].run(run, args, progress.say)
            append_figures(results_csv, run, fig)
        except Exception as e:  # noqa: BLE001 -- a peer's failure is reported, not fatal
            if run.variant not in args.peers:
                raise
            status = "failed: %s" % e
            failed[run.variant] = "rep %d, %s GB: %s" % (run.rep, fmt_size(run.size), e)
            note("peer %s failed and is dropped: %s" % (run.variant, e))
        during = monitor.since(mark)
        append_run(runs_csv, run, started, time.time() - started, status, during)
        progress.finish(run)
        for w in machine.warnings_for(during, "this run"):
            note("warning: " + w)
    return failed


def draw_plots(out):
    """forkbench.plots on the results, in a process of its own: matplotlib
    never loads into the process that ran the servers."""
    status = start_module("plots", [out], stdout=subprocess.DEVNULL).wait()
    if status:
        sys.exit("bench: the plots failed (exit status %d)" % status)


def main():
    args = parse_args()
    refuse_sizes_that_do_not_fit(args.sizes, args.variants, args.scenario)
    refuse_many_that_do_not_fit(args)
    refuse_fragment_that_does_not_fit(args)
    source = source_state(args)
    if source["dirty"] and args.require_clean:
        sys.exit("bench: uncommitted changes (%s); commit them or drop --require-clean"
                 % ", ".join(k for k, s in source.items()
                             if k != "dirty" and s["describe"].endswith("-dirty")))
    os.makedirs(args.out, exist_ok=True)
    before, pretouched = prepare_machine(args)
    skipped = check_peers(args)
    rec = machine_record(args, source, before, pretouched)
    orders = runplan.variant_orders(args.variants, args.repeat, args.order, args.seed)
    rec.update(orders=orders, skipped_peers=skipped)
    write_json(rec, os.path.join(args.out, "machine.json"))
    runs = runplan.plan_runs(args.sizes, orders)
    progress = Progress(runs, args)
    print_plan(args, orders, progress)
    monitor = machine.Monitor()
    monitor.start()
    try:
        failed = run_all(args, runs, progress, monitor)
    finally:
        monitor.stop()
        monitor.write_csv(os.path.join(args.out, "monitor.csv.gz"))
    during = monitor.since()
    rec.update(during=during, failed_peers=failed, keys_by_size=args.keys_by_size,
               per_key_bytes=getattr(args, "per_key", {}),
               duration_s=round(time.time() - START, 1),
               warnings=before["warnings"] + machine.warnings_for(during, "during the run"))
    write_json(rec, os.path.join(args.out, "machine.json"))
    report.write(args.out)
    note("plots")
    draw_plots(args.out)
    note("done in %s: %s/results.md" % (runplan.fmt_duration(time.time() - START), args.out))

