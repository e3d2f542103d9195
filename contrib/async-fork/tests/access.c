/* access.c -- forktest cases where something other than the parent's own
 * loads and stores reaches memory while its child still has page tables
 * to copy: a device that mirrors the parent (HMM: its notifier, its writes,
 * a migration to device memory), a debugger (ptrace, /proc/PID/mem), KSM
 * merging and userfaultfd write-protection armed after the fork.
 *
 * In each the child is created into a cgroup whose cpu.max keeps it off
 * the CPU (1 ms per second) while the test acts, so that its session is
 * still under way; then the limit goes and the child checks its snapshot.
 * Guest only: the tests change cgroups and KSM's settings.
 */
#include "common.h"

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define SEED 0xacce55ULL
#define PAGES_PER_TABLE (HUGE_SIZE / PAGE_SIZE)
#define HELD_QUOTA "1000 1000000"
/* Longer than this, an operation waited for the held child's copy. */
#define HELD_WAIT_S 10
/* At 1 ms a second the held child still copies a few dozen tables a
 * second under QEMU TCG: with fewer than this, it may be done before the
 * test has acted, whatever the scale. */
#define HELD_MIN_TABLES 128

/* ---- a child held off the CPU ---- */

/* What the child checks once it runs: the number of wrong words. */
typedef size_t (*snapshot_check)(const uint64_t *base, size_t pages, uint64_t seed,
                                 size_t *bad_page);

struct held {
    char dir[128];
    int cg_fd;
    pid_t pid;
    int rep[2];
};

static size_t plain_snapshot(const uint64_t *base, size_t pages, uint64_t seed,
                             size_t *bad_page)
{
    return check_pages(base, 0, pages, seed, bad_page);
}

static void held_dir(char *dir, size_t len, pid_t owner)
{
    snprintf(dir, len, CG_ROOT "/afork-held-%d", (int)owner);
}

/* A new cgroup for the held child, named after @owner, and the pipe of
 * its report. */
static int held_setup(struct held *h, pid_t owner)
{
    h->cg_fd = -1;
    h->pid = -1;
    h->rep[0] = h->rep[1] = -1;
    held_dir(h->dir, sizeof(h->dir), owner);
    if (!getenv("AFORK_GUEST"))
        return fail("this test changes cgroups: it runs only in the test guest (AFORK_GUEST=1)");
    if (set_up_cgroup(h->dir, "cpu", "cpu.max", HELD_QUOTA, &h->cg_fd) != 0)
        return -1;
    pipe_or_die(h->rep);
    return 0;
}

/* Fork this process's child into the held cgroup; once it runs, it checks
 * @pages pages of @base with @check and reports. */
static int held_clone(struct held *h, const uint64_t *base, size_t pages, uint64_t seed,
                      snapshot_check check)
{
    struct report r = { 0 };
    size_t bad_page = 0;

    h->pid = clone_into(h->cg_fd);
    if (h->pid < 0)
        return fail("clone3(CLONE_INTO_CGROUP): %s", strerror(errno));
    if (h->pid == 0) {
        r.bad_words = check(base, pages, inject_here() ? seed + 1 : seed, &bad_page);
        r.bad_page = bad_page;
        r.checked_pages = pages;
        send_report(h->rep[1], &r);
        _exit(0);
    }
    return 0;
}

static int held_fork(struct held *h, const uint64_t *base, size_t pages, uint64_t seed,
                     snapshot_check check)
{
    if (held_setup(h, getpid()) != 0 || held_clone(h, base, pages, seed, check) != 0)
        return -1;
    close_end(h->rep, 1);
    return 0;
}

/* Let the child run and take its report into @r (checked_pages 0 if none). */
static void held_release(struct held *h, struct report *r, char *how, size_t len)
{
    char path[192];

    memset(r, 0, sizeof(*r));
    snprintf(how, len, "no child");
    snprintf(path, sizeof(path), "%s/cpu.max", h->dir);
    if (h->cg_fd >= 0)
        write_file(path, "max");
    if (h->pid > 0) {
        if (recv_report(h->rep[0], r) != 0)
            r->checked_pages = 0;
        wait_child(h->pid, how, len);
    }
    close_pair(h->rep);
    if (h->cg_fd >= 0)
        close(h->cg_fd);
    if (rmdir(h->dir) != 0 && errno != ENOENT)
        info("rmdir %s: %s", h->dir, strerror(errno));
}

static int child_verdict(const struct report *r, const char *how)
{
    if (!r->checked_pages)
        return fail("the child sent no report (%s)", how);
    if (r->bad_words)
        return fail("the child's snapshot has %llu wrong words (first at page %llu)",
                    (unsigned long long)r->bad_words, (unsigned long long)r->bad_page);
    return 0;
}

/* Release the child and judge its snapshot. */
static int held_end(struct held *h)
{
    struct report r;
    char how[96];

    held_release(h, &r, how, sizeof(how));
    return child_verdict(&r, how);
}

/* The counters over the test say the child was held back: it had copied
 * fewer than @limit of the @tables (it copies in address order). */
static int was_held(const struct counters *d, size_t limit, size_t tables, int active)
{
    if (active > 0 && d->v[C_CHILD] >= limit)
        return fail("the child copied %llu of %zu tables while the test acted: it was not "
                    "held back, the test proves nothing", d->v[C_CHILD], tables);
    return 0;
}

/* Page @k of the last tables of a region of @tables: the child copies in
 * address order, so these are left longest. */
static size_t late_page(size_t tables, size_t k, size_t in_table)
{
    return (tables - 1 - k) * PAGES_PER_TABLE + in_table;
}

/* ---- device-mirror: HMM's test device (lib/test_hmm.c) ---- */

#define DMIRROR "/dev/hmm_dmirror0"

/* lib/test_hmm_uapi.h */
struct hmm_dmirror_cmd {
    uint64_t addr;
    uint64_t ptr;
    uint64_t npages;
    uint64_t cpages;
    uint64_t faults;
};
#define HMM_DMIRROR_WRITE _IOWR('H', 0x01, struct hmm_dmirror_cmd)
#define HMM_DMIRROR_MIGRATE_TO_DEV _IOWR('H', 0x02, struct hmm_dmirror_cmd)
#define HMM_DMIRROR_SNAPSHOT _IOWR('H', 0x04, struct hmm_dmirror_cmd)
#define HMM_DMIRROR_PROT_WRITE 0x02
#define HMM_DMIRROR_PROT_DEV_PRIVATE_LOCAL 0x20

/* What the device writes into page @page: word w is mark_value(@page, w). */
static void device_words(uint64_t *buf, size_t page)
{
    for (size_t w = 0; w < WORDS_PER_PAGE; w++)
        buf[w] = mark_value(page, w);
}

/* The device's view of @page (HMM_DMIRROR_SNAPSHOT): its protection byte. */
static int device_view(int fd, uint64_t *base, size_t page, unsigned char *prot)
{
    struct hmm_dmirror_cmd cmd = { (uintptr_t)(base + page * WORDS_PER_PAGE),
                                   (uintptr_t)prot, 1, 0, 0 };

    if (ioctl(fd, HMM_DMIRROR_SNAPSHOT, &cmd) != 0)
        return fail("HMM_DMIRROR_SNAPSHOT at page %zu: %s", page, strerror(errno));
    return 0;
}

/* A page the child is still to map must reach the device read-only. */
static int device_reads(int fd, uint64_t *base, size_t page)
{
    unsigned char prot = 0;

    if (device_view(fd, base, page, &prot) != 0)
        return -1;
    if (prot & HMM_DMIRROR_PROT_WRITE)
        return fail("the device mirrors page %zu writable (protection %#x) while the child "
                    "is still to map it", page, prot);
    return 0;
}

static int device_write(int fd, uint64_t *base, size_t page, uint64_t *buf)
{
    struct hmm_dmirror_cmd cmd = { (uintptr_t)(base + page * WORDS_PER_PAGE),
                                   (uintptr_t)buf, 1, 0, 0 };

    device_words(buf, page);
    if (ioctl(fd, HMM_DMIRROR_WRITE, &cmd) != 0)
        return fail("HMM_DMIRROR_WRITE at page %zu: %s", page, strerror(errno));
    return 0;
}

/* Move @page to the device's memory (its PTE becomes a device-private
 * entry): the device gets the parent's data, and no write access while
 * the child shares the page. */
static int device_migrate(int fd, uint64_t *base, size_t page, uint64_t *buf)
{
    struct hmm_dmirror_cmd cmd = { (uintptr_t)(base + page * WORDS_PER_PAGE),
                                   (uintptr_t)buf, 1, 0, 0 };
    unsigned char prot = 0;

    if (ioctl(fd, HMM_DMIRROR_MIGRATE_TO_DEV, &cmd) != 0)
        return fail("HMM_DMIRROR_MIGRATE_TO_DEV at page %zu: %s", page, strerror(errno));
    if (cmd.cpages != 1)
        return fail("the device took %llu of 1 page at page %zu: the test proves nothing",
                    (unsigned long long)cmd.cpages, page);
    if (check_pages(buf, page, 1, SEED, NULL))
        return fail("the device took page %zu with data other than the parent's", page);
    if (device_view(fd, base, page, &prot) != 0)
        return -1;
    if (!(prot & HMM_DMIRROR_PROT_DEV_PRIVATE_LOCAL))
        return fail("page %zu is not in the device's memory after its migration "
                    "(protection %#x): the test proves nothing", page, prot);
    if (prot & HMM_DMIRROR_PROT_WRITE)
        return fail("the device holds page %zu writable in its memory while the child "
                    "shares it", page);
    return 0;
}

/* The tables of each step: the device reads the last @n, writes the @n
 * before them, takes a page of the @n before those. */
enum { STEP_READ, STEP_WRITE, STEP_MIGRATE };

static size_t step_page(size_t tables, size_t n, int step, size_t k)
{
    return late_page(tables, (size_t)step * n + k, step == STEP_WRITE ? 3 : 7);
}

/* The parent's region: the device's words in the pages it wrote, the
 * pattern elsewhere. Reading a page in device memory brings it back. */
static size_t mirror_parent_bad(const uint64_t *base, size_t tables, size_t n)
{
    size_t bad = 0, pages = tables * PAGES_PER_TABLE;
    uint64_t *want = map_anon(PAGE_SIZE, 0);

    for (size_t p = 0; p < pages; p++) {
        const uint64_t *w = base + p * WORDS_PER_PAGE;
        size_t from_end = tables - 1 - p / PAGES_PER_TABLE;
        int device = p % PAGES_PER_TABLE == 3 && from_end >= n && from_end < 2 * n;

        if (!device) {
            bad += check_pages(w, p, 1, SEED, NULL);
            continue;
        }
        device_words(want, p);
        bad += memcmp(w, want, PAGE_SIZE) != 0;
    }
    unmap(want, PAGE_SIZE);
    return bad;
}

/* Open the device (its notifier registered over the whole address space,
 * under mm_take_all_locks()), then have it read, write and take pages of
 * @n tables each. */
static int device_act(uint64_t *base, size_t tables, size_t n, double *opened,
                      struct counters c[3])
{
    uint64_t *buf = map_anon(PAGE_SIZE, 0);
    double t0;
    int fd, rc = 0;

    read_counters(&c[0]);
    t0 = now_seconds();
    fd = open(DMIRROR, O_RDWR | O_CLOEXEC);
    *opened = now_seconds() - t0;
    read_counters(&c[1]);
    if (fd < 0)
        rc = fail("open " DMIRROR ": %s", strerror(errno));
    for (size_t k = 0; rc == 0 && k < n; k++)
        rc = device_reads(fd, base, step_page(tables, n, STEP_READ, k));
    for (size_t k = 0; rc == 0 && k < n; k++)
        rc = device_write(fd, base, step_page(tables, n, STEP_WRITE, k), buf);
    for (size_t k = 0; rc == 0 && k < n; k++)
        rc = device_migrate(fd, base, step_page(tables, n, STEP_MIGRATE, k), buf);
    read_counters(&c[2]);
    if (rc == 0 && mirror_parent_bad(base, tables, n))
        rc = fail("the parent's memory is not what it and the device wrote");
    if (fd >= 0)
        close(fd);
    unmap(buf, PAGE_SIZE);
    return rc;
}

static int device_mirror(void)
{
    size_t tables = scaled(256, HELD_MIN_TABLES), n = scaled(8, 2);
    int active = afork_active(), rc;
    struct counters c[3] = { 0 }, d_open, d_all;
    uint64_t *base;
    double opened = 0;
    struct held h;

    if (access(DMIRROR, F_OK) != 0)
        return fail(DMIRROR " is missing: the kernel has no CONFIG_TEST_HMM");
    base = patterned_tables(tables, SEED);
    rc = held_fork(&h, base, tables * PAGES_PER_TABLE, SEED, plain_snapshot);
    if (rc == 0)
        rc = device_act(base, tables, n, &opened, c);
    if (held_end(&h) != 0)
        rc = -1;
    counters_delta(&d_open, &c[0], &c[1]);
    counters_delta(&d_all, &c[0], &c[2]);
    info("%zu tables; the notifier registered in %.3f s, tables copied by the parent "
         "meanwhile %llu; the device read, wrote and took a page of %zu tables each: tables "
         "copied for it %llu, by the child %llu%s", tables, opened, parent_copies(&d_open), n,
         d_all.v[C_GUP], d_all.v[C_CHILD], active > 0 ? "" : " (no asynchronous fork)");
    if (rc == 0 && opened > HELD_WAIT_S)
        rc = fail("registering the notifier took %.1f s: it waited for the held child",
                  opened);
    if (rc == 0 && active > 0 && parent_copies(&d_open))
        rc = fail("registering the notifier (mm_take_all_locks()) made the parent copy %llu "
                  "tables: it changes no entry", parent_copies(&d_open));
    if (rc == 0)
        rc = was_held(&d_all, tables / 2, tables, active);
    unmap(base, tables * HUGE_SIZE);
    return rc;
}

/* ---- remote-access: ptrace and /proc/PID/mem ---- */

struct remote_said {
    pid_t child;
    uint64_t base;
};

/* The parent (forked by the test): fill, fork the held child, say so; once
 * told, check its own memory (the debugger's words at the poked places)
 * and pass on its report and the child's. */
static void remote_parent(size_t tables, size_t pokes, int said_fd, int go_fd, int rep_fd)
{
    size_t pages = tables * PAGES_PER_TABLE;
    struct remote_said said;
    struct report r = { 0 }, rc;
    uint64_t *base = patterned_tables(tables, SEED);
    struct held h;
    char how[96];

    if (held_fork(&h, base, pages, SEED, plain_snapshot) != 0)
        _exit(3);
    said.child = h.pid;
    said.base = (uintptr_t)base;
    if (write(said_fd, &said, sizeof(said)) != (ssize_t)sizeof(said) || wait_byte(go_fd))
        _exit(4);
    for (size_t k = 0; k < pokes; k++) {
        size_t page = late_page(tables, k, 11);
        uint64_t *w = base + page * WORDS_PER_PAGE + 5;

        r.bad_words += *w != mark_value(11, k);
        *w = pattern_base(SEED, page) + 5;
    }
    r.bad_words += check_pages(base, 0, pages, SEED, NULL);
    r.checked_pages = 2;
    send_report(rep_fd, &r);
    held_release(&h, &rc, how, sizeof(how));
    send_report(rep_fd, &rc);
    _exit(0);
}

/* Stop the parent with PTRACE_INTERRUPT, write a word into each of @pokes
 * tables (PTRACE_POKEDATA: a GUP for writing), read one back, let it go. */
static int poke_parent(pid_t parent, uint64_t base, size_t tables, size_t pokes)
{
    int status, rc = 0;
    long got;

    if (ptrace(PTRACE_SEIZE, parent, 0, 0) != 0 || ptrace(PTRACE_INTERRUPT, parent, 0, 0))
        return fail("PTRACE_SEIZE/INTERRUPT: %s", strerror(errno));
    if (waitpid(parent, &status, 0) != parent || !WIFSTOPPED(status))
        return fail("the parent did not stop for its debugger (status %#x)", status);
    for (size_t k = 0; rc == 0 && k < pokes; k++) {
        uint64_t addr = base + (late_page(tables, k, 11) * WORDS_PER_PAGE + 5) * 8;

        if (ptrace(PTRACE_POKEDATA, parent, addr, mark_value(11, k)) != 0)
            rc = fail("PTRACE_POKEDATA: %s", strerror(errno));
        errno = 0;
        got = ptrace(PTRACE_PEEKDATA, parent, addr, 0);
        if (rc == 0 && (errno || (uint64_t)got != mark_value(11, k)))
            rc = fail("PTRACE_PEEKDATA after POKEDATA read %#lx (%s)", got, strerror(errno));
    }
    if (ptrace(PTRACE_DETACH, parent, 0, 0) != 0 && rc == 0)
        rc = fail("PTRACE_DETACH: %s", strerror(errno));
    return rc;
}

struct mem_reader {
    pid_t child;
    uint64_t base;
    size_t tables, pokes;
    size_t bad;                 /* wrong words read */
    int err;                    /* errno of a failed read */
    atomic_int done;
};

/* Read, through /proc/CHILD/mem, pages of tables the child has still to
 * copy, and the pages the debugger poked in the parent: the child's memory
 * must hold the pattern there. */
static void *read_child_mem(void *arg)
{
    struct mem_reader *m = arg;
    uint64_t *buf = map_anon(PAGE_SIZE, 0);
    char path[64];
    int fd;

    snprintf(path, sizeof(path), "/proc/%d/mem", (int)m->child);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        m->err = errno;
    for (size_t k = 0; fd >= 0 && k < 2 * m->pokes && !m->err; k++) {
        /* The middle tables first, left to the child; then the poked ones. */
        size_t page = k < m->pokes ? (m->tables / 2 + k) * PAGES_PER_TABLE + 11 :
                                     late_page(m->tables, k - m->pokes, 11);

        if (pread(fd, buf, PAGE_SIZE, (off_t)(m->base + page * PAGE_SIZE)) != PAGE_SIZE)
            m->err = errno ? errno : EIO;
        else
            m->bad += check_pages(buf, page, 1, SEED, NULL);
    }
    if (fd >= 0)
        close(fd);
    unmap(buf, PAGE_SIZE);
    atomic_store(&m->done, 1);
    return NULL;
}

/* Read the held child's memory; let it run after a while; the read must
 * then end with its snapshot. Sets *waited when the read had not ended
 * while the child was held. */
static int peek_child(struct mem_reader *m, pid_t parent, int *waited, struct counters *mid)
{
    char dir[128], path[192];
    pthread_t th;
    double t0;

    if (pthread_create(&th, NULL, read_child_mem, m) != 0)
        die_errno("pthread_create");
    usleep(300000);
    *waited = !atomic_load(&m->done);
    read_counters(mid);
    held_dir(dir, sizeof(dir), parent);
    snprintf(path, sizeof(path), "%s/cpu.max", dir);
    write_file(path, "max");
    t0 = now_seconds();
    while (!atomic_load(&m->done) && now_seconds() - t0 < 60)
        usleep(10000);
    if (!atomic_load(&m->done))
        return fail("reading /proc/%d/mem had not ended 60 s after the child could run",
                    (int)m->child);
    pthread_join(th, NULL);
    if (m->err)
        return fail("reading /proc/%d/mem: %s", (int)m->child, strerror(m->err));
    if (m->bad)
        return fail("/proc/%d/mem showed %zu wrong words of the child's snapshot",
                    (int)m->child, m->bad);
    return 0;
}

static int remote_reports(int rep_fd)
{
    struct report rp, rch;

    if (recv_report(rep_fd, &rp) != 0 || rp.checked_pages != 2)
        return fail("no report from the parent");
    if (rp.bad_words)
        return fail("the parent's memory has %llu wrong words after the debugger's writes",
                    (unsigned long long)rp.bad_words);
    if (recv_report(rep_fd, &rch) != 0)
        rch.checked_pages = 0;
    return child_verdict(&rch, "see the parent");
}

static int remote_access(void)
{
    size_t tables = scaled(256, HELD_MIN_TABLES), pokes = scaled(16, 4);
    struct mem_reader m = { 0 };
    struct remote_said said;
    struct counters c0, c1, c2, d, d_peek;
    int said_p[2], go[2], rep[2], rc, waited = 0, active = afork_active(), status;
    char how[96];
    pid_t parent;

    pipe_or_die(said_p);
    pipe_or_die(go);
    pipe_or_die(rep);
    parent = fork_or_die();
    if (parent == 0)
        remote_parent(tables, pokes, said_p[1], go[0], rep[1]);
    close_end(said_p, 1);
    parent_ends(go, rep);
    if (read(said_p[0], &said, sizeof(said)) != (ssize_t)sizeof(said)) {
        wait_child(parent, how, sizeof(how));
        rc = fail("the parent ended with %s before it forked", how);
        goto out;
    }
    read_counters(&c0);
    rc = poke_parent(parent, said.base, tables, pokes);
    read_counters(&c1);
    m.child = said.child;
    m.base = said.base;
    m.tables = tables;
    m.pokes = pokes;
    if (peek_child(&m, parent, &waited, &c2) != 0)
        rc = -1;
    send_byte(go[1]);
    if (remote_reports(rep[0]) != 0)
        rc = -1;
    status = wait_child(parent, how, sizeof(how));
    counters_delta(&d, &c0, &c1);
    counters_delta(&d_peek, &c0, &c2);
    info("%zu tables; PTRACE_POKEDATA into %zu of them, the child held: tables copied for "
         "it by the parent %llu, by the child %llu; reading the child's pending tables "
         "through /proc/PID/mem %s while it was held (%llu copied by then)%s", tables, pokes,
         d.v[C_GUP], d.v[C_CHILD], waited ? "waited" : "returned", d_peek.v[C_CHILD],
         active > 0 ? "" : " (no asynchronous fork)");
    if (rc == 0 && !exited_ok(status))
        rc = fail("the parent ended with %s", how);
    if (rc == 0)
        rc = was_held(&d_peek, tables / 2, tables, active);
    if (rc == 0 && active > 0 && !waited)
        rc = fail("reading tables the held child had not copied returned at once: it must "
                  "wait for the child's copy");
    if (rc == 0 && active > 0 && d.v[C_GUP] == 0)
        rc = fail("the debugger's writes copied no table first: the child had copied "
                  "them, the test proves nothing");
out:
    close_pair(said_p);
    close_pair(go);
    close_pair(rep);
    return rc;
}

/* ---- ksm-after-fork ---- */

#define KSM "/sys/kernel/mm/ksm/"
/* Page p holds the pattern of page p % KSM_KINDS: many equal pages. */
#define KSM_KINDS 8

static size_t ksm_snapshot(const uint64_t *base, size_t pages, uint64_t seed,
                           size_t *bad_page)
{
    size_t bad = 0, n;

    for (size_t p = 0; p < pages; p++) {
        n = check_pages(base + p * WORDS_PER_PAGE, p % KSM_KINDS, 1, seed, NULL);
        if (n && !bad)
            *bad_page = p;
        bad += n;
    }
    return bad;
}

static uint64_t *repeating_tables(size_t tables)
{
    uint64_t *base = map_anon(tables * HUGE_SIZE, 1);

    madvise(base, tables * HUGE_SIZE, MADV_NOHUGEPAGE);
    for (size_t p = 0; p < tables * PAGES_PER_TABLE; p++)
        fill_pages(base + p * WORDS_PER_PAGE, p % KSM_KINDS, 1, SEED);
    return base;
}

/* Run ksmd flat out until @want pages share a KSM page or @limit_s pass;
 * the number sharing then. */
static long ksm_merge(long want, double limit_s)
{
    double t0 = now_seconds();
    long sharing = 0;

    write_file(KSM "sleep_millisecs", "1");
    write_file(KSM "pages_to_scan", "4096");
    write_file(KSM "run", "1");
    while (now_seconds() - t0 < limit_s) {
        sharing = read_long_file(KSM "pages_sharing");
        if (sharing >= want)
            break;
        usleep(20000);
    }
    return sharing;
}

/* The parent writes one word in each of the first @n pages of every
 * table: a fault on a page KSM merged, in a table the child has not
 * copied. */
static void ksm_write(uint64_t *base, size_t tables, size_t n)
{
    for (size_t t = 0; t < tables; t++)
        for (size_t i = 0; i < n; i++)
            base[(t * PAGES_PER_TABLE + i) * WORDS_PER_PAGE] = mark_value(12, t << 8 | i);
}

static size_t ksm_parent_bad(const uint64_t *base, size_t tables, size_t n)
{
    size_t bad = 0;

    for (size_t p = 0; p < tables * PAGES_PER_TABLE; p++) {
        const uint64_t *w = base + p * WORDS_PER_PAGE;
        int marked = p % PAGES_PER_TABLE < n;
        uint64_t want = mark_value(12, (p / PAGES_PER_TABLE) << 8 | p % PAGES_PER_TABLE);

        bad += marked && w[0] != want;
        bad += check_pages(w, p % KSM_KINDS, 1, SEED, NULL) - (marked ? 1 : 0);
    }
    return bad;
}

static int ksm_after_fork(void)
{
    /* Only the last tables are mergeable: the child reaches them last. */
    size_t tables = scaled(256, HELD_MIN_TABLES), pages = tables * PAGES_PER_TABLE, n = 4;
    size_t merged_tables = scaled(8, 2), merged = merged_tables * PAGES_PER_TABLE;
    uint64_t *merged_base;
    char sleep_ms[24], to_scan[24];
    int active = afork_active(), rc;
    struct counters c0, c1, d;
    long sharing = 0;
    uint64_t *base;
    struct held h;

    if (access(KSM "run", W_OK) != 0)
        return fail(KSM "run is missing: the kernel has no CONFIG_KSM");
    snprintf(sleep_ms, sizeof(sleep_ms), "%ld", read_long_file(KSM "sleep_millisecs"));
    snprintf(to_scan, sizeof(to_scan), "%ld", read_long_file(KSM "pages_to_scan"));
    base = repeating_tables(tables);
    merged_base = base + (pages - merged) * WORDS_PER_PAGE;
    rc = held_fork(&h, base, pages, SEED, ksm_snapshot);
    read_counters(&c0);
    if (rc == 0 && madvise(merged_base, merged * PAGE_SIZE, MADV_MERGEABLE) != 0)
        rc = fail("MADV_MERGEABLE: %s", strerror(errno));
    if (rc == 0)
        sharing = ksm_merge((long)merged / 2, 60);
    if (rc == 0)
        ksm_write(base, tables, n);
    read_counters(&c1);
    if (held_end(&h) != 0)
        rc = -1;
    write_file(KSM "run", "2");             /* unmerge everything, stop */
    write_file(KSM "sleep_millisecs", sleep_ms);
    write_file(KSM "pages_to_scan", to_scan);
    counters_delta(&d, &c0, &c1);
    info("%zu tables of %d kinds of page, the last %zu mergeable after fork; ksmd merged "
         "%ld pages while the child was held; tables copied by the parent %llu, by the "
         "child %llu%s", tables, KSM_KINDS, merged_tables, sharing, parent_copies(&d),
         d.v[C_CHILD], active > 0 ? "" : " (no asynchronous fork)");
    if (rc == 0 && ksm_parent_bad(base, tables, n))
        rc = fail("the parent's memory is not what it wrote over the merged pages");
    if (rc == 0 && sharing < (long)merged / 2)
        rc = fail("ksmd merged %ld of %zu pages in 60 s: the test proves nothing", sharing,
                  merged);
    if (rc == 0)
        rc = was_held(&d, tables - merged_tables, tables, active);
    unmap(base, tables * HUGE_SIZE);
    write_file(KSM "run", "0");
    return rc;
}

/* ---- uffd-wp-after-fork ---- */

struct wp_ctx {
    int uffd;
    atomic_long faults;
    atomic_int quit;
};

/* Resolve each write-protect fault by lifting the protection of its page. */
static void *wp_handler(void *arg)
{
    struct wp_ctx *u = arg;
    struct uffd_msg msg;

    while (!atomic_load(&u->quit)) {
        struct pollfd pfd = { u->uffd, POLLIN, 0 };
        struct uffdio_writeprotect wp = { { 0, PAGE_SIZE }, 0 };

        if (poll(&pfd, 1, 50) <= 0 || read(u->uffd, &msg, sizeof(msg)) != sizeof(msg))
            continue;
        if (msg.event != UFFD_EVENT_PAGEFAULT)
            continue;
        wp.range.start = msg.arg.pagefault.address & ~(PAGE_SIZE - 1);
        if (ioctl(u->uffd, UFFDIO_WRITEPROTECT, &wp) != 0)
            die_errno("UFFDIO_WRITEPROTECT (resolve)");
        atomic_fetch_add(&u->faults, 1);
    }
    return NULL;
}

/* Register [@start, @start + @len) for write-protect faults and protect it:
 * a range that cuts tables in two, in the middle of the region. */
static int wp_arm(struct wp_ctx *u, uint64_t *start, size_t len)
{
    struct uffdio_api api = { UFFD_API, 0, 0 };
    struct uffdio_register reg = { { (uintptr_t)start, len }, UFFDIO_REGISTER_MODE_WP, 0 };
    struct uffdio_writeprotect wp = { { (uintptr_t)start, len }, UFFDIO_WRITEPROTECT_MODE_WP };

    u->uffd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
    if (u->uffd < 0)
        return fail("userfaultfd(): %s", strerror(errno));
    if (ioctl(u->uffd, UFFDIO_API, &api) != 0)
        return fail("UFFDIO_API: %s", strerror(errno));
    if (ioctl(u->uffd, UFFDIO_REGISTER, &reg) != 0)
        return fail("UFFDIO_REGISTER (wp) after fork: %s", strerror(errno));
    if (ioctl(u->uffd, UFFDIO_WRITEPROTECT, &wp) != 0)
        return fail("UFFDIO_WRITEPROTECT after fork: %s", strerror(errno));
    return 0;
}

/* Word 9 of every 16th page from @first for @npages: the writes. */
static void wp_write(uint64_t *base, size_t first, size_t npages)
{
    for (size_t p = first; p < first + npages; p += 16)
        base[p * WORDS_PER_PAGE + 9] = mark_value(13, p);
}

static size_t wp_parent_bad(const uint64_t *base, size_t pages, size_t first, size_t npages)
{
    size_t bad = 0;

    for (size_t p = 0; p < pages; p++) {
        const uint64_t *w = base + p * WORDS_PER_PAGE;
        int marked = p >= first && p < first + npages && (p - first) % 16 == 0;

        bad += marked && w[9] != mark_value(13, p);
        bad += check_pages(w, p, 1, SEED, NULL) - (marked ? 1 : 0);
    }
    return bad;
}

static int uffd_wp_after_fork(void)
{
    size_t tables = scaled(256, HELD_MIN_TABLES), pages = tables * PAGES_PER_TABLE;
    /* From the middle of one table to the middle of another, near the end. */
    size_t first = late_page(tables, tables / 4, PAGES_PER_TABLE / 2);
    size_t npages = (tables / 8) * PAGES_PER_TABLE;
    int active = afork_active(), rc;
    struct wp_ctx u = { -1, 0, 0 };
    struct counters c0, c1, d;
    pthread_t th;
    uint64_t *base;
    struct held h;

    base = patterned_tables(tables, SEED);
    rc = held_fork(&h, base, pages, SEED, plain_snapshot);
    read_counters(&c0);
    if (rc == 0)
        rc = wp_arm(&u, base + first * WORDS_PER_PAGE, npages * PAGE_SIZE);
    if (rc == 0) {
        if (pthread_create(&th, NULL, wp_handler, &u) != 0)
            die_errno("pthread_create");
        wp_write(base, first, npages);
        atomic_store(&u.quit, 1);
        pthread_join(th, NULL);
    }
    read_counters(&c1);
    if (held_end(&h) != 0)
        rc = -1;
    counters_delta(&d, &c0, &c1);
    info("%zu tables; userfaultfd write-protection armed after fork over %zu pages (from "
         "page %zu): %ld faults resolved; tables copied by the parent %llu, by the child "
         "%llu%s", tables, npages, first, atomic_load(&u.faults), parent_copies(&d),
         d.v[C_CHILD], active > 0 ? "" : " (no asynchronous fork)");
    if (rc == 0 && wp_parent_bad(base, pages, first, npages))
        rc = fail("the parent's memory is not what it wrote");
    if (rc == 0 && atomic_load(&u.faults) == 0)
        rc = fail("no write-protect fault reached the handler: the test proves nothing");
    if (rc == 0)
        rc = was_held(&d, tables / 2, tables, active);
    if (u.uffd >= 0)
        close(u.uffd);
    unmap(base, tables * HUGE_SIZE);
    return rc;
}

/* ---- core-dump ---- */

#define CORE_PATTERN "/proc/sys/kernel/core_pattern"

/* The parent: fill, fork the held child, write a word into each of the
 * last @n tables, say where the region is, and dump core (SIGQUIT). */
static void dump_parent(struct held *h, size_t tables, size_t n, int said_fd)
{
    struct rlimit unlimited = { RLIM_INFINITY, RLIM_INFINITY };
    uint64_t *base = patterned_tables(tables, SEED);
    struct remote_said where;

    if (held_clone(h, base, tables * PAGES_PER_TABLE, SEED, plain_snapshot) != 0)
        _exit(3);
    where.child = h->pid;
    where.base = (uintptr_t)base;
    for (size_t k = 0; k < n; k++)
        base[late_page(tables, k, 0) * WORDS_PER_PAGE] = mark_value(14, k);
    if (setrlimit(RLIMIT_CORE, &unlimited) != 0 ||
        write(said_fd, &where, sizeof(where)) != (ssize_t)sizeof(where))
        _exit(4);
    signal(SIGQUIT, SIG_DFL);
    kill(getpid(), SIGQUIT);
    _exit(5);
}

/* The offset in the core file @fd of the segment that holds [@base,
 * @base + @len), or -1. */
static off_t core_offset(int fd, uint64_t base, size_t len)
{
    Elf64_Ehdr eh;
    Elf64_Phdr ph;

    if (pread(fd, &eh, sizeof(eh), 0) != (ssize_t)sizeof(eh) ||
        memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_type != ET_CORE)
        return -1;
    for (unsigned i = 0; i < eh.e_phnum; i++) {
        if (pread(fd, &ph, sizeof(ph), (off_t)(eh.e_phoff + i * eh.e_phentsize)) !=
            (ssize_t)sizeof(ph))
            return -1;
        if (ph.p_type == PT_LOAD && ph.p_vaddr <= base && base + len <= ph.p_vaddr + ph.p_filesz)
            return (off_t)(ph.p_offset + (base - ph.p_vaddr));
    }
    return -1;
}

/* Wrong words of the region in the core: the pattern, and the parent's
 * word in each of the last @n tables. */
static int check_core(const char *path, uint64_t base, size_t tables, size_t n)
{
    uint64_t *buf = map_anon(PAGE_SIZE, 0);
    size_t bad = 0, marks = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    off_t off = fd < 0 ? -1 : core_offset(fd, base, tables * HUGE_SIZE);

    for (size_t p = 0; off >= 0 && p < tables * PAGES_PER_TABLE; p++) {
        int marked = p % PAGES_PER_TABLE == 0 && p / PAGES_PER_TABLE >= tables - n;

        if (pread(fd, buf, PAGE_SIZE, off + (off_t)(p * PAGE_SIZE)) != PAGE_SIZE) {
            off = -1;
            break;
        }
        if (marked) {
            marks += buf[0] == mark_value(14, tables - 1 - p / PAGES_PER_TABLE);
            buf[0] = pattern_base(SEED, p);
        }
        bad += check_pages(buf, p, 1, SEED, NULL);
    }
    if (fd >= 0)
        close(fd);
    unmap(buf, PAGE_SIZE);
    if (fd < 0)
        return fail("no core file %s: %s", path, strerror(errno));
    if (off < 0)
        return fail("%s holds no whole segment of the region", path);
    if (bad || marks != n)
        return fail("the core's copy of the region has %zu wrong words and %zu of the %zu "
                    "words the parent wrote", bad, marks, n);
    return 0;
}

static int core_dump(void)
{
    size_t tables = scaled(128, HELD_MIN_TABLES), n = scaled(8, 2);
    int said[2], rc, status = 0, active = afork_active();
    char old_pattern[256] = "", path[64], how[96];
    struct remote_said said_msg = { -1, 0 };
    struct counters c0, c1, d;
    struct report r;
    struct held h;
    pid_t parent;
    FILE *f = fopen(CORE_PATTERN, "r");

    if (!f)
        return fail(CORE_PATTERN " is missing: the kernel has no CONFIG_COREDUMP");
    if (!fgets(old_pattern, sizeof(old_pattern), f))
        old_pattern[0] = 0;
    fclose(f);
    old_pattern[strcspn(old_pattern, "\n")] = 0;
    if (write_file(CORE_PATTERN, "/tmp/afork-core.%p") != 0)
        return fail("write " CORE_PATTERN ": %s", strerror(errno));
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    rc = held_setup(&h, getpid());
    pipe_or_die(said);
    read_counters(&c0);
    parent = rc == 0 ? fork_or_die() : -1;
    if (parent == 0)
        dump_parent(&h, tables, n, said[1]);
    close_end(said, 1);
    close_end(h.rep, 1);
    if (parent > 0) {
        if (read(said[0], &said_msg, sizeof(said_msg)) != (ssize_t)sizeof(said_msg))
            said_msg.child = -1;
        h.pid = said_msg.child;
        status = wait_child(parent, how, sizeof(how));
    }
    read_counters(&c1);
    snprintf(path, sizeof(path), "/tmp/afork-core.%d", (int)parent);
    if (rc == 0 && !(WIFSIGNALED(status) && WCOREDUMP(status)))
        rc = fail("the parent ended with %s, not with a core dump", how);
    if (rc == 0)
        rc = check_core(path, said_msg.base, tables, n);
    unlink(path);
    /* The child, now ours (subreaper), runs and reports. */
    held_release(&h, &r, how, sizeof(how));
    if (rc == 0)
        rc = child_verdict(&r, how);
    write_file(CORE_PATTERN, old_pattern[0] ? old_pattern : "core");
    prctl(PR_SET_CHILD_SUBREAPER, 0);
    close_pair(said);
    counters_delta(&d, &c0, &c1);
    info("%zu tables; the parent dumped core and exited while the child was held: tables "
         "copied by the parent %llu (at its exit %llu), by the child %llu%s", tables,
         parent_copies(&d), d.v[C_EXIT], d.v[C_CHILD], active > 0 ? "" : " (no asynchronous fork)");
    if (rc == 0 && active > 0 && d.v[C_EXIT] == 0)
        rc = fail("no table was left at the parent's exit: the child had copied them all "
                  "during the dump, the test proves nothing");
    return rc;
}

const struct test_case access_tests[] = {
    { "device-mirror", "a device mirror (HMM test driver) registers its notifier, reads, "
      "writes and takes pages into device memory while the child is held", device_mirror },
    { "remote-access", "ptrace POKEDATA into the parent, /proc/PID/mem read of the child, "
      "while the child is held", remote_access },
    { "ksm-after-fork", "KSM merges the parent's pages, then the parent writes them, while "
      "the child is held", ksm_after_fork },
    { "uffd-wp-after-fork", "userfaultfd write-protection registered after fork over part "
      "of the region, writes resolved, while the child is held", uffd_wp_after_fork },
    { "core-dump", "the parent writes, dumps core (SIGQUIT) and exits while the child is "
      "held: the core holds its memory, the child its snapshot", core_dump },
    { NULL, NULL, NULL },
};
