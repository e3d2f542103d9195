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
 *  - whether the machine is a VM that reports free memory to its host
 *    (virtio balloon free page reporting): the host then takes back every
 *    2 MiB block the guest frees, and while it does, the guest's writes to
 *    such blocks fault in the host and are slow, which is what fork-thp's
 *    re-collapse runs into when it allocates and frees huge pages
 *    (afork_thp_host.c); read at startup and when fork-probe-root
 *    changes, since a device's features do not. A balloon whose reports
 *    are held back (page_reporting's min_free_ms of a minute or more, as
 *    a bench sets it, some kernels capping it at 5 minutes: a block the
 *    heap frees and takes again soon is not handed back) counts as none:
 *    the host then backs the guest as one without reporting does;
 *  - advice for LATENCY DOCTOR's "fork" line and redis-server
 *    --check-system.
 *
 * afork.c refreshes the values from serverCron (never inside a quiet
 * window), under the probe root it is given; INFO serves the cached values.
 * /proc/self/smaps_rollup walks the page tables, for a time that grows with
 * the memory in 4 KiB pages, so a thread of ours reads it: the cron asks
 * for a read every 10 s, and the thread waits on a condition variable until
 * it is asked and allowed. afork.c forbids reads from just before each fork
 * until the event loop runs again outside a quiet window, and stops the
 * thread (and joins it) at exit. A read holds the mmap lock for its whole
 * walk, and a fork() that comes meanwhile waits for it (counted:
 * fork_smaps_collisions), so the walk is made only when huge pages are
 * possible for this process (hugePagesPossible(); otherwise AnonHugePages
 * is reported as 0).
 *
 * ----------------------------------------------------------------------------
 *
 * Copyright (c) 2026, redis-afork contributors. AGPLv3, see LICENSE. */

#include "server.h"
#include "afork_system.h"
#include "afork_util.h"
#include <dirent.h>
#include <fcntl.h>
#include <sys/prctl.h>

#define VIRTIO_ID_BALLOON 5          /* /sys/bus/virtio/devices/<dev>/device */
#define VIRTIO_BALLOON_F_REPORTING 5 /* a bit of .../<dev>/features, one char per bit */
#define REPORTING_HELD_MS (60LL * 1000) /* min_free_ms that holds reports back */

static struct {
    char thp_enabled[16];        /* system mode: always/madvise/never; "unknown" */
    char thp_defrag[24];
    int thp_process_disabled;    /* prctl(PR_GET_THP_DISABLE); -1 unknown */
    long long anon_huge_bytes;   /* AnonHugePages of smaps_rollup; -1 unknown */
    long long page_table_bytes;  /* VmPTE; -1 unknown */
    int vm_page_reporting;       /* a virtio balloon reports free pages: 1/0 */
    int vm_reporting_held;       /* it would, but the reports are held back */
    int vm_stale;                /* vm_page_reporting to be read (again) */
    const char *je_thp;          /* jemalloc opt.thp */
    const char *je_metadata_thp; /* jemalloc opt.metadata_thp */
    int fork_thp;                /* fork-thp in effect, handed over by afork.c */
} sys = {.thp_enabled = "unknown", .thp_defrag = "unknown", .thp_process_disabled = -1,
         .anon_huge_bytes = -1, .page_table_bytes = -1, .vm_stale = 1, .je_thp = "n/a",
         .je_metadata_thp = "n/a"};

/* The smaps_rollup reader thread. The main thread opens the file (outside
 * any window) and hands the descriptor over; the thread only pread()s it,
 * so it never opens a file or maps memory, whenever it runs. */
static struct {
    pthread_t thread;
    int started;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int requested;               /* under lock: a read is wanted */
    int allowed;                 /* under lock: no fork or quiet window now */
    int stop;                    /* under lock */
    int fd;                      /* under lock; -1 none */
    int allowed_published;       /* main thread's copy of allowed */
    int reading;                 /* under lock: a read is in flight */
    long long collisions;        /* main thread: forks that found one */
} smaps = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER,
           .allowed = 1, .fd = -1, .allowed_published = 1};

static redisAtomic long long smaps_anon_huge = -1;

/* ------------------------------------------------------------ the reader */

/* Wait until a read is asked for and allowed: the descriptor to read, or
 * -1 when told to stop. */
static int smapsWaitForWork(void) {
    int fd;
    pthread_mutex_lock(&smaps.lock);
    while (!smaps.stop && !(smaps.requested && smaps.allowed && smaps.fd != -1))
        pthread_cond_wait(&smaps.cond, &smaps.lock);
    fd = smaps.stop ? -1 : dup(smaps.fd);
    smaps.requested = 0;
    smaps.reading = fd != -1;
    pthread_mutex_unlock(&smaps.lock);
    return fd;
}

static void *smapsReader(void *arg) {
    UNUSED(arg);
    static char buf[16384];
    redis_set_thread_title("afork_smaps");
    while (1) {
        int fd = smapsWaitForWork();
        if (fd == -1) {
            pthread_mutex_lock(&smaps.lock);
            int stop = smaps.stop;
            pthread_mutex_unlock(&smaps.lock);
            if (stop) break;
            continue;
        }
        ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
        close(fd);
        pthread_mutex_lock(&smaps.lock);
        smaps.reading = 0;
        pthread_mutex_unlock(&smaps.lock);
        long long v = -1;
        if (n > 0) {
            buf[n] = '\0';
            v = aforkKbField(buf, "AnonHugePages");
        }
        atomicSet(smaps_anon_huge, v);
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
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    pthread_mutex_lock(&smaps.lock);
    int old = smaps.fd;
    smaps.fd = fd;
    pthread_mutex_unlock(&smaps.lock);
    atomicSet(smaps_anon_huge, -1);
    if (old != -1) close(old);   /* a read in flight has its own dup() */
}

/* Ask the reader for a new AnonHugePages figure. */
static void smapsRequest(void) {
    pthread_mutex_lock(&smaps.lock);
    smaps.requested = 1;
    pthread_cond_signal(&smaps.cond);
    pthread_mutex_unlock(&smaps.lock);
}

/* Main thread, before each fork (0) and each event-loop iteration: may the
 * reader walk the page tables now? Takes the lock only on a change. */
void aforkSystemAllowReads(int allowed) {
    if (!smaps.started || allowed == smaps.allowed_published) return;
    smaps.allowed_published = allowed;
    pthread_mutex_lock(&smaps.lock);
    smaps.allowed = allowed;
    if (!allowed && smaps.reading) smaps.collisions++;
    if (allowed) pthread_cond_signal(&smaps.cond);
    pthread_mutex_unlock(&smaps.lock);
}

/* Exit: stop the reader and wait for it. */
void aforkSystemStop(void) {
    if (!smaps.started) return;
    pthread_mutex_lock(&smaps.lock);
    smaps.stop = 1;
    pthread_cond_signal(&smaps.cond);
    pthread_mutex_unlock(&smaps.lock);
    pthread_join(smaps.thread, NULL);
    smaps.started = 0;
}

/* ------------------------------------------------------------ the values */

/* Startup: jemalloc's options, the reader thread, a first read. fork_thp:
 * the keyspace is in huge pages (fork-thp yes, or auto and on). */
void aforkSystemInit(const char *root, int fork_thp) {
    sys.fork_thp = fork_thp;
    sys.je_thp = aforkJemallocOpt("opt.thp");
    sys.je_metadata_thp = aforkJemallocOpt("opt.metadata_thp");
    if (pthread_create(&smaps.thread, NULL, smapsReader, NULL) == 0) smaps.started = 1;
    aforkSystemRefresh(root, 1);
}

/* THP is out of the keyspace's reach: system "never" or disabled for us. */
static int thpUnavailable(void) {
    return !strcmp(sys.thp_enabled, "never") || sys.thp_process_disabled == 1;
}

/* Can this process have huge pages at all? Not when THP is out of reach;
 * in "madvise" mode only where something asks for them: fork-thp, or
 * jemalloc with opt.thp "always" or metadata_thp on. (A module that
 * madvises its own memory is not seen.) */
static int hugePagesPossible(void) {
    if (thpUnavailable()) return 0;
    if (strcmp(sys.thp_enabled, "madvise") != 0) return 1;
    return sys.fork_thp || !strcmp(sys.je_thp, "always") ||
           (strcmp(sys.je_metadata_thp, "disabled") != 0 && strcmp(sys.je_metadata_thp, "n/a") != 0);
}

/* Does a virtio balloon under root/sys/bus/virtio/devices report free
 * pages (VIRTIO_BALLOON_F_REPORTING negotiated)? 0 without a balloon. */
static int readVmPageReporting(const char *root) {
    char dir[PATH_MAX], path[PATH_MAX + 300], buf[160];
    snprintf(dir, sizeof(dir), "%s/sys/bus/virtio/devices", root);
    DIR *d = opendir(dir);
    if (!d) return 0;
    struct dirent *e;
    int reporting = 0;
    while (!reporting && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        snprintf(path, sizeof(path), "%s/%s/device", dir, e->d_name);
        if (aforkReadFile(path, buf, sizeof(buf)) <= 0 || strtol(buf, NULL, 16) != VIRTIO_ID_BALLOON)
            continue;
        snprintf(path, sizeof(path), "%s/%s/features", dir, e->d_name);
        reporting = aforkReadFile(path, buf, sizeof(buf)) > VIRTIO_BALLOON_F_REPORTING &&
                    buf[VIRTIO_BALLOON_F_REPORTING] == '1';
    }
    closedir(d);
    return reporting;
}

/* Are the balloon's reports held back (min_free_ms under root of a minute
 * or more)? */
static int vmReportingHeld(const char *root) {
    char path[PATH_MAX], buf[32];
    snprintf(path, sizeof(path), "%s/sys/module/page_reporting/parameters/min_free_ms", root);
    return aforkReadFile(path, buf, sizeof(buf)) > 0 && strtoll(buf, NULL, 10) >= REPORTING_HELD_MS;
}

/* Does the VM hand freed memory back to its host now: a reporting balloon
 * whose reports are not held back? held: 1 when they are. */
static int readVmReporting(const char *root, int *held) {
    int reporting = readVmPageReporting(root);
    *held = reporting && vmReportingHeld(root);
    return reporting && !*held;
}

/* The same, read now: fork-thp auto decides before aforkSystemInit(). */
int aforkSystemReadVmPageReporting(const char *root) {
    int held;
    return readVmReporting(root, &held);
}

/* serverCron (or startup): refresh the cached values from the files under
 * root; with_smaps asks the reader thread for a new AnonHugePages figure. */
void aforkSystemRefresh(const char *root, int with_smaps) {
    static char buf[16384];
    char path[PATH_MAX];

    snprintf(path, sizeof(path), "%s/sys/kernel/mm/transparent_hugepage/enabled", root);
    aforkReadBracketed(path, sys.thp_enabled, sizeof(sys.thp_enabled));
    snprintf(path, sizeof(path), "%s/sys/kernel/mm/transparent_hugepage/defrag", root);
    aforkReadBracketed(path, sys.thp_defrag, sizeof(sys.thp_defrag));
    int d = prctl(PR_GET_THP_DISABLE, 0, 0, 0, 0);
    sys.thp_process_disabled = d < 0 ? -1 : d;

    snprintf(path, sizeof(path), "%s/proc/self/status", root);
    sys.page_table_bytes =
        aforkReadFile(path, buf, sizeof(buf)) > 0 ? aforkKbField(buf, "VmPTE") : -1;
    if (sys.vm_stale) {
        sys.vm_page_reporting = readVmReporting(root, &sys.vm_reporting_held);
        sys.vm_stale = 0;
    }
    if (!smaps.started) return;
    if (!hugePagesPossible()) {
        sys.anon_huge_bytes = 0;
        return;
    }
    smapsOpen(root);
    atomicGet(smaps_anon_huge, sys.anon_huge_bytes);
    if (with_smaps) smapsRequest();
}

/* CONFIG SET fork-probe-root: read the VM's devices under the new root at
 * the next refresh. */
void aforkSystemRootChanged(void) {
    sys.vm_stale = 1;
}

const char *aforkSystemThpMode(void) {
    return sys.thp_enabled;
}

long long aforkSystemPageTableBytes(void) {
    return sys.page_table_bytes;
}

/* fork-thp auto switched the heap to huge pages: AnonHugePages is worth
 * reading now. */
void aforkSystemForkThpOn(void) {
    sys.fork_thp = 1;
    sys.je_thp = aforkJemallocOpt("opt.thp");
}

/* vm_free_page_reporting, as read at startup (fork-thp's warm-up follows
 * it when not set). */
int aforkSystemVmPageReporting(void) {
    return sys.vm_page_reporting;
}

/* INFO fork: the page-table and THP fields. */
sds aforkSystemInfo(sds info) {
    return sdscatprintf(info,
        "page_table_bytes:%lld\r\n"
        "thp_enabled:%s\r\n"
        "thp_defrag:%s\r\n"
        "thp_process_disabled:%d\r\n"
        "thp_anon_huge_pages_bytes:%lld\r\n"
        "jemalloc_opt_thp:%s\r\n"
        "jemalloc_opt_metadata_thp:%s\r\n"
        "fork_smaps_reads:%d\r\n"
        "fork_smaps_collisions:%lld\r\n"
        "vm_free_page_reporting:%d\r\n"
        "vm_free_page_reporting_held:%d\r\n",
        sys.page_table_bytes,
        sys.thp_enabled,
        sys.thp_defrag,
        sys.thp_process_disabled,
        sys.anon_huge_bytes,
        sys.je_thp,
        sys.je_metadata_thp,
        smaps.started && hugePagesPossible(),
        smaps.collisions,
        sys.vm_page_reporting,
        sys.vm_reporting_held);
}

/* ------------------------------------------------------------ the advice */

/* Linux >= 5.8 copies 4 KiB on a copy-on-write fault of a huge page. */
static int kernelHasThpCowSplit(void) {
    return aforkLinuxAtLeast(5, 8);
}

/* LATENCY DOCTOR, "fork" event: the page tables per GB and the THP state. */
sds aforkSystemAdvice(sds report, int *advices) {
    double gb = (double)zmalloc_used_memory() / (1024.0 * 1024 * 1024);
    if (sys.page_table_bytes >= 0 && gb > 0.01)
        report = sdscatprintf(report, " fork() copies %.1f MB of page tables (%.1f MB per GB of data).",
                              sys.page_table_bytes / (1024.0 * 1024),
                              sys.page_table_bytes / (1024.0 * 1024) / gb);
    if (!thpUnavailable()) return report;
    report = sdscatprintf(report, " Transparent huge pages are %s for this process,"
                                  " so the data sits in 4 KiB pages: about 512 times the page-table"
                                  " entries of huge pages.",
                          sys.thp_process_disabled == 1 ? "disabled (disable-thp)" : "off (never)");
    if (kernelHasThpCowSplit())
        report = sdscat(report, " On this kernel (>= 5.8) a copy-on-write fault of a huge page copies only"
                                " 4 KiB, so huge pages make forks cheaper without a larger stall after them.");
    (*advices)++;
    return report;
}

/* redis-server --check-system: THP findings for fork cost. */
int aforkSystemCheck(sds *msg) {
    aforkSystemRefresh("", 0);
    printf("THP: enabled=%s defrag=%s process-disabled=%d, kernel %s 4 KiB copy-on-write of huge pages\n",
           sys.thp_enabled, sys.thp_defrag, sys.thp_process_disabled,
           kernelHasThpCowSplit() ? "has" : "lacks");
    printf("VM free page reporting: %s\n", sys.vm_page_reporting
               ? "yes (a virtio balloon hands every freed 2 MiB block to the host: a growing"
                 " heap in huge pages waits for the host at each new huge page, and fork-thp's"
                 " re-collapse frees and takes such blocks after each save; fork-thp auto stays"
                 " off here: docs/reference.md, vm_free_page_reporting)"
               : sys.vm_reporting_held ? "held back (page_reporting min_free_ms of a minute or more)"
               : "no");
    if (!strcmp(sys.thp_enabled, "never") && kernelHasThpCowSplit()) {
        *msg = sdsnew("Transparent huge pages are 'never': the keyspace stays in 4 KiB pages, so fork()"
                      " copies about 512 times more page-table entries than with huge pages. On this"
                      " kernel (>= 5.8) huge pages no longer make copy-on-write after fork() worse:"
                      " consider 'madvise' with fork-thp auto.");
        return -1;
    }
    return 1;
}
