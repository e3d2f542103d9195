/* vma.c -- right after fork the parent changes its address space (mmap next
 * to / over a region, munmap, mremap, mprotect, madvise, brk, stack growth,
 * another fork) or its page tables (MADV_COLLAPSE, clearing soft-dirty
 * bits, UFFDIO_MOVE out of the region); the child's snapshot must stay
 * exact and the parent must see exactly its own changes. Also: fork with
 * swap entries in the tables.
 */
#include "common.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Linux 6.1's uapi headers (the build host's) predate these. */
#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25
#endif
#ifndef UFFD_USER_MODE_ONLY
#define UFFD_USER_MODE_ONLY 1
#endif
#ifndef UFFDIO_MOVE
#define UFFD_FEATURE_MOVE (1 << 16)
struct uffdio_move {
    __u64 dst, src, len, mode;
    __s64 move;
};
#define UFFDIO_MOVE _IOWR(UFFDIO, 0x05, struct uffdio_move)
#endif

#define REGION_MIB 32
#define SPARE_MIB 4            /* hole kept after the region */

/* Expected state of each page as the parent sees it after its operation. */
enum page_state { ORIG, MARKED, ZERO, GONE, ORIG_OR_ZERO, MARKED_ZERO, MARKED_ANY };

struct vma_case {
    uint64_t *r;               /* the patterned region */
    size_t npages;
    uint64_t seed;
    unsigned iter;
    char *expect;              /* enum page_state per page of r */
    uint64_t *aux;             /* extra memory the child checks (heap, stack) */
    size_t aux_pages;
    uint64_t aux_seed;
    long swapped_kb;           /* swap-entries: kB paged out before fork */
    void *maps[4];             /* extra mappings to remove at cleanup */
    size_t map_len[4];
};

struct vma_op {
    const char *name;
    void (*prepare)(struct vma_case *vc);      /* before fork (optional) */
    int (*parent)(struct vma_case *vc);        /* right after fork */
    void (*cleanup)(struct vma_case *vc);      /* after the child is done (optional) */
};

static void remember_map(struct vma_case *vc, void *addr, size_t len)
{
    for (int i = 0; i < 4; i++) {
        if (!vc->maps[i]) {
            vc->maps[i] = addr;
            vc->map_len[i] = len;
            return;
        }
    }
}

static uint64_t *page_at(uint64_t *base, size_t page)
{
    return base + page * WORDS_PER_PAGE;
}

/* Parent writes: word 0 of every `stride`-th page in [first, first+count). */
static void mark_pages(struct vma_case *vc, size_t first, size_t count, size_t stride)
{
    for (size_t p = first; p < first + count; p += stride) {
        *page_at(vc->r, p) = mark_value(2, (uint64_t)p << 8 | vc->iter);
        if (vc->expect[p] == ZERO)
            vc->expect[p] = MARKED_ZERO;
        else if (vc->expect[p] == ORIG_OR_ZERO)
            vc->expect[p] = MARKED_ANY;
        else
            vc->expect[p] = MARKED;
    }
}

static void set_state(struct vma_case *vc, size_t first, size_t count, char state)
{
    memset(vc->expect + first, state, count);
}

static int is_mapped(const void *addr)
{
    unsigned char vec;

    return mincore((void *)addr, PAGE_SIZE, &vec) == 0 || errno != ENOMEM;
}

static int page_is_zero(const uint64_t *w)
{
    for (size_t i = 0; i < WORDS_PER_PAGE; i++)
        if (w[i])
            return 0;
    return 1;
}

/* Word 0 holds the parent's mark and the rest is zero. */
static int marked_zero(const uint64_t *w, uint64_t mark)
{
    if (w[0] != mark)
        return 0;
    for (size_t i = 1; i < WORDS_PER_PAGE; i++)
        if (w[i])
            return 0;
    return 1;
}

static int page_matches(const struct vma_case *vc, size_t p)
{
    const uint64_t *w = vc->r + p * WORDS_PER_PAGE;
    uint64_t mark = mark_value(2, (uint64_t)p << 8 | vc->iter);
    int marked_orig;

    if (vc->expect[p] == GONE)
        return !is_mapped(w);
    marked_orig = w[0] == mark && check_pages(w, p, 1, vc->seed, NULL) == 1;
    switch (vc->expect[p]) {
    case ORIG:
        return check_pages(w, p, 1, vc->seed, NULL) == 0;
    case MARKED:
        return marked_orig;
    case MARKED_ZERO:
        return marked_zero(w, mark);
    case MARKED_ANY:
        return marked_orig || marked_zero(w, mark);
    case ZERO:
        return page_is_zero(w);
    default:                 /* ORIG_OR_ZERO */
        return page_is_zero(w) || check_pages(w, p, 1, vc->seed, NULL) == 0;
    }
}

/* The parent's view of r against vc->expect. */
static int check_parent_pages(struct vma_case *vc)
{
    static const char *names[] = { "original", "marked", "zero", "unmapped",
                                   "original-or-zero", "marked-zero", "marked" };
    size_t bad = 0, first = 0;

    for (size_t p = 0; p < vc->npages; p++) {
        int mapped = vc->expect[p] == GONE || is_mapped(page_at(vc->r, p));

        if (!mapped || !page_matches(vc, p)) {
            if (!bad)
                first = p;
            bad++;
        }
    }
    if (bad)
        return fail("parent view: %zu pages differ from what it did, first page %zu (expected %s)",
                    bad, first, names[(int)vc->expect[first]]);
    return 0;
}

static void child_check(struct vma_case *vc, int go_fd, int rep_fd)
{
    struct report r = { 0 };
    size_t bad_page = 0;

    wait_byte(go_fd);
    if (inject_here())
        page_at(vc->r, vc->npages / 3)[5] ^= 2;
    r.bad_words = check_pages(vc->r, 0, vc->npages, vc->seed, &bad_page);
    r.bad_page = bad_page;
    if (vc->aux) {
        size_t aux_bad = check_pages(vc->aux, 0, vc->aux_pages, vc->aux_seed, NULL);

        r.extra = (int64_t)aux_bad;
        r.bad_words += aux_bad;
    }
    r.checked_pages = vc->npages + vc->aux_pages;
    send_report(rep_fd, &r);
    _exit(r.bad_words ? 1 : 0);
}

static int judge_child(pid_t pid, int rep_fd, const char *who)
{
    struct report r;
    char how[96];
    int got = recv_report(rep_fd, &r), status = wait_child(pid, how, sizeof(how));

    if (got != 0)
        return fail("%s child sent no report (%s)", who, how);
    if (r.bad_words)
        return fail("%s child saw %llu wrong words (%lld in heap/stack), first bad page %llu",
                    who, (unsigned long long)r.bad_words, (long long)r.extra,
                    (unsigned long long)r.bad_page);
    if (!exited_ok(status))
        return fail("%s child ended with %s", who, how);
    return 0;
}

static void setup_case(struct vma_case *vc, unsigned iter)
{
    size_t len = (REGION_MIB + SPARE_MIB) * MIB;
    char *p = map_anon(len, 1);

    memset(vc, 0, sizeof(*vc));
    unmap(p + REGION_MIB * MIB, SPARE_MIB * MIB);
    vc->r = (uint64_t *)p;
    vc->npages = REGION_MIB * MIB / PAGE_SIZE;
    vc->seed = 0x7000 + iter;
    vc->iter = iter;
    vc->expect = calloc(vc->npages, 1);
    if (!vc->expect)
        die_errno("calloc");
    fill_pages(vc->r, 0, vc->npages, vc->seed);
}

static void teardown_case(struct vma_case *vc)
{
    munmap(vc->r, (REGION_MIB + SPARE_MIB) * MIB);
    for (int i = 0; i < 4; i++)
        if (vc->maps[i])
            munmap(vc->maps[i], vc->map_len[i]);
    free(vc->expect);
}

static int run_vma_op(const struct vma_op *op)
{
    unsigned iters = (unsigned)scaled(10, 1);
    int rc = 0;

    for (unsigned it = 0; it < iters && rc == 0; it++) {
        struct vma_case vc;
        int go[2], rep[2];
        pid_t pid;

        setup_case(&vc, it);
        if (op->prepare)
            op->prepare(&vc);
        pipe_or_die(go);
        pipe_or_die(rep);
        pid = fork_or_die();
        if (pid == 0)
            child_check(&vc, go[0], rep[1]);
        parent_ends(go, rep);
        rc = op->parent(&vc);
        send_byte(go[1]);
        if (judge_child(pid, rep[0], "the") != 0)
            rc = -1;
        if (rc == 0)
            rc = check_parent_pages(&vc);
        if (op->cleanup)
            op->cleanup(&vc);
        close_pair(go);
        close_pair(rep);
        teardown_case(&vc);
    }
    return rc;
}

/* --- the operations ---------------------------------------------------- */

static int op_mmap_adjacent(struct vma_case *vc)
{
    char *end = (char *)vc->r + REGION_MIB * MIB;
    uint64_t *next = mmap(end, SPARE_MIB * MIB, PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    void *over;

    if (next != (uint64_t *)end)
        return fail("mmap right after the region: %s", next == MAP_FAILED ? strerror(errno) : "placed elsewhere");
    fill_pages(next, 0, SPARE_MIB * MIB / PAGE_SIZE, vc->seed + 99);
    over = mmap(page_at(vc->r, 2048), 2 * MIB, PROT_READ | PROT_WRITE,
                MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    if (over != page_at(vc->r, 2048))
        return fail("mmap MAP_FIXED over the region: %s", strerror(errno));
    set_state(vc, 2048, 512, ZERO);
    mark_pages(vc, 0, 2048, 7);
    if (check_pages(next, 0, SPARE_MIB * MIB / PAGE_SIZE, vc->seed + 99, NULL))
        return fail("the new adjacent mapping lost its contents");
    return 0;
}

static int op_munmap(struct vma_case *vc)
{
    size_t q = vc->npages / 4;

    if (munmap(page_at(vc->r, q), q * PAGE_SIZE) != 0 ||
        munmap(page_at(vc->r, vc->npages - 1), PAGE_SIZE) != 0)
        return fail("munmap: %s", strerror(errno));
    set_state(vc, q, q, GONE);
    vc->expect[vc->npages - 1] = GONE;
    mark_pages(vc, 0, q, 3);
    mark_pages(vc, 2 * q, q, 5);
    return 0;
}

/* Move 2 MiB out of the middle, grow the head (it moves), shrink the tail. */
static int op_mremap(struct vma_case *vc)
{
    void *dst = mmap(NULL, 2 * MIB, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    uint64_t *moved, *head;

    if (dst == MAP_FAILED)
        return fail("mmap: %s", strerror(errno));
    moved = mremap(page_at(vc->r, 2048), 2 * MIB, 2 * MIB, MREMAP_MAYMOVE | MREMAP_FIXED, dst);
    if (moved == MAP_FAILED)
        return fail("mremap (move 2 MiB): %s", strerror(errno));
    remember_map(vc, moved, 2 * MIB);
    set_state(vc, 2048, 512, GONE);
    head = mremap(vc->r, 8 * MIB, 12 * MIB, MREMAP_MAYMOVE);
    if (head == MAP_FAILED)
        return fail("mremap (grow 8 -> 12 MiB): %s", strerror(errno));
    if (head != vc->r) {
        remember_map(vc, head, 12 * MIB);
        set_state(vc, 0, 2048, GONE);
    }
    if (mremap(page_at(vc->r, 2560), 22 * MIB, 20 * MIB, 0) == MAP_FAILED)
        return fail("mremap (shrink the tail by 2 MiB): %s", strerror(errno));
    set_state(vc, vc->npages - 512, 512, GONE);
    if (check_pages(moved, 2048, 512, vc->seed, NULL))
        return fail("the 2 MiB moved by mremap lost its contents");
    if (check_pages(head, 0, 2048, vc->seed, NULL) || !page_is_zero(page_at(head, 2048 + 1023)))
        return fail("the region grown by mremap is wrong");
    fill_pages(page_at(head, 2048), 2048, 1024, vc->seed);
    mark_pages(vc, 2560, 2048, 11);
    return 0;
}

static int op_mprotect(struct vma_case *vc)
{
    size_t q = vc->npages / 4;

    if (mprotect(page_at(vc->r, q), 2 * q * PAGE_SIZE, PROT_READ) != 0 ||
        mprotect(page_at(vc->r, 2 * q), 16 * PAGE_SIZE, PROT_NONE) != 0)
        return fail("mprotect: %s", strerror(errno));
    if (check_pages(page_at(vc->r, q), q, q, vc->seed, NULL))
        return fail("read-only part reads wrong");
    mark_pages(vc, 0, q, 3);
    if (mprotect(vc->r, vc->npages * PAGE_SIZE, PROT_READ | PROT_WRITE) != 0)
        return fail("mprotect back to read-write: %s", strerror(errno));
    mark_pages(vc, q, 2 * q, 5);
    return 0;
}

static int madvise_quarter(struct vma_case *vc, int advice, const char *name, char state)
{
    size_t q = vc->npages / 4;

    if (madvise(page_at(vc->r, q), q * PAGE_SIZE, advice) != 0)
        return fail("madvise(%s): %s", name, strerror(errno));
    set_state(vc, q, q, state);
    mark_pages(vc, 0, q, 3);
    mark_pages(vc, q, q, 64);
    mark_pages(vc, 2 * q, q, 5);
    return 0;
}

static int op_dontneed(struct vma_case *vc) { return madvise_quarter(vc, MADV_DONTNEED, "DONTNEED", ZERO); }
static int op_free(struct vma_case *vc) { return madvise_quarter(vc, MADV_FREE, "FREE", ORIG_OR_ZERO); }
static int op_cold(struct vma_case *vc) { return madvise_quarter(vc, MADV_COLD, "COLD", ORIG); }
static int op_pageout(struct vma_case *vc) { return madvise_quarter(vc, MADV_PAGEOUT, "PAGEOUT", ORIG); }

/* Swap entries in the page tables at fork time (pages paged out before). */
static void prep_swapped(struct vma_case *vc)
{
    long before = status_kb("VmSwap");

    if (madvise(vc->r, vc->npages * PAGE_SIZE / 2, MADV_PAGEOUT) != 0)
        die_errno("madvise(PAGEOUT)");
    vc->swapped_kb = status_kb("VmSwap") - before;
}

static int op_swapped(struct vma_case *vc)
{
    mark_pages(vc, 0, vc->npages, 9);
    if (vc->swapped_kb < (long)(vc->npages * PAGE_SIZE / 1024 / 4))
        return fail("only %ld kB went to swap before fork (is swap on?)", vc->swapped_kb);
    return 0;
}

/* brk: a patterned heap; the parent shrinks and regrows it after fork. */
static void prep_brk(struct vma_case *vc)
{
    uintptr_t cur = (uintptr_t)sbrk(0);
    size_t pad = (PAGE_SIZE - cur % PAGE_SIZE) % PAGE_SIZE;

    if (sbrk((intptr_t)(pad + 16 * MIB)) == (void *)-1)
        die_errno("sbrk");
    vc->aux = (uint64_t *)(cur + pad);
    vc->aux_pages = 16 * MIB / PAGE_SIZE;
    vc->aux_seed = vc->seed + 5;
    fill_pages(vc->aux, 0, vc->aux_pages, vc->aux_seed);
}

static int op_brk(struct vma_case *vc)
{
    char *mid = (char *)vc->aux + 8 * MIB;

    if (sbrk(-(intptr_t)(8 * MIB)) == (void *)-1 || sbrk(0) != mid)
        return fail("sbrk shrink did not move the break to %p", (void *)mid);
    if (sbrk((intptr_t)(8 * MIB)) != mid)
        return fail("sbrk regrow: %s", strerror(errno));
    if (!page_is_zero((uint64_t *)mid) || !page_is_zero((uint64_t *)(mid + 8 * MIB - PAGE_SIZE)))
        return fail("the regrown heap is not zero-filled");
    for (size_t p = 0; p < 1024; p += 9)
        page_at(vc->aux, p)[1] ^= 1;
    mark_pages(vc, 0, vc->npages, 17);
    for (size_t p = 0; p < 1024; p += 9)
        page_at(vc->aux, p)[1] ^= 1;
    if (check_pages(vc->aux, 0, 2048, vc->aux_seed, NULL))
        return fail("the parent's heap lost its contents");
    return 0;
}

static void cleanup_brk(struct vma_case *vc)
{
    if (sbrk(0) == (char *)vc->aux + 16 * MIB)
        sbrk(-(intptr_t)(16 * MIB));
}

/* Stack growth: a patterned buffer on the stack; the parent then recurses
 * deep enough to grow the [stack] mapping. */
static size_t stack_mapping_kb(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    unsigned long s, e;
    size_t kb = 0;

    if (!f)
        return 0;
    while (fgets(line, sizeof(line), f))
        if (strstr(line, "[stack]") && sscanf(line, "%lx-%lx", &s, &e) == 2)
            kb = (e - s) / 1024;
    fclose(f);
    return kb;
}

static __attribute__((noinline)) unsigned long grow_stack(int depth)
{
    volatile char frame[16384];

    frame[0] = (char)depth;
    frame[sizeof(frame) - 1] = 1;
    if (depth <= 0)
        return frame[0];
    return grow_stack(depth - 1) + frame[sizeof(frame) - 1];
}

static int op_stack(struct vma_case *vc)
{
    size_t before = stack_mapping_kb(), after;

    grow_stack(32 * ((int)vc->iter + 1));   /* 512 KiB deeper each round */
    after = stack_mapping_kb();
    mark_pages(vc, 0, vc->npages, 13);
    for (size_t p = 0; p < vc->aux_pages; p++)
        page_at(vc->aux, p)[3] = mark_value(3, p);
    if (after < before + 256)
        return fail("the stack did not grow (%zu kB -> %zu kB)", before, after);
    for (size_t p = 0; p < vc->aux_pages; p++)
        if (page_at(vc->aux, p)[3] != mark_value(3, p))
            return fail("the parent's stack buffer lost its write");
    return 0;
}

/* MADV_COLLAPSE of two PMD ranges: the parent's pages there become huge
 * pages with the same data (the ranges' tables are replaced). A range
 * whose entries are all read-only, as fork() leaves them, is not collapsed
 * (EINVAL): the parent writes to some pages of it first. */
static int op_collapse(struct vma_case *vc)
{
    void *at = page_at(vc->r, 2048);
    int tries = 0, rc;

    mark_pages(vc, 2048, 2 * HUGE_SIZE / PAGE_SIZE, 64);

    while ((rc = madvise(at, 2 * HUGE_SIZE, MADV_COLLAPSE)) != 0 && errno == EAGAIN && ++tries < 10)
        usleep(1000);
    if (rc != 0)
        return fail("MADV_COLLAPSE: %s", strerror(errno));
    if (smaps_kb(at, 2 * HUGE_SIZE, "AnonHugePages") < 2 * (long)(HUGE_SIZE / 1024))
        return fail("MADV_COLLAPSE returned 0 but the range is not in huge pages");
    mark_pages(vc, 0, vc->npages, 11);
    return 0;
}

/* Clearing the soft-dirty bits write-protects every entry of the process. */
static int op_clear_refs(struct vma_case *vc)
{
    if (write_file("/proc/self/clear_refs", "4") != 0)
        return fail("write 4 to /proc/self/clear_refs: %s", strerror(errno));
    mark_pages(vc, 0, vc->npages, 5);
    return 0;
}

/* UFFDIO_MOVE of 1 MiB of the region into a registered area: the pages are
 * shared with the child, as after any fork, so the move must refuse them
 * (EBUSY). Moving them would take them from under a table the child has
 * not copied. */
static int op_uffd_move(struct vma_case *vc)
{
    struct uffdio_api api = { .api = UFFD_API, .features = UFFD_FEATURE_MOVE };
    struct uffdio_register reg = { .mode = UFFDIO_REGISTER_MODE_MISSING };
    struct uffdio_move mv = { .src = (uintptr_t)page_at(vc->r, 4096), .len = MIB };
    int uffd = (int)syscall(__NR_userfaultfd, O_CLOEXEC | UFFD_USER_MODE_ONLY), rc, err;
    void *dst;

    if (uffd < 0)
        return fail("userfaultfd: %s", strerror(errno));
    if (ioctl(uffd, UFFDIO_API, &api) != 0) {
        close(uffd);
        return fail("UFFDIO_API with UFFD_FEATURE_MOVE: %s (a kernel without UFFDIO_MOVE)",
                    strerror(errno));
    }
    dst = map_anon(HUGE_SIZE, 1);
    remember_map(vc, dst, HUGE_SIZE);
    reg.range.start = (uintptr_t)dst;
    reg.range.len = HUGE_SIZE;
    mv.dst = (uintptr_t)dst;
    if (ioctl(uffd, UFFDIO_REGISTER, &reg) != 0) {
        close(uffd);
        return fail("UFFDIO_REGISTER: %s", strerror(errno));
    }
    rc = ioctl(uffd, UFFDIO_MOVE, &mv);
    err = errno;
    close(uffd);
    if (rc == 0 || mv.move > 0)
        return fail("UFFDIO_MOVE moved %lld bytes of pages the child shares",
                    (long long)(rc == 0 ? (long long)mv.len : mv.move));
    if (err != EBUSY)
        return fail("UFFDIO_MOVE: %s, EBUSY wanted (pages shared with the child)", strerror(err));
    mark_pages(vc, 0, vc->npages, 9);
    return 0;
}

static int op_fork_again(struct vma_case *vc)
{
    int go[2], rep[2], rc;
    pid_t pid;

    pipe_or_die(go);
    pipe_or_die(rep);
    pid = fork_or_die();
    if (pid == 0)
        child_check(vc, go[0], rep[1]);
    parent_ends(go, rep);
    mark_pages(vc, 0, vc->npages, 3);
    send_byte(go[1]);
    rc = judge_child(pid, rep[0], "second");
    close_pair(go);
    close_pair(rep);
    return rc;
}

#define VMA_OP(fn, ...) static int fn(void) { static const struct vma_op op = { __VA_ARGS__ }; return run_vma_op(&op); }

VMA_OP(t_mmap, "mmap", NULL, op_mmap_adjacent, NULL)
VMA_OP(t_munmap, "munmap", NULL, op_munmap, NULL)
VMA_OP(t_mremap, "mremap", NULL, op_mremap, NULL)
VMA_OP(t_mprotect, "mprotect", NULL, op_mprotect, NULL)
VMA_OP(t_dontneed, "dontneed", NULL, op_dontneed, NULL)
VMA_OP(t_free, "free", NULL, op_free, NULL)
VMA_OP(t_cold, "cold", NULL, op_cold, NULL)
VMA_OP(t_pageout, "pageout", NULL, op_pageout, NULL)
VMA_OP(t_swapped, "swapped", prep_swapped, op_swapped, NULL)
VMA_OP(t_brk, "brk", prep_brk, op_brk, cleanup_brk)
VMA_OP(t_fork_again, "fork", NULL, op_fork_again, NULL)
VMA_OP(t_collapse, "collapse", NULL, op_collapse, NULL)
VMA_OP(t_clear_refs, "clear-refs", NULL, op_clear_refs, NULL)
VMA_OP(t_uffd_move, "uffd-move", NULL, op_uffd_move, NULL)

/* The stack buffer must live in the frame that forks, so this one has its
 * own runner around run_vma_op's steps. */
static int t_stack(void)
{
    uint64_t buf[17 * WORDS_PER_PAGE];
    static const struct vma_op op = { "stack", NULL, op_stack, NULL };
    uintptr_t a = ((uintptr_t)buf + PAGE_SIZE - 1) & ~(PAGE_SIZE - 1);
    unsigned iters = 10;     /* at most 5.5 MiB of stack: under the 8 MiB limit */
    int rc = 0;

    for (unsigned it = 0; it < iters && rc == 0; it++) {
        struct vma_case vc;
        int go[2], rep[2];
        pid_t pid;

        setup_case(&vc, it);
        vc.aux = (uint64_t *)a;
        vc.aux_pages = 16;
        vc.aux_seed = vc.seed + 3;
        fill_pages(vc.aux, 0, vc.aux_pages, vc.aux_seed);
        pipe_or_die(go);
        pipe_or_die(rep);
        pid = fork_or_die();
        if (pid == 0)
            child_check(&vc, go[0], rep[1]);
        parent_ends(go, rep);
        rc = op.parent(&vc);
        send_byte(go[1]);
        if (judge_child(pid, rep[0], "the") != 0)
            rc = -1;
        if (rc == 0)
            rc = check_parent_pages(&vc);
        close_pair(go);
        close_pair(rep);
        teardown_case(&vc);
    }
    return rc;
}

const struct test_case vma_tests[] = {
    { "vma-mmap", "parent maps next to and over the region right after fork", t_mmap },
    { "vma-munmap", "parent unmaps part of the region right after fork", t_munmap },
    { "vma-mremap", "parent moves, grows and shrinks parts with mremap right after fork", t_mremap },
    { "vma-mprotect", "parent makes parts read-only / no-access and back right after fork", t_mprotect },
    { "madv-dontneed", "parent MADV_DONTNEEDs a quarter right after fork", t_dontneed },
    { "madv-free", "parent MADV_FREEs a quarter right after fork", t_free },
    { "madv-cold", "parent MADV_COLDs a quarter right after fork", t_cold },
    { "madv-pageout", "parent MADV_PAGEOUTs a quarter right after fork", t_pageout },
    { "swap-entries", "half the region paged out to swap before fork; both sides read it back", t_swapped },
    { "brk", "parent shrinks and regrows its heap right after fork", t_brk },
    { "stack-growth", "parent grows its stack by 512 KiB more each round right after fork", t_stack },
    { "fork-again", "parent forks a second child right after the first", t_fork_again },
    { "madv-collapse", "parent collapses two PMD ranges into huge pages (MADV_COLLAPSE) right "
      "after fork", t_collapse },
    { "clear-refs", "parent clears its soft-dirty bits (/proc/self/clear_refs) right after fork",
      t_clear_refs },
    { "uffd-move", "parent tries UFFDIO_MOVE of 1 MiB out of the region right after fork: "
      "refused, the pages are the child's too", t_uffd_move },
    { NULL, NULL, NULL },
};
