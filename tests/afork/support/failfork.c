/* failfork.c -- LD_PRELOAD shim for redis-afork's tests: fork() fails with
 * EAGAIN, as when the process limit is reached, while the file named by
 * the environment variable AFORK_FAILFORK exists. Lets a test drive the
 * real fork-failure paths of an unmodified server binary. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <sys/types.h>
#include <unistd.h>

pid_t fork(void) {
    static pid_t (*real_fork)(void);
    const char *flag = getenv("AFORK_FAILFORK");

    if (flag && access(flag, F_OK) == 0) {
        errno = EAGAIN;
        return -1;
    }
    if (!real_fork)
        real_fork = (pid_t (*)(void))dlsym(RTLD_NEXT, "fork");
    return real_fork();
}
