/* failrace.c -- sessions that fail while copies of their tables are under
 * way, with every kind of task touching the parent and the child.
 *
 *   failed-session-race  the child's copy of its page tables fails at a
 *                        random table (page allocations of the child made to
 *                        fail: fail_page_alloc with make-it-fail, which the
 *                        child inherits from the forking thread) while 4
 *                        threads of the parent write checked counters all
 *                        over the region (so they copy tables first), a
 *                        fifth thread forks again and again, and a sixth
 *                        reads and writes each child through /proc/PID/mem.
 *                        No write of the parent may be lost or torn, each
 *                        child that runs must see a consistent snapshot, and
 *                        the kernel must log no WARNING, BUG (Bad
 *                        rss-counter) or Bad page.
 *
 * Knobs: AFORK_FAILRACE_SECS bounds the run (default 60 s x AFORK_SCALE
 * where forks leave tables to the child, 10 s x AFORK_SCALE where they do
 * not: there is no session to fail then); AFORK_FAILRACE_FORKS=N runs
 * until N forks instead (a longer soak).
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
#include <sys/rseq.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define FAIL_DIR "/sys/kernel/debug/fail_page_alloc"
#define WRITERS 4
#define SEED 0x7ace
/* Writer t owns words COUNTER_WORD + 2t (a value) and + 2t + 1 (its
 * complement) of every page; they start at 0. The rest is the pattern. */
#define COUNTER_WORD 16
#define PROBE_WORD 40           /* a pattern word the /proc/PID/mem thread uses */
#define FAIL_PERCENT "1"        /* of the child's page allocations */
/* Writers 0 and 1 write random pages all over the region, so they copy
 * tables first, beside the child, all the time. Writers 2 and 3 write the
 * few pages around writer 0's last one, as the mem thread does in the
 * child: they fault on the table writer 0 is copying, and write the same
 * pages as it. */
#define HOT_PAGES 8
#define SPREAD_WRITERS 2
#define MEM_SEEN 256

struct race {
    uint64_t *base;
    size_t npages;
    atomic_int stop;
    atomic_int child;           /* the newest child, for the mem thread */
    atomic_size_t hot;          /* the first of the HOT_PAGES everyone writes now */
    /* results */
    atomic_ulong writes, lost, torn, forks, fork_errors, children_ok, children_killed;
    atomic_ulong children_bad, mem_ops, mem_bad, mem_holes;
    atomic_int mem_on;          /* the child the mem thread works on */
    struct {                    /* what it read of each child, by pid */
        atomic_int pid;
        atomic_int wrong;
    } mem_seen[MEM_SEEN];
    char first_bad[160];
    atomic_int first_bad_set;
    unsigned long max_forks;
    double deadline;
};

struct writer {
    struct race *r;
    int id;
    uint64_t seq;
    uint32_t *expect;           /* the seq last written to each page, 0 none */
};

/* Keep the first thing found wrong, for the verdict. */
static void note_bad(struct race *r, const char *what, size_t page, uint64_t a, uint64_t b)
{
    if (atomic_exchange(&r->first_bad_set, 1) == 0)
        snprintf(r->first_bad, sizeof(r->first_bad), "page %zu: %s 0x%llx / 0x%llx", page,
                 what, (unsigned long long)a, (unsigned long long)b);
}

static int stopping(struct race *r)
{
    return atomic_load_explicit(&r->stop, memory_order_relaxed);
}

/* The words of writer @w in page @p hold what it wrote last; 0 if fine. */
static int writer_check(struct writer *w, size_t p)
{
    volatile uint64_t *word = w->r->base + p * WORDS_PER_PAGE + COUNTER_WORD + 2 * w->id;
    uint64_t a = word[0], b = word[1];
    uint64_t want = w->expect[p] ? mark_value(w->id, w->expect[p]) : 0;

    if (a == want && b == (want ? ~want : 0))
        return 0;
    if (a == want || b == (want ? ~want : 0))
        atomic_fetch_add(&w->r->torn, 1);
    else
        atomic_fetch_add(&w->r->lost, 1);
    note_bad(w->r, "a writer's two words are not its last write but", p, a, b);
    return -1;
}

static void *writer_main(void *arg)
{
    struct writer *w = arg;
    uint64_t rng = 0x5eed0 + (uint64_t)w->id, v;
    volatile uint64_t *word;
    size_t p;

    while (!stopping(w->r)) {
        if (w->id < SPREAD_WRITERS)
            p = rng_below(&rng, w->r->npages);
        else
            p = atomic_load(&w->r->hot) + rng_below(&rng, HOT_PAGES);
        if (w->id == 0)
            atomic_store(&w->r->hot, p & ~(size_t)(HOT_PAGES - 1));
        word = w->r->base + p * WORDS_PER_PAGE + COUNTER_WORD + 2 * w->id;
        writer_check(w, p);
        v = mark_value(w->id, ++w->seq);
        word[0] = v;
        word[1] = ~v;
        w->expect[p] = (uint32_t)w->seq;
        atomic_fetch_add_explicit(&w->r->writes, 1, memory_order_relaxed);
    }
    return NULL;
}

/* The child: its snapshot is the parent's memory at fork. A writer may have
 * been between its two words then (one pair each), no more. */
static void child_main(struct race *r)
{
    const uint64_t *page;
    int torn = 0, bad = 0;

    write_file("/proc/thread-self/make-it-fail", "0");
    for (size_t p = 0; p < r->npages && !bad; p++) {
        page = r->base + p * WORDS_PER_PAGE;
        if (page[0] != pattern_base(SEED, p) || page[PROBE_WORD] != pattern_base(SEED, p) +
            PROBE_WORD || page[WORDS_PER_PAGE - 1] != pattern_base(SEED, p) + WORDS_PER_PAGE - 1)
            bad = 1;
        for (int t = 0; t < WRITERS; t++) {
            uint64_t a = page[COUNTER_WORD + 2 * t], b = page[COUNTER_WORD + 2 * t + 1];

            if (a == 0 && b == 0)
                continue;
            if (a >> 48 != mark_value(t, 0) >> 48)
                bad = 1;        /* not a value writer t writes */
            else if (b != ~a)
                torn++;
        }
    }
    _exit(bad || torn > WRITERS ? 3 : 0);
}

/*
 * Reap a child, and judge what the mem thread read of it. A child whose
 * session failed is SIGKILLed; the tables it did not copy are missing, so a
 * read there finds a hole (zeros): allowed, it never runs. A child that
 * completed must have shown the parent's memory at fork.
 */
static void reap(struct race *r, pid_t pid)
{
    double t0 = now_seconds();
    int status, wrong = 0;

    while (atomic_load(&r->mem_on) == pid && now_seconds() - t0 < 0.5)
        usleep(100);
    if (atomic_load(&r->mem_seen[pid % MEM_SEEN].pid) == pid)
        wrong = atomic_load(&r->mem_seen[pid % MEM_SEEN].wrong);
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            return;
    if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) {
        atomic_fetch_add(&r->children_killed, 1);   /* its session failed */
        atomic_fetch_add(&r->mem_holes, wrong);
    } else if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
        atomic_fetch_add(&r->children_ok, 1);
        atomic_fetch_add(&r->mem_bad, wrong);
        if (wrong)
            note_bad(r, "(none) a completed child showed wrong words through /proc/PID/mem: "
                     "count / pid", 0, (uint64_t)wrong, (uint64_t)pid);
    } else {
        atomic_fetch_add(&r->children_bad, 1);
        note_bad(r, "(none) a child ended with wait status / pid", 0, (uint64_t)status,
                 (uint64_t)pid);
    }
}

static int more_forks(struct race *r)
{
    if (stopping(r))
        return 0;
    if (r->max_forks)
        return atomic_load(&r->forks) < r->max_forks;
    return now_seconds() < r->deadline;
}

/* No restartable sequence for this thread (nor its children): the kernel
 * updates its area on return to user space, and a write fault there that
 * an injected failure stops is a SIGSEGV, where a fault of user code
 * would only be retried. */
static void rseq_off(void)
{
    char *area = (char *)__builtin_thread_pointer() + __rseq_offset;

    if (__rseq_size && syscall(__NR_rseq, area, __rseq_size, 1 /* UNREGISTER */, RSEQ_SIG) != 0)
        syscall(__NR_rseq, area, 32, 1 /* UNREGISTER */, RSEQ_SIG);
}

/* Fork, with this thread's page allocations failing at random: the child
 * inherits that and fails its copy somewhere. Two children at most are
 * alive, so a fork often comes while the last session is still going on. */
static void *forker_main(void *arg)
{
    struct race *r = arg;
    uint64_t rng = 0xf0f0;
    pid_t older = 0, pid;

    rseq_off();
    while (more_forks(r)) {
        write_file("/proc/thread-self/make-it-fail", "1");
        pid = fork();
        if (pid == 0)
            child_main(r);
        write_file("/proc/thread-self/make-it-fail", "0");
        atomic_fetch_add(&r->forks, 1);
        if (pid < 0) {
            atomic_fetch_add(&r->fork_errors, 1);   /* an injected failure in fork() */
            usleep(1000);
            continue;
        }
        atomic_store(&r->child, pid);
        if (older)
            reap(r, older);
        older = pid;
        usleep(rng_below(&rng, 2000));
    }
    if (older)
        reap(r, older);
    atomic_store(&r->stop, 1);
    return NULL;
}

/* Read and write back words of each new child through /proc/PID/mem: a
 * foreign task faulting into a child, which must wait for the child's copy
 * and then find what the parent had at fork. */
static void *mem_main(void *arg)
{
    struct race *r = arg;
    uint64_t rng = 0x3e3, v;
    pid_t last = 0, pid;
    char path[64];
    int fd, wrong;
    off_t off;
    size_t p;

    while (!stopping(r)) {
        pid = atomic_load(&r->child);
        if (pid == 0 || pid == last) {
            usleep(200);
            continue;
        }
        last = pid;
        atomic_store(&r->mem_on, pid);
        snprintf(path, sizeof(path), "/proc/%d/mem", (int)pid);
        fd = open(path, O_RDWR | O_CLOEXEC);
        if (fd < 0) {
            atomic_store(&r->mem_on, 0);
            continue;
        }
        wrong = 0;
        for (int i = 0; i < 64 && !stopping(r); i++) {
            p = atomic_load(&r->hot) + rng_below(&rng, HOT_PAGES);
            off = (off_t)(uintptr_t)(r->base + p * WORDS_PER_PAGE + PROBE_WORD);
            if (pread(fd, &v, sizeof(v), off) != (ssize_t)sizeof(v))
                break;      /* the child is gone */
            atomic_fetch_add(&r->mem_ops, 1);
            wrong += v != pattern_base(SEED, p) + PROBE_WORD;
            /* The same value back: the child's snapshot does not change. */
            if (pwrite(fd, &v, sizeof(v), off) != (ssize_t)sizeof(v))
                break;
            atomic_fetch_add(&r->mem_ops, 1);
        }
        close(fd);
        atomic_store(&r->mem_seen[pid % MEM_SEEN].wrong, wrong);
        atomic_store(&r->mem_seen[pid % MEM_SEEN].pid, pid);
        atomic_store(&r->mem_on, 0);
    }
    return NULL;
}

/* fail_page_alloc for the tasks with make-it-fail only, order-0 pages with
 * reclaim included (page tables), quietly. 0, 1 not available, -1 error. */
static int injection_setup(void)
{
    static const char *const settings[][2] = {
        { "task-filter", "Y" }, { "probability", "0" }, { "interval", "1" },
        { "times", "-1" }, { "space", "0" }, { "verbose", "0" }, { "min-order", "0" },
        { "ignore-gfp-wait", "N" }, { "ignore-gfp-highmem", "N" },
        { "probability", FAIL_PERCENT },
    };

    return fault_attr_setup(FAIL_DIR, settings, sizeof(settings) / sizeof(settings[0]));
}

static void injection_off(void)
{
    write_file(FAIL_DIR "/probability", "0");
}

/* The parent's memory at the end: the writers' last values and the pattern. */
static int region_intact(struct race *r, struct writer *w)
{
    for (size_t p = 0; p < r->npages; p++) {
        const uint64_t *page = r->base + p * WORDS_PER_PAGE;

        for (int t = 0; t < WRITERS; t++)
            if (writer_check(&w[t], p) != 0)
                return fail("after the run, %s", r->first_bad);
        for (size_t i = 0; i < WORDS_PER_PAGE; i++) {
            if (i >= COUNTER_WORD && i < COUNTER_WORD + 2 * WRITERS)
                continue;
            if (page[i] != pattern_base(SEED, p) + i)
                return fail("after the run, word %zu of page %zu is 0x%llx, not 0x%llx", i, p,
                            (unsigned long long)page[i],
                            (unsigned long long)(pattern_base(SEED, p) + i));
        }
    }
    return 0;
}

static int failed_session_race(void)
{
    int active = afork_active(), rc = 0, injecting;
    struct race r = { 0 };
    struct writer w[WRITERS];
    pthread_t wt[WRITERS], forker, mem;
    int before[NSPLATS], after[NSPLATS];
    unsigned long long s0, f0, d0, c0, sessions, failed, deferred, copied;
    char last[256] = "";
    const char *env;

    if (!getenv("AFORK_GUEST"))
        return fail("this test injects page allocation failures: it runs only in the test "
                    "guest (AFORK_GUEST=1)");
    if (sysconf(_SC_NPROCESSORS_ONLN) < 2)
        return fail("needs 2 CPUs: the child copies beside the parent's threads");
    injecting = injection_setup();
    if (injecting < 0)
        return -1;
    if (injecting > 0) {
        if (active > 0)
            return fail("no " FAIL_DIR " (CONFIG_FAIL_PAGE_ALLOC, "
                        "CONFIG_FAULT_INJECTION_DEBUG_FS): no session can be made to fail, "
                        "the test proves nothing");
        info("no " FAIL_DIR ": the run goes on without injected failures");
    }
    r.npages = scaled(128, 32) * MIB / PAGE_SIZE;
    r.base = map_anon(r.npages * PAGE_SIZE, 1);
    madvise(r.base, r.npages * PAGE_SIZE, MADV_NOHUGEPAGE);
    fill_pages(r.base, 0, r.npages, SEED);
    for (size_t p = 0; p < r.npages; p++)
        memset(r.base + p * WORDS_PER_PAGE + COUNTER_WORD, 0, 2 * WRITERS * sizeof(uint64_t));
    env = getenv("AFORK_FAILRACE_FORKS");
    r.max_forks = env ? strtoul(env, NULL, 10) : 0;
    env = getenv("AFORK_FAILRACE_SECS");
    r.deadline = now_seconds() + (env ? atof(env) : (active > 0 ? 60 : 10) * knobs.scale);

    count_splats(before, NULL, 0);
    s0 = vmstat_counter("async_fork_sessions");
    f0 = vmstat_counter("async_fork_sessions_failed");
    d0 = vmstat_counter("async_fork_deferred");
    c0 = vmstat_counter("async_fork_copied_fault");
    for (int t = 0; t < WRITERS; t++) {
        w[t] = (struct writer){ .r = &r, .id = t };
        w[t].expect = calloc(r.npages, sizeof(*w[t].expect));
        if (!w[t].expect || pthread_create(&wt[t], NULL, writer_main, &w[t]) != 0)
            die_errno("writer thread");
    }
    if (pthread_create(&mem, NULL, mem_main, &r) != 0 ||
        pthread_create(&forker, NULL, forker_main, &r) != 0)
        die_errno("fork / mem thread");
    pthread_join(forker, NULL);
    pthread_join(mem, NULL);
    for (int t = 0; t < WRITERS; t++)
        pthread_join(wt[t], NULL);
    if (injecting == 0)
        injection_off();
    sessions = vmstat_counter("async_fork_sessions") - s0;
    failed = vmstat_counter("async_fork_sessions_failed") - f0;
    deferred = vmstat_counter("async_fork_deferred") - d0;
    copied = vmstat_counter("async_fork_copied_fault") - c0;
    count_splats(after, last, sizeof(last));

    info("%lu forks (%lu failed in fork()), %llu sessions, %llu failed; %llu tables deferred, "
         "%llu copied first by the writers' faults", atomic_load(&r.forks),
         atomic_load(&r.fork_errors), sessions, failed, deferred, copied);
    info("children: %lu exited 0, %lu SIGKILLed (failed session), %lu wrong; %lu writes by "
         "the parent, %lu lost, %lu torn; %lu /proc/PID/mem reads and writes, %lu wrong "
         "in completed children, %lu holes in failed ones",
         atomic_load(&r.children_ok), atomic_load(&r.children_killed),
         atomic_load(&r.children_bad), atomic_load(&r.writes), atomic_load(&r.lost),
         atomic_load(&r.torn), atomic_load(&r.mem_ops), atomic_load(&r.mem_bad),
         atomic_load(&r.mem_holes));
    if (inject_here())
        r.base[7 * WORDS_PER_PAGE + COUNTER_WORD + 2] ^= 1;     /* a lost write */
    if (atomic_load(&r.lost) || atomic_load(&r.torn))
        rc = fail("the parent lost %lu and tore %lu of its writes; first: %s",
                  atomic_load(&r.lost), atomic_load(&r.torn), r.first_bad);
    if (rc == 0 && (atomic_load(&r.children_bad) || atomic_load(&r.mem_bad)))
        rc = fail("%lu children saw a wrong snapshot or ended wrongly, %lu words read "
                  "through /proc/PID/mem of completed children were wrong; first: %s", atomic_load(&r.children_bad),
                  atomic_load(&r.mem_bad), r.first_bad);
    if (rc == 0)
        rc = region_intact(&r, w);
    if (rc == 0)
        rc = check_splats(before, after, last);
    if (rc == 0 && active > 0 && (failed < 3 || sessions <= failed || !deferred || !copied))
        rc = fail("%llu of %llu sessions failed, %llu tables deferred, %llu copied first by a "
                  "fault: not the mix the test needs, it proves nothing", failed, sessions,
                  deferred, copied);
    if (rc == 0 && (!atomic_load(&r.mem_ops) || !atomic_load(&r.children_ok)))
        rc = fail("no child was read through /proc/PID/mem or none completed: the test "
                  "proves nothing");
    for (int t = 0; t < WRITERS; t++)
        free(w[t].expect);
    unmap(r.base, r.npages * PAGE_SIZE);
    return rc;
}

const struct test_case failrace_tests[] = {
    { "failed-session-race", "children's copies fail at random (injected page allocation "
      "failures) while 4 parent threads write, one re-forks and one uses /proc/PID/mem: no lost "
      "or torn write, no WARNING or Bad rss-counter", failed_session_race },
    { NULL, NULL, NULL },
};
