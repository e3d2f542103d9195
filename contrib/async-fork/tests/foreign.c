/* foreign.c -- a parent's last reference dropped by another process: its
 * exit_mmap(), with whatever the child has not copied yet, then runs in a
 * task that is neither the parent nor the child.
 *
 *   foreign-exit      the parent exits while its child, held back by
 *                     cpu.max, has most tables left to copy, and a reader
 *                     of its /proc/PID/pagemap in another memory cgroup
 *                     holds its mm: the reader's mmput() is the last and
 *                     gives the child what is left (async_fork_copied_exit).
 *                     The reader's cgroup is charged no page table for it
 *                     (memory.stat pagetables; a table the exit must copy
 *                     is charged to the forking task's cgroup, as fork()
 *                     charges it), the parent's cgroup, at its limit by
 *                     then, does not go past memory.max (memory.events),
 *                     and the child's snapshot is exact.
 *   foreign-oom-exit  the same, but the parent is OOM-killed in its memory
 *                     cgroup instead of exiting: no table is copied at the
 *                     exit the reader runs, the session fails and the child
 *                     dies of SIGKILL.
 *
 * The reader holds the mm as long as the test wants: its read() of the
 * pagemap copies the result into a page of its own registered with
 * userfaultfd, and waits there, the parent's mm taken, until it closes the
 * userfaultfd. Guest only (cgroups, subreaper).
 */
#include "common.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define SEED 0xf0e1
#define QUOTA "1000 100000"     /* cpu.max of the child: 1 ms per 100 ms */

/* What the processes of one round tell each other, in shared memory. */
struct foreign {
    uint64_t *base;             /* the parent's region */
    size_t size;
    atomic_int parent_ready;    /* filled */
    atomic_int reader_blocked;  /* its read() waits in the userfaultfd page */
    atomic_int fork_now;
    atomic_int forked;
    pid_t child;
    atomic_int wake_reader;
    atomic_int reader_done;
    atomic_int child_go;        /* the child may exit */
    long read_ret;              /* the reader's read(): bytes, or -errno */
    uint64_t child_bad;         /* wrong words in the child's snapshot */
    atomic_int child_checked;
};

/* Wait for @flag; in the test process, give up after a while. */
#define WAIT_LIMIT_S 300

static int wait_flag(atomic_int *flag)
{
    double deadline = now_seconds() + WAIT_LIMIT_S;

    while (!atomic_load(flag)) {
        if (now_seconds() > deadline)
            return -1;
        usleep(1000);
    }
    return 0;
}

static pid_t fork_into(int cg_fd)
{
    pid_t pid = clone_into(cg_fd);

    if (pid < 0)
        die_errno("clone3(CLONE_INTO_CGROUP)");
    return pid;
}

/* The child, in the throttled cgroup: leave it once running, check the
 * snapshot, wait for the test. */
static void child_main(struct foreign *f)
{
    size_t bad_page;

    if (write_file(CG_ROOT "/cgroup.procs", "0") != 0)
        die_errno("leave the throttled cgroup");
    f->child_bad = check_pages(f->base, 0, f->size / PAGE_SIZE, SEED, &bad_page);
    atomic_store(&f->child_checked, 1);
    wait_flag(&f->child_go);
    _exit(0);
}

/* The parent, in its memory cgroup: fill, fork the child into the throttled
 * cgroup when told, then exit at once (or wait for the OOM killer). */
static void parent_main(struct foreign *f, int throttled_fd, int oom)
{
    if (oom && write_file("/proc/self/oom_score_adj", "1000") != 0)
        die_errno("oom_score_adj");
    f->base = map_anon(f->size, 1);
    madvise(f->base, f->size, MADV_NOHUGEPAGE);
    fill_pages(f->base, 0, f->size / PAGE_SIZE, SEED);
    atomic_store(&f->parent_ready, 1);
    wait_flag(&f->fork_now);
    f->child = fork_into(throttled_fd);
    if (f->child == 0)
        child_main(f);
    atomic_store(&f->forked, 1);
    if (!oom)
        _exit(0);
    for (;;)
        pause();
}

struct reader_arg {
    int fd;
    void *page;
    long ret;
};

static void *reader_thread(void *arg)
{
    struct reader_arg *r = arg;
    ssize_t n = pread(r->fd, r->page, PAGE_SIZE, 0);

    r->ret = n < 0 ? -errno : n;
    return NULL;
}

/* The reader, in its own memory cgroup: a thread reads the parent's
 * pagemap into a page registered with userfaultfd and waits there, holding
 * the parent's mm; closing the userfaultfd lets it finish and drop it. */
static void reader_main(struct foreign *f, pid_t parent)
{
    struct uffdio_api api = { .api = UFFD_API };
    struct uffdio_register reg = { .mode = UFFDIO_REGISTER_MODE_MISSING };
    struct uffd_msg msg;
    struct reader_arg r;
    pthread_t t;
    char path[64];
    int uffd;

    snprintf(path, sizeof(path), "/proc/%d/pagemap", (int)parent);
    r.fd = open(path, O_RDONLY);
    uffd = (int)syscall(SYS_userfaultfd, O_CLOEXEC);
    if (r.fd < 0 || uffd < 0 || ioctl(uffd, UFFDIO_API, &api) != 0)
        die_errno("open the pagemap / userfaultfd");
    r.page = mmap(NULL, PAGE_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (r.page == MAP_FAILED)
        die_errno("mmap");
    reg.range.start = (unsigned long)r.page;
    reg.range.len = PAGE_SIZE;
    if (ioctl(uffd, UFFDIO_REGISTER, &reg) != 0)
        die_errno("UFFDIO_REGISTER");
    if (pthread_create(&t, NULL, reader_thread, &r) != 0)
        die_errno("pthread_create");
    if (read(uffd, &msg, sizeof(msg)) != sizeof(msg) || msg.event != UFFD_EVENT_PAGEFAULT)
        die_errno("the reader's fault");
    atomic_store(&f->reader_blocked, 1);
    wait_flag(&f->wake_reader);
    close(uffd);
    pthread_join(t, NULL);
    f->read_ret = r.ret;
    atomic_store(&f->reader_done, 1);
    pause();
    _exit(0);
}

struct cgroups {
    char parent[128], reader[128], throttled[128];
    int parent_fd, reader_fd, throttled_fd;
};

static int cgroups_set_up(struct cgroups *cg, const char *name)
{
    pid_t me = getpid();

    cg->parent_fd = cg->reader_fd = cg->throttled_fd = -1;
    snprintf(cg->parent, sizeof(cg->parent), CG_ROOT "/afork-%s-parent-%d", name, (int)me);
    snprintf(cg->reader, sizeof(cg->reader), CG_ROOT "/afork-%s-reader-%d", name, (int)me);
    snprintf(cg->throttled, sizeof(cg->throttled), CG_ROOT "/afork-%s-child-%d", name, (int)me);
    if (set_up_cgroup(cg->parent, "memory", "memory.swap.max", "0", &cg->parent_fd) != 0 ||
        set_up_cgroup(cg->reader, "memory", NULL, NULL, &cg->reader_fd) != 0 ||
        set_up_cgroup(cg->throttled, "cpu", "cpu.max", QUOTA, &cg->throttled_fd) != 0)
        return -1;
    return 0;
}

static void cgroups_remove(struct cgroups *cg)
{
    const char *dirs[] = { cg->parent, cg->reader, cg->throttled };
    int fds[] = { cg->parent_fd, cg->reader_fd, cg->throttled_fd };

    for (int i = 0; i < 3; i++) {
        if (fds[i] >= 0)
            close(fds[i]);
        if (rmdir(dirs[i]) != 0)
            info("rmdir %s: %s", dirs[i], strerror(errno));
    }
}

/* Kill and reap what is left of a round (-1: already reaped): the parent,
 * the reader, the child (ours once orphaned: we are a subreaper). */
static void reap_all(const struct foreign *f, pid_t parent, pid_t reader)
{
    int st;

    if (parent > 0)
        kill(parent, SIGKILL);
    if (reader > 0)
        kill(reader, SIGKILL);
    if (f->child > 0)
        kill(f->child, SIGKILL);
    while (waitpid(-1, &st, 0) > 0)
        ;
}

/* The OOM killer takes the parent: half its cgroup's usage, no swap. */
static int oom_kill_parent(const struct cgroups *cg)
{
    char path[256], value[32];
    long current;

    snprintf(path, sizeof(path), "%s/memory.current", cg->parent);
    current = read_long_file(path);
    snprintf(path, sizeof(path), "%s/memory.max", cg->parent);
    snprintf(value, sizeof(value), "%ld", current / 2);
    if (current <= 0 || write_file(path, value) != 0)
        return fail("memory.max = %s: %s", value, strerror(errno));
    return 0;
}

/* What a round measured, from just before the fork to after the exit. */
struct outcome {
    size_t tables;
    unsigned long long exits, failed, deferred;
    long long reader_pt0, reader_pt1;
    long long slack, max0, max1;    /* the parent's cgroup at its limit */
    char child_how[128];
};

/* The reader's cgroup kept none of the exit's copies, the child's snapshot
 * is exact, and enough was left for the exit to prove something. */
static int exit_verdict(struct foreign *f, struct outcome *o, const char *reader_cg, int active)
{
    long long charged = o->reader_pt1 - o->reader_pt0;
    int rc = 0;

    if (inject_here())
        charged = (long long)o->tables * PAGE_SIZE;
    if (o->reader_pt0 < 0 || o->reader_pt1 < 0)
        rc = fail("no pagetables line in %s/memory.stat", reader_cg);
    else if (o->exits && charged >= (long long)(o->exits * PAGE_SIZE / 2))
        rc = fail("the reader's cgroup was charged %lld bytes of page tables for the %llu "
                  "tables it gave at the parent's exit: charged to the task that dropped "
                  "the last reference, not the forking task's cgroup", charged, o->exits);
    else if (o->max1 != o->max0)
        rc = fail("the exit the reader ran took the parent's cgroup past memory.max (%lld "
                  "times, the limit %lld KiB over its usage): it copied the tables it could "
                  "have given", o->max1 - o->max0, o->slack / 1024);
    else if (active > 0 && o->exits < o->tables / 4)
        rc = fail("%llu of %zu tables were given at the exit: the child copied the rest "
                  "first, the test proves nothing", o->exits, o->tables);
    if (wait_flag(&f->child_checked) != 0)
        return rc ? rc : fail("the child never checked its snapshot");
    if (rc == 0 && f->child_bad)
        rc = fail("the child's snapshot has %llu wrong words", (unsigned long long)f->child_bad);
    atomic_store(&f->child_go, 1);
    wait_child(f->child, o->child_how, sizeof(o->child_how));
    f->child = -1;
    if (rc == 0 && strcmp(o->child_how, "exit 0") != 0)
        rc = fail("the child ended with %s", o->child_how);
    return rc;
}

/* The OOM-killed parent's exit copied nothing; its session failed and its
 * child was killed. */
static int oom_verdict(struct foreign *f, struct outcome *o, int active)
{
    int rc = 0;

    if (inject_here())
        o->exits = 1;
    if (o->exits)
        rc = fail("the OOM-killed parent's exit, run by the reader, copied %llu tables "
                  "for its child", o->exits);
    else if (active > 0 && o->deferred && !o->failed)
        rc = fail("the OOM-killed parent's session did not fail");
    /* A child that was not killed (nothing deferred) may go. */
    atomic_store(&f->child_go, 1);
    wait_child(f->child, o->child_how, sizeof(o->child_how));
    f->child = -1;
    if (rc == 0 && active > 0 && o->deferred && strcmp(o->child_how, "signal 9 (Killed)") != 0)
        rc = fail("the child of the OOM-killed parent ended with %s", o->child_how);
    return rc;
}

/* Once the parent has exited, its cgroup's limit: the usage and a quarter
 * of the page tables that copies of the region's tables would take. */
static int limit_parent_cgroup(const struct cgroups *cg, struct outcome *o)
{
    char path[256], value[32];
    long current;

    o->slack = (long long)(o->tables * PAGE_SIZE / 4);
    snprintf(path, sizeof(path), "%s/memory.current", cg->parent);
    current = read_long_file(path);
    o->max0 = cgroup_event(cg->parent, "max");
    snprintf(path, sizeof(path), "%s/memory.max", cg->parent);
    snprintf(value, sizeof(value), "%lld", current + o->slack);
    if (current <= 0 || o->max0 < 0 || write_file(path, value) != 0)
        return fail("memory.max = %s: %s", value, strerror(errno));
    return 0;
}

/* Fork, end the parent (exit or OOM kill), then let the reader drop the
 * last reference; the counters and charges around it into @o. Where the
 * parent exits, its cgroup is at its limit when the reader drops it. */
static int run_round(struct foreign *f, const struct cgroups *cg, pid_t *parent, int oom,
                     struct outcome *o)
{
    unsigned long long exit0, failed0, deferred0;
    char how[128];
    int rc = 0;

    o->reader_pt0 = cgroup_pagetables(cg->reader);
    exit0 = vmstat_counter("async_fork_copied_exit");
    failed0 = vmstat_counter("async_fork_sessions_failed");
    deferred0 = vmstat_counter("async_fork_deferred");
    atomic_store(&f->fork_now, 1);
    if (wait_flag(&f->forked) != 0)
        return fail("the parent did not fork");
    if (oom)
        rc = oom_kill_parent(cg);
    wait_child(*parent, how, sizeof(how));
    *parent = -1;
    if (rc == 0 && strcmp(how, oom ? "signal 9 (Killed)" : "exit 0") != 0)
        rc = fail("the parent ended with %s", how);
    if (rc == 0 && !oom)
        rc = limit_parent_cgroup(cg, o);
    /* The parent is gone: the reader's reference is the last. */
    atomic_store(&f->wake_reader, 1);
    if (wait_flag(&f->reader_done) != 0)
        return rc ? rc : fail("the reader's read never returned");
    if (!oom) {
        char path[256];

        o->max1 = cgroup_event(cg->parent, "max");
        snprintf(path, sizeof(path), "%s/memory.max", cg->parent);
        write_file(path, "max");
    }
    o->reader_pt1 = cgroup_pagetables(cg->reader);
    o->exits = vmstat_counter("async_fork_copied_exit") - exit0;
    o->failed = vmstat_counter("async_fork_sessions_failed") - failed0;
    o->deferred = vmstat_counter("async_fork_deferred") - deferred0;
    if (rc == 0 && f->read_ret != PAGE_SIZE)
        rc = fail("the reader's read of the pagemap returned %ld", f->read_ret);
    return rc;
}

static int foreign_round(int oom)
{
    struct foreign *f = mmap(NULL, sizeof(*f), PROT_READ | PROT_WRITE,
                             MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    struct outcome o = { .tables = oom ? scaled(512, 64) : scaled(256, 64) };
    int rc, active = afork_active();
    pid_t parent = -1, reader = -1;
    struct cgroups cg;

    if (f == MAP_FAILED)
        return fail("mmap: %s", strerror(errno));
    memset(f, 0, sizeof(*f));
    f->size = o.tables * HUGE_SIZE;
    rc = cgroups_set_up(&cg, oom ? "oom" : "exit");
    if (rc == 0) {
        parent = fork_into(cg.parent_fd);
        if (parent == 0)
            parent_main(f, cg.throttled_fd, oom);
        if (wait_flag(&f->parent_ready) != 0)
            rc = fail("the parent never filled its memory");
    }
    if (rc == 0) {
        reader = fork_into(cg.reader_fd);
        if (reader == 0)
            reader_main(f, parent);
        if (wait_flag(&f->reader_blocked) != 0)
            rc = fail("the reader's read of the pagemap never waited in its page");
    }
    if (rc == 0)
        rc = run_round(f, &cg, &parent, oom, &o);
    if (rc == 0) {
        info("%zu tables of 2 MiB; deferred %llu, given at the exit the reader ran %llu, "
             "sessions failed %llu%s", o.tables, o.deferred, o.exits, o.failed,
             active > 0 ? "" : " (no asynchronous fork)");
        info("the reader's cgroup, pagetables before the fork and after it ran the exit: "
             "%lld -> %lld bytes (the region's tables: %lld)", o.reader_pt0, o.reader_pt1,
             (long long)o.tables * PAGE_SIZE);
        if (!oom)
            info("the parent's cgroup at its usage + %lld KiB when the reader ran the exit: "
                 "memory.events max %lld -> %lld", o.slack / 1024, o.max0, o.max1);
        rc = oom ? oom_verdict(f, &o, active) : exit_verdict(f, &o, cg.reader, active);
        info("the child ended with %s", o.child_how);
    }
    reap_all(f, parent, reader);
    cgroups_remove(&cg);
    munmap(f, sizeof(*f));
    return rc;
}

static int foreign_test(int oom)
{
    int rc;

    if (!getenv("AFORK_GUEST"))
        return fail("this test changes cgroups: it runs only in the test guest (AFORK_GUEST=1)");
    if (prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0)
        return fail("PR_SET_CHILD_SUBREAPER: %s", strerror(errno));
    rc = foreign_round(oom);
    prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0);
    return rc;
}

static int foreign_exit(void)
{
    return foreign_test(0);
}

static int foreign_oom_exit(void)
{
    return foreign_test(1);
}

const struct test_case foreign_tests[] = {
    { "foreign-exit", "a parent exits while a reader of its pagemap holds its mm: the "
      "reader gives the child what it has not copied, charging the reader nothing", foreign_exit },
    { "foreign-oom-exit", "the same with the parent OOM-killed: the reader's exit copies "
      "nothing, the child is killed", foreign_oom_exit },
    { NULL, NULL, NULL },
};
