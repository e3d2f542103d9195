/* report_copy.c -- is a 2 MiB copy slow while the VM's free page reporting
 * runs, and does it matter whether the destination is backed by the host?
 *
 * The re-collapse's slowest MADV_COLLAPSE calls, many times the usual one,
 * start when the guest's page_reporting worker does
 * (docs/investigations/2026-11-26-fork-thp-collapse-warm-up.md). This
 * probe separates the two explanations: every INTERVAL ms it copies 2 MiB
 * (a) into a destination it keeps (backed since the first copy) and
 * (b) into a fresh huge page (mmap, MADV_HUGEPAGE, copy, munmap: the guest
 * allocates it, the host may not back it), and (c) into a fresh huge page
 * right after writing and freeing another (the allocator's per-CPU list
 * should hand the just-written page back; (b) and (c) take turns at going
 * first), and times the copies and the scratch page's first write. A child process
 * meanwhile maps, writes and frees CHURN MiB every 4 s (0: none; run it
 * beside a save instead, whose child's exit frees gigabytes at once). Each copy is
 * tagged with the reporting passes counted so far
 * (/sys/module/page_reporting/parameters/passes, on kernels that have it).
 *
 * Prints one line per copy over SLOW_MS, then per kind the median, the
 * 99th percentile and the max, and how many copies were over SLOW_MS.
 *
 *   make bench-probes && build/bench-probes/report_copy 60 2 2048 5 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "page_reporting.h"

#define HUGE (2UL << 20)
#define MAX_COPIES 200000

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

/* A 2 MiB-aligned 2 MiB mapping advised MADV_HUGEPAGE (the rest unmapped). */
static char *hugeMap(void) {
    char *raw = mmap(NULL, 2 * HUGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) {
        perror("mmap");
        exit(1);
    }
    char *p = (char *)(((uintptr_t)raw + HUGE - 1) & ~(HUGE - 1));
    if (p > raw) munmap(raw, p - raw);
    munmap(p + HUGE, raw + HUGE - p);
    madvise(p, HUGE, MADV_HUGEPAGE);
    return p;
}

static void churn(size_t mb) {
    size_t size = mb << 20;
    for (;;) {
        char *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) _exit(1);
        for (size_t i = 0; i < size; i += 4096) p[i] = 1;
        munmap(p, size);
        sleep(4);
    }
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void report(const char *kind, double *v, int n, double slow) {
    int over = 0;
    for (int i = 0; i < n; i++) over += v[i] > slow;
    qsort(v, n, sizeof(double), cmp);
    printf("%-6s copies %d  median %.3f ms  p99 %.3f  max %.1f  over %.0f ms: %d\n", kind, n,
           v[n / 2], v[(int)(n * 0.99)], v[n - 1], slow, over);
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: %s SECONDS INTERVAL_MS CHURN_MB SLOW_MS\n", argv[0]);
        return 2;
    }
    double run = atof(argv[1]) * 1e3, interval = atof(argv[2]), slow = atof(argv[4]);
    pid_t child = 0;
    if (atol(argv[3]) > 0 && (child = fork()) == 0) churn((size_t)atol(argv[3]));
    long passes_start = reportingPasses();
    char *src = hugeMap(), *kept = hugeMap();
    memset(src, 7, HUGE);
    memset(kept, 1, HUGE);
    static double t_kept[MAX_COPIES], t_fresh[MAX_COPIES], t_scratch[MAX_COPIES], t_warm[MAX_COPIES];
    int n = 0;
    double start = now_ms();
    while (now_ms() - start < run && n < MAX_COPIES) {
        long p0 = reportingPasses();
        double t0 = now_ms();
        memcpy(kept, src, HUGE);
        t_kept[n] = now_ms() - t0;
        /* (b) and (c) in turns, so that neither always comes first. */
        for (int k = 0; k < 2; k++) {
            if ((k + n) % 2 == 0) {
                char *fresh = hugeMap();
                double t = now_ms();
                memcpy(fresh, src, HUGE);
                t_fresh[n] = now_ms() - t;
                munmap(fresh, HUGE);
            } else {
                /* (c): write a huge page and free it, then copy into a new
                 * one, which the allocator should take from this CPU's list. */
                char *scratch = hugeMap();
                double t = now_ms();
                memset(scratch, 0, HUGE);
                t_scratch[n] = now_ms() - t;
                munmap(scratch, HUGE);
                char *warm = hugeMap();
                t = now_ms();
                memcpy(warm, src, HUGE);
                t_warm[n] = now_ms() - t;
                munmap(warm, HUGE);
            }
        }
        if (t_kept[n] > slow || t_fresh[n] > slow || t_warm[n] > slow || t_scratch[n] > slow)
            printf("t=%.3f s  kept %.2f ms  fresh %.2f ms  scratch %.2f ms  warm %.2f ms  %s  "
                   "reporting passes %ld..%ld\n", (t0 - start) / 1e3, t_kept[n], t_fresh[n],
                   t_scratch[n], t_warm[n], n % 2 ? "warm first" : "fresh first", p0, reportingPasses());
        n++;
        double next = start + n * interval;
        while (now_ms() < next) usleep(200);
    }
    if (child > 0) {
        kill(child, SIGKILL);
        waitpid(child, NULL, 0);
    }
    printf("reporting passes during the run: %ld\n", reportingPasses() - passes_start);
    report("kept", t_kept, n, slow);
    report("fresh", t_fresh, n, slow);
    report("scratch", t_scratch, n, slow);
    report("warm", t_warm, n, slow);
    return 0;
}
