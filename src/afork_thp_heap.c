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
 * fork-thp auto decides at startup, in thpHeapAuto(), from what the machine
 * reports: on only where everything fork-thp relies on is there (the
 * 4 KiB copy-on-write of 5.8, MADV_COLLAPSE of 6.1 and PAGEMAP_SCAN of 6.7
 * for the re-collapse, without which every save after the first forks a
 * split heap again; THP not "never" nor disabled for the process; jemalloc
 * and a config the re-exec can read again), where the memory the process
 * may use is large enough for the fork to cost something, and not in a VM
 * whose balloon reports free memory to its host: the host takes freed
 * memory back, and the first write to each huge page the heap grows into
 * then waits while the host backs all of its 2 MiB, a stall of the main
 * thread on every new huge page that 4 KiB pages spread out. The
 * kernel release, the THP mode, /proc/meminfo and the cgroup files are read
 * under fork-probe-root, so that tests can show each refusal.
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
#include <sys/utsname.h>

#ifndef PR_SET_THP_DISABLE
#define PR_SET_THP_DISABLE 41
#endif

#define REEXEC_MARK "REDIS_AFORK_THP_REEXEC"
#define JE_THP_CONF "thp:always"

/* fork-thp auto stays off where the process can use less memory than
 * this. Its page tables in 4 KiB pages are then at most 2 MiB (8 bytes per
 * 4 KiB), which fork() copies in a few milliseconds, while huge pages cost
 * every instance a fixed amount of memory (jemalloc's extents grow in 2 MiB
 * steps), which weighs most on small instances, of which a host runs many. */
#define AUTO_MIN_MEMORY (1LL << 30)

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

/* The smallest limit of a cgroup and its ancestors: base (under root) the
 * hierarchy's mount, cg the process's cgroup ("/a/b"), file the limit's
 * name. -1 when none is set ("max", or no such file). */
static long long cgroupPathLimit(const char *root, const char *base, const char *cg,
                                 const char *file) {
    char path[PATH_MAX], buf[64];
    long long best = -1;
    size_t len = strlen(cg);
    while (1) {
        snprintf(path, sizeof(path), "%s%s%.*s/%s", root, base, (int)len, cg, file);
        if (aforkReadFile(path, buf, sizeof(buf)) > 0) {
            char *end;
            errno = 0;
            long long v = strtoll(buf, &end, 10);
            if (!errno && end != buf && v > 0 && (best < 0 || v < best)) best = v;
        }
        if (len <= 1) break;
        while (len > 0 && cg[len - 1] != '/') len--;   /* "/a/b" -> "/a/" */
        if (len > 1) len--;                              /* -> "/a"; "/" stays */
    }
    return best;
}

/* Does a cgroup v1 line's controller list ("cpu,memory") name memory? */
static int hasMemoryController(const char *list, size_t len) {
    for (size_t i = 0; i + 6 <= len; i++)
        if (!strncmp(list + i, "memory", 6) && (i == 0 || list[i - 1] == ',') &&
            (i + 6 == len || list[i + 6] == ','))
            return 1;
    return 0;
}

/* The process's cgroup memory limit, v2 (memory.max) or v1
 * (memory.limit_in_bytes), its ancestors' included; -1 when none. */
static long long cgroupMemoryLimit(const char *root) {
    char path[PATH_MAX], buf[4096];
    long long best = -1;
    snprintf(path, sizeof(path), "%s/proc/self/cgroup", root);
    if (aforkReadFile(path, buf, sizeof(buf)) <= 0) return -1;
    for (char *line = buf, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = '\0';
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        long long v;
        if (!c2) continue;
        if (c2 == c1 + 1)   /* "0::/path" */
            v = cgroupPathLimit(root, "/sys/fs/cgroup", c2 + 1, "memory.max");
        else if (hasMemoryController(c1 + 1, c2 - c1 - 1))
            v = cgroupPathLimit(root, "/sys/fs/cgroup/memory", c2 + 1, "memory.limit_in_bytes");
        else
            continue;
        if (v > 0 && (best < 0 || v < best)) best = v;
    }
    return best;
}

/* The least memory this process may use: the machine's (MemTotal), its
 * cgroup's limit, maxmemory. *what names it; -1 when none is known. */
static long long memoryLimit(const char *root, const char **what) {
    char path[PATH_MAX], buf[4096];
    long long limit = -1, v;
    snprintf(path, sizeof(path), "%s/proc/meminfo", root);
    if (aforkReadFile(path, buf, sizeof(buf)) > 0 && (v = aforkKbField(buf, "MemTotal")) > 0) {
        limit = v;
        *what = "MemTotal";
    }
    if ((v = cgroupMemoryLimit(root)) > 0 && (limit < 0 || v < limit)) {
        limit = v;
        *what = "the cgroup memory limit";
    }
    if (server.maxmemory > 0 && (limit < 0 || (long long)server.maxmemory < limit)) {
        limit = (long long)server.maxmemory;
        *what = "maxmemory";
    }
    return limit;
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

/* Start again with jemalloc's opt.thp set; returns only on failure. how:
 * "yes" or "auto", for the log. */
static void reexecWithThp(const char *how) {
    char dir[PATH_MAX];
    const char *old = getenv("JE_MALLOC_CONF");
    sds conf = old && *old ? sdscatfmt(sdsnew(old), ",%s", JE_THP_CONF) : sdsnew(JE_THP_CONF);
    /* Logged from the configured dir: a relative logfile is found there. */
    serverLog(LL_NOTICE, "fork-thp %s: restarting once with JE_MALLOC_CONF=%s so that jemalloc "
                         "backs the keyspace with huge pages", how, conf);
    if (!getcwd(dir, sizeof(dir)) || !start_cwd[0] || chdir(start_cwd) != 0) {
        serverLog(LL_WARNING, "fork-thp %s: cannot return to the start directory: %s", how,
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
    serverLog(LL_WARNING, "fork-thp %s: re-exec of %s failed: %s", how, server.executable,
              strerror(err));
}

#define STDIN_REFUSAL "the config came from stdin, so the server cannot restart itself"

/* fork-thp auto: should the keyspace be in huge pages here? 1 or 0, and
 * why in why (for INFO fork_thp_heap and the log). root: fork-probe-root;
 * pagemap_scan: PAGEMAP_SCAN works (the collapse thread's probe). The first
 * reason that holds is given: the kernel, THP, then the memory. */
int thpHeapAuto(const char *root, int pagemap_scan, int vm_page_reporting, char *why,
                size_t size) {
    int major, minor;
    char mode[16];
    const char *what = NULL;
    kernelRelease(root, &major, &minor);
    thpMode(root, mode, sizeof(mode));
    long long limit = memoryLimit(root, &what);
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
    else if (!strcmp(aforkJemallocOpt("opt.thp"), "n/a"))
        snprintf(why, size, "redis-server is not built with jemalloc");
    else if (configFromStdin() && strcmp(aforkJemallocOpt("opt.thp"), "always") != 0)
        snprintf(why, size, STDIN_REFUSAL);
    else if (vm_page_reporting)
        snprintf(why, size, "this VM reports free memory to its host (virtio balloon), so the "
                 "first write to each huge page waits for the host to back 2 MiB");
    else if (limit >= 0 && limit < AUTO_MIN_MEMORY)
        snprintf(why, size, "%s is %lld MiB, under %lld MiB: fork() copies few page tables anyway",
                 what, limit >> 20, AUTO_MIN_MEMORY >> 20);
    else {
        snprintf(why, size, "kernel %d.%d with MADV_COLLAPSE and PAGEMAP_SCAN, THP %s, %lld MiB "
                 "of memory (%s)", major, minor, mode, limit >> 20, what ? what : "unknown");
        return 1;
    }
    return 0;
}

/* Why fork-thp cannot be honoured here; NULL if it can (perhaps after a
 * re-exec, which does not return when it works). how: "yes" or "auto". */
static const char *heapRefusal(const char *root, const char *how) {
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
    reexecWithThp(how);
    return "re-exec failed";
}

/* After the config is read: put the keyspace in huge pages when wanted
 * (fork-thp yes, or auto and thpHeapAuto() said so: auto_why is then its
 * reason, else NULL) and possible. status gets what INFO fork_thp_heap
 * shows: "on", "off" or "refused: <why>", and with auto "on: auto: <why>"
 * or "off: auto: <why>" (the word before the first colon is the state, as
 * contrib/monitoring reads it); one log line says the same. Returns 1 when
 * the heap is in huge pages. On success, disable-thp is not applied (it
 * would undo it), an inherited PR_SET_THP_DISABLE is cleared, and
 * server.thp_enabled is set so that the fork child skips
 * dismissMemoryInChild() as upstream does when THP is on. */
int thpHeapSetup(int wanted, const char *auto_why, const char *root, char *status, size_t size) {
    const char *how = auto_why ? "auto" : "yes";
    snprintf(status, size, "off");
    if (!wanted || server.sentinel_mode) {
        unsetenv(REEXEC_MARK);
        if (auto_why) {
            snprintf(status, size, "off: auto: %s", auto_why);
            serverLog(LL_NOTICE, "fork-thp auto: off: %s; the keyspace stays in 4 KiB pages",
                      auto_why);
        }
        return 0;
    }
    const char *why = heapRefusal(root, how);
    if (why) {
        snprintf(status, size, "refused: %s", why);
        serverLog(LL_WARNING, "fork-thp %s refused: %s; the keyspace stays in 4 KiB pages", how, why);
        return 0;
    }
    prctl(PR_SET_THP_DISABLE, 0, 0, 0, 0);
    server.thp_enabled = 1;
    if (auto_why) snprintf(status, size, "on: auto: %s", auto_why);
    else snprintf(status, size, "on");
    serverLog(LL_NOTICE, "fork-thp %s: the keyspace is in transparent huge pages (jemalloc "
                         "opt.thp=always)%s%s; disable-thp is not applied", how,
              auto_why ? ": " : "", auto_why ? auto_why : "");
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
