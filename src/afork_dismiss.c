/* afork_dismiss.c -- under fork-thp, the fork child gives back the huge
 * pages of what it has saved, whole.
 *
 * Upstream's fork child gives back memory it will not read again: after it
 * writes a key it madvise(MADV_DONTNEED)s the whole 4 KiB pages of the
 * value's allocations (dismissObject() -> dismissMemory()), and at its start
 * those of the client buffers (dismissMemoryInChild()). A page the child no
 * longer maps is the parent's alone, so the parent's next write to it
 * reuses the page instead of copying it: less copy-on-write memory, fewer
 * page copies in the main thread. Upstream does none of it when THP is on,
 * and with fork-thp the keyspace is in huge pages: a 4 KiB MADV_DONTNEED in
 * a huge page only splits the child's mapping of it, the child still maps
 * the rest, and the parent's write still splits and copies (Linux 6.12
 * never reuses a 4 KiB piece of a huge page; 6.16+ only once no other
 * process maps any of it).
 *
 * So under fork-thp the child counts, per 2 MiB range, the 4 KiB pages
 * that belong to nothing but allocations it has dismissed (one bit per page,
 * so a page counts once), and when all 512 of a range do, drops the range
 * with one MADV_DONTNEED: the child's huge mapping goes whole, without a
 * split, and the parent's next write to the range reuses the huge page
 * whole (do_huge_pmd_wp_page()) instead of splitting it and copying 4 KiB at
 * a time. Ranges the child maps in 4 KiB pages when it first dismisses in
 * them (PAGEMAP_SCAN, Linux 6.7+; without it every range is taken as huge)
 * are given back page by page, as upstream does.
 *
 * A page counts when no other allocation can be in it: for a small
 * allocation the pages wholly inside it (what upstream drops); for a large
 * one (jemalloc gives each its own page-aligned extent) every page it
 * touches, also the first and last, which jemalloc's random offset of large
 * allocations (opt.cache_oblivious) leaves partly empty and upstream keeps.
 * Without those two, no range made of large values would ever be whole.
 * The child never reads a dismissed allocation again (upstream's premise),
 * and a range is dropped only when every page of it is counted. The table
 * lives in an anonymous mapping of the child's own (no heap allocation,
 * which would copy pages the child shares with the parent); a range it has
 * no room for is not given back.
 *
 * Copyright (c) 2026, redis-afork contributors. AGPLv3, see LICENSE. */

#include "server.h"
#include "afork_dismiss.h"
#include "afork_util.h"
#include <fcntl.h>
#include <sys/mman.h>

#define PAGE 4096ULL
#define RANGE (2ULL << 20)
#define RANGE_PAGES 512
#define MIN_SLOTS 1024

typedef struct {
    uint64_t range;              /* range address + 1; 0: a free slot */
    uint16_t pages;              /* pages marked in bits */
    uint8_t small;               /* mapped in 4 KiB pages: dismissed at once */
    uint64_t bits[RANGE_PAGES / 64];
} rangeSlot;

static struct {
    int ready;                   /* 1: table mapped; -1: could not be */
    int pagemap;                 /* /proc/self/pagemap, or -1 */
    rangeSlot *slots;
    size_t nslots;               /* a power of two */
    size_t used;
} child;

/* The table, sized for twice the ranges the heap can have. */
static int tableReady(void) {
    if (child.ready) return child.ready == 1;
    size_t n = MIN_SLOTS;
    while (n < 2 * (zmalloc_used_memory() / RANGE) + MIN_SLOTS) n *= 2;
    void *p = mmap(NULL, n * sizeof(rangeSlot), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        child.ready = -1;
        return 0;
    }
    child.slots = p;
    child.nslots = n;
    child.pagemap = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
    child.ready = 1;
    return 1;
}

/* Is the child's mapping of [range, range + 2 MiB) in 4 KiB pages? */
static int rangeIsSmall(uint64_t range) {
    int resident, huge;
    if (child.pagemap == -1) return 0;
    if (aforkScanHugeRange(child.pagemap, range, &resident, &huge) == -1) {
        close(child.pagemap);    /* no PAGEMAP_SCAN: take every range as huge */
        child.pagemap = -1;
        return 0;
    }
    return huge < RANGE_PAGES;
}

/* The slot of a range, added if new; NULL when the table is full. */
static rangeSlot *slotOf(uint64_t range) {
    size_t mask = child.nslots - 1;
    for (size_t i = (size_t)(range / RANGE * 0x9E3779B97F4A7C15ULL) & mask;; i = (i + 1) & mask) {
        rangeSlot *s = &child.slots[i];
        if (s->range == range + 1) return s;
        if (s->range != 0) continue;
        if (child.used * 4 >= child.nslots * 3) return NULL;
        child.used++;
        s->range = range + 1;
        s->small = rangeIsSmall(range);
        return s;
    }
}

/* Mark [start, end) of one range; drop the range when it is all marked. */
static void markPages(rangeSlot *s, uint64_t range, uint64_t start, uint64_t end) {
    for (uint64_t a = start; a < end; a += PAGE) {
        unsigned page = (unsigned)((a - range) / PAGE);
        uint64_t bit = 1ULL << (page % 64);
        if (s->bits[page / 64] & bit) continue;
        s->bits[page / 64] |= bit;
        s->pages++;
    }
    if (s->pages != RANGE_PAGES) return;
    madvise((void *)(uintptr_t)range, RANGE, MADV_DONTNEED);
    s->pages++;                  /* past 512: never dropped again */
}

/* Give back the whole pages [start, end), range by range. */
static void givePages(uint64_t start, uint64_t end) {
    while (start < end) {
        uint64_t range = start & ~(RANGE - 1);
        uint64_t stop = range + RANGE < end ? range + RANGE : end;
        rangeSlot *s = slotOf(range);
        if (s && s->small) {
            madvise((void *)(uintptr_t)start, stop - start, MADV_DONTNEED);
        } else if (s) {
            markPages(s, range, start, stop);
        }
        start = stop;
    }
}

#if defined(USE_JEMALLOC) && defined(__linux__)
/* jemalloc's smallest large size class (16 KiB with 4 KiB pages). */
static size_t largeMinSize(void) {
    static size_t min = 0;
    size_t len = sizeof(min);
    if (min == 0 && je_mallctl("arenas.lextent.0.size", &min, &len, NULL, 0) != 0)
        min = SIZE_MAX;
    return min;
}

/* The pages that hold only the allocation at ptr, usable size usize. A
 * large allocation (jemalloc) has an extent of its own, page-aligned; with
 * opt.cache_oblivious (the default) ptr sits at a random offset in its first
 * page and the extent has one page more, so the first and last pages touched
 * are its own too. A small one shares its slab's pages: only the pages
 * wholly inside it, as zmadvise_dontneed() takes. */
static void ownPages(uint64_t from, size_t usize, uint64_t *start, uint64_t *end) {
    if (usize >= largeMinSize()) {
        *start = from & ~(PAGE - 1);
        *end = (from + usize + PAGE - 1) & ~(PAGE - 1);
    } else {
        *start = (from + PAGE - 1) & ~(PAGE - 1);
        *end = (from + usize) & ~(PAGE - 1);
    }
}
#endif

/* dismissMemory(), in a fork child: 1 when the allocation at ptr was taken
 * care of here (huge_heap: fork-thp's heap), 0 to let upstream's dismiss
 * have it. */
int aforkDismissAllocation(void *ptr, int huge_heap) {
#if defined(USE_JEMALLOC) && defined(__linux__)
    if (!huge_heap || !server.in_fork_child) return 0;
    if (!tableReady()) return 1;
    uint64_t start, end;
    ownPages((uint64_t)(uintptr_t)ptr, zmalloc_size(ptr), &start, &end);
    if (start < end) givePages(start, end);
    return 1;
#else
    UNUSED(ptr);
    UNUSED(huge_heap);
    return 0;
#endif
}
