/* afork_thp.c -- fork-thp: the keyspace in transparent huge pages, kept
 * huge after saves.
 *
 * fork() copies one page-table entry per 4 KiB page, or one per 2 MiB huge
 * page, so a heap in huge pages makes fork() much cheaper. Since Linux 5.8
 * a copy-on-write fault on a huge page splits it and copies 4 KiB, so huge
 * pages no longer make the stall after fork() worse; but the split pages
 * stay split, and the next fork is slow again. fork-thp puts the keyspace
 * in huge pages and makes them whole again after each child:
 *
 *   fork-thp                 jemalloc backs the keyspace with huge pages
 *                            (afork_thp_heap.c); auto decides at startup
 *                            from what the machine reports
 *   fork-thp-collapse-rate   a thread re-collapses the split ranges after
 *                            each child, at most this many MB per second,
 *                            and splits the huge pages jemalloc purged in
 *                            part, after each child and when jemalloc
 *                            gives memory back
 *                            (afork_thp_collapse.c)
 *
 * and, chosen here from what the machine reports unless a deprecated
 * option of the same name sets them (INFO fork says which, *_auto):
 *
 *   warm-up                  a warm-up before each collapse, which also
 *   (fork-thp-collapse-warm) probes a VM's host (afork_thp_host.c): only
 *                            where the VM reports free pages to its host,
 *                            the one place it shortens anything
 *   VMA cut                  the heap cut into VMAs of 64 MiB, so that a
 *   (fork-thp-vma-size)      collapse blocks only the faults in its own
 *                            piece (afork_thp_heap.c)
 *   quiet save               no huge page is made while a child lives
 *   (fork-thp-quiet-save)    (afork_thp_collapse.c)
 *
 * The last two hold on every machine fork-thp runs on, so they are always
 * on unless set. The deprecated options log one line the first time they
 * are set (at startup or by CONFIG SET). With no setting at all, a keyspace
 * table being rehashed into stays in 4 KiB pages until the rehash is done
 * (afork_thp_tables.c), and a large allocation that would leave a page of
 * its size class unused is kept in 4 KiB pages (afork_thp_slack.c).
 *
 * This file holds the settings, the entry points afork.c calls and the
 * INFO fields; it reaches the other five through afork_thp_int.h. afork.c
 * calls in after the config is read (the re-exec), at startup, before each
 * fork, each event-loop iteration (with whether a quiet window is open),
 * from serverCron (memory given back), when a child is gone, and at exit
 * (the thread is joined).
 *
 * ----------------------------------------------------------------------------
 *
 * Copyright (c) 2026, redis-afork contributors. AGPLv3, see LICENSE. */

#include "server.h"
#include "afork_thp.h"
#include "afork_thp_int.h"

/* Config (afork_config.h rows). */
int afork_fork_thp = AFORK_THP_DEFAULT;
int afork_thp_collapse_rate_mb = 256;
int afork_thp_quiet_save = AFORK_THP_TUNE_AUTO;
int afork_thp_collapse_warm = AFORK_THP_TUNE_AUTO;
char *afork_thp_vma_size = NULL;     /* "auto" or a memory value */

/* The deprecated options, for their one log line each. */
static const char *deprecated_names[] = {
    "fork-thp-vma-size", "fork-thp-quiet-save", "fork-thp-collapse-warm", NULL
};

/* Main thread only. */
static struct {
    int asked;                /* fork-thp yes, or auto and it chose on */
    int heap;                 /* the keyspace is in huge pages (fork-thp in effect) */
    int vm_page_reporting;    /* the VM reports free pages to its host */
    int deprecated_logged;    /* bit i: deprecated_names[i] was logged */
    char status[256];         /* fork_thp_heap: "on", "off", "refused: <why>";
                                 with auto, "on: auto: <why>", "off: auto: <why>" */
    long long quiet_saves;    /* forks that turned huge pages off */
    int sync_hold;            /* child gone, huge pages still off: a replica
                                 catches up (replicaCatchingUp) */
    long long sync_holds;     /* children after which that happened */
    unsigned long long purged_mark; /* purgedBytes() at the last pass */
} thp;

/* main(), after the config is read and before linuxMemoryWarnings(). root:
 * fork-probe-root ("" for the real /proc and /sys). With fork-thp auto the
 * decision is thpHeapAuto()'s, made again after a re-exec. vm_page_reporting:
 * the VM reports free pages to its host (as INFO vm_free_page_reporting). */
void aforkThpHeapSetup(const char *root, int vm_page_reporting) {
    char why[192];
    int autom = afork_fork_thp == AFORK_THP_AUTO && !server.sentinel_mode;
    thp.asked = afork_fork_thp == AFORK_THP_YES;
    if (autom) thp.asked = thpHeapAuto(root, thpCollapseScanWorks(), vm_page_reporting, why, sizeof(why));
    thp.heap = thpHeapSetup(thp.asked, autom ? why : NULL, root, thp.status, sizeof(thp.status));
    if (thp.heap) thpSlackSetup();
    if (thp.heap && !autom && vm_page_reporting)
        serverLog(LL_WARNING, "fork-thp yes on a VM that reports free memory to its host: the first "
                  "write to each new huge page of the keyspace waits while the host backs its 2 MiB, "
                  "milliseconds in the main thread each time the dataset grows into memory the host "
                  "took back (fork-thp auto stays off here)");
}

/* linuxMemoryWarnings(): skip upstream's THP disabling and warning. */
int aforkThpHeapWanted(void) {
    return thp.heap;
}

/* What the tuning options choose: the value set, or when not set (auto)
 * the machine's. The quiet save and the 64 MiB cut help wherever fork-thp
 * runs; the warm-up only shortens collapses where the host takes the
 * guest's free pages back, and elsewhere costs a 2 MiB zeroing a range. */
static int quietSaveOn(void) {
    return afork_thp_quiet_save == AFORK_THP_TUNE_AUTO ? 1 : afork_thp_quiet_save;
}

static int collapseWarmOn(void) {
    return afork_thp_collapse_warm == AFORK_THP_TUNE_AUTO ? thp.vm_page_reporting
                                                          : afork_thp_collapse_warm;
}

static int vmaSizeAuto(void) {
    return !afork_thp_vma_size || !strcasecmp(afork_thp_vma_size, "auto");
}

static long long vmaSize(void) {
    int err;
    if (vmaSizeAuto()) return AFORK_THP_VMA_SIZE_DEFAULT;
    long long size = (long long)memtoull(afork_thp_vma_size, &err);
    return err ? AFORK_THP_VMA_SIZE_DEFAULT : size;
}

/* A deprecated option was set (name: its name): one log line the first
 * time. */
void aforkThpDeprecatedSet(const char *name) {
    for (int i = 0; deprecated_names[i]; i++) {
        if (strcmp(name, deprecated_names[i]) != 0 || (thp.deprecated_logged & (1 << i))) continue;
        thp.deprecated_logged |= 1 << i;
        serverLog(LL_WARNING, "%s is deprecated and will be removed in the next release: it is "
                              "honoured, but without it redis-afork chooses the value from the "
                              "machine (INFO fork shows it)", name);
    }
}

/* Startup: the deprecated options set in the config, the thread's configs,
 * and the thread when it has work to do. vm_page_reporting: the VM reports
 * free pages to its host (INFO vm_free_page_reporting). */
void aforkThpInit(int vm_page_reporting) {
    thp.vm_page_reporting = vm_page_reporting;
    if (!vmaSizeAuto()) aforkThpDeprecatedSet("fork-thp-vma-size");
    if (afork_thp_quiet_save != AFORK_THP_TUNE_AUTO) aforkThpDeprecatedSet("fork-thp-quiet-save");
    if (afork_thp_collapse_warm != AFORK_THP_TUNE_AUTO)
        aforkThpDeprecatedSet("fork-thp-collapse-warm");
    aforkThpConfigChanged();
    thpCollapseStart(thp.heap);
}

/* Exit: stop the collapse thread and wait for it. */
void aforkThpStop(void) {
    thpCollapseStop();
}

/* CONFIG SET fork-thp-collapse-rate, fork-thp-vma-size,
 * fork-thp-collapse-warm: hand the new values to the thread. */
void aforkThpConfigChanged(void) {
    thpCollapseConfigure(afork_thp_collapse_rate_mb, vmaSize(), collapseWarmOn());
}

/* fork-thp-vma-size: auto, 0, or whole huge pages and at least two of
 * them (a memory value: 64mb, 1gb, 67108864). */
int aforkThpVmaSizeValid(char *val, const char **err) {
    int memerr;
    if (!strcasecmp(val, "auto")) return 1;
    unsigned long long size = memtoull(val, &memerr);
    if (memerr || !*val) {
        *err = "argument must be auto or a memory value";
        return 0;
    }
    if (size == 0 || (size % THP_HUGE_SIZE == 0 && size >= 2 * THP_HUGE_SIZE && size <= LLONG_MAX))
        return 1;
    *err = "must be auto, 0 (off) or a multiple of 2mb, at least 4mb";
    return 0;
}

/* Before every fork: the thread must not start a collapse now, and with
 * fork-thp-quiet-save no huge page is made until the child is gone. */
void aforkThpForkStarting(void) {
    thpCollapseForbid();
    if (thp.heap && quietSaveOn() && thpQuietSavePause()) thp.quiet_saves++;
}

/* fork() failed: there is no child to wait for (a replica still catching
 * up from an earlier child keeps its hold). */
void aforkThpForkFailed(void) {
    if (!thp.sync_hold) thpQuietSaveResume();
}

/* A primary's full sync is not over when its child is. Until the replica
 * has loaded the RDB and taken the writes made meanwhile, the primary keeps
 * those writes in its replication buffer, which grows by the write rate. In
 * huge pages that growth is a 2 MiB fault every few dozen milliseconds,
 * each zeroing 2 MiB in the main thread (milliseconds in a VM whose host
 * backs memory on first touch); in 4 KiB pages the same zeroing is spread
 * thin. So huge pages stay off, and the re-collapse waits, while a replica
 * is not online, has not acknowledged the snapshot's offset yet (it acks
 * once it has loaded the RDB; a primary whose offset is still 0 waits for
 * its first acknowledged write), or still has more writes to receive than
 * the replication backlog holds (the stream's own steady state). */
static int replicaCatchingUp(void) {
    listIter li;
    listNode *ln;
    listRewind(server.slaves, &li);
    while ((ln = listNext(&li)) != NULL) {
        client *r = ln->value;
        if (r->flags & CLIENT_REPL_RDBONLY) continue;
        if (r->replstate != SLAVE_STATE_ONLINE || r->repl_start_cmd_stream_on_ack) return 1;
        if (r->repl_ack_off <= 0 || r->repl_ack_off < r->psync_initial_offset) return 1;
        if (getClientOutputBufferMemoryUsage(r) > (size_t)server.repl_backlog_size) return 1;
    }
    return 0;
}

/* Bytes jemalloc has given back to the kernel since startup (pages purged,
 * all arenas), as of the stats epoch serverCron refreshes every 100 ms. */
static unsigned long long purgedBytes(void) {
#if defined(USE_JEMALLOC)
    char name[64];
    uint64_t dirty = 0, muzzy = 0;
    size_t page = 0, sz = sizeof(uint64_t), psz = sizeof(size_t);
    snprintf(name, sizeof(name), "stats.arenas.%u.dirty_purged", MALLCTL_ARENAS_ALL);
    je_mallctl(name, &dirty, &sz, NULL, 0);
    snprintf(name, sizeof(name), "stats.arenas.%u.muzzy_purged", MALLCTL_ARENAS_ALL);
    sz = sizeof(uint64_t);
    je_mallctl(name, &muzzy, &sz, NULL, 0);
    je_mallctl("arenas.page", &page, &psz, NULL, 0);
    return (unsigned long long)(dirty + muzzy) * page;
#else
    return 0;
#endif
}

/* The child is gone and no replica catches up: huge pages again, and the
 * re-collapse of what the child's copy-on-write split. */
static void resumeAfterChild(void) {
    thp.sync_hold = 0;
    thpQuietSaveResume();
    thp.purged_mark = purgedBytes();
    if (afork_thp_collapse_rate_mb > 0) thpCollapseRequestPass(1);
}

/* Each event-loop iteration (beforeSleep): publish what the thread needs.
 * window_open: a fork quiet window is open. */
void aforkThpLoopSample(long long usec, int window_open) {
    thpCollapseLoopSample(usec, !hasActiveChildProcess() && !window_open);
    if (thp.sync_hold && !hasActiveChildProcess() && !replicaCatchingUp()) resumeAfterChild();
}

/* serverCron, once a second: memory given back. Each page jemalloc purges
 * inside a huge page leaves RSS but keeps the huge page in use until it is
 * split; RSS alone does not show it (activedefrag frees as much as it
 * allocates). Once jemalloc has purged 1/64 of RSS, and at least 32 MB,
 * since the last pass, a split-only pass splits those huge pages and
 * collapses nothing (that would fill the holes again); it runs in the
 * collapse thread. rss: as INFO used_memory_rss. */
#define PURGED_MIN (32ULL << 20)
void aforkThpCron(size_t rss) {
    static mstime_t last = 0;
    if (!thp.heap || server.mstime - last < 1000) return;
    last = server.mstime;
    unsigned long long purged = purgedBytes();
    if (purged < thp.purged_mark) thp.purged_mark = purged;
    unsigned long long given = purged - thp.purged_mark;
    if (afork_thp_collapse_rate_mb <= 0 || thp.sync_hold || hasActiveChildProcess() ||
        given < PURGED_MIN || given < rss / 64)
        return;
    thp.purged_mark = purged;
    thpCollapseRequestPass(0);
}

/* resetChildState: a child is gone, its copy-on-write splits can go, once
 * no replica catches up. */
void aforkThpChildGone(void) {
    if (thp.heap && replicaCatchingUp()) {
        if (!thp.sync_hold) thp.sync_holds++;
        thp.sync_hold = 1;
        return;
    }
    resumeAfterChild();
}

/* A keyspace dict starts a rehash into table, bytes long. */
void aforkThpTableRehashing(const void *table, size_t bytes) {
    if (thp.heap) thpTablesHold(table, bytes);
}

/* A keyspace dict's rehash is over or the dict goes: table (old or new)
 * may be in huge pages again. */
void aforkThpTableDone(const void *table, size_t bytes) {
    if (thp.heap) thpTablesRelease(table, bytes);
}

/* CONFIG RESETSTAT. */
void aforkThpReset(void) {
    thpCounters *c = thpCollapseCounters();
    atomicSet(c->passes, 0);
    atomicSet(c->ranges, 0);
    atomicSet(c->failures, 0);
    atomicSet(c->pauses, 0);
    atomicSet(c->usec, 0);
    atomicSet(c->cuts, 0);
    atomicSet(c->warm_usec, 0);
    atomicSet(c->host_waits, 0);
    atomicSet(c->splits, 0);
    thp.quiet_saves = 0;
    thp.sync_holds = 0;
}

/* INFO fork: the fork-thp fields. */
sds aforkThpInfo(sds info) {
    thpCounters *c = thpCollapseCounters();
    long long passes, ranges, failures, pauses, splits, usec, before, after, cuts;
    long long warm_usec, max_usec;
    long long host_waits, table_holds, table_full, slack_active, slack_untracked;
    int paused, running, tables_held, slack_arena, slack_ranges;
    char state[64];
    atomicGet(c->passes, passes);
    atomicGet(c->ranges, ranges);
    atomicGet(c->failures, failures);
    atomicGet(c->pauses, pauses);
    atomicGet(c->usec, usec);
    atomicGet(c->huge_before, before);
    atomicGet(c->huge_after, after);
    atomicGet(c->cuts, cuts);
    atomicGet(c->warm_usec, warm_usec);
    atomicGet(c->max_usec, max_usec);
    atomicGet(c->host_waits, host_waits);
    atomicGet(c->splits, splits);
    thpCollapseStatus(state, sizeof(state), &paused, &running);
    thpTablesCounts(&tables_held, &table_holds, &table_full);
    thpSlackCounts(&slack_arena, &slack_active, &slack_ranges, &slack_untracked);
    return sdscatprintf(info,
        "fork_thp:%d\r\n"
        "fork_thp_auto:%d\r\n"
        "fork_thp_heap:%s\r\n"
        "fork_thp_collapse_rate_mb_per_sec:%d\r\n"
        "fork_thp_quiet_save:%d\r\n"
        "fork_thp_quiet_save_auto:%d\r\n"
        "fork_thp_quiet_saves:%lld\r\n"
        "current_fork_thp_paused:%d\r\n"
        "current_fork_thp_replica_hold:%d\r\n"
        "fork_thp_replica_holds:%lld\r\n"
        "fork_thp_collapse_status:%s\r\n"
        "fork_thp_collapse_passes:%lld\r\n"
        "fork_thp_collapse_ranges:%lld\r\n"
        "fork_thp_collapse_failures:%lld\r\n"
        "fork_thp_collapse_pauses:%lld\r\n"
        "fork_thp_collapse_split_ranges:%lld\r\n"
        "fork_thp_collapse_usec:%lld\r\n"
        "latest_fork_thp_collapse_max_usec:%lld\r\n"
        "fork_thp_collapse_warm:%d\r\n"
        "fork_thp_collapse_warm_auto:%d\r\n"
        "fork_thp_collapse_warm_usec:%lld\r\n"
        "fork_thp_collapse_host_waits:%lld\r\n"
        "fork_thp_vma_size:%lld\r\n"
        "fork_thp_vma_size_auto:%d\r\n"
        "fork_thp_vma_cuts:%lld\r\n"
        "latest_fork_thp_collapse_huge_before_bytes:%lld\r\n"
        "latest_fork_thp_collapse_huge_after_bytes:%lld\r\n"
        "fork_thp_tables_held:%d\r\n"
        "fork_thp_tables_held_total:%lld\r\n"
        "fork_thp_tables_not_held:%lld\r\n"
        "fork_thp_slack_arena:%d\r\n"
        "fork_thp_slack_active_bytes:%lld\r\n"
        "fork_thp_slack_ranges:%d\r\n"
        "fork_thp_slack_untracked:%lld\r\n",
        thp.asked, afork_fork_thp == AFORK_THP_AUTO, thp.status, afork_thp_collapse_rate_mb,
        quietSaveOn(), afork_thp_quiet_save == AFORK_THP_TUNE_AUTO,
        thp.quiet_saves, paused, thp.sync_hold, thp.sync_holds,
        afork_thp_collapse_rate_mb <= 0 && running ? "off" : state,
        passes, ranges, failures, pauses, splits, usec, max_usec,
        collapseWarmOn() && thpHostWarmReady(), afork_thp_collapse_warm == AFORK_THP_TUNE_AUTO,
        warm_usec, host_waits, vmaSize(), vmaSizeAuto(), cuts, before, after,
        tables_held, table_holds, table_full, slack_arena, slack_active, slack_ranges,
        slack_untracked);
}
