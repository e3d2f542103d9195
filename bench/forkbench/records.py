"""What a run writes besides the figures: the source state, machine.json, runs.csv, results.csv."""
import json
import os
import platform
import subprocess
import time
from importlib import metadata

from . import machine, report
from .progress import fmt_size
from .server import server_binary, version
from .sites import REPLICA_CONFIG, site_config


HERE = os.path.dirname(os.path.abspath(__file__))


def git_state(path):
    """`git describe --always --dirty` and the full commit of the checkout
    holding `path` ("n/a" outside git)."""
    def git(*cmd):
        try:
            return subprocess.run(["git", "-C", path] + list(cmd), capture_output=True,
                                  text=True).stdout.strip() or "n/a"
        except OSError:
            return "n/a"
    return {"describe": git("describe", "--always", "--dirty"),
            "commit": git("rev-parse", "HEAD")}


def source_state(args):
    """The checkout (bench and patches) and both build trees; dirty when
    any has uncommitted changes to tracked files."""
    state = {"checkout": git_state(HERE), "afork_tree": git_state(args.afork_bin),
             "stock_tree": git_state(args.stock_bin)}
    state["dirty"] = any(s["describe"].endswith("-dirty") for s in state.values())
    return state


def matplotlib_version():
    """The plots' matplotlib, as installed (not imported: the runs' process
    never loads it)."""
    try:
        return metadata.version("matplotlib")
    except metadata.PackageNotFoundError:
        return "not installed"


def machine_record(args, source, before, pretouched):
    rec = {"date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())}
    rec.update(machine.describe())
    rec.update({
        "before": before, "pretouch": pretouched,
        "reporting_held": bool(args.reporting_was),
        "reporting_held_ms": (getattr(args, "reporting_held", None) or {}).get("min_free_ms"),
        "stock": version(os.path.join(args.stock_bin, "redis-server")),
        "redis_afork": version(os.path.join(args.afork_bin, "redis-server")),
        "redis_afork_commit": source["checkout"]["describe"],
        "source": source, "dirty": source["dirty"],
        "python": platform.python_version(), "matplotlib": matplotlib_version(),
        "value_size": args.value_size, "load_seconds": args.load_seconds,
        "calibrate_seconds": args.calibrate_seconds, "idle_saves": args.idle_saves,
        "variants": {v: server_binary(v, args)[1] for v in args.variants},
        "baseline": "stock" if "stock" in args.variants else args.variants[0],
        "peers": {n: dict(p, version=version(p["binary"])) for n, p in args.peers.items()
                  if n in args.variants},
        "scenario": args.scenario, "rounds": args.rounds,
        "scenario_config": site_config(args.scenario),
        "replica_config": REPLICA_CONFIG if args.scenario.startswith("sync") else [],
        "replica_variant": getattr(args, "replica_variant", None),
        "growth": growth_record(args),
        "sizes": args.sizes, "repeat": args.repeat,
        "order": args.order, "seed": args.seed,
    })
    return rec


def growth_record(args):
    """The fill's and the shapes' settings (forkbench.growth), {} elsewhere."""
    if args.scenario not in ("fill", "fill-fragmented", "shapes"):
        return {}
    rec = {"fill_clients": args.fill_clients, "fill_pipeline": args.fill_pipeline,
           "fill_requests": args.fill_requests}
    if args.scenario == "fill-fragmented":
        rec["fragment_max_gb"] = args.fragment_max_gb
    if args.scenario == "shapes":
        rec.update({k: getattr(args, k) for k in (
            "shapes", "small_mb", "many_servers", "many_mb", "churn_batch", "churn_value_size",
            "defrag_seconds",
            "large_values", "large_pipeline", "save_lead_seconds", "maxmemory_keyspace",
            "maxmemory_seconds")})
    return rec


def write_json(obj, path):
    with open(path, "w") as f:
        json.dump(obj, f, indent=2)
        f.write("\n")


RUNS_HEADER = ("seq,rep,size_gb,variant,position,started_utc,seconds,status,"
               "others_cpus_mean,steal_pct_mean,load1_max\n")


def append_run(path, run, started, seconds, status, during):
    with open(path, "a") as f:
        f.write("%d,%d,%s,%s,%d,%s,%.1f,%s,%s,%s,%s\n" % (
            run.seq, run.rep, fmt_size(run.size), run.variant, run.position,
            time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)), seconds,
            status.replace(",", ";").replace("\n", " "),
            during.get("others_cpus_mean", ""), during.get("steal_pct_mean", ""),
            during.get("load1_max", "")))


def append_figures(path, run, fig):
    with open(path, "a") as f:
        for metric, value in fig.items():
            f.write("%s,%s,%d,%s,%s\n" % (fmt_size(run.size), run.variant, run.rep,
                                          metric, report.fmt_value(value)))

