/* collapse_stall.c -- do MADV_COLLAPSEs in one thread stall another thread's
 * page faults after a fork, and does cutting the mapping into several VMAs
 * take that away?
 *
 * MADV_COLLAPSE takes the mmap lock for writing and write-locks the VMA
 * while it copies the range (mm/khugepaged.c, collapse_huge_page()), and a
 * fault in a write-locked VMA falls back from the per-VMA lock to the mmap
 * lock, so it waits. fork-thp's collapse thread does this after each save
 * while the main thread still takes its first write fault on every page the
 * fork write-protected (docs/investigations/2026-11-24-fork-thp-vma-cut.md;
 * collapse_parts.sh runs its modes for
 * docs/investigations/2026-11-26-fork-thp-free-page-reporting.md).
 *
 * Fills SIZE MiB in huge pages, optionally cut into VMAs of SPLIT MiB (every
 * other piece gets MADV_RANDOM, which for anonymous memory changes no page
 * fault, only the VMA's flags, so the pieces cannot merge back), forks a child that lives
 * LIFE seconds while the main thread writes random 4 KiB pages (splitting
 * the huge pages it shares with the child), and after the child has exited
 * keeps writing for RUN seconds while (with "collapse") a thread collapses
 * each split range at RATE MB/s. With "populate" the thread first makes
 * every page writable again (MADV_POPULATE_WRITE: the write fault each page
 * still owes since the fork, taken by the thread under the mmap lock held
 * for reading) and then collapses: the main thread's writes no longer fault,
 * so they cannot wait behind a collapse. With "warm" the thread writes a
 * scratch huge page of its own and frees it before each collapse, so that
 * the collapse's allocation gets memory the host has backed again and
 * the copy under the lock runs at memory speed. With
 * "redo" the thread takes each range apart without MADV_COLLAPSE: it
 * frees it (MADV_DONTNEED: the 4 KiB copies, the old huge page's mapping,
 * a TLB flush) and populates it again (a new huge page, zeroed), i.e. the
 * frees, allocation, first touch and flush of a collapse without its copy
 * under the lock (the data is lost, which this probe does not mind). With
 * "alone" it collapses as "collapse" does while the main thread only
 * sleeps: no other thread of the process runs, so no other CPU holds the
 * range in its TLB and no fault waits. Every write is timed; it prints
 * the writes over 1, 5 and 10 ms, the longest, the collapses' count and
 * longest, and how long the populate took.
 *
 *   make bench-probes     (build/bench-probes/collapse_stall)
 *   ./collapse_stall SIZE SPLIT LIFE RUN RATE collapse|populate|warm|redo|alone|none [HOGS]
 *   ./collapse_stall 4096 0 5 10 256 collapse 2
 *   ./collapse_stall 4096 64 5 10 256 populate
 *   ./collapse_stall 4096 64 5 10 256 collapse 2
 *
 * HOGS busy threads compete for the CPUs, as the benchmark clients do. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "page_reporting.h"

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
#define HUGE (2UL << 20)

static char *mem;
static size_t size;
static long rate_mb;
static int populate_first, warm_first, redo_ranges;
static char *scratch;
static double populate_ms;
static volatile int stop_collapse, stop_hogs;
static long collapses, collapse_failures;
static double collapse_max_ms;

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static void die(const char *what) {
    perror(what);
    exit(1);
}

/* Collapse every 2 MiB range once, at rate_mb MB/s. */
static void *collapser(void *arg) {
    (void)arg;
    if (populate_first) {
        double t0 = now_ms();
        for (size_t off = 0; off < size && !stop_collapse; off += HUGE)
            if (madvise(mem + off, HUGE, MADV_POPULATE_WRITE)) die("MADV_POPULATE_WRITE");
        populate_ms = now_ms() - t0;
    }
    double start = now_ms();
    size_t done = 0;
    for (size_t off = 0; off < size && !stop_collapse; off += HUGE) {
        if (warm_first &&
            (madvise(scratch, HUGE, MADV_POPULATE_WRITE) || madvise(scratch, HUGE, MADV_DONTNEED)))
            die("warm");
        double t0 = now_ms();
        if (redo_ranges) {
            if (madvise(mem + off, HUGE, MADV_DONTNEED) || madvise(mem + off, HUGE, MADV_POPULATE_WRITE))
                die("redo");
            collapses++;
        } else if (madvise(mem + off, HUGE, MADV_COLLAPSE) == 0) collapses++;
        else collapse_failures++;
        double took = now_ms() - t0;
        if (took > collapse_max_ms) collapse_max_ms = took;
        done += HUGE;
        double due = start + done / 1048576.0 * 1000.0 / rate_mb;
        double ahead = due - now_ms();
        if (ahead > 0) usleep((useconds_t)(ahead * 1000));
    }
    return NULL;
}

static void *hog(void *arg) {
    (void)arg;
    volatile unsigned long x = 0;
    while (!stop_hogs) x++;
    return NULL;
}

/* Random 4 KiB writes for ms milliseconds; the slow ones counted. */
static void writeFor(double ms, int report) {
    long over1 = 0, over5 = 0, over10 = 0, writes = 0;
    double worst = 0, end = now_ms() + ms;
    uint64_t x = 88172645463325252ULL;
    size_t pages = size / 4096;
    while (now_ms() < end) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        double t0 = now_ms();
        mem[(x % pages) * 4096 + (x >> 40) % 4096] = (char)x;
        double took = now_ms() - t0;
        writes++;
        if (took > worst) worst = took;
        over1 += took > 1; over5 += took > 5; over10 += took > 10;
    }
    if (report)
        printf("writes %ld over_1ms %ld over_5ms %ld over_10ms %ld worst_ms %.2f\n",
               writes, over1, over5, over10, worst);
}

int main(int argc, char **argv) {
    if (argc < 7) {
        fprintf(stderr, "usage: %s SIZE_MB SPLIT_MB LIFE_S RUN_S RATE_MB collapse|populate|warm|redo|alone|none [HOGS]\n", argv[0]);
        return 2;
    }
    size = (size_t)atol(argv[1]) << 20;
    size_t split = (size_t)atol(argv[2]) << 20;
    double life = atof(argv[3]) * 1000, run = atof(argv[4]) * 1000;
    rate_mb = atol(argv[5]);
    populate_first = !strcmp(argv[6], "populate");
    warm_first = !strcmp(argv[6], "warm");
    redo_ranges = !strcmp(argv[6], "redo");
    int alone = !strcmp(argv[6], "alone");
    int collapse = populate_first || warm_first || redo_ranges || alone || !strcmp(argv[6], "collapse");
    int hogs = argc > 7 ? atoi(argv[7]) : 0;

    char *raw = mmap(NULL, size + HUGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) die("mmap");
    mem = (char *)(((uintptr_t)raw + HUGE - 1) & ~(HUGE - 1));
    if (madvise(mem, size, MADV_HUGEPAGE)) die("MADV_HUGEPAGE");
    if (split)
        for (size_t off = split; off < size; off += 2 * split)
            if (madvise(mem + off, off + split <= size ? split : size - off, MADV_RANDOM)) die("MADV_RANDOM");
    memset(mem, 1, size);
    char *sraw = mmap(NULL, 2 * HUGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (sraw == MAP_FAILED) die("mmap");
    scratch = (char *)(((uintptr_t)sraw + HUGE - 1) & ~(HUGE - 1));
    if (madvise(scratch, HUGE, MADV_HUGEPAGE)) die("MADV_HUGEPAGE");

    pthread_t hog_threads[16];
    for (int i = 0; i < hogs && i < 16; i++) pthread_create(&hog_threads[i], NULL, hog, NULL);

    pid_t child = fork();
    if (child < 0) die("fork");
    if (child == 0) {
        usleep((useconds_t)(life * 1000));
        _exit(0);
    }
    writeFor(life, 0);                     /* splits the shared huge pages */
    if (waitpid(child, NULL, 0) != child) die("waitpid");
    struct timespec exited;
    clock_gettime(CLOCK_REALTIME, &exited);
    printf("child_exited %ld.%09ld reporting_passes %ld\n", (long)exited.tv_sec, exited.tv_nsec,
           reportingPasses());
    fflush(stdout);

    pthread_t t;
    if (collapse) pthread_create(&t, NULL, collapser, NULL);
    if (alone) usleep((useconds_t)(run * 1000));
    else writeFor(run, 1);
    stop_collapse = 1;
    if (collapse) pthread_join(t, NULL);
    stop_hogs = 1;
    for (int i = 0; i < hogs && i < 16; i++) pthread_join(hog_threads[i], NULL);
    printf("reporting_passes %ld\n", reportingPasses());
    printf("size_mb %s split_mb %s collapse %d populate %d hogs %d collapses %ld failures %ld "
           "collapse_max_ms %.2f populate_ms %.1f\n", argv[1], argv[2], collapse, populate_first,
           hogs, collapses, collapse_failures, collapse_max_ms, populate_ms);
    return 0;
}
