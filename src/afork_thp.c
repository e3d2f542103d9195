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
 *                            (afork_thp_heap.c): yes from the start (a
 *                            re-exec), auto (the default) once forks get
 *                            expensive, switching the heap in place
 *   fork-thp-collapse-rate   a thread re-collapses the split ranges after
 *                            each child, at most this many MB per second,
 *                            and splits the huge pages jemalloc purged in
 *                            part, after each child and when jemalloc
 *                            gives memory back
 *                            (afork_thp_collapse.c)
 *
 * fork-thp auto costs nothing until it switches on: the server runs as
 * upstream's (disable-thp included), no thread, no re-exec, no memory of
 * its own; serverCron compares the page tables and the latest fork's
 * length with the thresholds (autoDue()). It switches on once, for the
 * life of the process, and never back: the heap would not get smaller
 * page tables by leaving huge pages. Where the machine lacks what fork-thp
 * needs, auto is off and INFO fork_thp_heap says why.
 *
 * Chosen from the machine, with hidden fork-debug-* switches for the
 * bench's ablations:
 *
 *   warm-up                  a warm-up before each collapse, which also
 *                            probes a VM's host (afork_thp_host.c): only
 *                            where the VM reports free pages to its host,
 *                            the one place it shortens anything
 *   VMA cut                  the heap cut into VMAs of 64 MiB, so that a
 *                            collapse blocks only the faults in its own
 *                            piece (afork_thp_heap.c)
 *
 * and always, with the heap in huge pages: no huge page is made while a
 * child lives (the quiet save, afork_thp_collapse.c), a keyspace table
 * being rehashed into stays in 4 KiB pages until the rehash is done
 * (afork_thp_tables.c), and a large allocation that would leave a page of
 * its size class unused is kept in 4 KiB pages (afork_thp_slack.c).
 *
 * This file holds the settings, the entry points afork.c calls and the
 * INFO fields; it reaches the other five through afork_thp_int.h. afork.c
 * calls in after the config is read (the re-exec), at startup, before each
 * fork, each event-loop iteration (with whether a quiet window is open),
 * from serverCron (auto's thresholds, memory given back), when a child is
 * gone, and at exit
 * (the thread is joined).
 *
 * ----------------------------------------------------------------------------
 *
 * Copyright (c) 2026, redis-afork contributors. AGPLv3, see LICENSE. */

#include "server.h"
#include "afork_thp.h"
#include "afork_thp_int.h"
#include <sys/prctl.h>

/* Config (afork_config.h rows). */
int afork_fork_thp = AFORK_THP_DEFAULT;
int afork_thp_collapse_rate_mb = 256;
long long afork_debug_thp_vma_size = AFORK_THP_VMA_SIZE_DEFAULT;
int afork_debug_thp_collapse_warm = AFORK_THP_WARM_AUTO;
int afork_debug_thp_auto_fork_ms = AFORK_THP_AUTO_FORK_MS;

/* fork-thp auto's state. */
#define AUTO_NONE 0      /* fork-thp yes or no */
#define AUTO_OFF 1       /* the machine lacks something: never */
#define AUTO_WAITING 2   /* until a threshold is crossed */
#define AUTO_ON 3        /* switched on, for the rest of the process's life */

/* Main thread only. */
static struct {
    int asked;                /* fork-thp yes, or auto and switched on */
    int heap;                 /* the keyspace is in huge pages (fork-thp in effect) */
    int autostate;            /* AUTO_* */
    char machine[192];        /* auto: what the machine offers, or lacks */
    int vm_page_reporting;    /* the VM reports free pages to its host */
    char status[256];         /* fork_thp_heap: "on", "off", "refused: <why>";
                                 with auto, "off: auto: <why>", "waiting: auto:
                                 <figures>", "on: auto: <why>" */
    long long quiet_saves;    /* forks that turned huge pages off */
    int sync_hold;            /* child gone, huge pages still off: a replica
                                 catches up (replicaCatchingUp) */
    long long sync_holds;     /* children after which that happened */
    unsigned long long purged_mark; /* purgedBytes() at the last pass */
} thp;

/* The heap is in huge pages from now on: disable-thp's PR_SET_THP_DISABLE
 * (upstream sets it where THP is "always") would keep it out of them, so
 * it is cleared, and server.thp_enabled is set so that the fork child
 * skips dismissMemoryInChild() as upstream does when THP is on. */
static void heapOn(void) {
    prctl(PR_SET_THP_DISABLE, 0, 0, 0, 0);
    server.thp_enabled = 1;
    thp.heap = 1;
    thpSlackSetup();
}

/* main(), after the config is read and before linuxMemoryWarnings(). root:
 * fork-probe-root ("" for the real /proc and /sys). fork-thp yes puts the
 * heap in huge pages now (a re-exec); auto checks the machine now and
 * waits (aforkThpCron). vm_page_reporting: the VM hands free pages back
 * to its host (as INFO vm_free_page_reporting). */
void aforkThpHeapSetup(const char *root, int vm_page_reporting) {
    if (afork_fork_thp == AFORK_THP_AUTO && !server.sentinel_mode) {
        thpHeapForget();
        if (thpHeapAuto(root, thpCollapseScanWorks(), vm_page_reporting, thp.machine,
                        sizeof(thp.machine))) {
            thp.autostate = AUTO_WAITING;
            serverLog(LL_NOTICE, "fork-thp auto: waiting: the keyspace stays in 4 KiB pages until "
                      "the page tables reach %lld MiB or a fork blocks the server for %d ms (%s)",
                      AFORK_THP_AUTO_PAGE_TABLES >> 20, afork_debug_thp_auto_fork_ms, thp.machine);
            snprintf(thp.status, sizeof(thp.status), "waiting: auto: page tables ? of %lld MiB",
                     AFORK_THP_AUTO_PAGE_TABLES >> 20);
        } else {
            thp.autostate = AUTO_OFF;
            snprintf(thp.status, sizeof(thp.status), "off: auto: %s", thp.machine);
            serverLog(LL_NOTICE, "fork-thp auto: off: %s; the keyspace stays in 4 KiB pages",
                      thp.machine);
        }
        return;
    }
    snprintf(thp.status, sizeof(thp.status), "off");
    if (afork_fork_thp != AFORK_THP_YES || server.sentinel_mode) {
        thpHeapForget();
        return;
    }
    thp.asked = 1;
    if (!thpHeapSetup(root, thp.status, sizeof(thp.status))) return;
    heapOn();
    if (vm_page_reporting)
        serverLog(LL_WARNING, "fork-thp yes on a VM that reports free memory to its host: the first "
                  "write to each new huge page of the keyspace waits while the host backs its 2 MiB, "
                  "milliseconds in the main thread each time the dataset grows into memory the host "
                  "took back (fork-thp auto stays off here)");
}

/* linuxMemoryWarnings(): skip upstream's THP disabling and warning. */
int aforkThpHeapWanted(void) {
    return thp.heap;
}

/* The warm-up before each collapse only shortens collapses where the host
 * takes the guest's free pages back, and elsewhere costs a 2 MiB zeroing a
 * range, so it follows the machine unless fork-debug-thp-collapse-warm
 * says otherwise. */
static int collapseWarmOn(void) {
    return afork_debug_thp_collapse_warm == AFORK_THP_WARM_AUTO ? thp.vm_page_reporting
                                                                : afork_debug_thp_collapse_warm;
}

/* Startup: the thread's configs, and the thread when it has work to do.
 * vm_page_reporting: the VM reports free pages to its host (INFO
 * vm_free_page_reporting). */
void aforkThpInit(int vm_page_reporting) {
    thp.vm_page_reporting = vm_page_reporting;
    aforkThpConfigChanged();
    thpCollapseStart(thp.heap);
}

/* Exit: stop the collapse thread and wait for it. */
void aforkThpStop(void) {
    thpCollapseStop();
}

/* CONFIG SET fork-thp-collapse-rate, fork-debug-thp-vma-size,
 * fork-debug-thp-collapse-warm: hand the new values to the thread. */
void aforkThpConfigChanged(void) {
    thpCollapseConfigure(afork_thp_collapse_rate_mb, afork_debug_thp_vma_size, collapseWarmOn());
}

/* fork-debug-thp-vma-size: 0 (one VMA), or whole huge pages and at least
 * two of them. */
int aforkThpVmaSizeValid(long long size, const char **err) {
    if (size == 0 || (size % THP_HUGE_SIZE == 0 && size >= 2 * (long long)THP_HUGE_SIZE)) return 1;
    *err = "must be 0 (one VMA) or a multiple of 2mb, at least 4mb";
    return 0;
}

/* Before every fork: the thread must not start a collapse now, and no
 * huge page is made until the child is gone (the quiet save,
 * afork_thp_collapse.c). */
void aforkThpForkStarting(void) {
    thpCollapseForbid();
    if (thp.heap && thpQuietSavePause()) thp.quiet_saves++;
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

/* fork-thp auto, waiting: has the fork become the stall? fork() copies
 * the page tables while the server waits, one 8-byte entry per 4 KiB page
 * (2 MiB per GiB of data), at some 15-45 ms per MiB of them on the
 * machines measured; in huge pages there is one entry per 2 MiB. Where
 * forks are cheap (a dataset of 1 GB) huge pages cost more than they save:
 * a few percent of p99 during saves and full syncs, and some memory of
 * each instance. The thresholds lie between the bench's 1 GB runs, where
 * huge pages lose on p99, and its 4 GB runs, where they win on every
 * figure (docs/design.md): the page tables of AFORK_THP_AUTO_PAGE_TABLES, a
 * dataset of some 3 GiB, or a fork that blocked the server for
 * fork-debug-thp-auto-fork-ms (a slow machine's forks cost that with less
 * data). An Async-fork kernel copies the page tables in the child, so the
 * fork costs no more with more data: auto waits there without switching.
 * Writes reason (for INFO and the log) when it is time; 1 then. */
static int autoDue(long long page_tables, long long fork_usec, int async_fork, char *reason,
                   size_t size) {
    long long fork_limit = (long long)afork_debug_thp_auto_fork_ms * 1000;
    if (async_fork) {
        snprintf(thp.status, sizeof(thp.status), "waiting: auto: the Async-fork kernel copies the "
                 "page tables in the child, so forks stay cheap");
        return 0;
    }
    if (page_tables >= AFORK_THP_AUTO_PAGE_TABLES) {
        snprintf(reason, size, "the page tables reached %.1f MiB (%lld MiB switches on)",
                 page_tables / 1048576.0, AFORK_THP_AUTO_PAGE_TABLES >> 20);
        return 1;
    }
    if (fork_usec >= fork_limit) {
        snprintf(reason, size, "a fork blocked the server for %lld ms (%d ms switches on)",
                 fork_usec / 1000, afork_debug_thp_auto_fork_ms);
        return 1;
    }
    snprintf(thp.status, sizeof(thp.status), "waiting: auto: page tables %.1f of %lld MiB, "
             "latest fork %lld of %d ms", page_tables < 0 ? 0 : page_tables / 1048576.0,
             AFORK_THP_AUTO_PAGE_TABLES >> 20, fork_usec / 1000, afork_debug_thp_auto_fork_ms);
    return 0;
}

/* fork-thp auto switches on, with no child (the map changes): the heap
 * goes to huge pages as it is (afork_thp_heap.c), the collapse thread
 * starts and its first pass collapses what is resident, at
 * fork-thp-collapse-rate, outside any save. 1 when it did. */
static int autoSwitchOn(const char *reason) {
    char err[128];
    int was_disabled = prctl(PR_GET_THP_DISABLE, 0, 0, 0, 0) == 1;
    if (thpHeapSwitchOn(err, sizeof(err)) != 0) {
        thp.autostate = AUTO_OFF;
        snprintf(thp.status, sizeof(thp.status), "refused: auto: %s", err);
        serverLog(LL_WARNING, "fork-thp auto refused: %s; the keyspace stays in 4 KiB pages", err);
        return 0;
    }
    heapOn();
    thp.asked = 1;
    thp.autostate = AUTO_ON;
    snprintf(thp.status, sizeof(thp.status), "on: auto: %s", reason);
    serverLog(LL_NOTICE, "fork-thp auto: on: %s; the keyspace goes to transparent huge pages, "
              "collapsed at %d MB/s%s", reason, afork_thp_collapse_rate_mb,
              was_disabled ? "; disable-thp's PR_SET_THP_DISABLE is cleared" : "");
    thpCollapseStart(1);
    resumeAfterChild();
    return 1;
}

/* serverCron, once a second. fork-thp auto, waiting: switch on once
 * autoDue() says so and no child lives (returns 1 then). page_tables: the
 * process's (VmPTE, -1 unknown); fork_usec: how long the latest fork
 * blocked the server; async_fork: fork() runs on an Async-fork kernel.
 *
 * With the heap in huge pages: memory given back. Each page jemalloc
 * purges inside a huge page leaves RSS but keeps the huge page in use
 * until it is split; RSS alone does not show it (activedefrag frees as
 * much as it allocates). Once jemalloc has purged 1/64 of RSS, and at
 * least 32 MB, since the last pass, a split-only pass splits those huge
 * pages and collapses nothing (that would fill the holes again); it runs
 * in the collapse thread. rss: as INFO used_memory_rss. */
#define PURGED_MIN (32ULL << 20)
int aforkThpCron(size_t rss, long long page_tables, long long fork_usec, int async_fork) {
    static mstime_t last = 0;
    char reason[128];
    if (server.mstime - last < 1000) return 0;
    last = server.mstime;
    if (thp.autostate == AUTO_WAITING)
        return autoDue(page_tables, fork_usec, async_fork, reason, sizeof(reason)) &&
               !hasActiveChildProcess() && autoSwitchOn(reason);
    if (!thp.heap) return 0;
    unsigned long long purged = purgedBytes();
    if (purged < thp.purged_mark) thp.purged_mark = purged;
    unsigned long long given = purged - thp.purged_mark;
    if (afork_thp_collapse_rate_mb <= 0 || thp.sync_hold || hasActiveChildProcess() ||
        given < PURGED_MIN || given < rss / 64)
        return 0;
    thp.purged_mark = purged;
    thpCollapseRequestPass(0);
    return 0;
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
        "fork_thp_auto_page_tables_bytes:%lld\r\n"
        "fork_thp_auto_fork_usec:%lld\r\n"
        "fork_thp_collapse_rate_mb_per_sec:%d\r\n"
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
        "fork_thp_collapse_warm_usec:%lld\r\n"
        "fork_thp_collapse_host_waits:%lld\r\n"
        "fork_thp_vma_size:%lld\r\n"
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
        thp.asked, afork_fork_thp == AFORK_THP_AUTO, thp.status,
        AFORK_THP_AUTO_PAGE_TABLES, (long long)afork_debug_thp_auto_fork_ms * 1000,
        afork_thp_collapse_rate_mb, thp.quiet_saves, paused, thp.sync_hold, thp.sync_holds,
        afork_thp_collapse_rate_mb <= 0 && running ? "off" : state,
        passes, ranges, failures, pauses, splits, usec, max_usec,
        collapseWarmOn() && thpHostWarmReady(), warm_usec, host_waits,
        afork_debug_thp_vma_size, cuts, before, after,
        tables_held, table_holds, table_full, slack_arena, slack_active, slack_ranges,
        slack_untracked);
}
