/* cgroup.c -- children that clone3() creates in another cgroup than their
 * parent's (CLONE_INTO_CGROUP), as a container runtime or systemd would.
 *
 *   throttled-child  the child is created straight into a cgroup that may use
 *                    1 ms of CPU per 100 ms (cpu.max "1000 100000"), so the
 *                    scheduler stops it many times while it copies the page
 *                    tables fork() left to it, possibly in the middle of a
 *                    table. A parent thread keeps writing to the table the
 *                    child is at (the first one that neither the child nor
 *                    the parent has copied, from /proc/vmstat), a write
 *                    every 2 ms, each timed: a write that needs a table the
 *                    stopped child holds waits until the child runs again.
 *                    Checked: the child's snapshot is exact and every write
 *                    of the parent stays. Reported: the parent's longest
 *                    write and how many took longer than 10 ms, beside the
 *                    child's copy time, and the longest of the parent's
 *                    mmap()+munmap() pairs, made every millisecond until
 *                    the child runs. They take the mmap_lock for writing,
 *                    which the child must never hold while it is off the
 *                    CPU: more than one pair longer than half the period
 *                    of cpu.max fails (one may be the host's; a child
 *                    that keeps the lock across its stops makes a dozen).
 *                    The writes' waits are reported, not a verdict (a
 *                    timing under TCG is not a test).
 *   exit-at-limit    a parent in a memory cgroup at its limit is SIGKILLed
 *                    right after fork, before its child (kept off the CPU
 *                    by the parent's SCHED_FIFO, RT throttling and the
 *                    CPU's fair server off) has copied anything: its
 *                    exit must give the child its tables without charging
 *                    the cgroup past memory.max (memory.events "max" does
 *                    not move, no OOM kill) and the child's snapshot is
 *                    exact. A parent whose exit copied the tables would
 *                    need one page per table over the limit, with a fatal
 *                    signal pending.
 *   oom-reap-child   the OOM killer chooses a child that is still copying,
 *                    kept off the CPU (its parent SCHED_FIFO on it, RT
 *                    throttling and the CPU's fair server off for the
 *                    test), when memory.max drops
 *                    under the usage: the OOM reaper must reap it at
 *                    once, not retry until it gives up ("unable to reap"),
 *                    which leaves the OOM killer to choose a second victim
 *                    while the first one holds its memory. The session
 *                    fails, the child dies of SIGKILL, the parent's memory
 *                    stays.
 *   cpuset-mems      the memory nodes of the cpuset of a parent and its
 *                    child change (0 -> 1) while the child, held back by
 *                    cpu.max (1 ms per second), has most tables left: the
 *                    kernel rebinds the memory policy of each VMA of both
 *                    (mpol_rebind_mm() write-locks them all, under
 *                    cpuset's global locks) and migrates the pages to node
 *                    1 under the tables the child has not copied. The
 *                    change must neither copy a table for the child nor
 *                    wait for it (60 s at most), the pages must
 *                    move, and the child's snapshot and the parent's
 *                    memory stay exact. Needs two NUMA nodes (boot.sh
 *                    --numa 2) and CONFIG_CPUSETS.
 *   child-charge     the page tables of a child created in another memory
 *                    cgroup are charged where fork() charges them, to the
 *                    forking task's cgroup, also when the child copies them
 *                    itself: the child's cgroup must not gain the tables of
 *                    the region (memory.stat pagetables).
 *
 * They need cgroup v2 with the cpu (CONFIG_CFS_BANDWIDTH) and memory
 * controllers, and run only in the test guest (AFORK_GUEST=1: they change
 * cgroups).
 */
#include "common.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/sched.h>
#include <poll.h>
#include <sched.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SEED 0x7407
#define QUOTA "1000 100000"     /* cpu.max: 1 ms per 100 ms period */
#define PACE_NS 2000000ULL      /* the parent writes every 2 ms */
#define SLOW_NS 10000000ULL     /* a write longer than 10 ms is counted */
#define MARK_WORD 8             /* the word of a page the parent writes */
#define HELD_NS 50000000ULL     /* half the period: the child held a lock off the CPU */

struct chase {
    uint64_t *base;
    size_t tables;
    atomic_int go;              /* the fork is over: start */
    atomic_int child_started;
    /* results */
    unsigned long writes, slow;
    uint64_t longest_ns;
    size_t longest_table;
    uint64_t *written;          /* per table: the mark last written, 0 none */
};

static unsigned long long tables_done(unsigned long long copied0, unsigned long long fault0)
{
    return vmstat_counter("async_fork_child_copied") - copied0 +
           vmstat_counter("async_fork_copied_fault") - fault0;
}

/* Write to the first table not copied yet, every PACE_NS, until the child
 * runs in user space (it has copied everything by then). */
static void *chaser_main(void *arg)
{
    struct chase *c = arg;
    unsigned long long copied0 = vmstat_counter("async_fork_child_copied");
    unsigned long long fault0 = vmstat_counter("async_fork_copied_fault");
    double deadline = now_seconds() + 120 * knobs.scale + 30;
    const struct timespec pace = { 0, PACE_NS };
    uint64_t seq = 0, t0, took;
    size_t t;

    while (!atomic_load(&c->go))
        nanosleep(&pace, NULL);
    while (!atomic_load(&c->child_started) && now_seconds() < deadline) {
        t = tables_done(copied0, fault0);
        if (t >= c->tables)
            t = c->tables - 1;
        seq++;
        t0 = now_ns();
        c->base[t * (HUGE_SIZE / sizeof(uint64_t)) + MARK_WORD] = mark_value(1, seq);
        took = now_ns() - t0;
        c->written[t] = mark_value(1, seq);
        c->writes++;
        if (took > SLOW_NS)
            c->slow++;
        if (took > c->longest_ns) {
            c->longest_ns = took;
            c->longest_table = t;
        }
        nanosleep(&pace, NULL);
    }
    return NULL;
}

/* An mmap() and munmap() right after the fork: the parent's mmap_lock for
 * writing, which the child holds for reading while it copies a batch. */
static uint64_t timed_mmap(void)
{
    uint64_t t0 = now_ns();
    void *p = mmap(NULL, 64 * 1024, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

    if (p == MAP_FAILED)
        die_errno("mmap");
    munmap(p, 64 * 1024);
    return now_ns() - t0;
}

/* Until the child says it runs (a byte on @fd): an mmap() and munmap()
 * every millisecond, timed. Their count, how many took longer than HELD_NS
 * and the longest into *count, *held and *longest_ns; the read of the
 * byte's result returned. */
static int mmap_until_started(int fd, unsigned long *count, unsigned long *held,
                              uint64_t *longest_ns)
{
    struct pollfd p = { .fd = fd, .events = POLLIN };
    uint64_t ns;

    *count = 0;
    *held = 0;
    *longest_ns = 0;
    while (poll(&p, 1, 1) == 0) {
        ns = timed_mmap();
        (*count)++;
        *held += ns > HELD_NS;
        if (ns > *longest_ns)
            *longest_ns = ns;
    }
    return wait_byte(fd);
}

/* The child: say it runs, leave the throttled cgroup, check the snapshot. */
static void child_main(struct chase *c, int started_fd, int report_fd, uint64_t seed)
{
    struct report r = { 0 };
    size_t bad_page = 0;

    send_byte(started_fd);
    if (write_file(CG_ROOT "/cgroup.procs", "0") != 0)
        die_errno("leave the throttled cgroup");
    r.checked_pages = c->tables * (HUGE_SIZE / PAGE_SIZE);
    r.bad_words = check_pages(c->base, 0, r.checked_pages, seed, &bad_page);
    r.bad_page = bad_page;
    send_report(report_fd, &r);
    _exit(0);
}

/* Every mark the parent wrote is still there; the rest is the pattern. */
static int parent_intact(struct chase *c, uint64_t seed)
{
    size_t words = HUGE_SIZE / sizeof(uint64_t), bad_page = 0;

    for (size_t t = 0; t < c->tables; t++) {
        uint64_t *w = &c->base[t * words + MARK_WORD];

        if (c->written[t] && *w != c->written[t])
            return fail("table %zu: the parent's write 0x%llx is lost (0x%llx)", t,
                        (unsigned long long)c->written[t], (unsigned long long)*w);
        if (c->written[t])
            *w = pattern_base(seed, t * (HUGE_SIZE / PAGE_SIZE)) + MARK_WORD;
    }
    if (check_pages(c->base, 0, c->tables * (HUGE_SIZE / PAGE_SIZE), seed, &bad_page))
        return fail("the parent's memory is wrong at page %zu", bad_page);
    return 0;
}

static int throttled_child(void)
{
    struct chase c = { 0 };
    struct report r = { 0 };
    int started[2], rep[2], cg_fd = -1, rc = 0, status, active = afork_active();
    char dir[128], how[128];
    size_t size;
    uint64_t seed = SEED, fork_ns, started_ns, mmap_ns;
    unsigned long mmaps, held;
    pthread_t chaser;
    pid_t pid;

    if (!getenv("AFORK_GUEST"))
        return fail("this test changes cgroups: it runs only in the test guest (AFORK_GUEST=1)");
    snprintf(dir, sizeof(dir), CG_ROOT "/afork-throttle-%d", (int)getpid());
    if (set_up_cgroup(dir, "cpu", "cpu.max", QUOTA, &cg_fd) != 0)
        return -1;
    c.tables = scaled(128, 16);
    size = c.tables * HUGE_SIZE;
    c.base = map_anon(size, 1);
    c.written = calloc(c.tables, sizeof(*c.written));
    if (!c.written)
        die_errno("calloc");
    madvise(c.base, size, MADV_NOHUGEPAGE);
    fill_pages(c.base, 0, size / PAGE_SIZE, seed);
    pipe_or_die(started);
    pipe_or_die(rep);
    /* Before the fork: a thread's stack is an mmap(), which would wait. */
    if (pthread_create(&chaser, NULL, chaser_main, &c) != 0)
        die_errno("pthread_create");

    fork_ns = now_ns();
    pid = clone_into(cg_fd);
    if (pid < 0) {
        rc = fail("clone3(CLONE_INTO_CGROUP): %s", strerror(errno));
        atomic_store(&c.child_started, 1);
        atomic_store(&c.go, 1);
        pthread_join(chaser, NULL);
        goto out;
    }
    if (pid == 0)
        child_main(&c, started[1], rep[1], inject_here() ? seed + 1 : seed);
    fork_ns = now_ns() - fork_ns;
    started_ns = now_ns();
    atomic_store(&c.go, 1);
    close_end(started, 1);
    close_end(rep, 1);
    if (mmap_until_started(started[0], &mmaps, &held, &mmap_ns) != 0)
        rc = fail("the child died before it ran");
    started_ns = now_ns() - started_ns;
    atomic_store(&c.child_started, 1);
    pthread_join(chaser, NULL);
    if (rc == 0 && recv_report(rep[0], &r) != 0)
        rc = fail("no report from the child");
    status = wait_child(pid, how, sizeof(how));

    info("%zu tables of 2 MiB, child in a cgroup with cpu.max %s; fork %.2f ms, the child "
         "ran in user space %.0f ms after", c.tables, QUOTA, fork_ns / 1e6, started_ns / 1e6);
    info("parent: %lu writes to the table the child was at, longest %.2f ms (table %zu), "
         "%lu longer than %llu ms%s", c.writes, c.longest_ns / 1e6, c.longest_table, c.slow,
         SLOW_NS / 1000000, active > 0 ? "" : " (no asynchronous fork: nothing to wait for)");
    info("parent: %lu mmap()+munmap() pairs of 64 KiB while the child copied, longest %.2f ms, "
         "%lu longer than %llu ms", mmaps, mmap_ns / 1e6, held, HELD_NS / 1000000);
    if (rc == 0 && r.bad_words)
        rc = fail("the child's snapshot has %llu wrong words (first at page %llu)",
                  (unsigned long long)r.bad_words, (unsigned long long)r.bad_page);
    if (rc == 0 && !exited_ok(status))
        rc = fail("the child ended with %s", how);
    if (rc == 0)
        rc = parent_intact(&c, seed);
    if (rc == 0 && held > 1)
        rc = fail("%lu of the parent's mmap()+munmap() pairs waited longer than half the "
                  "period of cpu.max (%.2f ms the longest): the child kept a lock they need "
                  "while the scheduler kept it off the CPU", held, mmap_ns / 1e6);
    if (rc == 0 && active > 0 && c.writes == 0)
        rc = fail("the parent wrote nothing while the child copied: the test proves nothing");
out:
    close_pair(started);
    close_pair(rep);
    close(cg_fd);
    unmap(c.base, size);
    free(c.written);
    if (rmdir(dir) != 0)
        info("rmdir %s: %s", dir, strerror(errno));
    return rc;
}

/* ---- CPU 0 for a SCHED_FIFO parent alone ---- */

#define RT_RUNTIME "/proc/sys/kernel/sched_rt_runtime_us"
#define FAIR_SERVER "/sys/kernel/debug/sched/fair_server/cpu0/runtime"

/* What cpu0_fifo_only() changed, to put back. */
struct cpu0_saved {
    char rt_runtime[32];
    char fair_runtime[32];
};

/* A parent at SCHED_FIFO on CPU 0 keeps its child there off the CPU for as
 * long as it runs: no RT throttling meanwhile, and no fair server (6.12
 * and later), which would run the child once it had waited a while. */
static int cpu0_fifo_only(struct cpu0_saved *saved)
{
    long rt = read_long_file(RT_RUNTIME), fair;

    snprintf(saved->rt_runtime, sizeof(saved->rt_runtime), "%ld", rt != 0 ? rt : 950000);
    saved->fair_runtime[0] = 0;
    if (access(FAIR_SERVER, F_OK) != 0)
        mount("debugfs", "/sys/kernel/debug", "debugfs", 0, NULL);
    fair = read_long_file(FAIR_SERVER);
    if (write_file(RT_RUNTIME, "-1") != 0)
        return fail("write -1 to " RT_RUNTIME ": %s", strerror(errno));
    if (fair > 0) {
        snprintf(saved->fair_runtime, sizeof(saved->fair_runtime), "%ld", fair);
        if (write_file(FAIR_SERVER, "0") != 0)
            return fail("write 0 to " FAIR_SERVER ": %s", strerror(errno));
    }
    return 0;
}

static void cpu0_restore(const struct cpu0_saved *saved)
{
    if (saved->fair_runtime[0])
        write_file(FAIR_SERVER, saved->fair_runtime);
    write_file(RT_RUNTIME, saved->rt_runtime);
}

/* fork() from SCHED_FIFO on CPU 0: the child, SCHED_OTHER there, does not
 * run while this process does (with cpu0_fifo_only()). */
static pid_t fork_fifo_cpu0(void)
{
    struct sched_param fifo = { .sched_priority = 1 };
    pid_t child;

    if (sched_setscheduler(0, SCHED_FIFO | SCHED_RESET_ON_FORK, &fifo) != 0)
        _exit(3);
    child = fork();
    if (child < 0)
        _exit(4);
    return child;
}

/* ---- exit-at-limit ---- */

/* The grandchild: once told, check the snapshot and report it. */
static void limit_child(const uint64_t *base, size_t pages, uint64_t seed, int go_fd,
                        int rep_fd)
{
    struct report r = { 0 };
    size_t bad_page = 0;

    if (wait_byte(go_fd) != 0)
        _exit(2);
    r.bad_words = check_pages(base, 0, pages, seed, &bad_page);
    r.bad_page = bad_page;
    r.checked_pages = pages;
    send_report(rep_fd, &r);
    _exit(0);
}

/* The parent, in the memory cgroup: fill, fork, say so, spin at SCHED_FIFO
 * on CPU 0 (the child, SCHED_OTHER there, does not run) until killed. */
static void limit_parent(size_t tables, uint64_t seed, int go[2], int rep[2], int said_fd)
{
    size_t size = tables * HUGE_SIZE;
    uint64_t *base;
    pid_t child;

    pin_to_cpu(0);
    base = patterned_tables(tables, seed);
    child = fork_fifo_cpu0();
    if (child == 0)
        limit_child(base, size / PAGE_SIZE, inject_here() ? seed + 1 : seed, go[0], rep[1]);
    if (write(said_fd, &child, sizeof(child)) != (ssize_t)sizeof(child))
        _exit(5);
    for (;;)
        __asm__ volatile("" ::: "memory");
}

static int exit_at_limit(void)
{
    int go[2], rep[2], said[2], cg_fd = -1, rc = 0, status, active = afork_active();
    unsigned long long exits = vmstat_counter("async_fork_copied_exit");
    unsigned long long failed = vmstat_counter("async_fork_sessions_failed");
    size_t tables = scaled(256, 32);
    long long current, slack = (long long)(tables * PAGE_SIZE / 4), max0, max1, oom1;
    int splats0[NSPLATS], splats1[NSPLATS];
    char dir[128], path[256], value[32], how[128], last[256] = "";
    struct report r = { 0 };
    struct cpu0_saved cpu0;
    cpu_set_t saved;
    pid_t parent, child = -1;

    if (!getenv("AFORK_GUEST"))
        return fail("this test changes cgroups: it runs only in the test guest (AFORK_GUEST=1)");
    if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0)
        return fail("PR_SET_CHILD_SUBREAPER: %s", strerror(errno));
    snprintf(dir, sizeof(dir), CG_ROOT "/afork-exitlimit-%d", (int)getpid());
    if (set_up_cgroup(dir, "memory", NULL, NULL, &cg_fd) != 0)
        return -1;
    if (slack < 32 * 1024)
        slack = 32 * 1024;
    if (cpu0_fifo_only(&cpu0) != 0) {
        cpu0_restore(&cpu0);
        rmdir(dir);
        return -1;
    }
    count_splats(splats0, NULL, 0);
    pipe_or_die(go);
    pipe_or_die(rep);
    pipe_or_die(said);
    sched_getaffinity(0, sizeof(saved), &saved);
    pin_to_cpu(1);
    parent = clone_into(cg_fd);
    if (parent < 0) {
        rc = fail("clone3(CLONE_INTO_CGROUP): %s", strerror(errno));
        goto out;
    }
    if (parent == 0)
        limit_parent(tables, SEED, go, rep, said[1]);
    close_end(said, 1);
    if (read(said[0], &child, sizeof(child)) != (ssize_t)sizeof(child)) {
        wait_child(parent, how, sizeof(how));
        rc = fail("the parent ended with %s before it forked", how);
        goto out;
    }
    /* The limit: what the cgroup uses now, and less than a quarter of the
     * page tables that copies of the region's tables would take. */
    snprintf(path, sizeof(path), "%s/memory.current", dir);
    current = read_long_file(path);
    max0 = cgroup_event(dir, "max");
    snprintf(path, sizeof(path), "%s/memory.max", dir);
    snprintf(value, sizeof(value), "%lld", current + slack);
    if (current < 0 || max0 < 0 || write_file(path, value) != 0)
        rc = fail("set %s to %s: %s", path, value, strerror(errno));
    kill(parent, SIGKILL);
    wait_child(parent, how, sizeof(how));
    max1 = cgroup_event(dir, "max");
    oom1 = cgroup_event(dir, "oom_kill");
    write_file(path, "max");
    exits = vmstat_counter("async_fork_copied_exit") - exits;
    failed = vmstat_counter("async_fork_sessions_failed") - failed;
    send_byte(go[1]);
    close_end(rep, 1);
    if (rc == 0 && recv_report(rep[0], &r) != 0)
        rc = fail("no report from the child (its parent's exit gave it no snapshot)");
    status = wait_child(child, how, sizeof(how));
    count_splats(splats1, last, sizeof(last));
    info("%zu tables of 2 MiB; memory.max = memory.current + %lld KiB when the parent was "
         "killed; memory.events max %lld -> %lld, oom_kill %lld; %llu tables given at the "
         "exit, sessions failed %llu%s", tables, slack / 1024, max0, max1, oom1, exits, failed,
         active > 0 ? "" : " (no asynchronous fork)");
    if (rc == 0 && r.bad_words)
        rc = fail("the child's snapshot has %llu wrong words (first at page %llu)",
                  (unsigned long long)r.bad_words, (unsigned long long)r.bad_page);
    if (rc == 0 && !exited_ok(status))
        rc = fail("the child ended with %s", how);
    if (rc == 0)
        rc = check_splats(splats0, splats1, last);
    if (rc == 0 && active > 0 && failed)
        rc = fail("the session failed at the parent's exit: the child lost its snapshot");
    if (rc == 0 && active > 0 && max1 != max0)
        rc = fail("the parent's exit charged its cgroup past memory.max (%lld times): it "
                  "copied the tables it could have given", max1 - max0);
    if (rc == 0 && active > 0 && exits < tables / 2)
        rc = fail("%llu of %zu tables were left at the parent's exit: the child ran first, "
                  "the test proves nothing", exits, tables);
out:
    cpu0_restore(&cpu0);
    sched_setaffinity(0, sizeof(saved), &saved);
    close_pair(go);
    close_pair(rep);
    close_pair(said);
    close(cg_fd);
    if (rmdir(dir) != 0)
        info("rmdir %s: %s", dir, strerror(errno));
    return rc;
}

/* ---- oom-reap-child ---- */


/* The parent, in the memory cgroup: fill, fork, say so, then keep CPU 0 at
 * SCHED_FIFO (the child, SCHED_OTHER there, does not run) until told;
 * then check its own memory, report, exit. */
static void reap_parent(size_t tables, atomic_int *release, int said_fd, int rep_fd)
{
    struct sched_param other = { 0 };
    size_t size = tables * HUGE_SIZE, bad_page = 0;
    struct report r = { 0 };
    uint64_t *base;
    pid_t child;

    pin_to_cpu(0);
    base = patterned_tables(tables, SEED);
    if (write_file("/proc/self/oom_score_adj", "-1000") != 0)
        _exit(3);
    child = fork_fifo_cpu0();
    if (child == 0)
        for (;;)
            pause();
    if (write(said_fd, &child, sizeof(child)) != (ssize_t)sizeof(child))
        _exit(5);
    while (!atomic_load(release))
        ;
    sched_setscheduler(0, SCHED_OTHER, &other);
    r.bad_words = check_pages(base, 0, size / PAGE_SIZE, inject_here() ? SEED + 1 : SEED,
                              &bad_page);
    r.bad_page = bad_page;
    send_report(rep_fd, &r);
    _exit(0);
}

/* Count @fmt (with the child's pid) in the kernel log. */
static int log_count_pid(const char *fmt, pid_t pid)
{
    char what[96];

    snprintf(what, sizeof(what), fmt, (int)pid);
    return kernel_log_count(what, NULL, 0);
}

static int oom_reap_child(void)
{
    int said[2], rep[2], cg_fd = -1, rc = 0, status, active = afork_active();
    int gave_up0, gave_up = 0, reaped = 0, killed = 0;
    unsigned long long failed = vmstat_counter("async_fork_sessions_failed");
    size_t tables = scaled(256, 32);
    char dir[128], path[256], value[32], how[128];
    struct cpu0_saved cpu0;
    atomic_int *release = mmap(NULL, PAGE_SIZE, PROT_READ | PROT_WRITE,
                               MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    struct report r = { 0 };
    cpu_set_t saved;
    long current;
    pid_t parent, child = -1;

    if (!getenv("AFORK_GUEST"))
        return fail("this test changes cgroups: it runs only in the test guest (AFORK_GUEST=1)");
    if (release == MAP_FAILED)
        die_errno("mmap");
    if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0)
        return fail("PR_SET_CHILD_SUBREAPER: %s", strerror(errno));
    snprintf(dir, sizeof(dir), CG_ROOT "/afork-reap-%d", (int)getpid());
    if (set_up_cgroup(dir, "memory", "memory.swap.max", "0", &cg_fd) != 0)
        return -1;
    rc = cpu0_fifo_only(&cpu0);
    pipe_or_die(said);
    pipe_or_die(rep);
    sched_getaffinity(0, sizeof(saved), &saved);
    pin_to_cpu(1);
    parent = rc ? -1 : clone_into(cg_fd);
    if (parent < 0) {
        rc = rc ? rc : fail("clone3(CLONE_INTO_CGROUP): %s", strerror(errno));
        goto out;
    }
    if (parent == 0)
        reap_parent(tables, release, said[1], rep[1]);
    close_end(said, 1);
    close_end(rep, 1);
    if (read(said[0], &child, sizeof(child)) != (ssize_t)sizeof(child)) {
        wait_child(parent, how, sizeof(how));
        rc = fail("the parent ended with %s before it forked", how);
        goto out;
    }
    /* The child, still copying, is the OOM killer's choice. */
    snprintf(path, sizeof(path), "/proc/%d/oom_score_adj", (int)child);
    if (write_file(path, "1000") != 0)
        rc = fail("write %s: %s", path, strerror(errno));
    gave_up0 = log_count_pid("oom_reaper: unable to reap pid:%d ", child);
    /* Half the usage, no swap: the kernel OOM-kills in this write until no
     * task is left to kill (the parent's oom_score_adj is -1000); the
     * reaper gets the victim 2 s after the kill, and retries for 1 s. */
    snprintf(path, sizeof(path), "%s/memory.current", dir);
    current = read_long_file(path);
    snprintf(path, sizeof(path), "%s/memory.max", dir);
    snprintf(value, sizeof(value), "%ld", current / 2);
    if (rc == 0 && (current <= 0 || write_file(path, value) != 0))
        rc = fail("memory.max = %s: %s", value, strerror(errno));
    sleep(2);
    killed = log_count_pid("Killed process %d ", child);
    reaped = log_count_pid("oom_reaper: reaped process %d ", child);
    gave_up = log_count_pid("oom_reaper: unable to reap pid:%d ", child) - gave_up0;
    failed = vmstat_counter("async_fork_sessions_failed") - failed;
    write_file(path, "max");
    atomic_store(release, 1);
    if (recv_report(rep[0], &r) != 0 && rc == 0)
        rc = fail("no report from the parent");
    status = wait_child(parent, how, sizeof(how));
    if (rc == 0 && !exited_ok(status))
        rc = fail("the parent ended with %s", how);
    status = wait_child(child, how, sizeof(how));
    info("%zu tables of 2 MiB, the child kept off the CPU: OOM-killed %s, reaped %s, the "
         "reaper gave up %d times; sessions failed %llu; the child ended with %s%s", tables,
         killed > 0 ? "yes" : "no", reaped > 0 ? "yes" : "no", gave_up, failed, how,
         active > 0 ? "" : " (no asynchronous fork)");
    if (rc == 0 && r.bad_words)
        rc = fail("the parent's memory has %llu wrong words (first at page %llu)",
                  (unsigned long long)r.bad_words, (unsigned long long)r.bad_page);
    if (rc == 0 && !(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL))
        rc = fail("the child was not killed: it ended with %s", how);
    if (rc == 0 && killed <= 0)
        rc = fail("the OOM killer did not choose the child: the test proves nothing");
    if (rc == 0 && gave_up)
        rc = fail("the OOM reaper gave up on the child, still copying: the OOM killer may "
                  "choose a second victim while the first holds its memory");
    if (rc == 0 && reaped <= 0)
        rc = fail("the OOM reaper did not reap the child");
    if (rc == 0 && active > 0 && !failed)
        rc = fail("no session failed: the child had copied everything before the OOM, the "
                  "test proves nothing");
out:
    cpu0_restore(&cpu0);
    sched_setaffinity(0, sizeof(saved), &saved);
    close_pair(said);
    close_pair(rep);
    close(cg_fd);
    munmap(release, PAGE_SIZE);
    if (rmdir(dir) != 0)
        info("rmdir %s: %s", dir, strerror(errno));
    return rc;
}

/* ---- cpuset-mems ---- */

#define MEMS_WAIT_S 60              /* the cpuset change may take this long */
#define MEMS_QUOTA "1000 1000000"   /* cpu.max of the child: 1 ms per second */

struct mems_shared {
    atomic_int written;             /* the cpuset change returned */
    int write_rc;
    char top[128];
};

/* How many of @tables sampled pages (one per 2 MiB) are on node 1. */
static long pages_on_node1(const uint64_t *base, size_t tables)
{
    void *pages[1024];
    int status[1024];
    size_t n = tables < 1024 ? tables : 1024;
    long on1 = 0;

    for (size_t i = 0; i < n; i++)
        pages[i] = (char *)base + i * HUGE_SIZE;
    if (syscall(SYS_move_pages, 0, n, pages, NULL, status, 0) != 0)
        return -1;
    for (size_t i = 0; i < n; i++)
        on1 += status[i] == 1;
    return on1;
}

/* The parent, in top/parent: fill (on node 0), fork the child into the
 * throttled top/child, say so, and once told report its memory and where
 * it is. The child reports its snapshot. */
static void mems_parent(size_t tables, int child_cg, int said_fd, int go_fd, int rep_fd)
{
    size_t size = tables * HUGE_SIZE, bad_page = 0;
    struct report r = { 0 };
    uint64_t *base;
    pid_t child;

    base = patterned_tables(tables, SEED);
    child = clone_into(child_cg);
    if (child < 0)
        _exit(4);
    if (child == 0) {
        r.bad_words = check_pages(base, 0, size / PAGE_SIZE, inject_here() ? SEED + 1 : SEED,
                                  &bad_page);
        r.bad_page = bad_page;
        r.checked_pages = 1;        /* from the child */
        send_report(rep_fd, &r);
        _exit(0);
    }
    if (write(said_fd, &child, sizeof(child)) != (ssize_t)sizeof(child) || wait_byte(go_fd))
        _exit(5);
    r.bad_words = check_pages(base, 0, size / PAGE_SIZE, SEED, &bad_page);
    r.bad_page = bad_page;
    r.checked_pages = 2;            /* from the parent */
    r.extra = pages_on_node1(base, tables);
    send_report(rep_fd, &r);
    _exit(0);
}

/* The change of the cpuset's nodes, in a thread the test can wait for. */
static void *mems_writer(void *arg)
{
    struct mems_shared *sh = arg;
    char path[192];

    snprintf(path, sizeof(path), "%s/cpuset.mems", sh->top);
    sh->write_rc = write_file(path, "1") != 0 ? errno : 0;
    atomic_store(&sh->written, 1);
    return NULL;
}

/* top/ (cpuset.mems 0; cpu for its children), top/parent, top/child with
 * cpu.max MEMS_QUOTA; fds of the two leaves. */
static int mems_cgroups(const char *top, char *parent, char *child, size_t len, int *parent_fd,
                        int *child_fd)
{
    char path[256];
    int top_fd = -1;

    if (set_up_cgroup(top, "cpuset", "cpuset.mems", "0", &top_fd) != 0)
        return -1;
    close(top_fd);
    snprintf(path, sizeof(path), "%s/cgroup.subtree_control", top);
    if (write_file(CG_ROOT "/cgroup.subtree_control", "+cpu") != 0 || write_file(path, "+cpu"))
        return fail("enable cpu under %s: %s", top, strerror(errno));
    snprintf(parent, len, "%s/parent", top);
    snprintf(child, len, "%s/child", top);
    if (set_up_cgroup(parent, "cpu", NULL, NULL, parent_fd) != 0 ||
        set_up_cgroup(child, "cpu", "cpu.max", MEMS_QUOTA, child_fd) != 0)
        return -1;
    return 0;
}

static int cpuset_mems(void)
{
    struct mems_shared *sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE,
                                  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    int said[2], go[2], rep[2], parent_fd = -1, child_fd = -1, rc = 0, status, returned;
    int active = afork_active();
    struct counters before, after, d;
    size_t tables = scaled(256, 32), sampled = tables < 1024 ? tables : 1024;
    struct report rp = { 0 }, rch = { 0 }, r;
    char parent_dir[192] = "", child_dir[192] = "", how[128];
    double t0, waited;
    pthread_t writer;
    pid_t parent, child = -1;

    if (!getenv("AFORK_GUEST"))
        return fail("this test changes cgroups: it runs only in the test guest (AFORK_GUEST=1)");
    if (sh == MAP_FAILED)
        die_errno("mmap");
    if (access("/sys/devices/system/node/node1", F_OK) != 0)
        return fail("one NUMA node: the test needs two (boot.sh --numa 2)");
    if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0)
        return fail("PR_SET_CHILD_SUBREAPER: %s", strerror(errno));
    snprintf(sh->top, sizeof(sh->top), CG_ROOT "/afork-mems-%d", (int)getpid());
    if (mems_cgroups(sh->top, parent_dir, child_dir, sizeof(parent_dir), &parent_fd,
                     &child_fd) != 0) {
        rc = -1;
        goto out;
    }
    pipe_or_die(said);
    pipe_or_die(go);
    pipe_or_die(rep);
    parent = clone_into(parent_fd);
    if (parent < 0) {
        rc = fail("clone3(CLONE_INTO_CGROUP): %s", strerror(errno));
        goto out_pipes;
    }
    if (parent == 0)
        mems_parent(tables, child_fd, said[1], go[0], rep[1]);
    close_end(said, 1);
    close_end(go, 0);
    close_end(rep, 1);
    if (read(said[0], &child, sizeof(child)) != (ssize_t)sizeof(child)) {
        wait_child(parent, how, sizeof(how));
        rc = fail("the parent ended with %s before it forked", how);
        goto out_pipes;
    }
    read_counters(&before);
    t0 = now_seconds();
    if (pthread_create(&writer, NULL, mems_writer, sh) != 0)
        die_errno("pthread_create");
    while (!atomic_load(&sh->written) && now_seconds() - t0 < MEMS_WAIT_S)
        usleep(10000);
    returned = atomic_load(&sh->written);
    waited = now_seconds() - t0;
    read_counters(&after);
    counters_delta(&d, &before, &after);
    /* Let the child run: a change that waits for it ends now. */
    snprintf(how, sizeof(how), "%s/cpu.max", child_dir);
    write_file(how, "max");
    pthread_join(writer, NULL);
    send_byte(go[1]);
    /* Two reports, the child's and the parent's, in either order. */
    for (int i = 0; i < 2 && recv_report(rep[0], &r) == 0; i++) {
        if (r.checked_pages == 1)
            rch = r;
        else
            rp = r;
    }
    if (rch.checked_pages != 1 || rp.checked_pages != 2)
        rc = fail("no report from the %s", rp.checked_pages != 2 ? "parent" : "child");
    status = wait_child(parent, how, sizeof(how));
    if (rc == 0 && !exited_ok(status))
        rc = fail("the parent ended with %s", how);
    status = wait_child(child, how, sizeof(how));
    info("%zu tables of 2 MiB; cpuset.mems 0 -> 1 %s after %.2f s, the child held back by "
         "cpu.max %s: tables copied by the parent meanwhile %llu, by the child %llu; %ld of "
         "%zu sampled pages on node 1 after%s", tables, returned ? "returned" : "still waiting",
         waited, MEMS_QUOTA, parent_copies(&d), d.v[C_CHILD], (long)rp.extra, sampled,
         active > 0 ? "" : " (no asynchronous fork)");
    if (rc == 0 && !returned)
        rc = fail("the cpuset change had not returned after %d s, the child held back by "
                  "cpu.max: it waited for the child's copy", MEMS_WAIT_S);
    if (rc == 0 && sh->write_rc)
        rc = fail("write 1 to %s/cpuset.mems: %s", sh->top, strerror(sh->write_rc));
    if (rc == 0 && rch.bad_words)
        rc = fail("the child's snapshot has %llu wrong words (first at page %llu)",
                  (unsigned long long)rch.bad_words, (unsigned long long)rch.bad_page);
    if (rc == 0 && rp.bad_words)
        rc = fail("the parent's memory has %llu wrong words (first at page %llu)",
                  (unsigned long long)rp.bad_words, (unsigned long long)rp.bad_page);
    if (rc == 0 && !exited_ok(status))
        rc = fail("the child ended with %s", how);
    if (rc == 0 && active > 0 && parent_copies(&d))
        rc = fail("the cpuset change made the parent copy %llu tables for the child: "
                  "mpol_rebind_mm() or the migration copied what they do not change",
                  parent_copies(&d));
    if (rc == 0 && rp.extra < (long)sampled / 2)
        rc = fail("%ld of %zu sampled pages on node 1: the pages did not move, the test "
                  "proves nothing", (long)rp.extra, sampled);
    if (rc == 0 && active > 0 && d.v[C_CHILD] >= tables / 2)
        rc = fail("the child copied %llu of %zu tables before the change was over: the test "
                  "proves nothing", d.v[C_CHILD], tables);
out_pipes:
    close_pair(said);
    close_pair(go);
    close_pair(rep);
out:
    close(parent_fd);
    close(child_fd);
    if (parent_dir[0])
        rmdir(parent_dir);
    if (child_dir[0])
        rmdir(child_dir);
    if (rmdir(sh->top) != 0)
        info("rmdir %s: %s", sh->top, strerror(errno));
    munmap(sh, sizeof(*sh));
    return rc;
}

/* The child of child-charge: run (its tables are copied by then), wait. */
static void charge_child(int started_fd, int go_fd)
{
    send_byte(started_fd);
    wait_byte(go_fd);
    _exit(0);
}

static int child_charge(void)
{
    int started[2], go[2], cg_fd = -1, rc = 0, status, active = afork_active();
    unsigned long long deferred = vmstat_counter("async_fork_deferred");
    unsigned long long copied = vmstat_counter("async_fork_child_copied");
    long long before, after, tables_bytes;
    char dir[128], how[128];
    size_t tables = scaled(256, 32), size = tables * HUGE_SIZE;
    uint64_t *base;
    pid_t pid;

    if (!getenv("AFORK_GUEST"))
        return fail("this test changes cgroups: it runs only in the test guest (AFORK_GUEST=1)");
    snprintf(dir, sizeof(dir), CG_ROOT "/afork-charge-%d", (int)getpid());
    if (set_up_cgroup(dir, "memory", NULL, NULL, &cg_fd) != 0)
        return -1;
    base = map_anon(size, 1);
    madvise(base, size, MADV_NOHUGEPAGE);
    fill_pages(base, 0, size / PAGE_SIZE, SEED);
    pipe_or_die(started);
    pipe_or_die(go);
    before = cgroup_pagetables(dir);
    pid = clone_into(cg_fd);
    if (pid < 0) {
        rc = fail("clone3(CLONE_INTO_CGROUP): %s", strerror(errno));
        goto out;
    }
    if (pid == 0)
        charge_child(started[1], go[0]);
    close_end(started, 1);
    close_end(go, 0);
    if (wait_byte(started[0]) != 0)
        rc = fail("the child died before it ran");
    after = cgroup_pagetables(dir);
    send_byte(go[1]);
    status = wait_child(pid, how, sizeof(how));
    deferred = vmstat_counter("async_fork_deferred") - deferred;
    copied = vmstat_counter("async_fork_child_copied") - copied;
    /* What the region's tables weigh: one 4 KiB page per 2 MiB. */
    tables_bytes = (long long)tables * PAGE_SIZE;
    info("%zu tables of 2 MiB; the child's cgroup: pagetables %lld -> %lld bytes (the "
         "region's tables: %lld); %llu tables deferred, %llu copied by the child%s", tables,
         before, after, tables_bytes, deferred, copied,
         active > 0 ? "" : " (no asynchronous fork)");
    if (inject_here())
        tables_bytes = 0;
    if (rc == 0 && (before < 0 || after < 0))
        rc = fail("no pagetables line in %s/memory.stat", dir);
    if (rc == 0 && after - before >= tables_bytes / 2)
        rc = fail("the child's cgroup was charged %lld bytes of page tables, the region's "
                  "tables weigh %lld: the copies are charged to the child's cgroup, not the "
                  "forking task's as fork() does", after - before, tables_bytes);
    if (rc == 0 && !exited_ok(status))
        rc = fail("the child ended with %s", how);
    if (rc == 0 && active > 0 && copied < tables / 2)
        rc = fail("the child copied %llu of %zu tables itself: the test proves nothing",
                  copied, tables);
out:
    close_pair(started);
    close_pair(go);
    close(cg_fd);
    unmap(base, size);
    if (rmdir(dir) != 0)
        info("rmdir %s: %s", dir, strerror(errno));
    return rc;
}

const struct test_case cgroup_tests[] = {
    { "throttled-child", "a child stopped by cpu.max mid-copy: exact snapshot, parent's wait",
      throttled_child },
    { "exit-at-limit", "a parent SIGKILLed at its memory cgroup's limit before its child "
      "copied: tables given at the exit, no charge past memory.max", exit_at_limit },
    { "oom-reap-child", "the OOM killer chooses a child still copying, kept off the CPU: "
      "reaped at once, the reaper does not give up", oom_reap_child },
    { "cpuset-mems", "a parent's and its child's cpuset move to node 1 while the child, held "
      "back by cpu.max, copies: nothing copied or waited for, pages migrated, snapshot exact",
      cpuset_mems },
    { "child-charge", "a child created in another memory cgroup: its tables charged like fork's",
      child_charge },
    { 0 },
};
