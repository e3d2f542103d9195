"""The scenarios: one server's run (fork: idle saves and a save under load; steady: rounds of load and save with the re-collapse; the other fork sites: forkbench.sites; a dataset growing and the shapes: forkbench.growth)."""
import shutil
import statistics
import time

from .variants import MIB, COLLAPSE_RATE_MB_S
from .progress import fmt_size, fmt_secs
from .server import start_server, populate, fork_fields, cow_mb, bgsave_and_wait
from .load import load_run, load_requests


def idle_saves(srv, rounds):
    forks, ready, secs, cow = [], [], [], []
    for _ in range(rounds):
        t0, t1 = bgsave_and_wait(srv)
        f = fork_fields(srv)
        if "fork_ms" in f:
            forks.append(f["fork_ms"])
        if "child_ready_ms" in f:
            ready.append(f["child_ready_ms"])
        secs.append(t1 - t0)
        c = cow_mb(srv)
        if c is not None:
            cow.append(c)
    out = {"idle_save_s": statistics.median(secs)}
    if forks:
        out["idle_fork_ms_median"] = statistics.median(forks)
        out["idle_fork_ms_max"] = max(forks)
    if ready:
        out["idle_child_ready_ms_median"] = statistics.median(ready)
    if cow:
        out["idle_cow_mb"] = max(cow)
    return out


def steady_load_seconds(args, used_gb, idle_save_s):
    """The steady rounds' load also covers the re-collapse after the child
    (the pass is where fork-thp's after-child stalls are):
    after the BGSAVE, a third in, the save under load (about twice the idle
    one) and a pass over the whole heap at the collapse rate, with a
    margin (--pass-margin-seconds). Every variant gets the same formula,
    stock included, so their loads are about as long."""
    after_save = (2.0 * idle_save_s + used_gb * 1024.0 / COLLAPSE_RATE_MB_S
                  + args.pass_margin_seconds)
    return max(args.load_seconds, 3.0 * idle_save_s, 1.5 * after_save)


def control_ratios(fig, max_key, p99_key, out="save"):
    """Client latency during the save against this server's no-save control
    of the same repetition: what the save adds beyond the machine's noise
    (<out>_vs_control_max and _p99)."""
    if fig.get("nosave_max_ms") and max_key in fig:
        fig[out + "_vs_control_max"] = fig[max_key] / fig["nosave_max_ms"]
    if fig.get("nosave_p99_ms") and p99_key in fig:
        fig[out + "_vs_control_p99"] = fig[p99_key] / fig["nosave_p99_ms"]


def fork_scenario(srv, args, keys, tag, fig, say):
    say("idle: %d BGSAVEs" % args.idle_saves)
    idle = idle_saves(srv, args.idle_saves)
    fig.update(idle)
    requests, seconds = load_requests(srv, args, keys, idle["idle_save_s"])
    say("load without save (%d requests, ~%ss)" % (requests, fmt_secs(seconds)))
    ctl = load_run(srv, args, keys, requests, tag + "_nosave", False, seconds)
    for k in ("rps", "p50_ms", "p99_ms", "p999_ms", "max_ms", "gaps_over_1ms", "max_gap_ms"):
        fig["nosave_" + k] = ctl[k]
    say("load with BGSAVE")
    sv = load_run(srv, args, keys, requests, tag + "_save", True, seconds)
    for k in ("fork_ms", "save_s", "cow_mb", "rps", "p50_ms", "p99_ms", "p999_ms",
              "max_ms", "gaps_over_1ms", "max_gap_ms", "total_gap_ms", "outlasted_load"):
        if k in sv:
            fig["save_" + k] = sv[k]
    control_ratios(fig, "save_max_ms", "save_p99_ms")


def wait_collapse(srv, passes_before, limit_s=300):
    """Steady scenario: let the re-collapse pass after a save finish."""
    t0 = time.time()
    while time.time() - t0 < limit_s:
        f = srv.info("fork")
        if f.get("fork_thp_collapse_status") not in ("ready", "running"):
            return 0.0
        if (int(f["fork_thp_collapse_passes"]) > passes_before
                and f["fork_thp_collapse_status"] == "ready"):
            return time.time() - t0
        time.sleep(0.1)
    return time.time() - t0


def collapse_counters(f):
    """The collapse thread's running totals from an INFO fork dict, {}
    without the thread."""
    if "fork_thp_collapse_passes" not in f:
        return {}
    return {k: int(f.get(k, 0)) for k in ("fork_thp_collapse_ranges", "fork_thp_collapse_usec",
                                           "fork_thp_collapse_warm_usec",
                                           "latest_fork_thp_collapse_max_usec")}


def collapse_figures(before, after):
    """One pass's collapse figures from the counters around it: its
    longest MADV_COLLAPSE, and per range the time in MADV_COLLAPSE and in
    the warm-up (fork-thp-collapse-warm)."""
    if not before or not after:
        return {}
    ranges = after["fork_thp_collapse_ranges"] - before["fork_thp_collapse_ranges"]
    fig = {"collapse_max_ms": after["latest_fork_thp_collapse_max_usec"] / 1000.0,
           "collapse_ranges": ranges}
    if ranges > 0:
        fig["collapse_ms_per_range"] = (after["fork_thp_collapse_usec"]
                                        - before["fork_thp_collapse_usec"]) / 1000.0 / ranges
        fig["warm_ms_per_range"] = (after["fork_thp_collapse_warm_usec"]
                                    - before["fork_thp_collapse_warm_usec"]) / 1000.0 / ranges
    return fig


def steady_round(srv, args, keys, requests, seconds, tag, rnd, fig):
    f = srv.info("fork")
    passes, counters = int(f.get("fork_thp_collapse_passes", 0)), collapse_counters(f)
    r = load_run(srv, args, keys, requests, "%s_round%d" % (tag, rnd), True, seconds)
    for k in ("fork_ms", "max_ms", "p999_ms", "p99_ms", "rps", "cow_mb", "save_s",
              "max_gap_ms", "after_child_max_gap_ms"):
        if k in r:
            fig["round%d_%s" % (rnd, k)] = r[k]
    waited = wait_collapse(srv, passes)
    f = srv.info("fork")
    if "fork_thp_collapse_passes" in f:
        fig["round%d_collapse_wait_s" % rnd] = waited
        fig["round%d_huge_after_mb" % rnd] = \
            max(0, int(f["latest_fork_thp_collapse_huge_after_bytes"])) / MIB
        for k, v in collapse_figures(counters, collapse_counters(f)).items():
            fig["round%d_%s" % (rnd, k)] = v
    return r


def steady_scenario(srv, args, keys, tag, fig, say):
    """A first BGSAVE, the control, then rounds of {write load over the
    whole keyspace, BGSAVE under it}; the summary skips round 1 (the first
    fork after populating is cheap for huge pages either way)."""
    say("first BGSAVE (idle)")
    passes = int(srv.info("fork").get("fork_thp_collapse_passes", 0))
    idle = idle_saves(srv, 1)
    if "idle_fork_ms_median" in idle:
        fig["first_fork_ms"] = idle["idle_fork_ms_median"]
    # The control starts once the pass after that save is over, as each
    # round does: a control during the pass would be no control.
    waited = wait_collapse(srv, passes)
    if "fork_thp_collapse_passes" in srv.info("fork"):
        fig["first_collapse_wait_s"] = waited
    seconds = steady_load_seconds(args, fig["used_memory_mb"] / 1024.0, idle["idle_save_s"])
    requests, seconds = load_requests(srv, args, keys, idle["idle_save_s"], seconds)
    fig["steady_load_s"] = seconds
    say("steady: load without save (%d requests, ~%ss)" % (requests, fmt_secs(seconds)))
    ctl = load_run(srv, args, keys, requests, tag + "_nosave", False, seconds)
    for k in ("rps", "p99_ms", "p999_ms", "max_ms", "max_gap_ms"):
        fig["nosave_" + k] = ctl[k]
    rounds = []
    for rnd in range(1, args.rounds + 1):
        say("steady: round %d/%d, load + BGSAVE" % (rnd, args.rounds))
        rounds.append(steady_round(srv, args, keys, requests, seconds, tag, rnd, fig))
    # Rounds whose pass went on after the load: their after-child figures
    # miss part of it.
    fig["steady_pass_outlasted_load"] = sum(
        1 for rnd in range(1, args.rounds + 1)
        if fig.get("round%d_collapse_wait_s" % rnd, 0.0) > 1.0)
    later = rounds[1:] or rounds
    for k, name in (("fork_ms", "steady_fork_ms"), ("max_ms", "steady_max_ms"),
                    ("p99_ms", "steady_p99_ms"), ("max_gap_ms", "steady_max_gap_ms"),
                    ("after_child_max_gap_ms", "steady_after_child_max_gap_ms")):
        vals = [r[k] for r in later if k in r]
        if vals:
            fig[name + "_median"] = statistics.median(vals)
            if k == "fork_ms":
                fig[name + "_max"] = max(vals)
    control_ratios(fig, "steady_max_ms_median", "steady_p99_ms_median")


def finish_memory(srv, fig):
    mem = srv.info("memory")
    fig["peak_rss_mb"] = srv.peak_rss() / MIB
    fig["rss_mb"] = int(mem["used_memory_rss"]) / MIB
    if "mem_fragmentation_ratio" in mem:
        fig["fragmentation_ratio"] = float(mem["mem_fragmentation_ratio"])


def run_one(run, args, say):
    """One server, one size, one repetition: its figures (metric -> value)."""
    from . import growth, sites   # both build on this module's phases
    if args.scenario in growth.SCENARIOS:
        return growth.run_one(run, args, say)
    tag = "%sgb_%s_r%d" % (fmt_size(run.size), run.variant, run.rep)
    srv, work = start_server(run.variant, args, sites.site_config(args.scenario))
    fig = {}
    try:
        say("populate")
        keys = populate(srv, run.size, args.value_size, args.keys_by_size.get(run.size))
        args.keys_by_size.setdefault(run.size, keys)
        mem = srv.info("memory")
        fig["keys"] = keys
        fig["used_memory_mb"] = int(mem["used_memory"]) / MIB
        fig["rss_after_populate_mb"] = int(mem["used_memory_rss"]) / MIB
        if args.scenario == "steady":
            steady_scenario(srv, args, keys, tag, fig, say)
        elif args.scenario in sites.SITES:
            sites.site_scenario(srv, args, keys, tag, fig, say, run)
        else:
            fork_scenario(srv, args, keys, tag, fig, say)
        finish_memory(srv, fig)
    finally:
        srv.stop()
        shutil.rmtree(work, ignore_errors=True)
    return fig

