/* afork_thp.h -- fork-thp, a keyspace in huge pages re-collapsed after
 * saves (afork_thp.c and its parts, see afork_thp_int.h), as seen by
 * afork.c, the only caller, and by the config table (afork_config.h).
 *
 * Copyright (c) 2026, redis-afork contributors. AGPLv3, see LICENSE. */

#ifndef AFORK_THP_H
#define AFORK_THP_H

#include "sds.h"

/* Config (afork_config.h rows). */
extern int afork_fork_thp;
extern int afork_thp_collapse_rate_mb;
extern int afork_thp_quiet_save;
extern int afork_thp_collapse_warm;
extern long long afork_thp_vma_size;
#define AFORK_THP_VMA_SIZE_DEFAULT (64LL << 20)
int aforkThpVmaSizeValid(long long size, const char **err);

void aforkThpHeapSetup(void);
int aforkThpHeapWanted(void);
void aforkThpInit(void);
void aforkThpConfigChanged(void);
void aforkThpForkStarting(void);
void aforkThpLoopSample(long long usec, int window_open);
void aforkThpForkFailed(void);
void aforkThpChildGone(void);
void aforkThpStop(void);
void aforkThpReset(void);
sds aforkThpInfo(sds info);

#endif /* AFORK_THP_H */
