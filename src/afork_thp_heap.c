/* afork_thp_heap.c -- the keyspace in transparent huge pages (fork-thp),
 * and the heap cut into VMAs (fork-thp-vma-size).
 *
 * jemalloc backs its extents with huge pages when its opt.thp is "always"
 * (it madvise()s each new extent MADV_HUGEPAGE). opt.thp is fixed when the
 * allocator starts, before main() reads the config, so when the config asks
 * for fork-thp and the allocator lacks it, the server re-executes itself
 * once with JE_MALLOC_CONF set. That happens right after the config is
 * read, before daemonizing, logging to a file or opening a socket, and
 * keeps the pid, argv, environment and descriptors. The alternatives are
 * worse: a je_malloc_conf symbol is fixed at build time, and an environment
 * variable the operator must set goes out of sync with the config file.
 * fork-thp is refused (logged, and said in INFO fork_thp_heap) on kernels
 * older than 5.8, where a copy-on-write fault of a huge page copies 2 MiB
 * instead of 4 KiB, and when THP is "never".
 *
 * MADV_COLLAPSE write-locks the whole VMA it works in while it copies, and
 * a page fault in a write-locked VMA falls back from the per-VMA lock to
 * the mmap lock and waits: with the keyspace in one VMA every collapse
 * would block every write of the main thread that faults (after a fork,
 * the first write to each page does). So the collapse thread has every
 * large anonymous mapping cut into VMAs of fork-thp-vma-size bytes, aligned
 * to that size, every other one MADV_RANDOM so that the kernel cannot merge
 * them back; a collapse then blocks only the faults in its own piece.
 * MADV_RANDOM changes no fault on anonymous memory; reclaim ignores the
 * accessed bit of such pages (vma_has_recency()), which matters only with
 * swap. Set back to 0, the next pass advises MADV_NORMAL and the pieces
 * merge again.
 *
 * ----------------------------------------------------------------------------
 *
 * Copyright (c) 2026, redis-afork contributors. AGPLv3, see LICENSE. */

#include "server.h"
#include "afork_thp_int.h"
#include "afork_util.h"
#include <sys/mman.h>
#include <sys/prctl.h>

#ifndef PR_SET_THP_DISABLE
#define PR_SET_THP_DISABLE 41
#endif

#define REEXEC_MARK "REDIS_AFORK_THP_REEXEC"
#define JE_THP_CONF "thp:always"

/* ------------------------------------------------------ the heap */

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

/* After the config is read: put the keyspace in huge pages when wanted
 * (fork-thp yes) and possible. status gets what INFO fork_thp_heap shows:
 * "on", "off" or why it was refused. Returns 1 when the heap is in huge
 * pages. On success, disable-thp is not applied (it would undo it), an
 * inherited PR_SET_THP_DISABLE is cleared, and server.thp_enabled is set
 * so that the fork child skips dismissMemoryInChild() as upstream does
 * when THP is on. */
int thpHeapSetup(int wanted, char *status, size_t size) {
    snprintf(status, size, "off");
    if (!wanted || server.sentinel_mode) {
        unsetenv(REEXEC_MARK);
        return 0;
    }
    const char *why = heapRefusal();
    if (why) {
        snprintf(status, size, "refused: %s", why);
        serverLog(LL_WARNING, "fork-thp yes refused: %s; the keyspace stays in 4 KiB pages", why);
        return 0;
    }
    prctl(PR_SET_THP_DISABLE, 0, 0, 0, 0);
    server.thp_enabled = 1;
    snprintf(status, size, "on");
    serverLog(LL_NOTICE, "fork-thp yes: the keyspace is in transparent huge pages (jemalloc "
                         "opt.thp=always); disable-thp is not applied");
    return 1;
}

/* One anonymous private writable mapping of /proc/self/maps? Its bounds. */
int thpHeapMapping(const char *line, uint64_t *start, uint64_t *end) {
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

/* ------------------------------------------------------ the cut */

/* fork-thp-vma-size: cut [start, end) at the multiples of size, the even
 * pieces MADV_NORMAL and the odd ones MADV_RANDOM, so that neighbours
 * differ and stay apart. A mapping inside one piece keeps its advice unless
 * all is set (the size changed: old pieces may have the wrong parity, and
 * would merge with a neighbour flipped to theirs). The map changes, so
 * each piece waits at the collapse thread's gate. 0, or -1 when the gate
 * said stop. */
int thpHeapCut(uint64_t start, uint64_t end, uint64_t size, int all, thpGateFn *gate,
               thpCounters *c) {
    if (!all && (end - start < size || start / size == (end - 1) / size)) return 0;
    for (uint64_t k = start / size; k * size < end; k++) {
        uint64_t a = k * size > start ? k * size : start;
        uint64_t b = (k + 1) * size < end ? (k + 1) * size : end;
        if (!gate()) return -1;
        if (madvise((void *)(uintptr_t)a, b - a, (k & 1) ? MADV_RANDOM : MADV_NORMAL) == 0)
            atomicIncr(c->cuts, 1);
        else
            atomicIncr(c->failures, 1);
    }
    return 0;
}

/* fork-thp-vma-size 0 after a cut: MADV_NORMAL again, the pieces merge.
 * 0, or -1 when the gate said stop. */
int thpHeapUncut(uint64_t start, uint64_t end, thpGateFn *gate, thpCounters *c) {
    if (!gate()) return -1;
    if (madvise((void *)(uintptr_t)start, end - start, MADV_NORMAL) != 0)
        atomicIncr(c->failures, 1);
    return 0;
}
