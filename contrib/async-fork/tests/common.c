/* common.c -- shared helpers of the fork-semantics test suite: knobs,
 * output, patterned memory, mappings, child processes, pipes, /proc readers,
 * the kernel's Async-fork state and log. */
#include "common.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/sched.h>
#include <sched.h>
#include <sys/klog.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct knobs knobs = { 1.0, "", 0 };
const char *current_test = "";
static char first_failure[512];

void knobs_init(void)
{
    const char *s = getenv("AFORK_SCALE");
    const char *inject = getenv("AFORK_INJECT");
    const char *use_prctl = getenv("AFORK_PRCTL");

    if (s && *s) {
        knobs.scale = strtod(s, NULL);
        if (knobs.scale <= 0)
            knobs.scale = 1.0;
    }
    knobs.inject = inject ? inject : "";
    knobs.use_prctl = use_prctl && strcmp(use_prctl, "1") == 0;
}

unsigned long scaled(unsigned long base, unsigned long min)
{
    double v = (double)base * knobs.scale;

    return v < (double)min ? min : (unsigned long)v;
}

/* AFORK_INJECT is "all" or a comma list of test names. */
int inject_here(void)
{
    size_t n = strlen(current_test);
    const char *p = knobs.inject;

    if (strcmp(p, "all") == 0)
        return 1;
    for (; (p = strstr(p, current_test)) != NULL; p += n)
        if ((p == knobs.inject || p[-1] == ',') && (p[n] == ',' || p[n] == 0))
            return 1;
    return 0;
}

void info(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    printf("# %s: ", current_test);
    vprintf(fmt, ap);
    printf("\n");
    fflush(stdout);
    va_end(ap);
}

int fail(const char *fmt, ...)
{
    va_list ap;
    char msg[512];

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    printf("# %s: FAILED CHECK: %s\n", current_test, msg);
    fflush(stdout);
    if (!first_failure[0])
        snprintf(first_failure, sizeof(first_failure), "%s", msg);
    return -1;
}

const char *fail_reason(void)
{
    return first_failure;
}

void reset_failure(void)
{
    first_failure[0] = 0;
}

void die_errno(const char *what)
{
    printf("# %s: FAILED CHECK: %s: %s\n", current_test, what, strerror(errno));
    fflush(stdout);
    _exit(99);
}

double now_seconds(void)
{
    return (double)now_ns() / 1e9;
}

uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

uint64_t rng_next(uint64_t *state)
{
    uint64_t x = *state ? *state : 0x9e3779b97f4a7c15ULL;

    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    return x * 0x2545f4914f6cdd1dULL;
}

uint64_t rng_below(uint64_t *state, uint64_t bound)
{
    return bound ? rng_next(state) % bound : 0;
}

uint64_t pattern_base(uint64_t seed, size_t page)
{
    uint64_t x = (seed + 1) * 0x9e3779b97f4a7c15ULL ^ ((uint64_t)page * 0xbf58476d1ce4e5b9ULL);

    /* Keep the top nibble away from MARK_BITS so marks never look valid. */
    return (x & 0x0fffffffffffffffULL) | 0x1000000000000000ULL;
}

void fill_pages(void *addr, size_t first_page, size_t npages, uint64_t seed)
{
    uint64_t *w = addr;

    for (size_t p = 0; p < npages; p++) {
        uint64_t base = pattern_base(seed, first_page + p);

        for (size_t i = 0; i < WORDS_PER_PAGE; i++)
            *w++ = base + i;
    }
}

size_t check_pages(const void *addr, size_t first_page, size_t npages,
                   uint64_t seed, size_t *bad_page)
{
    const uint64_t *w = addr;
    size_t bad = 0;

    for (size_t p = 0; p < npages; p++) {
        uint64_t base = pattern_base(seed, first_page + p);
        size_t bad_here = 0;

        for (size_t i = 0; i < WORDS_PER_PAGE; i++)
            bad_here += w[i] != base + i;
        if (bad_here && bad == 0 && bad_page)
            *bad_page = first_page + p;
        bad += bad_here;
        w += WORDS_PER_PAGE;
    }
    return bad;
}

uint64_t mark_value(uint64_t who, uint64_t seq)
{
    return MARK_BITS | (who & 0xff) << 48 | (seq & 0xffffffffffffULL);
}

void *map_anon(size_t size, int huge_aligned)
{
    size_t extra = huge_aligned ? HUGE_SIZE : 0;
    char *p = mmap(NULL, size + extra, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    uintptr_t start;

    if (p == MAP_FAILED)
        die_errno("mmap anonymous");
    if (!huge_aligned)
        return p;
    start = ((uintptr_t)p + HUGE_SIZE - 1) & ~(HUGE_SIZE - 1);
    if (start > (uintptr_t)p)
        munmap(p, start - (uintptr_t)p);
    if ((uintptr_t)p + extra > start)
        munmap((char *)start + size, (uintptr_t)p + extra - start);
    return (void *)start;
}

void unmap(void *addr, size_t size)
{
    if (munmap(addr, size) != 0)
        die_errno("munmap");
}

uint64_t *patterned_tables(size_t tables, uint64_t seed)
{
    uint64_t *base = map_anon(tables * HUGE_SIZE, 1);

    madvise(base, tables * HUGE_SIZE, MADV_NOHUGEPAGE);
    fill_pages(base, 0, tables * (HUGE_SIZE / PAGE_SIZE), seed);
    return base;
}

pid_t fork_or_die(void)
{
    pid_t pid;

    fflush(stdout);
    pid = fork();
    if (pid < 0)
        die_errno("fork");
    return pid;
}

int wait_child(pid_t pid, char *buf, size_t len)
{
    int status = 0;

    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR) {
            snprintf(buf, len, "waitpid: %s", strerror(errno));
            return -1;
        }
    }
    if (WIFEXITED(status))
        snprintf(buf, len, "exit %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        snprintf(buf, len, "signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
    else
        snprintf(buf, len, "status 0x%x", status);
    return status;
}

int exited_ok(int status)
{
    return status >= 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

void pipe_or_die(int fds[2])
{
    if (pipe2(fds, O_CLOEXEC) != 0)
        die_errno("pipe");
}

static int write_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;

    while (len) {
        ssize_t n = write(fd, p, len);

        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static int read_all(int fd, void *buf, size_t len)
{
    char *p = buf;

    while (len) {
        ssize_t n = read(fd, p, len);

        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

void send_report(int fd, const struct report *r)
{
    if (write_all(fd, r, sizeof(*r)) != 0)
        die_errno("write report");
}

int recv_report(int fd, struct report *r)
{
    memset(r, 0, sizeof(*r));
    return read_all(fd, r, sizeof(*r));
}

void send_byte(int fd)
{
    char c = 'x';

    if (write_all(fd, &c, 1) != 0)
        die_errno("write pipe");
}

int wait_byte(int fd)
{
    char c;

    return read_all(fd, &c, 1);
}

void close_pair(int fds[2])
{
    for (int i = 0; i < 2; i++) {
        if (fds[i] >= 0)
            close(fds[i]);
        fds[i] = -1;
    }
}

void close_end(int fds[2], int which)
{
    if (fds[which] >= 0)
        close(fds[which]);
    fds[which] = -1;
}

void parent_ends(int go[2], int rep[2])
{
    close_end(go, 0);
    close_end(rep, 1);
}

long status_kb(const char *key)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    size_t klen = strlen(key);
    long v = -1;

    if (!f)
        return -1;
    while (fgets(line, sizeof(line), f)) {
        if (strncmp(line, key, klen) == 0 && line[klen] == ':') {
            v = strtol(line + klen + 1, NULL, 10);
            break;
        }
    }
    fclose(f);
    return v;
}

/* Parse "start-end ..." of a smaps header line; 1 if it is one. */
static int smaps_header(const char *line, uintptr_t *start, uintptr_t *end)
{
    unsigned long s, e;

    if (sscanf(line, "%lx-%lx ", &s, &e) != 2 || !strchr(line, ' '))
        return 0;
    *start = s;
    *end = e;
    return 1;
}

long smaps_kb(const void *addr, size_t len, const char *field)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    char line[512];
    uintptr_t lo = (uintptr_t)addr, hi = lo + len, s, e;
    size_t flen = strlen(field);
    int inside = 0;
    long total = 0;

    if (!f)
        return -1;
    while (fgets(line, sizeof(line), f)) {
        if (smaps_header(line, &s, &e)) {
            inside = s < hi && e > lo;
            continue;
        }
        if (inside && strncmp(line, field, flen) == 0 && line[flen] == ':')
            total += strtol(line + flen + 1, NULL, 10);
    }
    fclose(f);
    return total;
}

int write_file(const char *path, const char *text)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    int rc = 0;

    if (fd < 0)
        return -1;
    if (write_all(fd, text, strlen(text)) != 0)
        rc = -1;
    if (close(fd) != 0)
        rc = -1;
    return rc;
}

long read_long_file(const char *path)
{
    char buf[64] = "";
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t n;

    if (fd < 0)
        return -1;
    n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = 0;
    if (strncmp(buf, "max", 3) == 0)
        return -2;
    return strtol(buf, NULL, 10);
}

int afork_active(void)
{
    long mode = read_long_file("/proc/sys/vm/async_fork");

    if (mode < 0)
        return -1;
    return mode == 2 || (mode == 1 && prctl(PR_GET_ASYNC_FORK, 0, 0, 0, 0) == 1);
}

unsigned long long vmstat_counter(const char *name)
{
    char key[64];
    unsigned long long val, found = 0;
    FILE *f = fopen("/proc/vmstat", "r");

    if (!f)
        return 0;
    while (fscanf(f, "%63s %llu", key, &val) == 2)
        if (strcmp(key, name) == 0)
            found = val;
    fclose(f);
    return found;
}

int kernel_log_count(const char *what, char *last, size_t len)
{
    int size = klogctl(10 /* SYSLOG_ACTION_SIZE_BUFFER */, NULL, 0), n, count = 0;
    char *buf, *p, *q;

    if (size <= 0)
        return -1;
    buf = malloc((size_t)size + 1);
    if (!buf)
        return -1;
    n = klogctl(3 /* SYSLOG_ACTION_READ_ALL */, buf, size);
    if (n < 0) {
        free(buf);
        return -1;
    }
    buf[n] = 0;
    for (p = buf; (p = strstr(p, what)) != NULL; p++) {
        count++;
        if (last) {
            q = strchr(p, '\n');
            snprintf(last, len, "%.*s", q ? (int)(q - p) : (int)strlen(p), p);
        }
    }
    free(buf);
    return count;
}

int fault_attr_setup(const char *dir, const char *const settings[][2], size_t n)
{
    char path[256];

    if (access(dir, F_OK) != 0)
        mount("debugfs", "/sys/kernel/debug", "debugfs", 0, NULL);
    if (access(dir, F_OK) != 0)
        return 1;
    for (size_t i = 0; i < n; i++) {
        snprintf(path, sizeof(path), "%s/%s", dir, settings[i][0]);
        if (write_file(path, settings[i][1]) != 0)
            return fail("%s = %s: %s", path, settings[i][1], strerror(errno));
    }
    return 0;
}

/* Kernel log lines that show a broken kernel. */
const char *const splats[NSPLATS] = { "WARNING:", "BUG:", "Bad rss-counter", "Bad page" };

void count_splats(int counts[NSPLATS], char *last, size_t len)
{
    for (size_t i = 0; i < NSPLATS; i++)
        counts[i] = kernel_log_count(splats[i], last, len);
}

int check_splats(const int before[NSPLATS], const int after[NSPLATS], const char *last)
{
    for (size_t i = 0; i < NSPLATS; i++)
        if (before[i] >= 0 && after[i] > before[i])
            return fail("the kernel logged %d \"%s\" line(s) during the test, the last: %s",
                        after[i] - before[i], splats[i], last);
    return 0;
}

/* --- cgroup v2 ----------------------------------------------------------- */

pid_t clone_into(int cgroup_fd)
{
    struct clone_args args = {
        .flags = CLONE_INTO_CGROUP,
        .exit_signal = SIGCHLD,
        .cgroup = (uint64_t)cgroup_fd,
    };

    return (pid_t)syscall(SYS_clone3, &args, sizeof(args));
}

/* A new cgroup @dir with @controller on; @file (if any) set to @value. */
int set_up_cgroup(const char *dir, const char *controller, const char *file,
                         const char *value, int *fd)
{
    char path[256];

    if (access(CG_ROOT "/cgroup.controllers", R_OK) != 0)
        return fail("cgroup v2 is not mounted at " CG_ROOT);
    snprintf(path, sizeof(path), "+%s", controller);
    if (write_file(CG_ROOT "/cgroup.subtree_control", path) != 0)
        return fail("enable the %s controller: %s", controller, strerror(errno));
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return fail("mkdir %s: %s", dir, strerror(errno));
    snprintf(path, sizeof(path), "%s/%s", dir, file ? file : "");
    if (file && write_file(path, value) != 0)
        return fail("write %s to %s: %s", value, path, strerror(errno));
    *fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (*fd < 0)
        return fail("open %s: %s", dir, strerror(errno));
    return 0;
}

void pin_to_cpu(int cpu)
{
    cpu_set_t one;

    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    if (sched_setaffinity(0, sizeof(one), &one) != 0)
        die_errno("sched_setaffinity");
}

/* memory.stat lags behind: the kernel folds its per-CPU counts in when
 * enough of them changed, or else every 2 s (FLUSH_TIME); a few hundred
 * page tables may not show for that long. Wait for the periodic fold. */
#define MEMCG_STAT_LAG_US 2500000

long long cgroup_pagetables(const char *dir)
{
    char path[256], line[256];
    long long v = -1;
    FILE *f;

    usleep(MEMCG_STAT_LAG_US);
    snprintf(path, sizeof(path), "%s/memory.stat", dir);
    f = fopen(path, "r");
    if (!f)
        return -1;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "pagetables %lld", &v) == 1)
            break;
    fclose(f);
    return v;
}

/* The value of @key in @dir's memory.events, -1 if unreadable. */
long long cgroup_event(const char *dir, const char *key)
{
    char path[256], name[64];
    long long v, found = -1;
    FILE *f;

    snprintf(path, sizeof(path), "%s/memory.events", dir);
    f = fopen(path, "r");
    if (!f)
        return -1;
    while (fscanf(f, "%63s %lld", name, &v) == 2)
        if (strcmp(name, key) == 0)
            found = v;
    fclose(f);
    return found;
}

/* The async_fork_* lines of /proc/vmstat, by name. */
static const char *const counter_names[NR_COUNTERS] = {
    "async_fork_sessions", "async_fork_deferred", "async_fork_child_copied",
    "async_fork_copied_fault", "async_fork_copied_gup", "async_fork_copied_vma",
    "async_fork_copied_madvise", "async_fork_copied_zap", "async_fork_copied_exit",
    "async_fork_copied_fork", "async_fork_parent_ns", "async_fork_sessions_failed",
};

void read_counters(struct counters *c)
{
    char name[64];
    unsigned long long val;
    FILE *f = fopen("/proc/vmstat", "r");

    memset(c, 0, sizeof(*c));
    if (!f)
        return;
    while (fscanf(f, "%63s %llu", name, &val) == 2)
        for (int i = 0; i < NR_COUNTERS; i++)
            if (strcmp(name, counter_names[i]) == 0) {
                c->v[i] = val;
                c->found++;
            }
    fclose(f);
}

void counters_delta(struct counters *d, const struct counters *a, const struct counters *b)
{
    for (int i = 0; i < NR_COUNTERS; i++)
        d->v[i] = b->v[i] - a->v[i];
    d->found = b->found;
}

unsigned long long parent_copies(const struct counters *d)
{
    unsigned long long sum = 0;

    for (int i = C_FAULT; i <= C_FORK; i++)
        sum += d->v[i];
    return sum;
}

void print_counters(const char *what, const struct counters *d)
{
    info("%s: sessions %llu deferred %llu child %llu | parent: fault %llu gup %llu "
         "vma %llu madvise %llu zap %llu exit %llu fork %llu, %.3f ms | failed %llu",
         what, d->v[C_SESSIONS], d->v[C_DEFERRED], d->v[C_CHILD], d->v[C_FAULT],
         d->v[C_GUP], d->v[C_VMA], d->v[C_MADVISE], d->v[C_ZAP], d->v[C_EXIT],
         d->v[C_FORK], d->v[C_PARENT_NS] / 1e6, d->v[C_FAILED]);
}
