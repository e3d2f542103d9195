/* afork_stats.c -- what each fork cost the server.
 *
 *  - the parent's time blocked in fork(): latest, max, total and
 *    percentiles (an hdr histogram, allocated once: recording a fork inside
 *    a quiet window allocates nothing);
 *  - the child's ready time (fork start to the child's first action, the
 *    page-table copy time on an Async-fork kernel), and whether the fork was
 *    observed to be asynchronous: the child became ready long after fork()
 *    had returned to the parent;
 *  - the copy-on-write stall of the parent while an RDB, AOF or module
 *    child lives: the minor page faults the parent took and its longest
 *    event-loop iteration, for the running child and the last finished one.
 *
 * LATENCY events "fork-child-ready" and "fork-cow-stall" carry the last two
 * (milliseconds, recorded above latency-monitor-threshold like any event).
 *
 * Copyright (c) 2026, redis-afork contributors. AGPLv3, see LICENSE. */

#include "server.h"
#include "hdr_histogram.h"
#include <sys/resource.h>

/* An asynchronous fork's child is ready this long after fork() returned
 * to the parent, and this many times later than fork() took. */
#define AFORK_ASYNC_MIN_LAG_USEC 1000
#define AFORK_ASYNC_LAG_FACTOR 4

#define AFORK_HIST_MAX_USEC (3600LL * 1000000)   /* one hour */

static struct hdr_histogram *fork_hist = NULL;

/* Copy-on-write tracking of the running child. */
static struct {
    int active;
    monotime start;
    long start_minflt;
} cow = {0, 0, 0};

static long minorFaults(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) return -1;
    return ru.ru_minflt;
}

void aforkStatsInit(void) {
    if (!fork_hist) hdr_init(1, AFORK_HIST_MAX_USEC, 2, &fork_hist);
    afork_stats.latest_child_ready_usec = -1;
    afork_stats.latest_fork_usec = -1;
    afork_stats.last_cow_minor_faults = -1;
    afork_stats.last_cow_max_eventloop_usec = -1;
    afork_stats.last_cow_child_life_usec = -1;
}

/* fork() returned in the parent with a child: no allocation, no file. */
void aforkStatsForked(monotime start, monotime ret, int purpose) {
    long long usec = (long long)(ret - start);
    afork_stats.latest_fork_usec = usec;
    if (usec > afork_stats.max_fork_usec) afork_stats.max_fork_usec = usec;
    afork_stats.total_fork_usec += usec;
    afork_stats.forks++;
    if (fork_hist)
        hdr_record_value(fork_hist, usec < 1 ? 1 : usec > AFORK_HIST_MAX_USEC ? AFORK_HIST_MAX_USEC : usec);
    afork_stats.latest_child_ready_usec = -1;
    afork_stats.last_fork_async = 0;
    /* The Lua debugger's child is not tracked as the server's child. */
    if (purpose != CHILD_TYPE_LDB) {
        cow.active = 1;
        cow.start = ret;
        cow.start_minflt = minorFaults();
        afork_stats.cow_minor_faults = 0;
        afork_stats.cow_max_eventloop_usec = 0;
    }
}

/* The child's ready message: ready is its monotonic time, start the time
 * just before fork(), ret when fork() returned to the parent. Called after
 * the window closed. */
void aforkStatsChildReady(monotime ready, monotime start, monotime ret) {
    long long usec = (long long)(ready - start);
    afork_stats.latest_child_ready_usec = usec;
    if (usec > afork_stats.max_child_ready_usec)
        afork_stats.max_child_ready_usec = usec;
    long long lag = (long long)ready - (long long)ret;
    afork_stats.last_fork_async =
        lag >= AFORK_ASYNC_MIN_LAG_USEC &&
        lag >= AFORK_ASYNC_LAG_FACTOR * afork_stats.latest_fork_usec;
    latencyAddSampleIfNeeded("fork-child-ready", usec / 1000);
}

/* beforeSleep: the length of the event-loop iteration that just ended. */
void aforkEventLoopSample(long long usec) {
    aforkThpLoopSample(usec);
    if (cow.active && usec > afork_stats.cow_max_eventloop_usec)
        afork_stats.cow_max_eventloop_usec = usec;
}

/* serverCron: faults so far for the running child. */
void aforkStatsCron(void) {
    if (!cow.active) return;
    long now = minorFaults();
    if (now >= 0 && cow.start_minflt >= 0)
        afork_stats.cow_minor_faults = now - cow.start_minflt;
}

/* resetChildState: the RDB, AOF or module child is gone. */
void aforkChildDone(void) {
    aforkThpChildGone();
    if (!cow.active) return;
    aforkStatsCron();
    cow.active = 0;
    afork_stats.last_cow_minor_faults = afork_stats.cow_minor_faults;
    afork_stats.last_cow_max_eventloop_usec = afork_stats.cow_max_eventloop_usec;
    afork_stats.last_cow_child_life_usec = (long long)(getMonotonicUs() - cow.start);
    afork_stats.cow_minor_faults = 0;
    afork_stats.cow_max_eventloop_usec = 0;
    /* A child killed inside a window (FLUSHALL): the first sample of an
     * event allocates, so none then. */
    if (!aforkQuietWindowOpen())
        latencyAddSampleIfNeeded("fork-cow-stall", afork_stats.last_cow_max_eventloop_usec / 1000);
}

void aforkStatsReset(void) {
    afork_stats.max_fork_usec = 0;
    afork_stats.total_fork_usec = 0;
    afork_stats.forks = 0;
    if (fork_hist) hdr_reset(fork_hist);
}

/* A percentile of the parent's fork() time. The histogram keeps 2
 * significant digits and answers with the top of a bucket: clamp to the
 * largest value seen. */
static long long forkPercentile(double p) {
    if (!fork_hist || afork_stats.forks == 0) return 0;
    long long v = hdr_value_at_percentile(fork_hist, p);
    return v > afork_stats.max_fork_usec ? afork_stats.max_fork_usec : v;
}

/* INFO fork: the cost fields. */
sds aforkInfoForkCost(sds info) {
    return sdscatprintf(info,
        "latest_fork_parent_usec:%lld\r\n"
        "max_fork_parent_usec:%lld\r\n"
        "total_fork_parent_usec:%lld\r\n"
        "forks_since_reset:%lld\r\n"
        "fork_parent_p50_usec:%lld\r\n"
        "fork_parent_p99_usec:%lld\r\n"
        "fork_parent_p999_usec:%lld\r\n"
        "latest_fork_rate_gb_per_sec:%.2f\r\n"
        "latest_fork_child_ready_usec:%lld\r\n"
        "max_fork_child_ready_usec:%lld\r\n"
        "latest_fork_async_observed:%d\r\n"
        "fork_cow_child_active:%d\r\n"
        "fork_cow_minor_faults:%lld\r\n"
        "fork_cow_max_eventloop_usec:%lld\r\n"
        "last_fork_cow_minor_faults:%lld\r\n"
        "last_fork_cow_max_eventloop_usec:%lld\r\n"
        "last_fork_child_life_usec:%lld\r\n",
        afork_stats.latest_fork_usec,
        afork_stats.max_fork_usec,
        afork_stats.total_fork_usec,
        afork_stats.forks,
        forkPercentile(50.0),
        forkPercentile(99.0),
        forkPercentile(99.9),
        server.stat_fork_rate,
        afork_stats.latest_child_ready_usec,
        afork_stats.max_child_ready_usec,
        afork_stats.last_fork_async,
        cow.active,
        afork_stats.cow_minor_faults,
        afork_stats.cow_max_eventloop_usec,
        afork_stats.last_cow_minor_faults,
        afork_stats.last_cow_max_eventloop_usec,
        afork_stats.last_cow_child_life_usec);
}
