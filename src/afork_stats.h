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
void aforkStatsForkUsage(void);
void aforkStatsHookTime(long long usec);
void aforkStatsForked(monotime start, monotime ret, int purpose, int child_delayed);
void aforkStatsChildReady(monotime ready, monotime start, monotime ret);
void aforkStatsLoopSample(long long usec);
void aforkStatsCron(void);
void aforkStatsChildGone(int window_open);
void aforkStatsReset(void);
sds aforkStatsInfo(sds info);
sds aforkStatsAdvice(sds report, const char *event);

#endif /* AFORK_STATS_H */
