/* read_stall.c -- do plain reads of long-written memory stall while a
 * re-collapse pass runs?
 *
 * After a fork-thp save, during the re-collapse, the server's main thread
 * can stall on a CPU in user space, in ordinary dict lookups, with no single
 * slow command (docs/investigations/2026-11-26-fork-thp-free-page-reporting.md).
 * A guest cannot see the host's work:
 * a second-level page fault, or a vCPU held while the host invalidates its
 * mappings, is user time to the guest, not steal. This probe asks whether
 * ordinary memory reads stall meanwhile, outside Redis: it writes MB MiB of
 * its own (4 KiB pages, written once at start, never freed), then chases a
 * random cycle through it, one dependent 8-byte read after another, and
 * every 4096 reads takes the time and its own schedstat (time on a CPU,
 * time waiting for one). A stretch of 4096 reads normally takes under
 * 1 ms; each one over SLOW_MS is printed as: unix time (s), wall ms, ms
 * waiting for a CPU, ms not waiting for one (on a CPU or blocked), and ms
 * on a CPU by the kernel's count (blocked: a page fault that sleeps, e.g.
 * on a page being migrated). Runs for SECONDS.
 *
 *   make bench-probes && build/bench-probes/read_stall 600 512 2 > out.txt */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define STRIDE 4096

static double now_ms(clockid_t clock) {
    struct timespec t;
    clock_gettime(clock, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

/* The thread's time on a CPU and waiting on a run queue, ms (schedstat). */
static void schedstat_ms(int fd, double *on_cpu, double *waited) {
    char buf[128];
    unsigned long long run = 0, wait = 0;
    ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
    if (n > 0) {
        buf[n] = '\0';
        sscanf(buf, "%llu %llu", &run, &wait);
    }
    *on_cpu = run / 1e6;
    *waited = wait / 1e6;
}

/* A random cycle over all slots (Sattolo), one slot per 64-byte line. */
static uint64_t *make_cycle(size_t slots) {
    uint64_t *next = mmap(NULL, slots * 64, PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    size_t *order = malloc(slots * sizeof(*order));
    if (next == MAP_FAILED || !order) return NULL;
    madvise(next, slots * 64, MADV_NOHUGEPAGE);
    for (size_t i = 0; i < slots; i++) order[i] = i;
    srand(1);
    for (size_t i = slots - 1; i > 0; i--) {
        size_t j = ((size_t)rand() * RAND_MAX + rand()) % i;
        size_t t = order[i]; order[i] = order[j]; order[j] = t;
    }
    for (size_t i = 0; i < slots; i++)
        next[order[i] * 8] = order[(i + 1) % slots] * 8;
    free(order);
    return next;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s SECONDS MB SLOW_MS\n", argv[0]);
        return 2;
    }
    double seconds = atof(argv[1]), slow = atof(argv[3]);
    size_t slots = (size_t)atol(argv[2]) * 1024 * 1024 / 64;
    char path[64];
    snprintf(path, sizeof(path), "/proc/self/task/%ld/schedstat", (long)syscall(SYS_gettid));
    int fd = open(path, O_RDONLY);
    uint64_t *next = make_cycle(slots);
    if (fd < 0 || !next) { perror("read_stall"); return 1; }
    double end = now_ms(CLOCK_MONOTONIC) + seconds * 1e3;
    double t0 = now_ms(CLOCK_MONOTONIC), r0, d0, worst = 0;
    schedstat_ms(fd, &r0, &d0);
    unsigned long stretches = 0, over = 0;
    uint64_t at = 0;
    while (t0 < end) {
        for (int i = 0; i < STRIDE; i++) at = next[at];
        double t1 = now_ms(CLOCK_MONOTONIC), r1, d1;
        schedstat_ms(fd, &r1, &d1);
        double wall = t1 - t0, waited = d1 - d0;
        stretches++;
        if (wall - waited > worst) worst = wall - waited;
        if (wall > slow) {
            over++;
            printf("%.3f %.2f %.2f %.2f %.2f\n", now_ms(CLOCK_REALTIME) / 1e3, wall, waited,
                   wall - waited, r1 - r0);
            fflush(stdout);
        }
        t0 = t1;
        r0 = r1;
        d0 = d1;
    }
    fprintf(stderr, "read_stall: %lu stretches of %d reads, %lu over %.1f ms, "
            "longest not waiting for a CPU %.2f ms (end %lu)\n", stretches, STRIDE, over, slow, worst,
            (unsigned long)at);
    return 0;
}
