/* afork_window.c -- the fork quiet window.
 *
 * On an Async-fork kernel fork() returns to the parent before the child has
 * its page tables: the child copies them itself, in the kernel, before it
 * first runs in user space. Until then anything the parent does that changes
 * its memory map (mmap, munmap, mremap, mprotect, madvise, brk) makes the
 * kernel finish the copy of the VMA concerned in the parent's own context,
 * and the freeze that Async-fork removed is back.
 *
 * So every fork made through redisFork() gets a ready pipe, opened before
 * fork(); the child's very first action writes a monotonic timestamp on it.
 * From fork() returning in the parent until that message, EOF (the child
 * died first) or a timeout, the parent is in the quiet window:
 *
 *  - main-thread log lines go to a preallocated ring instead of the log file
 *    (serverLogRaw hook) and are written, in order and with their original
 *    timestamps, when the window closes;
 *  - jemalloc does not purge: decay is off on every arena from just before
 *    fork() (so the background purge thread cannot slip in) until the window
 *    closes; explicit purges (MEMORY PURGE, FLUSHALL) are deferred to then;
 *  - the background (bio) threads wait before each job: a lazy free unmaps
 *    memory, and a thread's first allocation creates its jemalloc tcache and
 *    arena (a 2 MB mmap), so each bio thread makes it before its first job,
 *    never while the window's flag is up;
 *  - serverCron ticks are skipped: they read /proc, resize tables, start
 *    active defrag (which itself pauses while a fork child lives). The
 *    timeout is checked there. It is fork-quiet-window-timeout, or longer
 *    when the child is expected to need more: AFORK_WINDOW_COPY_MARGIN
 *    times the copy time afork.c expects from the last fork's child (its
 *    ready time scaled by the memory now in use), so that the copy of a
 *    large dataset, which grows with its size, does not end the window
 *    early.
 *
 * Nothing here allocates or opens a file while the window is open.
 *
 * afork.c drives the window: before fork() (with whether this fork gets a
 * window: fork-quiet-window, and for "auto" what afork_kernel.c found), in
 * the child, after fork() (with the time fork() returned), from serverCron
 * and at exit. The child's ready message is handed back through the
 * function afork.c gave aforkWindowInit(), once the window is closed.
 *
 * ----------------------------------------------------------------------------
 *
 * Copyright (c) 2026, redis-afork contributors. AGPLv3, see LICENSE. */

#include "server.h"
#include "afork_window.h"
#include <fcntl.h>

/* server.c's fork- and signal-safe localtime (localtime.c). */
void nolocks_localtime(struct tm *tmp, time_t t, time_t tz, int dst);

/* Config (afork_config.h rows). */
int afork_quiet_window_mode = AFORK_QUIET_AUTO;
int afork_quiet_window_timeout_ms = 1000;
int afork_debug_ready_delay_ms = 0;

/* Why a window closed. */
#define AFORK_WINDOW_READY 0
#define AFORK_WINDOW_EOF 1
#define AFORK_WINDOW_TIMEOUT 2
#define AFORK_WINDOW_NEXT_FORK 3
#define AFORK_WINDOW_ABORT 4

/* The timeout is at least this many times the expected copy time. */
#define AFORK_WINDOW_COPY_MARGIN 4

/* Set while a window is open; read by other threads (lazy-free). */
static redisAtomic int quiet_now = 0;
/* This fork's timeout in microseconds (main thread writes, bio reads). */
static redisAtomic long long window_limit_usec = 1000000;

/* One fork's ready pipe and window. */
static struct {
    int rfd, wfd;              /* ready pipe; -1 when none */
    int quiet;                 /* this fork gets a quiet window */
    int open;                  /* the window is open now */
    int purge_pending;         /* a purge was asked for inside the window */
    monotime parent_return;    /* fork() returned in the parent */
    aforkReadyFn *on_ready;    /* afork.c's, for the child's ready message */
} win = { -1, -1, 0, 0, 0, 0, NULL };

/* Counters (INFO fork, CONFIG RESETSTAT). */
static struct {
    long long latest_usec;     /* fork return -> window closed */
    long long windows;         /* windows opened */
    long long timeouts;        /* closed by the timeout */
    long long eofs;            /* child gone without a ready message */
    long long deferred_logs;   /* log lines held back */
    long long dropped_logs;    /* log lines lost: ring full */
} st;

/* ------------------------------ Deferred logs ----------------------------- */

#define AFORK_LOG_RING 64
typedef struct {
    int level;                 /* serverLogRaw level, LL_RAW flag included */
    struct timeval tv;         /* when the line was logged */
    char msg[LOG_MAX_LEN];
} deferredLine;

static deferredLine log_ring[AFORK_LOG_RING];
static int log_ring_used = 0;
static int log_ring_next = 0;           /* next line to write when replaying */
static long long log_ring_dropped = 0;  /* in the current window */
static int log_replaying = 0;           /* flushing: serverLogRaw must write */
static struct timeval log_replay_tv;

/* serverLogRaw: keep a main-thread line for later while quiet. */
int aforkWindowLogDefer(int level, const char *msg) {
    if (!win.open || log_replaying) return 0;
    if (!pthread_equal(pthread_self(), server.main_thread_id)) return 0;
    if (log_ring_used == AFORK_LOG_RING) {
        log_ring_dropped++;
        st.dropped_logs++;
        return 1;
    }
    deferredLine *l = &log_ring[log_ring_used++];
    l->level = level;
    gettimeofday(&l->tv, NULL);
    size_t len = strnlen(msg, sizeof(l->msg) - 1);
    memcpy(l->msg, msg, len);
    l->msg[len] = '\0';
    st.deferred_logs++;
    return 1;
}

/* serverLogRaw: the time to print, the original one when replaying. */
void aforkWindowLogTime(struct timeval *tv) {
    if (log_replaying)
        *tv = log_replay_tv;
    else
        gettimeofday(tv, NULL);
}

static void flushDeferredLogs(void) {
    log_replaying = 1;
    for (log_ring_next = 0; log_ring_next < log_ring_used; log_ring_next++) {
        deferredLine *l = &log_ring[log_ring_next];
        log_replay_tv = l->tv;
        serverLogRaw(l->level, l->msg);
    }
    log_ring_used = log_ring_next = 0;
    log_replaying = 0;
    if (log_ring_dropped) {
        serverLog(LL_WARNING, "Fork quiet window: %lld log lines were lost "
                  "(the ring holds %d lines)", log_ring_dropped, AFORK_LOG_RING);
        log_ring_dropped = 0;
    }
}

/* Append s to buf at *off, within size (one byte is kept for the NUL). */
static void crashAppend(char *buf, size_t size, size_t *off, const char *s) {
    size_t len = strlen(s);
    if (len > size - 1 - *off) len = size - 1 - *off;
    memcpy(buf + *off, s, len);
    *off += len;
    buf[*off] = '\0';
}

/* n as at least width decimal digits (zero-padded) at *off. */
static void crashAppendNum(char *buf, size_t size, size_t *off, long long n, int width) {
    char digits[32];
    int len = ll2string(digits, sizeof(digits), n);
    while (len++ < width) crashAppend(buf, size, off, "0");
    crashAppend(buf, size, off, digits);
}

/* A held line as serverLogRaw() writes it ("pid:M 21 Nov 2026 21:49:23.547
 * * msg"), built with async-signal-safe code only: no stdio, no strftime. */
static void crashFormatLine(char *buf, size_t size, const deferredLine *l) {
    static const char *months[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                   "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
    size_t off = 0;
    struct tm tm;
    int daylight_active;
    char role = server.sentinel_mode ? 'X' : server.masterhost ? 'S' : 'M';
    char level[3] = {".-*#"[(l->level & 0xff) & 3], ' ', '\0'};

    buf[0] = '\0';
    if (l->level & LL_RAW) {
        crashAppend(buf, size, &off, l->msg);
        return;
    }
    atomicGet(server.daylight_active, daylight_active);
    nolocks_localtime(&tm, l->tv.tv_sec, server.timezone, daylight_active);
    crashAppendNum(buf, size, &off, getpid(), 0);
    char sep[4] = {':', role, ' ', '\0'};
    crashAppend(buf, size, &off, sep);
    crashAppendNum(buf, size, &off, tm.tm_mday, 2);
    crashAppend(buf, size, &off, " ");
    crashAppend(buf, size, &off, months[tm.tm_mon % 12]);
    crashAppend(buf, size, &off, " ");
    crashAppendNum(buf, size, &off, tm.tm_year + 1900, 4);
    crashAppend(buf, size, &off, " ");
    crashAppendNum(buf, size, &off, tm.tm_hour, 2);
    crashAppend(buf, size, &off, ":");
    crashAppendNum(buf, size, &off, tm.tm_min, 2);
    crashAppend(buf, size, &off, ":");
    crashAppendNum(buf, size, &off, tm.tm_sec, 2);
    crashAppend(buf, size, &off, ".");
    crashAppendNum(buf, size, &off, l->tv.tv_usec / 1000, 3);
    crashAppend(buf, size, &off, " ");
    crashAppend(buf, size, &off, level);
    crashAppend(buf, size, &off, l->msg);
    crashAppend(buf, size, &off, "\n");
}

/* The crash report: write the lines not written yet with open/write only
 * (serverLogRawFromHandler), in order and with their own timestamps. */
static void crashFlushDeferredLogs(void) {
    static char line[LOG_MAX_LEN + 64];
    for (int i = log_ring_next; i < log_ring_used; i++) {
        crashFormatLine(line, sizeof(line), &log_ring[i]);
        serverLogRawFromHandler(log_ring[i].level | LL_RAW, line);
    }
    log_ring_used = log_ring_next = 0;
    if (log_ring_dropped) {
        size_t off = 0;
        line[0] = '\0';
        crashAppend(line, sizeof(line), &off, "Fork quiet window: ");
        crashAppendNum(line, sizeof(line), &off, log_ring_dropped, 0);
        crashAppend(line, sizeof(line), &off, " log lines were lost (the ring holds ");
        crashAppendNum(line, sizeof(line), &off, AFORK_LOG_RING, 0);
        crashAppend(line, sizeof(line), &off, " lines)");
        serverLogRawFromHandler(LL_WARNING, line);
        log_ring_dropped = 0;
    }
}

/* ------------------------- Allocator purge hold --------------------------- */

#if defined(USE_JEMALLOC)
#define AFORK_MAX_ARENAS 256
static size_t narenas_mib[2], decay_mib[2][3];
static size_t narenas_miblen = 2, decay_miblen = 3;
static ssize_t saved_decay[2][AFORK_MAX_ARENAS];
static unsigned held_arenas = 0;
static int allocator_ready = 0;

/* Look the mallctl names up once, outside any window. */
static void allocatorInit(void) {
    size_t len = 3;
    if (je_mallctlnametomib("arenas.narenas", narenas_mib, &narenas_miblen)) return;
    if (je_mallctlnametomib("arena.0.dirty_decay_ms", decay_mib[0], &len)) return;
    len = 3;
    if (je_mallctlnametomib("arena.0.muzzy_decay_ms", decay_mib[1], &len)) return;
    allocator_ready = 1;
}

/* Turn decay-based purging off on every arena, remembering the settings. */
static void allocatorHold(void) {
    unsigned n = 0;
    size_t sz = sizeof(n);
    if (!allocator_ready || held_arenas) return;
    if (je_mallctlbymib(narenas_mib, narenas_miblen, &n, &sz, NULL, 0)) return;
    if (n > AFORK_MAX_ARENAS) n = AFORK_MAX_ARENAS;
    for (unsigned i = 0; i < n; i++) {
        for (int k = 0; k < 2; k++) {
            ssize_t off = -1;
            size_t vsz = sizeof(ssize_t);
            decay_mib[k][1] = i;
            /* Arenas not in use answer with an error: leave them be. */
            if (je_mallctlbymib(decay_mib[k], decay_miblen, &saved_decay[k][i], &vsz,
                                &off, sizeof(off)))
                saved_decay[k][i] = -2;
        }
    }
    held_arenas = n;
}

static void allocatorRelease(void) {
    for (unsigned i = 0; i < held_arenas; i++) {
        for (int k = 0; k < 2; k++) {
            if (saved_decay[k][i] == -2) continue;
            decay_mib[k][1] = i;
            je_mallctlbymib(decay_mib[k], decay_miblen, NULL, NULL,
                            &saved_decay[k][i], sizeof(ssize_t));
        }
    }
    held_arenas = 0;
}
#else
static void allocatorInit(void) {}
static void allocatorHold(void) {}
static void allocatorRelease(void) {}
#endif

/* Purge call sites: 1 when the purge is deferred to the window's end. */
int aforkWindowPurgeHeld(void) {
    if (!win.open) return 0;
    win.purge_pending = 1;
    return 1;
}

/* Held by a bio thread making its first allocation, and by the main
 * thread while it raises the window's flag. */
static pthread_mutex_t warm_lock = PTHREAD_MUTEX_INITIALIZER;

/* Wait while a window is open, at most its timeout from start. Called
 * with warm_lock held when held is 1; drops it while it sleeps. */
static void waitWhileQuiet(monotime start, int held) {
    long long limit_usec;
    int q;
    atomicGet(window_limit_usec, limit_usec);
    atomicGet(quiet_now, q);
    while (q && getMonotonicUs() - start < (monotime)limit_usec) {
        if (held) pthread_mutex_unlock(&warm_lock);
        usleep(100);
        if (held) pthread_mutex_lock(&warm_lock);
        atomicGet(quiet_now, q);
    }
}

/* A thread's first allocation makes jemalloc create its tcache and, while
 * the process has fewer arenas than jemalloc's limit, a new arena (a 2 MB
 * mmap). Upstream's bio threads do that in their first job. Warming every
 * bio thread up at startup would give three arenas that stock Redis does
 * not have until it uses them, and every fork would pay for them
 * (jemalloc's atfork handlers lock and unlock every arena's mutexes, and
 * each more arena adds first touches in the parent after fork()). So
 * each bio thread makes its first allocation just before its first job, as
 * late as upstream, under warm_lock, which the main thread also takes to
 * raise the window's flag: the mmap happens before a fork or after its
 * window. */
static __thread int thread_warmed = 0;

static void warmThisThread(monotime start) {
    pthread_mutex_lock(&warm_lock);
    waitWhileQuiet(start, 1);
    zfree(zmalloc(1));
    pthread_mutex_unlock(&warm_lock);
    thread_warmed = 1;
}

/* Background (bio) threads, before each job: wait while a window is open
 * (the flag is raised just before fork(), so a job picked up while the
 * kernel copies waits too). Bounded by the window's timeout on this side
 * as well, so a main thread that waits for a job (bioDrainWorker) inside a
 * window cannot deadlock. */
void aforkWindowBackgroundWait(void) {
    monotime start = getMonotonicUs();
    waitWhileQuiet(start, 0);
    if (!thread_warmed) warmThisThread(start);
}

/* ------------------------------- The window ------------------------------- */

/* Do forks get a window? async_kernel: forks of this process are
 * asynchronous, which decides for "auto". */
int aforkWindowEnabled(int async_kernel) {
    switch (afork_quiet_window_mode) {
    case AFORK_QUIET_YES: return 1;
    case AFORK_QUIET_NO: return 0;
    default: return async_kernel;
    }
}

static void windowClose(int why) {
    if (!win.open) return;
    win.open = 0;
    atomicSet(quiet_now, 0);
    st.latest_usec = getMonotonicUs() - win.parent_return;
    if (why == AFORK_WINDOW_TIMEOUT) st.timeouts++;
    if (why == AFORK_WINDOW_EOF) st.eofs++;
    allocatorRelease();
    if (win.purge_pending) {
        win.purge_pending = 0;
        jemalloc_purge();
    }
    flushDeferredLogs();
    if (why == AFORK_WINDOW_TIMEOUT) {
        long long limit_usec;
        atomicGet(window_limit_usec, limit_usec);
        serverLog(LL_NOTICE, "Fork quiet window closed after %lld ms without a "
                  "ready message from the child", limit_usec / 1000);
    }
}

/* Forget the ready pipe, closing its window first. */
static void dropReadyPipe(int why) {
    windowClose(why);
    if (win.rfd != -1) {
        aeDeleteFileEvent(server.el, win.rfd, AE_READABLE);
        close(win.rfd);
    }
    if (win.wfd != -1) close(win.wfd);
    win.rfd = win.wfd = -1;
}

static void readyHandler(aeEventLoop *el, int fd, void *privdata, int mask) {
    UNUSED(el); UNUSED(privdata); UNUSED(mask);
    monotime ready;
    ssize_t n = read(fd, &ready, sizeof(ready));
    if (n == -1 && (errno == EAGAIN || errno == EINTR)) return;
    if (n == sizeof(ready)) {
        dropReadyPipe(AFORK_WINDOW_READY);
        if (win.on_ready) win.on_ready(ready);
    } else {
        /* EOF: the child is gone without a word. */
        dropReadyPipe(AFORK_WINDOW_EOF);
    }
}

/* Before fork(): open the ready pipe; when this fork gets a window (quiet),
 * hold the allocator and the background threads. */
void aforkWindowBeforeFork(int quiet, long long expected_copy_usec) {
    int fds[2];
    long long limit = (long long)afork_quiet_window_timeout_ms * 1000;
    if (expected_copy_usec > 0 && AFORK_WINDOW_COPY_MARGIN * expected_copy_usec > limit)
        limit = AFORK_WINDOW_COPY_MARGIN * expected_copy_usec;
    atomicSet(window_limit_usec, limit);
    dropReadyPipe(AFORK_WINDOW_NEXT_FORK);
    if (pipe2(fds, O_CLOEXEC) == 0) {
        win.rfd = fds[0];
        win.wfd = fds[1];
        if (anetNonBlock(NULL, win.rfd) != ANET_OK) dropReadyPipe(AFORK_WINDOW_NEXT_FORK);
    }
    win.quiet = win.rfd != -1 && quiet;
    if (win.quiet) {
        pthread_mutex_lock(&warm_lock);   /* no bio thread mid warm-up */
        allocatorHold();
        atomicSet(quiet_now, 1);
        pthread_mutex_unlock(&warm_lock);
    }
}

/* First thing in the child: say it runs. Async-signal-safe. */
void aforkWindowInChild(void) {
    if (win.wfd == -1) return;
    if (afork_debug_ready_delay_ms) usleep(afork_debug_ready_delay_ms * 1000);
    monotime now = getMonotonicUs();
    if (write(win.wfd, &now, sizeof(now)) != sizeof(now)) {
        /* The parent sees EOF instead. */
    }
    close(win.wfd);
    close(win.rfd);
    win.wfd = win.rfd = -1;
    atomicSet(quiet_now, 0);
    allocatorRelease();   /* the child purges as usual */
}

/* First thing in the parent after fork(), which returned at parent_return:
 * open the window (childpid -1: fork() failed, no window). */
void aforkWindowAfterFork(pid_t childpid, monotime parent_return) {
    if (childpid == -1) {
        allocatorRelease();
        atomicSet(quiet_now, 0);
        dropReadyPipe(AFORK_WINDOW_NEXT_FORK);
        return;
    }
    win.parent_return = parent_return;
    if (win.wfd != -1) {
        close(win.wfd);
        win.wfd = -1;
    }
    if (win.rfd != -1 &&
        aeCreateFileEvent(server.el, win.rfd, AE_READABLE, readyHandler, NULL) == AE_ERR) {
        close(win.rfd);
        win.rfd = -1;
    }
    if (win.quiet && win.rfd != -1) {
        win.open = 1;
        st.windows++;
    } else {
        allocatorRelease();
        atomicSet(quiet_now, 0);
    }
}

/* serverCron: 1 to skip this tick (window open); closes the window when
 * the child has not spoken within the timeout. */
int aforkWindowCron(void) {
    if (!win.open) return 0;
    long long limit_usec;
    atomicGet(window_limit_usec, limit_usec);
    monotime limit = (monotime)limit_usec;
    if (getMonotonicUs() - win.parent_return < limit) return 1;
    windowClose(AFORK_WINDOW_TIMEOUT);
    return 0;
}

int aforkWindowOpen(void) {
    return win.open;
}

/* Shutdown, exit: close the window and write what it holds, now. */
void aforkWindowEnd(void) {
    windowClose(AFORK_WINDOW_ABORT);
}

/* bugReportStart, perhaps inside a signal handler: write the held lines
 * before the report and hold no more, with async-signal-safe calls only.
 * No mallctl, no purge: the allocator may be what crashed, and the process
 * is about to die with its decay settings. The first caller does it. */
void aforkWindowCrash(void) {
    static redisAtomic int claimed = 0;
    int was;
    atomicGetIncr(claimed, was, 1);
    if (was) return;
    win.open = 0;
    atomicSet(quiet_now, 0);
    crashFlushDeferredLogs();
}

/* Startup. on_ready gets the child's ready message, after the window. */
void aforkWindowInit(aforkReadyFn *on_ready) {
    win.on_ready = on_ready;
    /* Fault the ring in now, so a deferred line costs no new page. */
    memset(log_ring, 0, sizeof(log_ring));
    allocatorInit();
}

/* CONFIG RESETSTAT. */
void aforkWindowReset(void) {
    st.windows = 0;
    st.timeouts = 0;
    st.eofs = 0;
    st.deferred_logs = 0;
    st.dropped_logs = 0;
}

/* INFO fork: the window fields. enabled: forks get a window now. */
sds aforkWindowInfo(sds info, int enabled) {
    long long limit_usec;
    atomicGet(window_limit_usec, limit_usec);
    return sdscatprintf(info,
        "fork_quiet_window_enabled:%d\r\n"
        "fork_quiet_window_active:%d\r\n"
        "fork_quiet_window_timeout_usec:%lld\r\n"
        "latest_fork_quiet_window_usec:%lld\r\n"
        "fork_quiet_windows:%lld\r\n"
        "fork_quiet_window_timeouts:%lld\r\n"
        "fork_quiet_window_eofs:%lld\r\n"
        "fork_quiet_deferred_logs:%lld\r\n"
        "fork_quiet_dropped_logs:%lld\r\n",
        enabled,
        win.open,
        limit_usec,
        st.latest_usec,
        st.windows,
        st.timeouts,
        st.eofs,
        st.deferred_logs,
        st.dropped_logs);
}
