/* afork_kernel.c -- is this kernel an Async-fork kernel, and is it on for us?
 *
 * Known interfaces:
 *  - OpenAnolis / Alibaba Cloud Linux: a per-memory-cgroup switch, the file
 *    memory.async_fork of the process's memory cgroup (cgroup v1 and v2);
 *    "1" means forks of processes in that cgroup are asynchronous.
 *    The cgroup is found through /proc/self/cgroup and /proc/self/mountinfo.
 *  - ByteDance: the sysctl kernel.async_fork_enabled, 0 off, 1 per process
 *    or per memory cgroup, 2 for every process.
 *  - redis-afork's contrib/async-fork patch: the sysctl vm.async_fork, 0 off,
 *    1 for processes that opted in with prctl(AFORK_PR_SET_ASYNC_FORK, 1),
 *    2 for every process.
 *
 * fork-async-optin (default yes) makes the process opt in (or out) with that
 * prctl at startup and on CONFIG SET; a wrapper cannot do it for us, since
 * execve() clears the opt-in. Kernels without the prctl answer EINVAL: the
 * result ("unsupported") is all that changes there.
 *
 * Every probe takes the root under which /proc and /sys are found ("" for
 * the real ones), so that tests can point it at a fake tree (the protected
 * config fork-probe-root, owned by afork.c). Files are read with open/read
 * (afork_util.c: no stdio, no allocation); anything unreadable or malformed
 * means "no". afork.c probes at startup, from serverCron and when the root
 * changes, never inside a quiet window, and reads the cached result for
 * INFO, LATENCY DOCTOR and the quiet window's "auto" mode.
 *
 * On contrib/async-fork's kernel, /proc/vmstat counts the page tables each
 * fork left to its child and who copied them (the child, or the parent
 * first, by cause). afork.c has them read just before each fork and again
 * when the child is ready (its copy is over by then) or gone, and INFO
 * shows the difference: what the latest fork deferred and what the parent
 * copied itself. They are counted over the whole system, so another
 * process forking at the same time adds its own.
 *
 * ----------------------------------------------------------------------------
 *
 * Copyright (c) 2026, redis-afork contributors. AGPLv3, see LICENSE. */

#include "server.h"
#include "afork_kernel.h"
#include "afork_util.h"
#include <sys/prctl.h>

#define AFORK_KERNEL_NONE 0
#define AFORK_KERNEL_ANOLIS 1
#define AFORK_KERNEL_BYTEDANCE 2
#define AFORK_KERNEL_AFORK 3       /* contrib/async-fork */

typedef struct {
    int kind;      /* AFORK_KERNEL_* */
    int mode;      /* the interface's own value (e.g. 0/1/2); -1 none */
    int enabled;   /* forks of this process are asynchronous */
} kernelState;

static kernelState kernel = {AFORK_KERNEL_NONE, -1, 0};

int afork_async_optin = 1;          /* config fork-async-optin */

#define OPTIN_NOT_TRIED 0
#define OPTIN_IN 1
#define OPTIN_OUT 2
#define OPTIN_UNSUPPORTED 3
#define OPTIN_FAILED 4
static int optin_result = OPTIN_NOT_TRIED;
static int optin_errno = 0;

/* The /proc/vmstat counters read (names without "async_fork_"), in the
 * order INFO shows them. The first AFORK_COUNTERS_REQUIRED must all be
 * there; those after them came with later versions of the series, and a
 * kernel without one shows -1 for it. */
static const char *counter_names[] = {
    "deferred", "child_copied", "copied_fault", "copied_gup", "copied_vma",
    "copied_madvise", "copied_zap", "copied_exit", "copied_fork",
    "parent_ns", "sessions_failed", "taken_over",
    "sync_pinned", "sync_notifiers", "sync_merge_any", "sync_nomem"};
#define AFORK_COUNTERS (int)(sizeof(counter_names) / sizeof(counter_names[0]))
#define AFORK_COUNTER_DEFERRED 0
#define AFORK_COUNTER_CHILD 1
#define AFORK_COUNTER_PARENT_FIRST 2     /* copied_fault ... copied_fork */
#define AFORK_COUNTER_PARENT_NS 9        /* one past the last copied_* */
#define AFORK_COUNTER_FAILED 10
#define AFORK_COUNTER_TAKEN_OVER 11
#define AFORK_COUNTER_SYNC_FIRST 12       /* sync_pinned ... sync_nomem */
#define AFORK_COUNTERS_REQUIRED AFORK_COUNTER_TAKEN_OVER  /* the first later one */

static struct {
    int have;                          /* this kernel has them */
    int pending;                       /* before[] read, the fork not yet over */
    long long before[AFORK_COUNTERS];
    long long latest[AFORK_COUNTERS];  /* the latest fork's deltas; -1 none */
} counters;

static int readCounters(const char *root, long long *v);

/* Our cgroup for the memory controller, from /proc/self/cgroup: the v1
 * line naming "memory", else the v2 line "0::/path". */
static int memoryCgroupPath(const char *proc, char *out, size_t size, int *v2) {
    char path[PATH_MAX], buf[4096];
    snprintf(path, sizeof(path), "%s/self/cgroup", proc);
    if (aforkReadFile(path, buf, sizeof(buf)) <= 0) return -1;
    int found = -1;
    char *save = NULL;
    for (char *line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char *c1 = strchr(line, ':');
        char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2 || c2[1] != '/') continue;
        size_t ctl_len = c2 - c1 - 1;
        int is_memory = 0;
        for (char *p = c1 + 1; p < c2;) {   /* controllers: "cpu,memory" */
            char *comma = memchr(p, ',', c2 - p);
            size_t len = (comma ? comma : c2) - p;
            if (len == 6 && !memcmp(p, "memory", 6)) is_memory = 1;
            p += len + 1;
        }
        if (is_memory || (ctl_len == 0 && found == -1)) {
            snprintf(out, size, "%s", c2 + 1);
            *v2 = !is_memory;
            found = 0;
            if (is_memory) break;
        }
    }
    return found;
}

/* Does the comma-separated option list opts name opt? */
static int hasOption(const char *opts, const char *opt) {
    size_t len = strlen(opt);
    for (const char *p = opts; p && *p;) {
        const char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        if (n == len && !memcmp(p, opt, len)) return 1;
        p = comma ? comma + 1 : NULL;
    }
    return 0;
}

/* Where the hierarchy holding cgroup cg is mounted, from
 * /proc/self/mountinfo: "<mountpoint><cg minus the mount's root>" in out.
 * A line: ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS [TAGS...] - FSTYPE SRC SUPER */
static int cgroupDir(const char *root, const char *proc, const char *cg, int v2,
                     char *out, size_t size) {
    static char buf[65536];
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/self/mountinfo", proc);
    if (aforkReadFile(path, buf, sizeof(buf)) <= 0) return -1;
    char *save = NULL;
    for (char *line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char *f[6], *tok, *lsave = NULL;
        int n = 0;
        for (tok = strtok_r(line, " ", &lsave); tok && n < 6; tok = strtok_r(NULL, " ", &lsave))
            f[n++] = tok;
        if (n < 6) continue;
        while (tok && strcmp(tok, "-") != 0) tok = strtok_r(NULL, " ", &lsave);
        char *fstype = tok ? strtok_r(NULL, " ", &lsave) : NULL;
        char *src = fstype ? strtok_r(NULL, " ", &lsave) : NULL;
        char *super = src ? strtok_r(NULL, " ", &lsave) : NULL;
        if (!fstype) continue;
        if (v2 ? strcmp(fstype, "cgroup2") != 0
               : strcmp(fstype, "cgroup") != 0 || !hasOption(super, "memory"))
            continue;
        const char *mroot = f[3], *rest = cg;
        size_t rl = strlen(mroot);
        if (strcmp(mroot, "/") != 0) {
            /* A container's view: the mount shows a subtree of cg's tree. */
            if (strncmp(cg, mroot, rl) != 0 || (cg[rl] != '\0' && cg[rl] != '/')) continue;
            rest = cg + rl;
        }
        snprintf(out, size, "%s%s%s", root, f[4], strcmp(rest, "/") ? rest : "");
        return 0;
    }
    return -1;
}

/* A sysctl file under proc of the given kind: 0, 1 or 2 recorded in k,
 * -1 (k untouched) when missing or out of range. */
static long probeSysctl(const char *proc, const char *name, int kind, kernelState *k) {
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/sys/%s", proc, name);
    long v = aforkReadIntFile(path);
    if (v < 0 || v > 2) return -1;
    k->kind = kind;
    k->mode = (int)v;
    k->enabled = v == 2;
    return v;
}

/* redis-afork's own kernel patch (contrib/async-fork): the sysctl
 * vm.async_fork (0 off, 1 for processes that opted in, 2 for all) and the
 * per-process opt-in read back with prctl(AFORK_PR_GET_ASYNC_FORK). */
static int probeAforkPatch(const char *proc, kernelState *k) {
    long v = probeSysctl(proc, "vm/async_fork", AFORK_KERNEL_AFORK, k);
    if (v == 1) k->enabled = prctl(AFORK_PR_GET_ASYNC_FORK, 0, 0, 0, 0) == 1;
    return v >= 0;
}

/* ByteDance: kernel.async_fork_enabled, 0 off, 1 per process or memory
 * cgroup (no interface tells us which applies to this process), 2 all. */
static int probeBytedance(const char *proc, kernelState *k) {
    return probeSysctl(proc, "kernel/async_fork_enabled", AFORK_KERNEL_BYTEDANCE, k) >= 0;
}

/* OpenAnolis: memory.async_fork in our memory cgroup, 0 or 1. */
static int probeAnolis(const char *root, const char *proc, kernelState *k) {
    char cg[PATH_MAX], dir[PATH_MAX], path[PATH_MAX + 32];
    int v2 = 0;
    if (memoryCgroupPath(proc, cg, sizeof(cg), &v2) != 0) return 0;
    if (cgroupDir(root, proc, cg, v2, dir, sizeof(dir)) != 0) return 0;
    snprintf(path, sizeof(path), "%s/memory.async_fork", dir);
    long v = aforkReadIntFile(path);
    if (v != 0 && v != 1) return 0;
    k->kind = AFORK_KERNEL_ANOLIS;
    k->mode = (int)v;
    k->enabled = v == 1;
    return 1;
}

/* Probe the kernel under the given root ("" for the real one) into k. */
static void probe(const char *root, kernelState *k) {
    char proc[PATH_MAX];
    memset(k, 0, sizeof(*k));
    k->kind = AFORK_KERNEL_NONE;
    k->mode = -1;
    snprintf(proc, sizeof(proc), "%s/proc", root);
    /* Each probe fills k only when it finds its interface. */
    if (!probeAforkPatch(proc, k) && !probeBytedance(proc, k)) probeAnolis(root, proc, k);
}

static const char *kindName(int kind) {
    switch (kind) {
    case AFORK_KERNEL_ANOLIS: return "anolis";
    case AFORK_KERNEL_BYTEDANCE: return "bytedance";
    case AFORK_KERNEL_AFORK: return "afork";
    default: return "none";
    }
}

/* Opt this process in (on 1) or out with contrib/async-fork's prctl, and
 * read it back. The result is kept for INFO; 0 unless the kernel refused
 * a prctl it has. */
int aforkKernelOptIn(int on) {
    optin_errno = 0;
    if (prctl(AFORK_PR_SET_ASYNC_FORK, on ? 1 : 0, 0, 0, 0) != 0) {
        optin_errno = errno;
        optin_result = errno == EINVAL ? OPTIN_UNSUPPORTED : OPTIN_FAILED;
        return optin_result == OPTIN_UNSUPPORTED ? 0 : -1;
    }
    int got = prctl(AFORK_PR_GET_ASYNC_FORK, 0, 0, 0, 0);
    optin_result = got == (on ? 1 : 0) ? (on ? OPTIN_IN : OPTIN_OUT) : OPTIN_FAILED;
    return optin_result == OPTIN_FAILED ? -1 : 0;
}

static const char *optinName(void) {
    switch (optin_result) {
    case OPTIN_IN: return "in";
    case OPTIN_OUT: return "out";
    case OPTIN_UNSUPPORTED: return "unsupported";
    case OPTIN_FAILED: return "failed";
    default: return "not-tried";
    }
}

/* Refresh the cached state from the interfaces found under root. */
void aforkKernelProbe(const char *root) {
    long long now[AFORK_COUNTERS];
    int had = counters.have;
    probe(root, &kernel);
    counters.have = kernel.kind == AFORK_KERNEL_AFORK && readCounters(root, now) == 0;
    /* Counters found (again): no fork has read them yet. */
    if (counters.have && !had)
        for (int i = 0; i < AFORK_COUNTERS; i++) counters.latest[i] = -1;
}

/* Forks of this process are asynchronous. */
int aforkKernelAsyncEnabled(void) {
    return kernel.enabled;
}

const char *aforkKernelName(void) {
    return kindName(kernel.kind);
}

/* ------------------------------------------------------ the counters */

/* The async_fork_* counters from root's /proc/vmstat into v (-1 for a
 * later one the kernel lacks). 0, or -1 when the file or a required
 * counter is missing. */
static int readCounters(const char *root, long long *v) {
    char path[PATH_MAX], buf[16384], name[64];
    snprintf(path, sizeof(path), "%s/proc/vmstat", root);
    if (aforkReadFile(path, buf, sizeof(buf)) <= 0) return -1;
    for (int i = 0; i < AFORK_COUNTERS; i++) {
        snprintf(name, sizeof(name), "\nasync_fork_%s ", counter_names[i]);
        char *p = strstr(buf, name);
        char *end = NULL;
        if (p) v[i] = strtoll(p + strlen(name), &end, 10);
        if (p && end != p + strlen(name)) continue;
        if (i < AFORK_COUNTERS_REQUIRED) return -1;
        v[i] = -1;
    }
    return 0;
}

/* Close the pending fork's deltas with the counters read now. */
static void finishCounters(const long long *now) {
    for (int i = 0; i < AFORK_COUNTERS; i++)
        counters.latest[i] = now[i] == -1 || counters.before[i] == -1 ?
                             -1 : now[i] - counters.before[i];
    counters.pending = 0;
}

/* Just before fork(), with no quiet window open, on a kernel that has the
 * counters (the probe found them): read them, which also closes a fork
 * still pending (its child never reported). One read of /proc/vmstat,
 * before upstream's fork timer starts; none elsewhere. */
void aforkKernelCountersBeforeFork(const char *root) {
    long long now[AFORK_COUNTERS];
    if (!counters.have || readCounters(root, now) != 0) {
        counters.pending = 0;
        return;
    }
    if (counters.pending) finishCounters(now);
    memcpy(counters.before, now, sizeof(now));
    counters.pending = 1;
}

/* The child is ready or gone, outside any quiet window: the deltas. */
void aforkKernelCountersAfterChild(const char *root) {
    long long now[AFORK_COUNTERS];
    if (counters.pending && readCounters(root, now) == 0) finishCounters(now);
}

/* INFO fork: the latest fork's counters, when the kernel has them. */
static sds countersInfo(sds info) {
    if (!counters.have) return info;
    const long long *l = counters.latest;
    long long parent = 0;
    for (int i = AFORK_COUNTER_PARENT_FIRST; i < AFORK_COUNTER_PARENT_NS; i++) parent += l[i];
    if (l[AFORK_COUNTER_DEFERRED] == -1) parent = -1;
    info = sdscatprintf(info, "latest_fork_async_tables_deferred:%lld\r\n"
                              "latest_fork_async_tables_child:%lld\r\n"
                              "latest_fork_async_tables_parent:%lld\r\n",
                        l[AFORK_COUNTER_DEFERRED], l[AFORK_COUNTER_CHILD], parent);
    for (int i = AFORK_COUNTER_PARENT_FIRST; i < AFORK_COUNTER_PARENT_NS; i++)
        info = sdscatprintf(info, "latest_fork_async_tables_parent_%s:%lld\r\n",
                            counter_names[i] + strlen("copied_"), l[i]);
    info = sdscatprintf(info, "latest_fork_async_tables_taken_over:%lld\r\n",
                        l[AFORK_COUNTER_TAKEN_OVER]);
    long long ns = l[AFORK_COUNTER_PARENT_NS];
    info = sdscatprintf(info, "latest_fork_async_parent_copy_usec:%lld\r\n"
                              "latest_fork_async_sessions_failed:%lld\r\n",
                        ns == -1 ? -1 : ns / 1000, l[AFORK_COUNTER_FAILED]);
    /* What fork() kept for itself, by reason: tables mapping a pinned
     * page; whole forks for MMU notifiers, KSM merge-any, no memory. */
    info = sdscatprintf(info, "latest_fork_async_tables_pinned:%lld\r\n",
                        l[AFORK_COUNTER_SYNC_FIRST]);
    for (int i = AFORK_COUNTER_SYNC_FIRST + 1; i < AFORK_COUNTERS; i++)
        info = sdscatprintf(info, "latest_fork_async_%s:%lld\r\n", counter_names[i], l[i]);
    return info;
}

/* INFO fork: the kernel fields. */
sds aforkKernelInfo(sds info) {
    info = sdscatprintf(info,
        "fork_async_kernel:%s\r\n"
        "fork_async_kernel_mode:%d\r\n"
        "fork_async_enabled:%d\r\n"
        "fork_async_optin:%s\r\n"
        "fork_async_optin_errno:%d\r\n",
        kindName(kernel.kind), kernel.mode, kernel.enabled, optinName(), optin_errno);
    return countersInfo(info);
}

/* LATENCY DOCTOR, "fork" event: one sentence on the Async-fork state, and
 * one more piece of advice when the kernel could but does not help. */
sds aforkKernelAdvice(sds s, int *advices) {
    const char *name = kindName(kernel.kind);
    if (kernel.kind == AFORK_KERNEL_NONE)
        return sdscat(s, " This kernel has no Async-fork support, so the page tables are copied"
                         " while the server waits (an Async-fork kernel copies them in the child:"
                         " see contrib/async-fork).");
    if (kernel.enabled)
        return sdscatprintf(s, " Async-fork (%s) is enabled for this process.", name);
    (*advices)++;
    return sdscatprintf(s, " This kernel supports Async-fork (%s) but it is not enabled for"
                           " this process: enabling it takes the page-table copy off the server.",
                        name);
}

/* redis-server --check-system: Async-fork findings for the real kernel. */
int aforkKernelCheck(sds *msg) {
    probe("", &kernel);
    if (kernel.kind != AFORK_KERNEL_NONE && !kernel.enabled) {
        *msg = sdscatprintf(sdsempty(), "This kernel supports Async-fork (%s, mode %d) but it is not"
                                        " enabled for this process: fork() will copy the page tables"
                                        " while Redis waits.",
                            kindName(kernel.kind), kernel.mode);
        return -1;
    }
    printf("Async-fork kernel: %s%s\n", kindName(kernel.kind),
           kernel.enabled ? " (enabled for this process)" : "");
    return 1;
}
