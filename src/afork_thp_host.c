/* afork_thp_host.c -- the re-collapse in a VM whose host takes memory back
 * (the warm-up, on where the VM reports free pages to its host).
 *
 * MADV_COLLAPSE copies 2 MiB into a fresh huge page with the mmap lock held
 * for writing. In a VM whose host takes back the guest's free memory (free
 * page reporting of a virtio balloon), the first write to a page the host
 * has taken back faults in the host, and while the host is taking memory
 * back those faults are slow: the copy, and so the lock, lasts many times
 * longer than a copy into a page already written.
 *
 * So before each collapse the collapse thread writes a huge page of its own
 * (a scratch mapping, MADV_POPULATE_WRITE) and frees it (MADV_DONTNEED): the
 * collapse's allocation, which comes next on the same CPU, gets that page
 * back from the per-CPU free list, and the first write to it happens here,
 * outside the lock. The warm-up is also a probe: when it is slow the host
 * is busy, and the thread waits and warms again, a bounded number of times,
 * before it collapses. Where no host takes memory back, it costs the
 * zeroing of one huge page per range.
 *
 * The scratch mapping is made once at startup, MADV_DONTFORK (never copied
 * to a child) and empty between ranges. Whether the VM reports free pages
 * at all is read by afork_system.c (INFO vm_free_page_reporting).
 *
 * ----------------------------------------------------------------------------
 *
 * Copyright (c) 2026, redis-afork contributors. AGPLv3, see LICENSE. */

#include "server.h"
#include "afork_thp_int.h"
#include <sys/mman.h>
#include <sys/prctl.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
#ifndef PR_SET_VMA
#define PR_SET_VMA 0x53564d41
#define PR_SET_VMA_ANON_NAME 0
#endif

#define WARM_SLOW_USEC 2000          /* a warm-up this slow: the host is busy */
#define WARM_WAIT_MS 20
#define WARM_MAX_WAITS 50            /* per range */
#define WARM_MAX_WAITS_PASS 100      /* per pass: a slow warm-up for another cause
                                        (compaction) must not stall the pass */

static struct {
    char *page;                      /* 2 MiB aligned scratch, or NULL; set
                                        before the collapse thread starts */
    redisAtomic int unsupported;     /* MADV_POPULATE_WRITE refused */
} warm;

/* Startup, before the collapse thread: the scratch huge page, 2 MiB aligned
 * inside a 4 MiB mapping (one VMA: the whole of it MADV_DONTFORK and
 * MADV_HUGEPAGE), named in /proc/PID/maps where the kernel can (5.17+).
 * Without it, no warm-up. */
void thpHostInit(void) {
    void *raw = mmap(NULL, 2 * THP_HUGE_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                     -1, 0);
    if (raw == MAP_FAILED) return;
    char *page = (char *)(((uintptr_t)raw + THP_HUGE_SIZE - 1) & ~(uintptr_t)(THP_HUGE_SIZE - 1));
    if (madvise(raw, 2 * THP_HUGE_SIZE, MADV_DONTFORK) != 0 ||
        madvise(raw, 2 * THP_HUGE_SIZE, MADV_HUGEPAGE) != 0) {
        munmap(raw, 2 * THP_HUGE_SIZE);
        return;
    }
    prctl(PR_SET_VMA, PR_SET_VMA_ANON_NAME, (unsigned long)raw, 2 * THP_HUGE_SIZE,
          "afork-collapse-warm");
    warm.page = page;
}

/* Can the thread warm up (INFO fork_thp_collapse_warm, with the config)? */
int thpHostWarmReady(void) {
    int unsupported;
    atomicGet(warm.unsupported, unsupported);
    return warm.page && !unsupported;
}

/* The scratch huge page's own mapping: neither cut nor collapsed. */
int thpHostIsWarmMapping(uint64_t start, uint64_t end) {
    uint64_t page = (uint64_t)(uintptr_t)warm.page;
    return warm.page && start <= page && page < end;
}

/* Fault a huge page in the scratch mapping and free it, so that the next
 * huge page this CPU allocates (the collapse's) has been written once
 * outside the mmap lock. Returns how long the write took (0 when off).
 * Unsupported (EINVAL, Linux before 5.14): never again. */
static long long warmHugePage(int on, thpCounters *c) {
    int unsupported;
    atomicGet(warm.unsupported, unsupported);
    if (!on || unsupported || !warm.page) return 0;
    long long t0 = ustime();
    if (madvise(warm.page, THP_HUGE_SIZE, MADV_POPULATE_WRITE) != 0) {
        if (errno == EINVAL) atomicSet(warm.unsupported, 1);
        else atomicIncr(c->failures, 1);
    }
    long long took = ustime() - t0;
    madvise(warm.page, THP_HUGE_SIZE, MADV_DONTNEED);
    atomicIncr(c->warm_usec, ustime() - t0);
    return took;
}

/* Before a collapse (warm: the warm-up is on): warm up, and while the
 * warm-up is far slower than a zeroing the host is taking memory back, so
 * wait and warm again. Bounded per range and per pass (*pass_waits, the
 * waits so far in this pass), since a warm-up may be slow for another
 * reason, such as compaction, on every range; each wait passes the gate
 * again. 1 to collapse now, 0 when the gate said stop. */
int thpHostWaitQuick(int warm_on, int *pass_waits, thpGateFn *gate, thpCounters *c) {
    for (int tries = 0; warmHugePage(warm_on, c) > WARM_SLOW_USEC && tries < WARM_MAX_WAITS &&
                        *pass_waits < WARM_MAX_WAITS_PASS; tries++) {
        (*pass_waits)++;
        atomicIncr(c->host_waits, 1);
        usleep(WARM_WAIT_MS * 1000);
        if (!gate()) return 0;
    }
    return 1;
}
