/* alloc_free.c -- which half of a re-collapse pass makes this VM stall:
 * taking fresh memory, or giving memory back?
 *
 * Beside read_stall.c (bench/README.md, "A save's stall apart from its
 * fork"): CYCLES times, write MB MiB of fresh 2 MiB-aligned huge pages at
 * RATE MB/s (what a pass at fork-thp-collapse-rate takes), hold them for
 * HOLD s, free them all at once, and wait HOLD s more. Prints when each
 * phase begins, unix seconds: "alloc", "held", "free", "freed", "idle".
 *
 *   cc -O2 -o alloc_free alloc_free.c && ./alloc_free 3 4096 256 20 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define HUGE (2UL << 20)

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static void mark(const char *what) {
    printf("%.3f %s\n", now_s(), what);
    fflush(stdout);
}

/* Write `bytes` of fresh huge pages at `rate` MB/s; returns the mapping. */
static char *take(size_t bytes, double rate) {
    char *raw = mmap(NULL, bytes + HUGE, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (raw == MAP_FAILED) return NULL;
    char *p = (char *)(((unsigned long)raw + HUGE - 1) & ~(HUGE - 1));
    madvise(p, bytes, MADV_HUGEPAGE);
    double start = now_s(), per_chunk = HUGE / (rate * 1e6);
    for (size_t off = 0; off < bytes; off += HUGE) {
        memset(p + off, 1, HUGE);
        double due = start + (off / HUGE + 1) * per_chunk - now_s();
        if (due > 0) usleep((useconds_t)(due * 1e6));
    }
    return raw;
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: %s CYCLES MB RATE_MB_S HOLD_S\n", argv[0]);
        return 2;
    }
    int cycles = atoi(argv[1]);
    size_t bytes = (size_t)atol(argv[2]) << 20;
    double rate = atof(argv[3]);
    unsigned hold = (unsigned)atoi(argv[4]);
    mark("idle");
    sleep(hold);
    for (int c = 0; c < cycles; c++) {
        mark("alloc");
        char *raw = take(bytes, rate);
        if (!raw) { perror("alloc_free"); return 1; }
        mark("held");
        sleep(hold);
        mark("free");
        munmap(raw, bytes + HUGE);
        mark("freed");
        sleep(hold);
    }
    mark("idle");
    return 0;
}
