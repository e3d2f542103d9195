/* first_touch.c -- what does the first write to a fresh 2 MiB huge page
 * cost on this machine, against the same write once the memory has been
 * used before?
 *
 * In a VM whose host discards the guest's free memory (virtio-balloon free
 * page reporting, see bench/README.md), a page the guest allocates may no
 * longer be backed on the host: the first write to it then faults in the
 * host, which the guest sees as a slow instruction, not as steal.
 * MADV_COLLAPSE copies into a freshly allocated huge page while it holds
 * the mmap lock for writing, so that cost lands inside the lock.
 *
 * Maps SIZE MiB (MADV_HUGEPAGE), writes each 2 MiB once and times it, unmaps,
 * and does it again: the second pass mostly gets the memory the first one
 * freed. Prints per pass the mean time per 2 MiB and how many took over 1,
 * 5 and 10 ms.
 *
 *   cc -O2 -o first_touch first_touch.c && ./first_touch 8192 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#define HUGE (2UL << 20)

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static void onePass(int pass, size_t size) {
    char *raw = mmap(NULL, size + HUGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) {
        perror("mmap");
        exit(1);
    }
    char *mem = (char *)(((uintptr_t)raw + HUGE - 1) & ~(HUGE - 1));
    if (madvise(mem, size, MADV_HUGEPAGE)) perror("MADV_HUGEPAGE");
    size_t chunks = size / HUGE;
    long over1 = 0, over5 = 0, over10 = 0;
    double total = 0, worst = 0;
    for (size_t i = 0; i < chunks; i++) {
        double t0 = now_ms();
        memset(mem + i * HUGE, 1, HUGE);
        double took = now_ms() - t0;
        total += took;
        if (took > worst) worst = took;
        over1 += took > 1; over5 += took > 5; over10 += took > 10;
    }
    printf("pass %d: %zu chunks total %.0f ms mean %.3f ms over1 %ld over5 %ld over10 %ld max %.2f\n",
           pass, chunks, total, total / chunks, over1, over5, over10, worst);
    munmap(raw, size + HUGE);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s SIZE_MB\n", argv[0]);
        return 2;
    }
    size_t size = (size_t)atol(argv[1]) << 20;
    for (int pass = 0; pass < 2; pass++) onePass(pass, size);
    return 0;
}
