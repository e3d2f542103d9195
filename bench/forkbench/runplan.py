"""forkbench.runplan -- which server runs when in make bench, and how long the rest takes.

  variant_orders()  the order of the variants in each repetition: rotated
                    (ABC, BCA, CAB, then the reversed rotations CBA, BAC, ACB,
                    and again), or shuffled with a seed that the bench prints;
                    two repetitions in a row never share an order (unless
                    there is one variant), so no variant always runs first,
                    last, or right after the same neighbour;
  plan_runs()       every run in order: repetitions outermost, then sizes,
                    then the variants in that repetition's order;
  Estimate          the time left, for the progress lines. A run's duration
                    is first taken from a model of its phases (model_seconds:
                    populate, idle saves, calibration, load runs, the other
                    fork sites' replica and idle fork, the growth
                    scenarios' fills and shapes, at the
                    seconds per GB of a small 2-core machine);
                    once runs finish, every remaining estimate is scaled by
                    (time the finished runs took) / (what the model said for
                    them), so the estimate follows the machine it runs on.
"""
import collections
import random

from .variants import SITE_LOAD_FACTOR

Run = collections.namedtuple("Run", "seq rep size variant position")

# Seconds per GB of dataset of an idle BGSAVE of 256-byte values on a small
# 2-core machine: only the starting point, as the estimate rescales itself
# from the runs that finish.
SAVE_S_PER_GB = 4.4
# Filling the keyspace with the Lua script (about 2.6 million keys per GB).
POPULATE_S_PER_GB = 5.0
# Steady scenario: the re-collapse after each save (fork-thp-collapse-rate
# 256 MB/s at most, usually far less to do).
COLLAPSE_S_PER_GB = 1.0
# ... and a whole pass over the heap at that rate, which the steady load
# covers (bench.steady_load_seconds).
FULL_PASS_S_PER_GB = 1024.0 / 256
# Server start and stop, INFO, the probe's start and tail, per run.
SETUP_S = 4.0
PROBE_S = 0.6
# The growth scenarios (forkbench.growth): redis-benchmark's fill of
# 256-byte values, -c 20 -P 16, some 1.5 x 2.6 million SETs per GB; a
# fill of large values (MB of values per second, pipeline 1); the Lua
# churn (two passes over 2/3 of the keys); a fragmenter touching and
# freeing the machine's free memory.
FILL_S_PER_GB = 14.0
LARGE_FILL_S_PER_GB = 4.0
CHURN_S_PER_GB = 8.0
FRAGMENT_S = 15.0


def rotations(seq):
    return [seq[k:] + seq[:k] for k in range(len(seq))]


def variant_orders(variants, repeat, how="rotate", seed=0):
    """One list of variants per repetition."""
    variants = list(variants)
    if how == "random":
        return shuffled_orders(variants, repeat, seed)
    cycle = []
    for order in rotations(variants) + rotations(variants[::-1]):
        if order not in cycle:
            cycle.append(order)
    return [cycle[r % len(cycle)] for r in range(repeat)]


def shuffled_orders(variants, repeat, seed):
    rng = random.Random(seed)
    out = []
    for _ in range(repeat):
        order = list(variants)
        rng.shuffle(order)
        while len(variants) > 1 and out and order == out[-1]:
            rng.shuffle(order)
        out.append(order)
    return out


def plan_runs(sizes, orders):
    """Every Run, in the order they happen."""
    runs = []
    for rep, order in enumerate(orders, 1):
        for size in sizes:
            for pos, variant in enumerate(order, 1):
                runs.append(Run(len(runs) + 1, rep, size, variant, pos))
    return runs


def growth_seconds(run, args):
    """The fill, fill-fragmented and shapes scenarios' model."""
    if args.scenario != "shapes":
        return (SETUP_S + FILL_S_PER_GB * run.size + PROBE_S
                + (FRAGMENT_S if args.scenario == "fill-fragmented" else 0.0))
    shape = {"small": SETUP_S + 1.0,
             "many": args.many_servers * (SETUP_S / 2 + POPULATE_S_PER_GB * args.many_mb / 1024),
             "churn": (SETUP_S + (POPULATE_S_PER_GB + CHURN_S_PER_GB) * run.size
                       + args.defrag_seconds + PROBE_S),
             "large": len(args.large_values) * (
                 SETUP_S + LARGE_FILL_S_PER_GB * run.size + SAVE_S_PER_GB * run.size
                 + args.save_lead_seconds + 2 * PROBE_S),
             "maxmemory": (SETUP_S + FILL_S_PER_GB * run.size + args.maxmemory_seconds
                           + PROBE_S)}
    return sum(shape[name] for name in args.shapes)


def model_seconds(run, args):
    """What one run should take by the model (see the module's comment)."""
    if args.scenario in ("fill", "fill-fragmented", "shapes"):
        return growth_seconds(run, args)
    save = SAVE_S_PER_GB * run.size
    load = max(args.load_seconds, 3.0 * save) + PROBE_S
    base = SETUP_S + POPULATE_S_PER_GB * run.size + args.calibrate_seconds
    if args.scenario == "steady":
        # bench.steady_load_seconds: the load covers the save and the pass.
        load = max(load, 1.5 * (2.0 * save + FULL_PASS_S_PER_GB * run.size + 3.0)
                   + PROBE_S)
        return (base + save + (args.rounds + 1) * load
                + args.rounds * COLLAPSE_S_PER_GB * run.size)
    if args.scenario in SITE_LOAD_FACTOR:
        # forkbench.sites: one idle fork, the re-collapse after it, the
        # control and the site's run (a sync's replica: one more set-up,
        # and its catch-up after the load).
        load = max(args.load_seconds, SITE_LOAD_FACTOR[args.scenario] * save) + PROBE_S
        extra = SETUP_S + save if args.scenario.startswith("sync") else 0.0
        return base + save + COLLAPSE_S_PER_GB * run.size + 2 * load + extra
    return base + args.idle_saves * save + 2 * load


class Estimate:
    """Time left in a plan, from the model scaled by the finished runs."""

    def __init__(self, runs, args):
        self.model = [model_seconds(r, args) for r in runs]
        self.took = {}

    def finished(self, run, seconds):
        self.took[run.seq] = seconds

    def scale(self):
        if not self.took:
            return 1.0
        return sum(self.took.values()) / sum(self.model[s - 1] for s in self.took)

    def total(self):
        return self.scale() * sum(self.model)

    def left(self, run=None, elapsed=0.0):
        """Seconds left when `run` has been going for `elapsed` seconds."""
        s = self.scale()
        if run is None:
            return s * sum(self.model[i] for i in range(len(self.model))
                           if i + 1 not in self.took)
        current = max(0.0, s * self.model[run.seq - 1] - elapsed)
        return current + s * sum(self.model[run.seq:])


def fmt_duration(seconds):
    """1h 05m, 12m 30s, 45s."""
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    if h:
        return "%dh %02dm" % (h, m)
    if m:
        return "%dm %02ds" % (m, s)
    return "%ds" % s
