/* afork_thp.h -- fork-thp, a keyspace in huge pages re-collapsed after
 * saves (afork_thp.c and its parts, see afork_thp_int.h), as seen by
 * afork.c, the only caller, and by the config table (afork_config.h).
 *
 * Copyright (c) 2026, redis-afork contributors. AGPLv3, see LICENSE. */

#ifndef AFORK_THP_H
#define AFORK_THP_H

#include "sds.h"

/* fork-thp's values. AFORK_THP_DEFAULT is its default, the one place that
 * says it. */
#define AFORK_THP_NO 0
#define AFORK_THP_YES 1
#define AFORK_THP_AUTO 2
#define AFORK_THP_DEFAULT AFORK_THP_NO

/* The deprecated tuning options fork-thp-quiet-save and
 * fork-thp-collapse-warm: yes, no, or not set (auto: chosen from the
 * machine). fork-thp-vma-size is a string: "auto" or a memory value. */
#define AFORK_THP_TUNE_AUTO -1
#define AFORK_THP_VMA_SIZE_DEFAULT (64LL << 20)

/* Config (afork_config.h rows). */
extern int afork_fork_thp;
extern int afork_thp_collapse_rate_mb;
extern int afork_thp_quiet_save;
extern int afork_thp_collapse_warm;
extern char *afork_thp_vma_size;
int aforkThpVmaSizeValid(char *val, const char **err);
void aforkThpDeprecatedSet(const char *name);

void aforkThpHeapSetup(const char *root, int vm_page_reporting);
int aforkThpHeapWanted(void);
void aforkThpInit(int vm_page_reporting);
void aforkThpConfigChanged(void);
void aforkThpForkStarting(void);
void aforkThpLoopSample(long long usec, int window_open);
void aforkThpForkFailed(void);
void aforkThpChildGone(void);
void aforkThpCron(size_t rss);
void aforkThpStop(void);
void aforkThpTableRehashing(const void *table, size_t bytes);
void aforkThpTableDone(const void *table, size_t bytes);
void aforkThpReset(void);
sds aforkThpInfo(sds info);

#endif /* AFORK_THP_H */
