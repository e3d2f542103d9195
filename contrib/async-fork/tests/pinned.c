/* pinned.c -- memory the kernel writes without a fault: pinned pages.
 *
 *   pinned-buffer    an io_uring fixed buffer (pinned pages, written by the
 *                    kernel through the pin, never through the parent's
 *                    page tables) is registered, the parent forks, and a
 *                    READ_FIXED lands in the buffer before the child has
 *                    run. The child must see the buffer as it was at fork;
 *                    the buffer's page tables must stay with fork() (the
 *                    fork defers exactly those fewer than the same fork
 *                    before the pin, and async_fork_sync_pinned counts
 *                    them), while the rest of the process is still left to
 *                    the child.
 *   pinned-released  another process reads the parent's memory with
 *                    process_vm_readv() (a pin, released at once, as a
 *                    monitoring tool does); the parent's next fork must
 *                    still leave its page tables to the child.
 *   pinned-during-session
 *                    the parent forks first and pins afterwards, pages of
 *                    tables its child has not copied yet (the parent runs
 *                    SCHED_FIFO on the child's CPU): an io_uring fixed
 *                    buffer registered and filled by READ_FIXED (a pin for
 *                    writing), an O_DIRECT read from a RAM disk into the
 *                    memory (a pin for writing), an O_DIRECT write from it
 *                    (a pin for reading), after which the parent writes to
 *                    that page. The child's snapshot must be exact, the
 *                    parent must hold what the kernel and it wrote, the
 *                    disk what the page held, and the pins for writing
 *                    must have had the child's tables copied first
 *                    (async_fork_copied_gup). Guest only (/dev/ram1, a RAM disk).
 */
#include "common.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/io_uring.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#define SEED 0x919
#define DATA_SEED 0x91a
#define TARGET_PAGE 700         /* the page READ_FIXED fills, mid-buffer */

struct ring {
    int fd;
    unsigned *sq_tail, *sq_mask, *sq_array, *cq_head, *cq_tail, *cq_mask;
    struct io_uring_sqe *sqes;
    struct io_uring_cqe *cqes;
};

static int ring_setup(struct ring *r)
{
    struct io_uring_params p;
    char *sq, *cq;

    memset(&p, 0, sizeof(p));
    r->fd = (int)syscall(__NR_io_uring_setup, 4, &p);
    if (r->fd < 0)
        return -1;
    sq = mmap(NULL, p.sq_off.array + p.sq_entries * sizeof(unsigned), PROT_READ | PROT_WRITE,
              MAP_SHARED | MAP_POPULATE, r->fd, IORING_OFF_SQ_RING);
    cq = mmap(NULL, p.cq_off.cqes + p.cq_entries * sizeof(struct io_uring_cqe),
              PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, r->fd, IORING_OFF_CQ_RING);
    r->sqes = mmap(NULL, p.sq_entries * sizeof(struct io_uring_sqe), PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_POPULATE, r->fd, IORING_OFF_SQES);
    if (sq == MAP_FAILED || cq == MAP_FAILED || r->sqes == MAP_FAILED)
        return -1;
    r->sq_tail = (unsigned *)(sq + p.sq_off.tail);
    r->sq_mask = (unsigned *)(sq + p.sq_off.ring_mask);
    r->sq_array = (unsigned *)(sq + p.sq_off.array);
    r->cq_head = (unsigned *)(cq + p.cq_off.head);
    r->cq_tail = (unsigned *)(cq + p.cq_off.tail);
    r->cq_mask = (unsigned *)(cq + p.cq_off.ring_mask);
    r->cqes = (struct io_uring_cqe *)(cq + p.cq_off.cqes);
    return 0;
}

/* One READ_FIXED of @len bytes from @fd into @addr of fixed buffer 0; its
 * result (bytes read or -errno). */
static int read_fixed(struct ring *r, int fd, void *addr, unsigned len)
{
    unsigned tail = *r->sq_tail, head;
    struct io_uring_sqe *sqe = &r->sqes[tail & *r->sq_mask];
    int res;

    memset(sqe, 0, sizeof(*sqe));
    sqe->opcode = IORING_OP_READ_FIXED;
    sqe->fd = fd;
    sqe->addr = (uint64_t)(uintptr_t)addr;
    sqe->len = len;
    sqe->off = (uint64_t)-1;
    sqe->buf_index = 0;
    r->sq_array[tail & *r->sq_mask] = tail & *r->sq_mask;
    __atomic_store_n(r->sq_tail, tail + 1, __ATOMIC_RELEASE);
    if (syscall(__NR_io_uring_enter, r->fd, 1, 1, IORING_ENTER_GETEVENTS, NULL, 0) < 0)
        return -errno;
    head = *r->cq_head;
    if (head == __atomic_load_n(r->cq_tail, __ATOMIC_ACQUIRE))
        return -EAGAIN;
    res = r->cqes[head & *r->cq_mask].res;
    __atomic_store_n(r->cq_head, head + 1, __ATOMIC_RELEASE);
    return res;
}

/* Fork a child that checks @buf against the pattern and exits 0 (or 3).
 * With @then_read, the parent, SCHED_FIFO on the child's CPU so that the
 * child cannot run yet, first makes the kernel write into @buf through the
 * pin. Returns the child's description in @how; *res the READ_FIXED's. */
static int fork_and_check(uint64_t *buf, size_t npages, struct ring *r, int pipe_rd,
                          char *how, size_t len, int *res)
{
    struct sched_param fifo = { .sched_priority = 1 }, other = { 0 };
    cpu_set_t saved;
    pid_t child;
    int status;

    sched_getaffinity(0, sizeof(saved), &saved);
    pin_to_cpu(0);
    if (r && sched_setscheduler(0, SCHED_FIFO | SCHED_RESET_ON_FORK, &fifo) != 0)
        info("SCHED_FIFO: %s: the child may copy first", strerror(errno));
    child = fork_or_die();
    if (child == 0)
        _exit(check_pages(buf, 0, npages, SEED, NULL) == 0 && !inject_here() ? 0 : 3);
    if (r)
        *res = read_fixed(r, pipe_rd, buf + TARGET_PAGE * WORDS_PER_PAGE, PAGE_SIZE);
    sched_setscheduler(0, SCHED_OTHER, &other);
    sched_setaffinity(0, sizeof(saved), &saved);
    status = wait_child(child, how, len);
    return exited_ok(status) ? 0 : -1;
}

static int pinned_buffer(void)
{
    size_t size = 8 * MIB, npages = size / PAGE_SIZE, other_size = 8 * MIB;
    int active = afork_active(), rc = 0, res = 0, pipefd[2];
    unsigned long long d0, d_control, d_pinned, p0, sync_pinned;
    uint64_t *buf, *data, *other;
    struct iovec iov;
    struct ring r;
    char how[96];

    if (sysconf(_SC_NPROCESSORS_ONLN) < 2)
        return fail("needs 2 CPUs");
    buf = map_anon(size, 1);
    madvise(buf, size, MADV_NOHUGEPAGE);
    fill_pages(buf, 0, npages, SEED);
    data = map_anon(PAGE_SIZE, 0);
    fill_pages(data, 0, 1, DATA_SEED);
    /* Memory beside the buffer, never pinned: left to the child. */
    other = map_anon(other_size, 1);
    madvise(other, other_size, MADV_NOHUGEPAGE);
    fill_pages(other, 0, other_size / PAGE_SIZE, SEED);

    /* The same fork without a pin: its tables are left to the child. */
    d0 = vmstat_counter("async_fork_deferred");
    if (fork_and_check(buf, npages, NULL, -1, how, sizeof(how), NULL) != 0)
        rc = fail("the child of the fork before the pin: %s", how);
    d_control = vmstat_counter("async_fork_deferred") - d0;

    if (ring_setup(&r) != 0)
        return fail("io_uring_setup: %s (CONFIG_IO_URING)", strerror(errno));
    iov.iov_base = buf;
    iov.iov_len = size;
    if (syscall(__NR_io_uring_register, r.fd, IORING_REGISTER_BUFFERS, &iov, 1) != 0)
        return fail("IORING_REGISTER_BUFFERS: %s", strerror(errno));
    pipe_or_die(pipefd);
    if (write(pipefd[1], data, PAGE_SIZE) != (ssize_t)PAGE_SIZE)
        return fail("write to the pipe: %s", strerror(errno));

    d0 = vmstat_counter("async_fork_deferred");
    p0 = vmstat_counter("async_fork_sync_pinned");
    if (rc == 0 && fork_and_check(buf, npages, &r, pipefd[0], how, sizeof(how), &res) != 0)
        rc = fail("the child saw the buffer changed by a READ_FIXED made after fork (%s): "
                  "its copy of a pinned page was made after fork", how);
    d_pinned = vmstat_counter("async_fork_deferred") - d0;
    sync_pinned = vmstat_counter("async_fork_sync_pinned") - p0;
    info("tables deferred: %llu by the fork before the pin, %llu by the fork with it "
         "(%llu kept as pinned); READ_FIXED after fork: %d", d_control, d_pinned, sync_pinned,
         res);
    if (rc == 0 && res != (int)PAGE_SIZE)
        rc = fail("READ_FIXED into the pinned buffer returned %d, not %lu: nothing was "
                  "written through the pin, the test proves nothing", res, PAGE_SIZE);
    if (rc == 0 && memcmp(buf + TARGET_PAGE * WORDS_PER_PAGE, data, PAGE_SIZE) != 0)
        rc = fail("the parent's buffer does not hold what READ_FIXED read");
    if (rc == 0 && (check_pages(buf, 0, TARGET_PAGE, SEED, NULL) ||
                    check_pages(buf + (TARGET_PAGE + 1) * WORDS_PER_PAGE, TARGET_PAGE + 1,
                                npages - TARGET_PAGE - 1, SEED, NULL)))
        rc = fail("the parent's buffer changed outside the page READ_FIXED filled");
    if (rc == 0 && active > 0 && d_control < size / HUGE_SIZE + other_size / HUGE_SIZE)
        rc = fail("the fork before the pin left %llu page tables to the child, fewer than "
                  "the buffer and the memory beside it: the test proves nothing", d_control);
    if (rc == 0 && active > 0 && d_control - d_pinned != size / HUGE_SIZE)
        rc = fail("the fork with the buffer pinned left %llu page tables to the child, the "
                  "fork before the pin %llu: the %zu tables of the buffer, and only those, "
                  "must stay with fork()", d_pinned, d_control, size / HUGE_SIZE);
    if (rc == 0 && active > 0 && sync_pinned != size / HUGE_SIZE)
        rc = fail("async_fork_sync_pinned counted %llu tables kept for their pinned pages, "
                  "not the buffer's %zu", sync_pinned, size / HUGE_SIZE);
    syscall(__NR_io_uring_register, r.fd, IORING_UNREGISTER_BUFFERS, NULL, 0);
    close(r.fd);
    close_pair(pipefd);
    unmap(buf, size);
    unmap(data, PAGE_SIZE);
    unmap(other, other_size);
    return rc;
}

static int pinned_released(void)
{
    size_t size = 8 * MIB, npages = size / PAGE_SIZE;
    int active = afork_active(), rc = 0, status;
    unsigned long long d0, deferred;
    uint64_t *buf;
    pid_t reader, parent = getpid();
    char how[96];

    buf = map_anon(size, 1);
    madvise(buf, size, MADV_NOHUGEPAGE);
    fill_pages(buf, 0, npages, SEED);
    reader = fork_or_die();
    if (reader == 0) {
        uint64_t *copy = map_anon(size, 0);
        struct iovec local = { copy, size }, remote = { buf, size };

        if (process_vm_readv(parent, &local, 1, &remote, 1, 0) != (ssize_t)size)
            _exit(errno == ENOSYS ? 6 : 4);
        _exit(check_pages(copy, 0, npages, SEED, NULL) ? 5 : 0);
    }
    status = wait_child(reader, how, sizeof(how));
    if (!exited_ok(status))
        rc = fail("process_vm_readv() of the parent's memory: the reader %s (exit 6: ENOSYS, "
                  "no CONFIG_CROSS_MEMORY_ATTACH; 5: it read something else)", how);
    d0 = vmstat_counter("async_fork_deferred");
    if (rc == 0 && fork_and_check(buf, npages, NULL, -1, how, sizeof(how), NULL) != 0)
        rc = fail("the child of the fork after process_vm_readv(): %s", how);
    deferred = vmstat_counter("async_fork_deferred") - d0;
    info("tables deferred by the fork after process_vm_readv(): %llu", deferred);
    if (rc == 0 && active > 0 && deferred < size / HUGE_SIZE)
        rc = fail("the fork after a pin that was released (process_vm_readv()) left %llu page "
                  "tables to the child, fewer than the %zu of its memory: a pin taken once "
                  "makes every later fork synchronous", deferred, size / HUGE_SIZE);
    unmap(buf, size);
    return rc;
}

/* The pages pinned-during-session pins, in tables 1, 3 and 5 of 8. */
#define PIN_REG_PAGE (1 * 512 + 100)     /* io_uring fixed buffer, READ_FIXED */
#define PIN_DREAD_PAGE (3 * 512 + 200)   /* O_DIRECT read into it */
#define PIN_DWRITE_PAGE (5 * 512 + 300)  /* O_DIRECT write from it */

/* Page @page of @buf, as a pointer. */
static uint64_t *page_at(uint64_t *buf, size_t page)
{
    return buf + page * WORDS_PER_PAGE;
}

/* The pins of pinned-during-session, made by the parent right after the
 * fork, before its child (on the same CPU, below it) has run: each
 * result into res[3]. */
static void pin_after_fork(uint64_t *buf, struct ring *r, int pipe_rd, int disk, int res[3])
{
    struct iovec iov = { page_at(buf, PIN_REG_PAGE), PAGE_SIZE };

    res[0] = (int)syscall(__NR_io_uring_register, r->fd, IORING_REGISTER_BUFFERS, &iov, 1);
    if (res[0] == 0)
        res[0] = read_fixed(r, pipe_rd, page_at(buf, PIN_REG_PAGE), PAGE_SIZE);
    res[1] = (int)pread(disk, page_at(buf, PIN_DREAD_PAGE), PAGE_SIZE, 0);
    res[2] = (int)pwrite(disk, page_at(buf, PIN_DWRITE_PAGE), PAGE_SIZE, PAGE_SIZE);
    page_at(buf, PIN_DWRITE_PAGE)[0] ^= ~0ULL;
}

/* The parent's memory after pinned-during-session: the two pages the
 * kernel wrote hold the data, the third the parent's write, the rest the
 * pattern. 0 or fail(). */
static int parent_after_pins(uint64_t *buf, size_t npages)
{
    uint64_t *w = page_at(buf, PIN_DWRITE_PAGE);
    size_t p;

    if (check_pages(page_at(buf, PIN_REG_PAGE), 0, 1, DATA_SEED, NULL) ||
        check_pages(page_at(buf, PIN_DREAD_PAGE), 0, 1, DATA_SEED, NULL))
        return fail("the parent's pages written through a pin after fork lost the data");
    w[0] ^= ~0ULL;
    p = check_pages(w, PIN_DWRITE_PAGE, 1, SEED, NULL);
    w[0] ^= ~0ULL;
    if (p)
        return fail("the parent's write after its O_DIRECT write is not in its memory");
    for (p = 0; p < npages; p++)
        if (p != PIN_REG_PAGE && p != PIN_DREAD_PAGE && p != PIN_DWRITE_PAGE &&
            check_pages(page_at(buf, p), p, 1, SEED, NULL))
            return fail("the parent's page %zu changed", p);
    return 0;
}

static int pinned_during_session(void)
{
    struct sched_param fifo = { .sched_priority = 1 }, other = { 0 };
    size_t size = 8 * HUGE_SIZE, npages = size / PAGE_SIZE;
    int active = afork_active(), rc = 0, pipefd[2], disk, res[3], status;
    unsigned long long g0, d0, gup, deferred;
    uint64_t *buf, *data;
    struct ring r;
    cpu_set_t saved;
    char how[96];
    pid_t child;

    if (!getenv("AFORK_GUEST"))
        return fail("this test writes /dev/ram1: it runs only in the test guest (AFORK_GUEST=1)");
    if (sysconf(_SC_NPROCESSORS_ONLN) < 2)
        return fail("needs 2 CPUs");
    disk = open("/dev/ram1", O_RDWR | O_DIRECT);
    if (disk < 0)
        return fail("open /dev/ram1 with O_DIRECT: %s (CONFIG_BLK_DEV_RAM, brd.rd_nr=2)",
                    strerror(errno));
    data = map_anon(2 * PAGE_SIZE, 0);
    fill_pages(data, 0, 1, DATA_SEED);
    if (pwrite(disk, data, PAGE_SIZE, 0) != (ssize_t)PAGE_SIZE)
        die_errno("pwrite /dev/ram1");
    buf = map_anon(size, 1);
    madvise(buf, size, MADV_NOHUGEPAGE);
    fill_pages(buf, 0, npages, SEED);
    if (ring_setup(&r) != 0)
        return fail("io_uring_setup: %s (CONFIG_IO_URING)", strerror(errno));
    pipe_or_die(pipefd);
    if (write(pipefd[1], data, PAGE_SIZE) != (ssize_t)PAGE_SIZE)
        die_errno("write to the pipe");

    g0 = vmstat_counter("async_fork_copied_gup");
    d0 = vmstat_counter("async_fork_deferred");
    sched_getaffinity(0, sizeof(saved), &saved);
    pin_to_cpu(0);
    if (sched_setscheduler(0, SCHED_FIFO | SCHED_RESET_ON_FORK, &fifo) != 0)
        info("SCHED_FIFO: %s: the child may copy first", strerror(errno));
    child = fork_or_die();
    if (child == 0)
        _exit(check_pages(buf, 0, npages, SEED, NULL) == 0 && !inject_here() ? 0 : 3);
    pin_after_fork(buf, &r, pipefd[0], disk, res);
    sched_setscheduler(0, SCHED_OTHER, &other);
    sched_setaffinity(0, sizeof(saved), &saved);
    status = wait_child(child, how, sizeof(how));
    gup = vmstat_counter("async_fork_copied_gup") - g0;
    deferred = vmstat_counter("async_fork_deferred") - d0;
    info("after fork: fixed buffer + READ_FIXED %d, O_DIRECT read %d, O_DIRECT write %d; "
         "tables deferred %llu, copied first for GUP %llu", res[0], res[1], res[2], deferred, gup);

    if (!exited_ok(status))
        rc = fail("the child's snapshot is wrong (%s): a page was written through a pin taken "
                  "after fork before the child had its copy", how);
    if (rc == 0 && (res[0] != (int)PAGE_SIZE || res[1] != (int)PAGE_SIZE ||
                    res[2] != (int)PAGE_SIZE))
        rc = fail("a pinned I/O did not move one page (%d, %d, %d): the test proves nothing",
                  res[0], res[1], res[2]);
    if (rc == 0)
        rc = parent_after_pins(buf, npages);
    if (rc == 0 && (pread(disk, data + WORDS_PER_PAGE, PAGE_SIZE, PAGE_SIZE) != (ssize_t)PAGE_SIZE ||
                    check_pages(data + WORDS_PER_PAGE, PIN_DWRITE_PAGE, 1, SEED, NULL)))
        rc = fail("the O_DIRECT write from the parent's memory did not write the page it held");
    if (rc == 0 && active > 0 && deferred < size / HUGE_SIZE)
        rc = fail("the fork left %llu tables to the child, fewer than the region's %zu: the "
                  "pins were not taken during a session, the test proves nothing",
                  deferred, size / HUGE_SIZE);
    if (rc == 0 && active > 0 && gup < 2)
        rc = fail("the pins for writing had %llu tables copied first (async_fork_copied_gup), "
                  "not 2: they were not taken while the child had the tables to copy", gup);
    syscall(__NR_io_uring_register, r.fd, IORING_UNREGISTER_BUFFERS, NULL, 0);
    close(r.fd);
    close_pair(pipefd);
    close(disk);
    unmap(buf, size);
    unmap(data, 2 * PAGE_SIZE);
    return rc;
}

const struct test_case pinned_tests[] = {
    { "pinned-buffer", "an io_uring fixed buffer written by READ_FIXED after fork: the child "
      "keeps its snapshot, the buffer's tables stay with fork(), the rest is deferred",
      pinned_buffer },
    { "pinned-released", "process_vm_readv() of the parent (a pin released at once), then "
      "fork: its page tables are still left to the child", pinned_released },
    { "pinned-during-session", "pins for writing and reading taken after fork, before the "
      "child copied: exact snapshot, the parent's and the disk's data right",
      pinned_during_session },
    { NULL, NULL, NULL },
};
