/* afork.h -- the redis-afork API: everything upstream Redis calls into.
 *
 * redis-afork is upstream Redis plus a small patch series (patches/ in the
 * redis-afork repository). The patches only add one-line hooks that call the
 * functions declared here; the logic lives in our own src/afork*.c files.
 * This header is included by server.h (before most of its types), so it
 * uses only basic types and sds.
 *
 * Copyright (c) 2026, redis-afork contributors. AGPLv3, see LICENSE. */

#ifndef AFORK_H
#define AFORK_H

#include <sys/types.h>
#include <sys/time.h>
#include "sds.h"
#include "monotonic.h"

#define AFORK_VERSION "0.1.0"

/* ---- afork.c: startup, INFO, stats ---- */
void aforkInit(void);
sds aforkInfoServer(sds info);
sds aforkInfoFork(sds info, int wanted, int *sections);
void aforkResetStats(void);
int aforkCron(void);     /* serverCron: 1 = skip this tick */

/* ---- afork_window.c: the fork quiet window ---- */
#define AFORK_QUIET_AUTO 0
#define AFORK_QUIET_YES 1
#define AFORK_QUIET_NO 2
extern int afork_quiet_window_mode;
extern int afork_quiet_window_timeout_ms;
extern int afork_debug_ready_delay_ms;

/* Why a window closed. */
#define AFORK_WINDOW_READY 0
#define AFORK_WINDOW_EOF 1
#define AFORK_WINDOW_TIMEOUT 2
#define AFORK_WINDOW_NEXT_FORK 3
#define AFORK_WINDOW_ABORT 4

typedef struct {
    /* afork_stats.c: fork cost */
    long long latest_fork_usec;          /* parent blocked in fork(); -1 none */
    long long max_fork_usec;
    long long total_fork_usec;
    long long forks;                     /* since the last reset */
    long long latest_child_ready_usec;   /* fork start -> child's first action; -1 none */
    long long max_child_ready_usec;
    int last_fork_async;                 /* child ready long after fork() returned */
    long long cow_minor_faults;          /* parent, while the current child lives */
    long long cow_max_eventloop_usec;
    long long last_cow_minor_faults;     /* the same for the last finished child; -1 none */
    long long last_cow_max_eventloop_usec;
    long long last_cow_child_life_usec;
    /* afork_window.c: quiet windows */
    long long latest_quiet_window_usec;  /* fork return -> window closed */
    long long quiet_windows;             /* windows opened */
    long long quiet_window_timeouts;     /* closed by the timeout */
    long long quiet_window_eofs;         /* child gone without a ready message */
    long long quiet_deferred_logs;       /* log lines held back */
    long long quiet_dropped_logs;        /* log lines lost: ring full */
} afork_fork_stats;
extern afork_fork_stats afork_stats;

void aforkWindowInit(void);
void aforkBeforeFork(int purpose);
void aforkInChild(void);
void aforkAfterFork(pid_t childpid);
int aforkLogDefer(int level, const char *msg);
void aforkLogTime(struct timeval *tv);
int aforkPurgeHeld(void);
void aforkBackgroundWait(void);
int aforkWindowCronHeld(void);
int aforkQuietWindowEnabled(void);
int aforkQuietWindowOpen(void);
int aforkQuietNow(void);
void aforkWindowEnd(void);

/* ---- afork_spawn.c: exec children without page-table copies ---- */
pid_t aforkSpawnScript(char **argv);

/* ---- afork_stats.c: what forks cost ---- */
void aforkStatsInit(void);
void aforkStatsForked(monotime start, monotime ret, int purpose);
void aforkStatsChildReady(monotime ready, monotime start, monotime ret);
void aforkEventLoopSample(long long usec);
void aforkStatsCron(void);
void aforkChildDone(void);
void aforkStatsReset(void);
sds aforkInfoForkCost(sds info);

/* ---- afork_system.c: THP, page tables, advice ---- */
typedef struct {
    char thp_enabled[16];        /* system mode: always/madvise/never; "unknown" */
    char thp_defrag[24];
    int thp_process_disabled;    /* prctl(PR_GET_THP_DISABLE); -1 unknown */
    long long anon_huge_bytes;   /* AnonHugePages of smaps_rollup; -1 unknown */
    long long page_table_bytes;  /* VmPTE; -1 unknown */
    const char *je_thp;          /* jemalloc opt.thp */
    const char *je_metadata_thp; /* jemalloc opt.metadata_thp */
} afork_system_info;
extern afork_system_info afork_system;
void aforkSystemInit(void);
void aforkSystemRefresh(int with_smaps);
sds aforkInfoForkSystem(sds info);
sds aforkLatencyAdvice(sds report, const char *event, int *advices);
int aforkCheckAsyncFork(sds *msg);
int aforkCheckForkThp(sds *msg);
const char *aforkJemallocOpt(const char *name);
int aforkKernelAtLeast(int major, int minor);

/* ---- afork_thp.c: a keyspace in huge pages, re-collapsed after saves ---- */
extern int afork_fork_thp;
extern int afork_thp_collapse_rate_mb;
void aforkThpHeapSetup(void);
int aforkThpHeapWanted(void);
void aforkThpInit(void);
void aforkThpForkStarting(void);
void aforkThpLoopSample(long long usec);
void aforkThpChildGone(void);
void aforkThpResetStats(void);
sds aforkInfoForkThp(sds info);

/* ---- afork_kernel.c: Async-fork kernel detection ---- */
#define AFORK_KERNEL_NONE 0
#define AFORK_KERNEL_ANOLIS 1
#define AFORK_KERNEL_BYTEDANCE 2
#define AFORK_KERNEL_AFORK 3       /* contrib/async-fork */
/* contrib/async-fork's per-process opt-in ("AFK" + 1, + 2). */
#define AFORK_PR_SET_ASYNC_FORK 0x41464b01
#define AFORK_PR_GET_ASYNC_FORK 0x41464b02
typedef struct {
    int kind;      /* AFORK_KERNEL_* */
    int mode;      /* the interface's own value (e.g. 0/1/2); -1 none */
    int enabled;   /* forks of this process are asynchronous */
} afork_kernel_info;
extern afork_kernel_info afork_kernel;
extern char *afork_probe_root;
ssize_t aforkReadFile(const char *path, char *buf, size_t size);
void aforkProbeKernel(const char *root, afork_kernel_info *k);
void aforkKernelRefresh(void);
const char *aforkKernelName(int kind);
int aforkKernelAsyncEnabled(void);

#endif /* AFORK_H */
