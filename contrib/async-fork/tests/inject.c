/* inject.c -- a copy of a table made to fail on purpose, in each kind of
 * task that copies, with the kernel's fail_async_fork (debugfs, the task
 * filter of make-it-fail: only the thread named fails).
 *
 *   inject-parent-fault     a parent thread's write needs a table the child
 *                           has not copied; that copy fails halfway
 *   inject-take-over        the same, but the table is the one the child was
 *                           copying when the scheduler stopped it (cpu.max):
 *                           the parent thread took it over, then failed
 *   killed-after-take-over  no injection: the child is SIGKILLed as soon as
 *                           a parent thread has taken its table over
 *   inject-exit-copy        the parent exits while its child copies; the
 *                           exit's copy of what is left fails
 *   inject-fork-failed      the session fails while fork() is still leaving
 *                           tables to the child, as when the OOM killer
 *                           chooses the parent then: the fork must fail
 *
 * Each child is created straight into a cgroup that may use 1 ms of CPU per
 * 100 ms, so that it is still copying when the parent gets there. With
 * asynchronous fork on, each round that reached its path must end with the
 * session failed and the child SIGKILLed before it ran (it never gets a
 * part of its snapshot; a killed child may also have completed its copy
 * before the kill landed); in every round the parent's writes are kept, its
 * memory is otherwise as before, a child that ran saw an exact snapshot,
 * and the kernel logs no WARNING, BUG, Bad rss-counter or Bad page. Rounds
 * go on until 3 (2 for the take-overs) reached the path, and for
 * killed-after-take-over one stopped the child mid-copy; fewer in 8 times
 * as many rounds fails: the test would prove nothing. Without asynchronous
 * fork (stock kernel, vm.async_fork=0) nothing fails and the child must see
 * an exact snapshot.
 */
#include "common.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define FAIL_DIR "/sys/kernel/debug/fail_async_fork"
#define FAIL_LINE "name fail_async_fork"
#define QUOTA "1000 100000"     /* cpu.max of the child: 1 ms per 100 ms */
#define SEED 0x1e7c
#define MARK_WORD 24            /* the word of a page the parent writes */
#define PACE_NS 1000000L        /* the chaser writes every 1 ms */

enum path { PARENT_FAULT, TAKE_OVER, KILLED, EXIT_COPY };

/* One round: a region, a child in the throttled cgroup, what happened. */
struct round {
    enum path path;
    uint64_t *base;
    size_t tables;
    uint64_t *written;          /* per table: the mark last written, 0 none */
    uint64_t seq;
    unsigned long long others;  /* tables the fork deferred outside the region */
    atomic_int go, stop;
    pid_t child;
    /* what the counters and the child said */
    unsigned long long failed, taken, injected;
    int child_ran, killed, snapshot_bad;
    int killed_failed;          /* KILLED rounds whose session failed */
};

static int thread_make_it_fail(int on)
{
    char path[64];

    snprintf(path, sizeof(path), "/proc/thread-self/make-it-fail");
    return write_file(path, on ? "1" : "0");
}

/* fail_async_fork for the tasks with make-it-fail, off until armed.
 * 0, 1 if the kernel has none, -1 error. */
static int fail_setup(void)
{
    static const char *const settings[][2] = {
        { "probability", "0" }, { "task-filter", "Y" }, { "interval", "1" },
        { "times", "0" }, { "space", "0" }, { "verbose", "1" },
    };

    return fault_attr_setup(FAIL_DIR, settings, sizeof(settings) / sizeof(settings[0]));
}

/* The next copy by a task with make-it-fail fails, and no other. */
static void fail_arm(void)
{
    if (write_file(FAIL_DIR "/times", "1") != 0 || write_file(FAIL_DIR "/probability", "100"))
        die_errno("arm " FAIL_DIR);
}

static void fail_disarm(void)
{
    write_file(FAIL_DIR "/probability", "0");
    write_file(FAIL_DIR "/times", "0");
}

static uint64_t *mark_at(struct round *r, size_t t)
{
    return &r->base[t * (HUGE_SIZE / sizeof(uint64_t)) + MARK_WORD];
}

static void write_mark(struct round *r, size_t t)
{
    uint64_t v = mark_value(2, ++r->seq);

    *(volatile uint64_t *)mark_at(r, t) = v;
    r->written[t] = v;
}

/* The parent thread that writes after the fork, with make-it-fail on where
 * its copy is to fail. PARENT_FAULT: a table the child has certainly not
 * reached (the last), then every table. TAKE_OVER, KILLED: once the child
 * has copied as many tables as the fork deferred outside the region, and
 * so may be in it, one table every PACE_NS in address order, the order in
 * which the child copies, until stopped. A table the child has copied
 * takes only a copy-on-write fault; the writes catch up with the child
 * while cpu.max stops it, in the middle of a table it holds (it stops
 * there at each batch of entries, and only once per table between two):
 * the write takes that table over. */
static void *writer_main(void *arg)
{
    struct round *r = arg;
    const struct timespec pace = { 0, PACE_NS };
    unsigned long long copied0 = vmstat_counter("async_fork_child_copied");
    double deadline;
    size_t t;

    if (r->path != KILLED && thread_make_it_fail(1) != 0)
        die_errno("make-it-fail");
    while (!atomic_load(&r->go))
        nanosleep(&pace, NULL);
    if (r->path == PARENT_FAULT) {
        write_mark(r, r->tables - 1);
        for (t = 0; t < r->tables; t++)
            write_mark(r, t);
        return NULL;
    }
    deadline = now_seconds() + 60 * knobs.scale + 20;
    while (vmstat_counter("async_fork_child_copied") - copied0 <= r->others &&
           !atomic_load(&r->stop) && now_seconds() < deadline)
        nanosleep(&pace, NULL);
    for (t = 0; !atomic_load(&r->stop) && now_seconds() < deadline;) {
        write_mark(r, t);
        if (t + 1 < r->tables)
            t++;
        nanosleep(&pace, NULL);
    }
    return NULL;
}

/* The child: say it runs, leave the throttled cgroup, check the snapshot,
 * which is the pattern (the parent wrote nothing before the fork). */
static void child_main(struct round *r, int ran_fd)
{
    size_t bad_page = 0, bad;
    char verdict;

    if (write_file(CG_ROOT "/cgroup.procs", "0") != 0)
        die_errno("leave the throttled cgroup");
    bad = check_pages(r->base, 0, r->tables * (HUGE_SIZE / PAGE_SIZE), SEED, &bad_page);
    verdict = bad ? 'B' : 'G';
    if (write(ran_fd, &verdict, 1) != 1)
        _exit(2);
    _exit(0);
}

/* KILLED: SIGKILL the child as soon as a parent thread took over a table,
 * and stop the writes (else the writer copies what is left while the child
 * is kept off the CPU); not if the child ends first (no asynchronous fork,
 * or nothing taken over). */
static void kill_after_take_over(struct round *r, unsigned long long taken0)
{
    const struct timespec pace = { 0, 200000 };
    siginfo_t si;

    for (;;) {
        if (vmstat_counter("async_fork_taken_over") != taken0) {
            kill(r->child, SIGKILL);
            atomic_store(&r->stop, 1);
            return;
        }
        si.si_pid = 0;
        if (waitid(P_PID, (id_t)r->child, &si, WEXITED | WNOHANG | WNOWAIT) != 0 || si.si_pid)
            return;
        nanosleep(&pace, NULL);
    }
}

/* The region after the round: every mark the parent wrote is there, and the
 * rest is the pattern; the marks are put back to the pattern. */
static int parent_intact(struct round *r)
{
    size_t bad_page = 0;

    for (size_t t = 0; t < r->tables; t++) {
        if (r->written[t] && *mark_at(r, t) != r->written[t])
            return fail("table %zu: the parent's write 0x%llx is lost (0x%llx)", t,
                        (unsigned long long)r->written[t], (unsigned long long)*mark_at(r, t));
        if (r->written[t])
            *mark_at(r, t) = pattern_base(SEED, t * (HUGE_SIZE / PAGE_SIZE)) + MARK_WORD;
        r->written[t] = 0;
    }
    if (check_pages(r->base, 0, r->tables * (HUGE_SIZE / PAGE_SIZE), SEED, &bad_page))
        return fail("the parent's memory is wrong at page %zu", bad_page);
    return 0;
}

/* The child's outcome from its pipe and its status. */
static void child_outcome(struct round *r, int ran_fd, int status)
{
    char verdict;

    r->child_ran = read(ran_fd, &verdict, 1) == 1;
    r->snapshot_bad = r->child_ran && verdict != 'G';
    r->killed = WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
}

/* PARENT_FAULT, TAKE_OVER, KILLED: fork into the throttled cgroup while a
 * parent thread writes. */
static int round_in_process(struct round *r, int cg_fd)
{
    int ran[2], status;
    char how[128];
    pthread_t writer;
    unsigned long long taken0 = vmstat_counter("async_fork_taken_over");
    unsigned long long deferred0, deferred;

    pipe_or_die(ran);
    atomic_store(&r->go, 0);
    atomic_store(&r->stop, 0);
    if (pthread_create(&writer, NULL, writer_main, r) != 0)
        die_errno("pthread_create");
    deferred0 = vmstat_counter("async_fork_deferred");
    r->child = clone_into(cg_fd);
    if (r->child < 0)
        die_errno("clone3(CLONE_INTO_CGROUP)");
    if (r->child == 0)
        child_main(r, ran[1]);
    deferred = vmstat_counter("async_fork_deferred") - deferred0;
    r->others = deferred > r->tables ? deferred - r->tables : 0;
    close_end(ran, 1);
    atomic_store(&r->go, 1);
    if (r->path == KILLED && !inject_here())  /* not killed: must fail */
        kill_after_take_over(r, taken0);
    if (r->path == PARENT_FAULT)
        pthread_join(writer, NULL);
    status = wait_child(r->child, how, sizeof(how));
    atomic_store(&r->stop, 1);
    if (r->path != PARENT_FAULT)
        pthread_join(writer, NULL);
    child_outcome(r, ran[0], status);
    close_pair(ran);
    return 0;
}

/* EXIT_COPY: a process maps and fills the region, forks into the throttled
 * cgroup, turns make-it-fail on and exits at once; its child is reparented
 * to this process (a subreaper). */
static int round_exit_copy(struct round *r, int cg_fd)
{
    int ran[2], pid_pipe[2], status;
    char how[128];
    pid_t p, c = -1;

    pipe_or_die(ran);
    pipe_or_die(pid_pipe);
    p = fork_or_die();
    if (p == 0) {
        uint64_t *base = map_anon(r->tables * HUGE_SIZE, 1);

        madvise(base, r->tables * HUGE_SIZE, MADV_NOHUGEPAGE);
        fill_pages(base, 0, r->tables * (HUGE_SIZE / PAGE_SIZE), SEED);
        r->base = base;
        c = clone_into(cg_fd);
        if (c < 0)
            _exit(3);
        if (c == 0)
            child_main(r, ran[1]);
        if (thread_make_it_fail(1) != 0 ||
            write(pid_pipe[1], &c, sizeof(c)) != (ssize_t)sizeof(c))
            _exit(4);
        _exit(0);
    }
    close_end(ran, 1);
    close_end(pid_pipe, 1);
    status = wait_child(p, how, sizeof(how));
    if (!exited_ok(status) || read(pid_pipe[0], &c, sizeof(c)) != (ssize_t)sizeof(c)) {
        close_pair(ran);
        close_pair(pid_pipe);
        return fail("the forking process ended with %s", how);
    }
    r->child = c;
    status = wait_child(c, how, sizeof(how));
    child_outcome(r, ran[0], status);
    close_pair(ran);
    close_pair(pid_pipe);
    return 0;
}

static const char *const path_names[] = {
    "a parent thread's fault", "a take-over of the child's table", "a SIGKILL after a take-over",
    "the parent's exit",
};

/* One round and its checks; *hit is set if the path was reached. */
static int run_round(struct round *r, int cg_fd, int active, int *hit)
{
    unsigned long long f0 = vmstat_counter("async_fork_sessions_failed");
    unsigned long long t0 = vmstat_counter("async_fork_taken_over");
    int i0 = kernel_log_count(FAIL_LINE, NULL, 0), rc, injecting = r->path != KILLED;
    int i1;

    if (injecting && active > 0)
        fail_arm();
    if (inject_here())
        injecting = 0, fail_disarm();       /* the path is not taken: must fail */
    rc = r->path == EXIT_COPY ? round_exit_copy(r, cg_fd) : round_in_process(r, cg_fd);
    fail_disarm();
    if (rc)
        return rc;
    r->failed = vmstat_counter("async_fork_sessions_failed") - f0;
    r->taken = vmstat_counter("async_fork_taken_over") - t0;
    i1 = kernel_log_count(FAIL_LINE, NULL, 0);
    r->injected = i0 >= 0 && i1 >= i0 ? (unsigned long long)(i1 - i0) : 0;
    info("%s: session failed %llu, tables taken over %llu, injected %llu, child %s%s",
         path_names[r->path], r->failed, r->taken, r->injected,
         r->killed ? "SIGKILLed" : "not killed", r->child_ran ? ", ran in user space" : "");
    if (r->snapshot_bad)
        return fail("the child ran with a wrong snapshot");
    if (r->path != EXIT_COPY && (rc = parent_intact(r)) != 0)
        return rc;
    if (active <= 0) {
        if (!r->child_ran && r->path != KILLED)
            return fail("without asynchronous fork the child did not run");
        return 0;
    }
    /* A child whose session failed must never run: it would have a part
     * of its snapshot only. */
    if (r->failed && r->child_ran)
        return fail("the session failed, yet the child ran in user space");
    /* Reached: the copy of that kind failed (the only task that can fail
     * is the one with make-it-fail), or the child was killed after a
     * take-over; the session may then have completed first. */
    switch (r->path) {
    case PARENT_FAULT: *hit = r->injected == 1; break;
    case TAKE_OVER: *hit = r->injected == 1 && r->taken >= 1; break;
    case KILLED: *hit = r->taken >= 1 && r->killed; break;
    case EXIT_COPY: *hit = r->injected == 1; break;
    }
    if (*hit && r->path != KILLED && (!r->failed || !r->killed))
        return fail("%s failed, yet the session did not fail (%llu) or the child was not "
                    "SIGKILLed", path_names[r->path], r->failed);
    if (*hit && r->path == KILLED)
        r->killed_failed += r->failed > 0;
    return 0;
}

/* Rounds enough: @want reached the path; for KILLED, one of them with the
 * child stopped before it finished (its session failed). */
static int enough(const struct round *r, int hits, int want)
{
    return hits >= want && (r->path != KILLED || r->killed_failed > 0);
}

static int inject_test(enum path path)
{
    struct round r = { .path = path };
    int active = afork_active(), cg_fd = -1, rc = 0, hits = 0, rounds = 0, hit, setup;
    int want = path == PARENT_FAULT || path == EXIT_COPY ? 3 : 2;
    int max_rounds = want * 8;
    int before[NSPLATS], after[NSPLATS];
    char dir[128], last[256] = "";

    if (!getenv("AFORK_GUEST"))
        return fail("this test changes cgroups and injects failures: it runs only in the test "
                    "guest (AFORK_GUEST=1)");
    setup = fail_setup();
    if (setup < 0)
        return -1;
    if (setup > 0 && active > 0 && path != KILLED)
        return fail("no " FAIL_DIR " (CONFIG_FAIL_ASYNC_FORK, CONFIG_FAULT_INJECTION_DEBUG_FS): "
                    "no copy can be made to fail, the test proves nothing");
    if (path == EXIT_COPY && prctl(PR_SET_CHILD_SUBREAPER, 1) != 0)
        return fail("PR_SET_CHILD_SUBREAPER: %s", strerror(errno));
    snprintf(dir, sizeof(dir), CG_ROOT "/afork-inject-%d", (int)getpid());
    if (set_up_cgroup(dir, "cpu", "cpu.max", QUOTA, &cg_fd) != 0)
        return -1;
    r.tables = scaled(64, 32);
    r.written = calloc(r.tables, sizeof(*r.written));
    if (!r.written)
        die_errno("calloc");
    if (path != EXIT_COPY) {
        r.base = map_anon(r.tables * HUGE_SIZE, 1);
        madvise(r.base, r.tables * HUGE_SIZE, MADV_NOHUGEPAGE);
        fill_pages(r.base, 0, r.tables * (HUGE_SIZE / PAGE_SIZE), SEED);
    }
    count_splats(before, NULL, 0);
    while (rc == 0 && rounds < (active > 0 ? max_rounds : 2) && !enough(&r, hits, want)) {
        hit = 0;
        rounds++;
        rc = run_round(&r, cg_fd, active, &hit);
        hits += hit;
    }
    count_splats(after, last, sizeof(last));
    info("%s: %d rounds, %d reached the path%s", path_names[path], rounds, hits,
         active > 0 ? "" : " (no asynchronous fork: nothing to fail)");
    if (rc == 0)
        rc = check_splats(before, after, last);
    if (rc == 0 && active > 0 && !enough(&r, hits, want))
        rc = fail("%s reached in %d of %d rounds (%d wanted%s): the test proves nothing",
                  path_names[path], hits, rounds, want,
                  path == KILLED ? ", one of them with the session failed" : "");
    if (path == EXIT_COPY)
        prctl(PR_SET_CHILD_SUBREAPER, 0);
    close(cg_fd);
    if (r.base)
        unmap(r.base, r.tables * HUGE_SIZE);
    free(r.written);
    if (rmdir(dir) != 0)
        info("rmdir %s: %s", dir, strerror(errno));
    return rc;
}

/* One fork by this thread with make-it-fail on and fail_async_fork armed
 * (unless @armed is 0): the check at the first table fork() leaves to the
 * child fails the session. The fork must then fail with ENOMEM; a child
 * that runs must see the pattern. */
static int fork_failed_round(uint64_t *base, size_t tables, int armed, int *hit)
{
    unsigned long long f0 = vmstat_counter("async_fork_sessions_failed");
    int i0 = kernel_log_count(FAIL_LINE, NULL, 0), i1, status, err;
    size_t bad_page = 0;
    char how[128];
    pid_t pid;

    if (armed)
        fail_arm();
    if (thread_make_it_fail(1) != 0)
        die_errno("make-it-fail");
    pid = fork();
    err = errno;
    if (pid == 0)
        _exit(check_pages(base, 0, tables * (HUGE_SIZE / PAGE_SIZE), SEED, &bad_page) ? 1 : 0);
    thread_make_it_fail(0);
    fail_disarm();
    i1 = kernel_log_count(FAIL_LINE, NULL, 0);
    *hit = i0 >= 0 && i1 == i0 + 1;
    info("fork %s, session failed %llu, injected %d", pid < 0 ? strerror(err) : "succeeded",
         vmstat_counter("async_fork_sessions_failed") - f0, i1 - i0);
    if (pid > 0) {
        status = wait_child(pid, how, sizeof(how));
        if (!exited_ok(status))
            return fail("the child of a fork whose session %s ended with %s (its snapshot is "
                        "wrong if it exited 1)", *hit ? "failed in fork()" : "was kept", how);
    }
    if (pid < 0 && (!*hit || err != ENOMEM))
        return fail("fork() failed with %s%s", strerror(err),
                    *hit ? " (ENOMEM wanted)" : " with no failure injected");
    if (*hit && pid > 0)
        return fail("the session failed in fork(), yet fork() succeeded");
    /* The tables left write-protected in the parent: writable again. */
    for (size_t t = 0; t < tables; t++)
        base[t * (HUGE_SIZE / sizeof(uint64_t)) + MARK_WORD] ^= 1;
    for (size_t t = 0; t < tables; t++)
        base[t * (HUGE_SIZE / sizeof(uint64_t)) + MARK_WORD] ^= 1;
    if (check_pages(base, 0, tables * (HUGE_SIZE / PAGE_SIZE), SEED, &bad_page))
        return fail("the parent's memory is wrong at page %zu", bad_page);
    return 0;
}

static int inject_fork_failed(void)
{
    int active = afork_active(), rc = 0, hits = 0, rounds, hit, setup;
    int before[NSPLATS], after[NSPLATS];
    size_t tables = scaled(16, 8);
    char last[256] = "";
    uint64_t *base;

    if (!getenv("AFORK_GUEST"))
        return fail("this test injects failures: it runs only in the test guest (AFORK_GUEST=1)");
    setup = fail_setup();
    if (setup < 0)
        return -1;
    if (setup > 0 && active > 0)
        return fail("no " FAIL_DIR ": no session can be made to fail, the test proves nothing");
    base = map_anon(tables * HUGE_SIZE, 1);
    madvise(base, tables * HUGE_SIZE, MADV_NOHUGEPAGE);
    fill_pages(base, 0, tables * (HUGE_SIZE / PAGE_SIZE), SEED);
    count_splats(before, NULL, 0);
    for (rounds = 0; rc == 0 && rounds < 3; rounds++) {
        rc = fork_failed_round(base, tables, active > 0 && !inject_here(), &hit);
        hits += hit;
    }
    count_splats(after, last, sizeof(last));
    if (rc == 0)
        rc = check_splats(before, after, last);
    if (rc == 0 && active > 0 && hits != rounds)
        rc = fail("the failure was injected in %d of %d forks: the test proves nothing", hits,
                  rounds);
    unmap(base, tables * HUGE_SIZE);
    return rc;
}

static int inject_parent_fault(void) { return inject_test(PARENT_FAULT); }
static int inject_take_over(void) { return inject_test(TAKE_OVER); }
static int killed_after_take_over(void) { return inject_test(KILLED); }
static int inject_exit_copy(void) { return inject_test(EXIT_COPY); }

const struct test_case inject_tests[] = {
    { "inject-parent-fault", "a parent thread's copy of a table the child has not reached fails "
      "(fail_async_fork): child SIGKILLed before it runs, parent intact", inject_parent_fault },
    { "inject-take-over", "a parent thread takes over the table of a child stopped by cpu.max, "
      "and its copy fails: child SIGKILLed, parent intact", inject_take_over },
    { "killed-after-take-over", "the child is SIGKILLed once a parent thread took its table "
      "over: no WARN or Bad rss-counter, parent intact", killed_after_take_over },
    { "inject-exit-copy", "the parent exits while its child copies, and the exit's copy fails: "
      "the child is SIGKILLed, never runs with half a snapshot", inject_exit_copy },
    { "inject-fork-failed", "the session fails while fork() leaves tables to the child (as when "
      "the OOM killer chooses the parent): fork() fails with ENOMEM, parent intact",
      inject_fork_failed },
    { NULL, NULL, NULL },
};
