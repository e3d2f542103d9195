/* cow_after_child.c -- does the parent of a fork still fault and copy on
 * write after its child has exited? Fills SIZE MiB (THP-backed with "thp",
 * 4 KiB pages with "4k"), forks, writes once per 2 MiB while the child lives
 * (which splits every huge PMD the two share), lets the child exit, then
 * writes once per 4 KiB page and prints the minor faults, the pages the
 * system allocated meanwhile (/proc/vmstat pgalloc_normal, system-wide: run
 * it on an idle machine) and the time. A kernel that reuses the parent's
 * pages after the child shows about one fault per page and few allocations;
 * one that copies them (Linux 6.12's wp_can_reuse_anon_folio() never reuses
 * a page of a large folio) allocates one page per fault.
 *
 *   cc -O2 -o cow_after_child cow_after_child.c
 *   ./cow_after_child thp 1024; ./cow_after_child 4k 1024
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static long vmstat(const char *key) {
    FILE *f = fopen("/proc/vmstat", "r"); char k[128]; long v, r = -1;
    if (!f) { perror("/proc/vmstat"); exit(1); }
    while (fscanf(f, "%127s %ld", k, &v) == 2) if (!strcmp(k, key)) r = v;
    fclose(f); return r;
}
static long minflt(void) { struct rusage u; getrusage(RUSAGE_SELF, &u); return u.ru_minflt; }
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }
static long smaps_kb(const char *key) {
    FILE *f = fopen("/proc/self/smaps_rollup", "r"); char line[256]; long v = -1; size_t n = strlen(key);
    if (!f) return -1;
    while (fgets(line, sizeof line, f)) if (!strncmp(line, key, n)) v = atol(line + n);
    fclose(f); return v;
}

int main(int argc, char **argv) {
    int thp = argc > 1 && !strcmp(argv[1], "thp");
    size_t size = (size_t)(argc > 2 ? atol(argv[2]) : 1024) << 20, huge = 2 << 20, page = 4096;
    char *raw = mmap(NULL, size + huge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) { perror("mmap"); return 1; }
    char *p = (char *)(((unsigned long)raw + huge - 1) & ~(huge - 1));
    madvise(p, size, thp ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
    for (size_t i = 0; i < size; i += page) p[i] = 1;
    printf("%s: AnonHugePages %ld kB of %zu MiB\n", thp ? "thp" : "4k", smaps_kb("AnonHugePages:"), size >> 20);
    int pfd[2];
    if (pipe(pfd) != 0) { perror("pipe"); return 1; }
    pid_t c = fork();
    if (c < 0) { perror("fork"); return 1; }
    if (c == 0) { char b; _exit(read(pfd[0], &b, 1) == 1 ? 0 : 1); }
    /* While the child lives: one write per 2 MiB (splits each huge PMD). */
    for (size_t i = 0; i < size; i += huge) p[i] = 2;
    if (write(pfd[1], "x", 1) != 1) { perror("write"); return 1; }
    waitpid(c, NULL, 0);
    printf("  child gone; AnonHugePages %ld kB\n", smaps_kb("AnonHugePages:"));
    long a0 = vmstat("pgalloc_normal"), f0 = minflt(); double t0 = now();
    for (size_t i = 0; i < size; i += page) p[i] = 3;   /* after the child */
    double t1 = now(); long a1 = vmstat("pgalloc_normal"), f1 = minflt();
    printf("  after the child, one write per 4 KiB page: %ld faults, %ld pages allocated (system-wide), %.1f ms\n",
           f1 - f0, a1 - a0, (t1 - t0) * 1e3);
    return 0;
}
