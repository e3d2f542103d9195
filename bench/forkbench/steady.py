"""forkbench.steady -- the steady scenario: fork-thp's steady state, rounds of load and save.

One run, on a server populated with the run's keys (phases.populated): a
first BGSAVE, the control, then --rounds rounds of {write load over the
whole keyspace, BGSAVE a third in}, each load long enough for the save
and fork-thp's re-collapse after it (phases.steady_load_seconds), each
round's pass waited for before the next; the summary skips round 1.
"""
import statistics

from .load import load_requests, load_run
from .phases import (collapse_counters, collapse_figures, control_ratios, idle_saves,
                     populated, run_tag, steady_load_seconds, wait_collapse)
from .progress import fmt_secs
from .variants import MIB


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


def run_steady(run, args, say):
    """One server, one size, one repetition: its figures (metric -> value)."""
    with populated(run, args, say) as (srv, keys, fig):
        steady_scenario(srv, args, keys, run_tag(run), fig, say)
    return fig
