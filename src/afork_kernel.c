/* afork_kernel.c -- is this kernel an Async-fork kernel, and is it on for us?
 *
 * Known interfaces (see the redis-afork notes for sources):
 *  - OpenAnolis / Alibaba Cloud Linux: a per-memory-cgroup switch, the file
 *    memory.async_fork of the process's memory cgroup (cgroup v1 and v2);
 *    "1" means forks of processes in that cgroup are asynchronous.
 *  - ByteDance: the sysctl kernel.async_fork_enabled, 0 off, 1 per process
 *    or per memory cgroup, 2 for every process.
 *
 * Every read goes through probeKernel(), which takes the /proc and /sys roots
 * so that tests can point it at a fake tree. Files are read with open/read
 * (no stdio, no allocation); anything unreadable or malformed means "no".
 * Probes run at startup and from serverCron, never inside a quiet window.
 *
 * Copyright (c) 2026, redis-afork contributors. AGPLv3, see LICENSE. */

#include "server.h"
#include <fcntl.h>

afork_kernel_info afork_kernel;
char *afork_probe_root = NULL;   /* hidden test config: "" or a fake root */

/* Read a small file into buf (NUL-terminated). Returns bytes read or -1. */
static ssize_t readSmallFile(const char *path, char *buf, size_t size) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd == -1) return -1;
    ssize_t n = read(fd, buf, size - 1);
    close(fd);
    if (n < 0) return -1;
    buf[n] = '\0';
    return n;
}

/* A file holding one small integer; -1 when missing or not a number. */
static long readIntFile(const char *path) {
    char buf[32];
    if (readSmallFile(path, buf, sizeof(buf)) <= 0) return -1;
    char *end;
    errno = 0;
    long v = strtol(buf, &end, 10);
    if (errno || end == buf || (*end != '\0' && *end != '\n')) return -1;
    return v;
}

/* Our cgroup path for the memory controller, from /proc/self/cgroup:
 * the v1 line naming "memory", else the v2 line "0::/path". */
static int memoryCgroupPath(const char *proc, char *out, size_t size, int *v2) {
    char path[PATH_MAX], buf[4096];
    snprintf(path, sizeof(path), "%s/self/cgroup", proc);
    if (readSmallFile(path, buf, sizeof(buf)) <= 0) return -1;
    int found = -1;
    for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n")) {
        char *c1 = strchr(line, ':');
        char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2) continue;
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

/* Probe the kernel under the given roots ("" for the real ones). */
void aforkProbeKernel(const char *root, afork_kernel_info *k) {
    char proc[PATH_MAX], sys[PATH_MAX], path[PATH_MAX], cg[PATH_MAX];
    int v2 = 0;
    memset(k, 0, sizeof(*k));
    k->kind = AFORK_KERNEL_NONE;
    snprintf(proc, sizeof(proc), "%s/proc", root);
    snprintf(sys, sizeof(sys), "%s/sys", root);

    /* ByteDance: kernel.async_fork_enabled */
    snprintf(path, sizeof(path), "%s/sys/kernel/async_fork_enabled", proc);
    long bd = readIntFile(path);
    if (bd >= 0 && bd <= 2) {
        k->kind = AFORK_KERNEL_BYTEDANCE;
        k->mode = (int)bd;
        k->enabled = bd == 2;
        return;
    }

    /* OpenAnolis: memory.async_fork of our memory cgroup */
    if (memoryCgroupPath(proc, cg, sizeof(cg), &v2) == 0) {
        if (v2)
            snprintf(path, sizeof(path), "%s/fs/cgroup%s/memory.async_fork", sys, cg);
        else
            snprintf(path, sizeof(path), "%s/fs/cgroup/memory%s/memory.async_fork", sys, cg);
        long an = readIntFile(path);
        if (an == 0 || an == 1) {
            k->kind = AFORK_KERNEL_ANOLIS;
            k->mode = (int)an;
            k->enabled = an == 1;
        }
    }
}

const char *aforkKernelName(int kind) {
    switch (kind) {
    case AFORK_KERNEL_ANOLIS: return "anolis";
    case AFORK_KERNEL_BYTEDANCE: return "bytedance";
    default: return "none";
    }
}

/* Refresh the cached probe; never while a quiet window is open. */
void aforkKernelRefresh(void) {
    if (aforkQuietWindowOpen()) return;
    aforkProbeKernel(afork_probe_root ? afork_probe_root : "", &afork_kernel);
}

int aforkKernelAsyncEnabled(void) {
    return afork_kernel.enabled;
}
