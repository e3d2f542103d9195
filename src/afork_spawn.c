/* afork_spawn.c -- start helper programs without copying the page tables.
 *
 * Sentinel runs its notification and client-reconfig scripts by fork()
 * followed by execve(). fork() copies the whole page table of the calling
 * process (and on an Async-fork kernel opens a window in which the parent
 * must stay quiet) only for the child to throw it away at execve().
 * posix_spawn() creates the child with vfork semantics instead: the child
 * borrows the parent's memory until execve(), and glibc blocks and resets
 * signals around it, which a bare vfork() in a threaded server would not.
 *
 * The child gets what upstream's fork+execve child gets: the same argv,
 * the same environment (environ), the calling thread's signal mask,
 * ignored signals still ignored, the same inherited descriptors.
 *
 * ----------------------------------------------------------------------------
 *
 * Copyright (c) 2026, redis-afork contributors. AGPLv3, see LICENSE. */

#include "server.h"
#include "afork_spawn.h"
#include <spawn.h>

extern char **environ;

/* Is err a failure to create the process (fork's own errors), rather than
 * a failure to execute the program? */
static int spawnCreateFailed(int err) {
    return err == EAGAIN || err == ENOMEM || err == ENOSYS;
}

/* sentinelRunPendingScripts (through afork.c), in place of fork(): returns what fork() would
 * in the parent (the child's pid, or -1 with errno set when no process
 * could be created), after starting argv[0] with posix_spawn().
 *
 * When the program cannot be executed (missing, not executable, bad
 * format), posix_spawn() reports it here and its child is already gone.
 * Sentinel reports that case from the child's exit status: its forked
 * child fails execve() and exits 2, which means "error, do not retry". To
 * keep that reporting exactly, this falls back to fork() for a failing
 * script only, so sentinel's own child branch runs and exits 2. */
pid_t aforkSpawnProcess(char **argv) {
    pid_t pid;
    int err = posix_spawn(&pid, argv[0], NULL, NULL, argv, environ);
    if (err == 0) return pid;
    if (spawnCreateFailed(err)) {
        errno = err;
        return -1;
    }
    return fork();
}
