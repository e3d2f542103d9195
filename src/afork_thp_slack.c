/* afork_thp_slack.c -- the slack arena: large allocations whose size class
 * leaves a page or more unused stay in 4 KiB pages (fork-thp).
 *
 * jemalloc rounds a large allocation up to its size class: a 128 KiB value
 * takes a 160 KiB extent, a 1 MiB value 1.25 MiB. In 4 KiB pages the
 * unused tail is never faulted in, so upstream's RSS does not pay for it;
 * with the keyspace in huge pages, the huge page that holds the tail is
 * resident whole, and a dataset of such values uses up to a quarter more
 * memory. So when the heap is in huge pages, this file creates a jemalloc
 * arena whose memory is advised MADV_NOHUGEPAGE, and zmalloc.c's calls
 * (afork_alloc.h) send there every allocation whose size class would leave
 * at least a page unused. Such values keep upstream's memory use, and
 * upstream's fork cost: fork() copies their page-table entries one per
 * 4 KiB. Everything else (keys, small values, dict tables, whose sizes are
 * powers of two) stays in huge pages.
 *
 * The arena uses jemalloc's own extent hooks, except that each new mapping
 * is recorded and advised MADV_NOHUGEPAGE, in that order. The collapse
 * thread skips the recorded ranges instead of scanning them (MADV_COLLAPSE
 * would refuse each one).
 * jemalloc retains what it maps (opt.retain, the Linux default), so a range
 * once recorded stays the arena's; adjacent mappings are recorded as one
 * range. A mapping that finds the table full is left in huge pages, as
 * without this file, and counted.
 *
 * Only the hook takes the table's lock. Readers (the collapse thread,
 * INFO) take none: a range is written before the count that publishes it,
 * and a reader that misses a range just grown sees it when it asks again.
 * jemalloc mostly calls the hook with a lock of its own held, which its
 * fork handler takes too, but not on every path; a fork child re-creates
 * the lock, so that it can map memory for the arena whatever another
 * thread of the parent was doing.
 *
 * ----------------------------------------------------------------------------
 *
 * Copyright (c) 2026, redis-afork contributors. AGPLv3, see LICENSE. */

#include "server.h"
#include "afork_thp_int.h"
#include <sys/mman.h>

#define SLACK_RANGES 256   /* jemalloc grows an arena's mappings geometrically */

/* zmalloc.c routes allocations here only with Redis's own jemalloc. */
#if defined(USE_JEMALLOC) && !defined(USE_SYSTEM_JEMALLOC)

extern int afork_alloc_slack_flags;   /* zmalloc.c, by way of afork_alloc.h */

static struct {
    pthread_mutex_t lock;              /* the hook's, against itself */
    uint64_t start[SLACK_RANGES];      /* read and written atomically */
    uint64_t end[SLACK_RANGES];
    int ranges;                        /* published after the range */
    long long untracked;               /* mappings left in huge pages */
    int arena;                         /* -1: none */
} slack = {.lock = PTHREAD_MUTEX_INITIALIZER, .arena = -1};

static extent_hooks_t *default_hooks;  /* jemalloc's, read from arena 0 */
static extent_hooks_t slack_hooks;

/* Record [a, b) as the arena's, joined to a range it touches. 0 when the
 * table is full. */
static int recordRange(uint64_t a, uint64_t b) {
    int recorded = 0, n;
    pthread_mutex_lock(&slack.lock);
    n = slack.ranges;
    for (int j = 0; j < n && !recorded; j++) {
        if (slack.end[j] == a) {
            __atomic_store_n(&slack.end[j], b, __ATOMIC_RELEASE);
            recorded = 1;
        } else if (slack.start[j] == b) {
            __atomic_store_n(&slack.start[j], a, __ATOMIC_RELEASE);
            recorded = 1;
        }
    }
    if (!recorded && n < SLACK_RANGES) {
        __atomic_store_n(&slack.start[n], a, __ATOMIC_RELAXED);
        __atomic_store_n(&slack.end[n], b, __ATOMIC_RELAXED);
        __atomic_store_n(&slack.ranges, n + 1, __ATOMIC_RELEASE);
        recorded = 1;
    }
    if (!recorded) __atomic_add_fetch(&slack.untracked, 1, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&slack.lock);
    return recorded;
}

/* jemalloc's mapping, recorded and then in 4 KiB pages. */
static void *slackAlloc(extent_hooks_t *hooks, void *new_addr, size_t size, size_t alignment,
                        bool *zero, bool *commit, unsigned arena_ind) {
    UNUSED(hooks);
    void *p = default_hooks->alloc(default_hooks, new_addr, size, alignment, zero, commit,
                                   arena_ind);
    if (p && recordRange((uint64_t)(uintptr_t)p, (uint64_t)(uintptr_t)p + size))
        madvise(p, size, MADV_NOHUGEPAGE);
    return p;
}

/* In a fork child: the lock may have been held by a thread that the child
 * does not have. */
static void slackForkChild(void) {
    pthread_mutex_init(&slack.lock, NULL);
}

/* The heap is in huge pages: create the arena and route allocations to it.
 * On failure (logged) every allocation stays where upstream puts it. */
void thpSlackSetup(void) {
    unsigned ind;
    size_t sz = sizeof(default_hooks);
    if (je_mallctl("arena.0.extent_hooks", &default_hooks, &sz, NULL, 0) != 0) {
        serverLog(LL_WARNING, "fork-thp: cannot read jemalloc's extent hooks; large values "
                              "stay in huge pages");
        return;
    }
    slack_hooks = *default_hooks;
    slack_hooks.alloc = slackAlloc;
    extent_hooks_t *hooks = &slack_hooks;
    sz = sizeof(ind);
    if (je_mallctl("arenas.create", &ind, &sz, &hooks, sizeof(hooks)) != 0) {
        serverLog(LL_WARNING, "fork-thp: cannot create jemalloc's slack arena; large values "
                              "stay in huge pages");
        return;
    }
    pthread_atfork(NULL, NULL, slackForkChild);
    slack.arena = (int)ind;
    afork_alloc_slack_flags = MALLOCX_ARENA(ind) | MALLOCX_TCACHE_NONE;
}

/* Does [start, end) overlap the arena's memory? */
int thpSlackHolds(uint64_t start, uint64_t end) {
    int n = __atomic_load_n(&slack.ranges, __ATOMIC_ACQUIRE), holds = 0;
    for (int j = 0; j < n && !holds; j++)
        holds = start < __atomic_load_n(&slack.end[j], __ATOMIC_ACQUIRE) &&
                __atomic_load_n(&slack.start[j], __ATOMIC_ACQUIRE) < end;
    return holds;
}

/* INFO fork: the arena (-1 when none), the bytes of its pages in use, the
 * ranges recorded, and the mappings left in huge pages. */
void thpSlackCounts(int *arena, long long *active, int *ranges, long long *untracked) {
    char name[64];
    size_t pactive = 0, page = 0, sz = sizeof(size_t);
    uint64_t epoch = 1;
    size_t esz = sizeof(epoch);
    *arena = slack.arena;
    *active = 0;
    if (slack.arena >= 0) {
        je_mallctl("epoch", &epoch, &esz, &epoch, esz);
        snprintf(name, sizeof(name), "stats.arenas.%d.pactive", slack.arena);
        if (je_mallctl(name, &pactive, &sz, NULL, 0) == 0 &&
            je_mallctl("arenas.page", &page, &sz, NULL, 0) == 0)
            *active = (long long)(pactive * page);
    }
    *ranges = __atomic_load_n(&slack.ranges, __ATOMIC_ACQUIRE);
    *untracked = __atomic_load_n(&slack.untracked, __ATOMIC_RELAXED);
}

#else

void thpSlackSetup(void) {
}

int thpSlackHolds(uint64_t start, uint64_t end) {
    UNUSED(start);
    UNUSED(end);
    return 0;
}

void thpSlackCounts(int *arena, long long *active, int *ranges, long long *untracked) {
    *arena = -1;
    *active = *untracked = 0;
    *ranges = 0;
}

#endif
