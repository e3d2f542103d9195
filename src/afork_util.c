/* afork_util.c -- helpers shared by redis-afork's modules.
 *
 *  - reading small /proc and /sys files with open/read only: no stdio, no
 *    allocation, so a module may read one wherever it is allowed to run;
 *  - parsing what those files hold: one integer, a "[selected]" mode, a
 *    "Name:   123 kB" field;
 *  - the running kernel's version, and jemalloc's string options;
 *  - cpulists: parsing one, binding another task to one (upstream binds
 *    only itself).
 *
 * These keep no state and call no other afork file (afork.c explains how the
 * files fit together).
 *
 * ----------------------------------------------------------------------------
 *
 * Copyright (c) 2026, redis-afork contributors. AGPLv3, see LICENSE. */

#include "server.h"
#include "afork_util.h"
#include <fcntl.h>
#include <sched.h>
#include <sys/utsname.h>

/* Read a /proc or /sys file into buf (NUL-terminated, truncated to fit).
 * Bytes read, or -1. */
ssize_t aforkReadFile(const char *path, char *buf, size_t size) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd == -1) return -1;
    size_t got = 0;
    ssize_t n = 0;
    while (got < size - 1 && (n = read(fd, buf + got, size - 1 - got)) > 0) got += n;
    close(fd);
    buf[got] = '\0';
    return n < 0 ? -1 : (ssize_t)got;
}

/* A file holding one small integer; -1 when missing or not a number. */
long aforkReadIntFile(const char *path) {
    char buf[32];
    if (aforkReadFile(path, buf, sizeof(buf)) <= 0) return -1;
    char *end;
    errno = 0;
    long v = strtol(buf, &end, 10);
    if (errno || end == buf || (*end != '\0' && *end != '\n')) return -1;
    return v;
}

/* A /sys mode file, "always [madvise] never": the selected word ("madvise")
 * in out. 0, or -1 (out = "unknown") when unreadable or malformed. */
int aforkReadBracketed(const char *path, char *out, size_t size) {
    char buf[256];
    snprintf(out, size, "unknown");
    if (aforkReadFile(path, buf, sizeof(buf)) <= 0) return -1;
    char *open = strchr(buf, '['), *close = open ? strchr(open, ']') : NULL;
    if (!close || close - open - 1 <= 0 || (size_t)(close - open - 1) >= size) return -1;
    memcpy(out, open + 1, close - open - 1);
    out[close - open - 1] = '\0';
    return 0;
}

/* The "Name:   123 kB" field of a /proc status-like text, in bytes; -1. */
long long aforkKbField(const char *text, const char *name) {
    const char *p = text;
    size_t len = strlen(name);
    while ((p = strstr(p, name)) != NULL) {
        if ((p == text || p[-1] == '\n') && p[len] == ':') {
            char *end;
            long long kb = strtoll(p + len + 1, &end, 10);
            if (end == p + len + 1) return -1;
            return kb * 1024;
        }
        p += len;
    }
    return -1;
}

/* The running kernel is Linux major.minor or newer. */
int aforkLinuxAtLeast(int major, int minor) {
    struct utsname u;
    int have_major = 0, have_minor = 0;
    if (uname(&u) != 0 || sscanf(u.release, "%d.%d", &have_major, &have_minor) != 2) return 0;
    return have_major > major || (have_major == major && have_minor >= minor);
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

/* Parse one "a", "a-b" or "a-b:step" of a cpulist (the syntax of upstream's
 * server-cpulist, bgsave-cpulist, ...) at *p into the set; advance *p past
 * it. 0, or -1 when it is not one. */
static int addCpuRange(const char **p, cpu_set_t *set) {
    char *end;
    long a = strtol(*p, &end, 10), b, step = 1;
    if (end == *p || a < 0) return -1;
    b = a;
    if (*end == '-') {
        const char *s = end + 1;
        b = strtol(s, &end, 10);
        if (end == s || b < a) return -1;
        if (*end == ':') {
            s = end + 1;
            step = strtol(s, &end, 10);
            if (end == s || step < 1) return -1;
        }
    }
    for (long cpu = a; cpu <= b && cpu < CPU_SETSIZE; cpu += step) CPU_SET(cpu, set);
    *p = end;
    return 0;
}

/* Add the CPUs of cpulist to *set. 0, or -1 when it is not a cpulist. */
int aforkCpulistAdd(const char *cpulist, cpu_set_t *set) {
    const char *p = cpulist;
    while (1) {
        if (addCpuRange(&p, set) == -1) return -1;
        if (*p == '\0') return 0;
        if (*p++ != ',') return -1;
    }
}

/* Bind task pid to the CPUs of cpulist, as upstream's setcpuaffinity()
 * binds the calling thread. 0, or -1 (a bad list, or the call failed). */
int aforkSetTaskCpus(pid_t pid, const char *cpulist) {
#ifdef __linux__
    cpu_set_t set;
    CPU_ZERO(&set);
    if (aforkCpulistAdd(cpulist, &set) == -1) return -1;
    return sched_setaffinity(pid, sizeof(set), &set);
#else
    UNUSED(pid);
    UNUSED(cpulist);
    return -1;
#endif
}

