/* afork.c -- redis-afork's hub: the one way in from upstream Redis.
 *
 * Every hook our patches add to upstream code calls one function of this
 * file (declared in afork.h). Each passes the event on to the modules that
 * need it, in the order written here, and the modules never call each
 * other: what one module needs to know about another (is a quiet window
 * open, is Async-fork on for us, when did fork() return, is fork-thp
 * asked for), this file reads from the one and hands to the other as an
 * argument.
 *
 * This comment is the map of src/ (docs/design.md and README point here):
 *
 *   afork.c          the hub: hooks in, events out; the fork's CPU handling
 *   afork.h          the one header the hooks include
 *   afork_config.h   our rows of upstream's config table
 *   afork_window.c   the fork quiet window: ready pipe, held log lines,
 *                    held purges and background jobs
 *   afork_stats.c    what each fork cost: fork time and percentiles, child
 *                    ready time, copy-on-write stall; LATENCY events
 *   afork_kernel.c   Async-fork kernel detection, the opt-in, and the
 *                    kernel's counters of the tables each fork left to the
 *                    child
 *   afork_system.c   page tables and THP state, the smaps reader thread,
 *                    LATENCY DOCTOR and --check-system advice
 *   afork_thp.c      fork-thp: its settings, the entry points the hub
 *                    calls, its INFO fields; the only way into its parts
 *                    (declared in afork_thp_int.h), whose calls go one way
 *                    (afork_thp.c calls them; the collapse thread calls the
 *                    heap's cut and the host's warm-up):
 *     afork_thp_heap.c      the huge-page heap: fork-thp auto's machine
 *                           checks and its switch in place, the re-exec
 *                           of yes; cutting the heap into VMAs
 *     afork_thp_tables.c    a table being rehashed into, kept in 4 KiB
 *                           pages until its rehash is done
 *     afork_thp_slack.c     the slack arena: large allocations that would
 *                           leave a page of their size class unused, in
 *                           4 KiB pages (afork_alloc.h is zmalloc.c's side)
 *     afork_thp_collapse.c  the re-collapse thread, and the quiet save that
 *                           it ends
 *     afork_thp_host.c      the VM host: the warm-up that probes it, the
 *                           waits while it is busy
 *   afork_util.c     stateless helpers any module may use: /proc and /sys
 *                    reading, the kernel version, jemalloc options
 *
 * The events, and who gets them:
 *
 *   config loaded    thp (fork-thp yes: re-exec; auto: the machine checks)
 *   startup          stats, window, kernel, system, thp
 *   before fork      thp, system (their threads start nothing new), window,
 *                    kernel (its counters), stats
 *   in child         window
 *   after fork       window, stats, thp (a failed fork() only)
 *   fork timed       window, stats (upstream has taken latest_fork_usec)
 *   child ready      stats, kernel (through the window's ready pipe)
 *   child gone       stats, kernel, thp
 *   cron             window (may skip the tick), stats, thp (auto may switch
 *                    on; system is told), kernel, system
 *   event-loop       stats, system, thp
 *   INFO fork        kernel, stats, window, system, thp
 *   reset            stats, window, thp
 *   bug report       window
 *   exit             window, system, thp
 *
 * ----------------------------------------------------------------------------
 *
 * Copyright (c) 2026, redis-afork contributors. AGPLv3, see LICENSE. */

#include "server.h"
#include "afork_window.h"
#include "afork_stats.h"
#include "afork_kernel.h"
#include "afork_system.h"
#include "afork_thp.h"
#include "afork_util.h"

#define AFORK_PROBE_PERIOD_MS 5000      /* Async-fork kernel interfaces */
#define AFORK_SYSTEM_PERIOD_MS 1000     /* THP modes, VmPTE */
#define AFORK_SMAPS_PERIOD_MS 10000     /* smaps_rollup: read by a thread */

/* Hidden test config fork-probe-root: where the kernel and system modules
 * find /proc and /sys; NULL for the real ones. */
char *afork_probe_root = NULL;

/* Hidden debug config fork-debug-fork-preempt: fork on the main thread's own
 * CPUs even on an Async-fork kernel (the behaviour before
 * forkWithoutPreemption), for A/B experiments. */
int afork_debug_fork_preempt = 0;

/* The fork in progress, or the last one: what the stats need from it. */
static struct {
    int purpose;               /* CHILD_TYPE_* */
    monotime start;            /* just before fork() */
    monotime ret;              /* fork() returned in the parent */
    int widened;               /* the main thread forks on own_cpus + the child's */
    cpu_set_t own_cpus;        /* the main thread's CPUs before */
} fork_now;

static const char *probeRoot(void) {
    return afork_probe_root ? afork_probe_root : "";
}

/* Forks get a quiet window now: the config, and for "auto" the kernel. */
static int quietWindowWanted(void) {
    return aforkWindowEnabled(aforkKernelAsyncEnabled());
}

/* ------------------------------------------------------ startup and exit */

/* main(), after the config is read and before linuxMemoryWarnings(). */
void aforkConfigLoaded(void) {
    aforkThpHeapSetup(probeRoot(), aforkSystemReadVmPageReporting(probeRoot()));
}

/* linuxMemoryWarnings(): leave THP on (skip upstream's disabling). */
int aforkThpWanted(void) {
    return aforkThpHeapWanted();
}

static void childReady(monotime ready);

static void aforkAtExit(void) {
    if (getpid() != server.pid) return;
    aforkWindowEnd();
    aforkSystemStop();
    aforkThpStop();
}

/* main(), once the server is initialised. */
void aforkInit(void) {
    aforkStatsInit();
    aforkWindowInit(childReady);
    if (aforkKernelOptIn(afork_async_optin) != 0)
        serverLog(LL_WARNING, "redis-afork: fork-async-optin %s: the kernel refused the prctl "
                  "(INFO fork: fork_async_optin_errno)", afork_async_optin ? "yes" : "no");
    aforkKernelProbe(probeRoot());
    aforkSystemInit(probeRoot(), aforkThpHeapWanted());
    aforkThpInit(aforkSystemVmPageReporting());
    atexit(aforkAtExit);
    serverLog(LL_NOTICE, "redis-afork %s: Async-fork kernel: %s (%s), fork quiet window: %s, "
              "THP %s, page tables %lld kB",
              AFORK_VERSION, aforkKernelName(),
              aforkKernelAsyncEnabled() ? "enabled for this process" : "not enabled",
              quietWindowWanted() ? "on" : "off", aforkSystemThpMode(),
              aforkSystemPageTableBytes() / 1024);
}

/* ------------------------------------------------------ the life of a fork */

/* The cpulist the child of this purpose binds itself to, or NULL. */
static const char *childCpulist(int purpose) {
    return purpose == CHILD_TYPE_RDB ? server.bgsave_cpulist :
           purpose == CHILD_TYPE_AOF ? server.aof_rewrite_cpulist : NULL;
}

/* On an Async-fork kernel the child starts with the page tables left to it
 * to copy before it runs a line of Redis. It inherits the main thread's
 * CPUs, so with server-cpulist it is queued on the main thread's CPU, and
 * the main thread loses its CPU to it as soon as its slice ends, inside
 * fork(). When the child has CPUs of its own (bgsave-cpulist,
 * aof-rewrite-cpulist), the main thread forks with those added to its
 * own, so that fork() may place the child there, and takes back its own
 * CPUs as soon as fork() returns (no migration: it is on one of them). The
 * first sched_setaffinity() comes before upstream starts timing the fork
 * (latest_fork_usec), the second inside it. Making the main thread
 * SCHED_BATCH across fork() instead (no wake-up preemption) does not help:
 * the switch only moves to the restore of the policy. */
static void forkWithoutPreemption(int purpose) {
    const char *cpulist = childCpulist(purpose);
    cpu_set_t both;
    fork_now.widened = 0;
    if (!cpulist || !aforkKernelAsyncEnabled() || afork_debug_fork_preempt) return;
    if (sched_getaffinity(0, sizeof(fork_now.own_cpus), &fork_now.own_cpus) != 0) return;
    both = fork_now.own_cpus;
    if (aforkCpulistAdd(cpulist, &both) != 0 || CPU_EQUAL(&both, &fork_now.own_cpus)) return;
    fork_now.widened = sched_setaffinity(0, sizeof(both), &both) == 0;
}

static void forkPreemptionRestored(void) {
    if (fork_now.widened) sched_setaffinity(0, sizeof(fork_now.own_cpus), &fork_now.own_cpus);
    fork_now.widened = 0;
}

/* redisFork, before fork(). */
void aforkBeforeFork(int purpose) {
    aforkThpForkStarting();
    aforkSystemAllowReads(0);
    aforkWindowBeforeFork(quietWindowWanted(), aforkStatsExpectedReadyUsec(zmalloc_used_memory()));
    fork_now.purpose = purpose;
    /* The window has just closed any earlier one: files may be read. */
    aforkKernelCountersBeforeFork(probeRoot());
    aforkStatsBeforeFork();
    forkWithoutPreemption(purpose);
    fork_now.start = getMonotonicUs();
}

/* redisFork, first thing in the child. Async-signal-safe. */
void aforkInChild(void) {
    aforkWindowInChild();
}

/* On an Async-fork kernel the child copies the page tables left to it
 * before it runs a line of Redis, so before it binds itself to
 * bgsave-cpulist or aof-rewrite-cpulist: during that copy it may run only
 * where the main thread may (server-cpulist, inherited), and takes the
 * main thread's CPU. Bind it from the parent at once instead; the child's
 * own call later changes nothing. */
static void bindChildEarly(pid_t childpid, int purpose) {
    const char *cpulist = childCpulist(purpose);
    if (cpulist && aforkKernelAsyncEnabled()) aforkSetTaskCpus(childpid, cpulist);
}

/* redisFork, first thing in the parent. A failed fork() (-1) is undone
 * here, before upstream returns; with a child, nothing happens until
 * aforkAfterForkTimed(). The kernel may switch to the new child on the
 * way back from the parent's first system call after fork(): made here,
 * that switch would count in upstream's latest_fork_usec, which stock
 * Redis takes before any system call. */
void aforkAfterFork(pid_t childpid) {
    if (childpid != -1) return;
    monotime now = getMonotonicUs();
    forkPreemptionRestored();
    aforkStatsForkUsage();
    aforkWindowAfterFork(childpid, now);
    aforkThpForkFailed();
}

/* redisFork, in the parent once upstream has timed the fork
 * (latest_fork_usec, its LATENCY sample): the child gets its CPUs, the
 * window watches its ready pipe, the fork goes into the stats. fork()
 * returned usec after start, as upstream measured it. */
void aforkAfterForkTimed(pid_t childpid, long long usec) {
    monotime now = getMonotonicUs();
    fork_now.ret = fork_now.start + (monotime)(usec > 0 ? usec : 0);
    forkPreemptionRestored();
    aforkStatsForkUsage();
    bindChildEarly(childpid, fork_now.purpose);
    aforkWindowAfterFork(childpid, fork_now.ret);
    aforkStatsForked(fork_now.start, fork_now.ret, fork_now.purpose, afork_debug_ready_delay_ms != 0);
    aforkStatsHookTime((long long)(getMonotonicUs() - now));
}

/* The window's ready pipe: the child runs (called after the window closed). */
static void childReady(monotime ready) {
    aforkStatsChildReady(ready, fork_now.start, fork_now.ret);
    aforkKernelCountersAfterChild(probeRoot());
}

/* resetChildState: the RDB, AOF or module child is gone. */
void aforkChildGone(void) {
    aforkStatsChildGone(aforkWindowOpen());
    if (!aforkWindowOpen()) aforkKernelCountersAfterChild(probeRoot());
    aforkThpChildGone();
}

/* ------------------------------------------------------ the event loop */

/* serverCron, first thing: 1 to skip the tick (a quiet window is open). */
int aforkCron(void) {
    static mstime_t last_probe = 0, last_system = 0, last_smaps = 0;
    if (aforkWindowCron()) return 1;
    aforkStatsCron();
    if (aforkThpCron(server.cron_malloc_stats.process_rss, aforkSystemPageTableBytes(),
                     server.stat_fork_time, aforkKernelAsyncEnabled()))
        aforkSystemForkThpOn();
    if (server.mstime - last_probe >= AFORK_PROBE_PERIOD_MS) {
        last_probe = server.mstime;
        aforkKernelProbe(probeRoot());
    }
    if (server.mstime - last_system >= AFORK_SYSTEM_PERIOD_MS) {
        int smaps = server.mstime - last_smaps >= AFORK_SMAPS_PERIOD_MS;
        last_system = server.mstime;
        if (smaps) last_smaps = server.mstime;
        aforkSystemRefresh(probeRoot(), smaps);
    }
    return 0;
}

/* beforeSleep: the length of the event-loop iteration that just ended. */
void aforkEventLoopSample(long long usec) {
    int window_open = aforkWindowOpen();
    aforkStatsLoopSample(usec);
    aforkSystemAllowReads(!window_open);
    aforkThpLoopSample(usec, window_open);
}

/* ------------------------------------------------------ dict rehash */

/* kvstore.c: a keyspace dict (a database's keys or expires, or a cluster
 * slot's) starts a rehash into a new table. The main thread. */
void aforkTableRehashing(const void *table, size_t bytes) {
    aforkThpTableRehashing(table, bytes);
}

/* kvstore.c: that rehash is over, or the dict is emptied or released (then
 * perhaps in a lazy-free bio thread). */
void aforkTableDone(const void *old_table, size_t old_bytes, const void *new_table,
                    size_t new_bytes) {
    aforkThpTableDone(old_table, old_bytes);
    aforkThpTableDone(new_table, new_bytes);
}

/* The bytes of a dict's table idx (0 when it has none). */
static size_t dictTableBytes(dict *d, int idx) {
    return d->ht_table[idx] ? DICTHT_SIZE(d->ht_size_exp[idx]) * sizeof(dictEntry *) : 0;
}

/* A collection's dict (a hash, set or sorted set with millions of members
 * has a table as large as a keyspace's) starts a rehash. The main thread. */
void aforkDictRehashingStarted(dict *d) {
    aforkThpTableRehashing(d->ht_table[1], dictTableBytes(d, 1));
}

/* That rehash is over, or the dict is emptied or released (then perhaps in
 * a lazy-free bio thread). */
void aforkDictRehashingCompleted(dict *d) {
    aforkThpTableDone(d->ht_table[0], dictTableBytes(d, 0));
    aforkThpTableDone(d->ht_table[1], dictTableBytes(d, 1));
}

/* ------------------------------------------------------ the quiet window */

/* serverLogRaw: 1 when the line is held for later. */
int aforkLogDefer(int level, const char *msg) {
    return aforkWindowLogDefer(level, msg);
}

/* serverLogRaw: the time to print on a line. */
void aforkLogTime(struct timeval *tv) {
    aforkWindowLogTime(tv);
}

/* MEMORY PURGE, FLUSHALL: 1 when the purge is deferred. */
int aforkPurgeHeld(void) {
    return aforkWindowPurgeHeld();
}

/* bio threads, before each job. */
void aforkBackgroundWait(void) {
    aforkWindowBackgroundWait();
}

/* bugReportStart, perhaps in a signal handler: only the held log lines
 * are written (async-signal-safe), before the report. */
void aforkBugReport(void) {
    aforkWindowCrash();
}

/* ------------------------------------------------------ reports */

sds aforkInfoServer(sds info) {
    return sdscatprintf(info, "redis_afork_version:%s\r\n", AFORK_VERSION);
}

/* --version of redis-server, redis-check-rdb and redis-check-aof: the
 * upstream line ("v=X.Y.Z sha=... build=...") is kept as it is, for the
 * tools that parse it, and " afork=<version>" is appended. */
sds aforkVersion(sds version) {
    return sdscatprintf(version, " afork=%s", AFORK_VERSION);
}

/* INFO "fork": appended when the section is wanted. Cached values only. */
sds aforkInfoFork(sds info, int wanted, int *sections) {
    if (!wanted) return info;
    if ((*sections)++) info = sdscat(info, "\r\n");
    info = sdscat(info, "# Fork\r\n");
    info = aforkKernelInfo(info);
    info = aforkStatsInfo(info);
    info = aforkWindowInfo(info, quietWindowWanted());
    info = aforkSystemInfo(info);
    return aforkThpInfo(info);
}

/* CONFIG RESETSTAT. */
void aforkResetStats(void) {
    aforkStatsReset();
    aforkWindowReset();
    aforkThpReset();
}

/* LATENCY DOCTOR, for each event: name the cause on this machine. */
sds aforkLatencyAdvice(sds report, const char *event, int *advices) {
    if (strcasecmp(event, "fork") != 0) return aforkStatsAdvice(report, event);
    report = aforkSystemAdvice(report, advices);
    return aforkKernelAdvice(report, advices);
}

/* redis-server --check-system. */
int aforkCheckAsyncFork(sds *msg) {
    return aforkKernelCheck(msg);
}

int aforkCheckForkThp(sds *msg) {
    return aforkSystemCheck(msg);
}

/* ------------------------------------------------------ the rest */

/* CONFIG SET fork-thp-collapse-rate, fork-debug-thp-vma-size,
 * fork-debug-thp-collapse-warm. */
int aforkApplyThpTuning(const char **err) {
    UNUSED(err);
    aforkThpConfigChanged();
    return 1;
}

/* CONFIG SET fork-probe-root: probe the new root now, unless a quiet window
 * is open (the next periodic probe does it then). */
int aforkApplyProbeRoot(const char **err) {
    UNUSED(err);
    aforkSystemRootChanged();
    if (!aforkWindowOpen()) aforkKernelProbe(probeRoot());
    return 1;
}

/* CONFIG SET fork-async-optin: opt in or out now (a running child keeps
 * what it was forked with), then probe again. */
int aforkApplyAsyncOptIn(const char **err) {
    if (aforkKernelOptIn(afork_async_optin) != 0) {
        *err = "the kernel refused PR_SET_ASYNC_FORK (see INFO fork)";
        return 0;
    }
    if (!aforkWindowOpen()) aforkKernelProbe(probeRoot());
    return 1;
}
