/* common.h -- shared helpers of the fork-semantics test suite (forktest):
 * patterned memory, verification, child processes, result reporting, knobs.
 *
 * Every test is a function returning 0 (pass) or -1 (fail) after printing
 * why with fail(). main.c prints the verdict line the harness parses:
 *   AFORK-RESULT <test> PASS|FAIL <seconds>s [reason]
 */
#ifndef AFORK_COMMON_H
#define AFORK_COMMON_H

#define _GNU_SOURCE
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define PAGE_SIZE 4096UL
#define WORDS_PER_PAGE (PAGE_SIZE / sizeof(uint64_t))
#define HUGE_SIZE (2UL << 20)
#define MIB (1UL << 20)

/* Values the parent writes after fork never occur in a pattern page. */
#define MARK_BITS 0xa5f0000000000000ULL

struct test_case {
    const char *name;
    const char *what;
    int (*run)(void);
};

/* Knobs, read once from the environment by knobs_init():
 *   AFORK_SCALE   float, multiplies sizes and iteration counts (default 1)
 *   AFORK_INJECT  tests that deliberately break themselves: "all" or a comma list
 *   AFORK_PRCTL   1: opt in with prctl(PR_SET_ASYNC_FORK, 1) first */
struct knobs {
    double scale;
    const char *inject;
    int use_prctl;
};
extern struct knobs knobs;
void knobs_init(void);
/* Scaled count: base * scale, at least min. */
unsigned long scaled(unsigned long base, unsigned long min);
/* True when AFORK_INJECT names the running test (or is "all"). */
int inject_here(void);
extern const char *current_test;

/* Output. info() lines start with "# "; fail() records the first reason. */
void info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
int fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
const char *fail_reason(void);
void reset_failure(void);
/* Abort the process with a message: for setup errors in a child. */
void die_errno(const char *what) __attribute__((noreturn));

double now_seconds(void);
uint64_t now_ns(void);

/* Small deterministic PRNG (xorshift64*). */
uint64_t rng_next(uint64_t *state);
uint64_t rng_below(uint64_t *state, uint64_t bound);

/* Patterned memory: word w of page p of a region tagged `seed`. */
uint64_t pattern_base(uint64_t seed, size_t page);
void fill_pages(void *addr, size_t first_page, size_t npages, uint64_t seed);
/* Check pages; returns the number of wrong words, first bad page in *bad_page. */
size_t check_pages(const void *addr, size_t first_page, size_t npages,
                   uint64_t seed, size_t *bad_page);
/* A word value the parent writes: distinct from any pattern value. */
uint64_t mark_value(uint64_t who, uint64_t seq);

/* Anonymous private mapping (aborts on failure), optionally 2 MiB aligned. */
void *map_anon(size_t size, int huge_aligned);
void unmap(void *addr, size_t size);
/* A region of @tables page tables, in 4 KiB pages (MADV_NOHUGEPAGE),
 * filled with the pattern of @seed. */
uint64_t *patterned_tables(size_t tables, uint64_t seed);

/* Children. fork_or_die() aborts the test process when fork() fails. */
pid_t fork_or_die(void);
/* waitpid; returns a printable description in buf and the raw status. */
int wait_child(pid_t pid, char *buf, size_t len);
/* True when status is a clean exit(0). */
int exited_ok(int status);

/* Pipes carrying one fixed-size report or a one-byte signal. */
struct report {
    uint64_t bad_words;
    uint64_t bad_page;
    uint64_t checked_pages;
    int64_t extra;
};
void pipe_or_die(int fds[2]);
void send_report(int fd, const struct report *r);
int recv_report(int fd, struct report *r);
void send_byte(int fd);
int wait_byte(int fd);
void close_pair(int fds[2]);
void close_end(int fds[2], int which);
/* In the parent after fork: drop the child's ends (go read, report write),
 * so a child that dies unreported gives EOF instead of a hang. */
void parent_ends(int go[2], int rep[2]);

/* Read a "Key:  N kB" value of /proc/self/status; -1 if absent. */
long status_kb(const char *key);
/* Sum of a smaps field (kB) over the mappings that overlap [addr, addr+len). */
long smaps_kb(const void *addr, size_t len, const char *field);
/* Write a string to a file; returns 0 or -1 (errno kept). */
int write_file(const char *path, const char *text);
/* Read a file's first line as a long; -1 on error, -2 for "max". */
long read_long_file(const char *path);

/* The interface of the Async-fork kernel patch (see README.md). */
#define PR_SET_ASYNC_FORK 0x41464b01
#define PR_GET_ASYNC_FORK 0x41464b02
/* 1 if forks of this process leave page tables to the child, 0 if not, -1
 * if the kernel has no asynchronous fork at all. */
int afork_active(void);
/* One counter of /proc/vmstat (0 when absent). */
unsigned long long vmstat_counter(const char *name);
/* How many times @what occurs in the kernel log (-1 if unreadable); the line
 * of the last one in @last. */
int kernel_log_count(const char *what, char *last, size_t len);
/* Run the calling thread on @cpu only (aborts on failure). */
void pin_to_cpu(int cpu);
/* Write @n settings (file, value) into the fault-injection folder @dir,
 * mounting debugfs first if need be: 0, 1 if the kernel has no @dir, -1
 * (fail()) when a setting is refused. */
int fault_attr_setup(const char *dir, const char *const settings[][2], size_t n);
/* Kernel log lines that show a broken kernel (WARNING, BUG, Bad rss-counter,
 * Bad page): counted before and after a test; check_splats() fails the test
 * if any grew, naming the last. */
#define NSPLATS 4
extern const char *const splats[NSPLATS];
void count_splats(int counts[NSPLATS], char *last, size_t len);
int check_splats(const int before[NSPLATS], const int after[NSPLATS], const char *last);

/* cgroup v2 (the test guest only). set_up_cgroup(): a new cgroup @dir with
 * @controller on and @file (if any) set to @value, opened in *fd; 0 or
 * fail(). clone_into(): fork() into the cgroup open in @cgroup_fd
 * (clone3 CLONE_INTO_CGROUP), as a container runtime or systemd would. */
#define CG_ROOT "/sys/fs/cgroup"
int set_up_cgroup(const char *dir, const char *controller, const char *file,
                  const char *value, int *fd);
pid_t clone_into(int cgroup_fd);
/* The "pagetables" line of @dir's memory.stat, in bytes (-1 if
 * unreadable), once the kernel has folded in what changed so far: it waits
 * 2.5 s first. */
long long cgroup_pagetables(const char *dir);
/* The value of @key in @dir's memory.events, -1 if unreadable. */
long long cgroup_event(const char *dir, const char *key);

/* The async_fork_* counters of /proc/vmstat: read_counters() takes them
 * all, counters_delta() subtracts, parent_copies() sums the tables the
 * parent copied first (any cause), print_counters() logs a delta. */
enum counter {
    C_SESSIONS, C_DEFERRED, C_CHILD, C_FAULT, C_GUP, C_VMA, C_MADVISE,
    C_ZAP, C_EXIT, C_FORK, C_PARENT_NS, C_FAILED, NR_COUNTERS
};

struct counters {
    unsigned long long v[NR_COUNTERS];
    int found;                  /* how many of them /proc/vmstat has */
};
void read_counters(struct counters *c);
void counters_delta(struct counters *d, const struct counters *a, const struct counters *b);
unsigned long long parent_copies(const struct counters *d);
void print_counters(const char *what, const struct counters *d);

/* Test tables of each source file. */
extern const struct test_case snapshot_tests[];
extern const struct test_case vma_tests[];
extern const struct test_case kind_tests[];
extern const struct test_case lifecycle_tests[];
extern const struct test_case session_tests[];
extern const struct test_case failpath_tests[];
extern const struct test_case failrace_tests[];
extern const struct test_case pinned_tests[];
extern const struct test_case cgroup_tests[];
extern const struct test_case foreign_tests[];
extern const struct test_case inject_tests[];
extern const struct test_case access_tests[];
extern const struct test_case forktime_tests[];

/* Entry of the exec'ed helper used by vfork/posix_spawn tests. */
int exec_check_main(int argc, char **argv);
int probe_main(int argc, char **argv);

#endif
