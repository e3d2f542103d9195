"""What each variant is and what memory it needs."""


GIB = 1 << 30


MIB = 1 << 20


# fork-thp-collapse-rate (MB/s) of the variants that re-collapse; the
# steady load lasts a whole pass at this rate (steady_load_seconds).
COLLAPSE_RATE_MB_S = 256


# name -> (which build, extra config).
VARIANTS = {
    "stock": ("stock", []),
    "redis-afork": ("afork", []),
    # fork-thp: the keyspace in huge pages, without / with the re-collapse.
    "afork-thp": ("afork", ["--fork-thp", "yes", "--fork-thp-collapse-rate", "0"]),
    "afork-thp-collapse": ("afork", ["--fork-thp", "yes", "--fork-thp-collapse-rate",
                                     str(COLLAPSE_RATE_MB_S)]),
    # The same without warming the huge page before each collapse: the
    # ablation of fork-thp-collapse-warm and its back-off
    # (docs/investigations/2026-11-26-fork-thp-collapse-warm-up.md).
    "afork-thp-nowarm": ("afork", ["--fork-thp", "yes", "--fork-thp-collapse-rate",
                                   str(COLLAPSE_RATE_MB_S),
                                   "--fork-thp-collapse-warm", "no"]),
    # The same with the keyspace left in one VMA (fork-thp-vma-size 0): the
    # ablation of the cut (docs/investigations/2026-11-24-fork-thp-vma-cut.md).
    "afork-thp-onevma": ("afork", ["--fork-thp", "yes", "--fork-thp-collapse-rate",
                                   str(COLLAPSE_RATE_MB_S),
                                   "--fork-thp-vma-size", "0"]),
}


# scenario -> default variants
SCENARIOS = {
    "fork": "stock redis-afork",
    # afork-thp (no re-collapse) is the ablation: --variants adds it.
    "steady": "stock afork-thp-collapse",
}


# Memory a server may need during a save under writes, as a multiple of its
# dataset: every page copied once (2x); huge pages add fragmentation; a peer
# is unknown, so it gets a margin.
MEMORY_FACTOR = {"stock": 2.0, "redis-afork": 2.0, "afork-thp": 2.1,
                 "afork-thp-collapse": 2.1, "afork-thp-onevma": 2.1,
                 "afork-thp-nowarm": 2.1}


PEER_MEMORY_FACTOR = 2.25


MEMORY_EXTRA = 512 * MIB


def memory_needed(size_gb, variant):
    """Free memory a variant needs at a size (see MEMORY_FACTOR)."""
    factor = MEMORY_FACTOR.get(variant, PEER_MEMORY_FACTOR)
    return int(factor * size_gb * GIB + MEMORY_EXTRA)


def largest_need(size_gb, variants):
    """(bytes, variant) of the variant that needs the most at this size;
    servers run one at a time, so that is what must fit."""
    return max((memory_needed(size_gb, v), v) for v in variants)

