/* snapshot.c -- the child sees exactly the pre-fork memory while the parent,
 * right after fork, writes to random pages from several threads at once.
 *
 *   snapshot-threads  GBs of patterned memory, parent threads write at once
 *   fork-loop         thousands of forks of a small region straddling PMDs
 */
#include "common.h"

#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define WRITER_THREADS 3

/* The region and the write plan shared by the parent's writer threads. */
struct write_plan {
    uint64_t *base;
    size_t npages;
    size_t writes_per_writer;
    int writers;            /* threads + the main thread */
    uint64_t round;
    atomic_uint go;         /* generation: bumped to start a round */
    atomic_uint done;       /* writers finished in this round */
    atomic_int quit;
};

struct writer_arg {
    struct write_plan *plan;
    int id;
};

static void futex_wait(atomic_uint *word, unsigned seen)
{
    syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, seen, NULL, NULL, 0);
}

static void futex_wake_all(atomic_uint *word)
{
    syscall(SYS_futex, word, FUTEX_WAKE_PRIVATE, 0x7fffffff, NULL, NULL, 0);
}

static size_t gcd(size_t a, size_t b)
{
    while (b) {
        size_t t = a % b;

        a = b;
        b = t;
    }
    return a;
}

/* Page and word offset of write `i` by writer `w` in `round`: each writer
 * owns the pages p with p % writers == w and visits distinct pages. */
static size_t plan_page(const struct write_plan *pl, int w, size_t i)
{
    size_t per = (pl->npages - (size_t)w + (size_t)pl->writers - 1) / (size_t)pl->writers;
    size_t step = 7919, off = (size_t)(pl->round * 104729) % per;

    while (gcd(per, step) != 1)
        step++;
    return ((off + i * step) % per) * (size_t)pl->writers + (size_t)w;
}

static size_t plan_word(const struct write_plan *pl, int w, size_t i)
{
    return (size_t)((pl->round * 31 + (uint64_t)w * 131 + i * 17) % WORDS_PER_PAGE);
}

static uint64_t plan_value(const struct write_plan *pl, int w, size_t i)
{
    return mark_value((uint64_t)w, pl->round << 32 | i);
}

static size_t writes_for(const struct write_plan *pl, int w)
{
    size_t per = (pl->npages - (size_t)w + (size_t)pl->writers - 1) / (size_t)pl->writers;

    return pl->writes_per_writer < per ? pl->writes_per_writer : per;
}

static void do_writes(struct write_plan *pl, int w)
{
    size_t n = writes_for(pl, w);

    for (size_t i = 0; i < n; i++)
        pl->base[plan_page(pl, w, i) * WORDS_PER_PAGE + plan_word(pl, w, i)] = plan_value(pl, w, i);
}

/* Undo a round's writes, restoring the pattern word by word. */
static void undo_writes(struct write_plan *pl, uint64_t seed)
{
    for (int w = 0; w < pl->writers; w++) {
        size_t n = writes_for(pl, w);

        for (size_t i = 0; i < n; i++) {
            size_t p = plan_page(pl, w, i), k = plan_word(pl, w, i);

            pl->base[p * WORDS_PER_PAGE + k] = pattern_base(seed, p) + k;
        }
    }
}

/* Check the parent's own view: its writes present, everything else pattern. */
static size_t check_parent_view(struct write_plan *pl, uint64_t seed)
{
    size_t bad = 0;

    for (int w = 0; w < pl->writers; w++) {
        size_t n = writes_for(pl, w);

        for (size_t i = 0; i < n; i++) {
            size_t p = plan_page(pl, w, i), k = plan_word(pl, w, i);

            bad += pl->base[p * WORDS_PER_PAGE + k] != plan_value(pl, w, i);
        }
    }
    undo_writes(pl, seed);
    bad += check_pages(pl->base, 0, pl->npages, seed, NULL);
    return bad;
}

static void *writer_thread(void *arg)
{
    struct writer_arg *wa = arg;
    struct write_plan *pl = wa->plan;
    unsigned seen = 0;

    for (;;) {
        while (atomic_load(&pl->go) == seen && !atomic_load(&pl->quit))
            futex_wait(&pl->go, seen);
        if (atomic_load(&pl->quit))
            return NULL;
        seen = atomic_load(&pl->go);
        do_writes(pl, wa->id);
        atomic_fetch_add(&pl->done, 1);
        futex_wake_all(&pl->done);
    }
}

/* Wait until all writer threads have finished this round. */
static void wait_writers(struct write_plan *pl)
{
    unsigned d;

    while ((d = atomic_load(&pl->done)) < (unsigned)(pl->writers - 1))
        futex_wait(&pl->done, d);
}

/* Child: wait until the parent's writers are done, then check everything. */
static void snapshot_child(struct write_plan *pl, uint64_t seed, int go_fd, int rep_fd)
{
    struct report r = { 0 };
    size_t bad_page = 0;

    wait_byte(go_fd);
    if (inject_here())
        pl->base[(pl->npages / 2) * WORDS_PER_PAGE] ^= 1;
    r.bad_words = check_pages(pl->base, 0, pl->npages, seed, &bad_page);
    r.bad_page = bad_page;
    r.checked_pages = pl->npages;
    send_report(rep_fd, &r);
    _exit(r.bad_words ? 1 : 0);
}

/* One fork round: writers start the moment fork() returns in the parent. */
static int snapshot_round(struct write_plan *pl, uint64_t seed)
{
    int go[2], rep[2], status, rc = 0;
    struct report r;
    char how[96];
    pid_t pid;

    pipe_or_die(go);
    pipe_or_die(rep);
    atomic_store(&pl->done, 0);
    pid = fork_or_die();
    if (pid == 0)
        snapshot_child(pl, seed, go[0], rep[1]);
    atomic_fetch_add(&pl->go, 1);
    futex_wake_all(&pl->go);
    do_writes(pl, 0);
    parent_ends(go, rep);
    wait_writers(pl);
    send_byte(go[1]);
    if (recv_report(rep[0], &r) != 0)
        rc = fail("round %llu: no report from the child", (unsigned long long)pl->round);
    status = wait_child(pid, how, sizeof(how));
    if (rc == 0 && r.bad_words)
        rc = fail("round %llu: child saw %llu wrong words over %llu pages, first bad page %llu",
                  (unsigned long long)pl->round, (unsigned long long)r.bad_words,
                  (unsigned long long)r.checked_pages, (unsigned long long)r.bad_page);
    if (rc == 0 && !exited_ok(status))
        rc = fail("round %llu: child ended with %s", (unsigned long long)pl->round, how);
    close_pair(go);
    close_pair(rep);
    return rc;
}

static int snapshot_threads(void)
{
    size_t size = scaled(2048, 64) * MIB;
    int rounds = (int)scaled(3, 1), rc = 0;
    uint64_t seed = 0x5a17;
    struct write_plan pl = { .writers = WRITER_THREADS + 1 };
    pthread_t th[WRITER_THREADS];
    struct writer_arg args[WRITER_THREADS];
    double t0 = now_seconds();

    pl.base = map_anon(size, 0);
    pl.npages = size / PAGE_SIZE;
    pl.writes_per_writer = scaled(16384, 512);
    fill_pages(pl.base, 0, pl.npages, seed);
    info("%zu MiB patterned in %.1f s; %d rounds, %d writers x %zu page writes",
         size / MIB, now_seconds() - t0, rounds, pl.writers, pl.writes_per_writer);
    for (int i = 0; i < WRITER_THREADS; i++) {
        args[i] = (struct writer_arg){ &pl, i + 1 };
        if (pthread_create(&th[i], NULL, writer_thread, &args[i]) != 0)
            die_errno("pthread_create");
    }
    for (int i = 0; i < rounds && rc == 0; i++) {
        pl.round = (uint64_t)i + 1;
        rc = snapshot_round(&pl, seed);
        if (rc == 0 && check_parent_view(&pl, seed) != 0)
            rc = fail("round %d: the parent does not see exactly its own writes", i + 1);
    }
    atomic_store(&pl.quit, 1);
    atomic_fetch_add(&pl.go, 1);
    futex_wake_all(&pl.go);
    for (int i = 0; i < WRITER_THREADS; i++)
        pthread_join(th[i], NULL);
    unmap(pl.base, size);
    return rc;
}

/* fork-loop: the region starts 1 MiB before a 2 MiB boundary, so its PTE
 * tables are partly used; the parent writes a few pages, the child checks
 * those pages plus a random sample, thousands of times. */
#define LOOP_PAGES 2048           /* 8 MiB */
#define LOOP_WRITES 16
#define LOOP_SAMPLE 16

static void loop_pick(uint64_t iter, size_t *pages, int n)
{
    uint64_t st = iter * 0x9e3779b97f4a7c15ULL + 1;

    for (int i = 0; i < n; i++)
        pages[i] = (size_t)rng_below(&st, LOOP_PAGES);
}

static void loop_child(uint64_t *base, uint64_t iter, uint64_t seed, int go_fd)
{
    size_t pages[LOOP_WRITES + LOOP_SAMPLE], bad = 0;

    wait_byte(go_fd);
    loop_pick(iter, pages, LOOP_WRITES + LOOP_SAMPLE);
    if (inject_here() && iter == 7)
        base[pages[0] * WORDS_PER_PAGE] ^= 1;
    for (int i = 0; i < LOOP_WRITES + LOOP_SAMPLE; i++)
        bad += check_pages(base + pages[i] * WORDS_PER_PAGE, pages[i], 1, seed, NULL);
    _exit(bad ? 1 : 0);
}

static void loop_parent_writes(uint64_t *base, uint64_t iter, int undo, uint64_t seed)
{
    size_t pages[LOOP_WRITES];

    loop_pick(iter, pages, LOOP_WRITES);
    for (int i = 0; i < LOOP_WRITES; i++) {
        size_t k = (iter + (uint64_t)i) % WORDS_PER_PAGE;
        uint64_t *w = &base[pages[i] * WORDS_PER_PAGE + k];

        *w = undo ? pattern_base(seed, pages[i]) + k : mark_value(1, iter);
    }
}

static int fork_loop(void)
{
    unsigned long iters = scaled(3000, 200);
    uint64_t seed = 0x100f, *base;
    char *raw = map_anon(LOOP_PAGES * PAGE_SIZE + 2 * HUGE_SIZE, 1);
    char how[96];
    int go[2], rc = 0;

    base = (uint64_t *)(raw + HUGE_SIZE / 2);
    fill_pages(base, 0, LOOP_PAGES, seed);
    info("%lu forks of an 8 MiB region straddling 2 MiB boundaries", iters);
    for (unsigned long it = 0; it < iters && rc == 0; it++) {
        pid_t pid;
        int status;

        pipe_or_die(go);
        pid = fork_or_die();
        if (pid == 0)
            loop_child(base, it, seed, go[0]);
        loop_parent_writes(base, it, 0, seed);
        close_end(go, 0);
        send_byte(go[1]);
        status = wait_child(pid, how, sizeof(how));
        close_pair(go);
        if (!exited_ok(status))
            rc = fail("fork %lu: the child saw a wrong snapshot or died (%s)", it, how);
        loop_parent_writes(base, it, 1, seed);
    }
    if (rc == 0 && check_pages(base, 0, LOOP_PAGES, seed, NULL))
        rc = fail("the parent's region is wrong after %lu forks", iters);
    unmap(raw, LOOP_PAGES * PAGE_SIZE + 2 * HUGE_SIZE);
    return rc;
}

const struct test_case snapshot_tests[] = {
    { "snapshot-threads", "GBs of patterned memory; 4 parent threads write right after fork; child checks all", snapshot_threads },
    { "fork-loop", "thousands of forks; parent writes at once; child checks written + sampled pages", fork_loop },
    { NULL, NULL, NULL },
};
