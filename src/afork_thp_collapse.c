/* afork_thp_collapse.c -- the thread that makes the heap's huge pages whole
 * again after each save (fork-thp-collapse-rate), and the quiet save
 * that holds huge pages off while a child lives.
 *
 * After a fork, each write of the parent to a huge page it shares with the
 * child splits it (Linux 5.8+) and the range stays in 4 KiB pages, so the
 * next fork() copies more page tables. After each RDB, AOF or module child
 * exits, this thread walks the anonymous memory of the process and calls
 * madvise(MADV_COLLAPSE) (Linux 6.1+) on each 2 MiB range that is resident
 * but no longer huge (PAGEMAP_SCAN, Linux 6.7+, tells which; the slack
 * arena's ranges, in 4 KiB pages on purpose, are skipped), at most
 * fork-thp-collapse-rate MB per second. Ranges with fewer than 7/8 of their
 * pages resident are not collapsed (that would fill the holes jemalloc
 * purged and grow RSS) but split (splitPurgedRange): a huge page jemalloc
 * purged in part stays whole, and in use, until the kernel splits it. When
 * jemalloc gives memory back (deletes, activedefrag, eviction) the thread
 * makes a pass that only splits: every range in part resident, none
 * collapsed, so that the memory freed is given back and none refilled.
 * Without MADV_COLLAPSE and PAGEMAP_SCAN it never starts and leaves the
 * work to khugepaged.
 *
 * A collapse changes the memory map, so the thread never starts one while
 * a child lives or a fork quiet window is open (the main thread publishes
 * that before each fork and each event-loop iteration), and it pauses while
 * the main thread's event loop is slow. Before each pass it has the heap
 * cut into VMAs (afork_thp_heap.c), and before each collapse it warms a
 * huge page up, which also probes a VM's host (afork_thp_host.c); both wait
 * at this thread's gate. The thread never allocates: /proc/self/maps is
 * read whole into a static buffer.
 *
 * The quiet save: no huge page is made in this process while a child
 * lives (PR_SET_THP_DISABLE from just before fork() until the child is
 * gone). The parent's writes split the huge pages it shares with the
 * child, and khugepaged would collapse those ranges again while the child
 * still shares them: it copies 2 MiB with the mmap lock held for writing,
 * at nice 19, so it is easily preempted, and every page fault of the main
 * thread waits behind it. Faults map 4 KiB pages meanwhile; the next pass
 * rebuilds them once the child is gone. The prctl takes the mmap lock for
 * writing: before fork() that costs the main thread nothing fork() would
 * not wait for anyway; afterwards this thread clears it, before its pass,
 * so the main thread never waits behind a collapse (without the thread,
 * the main thread clears it).
 *
 * ----------------------------------------------------------------------------
 *
 * Copyright (c) 2026, redis-afork contributors. AGPLv3, see LICENSE. */

#include "server.h"
#include "afork_thp_int.h"
#include "afork_util.h"
#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>

#ifndef MADV_COLD
#define MADV_COLD 20
#endif
#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25
#endif
#ifndef PR_SET_THP_DISABLE
#define PR_SET_THP_DISABLE 41
#endif

/* PAGEMAP_SCAN (Linux 6.7+, linux/fs.h), declared here for older headers. */
#define AFORK_PAGE_IS_PRESENT (1ULL << 3)
#define AFORK_PAGE_IS_HUGE (1ULL << 6)
struct afork_pm_scan_arg {
    uint64_t size, flags, start, end, walk_end, vec, vec_len, max_pages;
    uint64_t category_inverted, category_mask, category_anyof_mask, return_mask;
};
struct afork_page_region {
    uint64_t start, end, categories;
};
#define AFORK_PAGEMAP_SCAN _IOWR('f', 16, struct afork_pm_scan_arg)

#define COLLAPSE_MIN_RESIDENT (THP_HUGE_PAGES * 7 / 8)
#define PASS_SPLIT 1                 /* memory given back: split only */
#define PASS_FULL 2                  /* a child is gone: collapse and split */
#define SLOW_LOOP_USEC 5000          /* main-loop iteration that pauses us */
#define SLOW_LOOP_PAUSE_MS 100

/* The thread, and what its lock guards. */
static struct {
    pthread_t thread;
    int started;              /* main thread only */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    char state[64];           /* fork_thp_collapse_status */
    int paused;               /* the quiet save: PR_SET_THP_DISABLE set */
    int resume_requested;     /* the thread clears it */
    int pass_requested;       /* PASS_SPLIT or PASS_FULL, 0: none */
    int stop;
} col = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};

/* What the main thread publishes for the thread, read atomically: the
 * configs the thread uses (config.c writes the variables the main thread
 * reads; afork_thp.c hands them over before the thread starts) and
 * whether it may change the memory map now. */
static struct {
    redisAtomic int allowed;             /* no child, no quiet window */
    redisAtomic long long slow_loop_ms;  /* when the event loop was last slow */
    redisAtomic int rate_mb;             /* fork-thp-collapse-rate */
    redisAtomic long long vma_size;      /* fork-debug-thp-vma-size */
    redisAtomic int warm;                /* the warm-up (afork_thp.c) */
} pub;

static thpCounters counters = {.huge_before = -1, .huge_after = -1};

static void resumeHugePagesLocked(void);

/* ---------------------------------------------------------- the walk */

/* Resident and huge 4 KiB pages of [start, start + 2 MiB), and the first
 * resident page's address; -1 on error. */
static int scanRange(int pm, uint64_t start, int *resident, int *huge, uint64_t *first) {
    struct afork_page_region regions[THP_HUGE_PAGES];
    struct afork_pm_scan_arg arg = {
        .size = sizeof(arg), .start = start, .end = start + THP_HUGE_SIZE,
        .vec = (uint64_t)(uintptr_t)regions, .vec_len = THP_HUGE_PAGES,
        .category_mask = AFORK_PAGE_IS_PRESENT,
        .return_mask = AFORK_PAGE_IS_PRESENT | AFORK_PAGE_IS_HUGE,
    };
    int n = ioctl(pm, AFORK_PAGEMAP_SCAN, &arg);
    if (n < 0) return -1;
    *resident = *huge = 0;
    *first = n > 0 ? regions[0].start : start;
    for (int i = 0; i < n; i++) {
        int pages = (int)((regions[i].end - regions[i].start) / 4096);
        *resident += pages;
        if (regions[i].categories & AFORK_PAGE_IS_HUGE) *huge += pages;
    }
    return 0;
}

static int collapseAllowedNow(void) {
    int allowed, stop;
    long long slow;
    atomicGet(pub.allowed, allowed);
    pthread_mutex_lock(&col.lock);
    stop = col.stop;
    pthread_mutex_unlock(&col.lock);
    if (stop) return -1;
    if (!allowed) return 0;
    atomicGet(pub.slow_loop_ms, slow);
    if (mstime() - slow < SLOW_LOOP_PAUSE_MS) {
        atomicIncr(counters.pauses, 1);
        return 0;
    }
    return 1;
}

/* The gate: wait until collapsing is allowed; 0 when told to stop. */
static int waitAllowed(void) {
    int ok;
    while ((ok = collapseAllowedNow()) == 0) usleep(SLOW_LOOP_PAUSE_MS * 1000);
    return ok == 1;
}

/* Sleep as needed to keep the pass at or below the rate. */
static void rateLimit(long long start_us, long long bytes) {
    int rate;
    atomicGet(pub.rate_mb, rate);
    if (rate <= 0) return;
    long long due_us = bytes * 1000000LL / ((long long)rate << 20);
    long long ahead = due_us - (ustime() - start_us);
    if (ahead > 0) usleep(ahead);
}

typedef struct {
    long long start_us, bytes, huge_before, collapsed, max_usec;
    int host_waits;      /* the warm-up's waits so far */
    int stopped;
} passState;

/* A range in part resident may be a huge page that jemalloc purged in
 * part (MADV_DONTNEED inside it, after deletes or activedefrag): the
 * kernel unmaps those 4 KiB pages, so they leave RSS, but keeps the 2 MiB
 * page whole, and in use, on its deferred-split list until memory runs
 * short. MADV_COLD on one resident page splits such a huge page now and
 * frees its unmapped pages (Linux 5.4+; a huge page still shared with a
 * child is left alone). On an ordinary page it only marks that page as a
 * reclaim candidate, which its next access undoes. Not rate-limited: a
 * split costs some hundred microseconds of this thread's time, a range
 * already split almost nothing. Like a collapse it waits while the event
 * loop is slow: splits beside activedefrag, which makes every iteration
 * slow, stall the clients. */
static void splitPurgedRange(uint64_t page, passState *p) {
    if (!waitAllowed()) {
        p->stopped = 1;
        return;
    }
    if (madvise((void *)(uintptr_t)page, 4096, MADV_COLD) == 0) atomicIncr(counters.splits, 1);
    else atomicIncr(counters.failures, 1);
}

static void collapseRange(uint64_t addr, int resident, int huge, uint64_t first, passState *p) {
    int warm;
    p->huge_before += (long long)huge * 4096;
    if (huge == THP_HUGE_PAGES || resident == 0) return;
    if (resident < COLLAPSE_MIN_RESIDENT) {
        splitPurgedRange(first, p);
        return;
    }
    atomicGet(pub.warm, warm);
    if (!waitAllowed() || !thpHostWaitQuick(warm, &p->host_waits, waitAllowed, &counters)) {
        p->stopped = 1;
        return;
    }
    long long t0 = ustime();
    int rc = madvise((void *)(uintptr_t)addr, THP_HUGE_SIZE, MADV_COLLAPSE);
    long long took = ustime() - t0;
    atomicIncr(counters.usec, took);
    if (took > p->max_usec) p->max_usec = took;
    if (rc == 0) {
        atomicIncr(counters.ranges, 1);
        p->collapsed++;
    } else if (errno == EINVAL && prctl(PR_GET_THP_DISABLE, 0, 0, 0, 0) == 1) {
        /* A fork started after the gate opened, and the quiet save turned
         * huge pages off: the pass ends, the next one follows the child. */
        atomicIncr(counters.pauses, 1);
        p->stopped = 1;
    } else if (errno != EINVAL) {
        atomicIncr(counters.failures, 1);
    }
    /* EINVAL otherwise: a range kept in 4 KiB pages on purpose (a table
     * being rehashed into, afork_thp_tables.c). The kernel has
     * MADV_COLLAPSE: the thread runs only where PAGEMAP_SCAN (6.7) works. */
    p->bytes += THP_HUGE_SIZE;
    rateLimit(p->start_us, p->bytes);
}

/* The mappings, read whole before the walk (collapsing changes the file),
 * into a static buffer: the thread never allocates, so it cannot map
 * memory if a fork starts meanwhile. A longer file is cut at a line. */
static char maps_buf[1 << 20];
static char *readMaps(int fd) {
    size_t len = 0;
    ssize_t n;
    if (lseek(fd, 0, SEEK_SET) < 0) len = 0;
    else
        while (len < sizeof(maps_buf) - 1 &&
               (n = read(fd, maps_buf + len, sizeof(maps_buf) - 1 - len)) > 0)
            len += n;
    maps_buf[len] = '\0';
    char *last = strrchr(maps_buf, '\n');
    if (last) last[1] = '\0';
    return maps_buf;
}

static void setCollapseState(const char *state) {
    pthread_mutex_lock(&col.lock);
    snprintf(col.state, sizeof(col.state), "%s", state);
    pthread_mutex_unlock(&col.lock);
}

/* A split-only pass: each range that is in part resident, whatever its
 * share, may hold a huge page purged in part. */
static void splitRange(int resident, int huge, uint64_t first, passState *p) {
    if (huge == 0 && resident > 0 && resident < THP_HUGE_PAGES) splitPurgedRange(first, p);
}

static void collapsePass(int maps_fd, int pm, int kind) {
    passState p = {.start_us = ustime()};
    if (!waitAllowed()) return;
    setCollapseState("running");
    static long long cut_size = 0;   /* the size of the last pass's pieces */
    long long size;
    atomicGet(pub.vma_size, size);
    int resize = size != cut_size;
    char *line = readMaps(maps_fd), *next;
    for (; line && *line && !p.stopped; line = next) {
        uint64_t start, end;
        next = strchr(line, '\n');
        if (next) next++;
        if (!thpHeapMapping(line, &start, &end) || thpHostIsWarmMapping(start, end) ||
            thpSlackHolds(start, end))
            continue;
        if (kind == PASS_SPLIT) {
            /* no cut: it changes the map and refills nothing */
        } else if (size > 0) {
            if (thpHeapCut(start, end, (uint64_t)size, resize, waitAllowed, &counters) != 0)
                p.stopped = 1;
        } else if (resize) {
            if (thpHeapUncut(start, end, waitAllowed, &counters) != 0) p.stopped = 1;
        }
        uint64_t lo = (start + THP_HUGE_SIZE - 1) & ~(THP_HUGE_SIZE - 1);
        uint64_t hi = end & ~(THP_HUGE_SIZE - 1);
        for (uint64_t a = lo; a < hi && !p.stopped; a += THP_HUGE_SIZE) {
            int resident, huge;
            uint64_t first;
            if (scanRange(pm, a, &resident, &huge, &first) != 0) continue;
            if (kind == PASS_SPLIT) splitRange(resident, huge, first, &p);
            else collapseRange(a, resident, huge, first, &p);
        }
    }
    atomicIncr(counters.passes, 1);
    if (kind == PASS_SPLIT) {
        setCollapseState("ready");
        return;
    }
    if (!p.stopped) cut_size = size;
    atomicSet(counters.max_usec, p.max_usec);
    atomicSet(counters.huge_before, p.huge_before);
    atomicSet(counters.huge_after, p.huge_before + p.collapsed * (long long)THP_HUGE_SIZE);
    setCollapseState("ready");
}

static void *collapseMain(void *arg) {
    int *fds = arg, maps_fd = fds[0], pm = fds[1];
    zfree(fds);
    redis_set_thread_title("afork_collapse");
    while (1) {
        pthread_mutex_lock(&col.lock);
        while (!col.pass_requested && !col.resume_requested && !col.stop)
            pthread_cond_wait(&col.cond, &col.lock);
        resumeHugePagesLocked();
        int stop = col.stop, pass = col.pass_requested;
        col.pass_requested = 0;
        pthread_mutex_unlock(&col.lock);
        if (stop) break;
        if (pass) collapsePass(maps_fd, pm, pass);
    }
    close(maps_fd);
    close(pm);
    return NULL;
}

/* ----------------------------------------------------------- startup */

/* Can this kernel tell huge from split ranges? (PAGEMAP_SCAN, 6.7+) */
static int pagemapScanWorks(int pm) {
    int resident, huge;
    uint64_t first;
    static char probe[4096];
    probe[0] = 1;
    return scanRange(pm, (uint64_t)(uintptr_t)probe & ~(THP_HUGE_SIZE - 1), &resident, &huge,
                     &first) == 0;
}

/* fork-thp auto, at startup: does PAGEMAP_SCAN work here? */
int thpCollapseScanWorks(void) {
    int pm = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
    if (pm == -1) return 0;
    int works = pagemapScanWorks(pm);
    close(pm);
    return works;
}

/* Startup: start the thread when it has work to do (heap: the keyspace is
 * in huge pages) and the kernel what it needs. */
void thpCollapseStart(int heap) {
    snprintf(col.state, sizeof(col.state), "off");
    if (!heap) return;
    if (!aforkLinuxAtLeast(6, 1)) {
        snprintf(col.state, sizeof(col.state), "khugepaged-only");
        serverLog(LL_NOTICE, "fork-thp: kernel older than 6.1 has no MADV_COLLAPSE; split huge "
                             "pages are rebuilt by khugepaged only");
        return;
    }
    int maps_fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    int pm = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
    if (maps_fd == -1 || pm == -1 || !pagemapScanWorks(pm)) {
        if (maps_fd != -1) close(maps_fd);
        if (pm != -1) close(pm);
        snprintf(col.state, sizeof(col.state), "khugepaged-only");
        serverLog(LL_NOTICE, "fork-thp: /proc/self/pagemap has no PAGEMAP_SCAN (Linux 6.7+); "
                             "split huge pages are rebuilt by khugepaged only");
        return;
    }
    thpHostInit();
    int *fds = zmalloc(sizeof(int) * 2);
    fds[0] = maps_fd;
    fds[1] = pm;
    if (pthread_create(&col.thread, NULL, collapseMain, fds) != 0) {
        zfree(fds);
        close(maps_fd);
        close(pm);
        snprintf(col.state, sizeof(col.state), "khugepaged-only");
        return;
    }
    col.started = 1;
    snprintf(col.state, sizeof(col.state), "ready");
}

/* Exit: stop the thread and wait for it. */
void thpCollapseStop(void) {
    if (!col.started) return;
    pthread_mutex_lock(&col.lock);
    col.stop = 1;
    pthread_cond_signal(&col.cond);
    pthread_mutex_unlock(&col.lock);
    pthread_join(col.thread, NULL);
    col.started = 0;
}

/* --------------------------------------------------- the main thread */

/* The configs the thread reads (at startup and on CONFIG SET). */
void thpCollapseConfigure(int rate_mb, long long vma_size, int warm) {
    atomicSet(pub.rate_mb, rate_mb);
    atomicSet(pub.vma_size, vma_size);
    atomicSet(pub.warm, warm);
}

/* Each event-loop iteration: its length, and whether the thread may change
 * the memory map (no child, no quiet window). */
void thpCollapseLoopSample(long long usec, int allowed) {
    if (usec > SLOW_LOOP_USEC) atomicSet(pub.slow_loop_ms, mstime());
    atomicSet(pub.allowed, allowed);
}

/* Before every fork: no collapse may start now. */
void thpCollapseForbid(void) {
    atomicSet(pub.allowed, 0);
}

/* A pass over the heap, when the thread runs. full: a child is gone,
 * collapse and split; else jemalloc gave memory back, split only. A full pass requested
 * meanwhile wins. */
void thpCollapseRequestPass(int full) {
    if (!col.started) return;
    pthread_mutex_lock(&col.lock);
    if (full || !col.pass_requested) col.pass_requested = full ? PASS_FULL : PASS_SPLIT;
    pthread_cond_signal(&col.cond);
    pthread_mutex_unlock(&col.lock);
}

/* INFO: the thread's state, whether the quiet save holds huge pages off,
 * whether the thread runs. */
void thpCollapseStatus(char *state, size_t size, int *paused, int *running) {
    pthread_mutex_lock(&col.lock);
    snprintf(state, size, "%s", col.state);
    *paused = col.paused;
    pthread_mutex_unlock(&col.lock);
    *running = col.started;
}

/* The counters, for INFO and CONFIG RESETSTAT. */
thpCounters *thpCollapseCounters(void) {
    return &counters;
}

/* ---------------------------------------------------- the quiet save */

/* Before fork(): no huge page until the child is gone. 1 when this call
 * turned them off. */
int thpQuietSavePause(void) {
    int paused = 0;
    pthread_mutex_lock(&col.lock);
    col.resume_requested = 0;
    if (!col.paused && prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0) == 0) {
        col.paused = 1;
        paused = 1;
    }
    pthread_mutex_unlock(&col.lock);
    return paused;
}

static void resumeHugePagesLocked(void) {
    if (col.resume_requested && col.paused) {
        prctl(PR_SET_THP_DISABLE, 0, 0, 0, 0);
        col.paused = 0;
    }
    col.resume_requested = 0;
}

/* No child any more (or fork() failed): the thread (or, without it, this
 * thread) makes huge pages possible again. */
void thpQuietSaveResume(void) {
    pthread_mutex_lock(&col.lock);
    if (col.paused) {
        col.resume_requested = 1;
        if (col.started)
            pthread_cond_signal(&col.cond);
        else
            resumeHugePagesLocked();
    }
    pthread_mutex_unlock(&col.lock);
}
