/* afork_stats.c -- what each fork cost the server.
 *
 *  - the parent's time blocked in fork(): latest, max, total and
 *    percentiles (an hdr histogram, allocated once, written from the event
 *    loop after the fork, not in the parent's first steps after fork());
 *  - the child's ready time (fork start to the child's first action, the
 *    page-table copy time on an Async-fork kernel), and whether the fork was
 *    observed to be asynchronous: the child became ready long after fork()
 *    had returned to the parent;
 *  - the parent's main thread across fork() (CLOCK_THREAD_CPUTIME_ID and
 *    getrusage RUSAGE_THREAD just before and just after): its CPU time,
 *    voluntary and involuntary context switches and minor faults (the first
 *    touches of jemalloc's atfork handlers), so that working is told apart
 *    from waiting; and the time of our own after-fork hook, which
 *    upstream's latest_fork_usec includes;
 *  - the copy-on-write stall of the parent while an RDB, AOF or module
 *    child lives: the minor page faults the parent took and its longest
 *    event-loop iteration, for the running child and the last finished one.
 *
 * LATENCY events "fork-child-ready" and "fork-cow-stall" carry the last two
 * (milliseconds, recorded above latency-monitor-threshold like any event),
 * and LATENCY DOCTOR explains them.
 *
 * afork.c calls these at each step of a fork (with the times it took around
 * fork()), from the event loop and serverCron; the counters are ours alone.
 *
 * ----------------------------------------------------------------------------
 *
 * Copyright (c) 2026, redis-afork contributors. AGPLv3, see LICENSE. */

#include "server.h"
#include "afork_stats.h"
#include "hdr_histogram.h"
#include <sys/resource.h>

/* An asynchronous fork's child is ready this long after fork() returned
 * to the parent, and this many times later than fork() took. */
#define AFORK_ASYNC_MIN_LAG_USEC 1000
#define AFORK_ASYNC_LAG_FACTOR 4

#define AFORK_HIST_MAX_USEC (3600LL * 1000000)   /* one hour */

static struct hdr_histogram *fork_hist = NULL;

static struct {
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
    long long fork_cpu_usec;             /* parent thread across fork(); -1 none */
    long long fork_minflt;
    long long fork_nvcsw;
    long long fork_nivcsw;
    long long fork_hook_usec;            /* aforkAfterForkTimed's time; -1 none */
    size_t fork_used_bytes;              /* zmalloc_used_memory() at the latest fork */
    size_t ready_used_bytes;             /* ... at the fork whose child last reported */
    long long ready_usec;                /* that child's ready time; -1 none */
    int fork_debug_delayed;              /* the latest fork's child is held back */
    long long hist_pending_usec;         /* a fork not yet in the histogram; 0 none */
} st;

static struct rusage fork_ru_before;

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
    st.latest_child_ready_usec = -1;
    st.latest_fork_usec = -1;
    st.last_cow_minor_faults = -1;
    st.last_cow_max_eventloop_usec = -1;
    st.last_cow_child_life_usec = -1;
    st.fork_cpu_usec = st.fork_minflt = st.fork_nvcsw = st.fork_nivcsw = -1;
    st.fork_hook_usec = -1;
    st.ready_usec = -1;
}

/* The copy time expected of the next fork's child: the last reported
 * child's ready time, scaled by the memory in use now over then; -1 when
 * no child has reported yet. */
long long aforkStatsExpectedReadyUsec(size_t used_now) {
    if (st.ready_usec < 0 || st.ready_used_bytes == 0) return -1;
    return (long long)((double)st.ready_usec * (double)used_now / (double)st.ready_used_bytes);
}

/* This thread's CPU time in ns, -1 if unknown. Not getrusage()'s utime and
 * stime: those are sampled at the tick, and a fork of a few ms often shows
 * none. */
static long long threadCpuNsec(void) {
    struct timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0) return -1;
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static long long fork_cpu_ns_before = -1;

/* Just before fork(): the main thread's usage so far. */
void aforkStatsBeforeFork(void) {
    if (getrusage(RUSAGE_THREAD, &fork_ru_before) != 0) fork_ru_before.ru_minflt = -1;
    fork_cpu_ns_before = threadCpuNsec();
}

/* First thing after fork() in the parent: what fork() cost this thread. */
void aforkStatsForkUsage(void) {
    struct rusage ru;
    if (fork_ru_before.ru_minflt == -1 || getrusage(RUSAGE_THREAD, &ru) != 0) return;
    long long cpu_ns = threadCpuNsec();
    st.fork_cpu_usec = cpu_ns < 0 || fork_cpu_ns_before < 0 ? -1 : (cpu_ns - fork_cpu_ns_before) / 1000;
    st.fork_minflt = ru.ru_minflt - fork_ru_before.ru_minflt;
    st.fork_nvcsw = ru.ru_nvcsw - fork_ru_before.ru_nvcsw;
    st.fork_nivcsw = ru.ru_nivcsw - fork_ru_before.ru_nivcsw;
}

/* The after-fork hook's own time. */
void aforkStatsHookTime(long long usec) {
    st.fork_hook_usec = usec;
}

/* Put the latest fork in the histogram, from the event loop or INFO. */
static void recordPendingFork(void) {
    long long usec = st.hist_pending_usec;
    if (!usec) return;
    st.hist_pending_usec = 0;
    if (fork_hist)
        hdr_record_value(fork_hist, usec > AFORK_HIST_MAX_USEC ? AFORK_HIST_MAX_USEC : usec);
}

/* fork() returned in the parent with a child: no allocation, no file.
 * child_delayed: fork-debug-ready-delay holds the child back. */
void aforkStatsForked(monotime start, monotime ret, int purpose, int child_delayed) {
    long long usec = (long long)(ret - start);
    st.latest_fork_usec = usec;
    st.fork_used_bytes = zmalloc_used_memory();
    st.fork_debug_delayed = child_delayed;
    if (usec > st.max_fork_usec) st.max_fork_usec = usec;
    st.total_fork_usec += usec;
    st.forks++;
    /* The histogram is written later (recordPendingFork): its pages are
     * shared with the child now, and a first touch of each costs a
     * copy-on-write fault on the fork's path. */
    st.hist_pending_usec = usec < 1 ? 1 : usec;
    st.latest_child_ready_usec = -1;
    st.last_fork_async = 0;
    /* The Lua debugger's child is not tracked as the server's child. */
    if (purpose != CHILD_TYPE_LDB) {
        cow.active = 1;
        cow.start = ret;
        cow.start_minflt = minorFaults();
        st.cow_minor_faults = 0;
        st.cow_max_eventloop_usec = 0;
    }
}

/* The child's ready message: ready is its monotonic time, start the time
 * just before fork(), ret when fork() returned to the parent. Called after
 * the window closed. */
void aforkStatsChildReady(monotime ready, monotime start, monotime ret) {
    long long usec = (long long)(ready - start);
    st.latest_child_ready_usec = usec;
    /* A child held back by fork-debug-ready-delay plays a stuck one: its
     * ready time is no copy time to learn from. */
    if (!st.fork_debug_delayed) {
        st.ready_usec = usec;
        st.ready_used_bytes = st.fork_used_bytes;
    }
    if (usec > st.max_child_ready_usec)
        st.max_child_ready_usec = usec;
    long long lag = (long long)ready - (long long)ret;
    st.last_fork_async =
        lag >= AFORK_ASYNC_MIN_LAG_USEC &&
        lag >= AFORK_ASYNC_LAG_FACTOR * st.latest_fork_usec;
    latencyAddSampleIfNeeded("fork-child-ready", usec / 1000);
}

/* beforeSleep: the length of the event-loop iteration that just ended. */
void aforkStatsLoopSample(long long usec) {
    recordPendingFork();
    if (cow.active && usec > st.cow_max_eventloop_usec)
        st.cow_max_eventloop_usec = usec;
}

/* serverCron: faults so far for the running child. */
void aforkStatsCron(void) {
    if (!cow.active) return;
    long now = minorFaults();
    if (now >= 0 && cow.start_minflt >= 0)
        st.cow_minor_faults = now - cow.start_minflt;
}

/* resetChildState: the RDB, AOF or module child is gone. window_open: a
 * quiet window is open (a child killed inside one, by FLUSHALL). */
void aforkStatsChildGone(int window_open) {
    if (!cow.active) return;
    aforkStatsCron();
    cow.active = 0;
    st.last_cow_minor_faults = st.cow_minor_faults;
    st.last_cow_max_eventloop_usec = st.cow_max_eventloop_usec;
    st.last_cow_child_life_usec = (long long)(getMonotonicUs() - cow.start);
    st.cow_minor_faults = 0;
    st.cow_max_eventloop_usec = 0;
    /* The first sample of an event allocates: none inside a window. */
    if (!window_open)
        latencyAddSampleIfNeeded("fork-cow-stall", st.last_cow_max_eventloop_usec / 1000);
}

/* CONFIG RESETSTAT. */
void aforkStatsReset(void) {
    st.max_fork_usec = 0;
    st.max_child_ready_usec = 0;
    st.total_fork_usec = 0;
    st.forks = 0;
    st.hist_pending_usec = 0;
    if (fork_hist) hdr_reset(fork_hist);
}

/* A percentile of the parent's fork() time. The histogram keeps 2
 * significant digits and answers with the top of a bucket: clamp to the
 * largest value seen. */
static long long forkPercentile(double p) {
    recordPendingFork();
    if (!fork_hist || st.forks == 0) return 0;
    long long v = hdr_value_at_percentile(fork_hist, p);
    return v > st.max_fork_usec ? st.max_fork_usec : v;
}

/* INFO fork: the cost fields. Upstream's INFO stats has the latest fork
 * time and the fork count (latest_fork_usec, total_forks); these add its
 * max, total and percentiles, measured around fork() alone. */
sds aforkStatsInfo(sds info) {
    return sdscatprintf(info,
        "max_fork_usec:%lld\r\n"
        "total_fork_usec:%lld\r\n"
        "fork_p50_usec:%lld\r\n"
        "fork_p99_usec:%lld\r\n"
        "fork_p999_usec:%lld\r\n"
        "latest_fork_rate_gb_per_sec:%.2f\r\n"
        "latest_fork_child_ready_usec:%lld\r\n"
        "max_fork_child_ready_usec:%lld\r\n"
        "latest_fork_async_observed:%d\r\n"
        "current_fork_cow_minor_faults:%lld\r\n"
        "current_fork_cow_max_eventloop_usec:%lld\r\n"
        "latest_fork_cow_minor_faults:%lld\r\n"
        "latest_fork_cow_max_eventloop_usec:%lld\r\n"
        "latest_fork_child_life_usec:%lld\r\n"
        "latest_fork_cpu_usec:%lld\r\n"
        "latest_fork_minor_faults:%lld\r\n"
        "latest_fork_voluntary_switches:%lld\r\n"
        "latest_fork_involuntary_switches:%lld\r\n"
        "latest_fork_hook_usec:%lld\r\n",
        st.max_fork_usec,
        st.total_fork_usec,
        forkPercentile(50.0),
        forkPercentile(99.0),
        forkPercentile(99.9),
        server.stat_fork_rate,
        st.latest_child_ready_usec,
        st.max_child_ready_usec,
        st.last_fork_async,
        st.cow_minor_faults,
        st.cow_max_eventloop_usec,
        st.last_cow_minor_faults,
        st.last_cow_max_eventloop_usec,
        st.last_cow_child_life_usec,
        st.fork_cpu_usec,
        st.fork_minflt,
        st.fork_nvcsw,
        st.fork_nivcsw,
        st.fork_hook_usec);
}

/* LATENCY DOCTOR: what our own events mean. */
sds aforkStatsAdvice(sds report, const char *event) {
    if (!strcasecmp(event, "fork-child-ready"))
        return sdscat(report, " Time from fork() to the child's first instruction: on an Async-fork"
                              " kernel this is the page-table copy done by the child, which the server"
                              " does not wait for.");
    if (!strcasecmp(event, "fork-cow-stall"))
        return sdscatprintf(report, " Longest event-loop iteration while a fork child lived; the last"
                                    " child cost %lld minor page faults (copy-on-write) in the server.",
                            st.last_cow_minor_faults);
    return report;
}
