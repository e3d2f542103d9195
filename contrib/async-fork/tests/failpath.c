/* failpath.c -- what happens to memory access after a session went wrong
 * or a task waiting on a session was killed.
 *
 *   ro-thp-force-write  after a failed session, a FOLL_FORCE write (pwrite
 *                       to /proc/self/mem, as a debugger sets a breakpoint)
 *                       into a read-only huge page completes
 *   killed-waiter       a task writing to a child's /proc/PID/mem waits
 *                       for the child's copy; SIGKILLed there, it must not
 *                       go on and fault a page into the child
 *   fork-fails-late     fork() fails after dup_mmap() left the page tables
 *                       to a child that never comes to be (no pid left:
 *                       kernel.pid_max lowered to its minimum): the fork
 *                       returns EAGAIN, and the parent's tables are
 *                       writable and its memory intact afterwards (guest
 *                       only)
 */
#include "common.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>


/* --- ro-thp-force-write ------------------------------------------------ */

/* Shared between the test and the process in the memory cgroup. */
struct thp_shared {
    atomic_int stage;           /* see thp_member() */
    int fork_errno;
    int child_status;
    unsigned long long deferred, failed;    /* of the fork under the limit */
    long huge_kb;
    int write_state;            /* 0 never ended, 1 wrote, -1 error */
    int write_errno;
    double write_secs;
    int memory_ok;
};

struct force_write {
    void *addr;
    uint64_t value;
    atomic_int state;           /* 0 running, 1 wrote, -1 error */
    int err;
};

/* pwrite() to /proc/self/mem: a FOLL_FORCE | FOLL_WRITE GUP of our page. */
static void *force_write_thread(void *arg)
{
    struct force_write *w = arg;
    int fd = open("/proc/self/mem", O_RDWR);
    ssize_t n = -1;

    if (fd >= 0) {
        n = pwrite(fd, &w->value, sizeof(w->value), (off_t)(uintptr_t)w->addr);
        w->err = n < 0 ? errno : 0;
        close(fd);
    } else {
        w->err = errno;
    }
    atomic_store(&w->state, n == (ssize_t)sizeof(w->value) ? 1 : -1);
    return NULL;
}

static void thp_wait_stage(struct thp_shared *s, int stage)
{
    while (atomic_load(&s->stage) < stage)
        usleep(1000);
}

/* The first word of each page holds the page's index. */
static int busy_ok(const uint64_t *busy, size_t npages)
{
    for (size_t p = 0; p < npages; p++)
        if (busy[p * WORDS_PER_PAGE] != p)
            return 0;
    return 1;
}

/*
 * In the cgroup: fork with no limit, then, before the child can run, the
 * test sets memory.max just above the usage: the child's copy of the page
 * tables cannot fit, its session fails. Then the write. Stages: 1 filled,
 * 2 go, 3 forked, 4 limit set, 5 child reaped, 6 limit lifted, 7 done.
 */
static void thp_member(struct thp_shared *s, const char *procs, size_t mib, double limit)
{
    struct sched_param fifo = { .sched_priority = 1 }, other = { 0 };
    size_t npages = mib * MIB / PAGE_SIZE;
    struct force_write w = { 0 };
    unsigned long long deferred, failed;
    uint64_t *busy, *huge;
    pthread_t thread;
    char pid[24];
    double t0;
    pid_t child;

    snprintf(pid, sizeof(pid), "%d", (int)getpid());
    if (write_file(procs, pid) != 0 || write_file("/proc/self/oom_score_adj", "-1000") != 0)
        die_errno("join the cgroup / set oom_score_adj");
    busy = map_anon(npages * PAGE_SIZE, 1);
    madvise(busy, npages * PAGE_SIZE, MADV_NOHUGEPAGE);
    for (size_t p = 0; p < npages; p++)
        busy[p * WORDS_PER_PAGE] = p;
    atomic_store(&s->stage, 1);
    thp_wait_stage(s, 2);
    deferred = vmstat_counter("async_fork_deferred");
    failed = vmstat_counter("async_fork_sessions_failed");
    /* The child on our CPU, SCHED_OTHER under our SCHED_FIFO: it starts
     * (and copies) only once we wait for it. */
    pin_to_cpu(0);
    sched_setscheduler(0, SCHED_FIFO | SCHED_RESET_ON_FORK, &fifo);
    child = fork();
    s->fork_errno = child < 0 ? errno : 0;
    if (child == 0)
        _exit(busy_ok(busy, npages) ? 0 : 1);
    atomic_store(&s->stage, 3);
    t0 = now_seconds();
    while (atomic_load(&s->stage) < 4 && now_seconds() - t0 < 0.8)
        ;       /* spin: a sleep would let the child run */
    sched_setscheduler(0, SCHED_OTHER, &other);
    if (child > 0)
        while (waitpid(child, &s->child_status, 0) < 0 && errno == EINTR)
            ;
    s->deferred = vmstat_counter("async_fork_deferred") - deferred;
    s->failed = vmstat_counter("async_fork_sessions_failed") - failed;
    atomic_store(&s->stage, 5);
    thp_wait_stage(s, 6);

    /* No fork from here on: that would clean up after the failed session. */
    huge = map_anon(HUGE_SIZE, 1);
    if (madvise(huge, HUGE_SIZE, MADV_HUGEPAGE) != 0)
        die_errno("madvise(MADV_HUGEPAGE)");
    fill_pages(huge, 0, HUGE_SIZE / PAGE_SIZE, 0x3e2);
    s->huge_kb = smaps_kb(huge, HUGE_SIZE, "AnonHugePages");
    if (mprotect(huge, HUGE_SIZE, PROT_READ) != 0)
        die_errno("mprotect(PROT_READ)");
    w.addr = huge + 5 * WORDS_PER_PAGE + 7;
    w.value = mark_value(0x3e, 1);
    t0 = now_seconds();
    if (pthread_create(&thread, NULL, force_write_thread, &w) != 0)
        die_errno("pthread_create");
    while (!atomic_load(&w.state) && now_seconds() - t0 < limit)
        usleep(10000);
    s->write_secs = now_seconds() - t0;
    s->write_state = atomic_load(&w.state);
    s->write_errno = w.err;
    if (s->write_state == 1) {
        /* The written word reads back; everything else is as filled. */
        s->memory_ok = *(volatile uint64_t *)w.addr == w.value && busy_ok(busy, npages) &&
                       check_pages(huge, 0, 5, 0x3e2, NULL) == 0 &&
                       check_pages(huge + 6 * WORDS_PER_PAGE, 6, HUGE_SIZE / PAGE_SIZE - 6,
                                   0x3e2, NULL) == 0;
    }
    atomic_store(&s->stage, 7);
    if (s->write_state == 0)
        for (;;)
            pause();    /* the test kills us: SIGKILL ends the kernel's loop */
    _exit(0);
}

/* Wait until the member reaches @stage; -1 if it ended first (*status). */
static int member_reached(struct thp_shared *s, int stage, pid_t member, int *status)
{
    while (atomic_load(&s->stage) < stage) {
        if (waitpid(member, status, WNOHANG) == member)
            return -1;
        usleep(1000);
    }
    return 0;
}

static int cg_limit(const char *dir, const char *value)
{
    char path[256];

    snprintf(path, sizeof(path), "%s/memory.max", dir);
    if (write_file(path, value) != 0)
        return fail("%s = %s: %s", path, value, strerror(errno));
    return 0;
}

static int ro_thp_force_write(void)
{
    size_t mib = scaled(512, 256);
    double limit = 20;
    int active = afork_active(), rc = 0, status = 0, ended = 1;
    char dir[128], path[256], value[32], how[96] = "";
    struct thp_shared *s;
    cpu_set_t saved;
    long current;
    pid_t member;

    if (!getenv("AFORK_GUEST"))
        return fail("this test changes cgroups: it runs only in the test guest (AFORK_GUEST=1)");
    if (sysconf(_SC_NPROCESSORS_ONLN) < 2)
        return fail("needs 2 CPUs: the test sets the limit beside the forking process");
    s = mmap(NULL, PAGE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (s == MAP_FAILED)
        return fail("mmap: %s", strerror(errno));
    snprintf(dir, sizeof(dir), CG_ROOT "/afork-rothp-%d", (int)getpid());
    if (access(CG_ROOT "/cgroup.controllers", R_OK) != 0)
        return fail("cgroup v2 is not mounted at " CG_ROOT);
    if (write_file(CG_ROOT "/cgroup.subtree_control", "+memory") != 0)
        return fail("enable the memory controller: %s", strerror(errno));
    if (mkdir(dir, 0755) != 0)
        return fail("mkdir %s: %s", dir, strerror(errno));
    snprintf(path, sizeof(path), "%s/cgroup.procs", dir);
    member = fork_or_die();
    if (member == 0)
        thp_member(s, path, mib, limit);
    sched_getaffinity(0, sizeof(saved), &saved);
    if (member_reached(s, 1, member, &status) == 0) {
        snprintf(path, sizeof(path), "%s/memory.swap.max", dir);
        if (write_file(path, "0") != 0)
            rc = fail("memory.swap.max: %s", strerror(errno));
        pin_to_cpu(1);      /* the member spins on CPU 0 */
        atomic_store(&s->stage, 2);
    }
    if (atomic_load(&s->stage) == 2 && member_reached(s, 3, member, &status) == 0) {
        /* Just above the usage, no swap: the child's copy cannot fit. */
        snprintf(path, sizeof(path), "%s/memory.current", dir);
        current = read_long_file(path);
        snprintf(value, sizeof(value), "%ld", current + 64 * 1024);
        if (rc == 0 && (current <= 0 || cg_limit(dir, value) != 0))
            rc = fail("could not limit the cgroup to %s bytes", value);
        atomic_store(&s->stage, 4);
    }
    sched_setaffinity(0, sizeof(saved), &saved);
    if (atomic_load(&s->stage) == 4 && member_reached(s, 5, member, &status) == 0) {
        if (cg_limit(dir, "max") != 0 && rc == 0)
            rc = -1;
        atomic_store(&s->stage, 6);
        ended = member_reached(s, 7, member, &status) != 0;
    }
    if (!ended) {
        if (s->write_state == 0)
            kill(member, SIGKILL);
        status = wait_child(member, how, sizeof(how));
    } else {
        snprintf(how, sizeof(how), "wait status 0x%x at stage %d", status,
                 atomic_load(&s->stage));
        status = -1;
    }

    info("fork under the limit: %s, child status 0x%x; %llu tables deferred, %llu sessions "
         "failed", s->fork_errno ? strerror(s->fork_errno) : "forked", s->child_status,
         s->deferred, s->failed);
    info("huge page: %ld kB; pwrite to /proc/self/mem: %s after %.2f s", s->huge_kb,
         s->write_state == 1 ? "done" : s->write_state ? strerror(s->write_errno) :
         "NOT DONE", s->write_secs);
    if (inject_here())
        s->memory_ok = 0;
    if (rc == 0 && s->write_state == 0)
        rc = fail("a pwrite of 8 bytes to /proc/self/mem (FOLL_FORCE) into a read-only "
                  "huge page did not end within %.0f s after a failed session", limit);
    if (rc == 0 && s->write_state < 0)
        rc = fail("pwrite to /proc/self/mem: %s", strerror(s->write_errno));
    if (rc == 0 && !exited_ok(status))
        rc = fail("the process in the cgroup ended with %s", how);
    if (rc == 0 && !s->memory_ok)
        rc = fail("after the write the memory is wrong (the written word or another)");
    if (rc == 0 && s->huge_kb < (long)(HUGE_SIZE / 1024))
        rc = fail("the region got %ld kB of huge pages, not %lu: THP not in use, the test "
                  "proves nothing", s->huge_kb, HUGE_SIZE / 1024);
    if (rc == 0 && active > 0 && (!s->failed || !s->deferred))
        rc = fail("the fork under the limit did not fail a session that had deferred tables "
                  "(%llu failed, %llu deferred): the test proves nothing", s->failed,
                  s->deferred);
    if (rmdir(dir) != 0)
        info("rmdir %s: %s", dir, strerror(errno));
    munmap(s, PAGE_SIZE);
    return rc;
}

/* --- killed-waiter ----------------------------------------------------- */

/* The state letter of /proc/PID/stat ('?' if unreadable). */
static char task_state(pid_t pid)
{
    char path[64], buf[512], *p;
    ssize_t n;
    int fd;

    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    fd = open(path, O_RDONLY);
    if (fd < 0)
        return '?';
    n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return '?';
    buf[n] = 0;
    p = strrchr(buf, ')');
    return p && p[1] == ' ' ? p[2] : '?';
}

/* What the writer writes, and where. */
struct waiter_cmd {
    pid_t child;
    uint64_t *addr;
    uint64_t value;
};

/* The writer, on CPU 1: pwrite() into the child's memory through
 * /proc/CHILD/mem, the value the word already holds (so a write that
 * happens changes nothing). */
static void waiter_main(int cmd_fd)
{
    struct waiter_cmd c;
    char path[64];
    int fd;

    pin_to_cpu(1);
    if (read(cmd_fd, &c, sizeof(c)) != (ssize_t)sizeof(c))
        _exit(2);
    snprintf(path, sizeof(path), "/proc/%d/mem", (int)c.child);
    fd = open(path, O_RDWR);
    if (fd < 0)
        _exit(3);
    if (pwrite(fd, &c.value, sizeof(c.value), (off_t)(uintptr_t)c.addr) !=
        (ssize_t)sizeof(c.value))
        _exit(4);
    _exit(0);
}

static int killed_waiter(void)
{
    size_t size = scaled(256, 64) * MIB, npages = size / PAGE_SIZE;
    struct sched_param fifo = { .sched_priority = 1 }, other = { 0 };
    int active = afork_active(), rc = 0, waited = 0, reaped = 0, cmd[2];
    int warn_before, warn_after, st;
    char desc[128], last[256] = "";
    struct waiter_cmd wc;
    uint64_t *base, *last_word;
    cpu_set_t saved;
    pid_t waiter, child;
    double t0;
    char state = '?';

    if (sysconf(_SC_NPROCESSORS_ONLN) < 2)
        return fail("needs 2 CPUs: the writer runs beside the parent");
    warn_before = kernel_log_count("WARNING:", NULL, 0);
    pipe_or_die(cmd);
    /* The writer is forked first: its mm does not hold the region. */
    waiter = fork_or_die();
    if (waiter == 0) {
        close(cmd[1]);
        waiter_main(cmd[0]);
    }
    close(cmd[0]);
    base = map_anon(size, 1);
    madvise(base, size, MADV_NOHUGEPAGE);
    for (size_t p = 0; p < npages; p++)
        base[p * WORDS_PER_PAGE] = p;
    last_word = base + (npages - 1) * WORDS_PER_PAGE;

    /* Parent and child on CPU 0, the parent SCHED_FIFO and the child
     * SCHED_OTHER: the child cannot start its copy while the parent spins,
     * and it copies upwards, the writer's page (the last) last. */
    sched_getaffinity(0, sizeof(saved), &saved);
    pin_to_cpu(0);
    if (sched_setscheduler(0, SCHED_FIFO | SCHED_RESET_ON_FORK, &fifo) != 0)
        info("SCHED_FIFO: %s: the child may copy first", strerror(errno));
    child = fork_or_die();
    if (child == 0) {
        for (size_t p = 0; p < npages; p++)
            if (base[p * WORDS_PER_PAGE] != p)
                _exit(3);
        _exit(inject_here() ? 3 : 0);
    }
    wc.child = child;
    wc.addr = last_word;
    wc.value = npages - 1;
    if (write(cmd[1], &wc, sizeof(wc)) != (ssize_t)sizeof(wc))
        rc = fail("write to the writer: %s", strerror(errno));
    /* Spin (no sleep: that would let the child run) until the writer sleeps
     * in the kernel, waiting for the child, or is done. Under 0.8 s: RT
     * throttling would let the child in after 0.95 s. */
    t0 = now_seconds();
    while (rc == 0 && now_seconds() - t0 < 0.8) {
        state = task_state(waiter);
        if (state == 'D') {
            waited = 1;
            break;
        }
        if (state == 'Z' || state == '?')
            break;
    }
    if (waited) {
        kill(waiter, SIGKILL);
        t0 = now_seconds();
        while (!reaped && now_seconds() - t0 < 0.8)
            reaped = waitpid(waiter, &st, WNOHANG) == waiter;
    }
    sched_setscheduler(0, SCHED_OTHER, &other);
    sched_setaffinity(0, sizeof(saved), &saved);
    close(cmd[1]);
    if (!reaped)
        wait_child(waiter, desc, sizeof(desc));
    wait_child(child, desc, sizeof(desc));
    warn_after = kernel_log_count("WARNING:", last, sizeof(last));
    info("the writer %s (state %c seen); the child: %s",
         waited ? "was SIGKILLed while it waited for the child's copy" :
         "did not wait for the child", state, desc);
    if (strcmp(desc, "exit 0") != 0)
        rc = fail("the child: %s (SIGKILL: its session failed; exit 3: its snapshot was "
                  "wrong)", desc);
    for (size_t p = 0; p < npages && rc == 0; p++)
        if (base[p * WORDS_PER_PAGE] != p)
            rc = fail("the parent's page %zu changed", p);
    if (rc == 0 && *last_word != npages - 1)
        rc = fail("the parent's last page changed");
    if (rc == 0 && warn_before >= 0 && warn_after > warn_before)
        rc = fail("the kernel logged %d WARNING line(s) during the test, the last: %s",
                  warn_after - warn_before, last);
    if (rc == 0 && active > 0 && !waited)
        rc = fail("the writer never waited for the child's copy: the test proves nothing");
    unmap(base, size);
    return rc;
}

/* --- fork-fails-late ----------------------------------------------------- */

#define LATE_SEED 0x1a7e
#define LATE_MARK 40            /* the word of a table's first page written after */
#define PID_MAX "/proc/sys/kernel/pid_max"
#define LATE_HOLDERS 400        /* more than pid_max's minimum leaves free */

/* What the process whose fork fails late saw (shared memory: never left to
 * a child). */
struct late_shared {
    int stage;                  /* 0 nothing, 1 pid_max lowered, 2 done */
    int fork_errno;             /* of the fork that failed, 0 none did */
    int holders;                /* forks that succeeded before it */
    unsigned long long sessions, failed;
    size_t bad_words;           /* the region after the writes */
};

/*
 * Lower pid_max to its minimum (301) and fork small children that pause
 * (holders) until a fork fails: no pid is left. Then map and fill the
 * region and fork once more: copy_process() fails in alloc_pid(), after
 * copy_mm() has left the region's tables to a child that never comes to
 * be. Then the holders are killed and pid_max put back, and the process
 * writes to each table's first page and reads all back.
 */
static void late_member(struct late_shared *s, size_t tables)
{
    size_t npages = tables * (HUGE_SIZE / PAGE_SIZE);
    static pid_t holder[LATE_HOLDERS];
    unsigned long long sessions, failed;
    int fd = open(PID_MAX, O_RDONLY), i, full = 0;
    char saved[32] = "";
    uint64_t *r, *w;
    pid_t pid;

    if (fd < 0 || read(fd, saved, sizeof(saved) - 1) <= 0)
        _exit(3);
    close(fd);
    if (write_file(PID_MAX, "301") != 0)
        _exit(4);
    s->stage = 1;
    for (i = 0; i < LATE_HOLDERS && !full; i++) {
        pid = fork();
        if (pid == 0) {
            pause();
            _exit(0);
        }
        if (pid > 0)
            holder[s->holders++] = pid;
        full = pid < 0;
    }
    r = map_anon(tables * HUGE_SIZE, 1);
    madvise(r, tables * HUGE_SIZE, MADV_NOHUGEPAGE);
    fill_pages(r, 0, npages, LATE_SEED);
    sessions = vmstat_counter("async_fork_sessions");
    failed = vmstat_counter("async_fork_sessions_failed");
    pid = full ? fork() : 0;
    if (pid == 0 && full)
        _exit(0);
    s->fork_errno = pid < 0 ? errno : 0;
    s->sessions = vmstat_counter("async_fork_sessions") - sessions;
    s->failed = vmstat_counter("async_fork_sessions_failed") - failed;
    write_file(PID_MAX, saved);
    for (i = 0; i < s->holders; i++) {
        kill(holder[i], SIGKILL);
        waitpid(holder[i], NULL, 0);
    }
    if (pid > 0)
        waitpid(pid, NULL, 0);
    for (size_t t = 0; t < tables; t++) {
        w = &r[t * (HUGE_SIZE / sizeof(uint64_t)) + LATE_MARK];
        *w ^= 1;
        *w ^= 1;
    }
    s->bad_words = check_pages(r, 0, npages, LATE_SEED, NULL);
    s->stage = 2;
    _exit(0);
}

static int fork_fails_late(void)
{
    struct late_shared *s = mmap(NULL, sizeof(*s), PROT_READ | PROT_WRITE,
                                 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    int before[NSPLATS], after[NSPLATS], status, rc = 0, active = afork_active();
    size_t tables = scaled(32, 8);
    char how[96], last[256] = "";
    pid_t p;

    if (!getenv("AFORK_GUEST"))
        return fail("this test lowers kernel.pid_max: it runs only in the test guest "
                    "(AFORK_GUEST=1)");
    if (s == MAP_FAILED)
        die_errno("mmap shared");
    count_splats(before, NULL, 0);
    p = fork_or_die();
    if (p == 0)
        late_member(s, tables);
    status = wait_child(p, how, sizeof(how));
    count_splats(after, last, sizeof(last));
    info("with pid_max at 301: %d holders forked until no pid was left; the fork of the "
         "region then: %s, sessions %llu (failed %llu); %zu wrong words after", s->holders,
         s->fork_errno ? strerror(s->fork_errno) : "succeeded", s->sessions, s->failed,
         s->bad_words);
    if (!exited_ok(status) || s->stage != 2)
        rc = fail("the process whose fork fails ended with %s at stage %d (3: no pid_max, "
                  "4: pid_max not lowered)", how, s->stage);
    else if (!s->fork_errno)
        rc = fail("the fork succeeded after %d holders took every pid: the test proves "
                  "nothing", s->holders);
    else if (s->fork_errno != EAGAIN)
        rc = fail("fork() failed with %s, EAGAIN wanted (no pid left)", strerror(s->fork_errno));
    else if (s->bad_words)
        rc = fail("the parent's memory has %zu wrong words after the failed fork",
                  s->bad_words);
    else if (active > 0 && s->sessions < 1)
        rc = fail("the failed fork left no table to its child: the test proves nothing");
    if (rc == 0)
        rc = check_splats(before, after, last);
    munmap(s, sizeof(*s));
    return rc;
}

const struct test_case failpath_tests[] = {
    { "ro-thp-force-write", "after a failed session, pwrite to /proc/self/mem into a read-only "
      "huge page (FOLL_FORCE, a debugger's breakpoint) completes", ro_thp_force_write },
    { "killed-waiter", "a task writing to a copying child's /proc/PID/mem is SIGKILLed while "
      "it waits: the child completes (no WARN), the parent's memory is intact", killed_waiter },
    { "fork-fails-late", "fork() fails after dup_mmap() left the tables to a child (no pid "
      "left under kernel.pid_max): EAGAIN, the parent's memory intact", fork_fails_late },
    { NULL, NULL, NULL },
};
