/* afork_system.c -- the machine's share of a fork's cost, and our advice.
 *
 * fork() copies the page tables while the parent waits: their size (VmPTE)
 * is the cost, and it depends on transparent huge pages (THP). A keyspace
 * in 2 MiB pages needs about 1/512 of the page-table entries of one in
 * 4 KiB pages, and since Linux 5.8 a copy-on-write fault on a huge page
 * copies 4 KiB, not 2 MiB, so THP no longer makes the stall after fork()
 * worse. We report:
 *  - the system THP modes (enabled, defrag), the process's
 *    PR_GET_THP_DISABLE, its AnonHugePages, jemalloc's opt.thp and
 *    opt.metadata_thp;
 *  - the page-table size of the process (VmPTE);
 *  - advice for LATENCY DOCTOR and redis-server --check-system.
 *
 * Files are read from serverCron (never inside a quiet window) under the
 * probe root of afork_kernel.c; INFO serves the cached values.
 * /proc/self/smaps_rollup walks the page tables (7 ms per GB of 4 KiB
 * pages measured here), so it is read by a thread of ours, on request
 * from the cron, and never while a quiet window is open.
 *
 * Copyright (c) 2026, redis-afork contributors. AGPLv3, see LICENSE. */

#include "server.h"
#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/utsname.h>

afork_system_info afork_system;

/* The smaps_rollup reader thread. The main thread opens the file (outside
 * any window) and hands the descriptor over; the thread only pread()s it,
 * so it never opens a file or maps memory, whenever it runs. */
static redisAtomic int smaps_requested = 0;
static redisAtomic int smaps_fd = -1;
static redisAtomic long long smaps_anon_huge = -1;
static pthread_t smaps_thread;
static int smaps_thread_started = 0;

/* "always [madvise] never" -> "madvise"; "unknown" when unreadable. */
static void readBracketed(const char *path, char *out, size_t size) {
    char buf[256];
    snprintf(out, size, "unknown");
    if (aforkReadFile(path, buf, sizeof(buf)) <= 0) return;
    char *open = strchr(buf, '['), *close = open ? strchr(open, ']') : NULL;
    if (!close || close - open - 1 <= 0 || (size_t)(close - open - 1) >= size) return;
    memcpy(out, open + 1, close - open - 1);
    out[close - open - 1] = '\0';
}

/* The "Name:   123 kB" field of a /proc status-like file, in bytes. */
static long long readKbField(const char *buf, const char *name) {
    const char *p = buf;
    size_t len = strlen(name);
    while ((p = strstr(p, name)) != NULL) {
        if ((p == buf || p[-1] == '\n') && p[len] == ':') {
            char *end;
            long long kb = strtoll(p + len + 1, &end, 10);
            if (end == p + len + 1) return -1;
            return kb * 1024;
        }
        p += len;
    }
    return -1;
}

static const char *probeRoot(void) {
    return afork_probe_root ? afork_probe_root : "";
}

/* A jemalloc string option ("opt.thp"); "n/a" without jemalloc. */
const char *aforkJemallocOpt(const char *name) {
#if defined(USE_JEMALLOC)
    const char *v = NULL;
    size_t sz = sizeof(v);
    if (je_mallctl(name, &v, &sz, NULL, 0) == 0 && v) return v;
#else
    UNUSED(name);
#endif
    return "n/a";
}

static void *smapsReader(void *arg) {
    UNUSED(arg);
    static char buf[16384];
    redis_set_thread_title("afork_smaps");
    while (1) {
        int req, fd;
        atomicGet(smaps_requested, req);
        atomicGet(smaps_fd, fd);
        if (!req || fd == -1 || aforkQuietNow()) {
            usleep(100000);
            continue;
        }
        ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
        long long v = -1;
        if (n > 0) {
            buf[n] = '\0';
            v = readKbField(buf, "AnonHugePages");
        }
        atomicSet(smaps_anon_huge, v);
        atomicSet(smaps_requested, 0);
    }
    return NULL;
}

/* Main thread: (re)open smaps_rollup when the probe root changed. */
static void smapsOpen(const char *root) {
    static char opened_root[PATH_MAX] = "\1";   /* nothing opened yet */
    char path[PATH_MAX];
    if (!strcmp(opened_root, root)) return;
    snprintf(opened_root, sizeof(opened_root), "%s", root);
    snprintf(path, sizeof(path), "%s/proc/self/smaps_rollup", root);
    int fd = open(path, O_RDONLY | O_CLOEXEC), old;
    atomicGetWithSync(smaps_fd, old);
    atomicSetWithSync(smaps_fd, fd);
    atomicSet(smaps_anon_huge, -1);
    if (old != -1) close(old);   /* a pread() in flight keeps its own reference */
}

void aforkSystemInit(void) {
    afork_system.je_thp = aforkJemallocOpt("opt.thp");
    afork_system.je_metadata_thp = aforkJemallocOpt("opt.metadata_thp");
    afork_system.anon_huge_bytes = -1;
    if (pthread_create(&smaps_thread, NULL, smapsReader, NULL) == 0) smaps_thread_started = 1;
    aforkSystemRefresh(1);
}

/* serverCron (or startup): refresh the cached values; with_smaps asks the
 * reader thread for a new AnonHugePages figure. */
void aforkSystemRefresh(int with_smaps) {
    static char buf[16384];
    char path[PATH_MAX];
    const char *root = probeRoot();
    if (aforkQuietWindowOpen()) return;

    snprintf(path, sizeof(path), "%s/sys/kernel/mm/transparent_hugepage/enabled", root);
    readBracketed(path, afork_system.thp_enabled, sizeof(afork_system.thp_enabled));
    snprintf(path, sizeof(path), "%s/sys/kernel/mm/transparent_hugepage/defrag", root);
    readBracketed(path, afork_system.thp_defrag, sizeof(afork_system.thp_defrag));
    int d = prctl(PR_GET_THP_DISABLE, 0, 0, 0, 0);
    afork_system.thp_process_disabled = d < 0 ? -1 : d;

    snprintf(path, sizeof(path), "%s/proc/self/status", root);
    afork_system.page_table_bytes =
        aforkReadFile(path, buf, sizeof(buf)) > 0 ? readKbField(buf, "VmPTE") : -1;
    smapsOpen(root);
    atomicGet(smaps_anon_huge, afork_system.anon_huge_bytes);
    if (with_smaps && smaps_thread_started) atomicSet(smaps_requested, 1);
}

sds aforkInfoForkSystem(sds info) {
    return sdscatprintf(info,
        "page_table_bytes:%lld\r\n"
        "thp_enabled:%s\r\n"
        "thp_defrag:%s\r\n"
        "thp_process_disabled:%d\r\n"
        "thp_anon_huge_pages_bytes:%lld\r\n"
        "jemalloc_opt_thp:%s\r\n"
        "jemalloc_opt_metadata_thp:%s\r\n",
        afork_system.page_table_bytes,
        afork_system.thp_enabled,
        afork_system.thp_defrag,
        afork_system.thp_process_disabled,
        afork_system.anon_huge_bytes,
        afork_system.je_thp,
        afork_system.je_metadata_thp);
}

/* The running kernel is at least major.minor. */
int aforkKernelAtLeast(int major, int minor) {
    struct utsname u;
    int have_major = 0, have_minor = 0;
    if (uname(&u) != 0 || sscanf(u.release, "%d.%d", &have_major, &have_minor) != 2) return 0;
    return have_major > major || (have_major == major && have_minor >= minor);
}

/* Linux >= 5.8 copies 4 KiB on a copy-on-write fault of a huge page. */
static int kernelHasThpCowSplit(void) {
    return aforkKernelAtLeast(5, 8);
}

/* THP is out of the keyspace's reach: system "never" or disabled for us. */
static int thpUnavailable(void) {
    return !strcmp(afork_system.thp_enabled, "never") || afork_system.thp_process_disabled == 1;
}

/* One sentence on the Async-fork state of this kernel. */
static sds adviceAsyncFork(sds s) {
    if (afork_kernel.kind == AFORK_KERNEL_NONE)
        return sdscat(s, " This kernel has no Async-fork support, so the page tables are copied"
                         " while the server waits (an Async-fork kernel copies them in the child:"
                         " see contrib/async-fork).");
    if (!afork_kernel.enabled)
        return sdscatprintf(s, " This kernel supports Async-fork (%s) but it is not enabled for"
                               " this process: enabling it takes the page-table copy off the server.",
                            aforkKernelName(afork_kernel.kind));
    return sdscatprintf(s, " Async-fork (%s) is enabled for this process.",
                        aforkKernelName(afork_kernel.kind));
}

/* LATENCY DOCTOR, for each event: name the cause on this machine. */
sds aforkLatencyAdvice(sds report, const char *event, int *advices) {
    if (!strcasecmp(event, "fork")) {
        double gb = (double)zmalloc_used_memory() / (1024.0 * 1024 * 1024);
        if (afork_system.page_table_bytes >= 0 && gb > 0.01)
            report = sdscatprintf(report, " fork() copies %.1f MB of page tables (%.1f MB per GB of data).",
                                  afork_system.page_table_bytes / (1024.0 * 1024),
                                  afork_system.page_table_bytes / (1024.0 * 1024) / gb);
        if (thpUnavailable()) {
            report = sdscatprintf(report, " Transparent huge pages are %s for this process,"
                                          " so the data sits in 4 KiB pages: about 512 times the page-table"
                                          " entries of huge pages.",
                                  afork_system.thp_process_disabled == 1 ? "disabled (disable-thp)" : "off (never)");
            if (kernelHasThpCowSplit())
                report = sdscat(report, " On this kernel (>= 5.8) a copy-on-write fault of a huge page copies only"
                                        " 4 KiB, so huge pages make forks cheaper without a larger stall after them.");
            (*advices)++;
        }
        report = adviceAsyncFork(report);
        if (afork_kernel.kind != AFORK_KERNEL_NONE && !afork_kernel.enabled) (*advices)++;
    } else if (!strcasecmp(event, "fork-child-ready")) {
        report = sdscat(report, " Time from fork() to the child's first instruction: on an Async-fork"
                                " kernel this is the page-table copy done by the child, which the server"
                                " does not wait for.");
    } else if (!strcasecmp(event, "fork-cow-stall")) {
        report = sdscatprintf(report, " Longest event-loop iteration while a fork child lived; the last"
                                      " child cost %lld minor page faults (copy-on-write) in the server.",
                              afork_stats.last_cow_minor_faults);
    }
    return report;
}

/* redis-server --check-system: Async-fork findings. */
int aforkCheckAsyncFork(sds *msg) {
    aforkProbeKernel("", &afork_kernel);
    if (afork_kernel.kind != AFORK_KERNEL_NONE && !afork_kernel.enabled) {
        *msg = sdscatprintf(sdsempty(), "This kernel supports Async-fork (%s, mode %d) but it is not"
                                        " enabled for this process: fork() will copy the page tables"
                                        " while Redis waits.",
                            aforkKernelName(afork_kernel.kind), afork_kernel.mode);
        return -1;
    }
    printf("Async-fork kernel: %s%s\n", aforkKernelName(afork_kernel.kind),
           afork_kernel.enabled ? " (enabled for this process)" : "");
    return 1;
}

/* redis-server --check-system: THP findings for fork cost. */
int aforkCheckForkThp(sds *msg) {
    aforkSystemRefresh(0);
    printf("THP: enabled=%s defrag=%s process-disabled=%d, kernel %s 4 KiB copy-on-write of huge pages\n",
           afork_system.thp_enabled, afork_system.thp_defrag, afork_system.thp_process_disabled,
           kernelHasThpCowSplit() ? "has" : "lacks");
    if (!strcmp(afork_system.thp_enabled, "never") && kernelHasThpCowSplit()) {
        *msg = sdsnew("Transparent huge pages are 'never': the keyspace stays in 4 KiB pages, so fork()"
                      " copies about 512 times more page-table entries than with huge pages. On this"
                      " kernel (>= 5.8) huge pages no longer make copy-on-write after fork() worse:"
                      " consider 'madvise' with fork-thp yes.");
        return -1;
    }
    return 1;
}
