/* lifecycle.c -- fork around process life and death: a child that exits or
 * is killed at once, a parent that exits while the child still copies,
 * vfork and posix_spawn, and fork under a memory cgroup limit that the copy
 * cannot fit in (the parent must survive; the child may die).
 */
#include "common.h"

#include <errno.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

/* A patterned region the parent writes into between forks. */
struct busy_region {
    uint64_t *base;
    size_t npages;
    uint64_t seed;
};

static void busy_region_init(struct busy_region *b, size_t mib, uint64_t seed)
{
    b->npages = mib * MIB / PAGE_SIZE;
    b->base = map_anon(b->npages * PAGE_SIZE, 0);
    b->seed = seed;
    fill_pages(b->base, 0, b->npages, seed);
}

/* Write then restore word 1 of 8 pages: a COW fault on each right after fork. */
static void touch_after_fork(struct busy_region *b, unsigned long it)
{
    for (int k = 0; k < 8; k++) {
        size_t p = (size_t)((it * 8 + (unsigned long)k) * 2654435761UL % b->npages);
        uint64_t *w = b->base + p * WORDS_PER_PAGE + 1;

        *w = mark_value(8, it);
        *w = pattern_base(b->seed, p) + 1;
    }
}

static int busy_region_intact(struct busy_region *b, const char *when)
{
    if (check_pages(b->base, 0, b->npages, b->seed, NULL))
        return fail("the parent's memory is wrong %s", when);
    return 0;
}

/* Thousands of children that _exit(0) (kill=0) or are SIGKILLed (kill=1)
 * the moment fork returns, while the parent writes. */
static int short_lived_children(int kill_them)
{
    unsigned long iters = scaled(2000, 100);
    struct busy_region b;
    char how[96];
    int rc = 0;

    busy_region_init(&b, 64, 0xe1);
    for (unsigned long it = 0; it < iters && rc == 0; it++) {
        pid_t pid = fork_or_die();
        int status;
        int injected = inject_here() && it == iters / 2;

        if (pid == 0)
            _exit(injected ? 3 : 0);
        if (kill_them && !injected)
            kill(pid, SIGKILL);
        touch_after_fork(&b, it);
        status = wait_child(pid, how, sizeof(how));
        if (kill_them ? !(exited_ok(status) || (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL))
                      : !exited_ok(status))
            rc = fail("fork %lu: the child ended with %s", it, how);
        if (rc == 0 && it % 500 == 499)
            rc = busy_region_intact(&b, "between forks");
    }
    if (rc == 0)
        rc = busy_region_intact(&b, "after the forks");
    info("%lu forks", iters);
    unmap(b.base, b.npages * PAGE_SIZE);
    return rc;
}

static int child_exits_now(void) { return short_lived_children(0); }
static int child_killed_now(void) { return short_lived_children(1); }

/* parent-exits: a middle process with a big region forks, then exits (or
 * is SIGKILLed by us) at once; the orphan must still see the whole snapshot.
 * We are the subreaper, so the orphan is reparented to us. */
static void orphan_child(struct busy_region *b, int rep_fd)
{
    struct report r = { 0 };
    size_t bad_page = 0;

    while (getppid() != (pid_t)atoi(getenv("AFORK_SUBREAPER")))
        usleep(1000);
    if (inject_here())
        b->base[7 * WORDS_PER_PAGE] ^= 1;
    r.bad_words = check_pages(b->base, 0, b->npages, b->seed, &bad_page);
    r.bad_page = bad_page;
    r.checked_pages = b->npages;
    send_report(rep_fd, &r);
    _exit(r.bad_words ? 1 : 0);
}

static void middle_process(size_t mib, int killed, int rep_fd, int pid_fd)
{
    struct busy_region b;
    pid_t child;

    busy_region_init(&b, mib, 0xa11);
    child = fork_or_die();
    if (child == 0)
        orphan_child(&b, rep_fd);
    if (killed) {
        if (write(pid_fd, &child, sizeof(child)) != sizeof(child))
            _exit(98);
        pause();
    }
    b.base[0] = 0;              /* one write, then leave */
    _exit(0);
}

/* Wait for any one process to end; describe it. */
static pid_t reap_one(char *how, size_t len, int *status)
{
    pid_t pid = waitpid(-1, status, 0);

    if (pid > 0)
        snprintf(how, len, "%s %d", WIFEXITED(*status) ? "exit" : "signal",
                 WIFEXITED(*status) ? WEXITSTATUS(*status) : WTERMSIG(*status));
    return pid;
}

static int parent_exits_round(size_t mib, int killed)
{
    int rep[2], pids[2], status, rc = 0, ok_orphan = 0;
    struct report r;
    char how[96];
    pid_t middle, orphan = 0, pid;

    pipe_or_die(rep);
    pipe_or_die(pids);
    middle = fork_or_die();
    if (middle == 0)
        middle_process(mib, killed, rep[1], pids[1]);
    close_end(rep, 1);
    close_end(pids, 1);
    if (killed) {
        if (read(pids[0], &orphan, sizeof(orphan)) != sizeof(orphan))
            rc = fail("the middle process did not report its child");
        kill(middle, SIGKILL);
    }
    if (recv_report(rep[0], &r) != 0)
        rc = fail("the orphan sent no report");
    else if (r.bad_words)
        rc = fail("the orphan saw %llu wrong words, first bad page %llu",
                  (unsigned long long)r.bad_words, (unsigned long long)r.bad_page);
    for (int n = 0; n < 2 && (pid = reap_one(how, sizeof(how), &status)) > 0; n++)
        if (pid != middle)
            ok_orphan = exited_ok(status);
    if (rc == 0 && !ok_orphan)
        rc = fail("the orphan did not exit cleanly (%s)", how);
    close_pair(rep);
    close_pair(pids);
    return rc;
}

static int parent_exits(void)
{
    size_t mib = scaled(256, 32);
    char self[32];
    int rc = 0;

    if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0)
        return fail("PR_SET_CHILD_SUBREAPER: %s", strerror(errno));
    snprintf(self, sizeof(self), "%d", (int)getpid());
    setenv("AFORK_SUBREAPER", self, 1);
    for (int i = 0; i < (int)scaled(3, 1) && rc == 0; i++) {
        rc = parent_exits_round(mib, 0);
        if (rc == 0)
            rc = parent_exits_round(mib, 1);
    }
    info("%zu MiB parent exited / was killed right after fork, orphan checked", mib);
    return rc;
}

/* vfork/posix_spawn run this program as "forktest exec-check SEED": it
 * exits 0, proving the exec'ed image runs. */
int exec_check_main(int argc, char **argv)
{
    return argc >= 3 && strtoul(argv[2], NULL, 10) > 0 ? 0 : 2;
}

/* vfork; the child either execs this program or writes `mark` into the
 * parent's memory (vfork shares it) and exits 42. */
static int vfork_then(int exec_it, unsigned long it, volatile uint64_t *word, uint64_t mark)
{
    char seed[24];
    char *args[] = { "forktest", "exec-check", seed, NULL };
    pid_t pid;

    snprintf(seed, sizeof(seed), "%lu", it + 1);
    pid = vfork();
    if (pid < 0)
        die_errno("vfork");
    if (pid == 0) {
        if (exec_it)
            execve("/proc/self/exe", args, environ);
        else
            *word = mark;
        _exit(exec_it ? 127 : inject_here() && it == 5 ? 41 : 42);
    }
    return pid;
}

static int vfork_children(void)
{
    unsigned long iters = scaled(1000, 50);
    struct busy_region b;
    char how[96];
    int rc = 0;

    busy_region_init(&b, 64, 0xf0);
    for (unsigned long it = 0; it < iters && rc == 0; it++) {
        int exec_it = it % 4 == 0, status;
        volatile uint64_t *word = b.base + 2;
        pid_t pid = vfork_then(exec_it, it, word, mark_value(9, it));

        touch_after_fork(&b, it);
        status = wait_child(pid, how, sizeof(how));
        if (exec_it ? !exited_ok(status) : !(WIFEXITED(status) && WEXITSTATUS(status) == 42))
            rc = fail("vfork %lu (%s): the child ended with %s", it, exec_it ? "exec" : "_exit", how);
        else if (!exec_it && *word != mark_value(9, it))
            rc = fail("vfork %lu: the child's write is not in the parent's memory (not shared)", it);
        *word = pattern_base(b.seed, 0) + 2;
    }
    if (rc == 0)
        rc = busy_region_intact(&b, "after the vforks");
    info("%lu vforks, every 4th one exec'ed", iters);
    unmap(b.base, b.npages * PAGE_SIZE);
    return rc;
}

/* glibc's posix_spawn passes the child's exec error back through memory it
 * shares with the child (CLONE_VM): a missing program must give ENOENT. */
static int spawn_missing_program(char **args)
{
    char how[96];
    pid_t pid;
    int err = posix_spawn(&pid, "/nonexistent/afork-program", NULL, NULL, args, environ);

    if (err == ENOENT)
        return 0;
    if (err == 0) {
        wait_child(pid, how, sizeof(how));
        return fail("posix_spawn of a missing program returned success (child: %s): "
                    "the exec error did not come back through shared memory", how);
    }
    return fail("posix_spawn of a missing program: %s, not ENOENT", strerror(err));
}

static int spawn_children(void)
{
    unsigned long iters = scaled(500, 30);
    struct busy_region b;
    char how[96], seed[24];
    char *args[] = { "forktest", "exec-check", seed, NULL };
    int rc = 0;

    busy_region_init(&b, 256, 0x5b);
    for (unsigned long it = 0; it < iters && rc == 0; it++) {
        pid_t pid;
        int err, status;

        snprintf(seed, sizeof(seed), "%lu", inject_here() && it == 3 ? 0 : it + 1);
        if (it % 50 == 49 && (rc = spawn_missing_program(args)) != 0)
            break;
        err = posix_spawn(&pid, "/proc/self/exe", NULL, NULL, args, environ);
        if (err != 0)
            return fail("posix_spawn: %s", strerror(err));
        touch_after_fork(&b, it);
        status = wait_child(pid, how, sizeof(how));
        if (!exited_ok(status))
            rc = fail("spawn %lu: the child ended with %s", it, how);
    }
    if (rc == 0)
        rc = busy_region_intact(&b, "after the spawns");
    info("%lu posix_spawns from a 256 MiB parent", iters);
    unmap(b.base, b.npages * PAGE_SIZE);
    return rc;
}

/* --- fork under a memory cgroup limit ---------------------------------- */

#define CG_ROOT "/sys/fs/cgroup"

/* Shared page between the test and the process inside the cgroup. */
struct cg_shared {
    atomic_int stage;        /* 1 ready, 2 go, 3 forked */
    int fork_errno;          /* 0 when fork succeeded */
    int child_status;        /* wait status of the child, when there was one */
    int memory_ok;
};

static void cg_wait_stage(struct cg_shared *s, int stage)
{
    while (atomic_load(&s->stage) < stage)
        usleep(1000);
}

/* Inside the cgroup: fill memory, wait for the limit, fork, report. */
static void cg_member(struct cg_shared *s, const char *procs, size_t mib)
{
    struct busy_region b;
    char pid[24];
    pid_t child;

    snprintf(pid, sizeof(pid), "%d", (int)getpid());
    if (write_file(procs, pid) != 0 || write_file("/proc/self/oom_score_adj", "-1000") != 0)
        die_errno("join the cgroup / set oom_score_adj");
    busy_region_init(&b, mib, 0xc9);
    atomic_store(&s->stage, 1);
    cg_wait_stage(s, 2);
    child = fork();
    s->fork_errno = child < 0 ? errno : 0;
    if (child == 0)
        _exit(check_pages(b.base, 0, b.npages, b.seed, NULL) ? 1 : 0);
    if (child > 0)
        while (waitpid(child, &s->child_status, 0) < 0 && errno == EINTR)
            ;
    s->memory_ok = check_pages(b.base, 0, b.npages, b.seed, NULL) == 0;
    atomic_store(&s->stage, 3);
    _exit(0);
}

static int cg_prepare(char *dir, size_t len)
{
    snprintf(dir, len, CG_ROOT "/afork-memcg-%d", (int)getpid());
    if (access(CG_ROOT "/cgroup.controllers", R_OK) != 0)
        return fail("cgroup v2 is not mounted at " CG_ROOT);
    if (write_file(CG_ROOT "/cgroup.subtree_control", "+memory") != 0)
        return fail("enable the memory controller: %s", strerror(errno));
    if (mkdir(dir, 0755) != 0)
        return fail("mkdir %s: %s", dir, strerror(errno));
    return 0;
}

static int cg_file(const char *dir, const char *name, char *path, size_t len)
{
    return snprintf(path, len, "%s/%s", dir, name) >= (int)len ? -1 : 0;
}

/* Set memory.max just above the current usage; no swap. */
static int cg_clamp(const char *dir, long slack)
{
    char path[256], value[32];
    long current;

    cg_file(dir, "memory.swap.max", path, sizeof(path));
    if (write_file(path, "0") != 0)
        return fail("memory.swap.max: %s", strerror(errno));
    cg_file(dir, "memory.current", path, sizeof(path));
    current = read_long_file(path);
    cg_file(dir, "memory.max", path, sizeof(path));
    snprintf(value, sizeof(value), "%ld", current + slack);
    if (current <= 0 || write_file(path, value) != 0)
        return fail("memory.max = %s: %s", value, strerror(errno));
    info("memory.current %ld kB, memory.max set to %ld kB", current / 1024, (current + slack) / 1024);
    return 0;
}

static int cg_verdict(const struct cg_shared *s, int member_status)
{
    int killed = WIFSIGNALED(s->child_status) && WTERMSIG(s->child_status) == SIGKILL;

    if (!exited_ok(member_status))
        return fail("the parent in the cgroup did not survive (wait status 0x%x)", member_status);
    if (!s->memory_ok)
        return fail("the parent's memory is wrong after the failed fork");
    if (s->fork_errno) {
        info("fork failed with %s, as it should", strerror(s->fork_errno));
        return s->fork_errno == ENOMEM ? 0 : fail("fork failed with %s, not ENOMEM", strerror(s->fork_errno));
    }
    if (killed) {
        info("fork returned but the child was killed by SIGKILL, as it may be");
        return 0;
    }
    return fail("the fork succeeded under the limit (child status 0x%x): the limit did not bite", s->child_status);
}

static int memcg_limit(void)
{
    size_t mib = scaled(512, 64);
    struct cg_shared *s;
    char dir[128], procs[256], how[96];
    int rc, status;
    pid_t member;

    if (!getenv("AFORK_GUEST"))
        return fail("this test changes cgroups: it runs only in the test guest (AFORK_GUEST=1)");
    s = mmap(NULL, PAGE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (s == MAP_FAILED || cg_prepare(dir, sizeof(dir)) != 0)
        return -1;
    cg_file(dir, "cgroup.procs", procs, sizeof(procs));
    member = fork_or_die();
    if (member == 0)
        cg_member(s, procs, mib);
    cg_wait_stage(s, 1);
    rc = cg_clamp(dir, inject_here() ? (long)(mib * MIB) : 64 * 1024);
    atomic_store(&s->stage, 2);
    status = wait_child(member, how, sizeof(how));
    if (rc == 0)
        rc = cg_verdict(s, status);
    if (rmdir(dir) != 0)
        info("rmdir %s: %s", dir, strerror(errno));
    munmap(s, PAGE_SIZE);
    return rc;
}

const struct test_case lifecycle_tests[] = {
    { "child-exit-now", "thousands of children _exit at once; parent writes right after fork", child_exits_now },
    { "child-killed-now", "thousands of children SIGKILLed right after fork while the parent writes", child_killed_now },
    { "parent-exits", "parent exits / is killed right after forking; the orphan checks its snapshot", parent_exits },
    { "vfork", "vfork + exec and vfork + write-to-parent + _exit, a thousand times; memory shared, parent intact", vfork_children },
    { "posix-spawn", "posix_spawn from a 256 MiB parent; exit status; exec errors come back (shared memory)", spawn_children },
    { "memcg-limit", "fork in a memory cgroup too small for the copy: parent survives, fork fails or child dies", memcg_limit },
    { NULL, NULL, NULL },
};
