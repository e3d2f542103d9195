/* afork_thp_heap.c -- the keyspace in transparent huge pages (fork-thp),
 * and the heap cut into VMAs.
 *
 * jemalloc backs its extents with huge pages when its opt.thp is "always"
 * (it madvise()s each new extent MADV_HUGEPAGE). With fork-thp yes the heap
 * is in huge pages from the start: opt.thp is read when the allocator
 * starts, before main() reads the config, so when the config asks for
 * fork-thp and the allocator lacks it, the server re-executes itself once
 * with JE_MALLOC_CONF set. That happens right after the config is read,
 * before daemonizing, logging to a file or opening a socket, and keeps the
 * pid, argv, environment and descriptors. The alternatives are worse: a
 * je_malloc_conf symbol is fixed at build time, and an environment
 * variable the operator must set goes out of sync with the config file.
 * fork-thp yes is refused (logged, and said in INFO fork_thp_heap) on
 * kernels older than 5.8, where a copy-on-write fault of a huge page
 * copies 2 MiB instead of 4 KiB, and when THP is "never".
 *
 * fork-thp auto switches the heap over in place, later, once forks have
 * become expensive (afork_thp.c decides when): it sets the opt.thp of
 * Redis's own jemalloc, which jemalloc reads at each new mapping, to
 * "always", and advises the mappings jemalloc made so far; the collapse
 * thread then collapses what is resident. No re-exec, so nothing happens
 * at startup but the machine checks of thpHeapAuto(): everything fork-thp
 * relies on must be there (the 4 KiB copy-on-write of 5.8, MADV_COLLAPSE
 * of 6.1 and PAGEMAP_SCAN of 6.7 for the re-collapse, without which every
 * save after the first forks a split heap again; THP not "never" nor
 * disabled for the process by its parent; Redis's own jemalloc), and the
 * machine must not be a VM whose balloon hands freed memory back to its
 * host: the first write to each huge page the heap grows into then waits
 * while the host backs all of its 2 MiB, a stall of the main thread on
 * every new huge page that 4 KiB pages spread out. The kernel release and
 * the THP mode are read under fork-probe-root, so that tests can show
 * each refusal.
 *
 * MADV_COLLAPSE write-locks the whole VMA it works in while it copies, and
 * a page fault in a write-locked VMA falls back from the per-VMA lock to
 * the mmap lock and waits: with the keyspace in one VMA every collapse
 * would block every write of the main thread that faults (after a fork,
 * the first write to each page does). So the collapse thread has every
 * large anonymous mapping cut into VMAs of 64 MiB (fork-debug-thp-vma-size),
 * aligned to that size, every other one MADV_RANDOM so that the kernel
 * cannot merge them back; a collapse then blocks only the faults in its
 * own piece. MADV_RANDOM changes no fault on anonymous memory; reclaim
 * ignores the accessed bit of such pages (vma_has_recency()), which
 * matters only with swap. Set to 0, the next pass advises MADV_NORMAL and
 * the pieces merge again.
 *
 * ----------------------------------------------------------------------------
 *
 * Copyright (c) 2026, redis-afork contributors. AGPLv3, see LICENSE. */

#include "server.h"
#include "afork_thp_int.h"
#include "afork_util.h"
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/utsname.h>

#ifndef PR_SET_THP_DISABLE
#define PR_SET_THP_DISABLE 41
#endif

#define REEXEC_MARK "REDIS_AFORK_THP_REEXEC"
#define JE_THP_CONF "thp:always"

/* fork-thp auto advises MADV_HUGEPAGE the anonymous mappings of at least
 * this size when it switches on: jemalloc's, which grow geometrically and
 * soon pass it, and not the threads' 8 MiB stacks, which a huge page would
 * make resident 2 MiB at a time. */
#define ADVISE_MIN (32ULL << 20)

#if defined(USE_JEMALLOC) && !defined(USE_SYSTEM_JEMALLOC)
/* The opt.thp of Redis's own jemalloc (deps/jemalloc, src/pages.c, a
 * thp_mode_t), which mallctl() only reads. jemalloc reads the variable
 * each time it maps memory for its extents (and "always" then advises the
 * mapping MADV_HUGEPAGE) and when it zeroes an extent; it is never cached. */
extern int je_opt_thp;
#define JE_THP_MODE_DEFAULT 0
#define JE_THP_MODE_ALWAYS 1
static int ownJemalloc(void) {
    return 1;
}
#else
static int ownJemalloc(void) {
    return 0;
}
#endif

/* ------------------------------------------------------ the machine */

/* The kernel's release ("6.18.4" -> 6, 18) under root; uname()'s when the
 * real /proc lacks it. 0.0 when unknown. */
static void kernelRelease(const char *root, int *major, int *minor) {
    char path[PATH_MAX], buf[128];
    struct utsname u;
    const char *rel = NULL;
    *major = *minor = 0;
    snprintf(path, sizeof(path), "%s/proc/sys/kernel/osrelease", root);
    if (aforkReadFile(path, buf, sizeof(buf)) > 0) rel = buf;
    else if (!*root && uname(&u) == 0) rel = u.release;
    if (rel && sscanf(rel, "%d.%d", major, minor) != 2) *major = *minor = 0;
}

static int kernelAtLeast(int major, int minor, int want_major, int want_minor) {
    return major > want_major || (major == want_major && minor >= want_minor);
}

/* The system's THP mode under root: "always", "madvise", "never", or
 * "unknown" when the kernel has no THP. */
static void thpMode(const char *root, char *mode, size_t size) {
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/sys/kernel/mm/transparent_hugepage/enabled", root);
    aforkReadBracketed(path, mode, size);
}

static int thpSystemNever(const char *root) {
    char mode[16];
    thpMode(root, mode, sizeof(mode));
    return strcmp(mode, "always") != 0 && strcmp(mode, "madvise") != 0;
}

/* ------------------------------------------------------ the heap */

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

#define STDIN_REFUSAL "the config came from stdin, so the server cannot restart itself"

/* fork-thp auto: can the heap be switched to huge pages here, once forks
 * get expensive? 1 or 0, and why in why (for INFO fork_thp_heap and the
 * log). root: fork-probe-root; pagemap_scan: PAGEMAP_SCAN works (the
 * collapse thread's probe); vm_page_reporting: the VM hands freed memory
 * back to its host now. The first reason that holds is given: the
 * kernel, THP, the allocator, then the host. */
int thpHeapAuto(const char *root, int pagemap_scan, int vm_page_reporting, char *why,
                size_t size) {
    int major, minor;
    char mode[16];
    kernelRelease(root, &major, &minor);
    thpMode(root, mode, sizeof(mode));
    if (!kernelAtLeast(major, minor, 5, 8))
        snprintf(why, size, "kernel %d.%d copies 2 MiB on a copy-on-write fault of a huge page "
                 "(5.8+ copies 4 KiB)", major, minor);
    else if (thpSystemNever(root))
        snprintf(why, size, "transparent huge pages are '%s' on this system", mode);
    else if (prctl(PR_GET_THP_DISABLE, 0, 0, 0, 0) == 1)
        snprintf(why, size, "huge pages are disabled for this process (PR_SET_THP_DISABLE, "
                 "inherited from its parent)");
    else if (!kernelAtLeast(major, minor, 6, 1))
        snprintf(why, size, "kernel %d.%d has no MADV_COLLAPSE (6.1+), so the huge pages a save "
                 "splits would stay split", major, minor);
    else if (!kernelAtLeast(major, minor, 6, 7) || !pagemap_scan)
        snprintf(why, size, "kernel %d.%d has no PAGEMAP_SCAN (6.7+), so the re-collapse cannot "
                 "find the huge pages a save splits", major, minor);
    else if (!ownJemalloc())
        snprintf(why, size, "redis-server is not built with its own jemalloc");
    else if (vm_page_reporting)
        snprintf(why, size, "this VM reports free memory to its host (virtio balloon), so the "
                 "first write to each huge page waits for the host to back 2 MiB");
    else {
        snprintf(why, size, "kernel %d.%d with MADV_COLLAPSE and PAGEMAP_SCAN, THP %s",
                 major, minor, mode);
        return 1;
    }
    return 0;
}

/* Why fork-thp yes cannot be honoured here; NULL if it can (perhaps after
 * a re-exec, which does not return when it works). */
static const char *heapRefusal(const char *root) {
    const char *je = aforkJemallocOpt("opt.thp");
    int reexeced = getenv(REEXEC_MARK) != NULL, major, minor;
    unsetenv(REEXEC_MARK);
    kernelRelease(root, &major, &minor);
    if (!kernelAtLeast(major, minor, 5, 8))
        return "kernel older than 5.8 copies 2 MiB on a copy-on-write fault of a huge page";
    if (thpSystemNever(root)) return "transparent huge pages are 'never' (or absent) on this system";
    if (!strcmp(je, "n/a")) return "redis-server is not built with jemalloc";
    if (!strcmp(je, "always")) return NULL;
    if (reexeced) return "jemalloc ignored JE_MALLOC_CONF=" JE_THP_CONF;
    if (configFromStdin()) return STDIN_REFUSAL "; start it with JE_MALLOC_CONF=" JE_THP_CONF;
    reexecWithThp();
    return "re-exec failed";
}

/* After the config is read, with fork-thp yes: put the keyspace in huge
 * pages when possible. status gets what INFO fork_thp_heap shows: "on" or
 * "refused: <why>" (the word before the first colon is the state, as
 * contrib/monitoring reads it); one log line says the same. Returns 1 when
 * the heap is in huge pages. */
int thpHeapSetup(const char *root, char *status, size_t size) {
    const char *why = heapRefusal(root);
    if (why) {
        snprintf(status, size, "refused: %s", why);
        serverLog(LL_WARNING, "fork-thp yes refused: %s; the keyspace stays in 4 KiB pages", why);
        return 0;
    }
    snprintf(status, size, "on");
    serverLog(LL_NOTICE, "fork-thp yes: the keyspace is in transparent huge pages (jemalloc "
                         "opt.thp=always); disable-thp is not applied");
    return 1;
}

/* Leave the re-exec's mark behind where fork-thp yes is not asked for. */
void thpHeapForget(void) {
    unsetenv(REEXEC_MARK);
}

/* /proc/self/maps, whole. */
static sds readSelfMaps(void) {
    char buf[16384];
    ssize_t n;
    sds maps = sdsempty();
    int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (fd == -1) return maps;
    while ((n = read(fd, buf, sizeof(buf))) > 0) maps = sdscatlen(maps, buf, n);
    close(fd);
    return maps;
}

/* Advise MADV_HUGEPAGE the anonymous mappings of ADVISE_MIN bytes or more;
 * how many, and their bytes. */
static int adviseLargeMappings(long long *bytes) {
    sds maps = readSelfMaps();
    int advised = 0;
    *bytes = 0;
    for (char *line = maps, *next; line && *line; line = next) {
        uint64_t start, end;
        next = strchr(line, '\n');
        if (next) next++;
        if (!thpHeapMapping(line, &start, &end) || end - start < ADVISE_MIN) continue;
        if (madvise((void *)(uintptr_t)start, end - start, MADV_HUGEPAGE) != 0) continue;
        advised++;
        *bytes += (long long)(end - start);
    }
    sdsfree(maps);
    return advised;
}

/* fork-thp auto switches on, the heap in place, in the main thread with no
 * child (it changes the memory map): jemalloc backs what it maps from now
 * on with huge pages (its opt.thp becomes "always", as fork-thp yes's
 * re-exec makes it from the start), and the large mappings it made so far
 * are advised MADV_HUGEPAGE (with THP "always" they need no advice). What
 * is resident stays in 4 KiB pages until the collapse thread collapses it,
 * at fork-thp-collapse-rate. 0, or -1 with why in err. */
int thpHeapSwitchOn(char *err, size_t size) {
#if defined(USE_JEMALLOC) && !defined(USE_SYSTEM_JEMALLOC)
    long long bytes = 0;
    int advised = 0;
    char mode[16];
    if (strcmp(aforkJemallocOpt("opt.thp"), "always") != 0) {
        if (je_opt_thp != JE_THP_MODE_DEFAULT || strcmp(aforkJemallocOpt("opt.thp"), "default")) {
            snprintf(err, size, "jemalloc's opt.thp is '%s', not 'default'", aforkJemallocOpt("opt.thp"));
            return -1;
        }
        je_opt_thp = JE_THP_MODE_ALWAYS;
        if (strcmp(aforkJemallocOpt("opt.thp"), "always") != 0) {
            je_opt_thp = JE_THP_MODE_DEFAULT;
            snprintf(err, size, "jemalloc's opt.thp did not take 'always'");
            return -1;
        }
    }
    thpMode("", mode, sizeof(mode));   /* the real one: the advice is real */
    if (strcmp(mode, "always") != 0) advised = adviseLargeMappings(&bytes);
    serverLog(LL_NOTICE, "fork-thp auto: jemalloc's opt.thp is 'always' now; %d mappings "
                         "(%lld MiB) advised MADV_HUGEPAGE", advised, bytes >> 20);
    return 0;
#else
    snprintf(err, size, "redis-server is not built with its own jemalloc");
    return -1;
#endif
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

/* The VMA cut: cut [start, end) at the multiples of size, the even
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

/* fork-debug-thp-vma-size 0 after a cut: MADV_NORMAL again, the pieces merge.
 * 0, or -1 when the gate said stop. */
int thpHeapUncut(uint64_t start, uint64_t end, thpGateFn *gate, thpCounters *c) {
    if (!gate()) return -1;
    if (madvise((void *)(uintptr_t)start, end - start, MADV_NORMAL) != 0)
        atomicIncr(c->failures, 1);
    return 0;
}
