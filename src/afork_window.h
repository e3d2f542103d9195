/* afork_window.h -- the fork quiet window (afork_window.c), as seen by
 * afork.c, the only caller, and by the config table (afork_config.h).
 *
 * Copyright (c) 2026, redis-afork contributors. AGPLv3, see LICENSE. */

#ifndef AFORK_WINDOW_H
#define AFORK_WINDOW_H

#include <sys/types.h>
#include <sys/time.h>
#include "sds.h"
#include "monotonic.h"

/* Config (afork_config.h rows). */
#define AFORK_QUIET_AUTO 0
#define AFORK_QUIET_YES 1
#define AFORK_QUIET_NO 2
extern int afork_quiet_window_mode;
extern int afork_quiet_window_timeout_ms;
extern int afork_debug_ready_delay_ms;

/* Called, after the window closed, with the child's monotonic time when it
 * reported that it runs. */
typedef void aforkReadyFn(monotime ready);

void aforkWindowInit(aforkReadyFn *on_ready);
int aforkWindowEnabled(int async_kernel);
void aforkWindowBeforeFork(int quiet, long long expected_copy_usec);
void aforkWindowInChild(void);
void aforkWindowAfterFork(pid_t childpid, monotime parent_return);
int aforkWindowCron(void);
int aforkWindowOpen(void);
int aforkWindowLogDefer(int level, const char *msg);
void aforkWindowLogTime(struct timeval *tv);
int aforkWindowPurgeHeld(void);
void aforkWindowBackgroundWait(void);
void aforkWindowEnd(void);
void aforkWindowCrash(void);
void aforkWindowReset(void);
sds aforkWindowInfo(sds info, int enabled);

#endif /* AFORK_WINDOW_H */
