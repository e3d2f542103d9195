/* afork_system.h -- the machine's share of a fork's cost (afork_system.c),
 * as seen by afork.c, the only caller.
 *
 * Copyright (c) 2026, redis-afork contributors. AGPLv3, see LICENSE. */

#ifndef AFORK_SYSTEM_H
#define AFORK_SYSTEM_H

#include "sds.h"

void aforkSystemInit(const char *root, int fork_thp);
void aforkSystemRefresh(const char *root, int with_smaps);
void aforkSystemRootChanged(void);
void aforkSystemAllowReads(int allowed);
void aforkSystemStop(void);
const char *aforkSystemThpMode(void);
long long aforkSystemPageTableBytes(void);
int aforkSystemVmPageReporting(void);
void aforkSystemForkThpOn(void);
int aforkSystemReadVmPageReporting(const char *root);
sds aforkSystemInfo(sds info);
sds aforkSystemAdvice(sds report, int *advices);
int aforkSystemCheck(sds *msg);

#endif /* AFORK_SYSTEM_H */
