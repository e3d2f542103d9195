/* kinds.c -- fork of the different kinds of memory: THP regions, private
 * file mappings, MAP_SHARED anonymous / file / memfd memory (changes visible
 * across), mlock'ed memory, userfaultfd-registered memory.
 */
#include "common.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Parent-side work run right after fork; returns 0 or fail(). */
typedef int (*after_fork_fn)(void *ctx);
/* Child-side check; returns the number of wrong words. */
typedef size_t (*child_check_fn)(void *ctx);

/* Fork; the parent runs `after` at once, then lets the child run `check`. */
static int fork_and_check(after_fork_fn after, child_check_fn check, void *ctx)
{
    int go[2], rep[2], rc, got, status;
    struct report r = { 0 };
    char how[96];
    pid_t pid;

    pipe_or_die(go);
    pipe_or_die(rep);
    pid = fork_or_die();
    if (pid == 0) {
        wait_byte(go[0]);
        r.bad_words = check(ctx);
        send_report(rep[1], &r);
        _exit(r.bad_words ? 1 : 0);
    }
    parent_ends(go, rep);
    rc = after(ctx);
    send_byte(go[1]);
    got = recv_report(rep[0], &r);
    status = wait_child(pid, how, sizeof(how));
    close_pair(go);
    close_pair(rep);
    if (got != 0)
        return fail("the child sent no report (%s)", how);
    if (r.bad_words)
        return fail("the child saw %llu wrong words", (unsigned long long)r.bad_words);
    if (!exited_ok(status))
        return fail("the child ended with %s", how);
    return rc;
}

/* Flip a word the child checks, when this test is the injected one. */
static void maybe_inject(uint64_t *base, size_t npages)
{
    if (inject_here())
        base[(npages / 2) * WORDS_PER_PAGE + 1] ^= 4;
}

/* --- private memory with parent marks (THP, mlock, private file) ------- */

struct marked_region {
    uint64_t *base;
    size_t npages;
    uint64_t seed;
    size_t stride;          /* the parent marks word 0 of every stride-th page */
    uint64_t round;
};

static void write_marks(struct marked_region *m)
{
    for (size_t p = 0; p < m->npages; p += m->stride)
        m->base[p * WORDS_PER_PAGE] = mark_value(4, p << 8 | m->round);
}

static size_t check_marks(struct marked_region *m)
{
    size_t bad = 0;

    for (size_t p = 0; p < m->npages; p++) {
        uint64_t *w = m->base + p * WORDS_PER_PAGE;
        int marked = p % m->stride == 0;

        if (marked && w[0] != mark_value(4, p << 8 | m->round))
            bad++;
        bad += check_pages(w, p, 1, m->seed, NULL) - (marked ? 1 : 0);
    }
    return bad;
}

static void undo_marks(struct marked_region *m)
{
    for (size_t p = 0; p < m->npages; p += m->stride)
        m->base[p * WORDS_PER_PAGE] = pattern_base(m->seed, p);
}

static int marks_after_fork(void *ctx)
{
    write_marks(ctx);
    return 0;
}

static size_t region_unchanged(void *ctx)
{
    struct marked_region *m = ctx;

    maybe_inject(m->base, m->npages);
    return check_pages(m->base, 0, m->npages, m->seed, NULL);
}

/* Fork `rounds` times; after each, the parent must see exactly its marks. */
static int marked_rounds(struct marked_region *m, int rounds, int (*after)(void *))
{
    for (int i = 0; i < rounds; i++) {
        m->round = (uint64_t)i + 1;
        if (fork_and_check(after, region_unchanged, m) != 0)
            return -1;
        if (check_marks(m) != 0)
            return fail("round %d: the parent does not see exactly its own writes", i + 1);
        undo_marks(m);
    }
    return 0;
}

static int thp_after_fork(void *ctx)
{
    struct marked_region *m = ctx;

    write_marks(m);
    /* Zap one 4 KiB page inside a huge page: the PMD must split. */
    if (madvise(m->base + 3 * WORDS_PER_PAGE, PAGE_SIZE, MADV_DONTNEED) != 0)
        return fail("madvise(DONTNEED) in a huge page: %s", strerror(errno));
    fill_pages(m->base + 3 * WORDS_PER_PAGE, 3, 1, m->seed);
    return 0;
}

static int thp_regions(void)
{
    size_t size = scaled(128, 16) * MIB;
    struct marked_region m = { map_anon(size, 1), size / PAGE_SIZE, 0x7a9, 37, 0 };
    long huge_kb;
    int rc;

    if (madvise(m.base, size, MADV_HUGEPAGE) != 0)
        return fail("madvise(HUGEPAGE): %s", strerror(errno));
    fill_pages(m.base, 0, m.npages, m.seed);
    huge_kb = smaps_kb(m.base, size, "AnonHugePages");
    info("%zu MiB with MADV_HUGEPAGE: %ld kB in huge pages", size / MIB, huge_kb);
    if (huge_kb < (long)(size / 1024 / 2))
        return fail("only %ld kB of %zu kB are huge pages: THP not in use", huge_kb, size / 1024);
    rc = marked_rounds(&m, (int)scaled(4, 1), thp_after_fork);
    unmap(m.base, size);
    return rc;
}

static int mlock_after_fork(void *ctx)
{
    struct marked_region *m = ctx;

    write_marks(m);
    if (munlock(m->base, m->npages * PAGE_SIZE / 2) != 0 ||
        mlock(m->base, m->npages * PAGE_SIZE / 2) != 0)
        return fail("munlock/mlock after fork: %s", strerror(errno));
    return 0;
}

static size_t mlock_child_check(void *ctx)
{
    long locked = status_kb("VmLck");

    /* Locks are not inherited by the child. */
    return region_unchanged(ctx) + (locked != 0);
}

static int mlocked(void)
{
    size_t size = scaled(32, 8) * MIB;
    struct marked_region m = { map_anon(size, 0), size / PAGE_SIZE, 0x3c3, 5, 0 };
    int rc = 0;

    fill_pages(m.base, 0, m.npages, m.seed);
    if (mlock(m.base, size) != 0)
        return fail("mlock %zu MiB: %s", size / MIB, strerror(errno));
    if (status_kb("VmLck") < (long)(size / 1024))
        return fail("VmLck is %ld kB after mlock of %zu kB", status_kb("VmLck"), size / 1024);
    for (int i = 0; i < (int)scaled(4, 1) && rc == 0; i++) {
        m.round = (uint64_t)i + 1;
        rc = fork_and_check(mlock_after_fork, mlock_child_check, &m);
        if (rc == 0 && check_marks(&m) != 0)
            rc = fail("round %d: the parent does not see exactly its own writes", i + 1);
        undo_marks(&m);
    }
    if (rc == 0 && status_kb("VmLck") < (long)(size / 1024))
        rc = fail("the parent lost its memory lock (VmLck %ld kB)", status_kb("VmLck"));
    unmap(m.base, size);
    return rc;
}

/* A file on tmpfs holding pattern `seed`; returns the descriptor. */
static int pattern_file(const char *tag, size_t npages, uint64_t seed)
{
    char path[64];
    uint64_t *page = map_anon(PAGE_SIZE, 0);
    int fd;

    snprintf(path, sizeof(path), "/tmp/afork-%s-%d", tag, (int)getpid());
    fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        die_errno("open a file in /tmp");
    unlink(path);
    for (size_t p = 0; p < npages; p++) {
        fill_pages(page, p, 1, seed);
        if (pwrite(fd, page, PAGE_SIZE, (off_t)(p * PAGE_SIZE)) != (ssize_t)PAGE_SIZE)
            die_errno("pwrite");
    }
    unmap(page, PAGE_SIZE);
    return fd;
}

/* Private file mapping: before fork the parent rewrites every 5th page
 * with another pattern (private anonymous copies that differ from the
 * file); after fork it marks pages. The child must see file pages and its
 * pre-fork private copies; the file itself never changes. */
#define PRIVATE_STRIDE 5

struct private_file {
    struct marked_region m;  /* m.seed: the file's pattern */
    uint64_t private_seed;   /* pattern of the pre-fork private copies */
    int fd;
};

static uint64_t private_seed_of(const struct private_file *pf, size_t page)
{
    return page % PRIVATE_STRIDE == 0 ? pf->private_seed : pf->m.seed;
}

/* Wrong words in pages [0, npages); the parent's marks allowed when marked. */
static size_t private_file_bad(struct private_file *pf, int marked)
{
    size_t bad = 0;

    for (size_t p = 0; p < pf->m.npages; p++) {
        uint64_t *w = pf->m.base + p * WORDS_PER_PAGE;
        int has_mark = marked && p % pf->m.stride == 0;

        if (has_mark && w[0] != mark_value(4, p << 8 | pf->m.round))
            bad++;
        bad += check_pages(w, p, 1, private_seed_of(pf, p), NULL) - (has_mark ? 1 : 0);
    }
    return bad;
}

static int private_file_unchanged(struct private_file *pf)
{
    uint64_t word;

    for (size_t p = 0; p < pf->m.npages; p += 7)
        if (pread(pf->fd, &word, sizeof(word), (off_t)(p * PAGE_SIZE)) != sizeof(word) ||
            word != pattern_base(pf->m.seed, p))
            return 0;
    return 1;
}

static size_t private_file_child(void *ctx)
{
    struct private_file *pf = ctx;

    maybe_inject(pf->m.base, pf->m.npages);
    return private_file_bad(pf, 0) + !private_file_unchanged(pf);
}

/* Undo the parent's marks: back to each page's pre-fork contents. */
static void private_file_undo(struct private_file *pf)
{
    for (size_t p = 0; p < pf->m.npages; p += pf->m.stride)
        pf->m.base[p * WORDS_PER_PAGE] = pattern_base(private_seed_of(pf, p), p);
}

static int private_file(void)
{
    size_t npages = scaled(32, 4) * MIB / PAGE_SIZE;
    struct private_file pf = { { NULL, npages, 0xf11e, 3, 0 }, 0xf22e, -1 };
    int rc = 0;

    pf.fd = pattern_file("private", npages, pf.m.seed);
    pf.m.base = mmap(NULL, npages * PAGE_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE, pf.fd, 0);
    if (pf.m.base == MAP_FAILED)
        die_errno("mmap MAP_PRIVATE file");
    for (size_t p = 0; p < npages; p += PRIVATE_STRIDE)
        fill_pages(pf.m.base + p * WORDS_PER_PAGE, p, 1, pf.private_seed);
    for (int i = 0; i < (int)scaled(4, 1) && rc == 0; i++) {
        pf.m.round = (uint64_t)i + 1;
        rc = fork_and_check(marks_after_fork, private_file_child, &pf);
        if (rc == 0 && private_file_bad(&pf, 1) != 0)
            rc = fail("round %d: the parent does not see exactly its own writes", i + 1);
        private_file_undo(&pf);
    }
    if (rc == 0 && !private_file_unchanged(&pf))
        rc = fail("a private write reached the file");
    unmap(pf.m.base, npages * PAGE_SIZE);
    close(pf.fd);
    return rc;
}

/* --- shared memory: each side's writes visible to the other ------------ */

struct shared_ctx {
    uint64_t *base;
    size_t npages;
    uint64_t seed;
    int fd;                  /* -1 for anonymous */
    int rounds;
    int to_child[2], to_parent[2];
};

/* Page written by `who` (0 parent, 1 child) in round r, in its own half. */
static size_t shared_page(const struct shared_ctx *s, int who, int r, int k)
{
    uint64_t st = (uint64_t)r * 1000003 + (uint64_t)who * 13 + 1;
    size_t half = s->npages / 2;
    size_t start = (size_t)rng_below(&st, half);

    /* 8 distinct pages spread over this side's half. */
    return (size_t)who * half + (start + (size_t)k * (half / 8)) % half;
}

static void shared_write(struct shared_ctx *s, int who, int r)
{
    for (int k = 0; k < 8; k++) {
        size_t p = shared_page(s, who, r, k);
        uint64_t v = mark_value(5 + (uint64_t)who, (uint64_t)r << 8 | (uint64_t)k);

        if (s->fd >= 0 && k == 0) {
            if (pwrite(s->fd, &v, sizeof(v), (off_t)(p * PAGE_SIZE + 8)) != sizeof(v))
                die_errno("pwrite to the shared file");
        } else {
            s->base[p * WORDS_PER_PAGE + 1] = v;
        }
    }
}

static size_t shared_seen(struct shared_ctx *s, int who, int r)
{
    size_t bad = 0;

    for (int k = 0; k < 8; k++) {
        size_t p = shared_page(s, who, r, k);

        bad += s->base[p * WORDS_PER_PAGE + 1] != mark_value(5 + (uint64_t)who, (uint64_t)r << 8 | (uint64_t)k);
    }
    return bad;
}

/* The child: see the pre-fork pattern, then ping-pong writes. */
static void shared_child(struct shared_ctx *s)
{
    size_t bad = 0;

    close_end(s->to_child, 1);
    close_end(s->to_parent, 0);
    for (size_t p = 0; p < s->npages; p++)
        bad += s->base[p * WORDS_PER_PAGE + 2] != pattern_base(s->seed, p) + 2;
    for (int r = 0; r < s->rounds; r++) {
        if (wait_byte(s->to_child[0]) != 0)
            _exit(3);
        bad += shared_seen(s, 0, r);
        if (inject_here() && r == s->rounds / 2)
            s->base[shared_page(s, 0, r, 3) * WORDS_PER_PAGE + 1] ^= 8;
        shared_write(s, 1, r);
        send_byte(s->to_parent[1]);
    }
    _exit(bad ? 1 : 0);
}

static int shared_pingpong(struct shared_ctx *s)
{
    size_t bad = 0;
    char how[96];
    int status;
    pid_t pid;

    pipe_or_die(s->to_child);
    pipe_or_die(s->to_parent);
    pid = fork_or_die();
    if (pid == 0)
        shared_child(s);
    close_end(s->to_child, 0);
    close_end(s->to_parent, 1);
    for (int r = 0; r < s->rounds; r++) {
        shared_write(s, 0, r);
        send_byte(s->to_child[1]);
        if (wait_byte(s->to_parent[0]) != 0)
            break;
        bad += shared_seen(s, 1, r);
        bad += shared_seen(s, 0, r);
    }
    status = wait_child(pid, how, sizeof(how));
    close_pair(s->to_child);
    close_pair(s->to_parent);
    if (bad)
        return fail("the parent missed %zu of the child's shared writes", bad);
    if (!exited_ok(status))
        return fail("the child missed the parent's shared writes or died (%s)", how);
    return 0;
}

static int shared_memory(int fd, uint64_t seed)
{
    struct shared_ctx s = { NULL, scaled(16, 2) * MIB / PAGE_SIZE, seed, fd,
                            (int)scaled(300, 30), { -1, -1 }, { -1, -1 } };
    int flags = MAP_SHARED | (fd < 0 ? MAP_ANONYMOUS : 0), rc;

    s.base = mmap(NULL, s.npages * PAGE_SIZE, PROT_READ | PROT_WRITE, flags, fd, 0);
    if (s.base == MAP_FAILED)
        die_errno("mmap MAP_SHARED");
    if (fd < 0)
        fill_pages(s.base, 0, s.npages, seed);
    rc = shared_pingpong(&s);
    unmap(s.base, s.npages * PAGE_SIZE);
    return rc;
}

static int shared_anon(void)
{
    return shared_memory(-1, 0x5a5);
}

static int shared_file(void)
{
    size_t npages = scaled(16, 2) * MIB / PAGE_SIZE;
    int fd = pattern_file("shared", npages, 0x5f5), rc;

    rc = shared_memory(fd, 0x5f5);
    close(fd);
    return rc;
}

static int shared_memfd(void)
{
    size_t npages = scaled(16, 2) * MIB / PAGE_SIZE;
    int fd = memfd_create("afork-memfd", MFD_CLOEXEC), rc;
    uint64_t *map;

    if (fd < 0 || ftruncate(fd, (off_t)(npages * PAGE_SIZE)) != 0)
        return fail("memfd_create/ftruncate: %s", strerror(errno));
    map = mmap(NULL, npages * PAGE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED)
        die_errno("mmap memfd");
    fill_pages(map, 0, npages, 0x5d5);
    unmap(map, npages * PAGE_SIZE);
    rc = shared_memory(fd, 0x5d5);
    close(fd);
    return rc;
}

/* --- userfaultfd: MISSING + WP registration; a handler thread resolves --- */

struct uffd_ctx {
    int uffd;
    uint64_t *base;
    size_t npages;           /* first half populated (half of it write-protected), second missing */
    uint64_t seed;
    uint64_t *src;           /* one page for UFFDIO_COPY */
    atomic_long wp_faults, missing_faults;
    atomic_int quit;
};

static void uffd_resolve(struct uffd_ctx *u, const struct uffd_msg *msg)
{
    uintptr_t addr = (uintptr_t)msg->arg.pagefault.address & ~(PAGE_SIZE - 1);
    size_t page = (addr - (uintptr_t)u->base) / PAGE_SIZE;

    if (msg->arg.pagefault.flags & UFFD_PAGEFAULT_FLAG_WP) {
        struct uffdio_writeprotect wp = { { addr, PAGE_SIZE }, 0 };

        if (ioctl(u->uffd, UFFDIO_WRITEPROTECT, &wp) != 0)
            die_errno("UFFDIO_WRITEPROTECT (resolve)");
        atomic_fetch_add(&u->wp_faults, 1);
    } else {
        struct uffdio_copy copy = { addr, (uintptr_t)u->src, PAGE_SIZE, 0, 0 };

        fill_pages(u->src, page, 1, u->seed);
        if (ioctl(u->uffd, UFFDIO_COPY, &copy) != 0 && errno != EEXIST)
            die_errno("UFFDIO_COPY");
        atomic_fetch_add(&u->missing_faults, 1);
    }
}

static void *uffd_handler(void *arg)
{
    struct uffd_ctx *u = arg;
    struct uffd_msg msg;

    while (!atomic_load(&u->quit)) {
        struct pollfd pfd = { u->uffd, POLLIN, 0 };

        if (poll(&pfd, 1, 50) <= 0)
            continue;
        if (read(u->uffd, &msg, sizeof(msg)) != sizeof(msg))
            continue;
        if (msg.event == UFFD_EVENT_PAGEFAULT)
            uffd_resolve(u, &msg);
    }
    return NULL;
}

static int uffd_setup(struct uffd_ctx *u)
{
    struct uffdio_api api = { UFFD_API, 0, 0 };
    size_t half = u->npages / 2;
    struct uffdio_register reg = {
        { (uintptr_t)u->base, u->npages * PAGE_SIZE },
        UFFDIO_REGISTER_MODE_MISSING | UFFDIO_REGISTER_MODE_WP, 0 };
    /* First quarter write-protected, second quarter plain, second half missing. */
    struct uffdio_writeprotect wp = { { (uintptr_t)u->base, half / 2 * PAGE_SIZE },
                                      UFFDIO_WRITEPROTECT_MODE_WP };

    u->uffd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
    if (u->uffd < 0)
        return fail("userfaultfd(): %s", strerror(errno));
    if (ioctl(u->uffd, UFFDIO_API, &api) != 0)
        return fail("UFFDIO_API: %s", strerror(errno));
    fill_pages(u->base, 0, half, u->seed);
    if (ioctl(u->uffd, UFFDIO_REGISTER, &reg) != 0)
        return fail("UFFDIO_REGISTER (missing + wp): %s", strerror(errno));
    if (ioctl(u->uffd, UFFDIO_WRITEPROTECT, &wp) != 0)
        return fail("UFFDIO_WRITEPROTECT: %s", strerror(errno));
    return 0;
}

/* Parent after fork: write into protected and plain pages, touch missing ones. */
static int uffd_after_fork(void *ctx)
{
    struct uffd_ctx *u = ctx;
    size_t half = u->npages / 2;
    volatile uint64_t sink = 0;

    for (size_t p = 0; p < half; p += 7)
        u->base[p * WORDS_PER_PAGE] = mark_value(7, p);
    for (size_t p = half; p < u->npages; p += 11)
        sink += u->base[p * WORDS_PER_PAGE + 1];
    (void)sink;
    return 0;
}

/* The child has no userfaultfd: protected pages are plain, missing are zero. */
static size_t uffd_child(void *ctx)
{
    struct uffd_ctx *u = ctx;
    size_t half = u->npages / 2, bad;

    maybe_inject(u->base, half);
    bad = check_pages(u->base, 0, half, u->seed, NULL);
    for (size_t p = half; p < u->npages; p += 11)
        bad += u->base[p * WORDS_PER_PAGE + 1] != 0;
    u->base[WORDS_PER_PAGE] = 1;          /* must not block: no uffd here */
    return bad + (u->base[WORDS_PER_PAGE] != 1);
}

static size_t uffd_parent_bad(struct uffd_ctx *u)
{
    size_t half = u->npages / 2, bad = 0;

    for (size_t p = 0; p < half; p++) {
        uint64_t *w = u->base + p * WORDS_PER_PAGE;
        int marked = p % 7 == 0;

        bad += marked && w[0] != mark_value(7, p);
        bad += check_pages(w, p, 1, u->seed, NULL) - (marked ? 1 : 0);
    }
    for (size_t p = half; p < u->npages; p += 11)
        bad += check_pages(u->base + p * WORDS_PER_PAGE, p, 1, u->seed, NULL);
    return bad;
}

static int userfaultfd_memory(void)
{
    struct uffd_ctx u = { -1, NULL, scaled(16, 2) * MIB / PAGE_SIZE, 0x0ffd, NULL, 0, 0, 0 };
    pthread_t th;
    int rc;

    u.base = map_anon(u.npages * PAGE_SIZE, 0);
    u.src = map_anon(PAGE_SIZE, 0);
    if (uffd_setup(&u) != 0)
        return -1;
    if (pthread_create(&th, NULL, uffd_handler, &u) != 0)
        die_errno("pthread_create");
    rc = fork_and_check(uffd_after_fork, uffd_child, &u);
    atomic_store(&u.quit, 1);
    pthread_join(th, NULL);
    info("handler resolved %ld write-protect and %ld missing faults",
         atomic_load(&u.wp_faults), atomic_load(&u.missing_faults));
    if (rc == 0 && uffd_parent_bad(&u))
        rc = fail("the parent's userfaultfd region is wrong");
    if (rc == 0 && (atomic_load(&u.wp_faults) == 0 || atomic_load(&u.missing_faults) == 0))
        rc = fail("no write-protect or missing fault reached the handler");
    close(u.uffd);
    unmap(u.base, u.npages * PAGE_SIZE);
    return rc;
}

const struct test_case kind_tests[] = {
    { "thp", "MADV_HUGEPAGE region (huge pages checked); parent writes and splits one", thp_regions },
    { "file-private", "MAP_PRIVATE tmpfs file, private copies before and after fork", private_file },
    { "shared-anon", "MAP_SHARED anonymous: hundreds of ping-pong writes visible both ways", shared_anon },
    { "shared-file", "MAP_SHARED tmpfs file (mapping + pwrite): writes visible both ways", shared_file },
    { "shared-memfd", "MAP_SHARED memfd: writes visible both ways", shared_memfd },
    { "mlock", "mlock'ed region: snapshot exact, lock kept by the parent, not inherited", mlocked },
    { "userfaultfd", "MISSING+WP userfaultfd region with a handler thread across fork", userfaultfd_memory },
    { NULL, NULL, NULL },
};
