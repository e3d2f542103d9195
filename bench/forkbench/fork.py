"""forkbench.fork -- the fork scenario (make bench's default): what a BGSAVE costs.

One run, on a server populated with the run's keys (phases.populated):
--idle-saves BGSAVEs with no load (parent blocked time, save time, COW),
then the SET load with the PING probe beside it, once without a save (the
control) and once with a BGSAVE a third of the way in; the save's client
latency is also given against the control.
"""
from .load import load_requests, load_run
from .phases import control_ratios, idle_saves, populated, run_tag
from .progress import fmt_secs


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


def run_fork(run, args, say):
    """One server, one size, one repetition: its figures (metric -> value)."""
    with populated(run, args, say) as (srv, keys, fig):
        fork_scenario(srv, args, keys, run_tag(run), fig, say)
    return fig
