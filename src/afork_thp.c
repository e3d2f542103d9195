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
 *                            (afork_thp_heap.c)
 *   fork-thp-collapse-rate   a thread re-collapses the split ranges after
 *                            each child, at most this many MB per second
 *                            (afork_thp_collapse.c)
 *   fork-thp-collapse-warm   a warm-up before each collapse, which also
 *                            probes a VM's host (afork_thp_host.c)
 *   fork-thp-vma-size        the heap cut into VMAs of this size, so that a
 *                            collapse blocks only the faults in its own
 *                            piece (afork_thp_heap.c)
 *   fork-thp-quiet-save      no huge page is made while a child lives
 *                            (afork_thp_collapse.c)
 *
 * This file holds the settings, the entry points afork.c calls and the
 * INFO fields; it reaches the other three through afork_thp_int.h. afork.c
 * calls in after the config is read (the re-exec), at startup, before each
 * fork, each event-loop iteration (with whether a quiet window is open),
 * when a child is gone, and at exit (the thread is joined).
 *
 * ----------------------------------------------------------------------------
 *
 * Copyright (c) 2026, redis-afork contributors. AGPLv3, see LICENSE. */

#include "server.h"
#include "afork_thp.h"
#include "afork_thp_int.h"

/* Config (afork_config.h rows). */
int afork_fork_thp = 0;
int afork_thp_collapse_rate_mb = 256;
int afork_thp_quiet_save = 1;
int afork_thp_collapse_warm = 1;
long long afork_thp_vma_size = AFORK_THP_VMA_SIZE_DEFAULT;

/* Main thread only. */
static struct {
    int heap;                 /* the keyspace is in huge pages (fork-thp in effect) */
    char status[128];         /* fork_thp_heap: "on", "off" or why refused */
    long long quiet_saves;    /* forks that turned huge pages off */
} thp;

/* main(), after the config is read and before linuxMemoryWarnings(). */
void aforkThpHeapSetup(void) {
    thp.heap = thpHeapSetup(afork_fork_thp, thp.status, sizeof(thp.status));
}

/* linuxMemoryWarnings(): skip upstream's THP disabling and warning. */
int aforkThpHeapWanted(void) {
    return thp.heap;
}

/* Startup: the thread's configs, and the thread when it has work to do. */
void aforkThpInit(void) {
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
    thpCollapseConfigure(afork_thp_collapse_rate_mb, afork_thp_vma_size, afork_thp_collapse_warm);
}

/* fork-thp-vma-size: 0, or whole huge pages and at least two of them. */
int aforkThpVmaSizeValid(long long size, const char **err) {
    if (size == 0 || (size % (long long)THP_HUGE_SIZE == 0 && size >= 2 * (long long)THP_HUGE_SIZE))
        return 1;
    *err = "must be 0 (off) or a multiple of 2mb, at least 4mb";
    return 0;
}

/* Before every fork: the thread must not start a collapse now, and with
 * fork-thp-quiet-save no huge page is made until the child is gone. */
void aforkThpForkStarting(void) {
    thpCollapseForbid();
    if (thp.heap && afork_thp_quiet_save && thpQuietSavePause()) thp.quiet_saves++;
}

/* fork() failed: there is no child to wait for. */
void aforkThpForkFailed(void) {
    thpQuietSaveResume();
}

/* Each event-loop iteration (beforeSleep): publish what the thread needs.
 * window_open: a fork quiet window is open. */
void aforkThpLoopSample(long long usec, int window_open) {
    thpCollapseLoopSample(usec, !hasActiveChildProcess() && !window_open);
}

/* resetChildState: a child is gone, its copy-on-write splits can go. */
void aforkThpChildGone(void) {
    thpQuietSaveResume();
    if (afork_thp_collapse_rate_mb > 0) thpCollapseRequestPass();
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
    thp.quiet_saves = 0;
}

/* INFO fork: the fork-thp fields. */
sds aforkThpInfo(sds info) {
    thpCounters *c = thpCollapseCounters();
    long long passes, ranges, failures, pauses, usec, before, after, cuts, warm_usec, max_usec;
    long long host_waits;
    int paused, running;
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
    thpCollapseStatus(state, sizeof(state), &paused, &running);
    return sdscatprintf(info,
        "fork_thp:%d\r\n"
        "fork_thp_heap:%s\r\n"
        "fork_thp_collapse_rate_mb_per_sec:%d\r\n"
        "fork_thp_quiet_save:%d\r\n"
        "fork_thp_quiet_saves:%lld\r\n"
        "current_fork_thp_paused:%d\r\n"
        "fork_thp_collapse_status:%s\r\n"
        "fork_thp_collapse_passes:%lld\r\n"
        "fork_thp_collapse_ranges:%lld\r\n"
        "fork_thp_collapse_failures:%lld\r\n"
        "fork_thp_collapse_pauses:%lld\r\n"
        "fork_thp_collapse_usec:%lld\r\n"
        "latest_fork_thp_collapse_max_usec:%lld\r\n"
        "fork_thp_collapse_warm:%d\r\n"
        "fork_thp_collapse_warm_usec:%lld\r\n"
        "fork_thp_collapse_host_waits:%lld\r\n"
        "fork_thp_vma_size:%lld\r\n"
        "fork_thp_vma_cuts:%lld\r\n"
        "latest_fork_thp_collapse_huge_before_bytes:%lld\r\n"
        "latest_fork_thp_collapse_huge_after_bytes:%lld\r\n",
        afork_fork_thp, thp.status, afork_thp_collapse_rate_mb, afork_thp_quiet_save,
        thp.quiet_saves, paused, afork_thp_collapse_rate_mb <= 0 && running ? "off" : state,
        passes, ranges, failures, pauses, usec, max_usec,
        afork_thp_collapse_warm && thpHostWarmReady(),
        warm_usec, host_waits, afork_thp_vma_size, cuts, before, after);
}
