/* afork_thp_int.h -- what the files of fork-thp share with each other.
 *
 * fork-thp is one module under the hub: afork.c calls afork_thp.c only
 * (afork_thp.h), and afork_thp.c calls the five files below it, declared
 * here. Calls go one way: afork_thp.c calls all five, the collapse thread
 * calls the heap's cut and the host's warm-up, handing them its gate and
 * its counters as arguments, and asks the slack code which ranges are
 * its own (in 4 KiB pages, skipped); the heap, host, tables and slack code
 * call nothing of fork-thp themselves.
 *
 *   afork_thp.c            the settings, the entry points, INFO
 *   afork_thp_heap.c       the heap in huge pages (yes's re-exec, auto's
 *                          machine checks and switch in place), cut into
 *                          VMAs
 *   afork_thp_collapse.c   the re-collapse thread, and the quiet save that
 *                          it ends
 *   afork_thp_host.c       a VM's host: the warm-up that probes it, the
 *                          waits while it is busy
 *   afork_thp_tables.c     keyspace tables in 4 KiB pages while they are
 *                          rehashed into
 *   afork_thp_slack.c      the slack arena: large allocations that would
 *                          leave a page of their size class unused, in
 *                          4 KiB pages (zmalloc.c routes them, afork_alloc.h)
 *
 * ----------------------------------------------------------------------------
 *
 * Copyright (c) 2026, redis-afork contributors. AGPLv3, see LICENSE. */

#ifndef AFORK_THP_INT_H
#define AFORK_THP_INT_H

#include <stddef.h>
#include <stdint.h>
#include "atomicvar.h"

#define THP_HUGE_SIZE (2ULL << 20)   /* bytes in a huge page */
#define THP_HUGE_PAGES 512           /* 4 KiB pages in a huge page */

/* The collapse thread's gate: waits while the thread may not change the
 * memory map; 1 when it may go on, 0 when it is told to stop. */
typedef int thpGateFn(void);

/* What the collapse thread counts and INFO shows. Written by the collapse
 * thread (and the heap and host code it runs), read by the main thread. */
typedef struct {
    redisAtomic long long passes;       /* fork_thp_collapse_passes */
    redisAtomic long long ranges;       /* ranges collapsed */
    redisAtomic long long failures;     /* madvise() errors of any kind */
    redisAtomic long long pauses;       /* waits for a slow event loop */
    redisAtomic long long usec;         /* time in MADV_COLLAPSE */
    redisAtomic long long max_usec;     /* the latest pass's longest collapse */
    redisAtomic long long cuts;         /* heap pieces advised (the VMA cut) */
    redisAtomic long long warm_usec;    /* time in warm-ups */
    redisAtomic long long host_waits;   /* waits for a busy host */
    redisAtomic long long splits;       /* ranges told to split */
    redisAtomic long long huge_before;  /* latest pass, bytes; -1 none */
    redisAtomic long long huge_after;
} thpCounters;

/* afork_thp_heap.c */
int thpHeapAuto(const char *root, int pagemap_scan, int vm_page_reporting, char *why,
                size_t size);
int thpHeapSetup(const char *root, char *status, size_t size);
void thpHeapForget(void);
int thpHeapSwitchOn(char *err, size_t size);
int thpHeapMapping(const char *maps_line, uint64_t *start, uint64_t *end);
int thpHeapCut(uint64_t start, uint64_t end, uint64_t size, int all, thpGateFn *gate,
               thpCounters *c);
int thpHeapUncut(uint64_t start, uint64_t end, thpGateFn *gate, thpCounters *c);

/* afork_thp_host.c */
void thpHostInit(void);
int thpHostWarmReady(void);
int thpHostIsWarmMapping(uint64_t start, uint64_t end);
int thpHostWaitQuick(int warm, int *pass_waits, thpGateFn *gate, thpCounters *c);

/* afork_thp_tables.c */
void thpTablesHold(const void *table, size_t bytes);
void thpTablesRelease(const void *table, size_t bytes);
void thpTablesCounts(int *held, long long *holds, long long *full);

/* afork_thp_slack.c */
void thpSlackSetup(void);
int thpSlackHolds(uint64_t start, uint64_t end);
void thpSlackCounts(int *arena, long long *active, int *ranges, long long *untracked);

/* afork_thp_collapse.c */
int thpCollapseScanWorks(void);
void thpCollapseStart(int heap);
void thpCollapseConfigure(int rate_mb, long long vma_size, int warm);
void thpCollapseLoopSample(long long usec, int allowed);
void thpCollapseForbid(void);
void thpCollapseRequestPass(int full);
void thpCollapseStop(void);
void thpCollapseStatus(char *state, size_t size, int *paused, int *running);
thpCounters *thpCollapseCounters(void);
int thpQuietSavePause(void);
void thpQuietSaveResume(void);

#endif /* AFORK_THP_INT_H */
