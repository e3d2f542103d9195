/* afork_thp.c -- a keyspace in transparent huge pages, kept huge after saves.
 *
 * fork() copies one page-table entry per 4 KiB page, or one per 2 MiB huge
 * page: a heap in huge pages forks about 20x faster. Since Linux 5.8
 * (commit 3917c80280c9) a copy-on-write fault on a huge page splits it and
 * copies 4 KiB, so huge pages no longer make the stall after fork() worse,
 * but the split pages stay split and the next fork is slow again.
 *
 * fork-thp yes:
 *  - jemalloc backs its extents with huge pages (opt.thp "always", which
 *    madvise()s each new extent MADV_HUGEPAGE). opt.thp is fixed when the
 *    allocator starts, before main() reads the config, so when the config
 *    asks for it and the allocator lacks it, the server re-executes itself
 *    once with JE_MALLOC_CONF set. The re-exec happens right after the
 *    config is read, before daemonizing, logging to a file or opening a
 *    socket: the pid, argv, environment and descriptors are kept. (The
 *    alternatives: a je_malloc_conf symbol is fixed at build time, and an
 *    environment variable the operator must set goes out of sync with the
 *    config file.)
 *  - disable-thp is not applied (it would undo the above), an inherited
 *    PR_SET_THP_DISABLE is cleared, and server.thp_enabled is set so the
 *    fork child keeps skipping dismissMemoryInChild() as upstream does
 *    when THP is on.
 *  - refused (log line, INFO fork_thp_heap says why) on kernels older than
 *    5.8, where a copy-on-write fault copies 2 MiB, and when THP is "never".
 *
 * fork-thp-collapse-rate N (MB/s, 0 = off): after each RDB/AOF/module child
 * exits, a thread of ours walks the anonymous memory of the process and
 * calls madvise(MADV_COLLAPSE) (Linux 6.1+) on each 2 MiB range that is
 * resident but no longer huge, at most N MB per second. It never runs while
 * a child lives or a quiet window is open (the main thread publishes that
 * before each fork and each event-loop iteration) and pauses while the main
 * thread's event loop is slow. Without MADV_COLLAPSE (EINVAL) it stops and
 * leaves the work to khugepaged. Ranges with fewer than 7/8 of their pages
 * resident are left alone: collapsing them would fill the holes jemalloc
 * purged and grow RSS.
 *
 * fork-thp-collapse-warm yes: before each MADV_COLLAPSE the thread writes a
 * 2 MiB huge page of its own (a scratch mapping, MADV_POPULATE_WRITE) and
 * frees it (MADV_DONTNEED), so the collapse's allocation, which comes next
 * on the same CPU, gets that page back from the per-CPU free list. The
 * collapse copies 2 MiB into a fresh page with the mmap lock held for
 * writing. In a VM whose host takes back the guest's free memory (free page
 * reporting), a write to a page the host has taken back faults in the host,
 * and while the host is taking memory back those faults are slow: traced,
 * the 20-30 ms collapses all began as the guest's page reporting did, with
 * the time in the copy, and a 2 MiB copy into a fresh page took up to 40 ms
 * then against 5 ms into one already written (bench/README.md). The warm-up
 * moves the first write out of the lock, and it is a probe: while a warm-up
 * takes over WARM_SLOW_USEC the host is busy, and the thread waits and
 * warms again (a bounded number of times) before it collapses. Elsewhere it
 * costs a 2 MiB zeroing per range. The scratch mapping is MADV_DONTFORK and
 * empty between ranges.
 *
 * fork-thp-vma-size N (bytes, 0 = off): before each pass the thread cuts
 * every anonymous mapping larger than N into VMAs of N bytes, aligned to N
 * in the address space, and marks every other one MADV_RANDOM so that the
 * kernel cannot merge them back. MADV_COLLAPSE write-locks the whole VMA
 * (and the mmap lock) while it copies 2 MiB, and a page fault in a
 * write-locked VMA falls back from the per-VMA lock to the mmap lock and
 * waits: with the keyspace in one VMA every collapse blocks every write of
 * the main thread that faults (after a fork, the first write to each page
 * does), with pieces only those in its own N bytes. MADV_RANDOM changes no
 * fault on anonymous memory; reclaim ignores the accessed bit of such
 * pages (vma_has_recency()), which matters only with swap. Set to 0 after
 * a cut, the next pass advises MADV_NORMAL again and the pieces merge.
 *
 * fork-thp-quiet-save yes: no huge page is made in this process while a
 * child lives (PR_SET_THP_DISABLE from just before fork() until the child
 * is gone). The parent's writes split the huge pages it shares with the
 * child; khugepaged then collapses those ranges again while the child still
 * shares them: it copies 2 MiB with the mmap lock held for writing, at
 * nice 19, so it is easily preempted by the save child and the clients,
 * and every page fault of the main thread waits behind it (seen: 40-90 ms
 * stalls, the main thread in D state in lock_mm_and_find_vma, khugepaged
 * preempted in the collapse). Faults then map 4 KiB pages too (no direct
 * compaction in the main thread during a save); the re-collapse rebuilds
 * everything once the child is gone.
 *
 * afork.c calls in: after the config is read (the re-exec), at startup,
 * before each fork, each event-loop iteration (with whether a quiet window
 * is open), when a child is gone, and at exit (the thread is joined).
 *
 * Copyright (c) 2026, redis-afork contributors. AGPLv3, see LICENSE. */

#include "server.h"
#include "afork_thp.h"
#include "afork_util.h"
#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
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

#define HUGE_SIZE (2ULL << 20)
#define HUGE_PAGES 512
#define COLLAPSE_MIN_RESIDENT (HUGE_PAGES * 7 / 8)
#define SLOW_LOOP_USEC 5000          /* main-loop iteration that pauses us */
#define SLOW_LOOP_PAUSE_MS 100
#define WARM_SLOW_USEC 2000          /* a warm-up this slow: the host is busy */
#define WARM_WAIT_MS 20
#define WARM_MAX_WAITS 50            /* per range */
#define WARM_MAX_WAITS_PASS 100      /* per pass: a slow warm-up for another cause
                                        (compaction) must not stall the pass */
#define REEXEC_MARK "REDIS_AFORK_THP_REEXEC"
#define JE_THP_CONF "thp:always"

int afork_fork_thp = 0;
int afork_thp_collapse_rate_mb = 256;
int afork_thp_quiet_save = 1;
int afork_thp_collapse_warm = 1;
long long afork_thp_vma_size = AFORK_THP_VMA_SIZE_DEFAULT;

static struct {
    int heap;                 /* the heap is in huge pages (fork-thp in effect) */
    char why[128];            /* fork_thp_heap: "on", "off" or why refused */
    char collapse_state[64];  /* fork_thp_collapse_status */
    pthread_t thread;
    int thread_started;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int paused;               /* PR_SET_THP_DISABLE set (under lock) */
    int resume_requested;     /* the thread clears it (under lock) */
    int pass_requested;       /* under lock */
    int stop;                 /* under lock */
} thp = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};

static redisAtomic int collapse_allowed = 0;   /* no child, no window */
static redisAtomic int collapse_rate_mb = 256; /* the thread's copy of the config */
static redisAtomic long long slow_loop_ms = 0; /* when the loop was last slow */
static redisAtomic long long vma_size = AFORK_THP_VMA_SIZE_DEFAULT; /* the thread's copy */
static redisAtomic int collapse_warm = 1;       /* the thread's copy of the config */
static char *warm_page;                        /* 2 MiB aligned scratch, or NULL (set before the thread) */
static redisAtomic int warm_unsupported = 0;   /* MADV_POPULATE_WRITE refused */
static redisAtomic long long st_passes, st_ranges, st_failures, st_pauses, st_usec, st_cuts;
static redisAtomic long long st_warm_usec, st_collapse_max_usec, st_host_waits;
static long long st_quiet_saves;               /* main thread only */

static void resumeHugePagesLocked(void);
static redisAtomic long long st_huge_before = -1, st_huge_after = -1;

/* ---------------------------------------------------------------- startup */

static int thpSystemNever(void) {
    char mode[16];
    if (aforkReadBracketed("/sys/kernel/mm/transparent_hugepage/enabled", mode, sizeof(mode)) != 0)
        return 1;
    return !strcmp(mode, "never");
}

static int configFromStdin(void) {
    for (int j = 1; j < 3 && server.exec_argv[j]; j++)
        if (!strcmp(server.exec_argv[j], "-")) return 1;
    return 0;
}

/* The working directory at startup: the config's "dir" changes it, and the
 * re-exec must find relative paths (config file, includes) as before. */
static char start_cwd[PATH_MAX];
__attribute__((constructor)) static void rememberStartCwd(void) {
    if (!getcwd(start_cwd, sizeof(start_cwd))) start_cwd[0] = '\0';
}

/* Start again with jemalloc's opt.thp set; returns only on failure. */
static void reexecWithThp(void) {
    char dir[PATH_MAX];
    const char *old = getenv("JE_MALLOC_CONF");
    sds conf = old && *old ? sdscatfmt(sdsnew(old), ",%s", JE_THP_CONF) : sdsnew(JE_THP_CONF);
    /* Logged from the configured dir: a relative logfile is found there. */
    serverLog(LL_NOTICE, "fork-thp yes: restarting once with JE_MALLOC_CONF=%s so that jemalloc "
                         "backs the keyspace with huge pages", conf);
    if (!getcwd(dir, sizeof(dir)) || !start_cwd[0] || chdir(start_cwd) != 0) {
        serverLog(LL_WARNING, "fork-thp yes: cannot return to the start directory: %s",
                  strerror(errno));
        sdsfree(conf);
        return;
    }
    setenv("JE_MALLOC_CONF", conf, 1);
    setenv(REEXEC_MARK, "1", 1);
    sdsfree(conf);
    execv(server.executable, server.exec_argv);
    int err = errno;
    if (chdir(dir) != 0) err = errno;
    serverLog(LL_WARNING, "fork-thp yes: re-exec of %s failed: %s", server.executable,
              strerror(err));
}

/* Why fork-thp cannot be honoured here; NULL if it can (perhaps after a
 * re-exec, which does not return when it works). */
static const char *heapRefusal(void) {
    const char *je = aforkJemallocOpt("opt.thp");
    int reexeced = getenv(REEXEC_MARK) != NULL;
    unsetenv(REEXEC_MARK);
    if (!aforkLinuxAtLeast(5, 8))
        return "kernel older than 5.8 copies 2 MiB on a copy-on-write fault of a huge page";
    if (thpSystemNever()) return "transparent huge pages are 'never' (or absent) on this system";
    if (!strcmp(je, "n/a")) return "redis-server is not built with jemalloc";
    if (!strcmp(je, "always")) return NULL;
    if (reexeced) return "jemalloc ignored JE_MALLOC_CONF=" JE_THP_CONF;
    if (configFromStdin())
        return "the config came from stdin, so the server cannot restart itself; "
               "start it with JE_MALLOC_CONF=" JE_THP_CONF;
    reexecWithThp();
    return "re-exec failed";
}

/* main(), after the config is read and before linuxMemoryWarnings(). */
void aforkThpHeapSetup(void) {
    snprintf(thp.why, sizeof(thp.why), "off");
    if (!afork_fork_thp || server.sentinel_mode) {
        unsetenv(REEXEC_MARK);
        return;
    }
    const char *why = heapRefusal();
    if (why) {
        snprintf(thp.why, sizeof(thp.why), "refused: %s", why);
        serverLog(LL_WARNING, "fork-thp yes refused: %s; the keyspace stays in 4 KiB pages", why);
        return;
    }
    prctl(PR_SET_THP_DISABLE, 0, 0, 0, 0);
    server.thp_enabled = 1;
    thp.heap = 1;
    snprintf(thp.why, sizeof(thp.why), "on");
    serverLog(LL_NOTICE, "fork-thp yes: the keyspace is in transparent huge pages (jemalloc "
                         "opt.thp=always); disable-thp is not applied");
}

/* linuxMemoryWarnings(): skip upstream's THP disabling and warning. */
int aforkThpHeapWanted(void) {
    return thp.heap;
}

/* ---------------------------------------------------------------- the walk */

/* Resident and huge 4 KiB pages of [start, start + 2 MiB); -1 on error. */
static int scanRange(int pm, uint64_t start, int *resident, int *huge) {
    struct afork_page_region regions[HUGE_PAGES];
    struct afork_pm_scan_arg arg = {
        .size = sizeof(arg), .start = start, .end = start + HUGE_SIZE,
        .vec = (uint64_t)(uintptr_t)regions, .vec_len = HUGE_PAGES,
        .category_mask = AFORK_PAGE_IS_PRESENT,
        .return_mask = AFORK_PAGE_IS_PRESENT | AFORK_PAGE_IS_HUGE,
    };
    int n = ioctl(pm, AFORK_PAGEMAP_SCAN, &arg);
    if (n < 0) return -1;
    *resident = *huge = 0;
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
    atomicGet(collapse_allowed, allowed);
    pthread_mutex_lock(&thp.lock);
    stop = thp.stop;
    pthread_mutex_unlock(&thp.lock);
    if (stop) return -1;
    if (!allowed) return 0;
    atomicGet(slow_loop_ms, slow);
    if (mstime() - slow < SLOW_LOOP_PAUSE_MS) {
        atomicIncr(st_pauses, 1);
        return 0;
    }
    return 1;
}

/* Wait until collapsing is allowed; 0 when told to stop. */
static int waitAllowed(void) {
    int ok;
    while ((ok = collapseAllowedNow()) == 0) usleep(SLOW_LOOP_PAUSE_MS * 1000);
    return ok == 1;
}

/* Sleep as needed to keep the pass at or below the rate. */
static void rateLimit(long long start_us, long long bytes) {
    int rate;
    atomicGet(collapse_rate_mb, rate);
    if (rate <= 0) return;
    long long due_us = bytes * 1000000LL / ((long long)rate << 20);
    long long ahead = due_us - (ustime() - start_us);
    if (ahead > 0) usleep(ahead);
}

typedef struct {
    long long start_us, bytes, huge_before, collapsed, max_usec;
    int host_waits;      /* fork-thp-collapse-warm waits so far */
    int no_collapse;     /* MADV_COLLAPSE unsupported */
    int stopped;
} passState;

/* fork-thp-collapse-warm: fault a huge page in the scratch mapping and
 * free it, so that the next huge page this CPU allocates (the collapse's)
 * has been written once outside the mmap lock. Returns how long the write
 * took (0 when off). Unsupported (EINVAL, Linux before 5.14): never again. */
static long long warmHugePage(void) {
    int warm, unsupported;
    atomicGet(collapse_warm, warm);
    atomicGet(warm_unsupported, unsupported);
    if (!warm || unsupported || !warm_page) return 0;
    long long t0 = ustime();
    if (madvise(warm_page, HUGE_SIZE, MADV_POPULATE_WRITE) != 0) {
        if (errno == EINVAL) atomicSet(warm_unsupported, 1);
        else atomicIncr(st_failures, 1);
    }
    long long took = ustime() - t0;
    madvise(warm_page, HUGE_SIZE, MADV_DONTNEED);
    atomicIncr(st_warm_usec, ustime() - t0);
    return took;
}

/* The warm-up is also a probe of the host: writing a fresh 2 MiB normally
 * takes a zeroing (0.1-0.3 ms). Far slower means the host is taking memory
 * back from the guest right now (free page reporting), and a collapse
 * started now would copy into pages the host has to fault in again, with
 * the mmap lock held. Wait until a warm-up is quick again, a bounded time
 * per range and per pass (a warm-up may be slow for another reason, such as
 * compaction, on every range), and only while collapsing stays allowed; 0
 * when told to stop. */
static int warmUntilHostQuick(passState *p) {
    for (int tries = 0; warmHugePage() > WARM_SLOW_USEC && tries < WARM_MAX_WAITS &&
                        p->host_waits < WARM_MAX_WAITS_PASS; tries++) {
        p->host_waits++;
        atomicIncr(st_host_waits, 1);
        usleep(WARM_WAIT_MS * 1000);
        if (!waitAllowed()) return 0;
    }
    return 1;
}

static void collapseRange(uint64_t addr, int resident, int huge, passState *p) {
    p->huge_before += (long long)huge * 4096;
    if (huge == HUGE_PAGES || resident < COLLAPSE_MIN_RESIDENT) return;
    if (!waitAllowed() || !warmUntilHostQuick(p)) {
        p->stopped = 1;
        return;
    }
    long long t0 = ustime();
    int rc = madvise((void *)(uintptr_t)addr, HUGE_SIZE, MADV_COLLAPSE);
    long long took = ustime() - t0;
    atomicIncr(st_usec, took);
    if (took > p->max_usec) p->max_usec = took;
    if (rc == 0) {
        atomicIncr(st_ranges, 1);
        p->collapsed++;
    } else if (errno == EINVAL) {
        p->no_collapse = 1;
    } else {
        atomicIncr(st_failures, 1);
    }
    p->bytes += HUGE_SIZE;
    rateLimit(p->start_us, p->bytes);
}

/* One anonymous private writable mapping of /proc/self/maps? Its bounds. */
static int anonMapping(const char *line, uint64_t *start, uint64_t *end) {
    unsigned long long a, b, off, inode;
    char perms[8], dev[16];
    int name = 0;
    if (sscanf(line, "%llx-%llx %7s %llx %15s %llu%n", &a, &b, perms, &off, dev, &inode, &name) < 6)
        return 0;
    if (strncmp(perms, "rw-p", 4) || inode != 0) return 0;
    const char *n = line + name;
    while (*n == ' ' || *n == '\t') n++;   /* not past the newline */
    if (*n && *n != '\n' && strncmp(n, "[heap]", 6)) return 0;   /* [stack], [vvar]... */
    *start = a;
    *end = b;
    return 1;
}

/* fork-thp-vma-size: cut [start, end) at the multiples of size, the even
 * pieces MADV_NORMAL and the odd ones MADV_RANDOM, so that neighbours
 * differ and stay apart. A mapping inside one piece keeps its advice unless
 * all is set (the size changed: old pieces may have the wrong parity, and
 * would merge with a neighbour flipped to theirs). The map changes, so only
 * when collapsing is allowed. */
static void cutMapping(uint64_t start, uint64_t end, uint64_t size, int all, passState *p) {
    if (!all && (end - start < size || start / size == (end - 1) / size)) return;
    for (uint64_t k = start / size; k * size < end && !p->stopped; k++) {
        uint64_t a = k * size > start ? k * size : start;
        uint64_t b = (k + 1) * size < end ? (k + 1) * size : end;
        if (!waitAllowed()) {
            p->stopped = 1;
            return;
        }
        if (madvise((void *)(uintptr_t)a, b - a, (k & 1) ? MADV_RANDOM : MADV_NORMAL) == 0)
            atomicIncr(st_cuts, 1);
        else
            atomicIncr(st_failures, 1);
    }
}

/* fork-thp-vma-size 0 after a cut: MADV_NORMAL again, the pieces merge. */
static void uncutMapping(uint64_t start, uint64_t end, passState *p) {
    if (!waitAllowed()) {
        p->stopped = 1;
        return;
    }
    if (madvise((void *)(uintptr_t)start, end - start, MADV_NORMAL) != 0)
        atomicIncr(st_failures, 1);
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

/* The scratch huge page's own mapping: neither cut nor collapsed. */
static int isWarmMapping(uint64_t start, uint64_t end) {
    uint64_t page = (uint64_t)(uintptr_t)warm_page;
    return warm_page && start <= page && page < end;
}

static void setCollapseState(const char *state) {
    pthread_mutex_lock(&thp.lock);
    snprintf(thp.collapse_state, sizeof(thp.collapse_state), "%s", state);
    pthread_mutex_unlock(&thp.lock);
}

static void collapsePass(int maps_fd, int pm) {
    passState p = {.start_us = ustime()};
    if (!waitAllowed()) return;
    setCollapseState("running");
    static long long cut_size = 0;   /* the size of the last pass's pieces */
    long long size;
    atomicGet(vma_size, size);
    int resize = size != cut_size;
    char *line = readMaps(maps_fd), *next;
    for (; line && *line && !p.stopped && !p.no_collapse; line = next) {
        uint64_t start, end;
        next = strchr(line, '\n');
        if (next) next++;
        if (!anonMapping(line, &start, &end) || isWarmMapping(start, end)) continue;
        if (size > 0)
            cutMapping(start, end, (uint64_t)size, resize, &p);
        else if (resize)
            uncutMapping(start, end, &p);
        uint64_t lo = (start + HUGE_SIZE - 1) & ~(HUGE_SIZE - 1), hi = end & ~(HUGE_SIZE - 1);
        for (uint64_t a = lo; a < hi && !p.stopped && !p.no_collapse; a += HUGE_SIZE) {
            int resident, huge;
            if (scanRange(pm, a, &resident, &huge) == 0) collapseRange(a, resident, huge, &p);
        }
    }
    if (!p.stopped && !p.no_collapse) cut_size = size;
    atomicIncr(st_passes, 1);
    atomicSet(st_collapse_max_usec, p.max_usec);
    atomicSet(st_huge_before, p.huge_before);
    atomicSet(st_huge_after, p.huge_before + p.collapsed * (long long)HUGE_SIZE);
    setCollapseState(p.no_collapse ? "khugepaged-only" : "ready");
    if (p.no_collapse) {
        pthread_mutex_lock(&thp.lock);
        thp.stop = 1;
        pthread_mutex_unlock(&thp.lock);
    }
}

static void *collapseMain(void *arg) {
    int *fds = arg, maps_fd = fds[0], pm = fds[1];
    zfree(fds);
    redis_set_thread_title("afork_collapse");
    while (1) {
        pthread_mutex_lock(&thp.lock);
        while (!thp.pass_requested && !thp.resume_requested && !thp.stop)
            pthread_cond_wait(&thp.cond, &thp.lock);
        resumeHugePagesLocked();
        int stop = thp.stop, pass = thp.pass_requested;
        thp.pass_requested = 0;
        pthread_mutex_unlock(&thp.lock);
        if (stop) break;
        if (pass) collapsePass(maps_fd, pm);
    }
    close(maps_fd);
    close(pm);
    return NULL;
}

/* Exit: stop the collapse thread and wait for it. */
void aforkThpStop(void) {
    if (!thp.thread_started) return;
    pthread_mutex_lock(&thp.lock);
    thp.stop = 1;
    pthread_cond_signal(&thp.cond);
    pthread_mutex_unlock(&thp.lock);
    pthread_join(thp.thread, NULL);
    thp.thread_started = 0;
}

/* Can this kernel tell huge from split ranges? (PAGEMAP_SCAN, 6.7+) */
static int pagemapScanWorks(int pm) {
    int resident, huge;
    static char probe[4096];
    probe[0] = 1;
    return scanRange(pm, (uint64_t)(uintptr_t)probe & ~(HUGE_SIZE - 1), &resident, &huge) == 0;
}

/* CONFIG SET fork-thp-collapse-rate, fork-thp-vma-size: hand the new values
 * to the thread, which reads them atomically (config.c writes the variables
 * the main thread reads). */
void aforkThpConfigChanged(void) {
    atomicSet(collapse_rate_mb, afork_thp_collapse_rate_mb);
    atomicSet(vma_size, afork_thp_vma_size);
    atomicSet(collapse_warm, afork_thp_collapse_warm);
}

/* The collapse thread's scratch huge page (fork-thp-collapse-warm): 2 MiB
 * aligned inside a 4 MiB mapping made once at startup (one VMA: the whole
 * of it MADV_DONTFORK and MADV_HUGEPAGE), never copied to a child, named in
 * /proc/PID/maps where the kernel can (5.17+). */
#ifndef PR_SET_VMA
#define PR_SET_VMA 0x53564d41
#define PR_SET_VMA_ANON_NAME 0
#endif
static void mapWarmPage(void) {
    void *raw = mmap(NULL, 2 * HUGE_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) return;
    char *page = (char *)(((uintptr_t)raw + HUGE_SIZE - 1) & ~(uintptr_t)(HUGE_SIZE - 1));
    if (madvise(raw, 2 * HUGE_SIZE, MADV_DONTFORK) != 0 || madvise(raw, 2 * HUGE_SIZE, MADV_HUGEPAGE) != 0) {
        munmap(raw, 2 * HUGE_SIZE);
        return;
    }
    prctl(PR_SET_VMA, PR_SET_VMA_ANON_NAME, (unsigned long)raw, 2 * HUGE_SIZE, "afork-collapse-warm");
    warm_page = page;
}

/* fork-thp-vma-size: 0, or whole huge pages and at least two of them. */
int aforkThpVmaSizeValid(long long size, const char **err) {
    if (size == 0 || (size % (long long)HUGE_SIZE == 0 && size >= 2 * (long long)HUGE_SIZE))
        return 1;
    *err = "must be 0 (off) or a multiple of 2mb, at least 4mb";
    return 0;
}

/* Startup: start the collapse thread when it has work to do. */
void aforkThpInit(void) {
    aforkThpConfigChanged();
    snprintf(thp.collapse_state, sizeof(thp.collapse_state), "off");
    if (!thp.heap) return;
    if (!aforkLinuxAtLeast(6, 1)) {
        snprintf(thp.collapse_state, sizeof(thp.collapse_state), "khugepaged-only");
        serverLog(LL_NOTICE, "fork-thp: kernel older than 6.1 has no MADV_COLLAPSE; split huge "
                             "pages are rebuilt by khugepaged only");
        return;
    }
    int maps_fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    int pm = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
    if (maps_fd == -1 || pm == -1 || !pagemapScanWorks(pm)) {
        if (maps_fd != -1) close(maps_fd);
        if (pm != -1) close(pm);
        snprintf(thp.collapse_state, sizeof(thp.collapse_state), "khugepaged-only");
        serverLog(LL_NOTICE, "fork-thp: /proc/self/pagemap has no PAGEMAP_SCAN (Linux 6.7+); "
                             "split huge pages are rebuilt by khugepaged only");
        return;
    }
    mapWarmPage();
    int *fds = zmalloc(sizeof(int) * 2);
    fds[0] = maps_fd;
    fds[1] = pm;
    if (pthread_create(&thp.thread, NULL, collapseMain, fds) != 0) {
        zfree(fds);
        close(maps_fd);
        close(pm);
        snprintf(thp.collapse_state, sizeof(thp.collapse_state), "khugepaged-only");
        return;
    }
    thp.thread_started = 1;
    snprintf(thp.collapse_state, sizeof(thp.collapse_state), "ready");
}

/* ---------------------------------------------------------------- hooks */

/* fork-thp-quiet-save: huge pages off for the process while a child lives.
 * The prctl takes the mmap lock for writing. Before fork() that costs the
 * main thread nothing fork() would not wait for anyway; after the child the
 * collapse thread clears it (resumeHugePagesLocked, before its pass), so the
 * main thread never waits behind an smaps_rollup walk or a collapse. Without
 * the thread the main thread clears it. All under thp.lock. */
static void pauseHugePages(void) {
    if (!thp.heap || !afork_thp_quiet_save) return;
    pthread_mutex_lock(&thp.lock);
    thp.resume_requested = 0;
    if (!thp.paused && prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0) == 0) {
        thp.paused = 1;
        st_quiet_saves++;
    }
    pthread_mutex_unlock(&thp.lock);
}

static void resumeHugePagesLocked(void) {
    if (thp.resume_requested && thp.paused) {
        prctl(PR_SET_THP_DISABLE, 0, 0, 0, 0);
        thp.paused = 0;
    }
    thp.resume_requested = 0;
}

/* No child any more: the collapse thread (or, without it, this thread)
 * makes huge pages possible again. */
static void resumeHugePages(void) {
    pthread_mutex_lock(&thp.lock);
    if (thp.paused) {
        thp.resume_requested = 1;
        if (thp.thread_started)
            pthread_cond_signal(&thp.cond);
        else
            resumeHugePagesLocked();
    }
    pthread_mutex_unlock(&thp.lock);
}

/* Before every fork: the thread must not start a collapse now, and no huge
 * page is made until the child is gone. */
void aforkThpForkStarting(void) {
    atomicSet(collapse_allowed, 0);
    pauseHugePages();
}

/* fork() failed: there is no child to wait for. */
void aforkThpForkFailed(void) {
    resumeHugePages();
}

/* Each event-loop iteration (beforeSleep): publish what the thread needs.
 * window_open: a fork quiet window is open. */
void aforkThpLoopSample(long long usec, int window_open) {
    if (usec > SLOW_LOOP_USEC) atomicSet(slow_loop_ms, mstime());
    atomicSet(collapse_allowed, !hasActiveChildProcess() && !window_open);
}

/* resetChildState: a child is gone, its copy-on-write splits can go. */
void aforkThpChildGone(void) {
    resumeHugePages();
    if (!thp.thread_started || afork_thp_collapse_rate_mb <= 0) return;
    pthread_mutex_lock(&thp.lock);
    thp.pass_requested = 1;
    pthread_cond_signal(&thp.cond);
    pthread_mutex_unlock(&thp.lock);
}

/* CONFIG RESETSTAT. */
void aforkThpReset(void) {
    atomicSet(st_passes, 0);
    atomicSet(st_ranges, 0);
    atomicSet(st_failures, 0);
    atomicSet(st_pauses, 0);
    atomicSet(st_usec, 0);
    atomicSet(st_cuts, 0);
    atomicSet(st_warm_usec, 0);
    atomicSet(st_host_waits, 0);
    st_quiet_saves = 0;
}

/* INFO fork: the fork-thp fields. */
sds aforkThpInfo(sds info) {
    long long passes, ranges, failures, pauses, usec, before, after, cuts, warm_usec, max_usec;
    long long host_waits;
    int unsupported;
    char state[64];
    atomicGet(st_passes, passes);
    atomicGet(st_ranges, ranges);
    atomicGet(st_failures, failures);
    atomicGet(st_pauses, pauses);
    atomicGet(st_usec, usec);
    atomicGet(st_huge_before, before);
    atomicGet(st_huge_after, after);
    atomicGet(st_cuts, cuts);
    atomicGet(st_warm_usec, warm_usec);
    atomicGet(st_collapse_max_usec, max_usec);
    atomicGet(st_host_waits, host_waits);
    atomicGet(warm_unsupported, unsupported);
    pthread_mutex_lock(&thp.lock);
    memcpy(state, thp.collapse_state, sizeof(state));
    int paused = thp.paused;
    pthread_mutex_unlock(&thp.lock);
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
        afork_fork_thp, thp.why, afork_thp_collapse_rate_mb, afork_thp_quiet_save,
        st_quiet_saves, paused, afork_thp_collapse_rate_mb <= 0 && thp.thread_started ? "off" : state,
        passes, ranges, failures, pauses, usec, max_usec, afork_thp_collapse_warm && warm_page && !unsupported,
        warm_usec, host_waits, afork_thp_vma_size, cuts, before, after);
}
