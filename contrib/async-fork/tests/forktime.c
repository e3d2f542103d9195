/* forktime.c -- fork time versus resident size: for each size, 10 forks of a
 * process whose anonymous memory (4 KiB pages, THP off for the region) is
 * all resident. Prints, per size, the median and max time fork() takes to
 * return in the parent and the time until the child first runs.
 * The same binary runs on the host for comparison (forktest fork-time).
 *
 * With AFORK_FORKTIME_TOUCH (a list of counts, e.g. "0 4 16 64") the parent
 * also writes one word in that many distinct 2 MiB page tables of the region
 * from a pthread_atfork() parent handler, inside fork() as a real program's
 * atfork handlers do (jemalloc unlocks every arena's mutexes there). On an
 * Async-fork kernel each such write copies a table the child has not
 * copied yet, so the slope of fork time over the count is what one table
 * touched inside fork() costs the parent. Those forks are interleaved
 * (every repetition runs each count once, in rotated order) and reported
 * as AFORK-FORKTOUCH lines, one per size and count.
 */
#include "common.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_REPS 100
#define MAX_TOUCH_COUNTS 16
#define PAGES_PER_TABLE (HUGE_SIZE / PAGE_SIZE)

/* What the atfork parent handler writes: word 1 (the child checks word 0)
 * of the first page of `count` tables spread over the whole tables of the
 * region (from `base`, its first 2 MiB boundary, for `ntables` tables). */
static struct {
    uint64_t *base;
    size_t ntables;
    size_t count;
} touch;

static void touch_tables_in_parent(void)
{
    for (size_t i = 0; i < touch.count; i++) {
        size_t table = i * touch.ntables / touch.count;

        touch.base[table * PAGES_PER_TABLE * WORDS_PER_PAGE + 1]++;
    }
}

struct fork_sample {
    double fork_us;          /* fork() call to its return in the parent */
    double ready_us;         /* fork() call to the child's first instruction */
};

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

static double median_of(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static double max_of(const double *v, int n)
{
    double m = v[0];

    for (int i = 1; i < n; i++)
        m = v[i] > m ? v[i] : m;
    return m;
}

/* Make every page resident with its index in word 0. */
static void populate(uint64_t *base, size_t npages)
{
    for (size_t p = 0; p < npages; p++)
        base[p * WORDS_PER_PAGE] = p ^ 0xf0f0;
}

/* Child: stamp the time, check every 64th page, exit. */
static void timed_child(const uint64_t *base, size_t npages, volatile uint64_t *ready_ns)
{
    size_t bad = 0;

    *ready_ns = now_ns();
    for (size_t p = 0; p < npages; p += 64)
        bad += base[p * WORDS_PER_PAGE] != (p ^ 0xf0f0);
    if (inject_here())
        bad++;
    _exit(bad ? 1 : 0);
}

static int time_one_fork(const uint64_t *base, size_t npages, volatile uint64_t *ready_ns,
                         struct fork_sample *out)
{
    char how[96];
    uint64_t t0, t1;
    pid_t pid;
    int status;

    *ready_ns = 0;
    fflush(stdout);
    t0 = now_ns();
    pid = fork();
    t1 = now_ns();
    if (pid < 0)
        return fail("fork: %s", strerror(errno));
    if (pid == 0)
        timed_child(base, npages, ready_ns);
    status = wait_child(pid, how, sizeof(how));
    if (!exited_ok(status))
        return fail("the child of a timed fork ended with %s (snapshot check)", how);
    out->fork_us = (double)(t1 - t0) / 1e3;
    out->ready_us = (double)(*ready_ns - t0) / 1e3;
    return 0;
}

/* Forks with `counts[c]` tables touched inside fork(), interleaved. */
static int time_touches(uint64_t *base, size_t npages, unsigned long mib, int reps,
                        const unsigned long *counts, int ncounts, volatile uint64_t *ready_ns)
{
    static double fork_us[MAX_TOUCH_COUNTS][MAX_REPS], ready_us[MAX_TOUCH_COUNTS][MAX_REPS];
    struct fork_sample s;
    int rc = 0;

    uintptr_t first = ((uintptr_t)base + HUGE_SIZE - 1) & ~(HUGE_SIZE - 1);

    touch.base = (uint64_t *)first;
    touch.ntables = ((uintptr_t)base + npages * PAGE_SIZE - first) / HUGE_SIZE;
    for (int i = 0; i < reps && rc == 0; i++) {
        for (int k = 0; k < ncounts && rc == 0; k++) {
            int c = (i + k) % ncounts;

            touch.count = counts[c] < touch.ntables ? counts[c] : touch.ntables;
            rc = time_one_fork(base, npages, ready_ns, &s);
            touch.count = 0;
            fork_us[c][i] = s.fork_us;
            ready_us[c][i] = s.ready_us;
        }
    }
    for (int c = 0; c < ncounts && rc == 0; c++)
        printf("AFORK-FORKTOUCH mib=%lu touch=%lu reps=%d fork_median_us=%.0f fork_max_us=%.0f "
               "ready_median_us=%.0f ready_max_us=%.0f\n",
               mib, counts[c], reps, median_of(fork_us[c], reps), max_of(fork_us[c], reps),
               median_of(ready_us[c], reps), max_of(ready_us[c], reps));
    fflush(stdout);
    return rc;
}

static int time_size(unsigned long mib, int reps, const unsigned long *counts, int ncounts,
                     volatile uint64_t *ready_ns)
{
    size_t npages = mib * MIB / PAGE_SIZE;
    uint64_t *base = map_anon(npages * PAGE_SIZE, 0);
    struct fork_sample s[MAX_REPS];
    double fork_us[MAX_REPS], ready_us[MAX_REPS], t0 = now_seconds();
    int rc = 0;

    if (madvise(base, npages * PAGE_SIZE, MADV_NOHUGEPAGE) != 0)
        info("madvise(NOHUGEPAGE): %s", strerror(errno));
    populate(base, npages);
    info("%lu MiB resident in %.1f s (RSS %ld kB)", mib, now_seconds() - t0, status_kb("VmRSS"));
    for (int i = 0; i < reps && rc == 0; i++) {
        rc = time_one_fork(base, npages, ready_ns, &s[i]);
        if (rc == 0) {
            fork_us[i] = s[i].fork_us;
            ready_us[i] = s[i].ready_us;
        }
    }
    if (rc == 0)
        printf("AFORK-FORKTIME mib=%lu reps=%d fork_median_us=%.0f fork_max_us=%.0f "
               "ready_median_us=%.0f ready_max_us=%.0f\n",
               mib, reps, median_of(fork_us, reps), max_of(fork_us, reps),
               median_of(ready_us, reps), max_of(ready_us, reps));
    fflush(stdout);
    if (rc == 0 && ncounts > 0)
        rc = time_touches(base, npages, mib, reps, counts, ncounts, ready_ns);
    unmap(base, npages * PAGE_SIZE);
    return rc;
}

int run_fork_time(const unsigned long *sizes_mib, int nsizes, int reps,
                  const unsigned long *touch_counts, int ncounts)
{
    volatile uint64_t *ready_ns = mmap(NULL, PAGE_SIZE, PROT_READ | PROT_WRITE,
                                       MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    int rc = 0;

    if (ready_ns == MAP_FAILED)
        die_errno("mmap shared page");
    if (reps < 1 || reps > MAX_REPS)
        return fail("repetitions must be 1..%d, not %d", MAX_REPS, reps);
    if (ncounts > 0 && pthread_atfork(NULL, touch_tables_in_parent, NULL) != 0)
        return fail("pthread_atfork failed");
    for (int i = 0; i < nsizes && rc == 0; i++)
        rc = time_size(sizes_mib[i], reps, touch_counts, ncounts, ready_ns);
    munmap((void *)ready_ns, PAGE_SIZE);
    return rc;
}

/* Up to `max` numbers of the space-separated list `s` into v; their count. */
static int parse_list(const char *s, unsigned long *v, int max)
{
    char *end;
    int n = 0;

    while (n < max) {
        unsigned long x = strtoul(s, &end, 10);

        if (end == s)
            break;
        v[n++] = x;
        s = end;
    }
    return n;
}

/* Sizes from AFORK_FORKTIME_MIB ("512 1024 2048 4096" by default), reps
 * from AFORK_FORKTIME_REPS (10), touched-table counts from
 * AFORK_FORKTIME_TOUCH (none by default). */
static int fork_time_test(void)
{
    const char *env = getenv("AFORK_FORKTIME_MIB"), *reps_env = getenv("AFORK_FORKTIME_REPS");
    const char *touch_env = getenv("AFORK_FORKTIME_TOUCH");
    unsigned long sizes[16], counts[MAX_TOUCH_COUNTS];
    int reps = reps_env && *reps_env ? atoi(reps_env) : 10;
    int n = parse_list(env && *env ? env : "512 1024 2048 4096", sizes, 16);
    int ncounts = touch_env ? parse_list(touch_env, counts, MAX_TOUCH_COUNTS) : 0;

    if (n == 0)
        return fail("AFORK_FORKTIME_MIB has no sizes");
    return run_fork_time(sizes, n, reps, counts, ncounts);
}

const struct test_case forktime_tests[] = {
    { "fork-time", "fork time vs resident size (0.5-4 GiB, 10 forks each); children check a sample", fork_time_test },
    { NULL, NULL, NULL },
};
