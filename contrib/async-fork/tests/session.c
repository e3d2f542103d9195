/* session.c -- what one asynchronous fork costs the parent, seen from
 * user space: the /proc/vmstat counters of the tables a fork deferred and
 * who copied them, which madvise() advice and which VMA change makes the
 * parent copy tables first, and what an OOM-killed parent does with its
 * child's tables.
 */
#include "common.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* An anonymous region in 4 KiB pages (no THP), 2 MiB aligned, all resident. */
static uint64_t *resident_region(size_t size)
{
    uint64_t *base = map_anon(size, 1);

    madvise(base, size, MADV_NOHUGEPAGE);
    for (size_t p = 0; p < size / PAGE_SIZE; p++)
        base[p * WORDS_PER_PAGE] = p;
    return base;
}

/* The child: check a sample of the snapshot, exit 0 if it is right. */
static void check_child(const uint64_t *base, size_t size)
{
    for (size_t p = 0; p < size / PAGE_SIZE; p += 61)
        if (base[p * WORDS_PER_PAGE] != p)
            _exit(3);
    _exit(0);
}

/* ---- counters: every deferred table is copied once, by someone ---- */

static int counters_test(void)
{
    size_t size = scaled(128, 16) * MIB, tables = size / HUGE_SIZE;
    uint64_t *base = resident_region(size);
    struct counters before, after, d;
    int active = afork_active(), zero = open("/dev/zero", O_RDONLY);
    char desc[128];
    int status;
    pid_t pid;

    if (zero < 0)
        return fail("open /dev/zero: %s", strerror(errno));
    read_counters(&before);
    if (active >= 0 && before.found != NR_COUNTERS)
        return fail("/proc/vmstat has %d of the %d async_fork_* counters", before.found,
                    NR_COUNTERS);
    pid = fork_or_die();
    if (pid == 0)
        check_child(base, size);
    /* Right after fork: a user write, a kernel write (read() into the region)
     * and an madvise(MADV_DONTNEED) in the last tables (the child copies
     * upwards), then an mprotect() of the first half. */
    base[(size - PAGE_SIZE) / sizeof(uint64_t)] = size / PAGE_SIZE - 1;
    if (read(zero, (char *)base + size - HUGE_SIZE - PAGE_SIZE + 8, 8) != 8)
        return fail("read /dev/zero: %s", strerror(errno));
    base[(size - HUGE_SIZE - PAGE_SIZE) / sizeof(uint64_t)] = (size - HUGE_SIZE) / PAGE_SIZE - 1;
    madvise((char *)base + size - 3 * HUGE_SIZE, PAGE_SIZE, MADV_DONTNEED);
    mprotect(base, size / 2, PROT_READ);
    wait_child(pid, desc, sizeof(desc));
    status = 0;
    read_counters(&after);
    close(zero);
    if (strcmp(desc, "exit 0") != 0)
        status = fail("the child: %s", desc);
    counters_delta(&d, &before, &after);
    unmap(base, size);
    if (active < 0) {
        info("no asynchronous fork in this kernel: nothing to count");
        return status;
    }
    print_counters("this fork", &d);
    if (!active) {
        if (d.v[C_DEFERRED] || d.v[C_SESSIONS])
            return fail("async fork is off but %llu tables were deferred", d.v[C_DEFERRED]);
        return status;
    }
    if (d.v[C_SESSIONS] < 1 || d.v[C_DEFERRED] < tables - 2)
        return fail("%llu sessions, %llu tables deferred for a %zu-table region",
                    d.v[C_SESSIONS], d.v[C_DEFERRED], tables);
    if (d.v[C_CHILD] + parent_copies(&d) != d.v[C_DEFERRED])
        return fail("%llu tables deferred but %llu copied by the child + %llu by the parent",
                    d.v[C_DEFERRED], d.v[C_CHILD], parent_copies(&d));
    if (d.v[C_FAILED])
        return fail("%llu sessions failed", d.v[C_FAILED]);
    if (parent_copies(&d) && !d.v[C_PARENT_NS])
        return fail("the parent copied %llu tables in no time", parent_copies(&d));
    return status;
}

/* Parent and child on one CPU, the parent SCHED_FIFO and the child back to
 * SCHED_OTHER (SCHED_RESET_ON_FORK): the child runs, and copies, only once
 * the parent sleeps in wait_child(), so what the parent does right after
 * fork() runs while every table is still pending. (Pinned alone, a debug
 * kernel's slow system calls often let the child in first; on two CPUs a
 * fast child can finish its copy first.) Without the privilege the rounds
 * still race. The affinity before is kept in *saved. */
static void parent_first(cpu_set_t *saved)
{
    struct sched_param fifo = { .sched_priority = 1 };
    cpu_set_t one;

    sched_getaffinity(0, sizeof(*saved), saved);
    CPU_ZERO(&one);
    CPU_SET(0, &one);
    sched_setaffinity(0, sizeof(one), &one);
    if (sched_setscheduler(0, SCHED_FIFO | SCHED_RESET_ON_FORK, &fifo) != 0)
        info("SCHED_FIFO: %s: the child may copy first", strerror(errno));
}

/* Back to SCHED_OTHER and the affinity parent_first() kept. */
static void parent_first_end(const cpu_set_t *saved)
{
    struct sched_param other = { 0 };

    sched_setscheduler(0, SCHED_OTHER, &other);
    sched_setaffinity(0, sizeof(*saved), saved);
}

/* ---- madv-advice: advice that changes no page table copies nothing ---- */

#define MADV_ROUNDS 20

static int madv_advice_test(void)
{
    static const struct { int advice; const char *name; } harmless[] = {
        { MADV_WILLNEED, "WILLNEED" }, { MADV_NORMAL, "NORMAL" }, { MADV_COLD, "COLD" },
    };
    size_t size = scaled(512, 64) * MIB;
    uint64_t *base = resident_region(size);
    struct counters before, mid, after, d1, d2;
    int active = afork_active(), conclusive = 0, status = 0;
    char desc[128];
    cpu_set_t saved;

    parent_first(&saved);
    for (int round = 0; round < MADV_ROUNDS && !conclusive && !status; round++) {
        pid_t pid;

        read_counters(&before);
        pid = fork_or_die();
        if (pid == 0)
            check_child(base, size);
        for (size_t i = 0; i < sizeof(harmless) / sizeof(harmless[0]); i++)
            if (madvise(base, size, harmless[i].advice) != 0)
                status = fail("madvise(%s): %s", harmless[i].name, strerror(errno));
        read_counters(&mid);
        /* The control: DONTNEED of one page in the last table, which the
         * child copies last: still left to copy means the advice above ran
         * while tables were pending. */
        madvise((char *)base + size - PAGE_SIZE, PAGE_SIZE, MADV_DONTNEED);
        read_counters(&after);
        wait_child(pid, desc, sizeof(desc));
        if (strcmp(desc, "exit 0") != 0)
            status = fail("the child: %s", desc);
        base[(size - PAGE_SIZE) / sizeof(uint64_t)] = size / PAGE_SIZE - 1;
        if (active <= 0)
            break;
        counters_delta(&d1, &before, &mid);
        counters_delta(&d2, &mid, &after);
        print_counters("WILLNEED, NORMAL, COLD", &d1);
        conclusive = d2.v[C_MADVISE] > 0;
        if (inject_here())
            d1.v[C_MADVISE] = 1;
        if (d1.v[C_MADVISE] || d1.v[C_VMA])
            status = fail("madvise WILLNEED/NORMAL/COLD made the parent copy %llu tables "
                          "(madvise) and %llu (vma)", d1.v[C_MADVISE], d1.v[C_VMA]);
    }
    parent_first_end(&saved);
    unmap(base, size);
    if (active > 0 && !conclusive && !status)
        return fail("in %d rounds the child always copied the last table before the parent's "
                    "madvise(): the test proves nothing here", MADV_ROUNDS);
    return status;
}

/* ---- vma-change-range: a VMA change copies what it touches ---- */

/*
 * Right after fork, every table still pending (the parent SCHED_FIFO on
 * the child's CPU, as in madv-advice): an mprotect() of the region's last
 * 4 KiB splits the VMA inside its last table and changes one entry there,
 * so it may copy that one table and no other; then MADV_RANDOM and
 * MADV_NORMAL on the rest change its flags only, and must copy nothing.
 * The control, as in madv-advice: a DONTNEED in a table the child copies
 * late still copies it. The mprotect() is timed beside the fork.
 */
static int vma_change_range_test(void)
{
    size_t size = scaled(512, 64) * MIB, last = size - PAGE_SIZE;
    uint64_t *base = resident_region(size);
    struct counters before, mid, flags, after, d1, d2, d3;
    int active = afork_active(), conclusive = 0, status = 0;
    char *rest = (char *)base;
    uint64_t t0, fork_ns, mprotect_ns;
    cpu_set_t saved;
    char desc[128];

    parent_first(&saved);
    for (int round = 0; round < MADV_ROUNDS && !conclusive && !status; round++) {
        pid_t pid;

        read_counters(&before);
        t0 = now_ns();
        pid = fork_or_die();
        if (pid == 0)
            check_child(base, size);
        fork_ns = now_ns() - t0;
        t0 = now_ns();
        if (mprotect(rest + last, PAGE_SIZE, PROT_READ) != 0)
            status = fail("mprotect of the last page: %s", strerror(errno));
        mprotect_ns = now_ns() - t0;
        read_counters(&mid);
        if (madvise(rest, last, MADV_RANDOM) != 0 || madvise(rest, last, MADV_NORMAL) != 0)
            status = fail("madvise(MADV_RANDOM/NORMAL): %s", strerror(errno));
        read_counters(&flags);
        madvise(rest + size / 2, PAGE_SIZE, MADV_DONTNEED);
        read_counters(&after);
        wait_child(pid, desc, sizeof(desc));
        if (strcmp(desc, "exit 0") != 0)
            status = fail("the child: %s", desc);
        base[size / 2 / sizeof(uint64_t)] = size / 2 / PAGE_SIZE;
        if (mprotect(rest + last, PAGE_SIZE, PROT_READ | PROT_WRITE) != 0)
            status = fail("mprotect back: %s", strerror(errno));
        if (active <= 0)
            break;
        counters_delta(&d1, &before, &mid);
        counters_delta(&d2, &mid, &flags);
        counters_delta(&d3, &flags, &after);
        conclusive = d3.v[C_MADVISE] > 0;
        info("%zu MiB: fork %.2f ms, then a 4 KiB mprotect() at the end %.2f ms copying %llu "
             "table(s); MADV_RANDOM+NORMAL copying %llu", size / MIB, fork_ns / 1e6,
             mprotect_ns / 1e6, d1.v[C_VMA] + d1.v[C_ZAP], d2.v[C_VMA] + d2.v[C_MADVISE]);
        if (inject_here())
            d2.v[C_VMA] = 1;
        if (d1.v[C_VMA] + d1.v[C_ZAP] > 1)
            status = fail("a 4 KiB mprotect() at the end of the region made the parent copy "
                          "%llu tables: one at most (the table it splits)",
                          d1.v[C_VMA] + d1.v[C_ZAP]);
        else if (d2.v[C_VMA] || d2.v[C_MADVISE])
            status = fail("MADV_RANDOM and MADV_NORMAL (flags only) made the parent copy %llu "
                          "tables", d2.v[C_VMA] + d2.v[C_MADVISE]);
    }
    parent_first_end(&saved);
    unmap(base, size);
    if (active > 0 && !conclusive && !status)
        return fail("in %d rounds the child always copied before the parent's changes: the "
                    "test proves nothing here", MADV_ROUNDS);
    return status;
}

/* ---- oom-parent: an OOM-killed parent frees, it does not copy ---- */

#define CG_ROOT "/sys/fs/cgroup"

struct oom_shared {
    atomic_int stage;           /* 1 filled, 2 go, 3 forked */
};

/* In the cgroup: fill, fork, then wait for the test to lower memory.max
 * under the usage: the OOM killer takes this process (oom_score_adj 1000,
 * the biggest) while its child copies. */
static void oom_hog(struct oom_shared *sh, const char *procs, size_t size)
{
    char pid[24];
    uint64_t *base;
    cpu_set_t one;

    snprintf(pid, sizeof(pid), "%d", (int)getpid());
    if (write_file(procs, pid) != 0 || write_file("/proc/self/oom_score_adj", "1000") != 0)
        die_errno("join the cgroup / set oom_score_adj");
    base = resident_region(size);
    atomic_store(&sh->stage, 1);
    while (atomic_load(&sh->stage) < 2)
        usleep(1000);
    /* One CPU for both: the child copies only while the hog is off it,
     * which leaves the OOM a chance to come first. */
    CPU_ZERO(&one);
    CPU_SET(0, &one);
    sched_setaffinity(0, sizeof(one), &one);
    if (fork() == 0)
        check_child(base, size);
    atomic_store(&sh->stage, 3);
    for (;;)
        pause();
}

static int oom_parent_round(int round, int active, int *conclusive)
{
    size_t size = scaled(1024, 128) * MIB;
    struct oom_shared *sh = mmap(NULL, PAGE_SIZE, PROT_READ | PROT_WRITE,
                                 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    char dir[128], path[256], value[32], desc[128];
    struct counters before, after, d;
    int status = 0, st;
    long current;
    pid_t hog, other;

    if (sh == MAP_FAILED)
        return fail("mmap: %s", strerror(errno));
    snprintf(dir, sizeof(dir), CG_ROOT "/afork-oom-%d-%d", (int)getpid(), round);
    if (mkdir(dir, 0755) != 0)
        return fail("mkdir %s: %s", dir, strerror(errno));
    snprintf(path, sizeof(path), "%s/cgroup.procs", dir);
    read_counters(&before);
    hog = fork_or_die();
    if (hog == 0)
        oom_hog(sh, path, size);
    while (atomic_load(&sh->stage) < 1)
        usleep(1000);
    snprintf(path, sizeof(path), "%s/memory.swap.max", dir);
    write_file(path, "0");
    snprintf(path, sizeof(path), "%s/memory.current", dir);
    current = read_long_file(path);
    atomic_store(&sh->stage, 2);
    while (atomic_load(&sh->stage) < 3)
        ;
    /* Half the usage, no swap: the kernel OOM-kills in this write. */
    snprintf(path, sizeof(path), "%s/memory.max", dir);
    snprintf(value, sizeof(value), "%ld", current / 2);
    if (current <= 0 || write_file(path, value) != 0)
        status = fail("memory.max = %s: %s", value, strerror(errno));
    wait_child(hog, desc, sizeof(desc));
    if (status == 0 && strcmp(desc, "signal 9 (Killed)") != 0)
        status = fail("the hog was not OOM-killed: %s", desc);
    /* Its child, an orphan now, comes to us (we are a subreaper). */
    while ((other = waitpid(-1, &st, 0)) > 0)
        info("round %d: the hog's child ended with status 0x%x", round, st);
    read_counters(&after);
    if (rmdir(dir) != 0)
        info("rmdir %s: %s", dir, strerror(errno));
    munmap(sh, PAGE_SIZE);
    if (status || active <= 0) {
        *conclusive = 1;
        return status;
    }
    counters_delta(&d, &before, &after);
    print_counters("OOM-killed parent", &d);
    *conclusive = d.v[C_FAILED] > 0 || d.v[C_EXIT] > 0;
    if (inject_here())
        d.v[C_EXIT] = 1;
    /* Copying for the child at exit, even when the copy then fails for
     * want of memory, shows as parent time. */
    if (d.v[C_EXIT] || d.v[C_PARENT_NS] > 100000000ULL)
        return fail("the OOM-killed parent copied %llu tables for its child as it exited, "
                    "%.1f ms spent copying or waiting", d.v[C_EXIT], d.v[C_PARENT_NS] / 1e6);
    return 0;
}

static int oom_parent_test(void)
{
    int active = afork_active(), conclusive = 0, status = 0;

    if (!getenv("AFORK_GUEST"))
        return fail("this test changes cgroups: it runs only in the test guest (AFORK_GUEST=1)");
    if (access(CG_ROOT "/cgroup.controllers", R_OK) != 0)
        return fail("cgroup v2 is not mounted at " CG_ROOT);
    if (write_file(CG_ROOT "/cgroup.subtree_control", "+memory") != 0)
        return fail("enable the memory controller: %s", strerror(errno));
    if (prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0)
        return fail("PR_SET_CHILD_SUBREAPER: %s", strerror(errno));
    for (int round = 0; round < 3 && !conclusive && !status; round++)
        status = oom_parent_round(round, active, &conclusive);
    prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0);
    if (!status && !conclusive)
        return fail("in 3 rounds the child always finished before the OOM: the test proves "
                    "nothing here");
    return status;
}

const struct test_case session_tests[] = {
    { "counters", "async_fork_* in /proc/vmstat: every table a fork deferred is copied "
      "once, by the child or the parent (by cause)", counters_test },
    { "madv-advice", "madvise WILLNEED/NORMAL/COLD right after fork copies no table "
      "(counters), DONTNEED still does", madv_advice_test },
    { "vma-change-range", "a 4 KiB mprotect() at the end of a region right after fork copies "
      "one table at most, a flags-only change none (counters)", vma_change_range_test },
    { "oom-parent", "a 1 GiB process in a memory cgroup forks, then the limit drops under "
      "its usage: OOM-killed, it must not copy tables for its child as it exits (counters)",
      oom_parent_test },
    { NULL, NULL, NULL },
};
