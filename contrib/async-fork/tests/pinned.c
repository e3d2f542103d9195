/* pinned.c -- memory the kernel writes without a fault: pinned pages.
 *
 *   pinned-buffer  an io_uring fixed buffer (pinned pages, written by the
 *                  kernel through the pin, never through the parent's page
 *                  tables) is registered, the parent forks, and a
 *                  READ_FIXED lands in the buffer before the child has run.
 *                  The child must see the buffer as it was at fork, and a
 *                  process with pinned pages must not have its page tables
 *                  left to the child (async_fork_deferred does not grow;
 *                  the same fork before the pin did defer).
 */
#include "common.h"

#include <errno.h>
#include <linux/io_uring.h>
#include <sched.h>
#include <stdio.h>
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
    size_t size = 8 * MIB, npages = size / PAGE_SIZE;
    int active = afork_active(), rc = 0, res = 0, pipefd[2];
    unsigned long long d0, d_control, d_pinned;
    uint64_t *buf, *data;
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
    if (rc == 0 && fork_and_check(buf, npages, &r, pipefd[0], how, sizeof(how), &res) != 0)
        rc = fail("the child saw the buffer changed by a READ_FIXED made after fork (%s): "
                  "its copy of a pinned page was made after fork", how);
    d_pinned = vmstat_counter("async_fork_deferred") - d0;
    info("tables deferred: %llu by the fork before the pin, %llu by the fork with it; "
         "READ_FIXED after fork: %d", d_control, d_pinned, res);
    if (rc == 0 && res != (int)PAGE_SIZE)
        rc = fail("READ_FIXED into the pinned buffer returned %d, not %lu: nothing was "
                  "written through the pin, the test proves nothing", res, PAGE_SIZE);
    if (rc == 0 && memcmp(buf + TARGET_PAGE * WORDS_PER_PAGE, data, PAGE_SIZE) != 0)
        rc = fail("the parent's buffer does not hold what READ_FIXED read");
    if (rc == 0 && (check_pages(buf, 0, TARGET_PAGE, SEED, NULL) ||
                    check_pages(buf + (TARGET_PAGE + 1) * WORDS_PER_PAGE, TARGET_PAGE + 1,
                                npages - TARGET_PAGE - 1, SEED, NULL)))
        rc = fail("the parent's buffer changed outside the page READ_FIXED filled");
    if (rc == 0 && active > 0 && d_pinned)
        rc = fail("the fork of a process with pinned pages left %llu page tables to the "
                  "child", d_pinned);
    if (rc == 0 && active > 0 && !d_control)
        rc = fail("the fork before the pin left no page table to the child: the test "
                  "proves nothing");
    syscall(__NR_io_uring_register, r.fd, IORING_UNREGISTER_BUFFERS, NULL, 0);
    close(r.fd);
    close_pair(pipefd);
    unmap(buf, size);
    unmap(data, PAGE_SIZE);
    return rc;
}

const struct test_case pinned_tests[] = {
    { "pinned-buffer", "an io_uring fixed buffer written by READ_FIXED after fork: the child "
      "keeps its snapshot, and a process with pinned pages is not deferred", pinned_buffer },
    { NULL, NULL, NULL },
};
