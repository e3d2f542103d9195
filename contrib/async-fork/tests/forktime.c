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
 *
 * With AFORK_FORKTIME_VMAS (a list of counts, e.g. "0 32 64 96") each fork
 * is made with that many more small mappings in the process, as a real
 * server has (thread stacks with their guard pages, libraries' data,
 * allocator extents): pairs of one written anonymous page and one
 * PROT_NONE page, so none merge (an odd count is rounded down). The slope
 * of fork time over the count is what one mapping costs fork()
 * (AFORK-FORKVMAS lines).
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
#define MAX_COUNTS 16    /* of each list: AFORK_FORKTIME_TOUCH, _VMAS */
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

/* The extra small mappings of AFORK_FORKTIME_VMAS, made before a fork:
 * `count` pairs from `base`. */
static struct {
    char *base;
    size_t count;
} extra;

static int extra_map(size_t mappings)
{
    size_t count = mappings / 2;

    extra.count = count;
    extra.base = NULL;
    if (count == 0)
        return 0;
    extra.base = mmap(NULL, 2 * count * PAGE_SIZE, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (extra.base == MAP_FAILED)
        return fail("mmap of %zu extra mappings: %s", count, strerror(errno));
    for (size_t i = 0; i < count; i++) {
        extra.base[2 * i * PAGE_SIZE] = 1;
        if (mprotect(extra.base + (2 * i + 1) * PAGE_SIZE, PAGE_SIZE, PROT_NONE) != 0)
            return fail("mprotect of an extra mapping: %s", strerror(errno));
    }
    return 0;
}

static void extra_unmap(void)
{
    if (extra.base)
        munmap(extra.base, 2 * extra.count * PAGE_SIZE);
    extra.base = NULL;
}

enum variant { TOUCH_TABLES, EXTRA_VMAS };

/* Forks with counts[c] tables touched inside fork() or extra mappings,
 * interleaved: every repetition runs each count once, in rotated order. */
static int time_variants(enum variant what, uint64_t *base, size_t npages, unsigned long mib,
                         int reps, const unsigned long *counts, int ncounts,
                         volatile uint64_t *ready_ns)
{
    static double fork_us[MAX_COUNTS][MAX_REPS], ready_us[MAX_COUNTS][MAX_REPS];
    struct fork_sample s = { 0 };
    int rc = 0;

    uintptr_t first = ((uintptr_t)base + HUGE_SIZE - 1) & ~(HUGE_SIZE - 1);

    touch.base = (uint64_t *)first;
    touch.ntables = ((uintptr_t)base + npages * PAGE_SIZE - first) / HUGE_SIZE;
    for (int i = 0; i < reps && rc == 0; i++) {
        for (int k = 0; k < ncounts && rc == 0; k++) {
            int c = (i + k) % ncounts;

            if (what == TOUCH_TABLES)
                touch.count = counts[c] < touch.ntables ? counts[c] : touch.ntables;
            else
                rc = extra_map(counts[c]);
            if (rc == 0)
                rc = time_one_fork(base, npages, ready_ns, &s);
            touch.count = 0;
            extra_unmap();
            fork_us[c][i] = s.fork_us;
            ready_us[c][i] = s.ready_us;
        }
    }
    for (int c = 0; c < ncounts && rc == 0; c++)
        printf("AFORK-%s mib=%lu %s=%lu reps=%d fork_median_us=%.0f fork_max_us=%.0f "
               "ready_median_us=%.0f ready_max_us=%.0f\n",
               what == TOUCH_TABLES ? "FORKTOUCH" : "FORKVMAS", mib,
               what == TOUCH_TABLES ? "touch" : "vmas", counts[c], reps,
               median_of(fork_us[c], reps), max_of(fork_us[c], reps),
               median_of(ready_us[c], reps), max_of(ready_us[c], reps));
    fflush(stdout);
    return rc;
}

/* The counts of AFORK_FORKTIME_TOUCH and AFORK_FORKTIME_VMAS. */
struct fork_variants {
    unsigned long touch[MAX_COUNTS], vmas[MAX_COUNTS];
    int ntouch, nvmas;
};

static int time_size(unsigned long mib, int reps, const struct fork_variants *v,
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
    if (rc == 0 && v->ntouch > 0)
        rc = time_variants(TOUCH_TABLES, base, npages, mib, reps, v->touch, v->ntouch, ready_ns);
    if (rc == 0 && v->nvmas > 0)
        rc = time_variants(EXTRA_VMAS, base, npages, mib, reps, v->vmas, v->nvmas, ready_ns);
    unmap(base, npages * PAGE_SIZE);
    return rc;
}

static int run_fork_time(const unsigned long *sizes_mib, int nsizes, int reps,
                         const struct fork_variants *v)
{
    volatile uint64_t *ready_ns = mmap(NULL, PAGE_SIZE, PROT_READ | PROT_WRITE,
                                       MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    int rc = 0;

    if (ready_ns == MAP_FAILED)
        die_errno("mmap shared page");
    if (reps < 1 || reps > MAX_REPS)
        return fail("repetitions must be 1..%d, not %d", MAX_REPS, reps);
    if (v->ntouch > 0 && pthread_atfork(NULL, touch_tables_in_parent, NULL) != 0)
        return fail("pthread_atfork failed");
    for (int i = 0; i < nsizes && rc == 0; i++)
        rc = time_size(sizes_mib[i], reps, v, ready_ns);
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
 * AFORK_FORKTIME_TOUCH and extra-mapping counts from AFORK_FORKTIME_VMAS
 * (none by default). */
static int fork_time_test(void)
{
    const char *env = getenv("AFORK_FORKTIME_MIB"), *reps_env = getenv("AFORK_FORKTIME_REPS");
    const char *touch_env = getenv("AFORK_FORKTIME_TOUCH"), *vmas_env = getenv("AFORK_FORKTIME_VMAS");
    struct fork_variants v = { .ntouch = 0 };
    unsigned long sizes[16];
    int reps = reps_env && *reps_env ? atoi(reps_env) : 10;
    int n = parse_list(env && *env ? env : "512 1024 2048 4096", sizes, 16);

    if (n == 0)
        return fail("AFORK_FORKTIME_MIB has no sizes");
    if (touch_env)
        v.ntouch = parse_list(touch_env, v.touch, MAX_COUNTS);
    if (vmas_env)
        v.nvmas = parse_list(vmas_env, v.vmas, MAX_COUNTS);
    return run_fork_time(sizes, n, reps, &v);
}

const struct test_case forktime_tests[] = {
    { "fork-time", "fork time vs resident size (0.5-4 GiB, 10 forks each); children check a sample", fork_time_test },
    { NULL, NULL, NULL },
};
