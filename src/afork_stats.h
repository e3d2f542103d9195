/* afork_stats.h -- what each fork cost (afork_stats.c), as seen by afork.c,
 * the only caller.
 *
 * Copyright (c) 2026, redis-afork contributors. AGPLv3, see LICENSE. */

#ifndef AFORK_STATS_H
#define AFORK_STATS_H

#include "sds.h"
#include "monotonic.h"

void aforkStatsInit(void);
void aforkStatsBeforeFork(void);
long long aforkStatsExpectedReadyUsec(size_t used_now);
/* The main thread's usage as fork() returns, read in the after-fork hook
 * into afork.c's record and handed back from the event loop. */
typedef struct {
    long long cpu_ns;          /* CLOCK_THREAD_CPUTIME_ID; -1 unknown */
    long minflt, nvcsw, nivcsw; /* getrusage(RUSAGE_THREAD); minflt -1 unknown */
    long process_minflt;       /* getrusage(RUSAGE_SELF); -1 unknown */
} aforkForkUsage;

void aforkStatsReadUsage(aforkForkUsage *u);
void aforkStatsForkUsage(const aforkForkUsage *u);
void aforkStatsHookTime(long long usec);
void aforkStatsForked(monotime start, monotime ret, int purpose, int child_delayed,
                      long process_minflt, size_t used_bytes);
void aforkStatsChildReady(monotime ready, monotime start, monotime ret);
void aforkStatsLoopSample(long long usec);
void aforkStatsCron(void);
void aforkStatsChildGone(int window_open);
void aforkStatsReset(void);
sds aforkStatsInfo(sds info);
sds aforkStatsAdvice(sds report, const char *event);

#endif /* AFORK_STATS_H */
