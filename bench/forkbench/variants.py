"""What each variant is and what memory it needs."""


GIB = 1 << 30


MIB = 1 << 20


# fork-thp-collapse-rate (MB/s) of the variants that re-collapse; the
# steady load lasts a whole pass at this rate (steady_load_seconds).
COLLAPSE_RATE_MB_S = 256


# name -> (which build, extra config).
VARIANTS = {
    "stock": ("stock", []),
    # redis-afork as installed: no fork option set (fork-thp auto switches
    # the heap to huge pages once its page tables or a fork cross auto's
    # thresholds; INFO fork_thp_heap says when).
    "redis-afork": ("afork", []),
    # fork-thp: the keyspace in huge pages, without / with the re-collapse.
    "afork-thp": ("afork", ["--fork-thp", "yes", "--fork-thp-collapse-rate", "0"]),
    "afork-thp-collapse": ("afork", ["--fork-thp", "yes", "--fork-thp-collapse-rate",
                                     str(COLLAPSE_RATE_MB_S)]),
    # fork-thp auto said explicitly: the same as redis-afork, kept for the
    # growth scenarios' tables.
    "afork-thp-auto": ("afork", ["--fork-thp", "auto"]),
    # The same without warming the huge page before each collapse: the
    # ablation of the warm-up and its back-off
    # (docs/investigations/2026-11-26-fork-thp-collapse-warm-up.md).
    "afork-thp-nowarm": ("afork", ["--fork-thp", "yes", "--fork-thp-collapse-rate",
                                   str(COLLAPSE_RATE_MB_S),
                                   "--fork-debug-thp-collapse-warm", "no"]),
    # The same with the keyspace left in one VMA: the ablation of the cut
    # (docs/investigations/2026-11-24-fork-thp-vma-cut.md).
    "afork-thp-onevma": ("afork", ["--fork-thp", "yes", "--fork-thp-collapse-rate",
                                   str(COLLAPSE_RATE_MB_S),
                                   "--fork-debug-thp-vma-size", "0"]),
}


# The other fork sites' load, as a multiple of the idle fork's length
# (forkbench.sites; the site starts a third in, so the load must last half
# as long again as the site): a rewrite under load takes up to about 2.2
# times the idle one, a full sync up to 8 times the idle save disk-based
# and 5 times diskless, the replica's load of the RDB and its catch-up
# included. A site that still outlasts the load is flagged
# (<site>_outlasted_load) and its window's figures miss the load's end.
SITE_LOAD_FACTOR = {"aofrewrite": 3.5, "sync-disk": 12.0, "sync-diskless": 8.0}


# Memory a server may need during a save under writes, as a multiple of its
# dataset: every page copied once (2x); huge pages add fragmentation; a peer
# is unknown, so it gets a margin.
MEMORY_FACTOR = {"stock": 2.0, "redis-afork": 2.1, "afork-thp": 2.1,
                 "afork-thp-collapse": 2.1, "afork-thp-onevma": 2.1,
                 "afork-thp-nowarm": 2.1, "afork-thp-auto": 2.1}


PEER_MEMORY_FACTOR = 2.25


MEMORY_EXTRA = 512 * MIB


# What a scenario needs beyond the server under test, as a multiple of the
# dataset: a full sync runs a replica on this machine (its copy of the
# dataset, 1x) and buffers the writes made during the sync (the primary's
# replica output buffer, or with the rdb channel the replica's own buffer:
# the SET load writes some 60-90 MB/s for a sync of about 10 s per GB,
# counted as 1x more).
SCENARIO_MEMORY_FACTOR = {"sync-disk": 2.0, "sync-diskless": 2.0}


# Scenarios without a fork under writes (forkbench.growth), as a multiple
# of the size, for every server: a fill from empty holds the dataset and
# what huge pages and the allocator add (1.3x); the shapes' largest need
# is the large values' BGSAVE under writes: the fill's random keys leave
# some of the keyspace for the load to add (1.3x the size at most), and
# each of those pages copied once.
GROWTH_MEMORY_FACTOR = {"fill": 1.3, "fill-fragmented": 1.3, "shapes": 2.7}


def memory_factor(variant, scenario="fork"):
    if scenario in GROWTH_MEMORY_FACTOR:
        return GROWTH_MEMORY_FACTOR[scenario]
    return (MEMORY_FACTOR.get(variant, PEER_MEMORY_FACTOR)
            + SCENARIO_MEMORY_FACTOR.get(scenario, 0.0))


def memory_needed(size_gb, variant, scenario="fork"):
    """Free memory a variant needs at a size in a scenario (see
    MEMORY_FACTOR and SCENARIO_MEMORY_FACTOR)."""
    return int(memory_factor(variant, scenario) * size_gb * GIB + MEMORY_EXTRA)


def largest_need(size_gb, variants, scenario="fork"):
    """(bytes, variant) of the variant that needs the most at this size;
    servers run one at a time (a sync scenario's replica beside its
    primary), so that is what must fit."""
    return max((memory_needed(size_gb, v, scenario), v) for v in variants)

