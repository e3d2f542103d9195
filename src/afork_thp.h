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
#define AFORK_THP_DEFAULT AFORK_THP_AUTO

/* fork-debug-thp-collapse-warm: auto (chosen from the machine), yes, no. */
#define AFORK_THP_WARM_AUTO -1

/* fork-debug-thp-vma-size's default, the size of the heap's pieces. */
#define AFORK_THP_VMA_SIZE_DEFAULT (64LL << 20)

/* fork-thp auto switches on once the page tables of the process reach
 * this many bytes, or once a fork blocks the server for
 * fork-debug-thp-auto-fork-ms (this default). afork_thp.c says why. */
#define AFORK_THP_AUTO_PAGE_TABLES (6LL << 20)
#define AFORK_THP_AUTO_FORK_MS 200

/* Config (afork_config.h rows). */
extern int afork_fork_thp;
extern int afork_thp_collapse_rate_mb;
extern long long afork_debug_thp_vma_size;
extern int afork_debug_thp_collapse_warm;
extern int afork_debug_thp_auto_fork_ms;
int aforkThpVmaSizeValid(long long size, const char **err);

void aforkThpHeapSetup(const char *root, int vm_page_reporting);
int aforkThpHeapWanted(void);
void aforkThpInit(int vm_page_reporting);
void aforkThpConfigChanged(void);
void aforkThpForkStarting(void);
void aforkThpLoopSample(long long usec, int window_open);
void aforkThpForkFailed(void);
void aforkThpChildGone(void);
int aforkThpCron(size_t rss, long long page_table_bytes, long long fork_usec, int async_fork);
void aforkThpStop(void);
void aforkThpTableRehashing(const void *table, size_t bytes);
void aforkThpTableDone(const void *table, size_t bytes);
void aforkThpReset(void);
sds aforkThpInfo(sds info);

#endif /* AFORK_THP_H */
