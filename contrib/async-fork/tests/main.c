/* main.c -- forktest, the fork-semantics test suite run inside the guest
 * kernel (and, for fork-time, on the host).
 *
 *   forktest list              names of all tests, one per line
 *   forktest describe          name and one-line description of each test
 *   forktest run NAME...       run tests; each ends with a line
 *                              AFORK-RESULT NAME PASS|FAIL SECONDSs [reason]
 *   forktest exec-check SEED   helper exec'ed by the vfork/posix_spawn tests
 *
 * Knobs (environment): AFORK_SCALE, AFORK_INJECT, AFORK_PRCTL (common.h),
 * AFORK_GUEST=1 (set by the guest init; memcg-limit needs it),
 * AFORK_FORKTIME_MIB, _REPS, _TOUCH, _VMAS (forktime.c).
 */
#include "common.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>

static const struct test_case *const tables[] = {
    snapshot_tests, vma_tests, kind_tests, lifecycle_tests, session_tests, failpath_tests,
    failrace_tests, inject_tests, pinned_tests, cgroup_tests, foreign_tests, access_tests,
    forktime_tests,
};

static const struct test_case *find_test(const char *name)
{
    for (size_t t = 0; t < sizeof(tables) / sizeof(tables[0]); t++)
        for (const struct test_case *tc = tables[t]; tc->name; tc++)
            if (strcmp(tc->name, name) == 0)
                return tc;
    return NULL;
}

static void list_tests(int with_description)
{
    for (size_t t = 0; t < sizeof(tables) / sizeof(tables[0]); t++)
        for (const struct test_case *tc = tables[t]; tc->name; tc++)
            if (with_description)
                printf("%-18s %s\n", tc->name, tc->what);
            else
                printf("%s\n", tc->name);
}

/* Opt this process in to Async-fork when AFORK_PRCTL=1. */
static int opt_in_with_prctl(void)
{
    int got;

    if (!knobs.use_prctl)
        return 0;
    if (prctl(PR_SET_ASYNC_FORK, 1, 0, 0, 0) != 0)
        return fail("prctl(PR_SET_ASYNC_FORK, 1): %s", strerror(errno));
    got = prctl(PR_GET_ASYNC_FORK, 0, 0, 0, 0);
    if (got != 1)
        return fail("prctl(PR_GET_ASYNC_FORK) returned %d after setting 1", got);
    return 0;
}

static int run_one(const struct test_case *tc)
{
    double t0 = now_seconds();
    int rc;

    current_test = tc->name;
    reset_failure();
    if (inject_here())
        info("fault injection is ON for this test: it must fail");
    rc = opt_in_with_prctl();
    if (rc == 0)
        rc = tc->run();
    if (rc != 0 && !fail_reason()[0])
        fail("failed without a reason");
    printf("AFORK-RESULT %s %s %.1fs%s%s\n", tc->name, rc == 0 ? "PASS" : "FAIL",
           now_seconds() - t0, rc == 0 ? "" : " ", rc == 0 ? "" : fail_reason());
    fflush(stdout);
    return rc;
}

static int usage(void)
{
    fprintf(stderr, "usage: forktest list | describe | run NAME... | exec-check SEED | probe PORT save|rewrite|sync|idle|hog DUR_MS HOG_CPU\n");
    return 2;
}

int main(int argc, char **argv)
{
    int failed = 0;

    knobs_init();
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc >= 2 && strcmp(argv[1], "exec-check") == 0)
        return exec_check_main(argc, argv);
    if (argc >= 2 && strcmp(argv[1], "probe") == 0)
        return probe_main(argc, argv);
    if (argc == 2 && strcmp(argv[1], "list") == 0) {
        list_tests(0);
        return 0;
    }
    if (argc == 2 && strcmp(argv[1], "describe") == 0) {
        list_tests(1);
        return 0;
    }
    if (argc < 3 || strcmp(argv[1], "run") != 0)
        return usage();
    for (int i = 2; i < argc; i++) {
        const struct test_case *tc = find_test(argv[i]);

        if (!tc) {
            fprintf(stderr, "forktest: no test named '%s' (see forktest list)\n", argv[i]);
            return 2;
        }
        failed |= run_one(tc) != 0;
    }
    return failed;
}
