/* afork_kernel.h -- Async-fork kernel detection (afork_kernel.c), as seen by
 * afork.c, the only caller.
 *
 * Copyright (c) 2026, redis-afork contributors. AGPLv3, see LICENSE. */

#ifndef AFORK_KERNEL_H
#define AFORK_KERNEL_H

#include "sds.h"

/* contrib/async-fork's per-process opt-in ("AFK" + 1, + 2). */
#define AFORK_PR_SET_ASYNC_FORK 0x41464b01
#define AFORK_PR_GET_ASYNC_FORK 0x41464b02

extern int afork_async_optin;   /* config fork-async-optin */

int aforkKernelOptIn(int on);
void aforkKernelProbe(const char *root);
int aforkKernelAsyncEnabled(void);
const char *aforkKernelName(void);
void aforkKernelCountersBeforeFork(const char *root);
void aforkKernelCountersAfterChild(const char *root);
sds aforkKernelInfo(sds info);
sds aforkKernelAdvice(sds report, int *advices);
int aforkKernelCheck(sds *msg);

#endif /* AFORK_KERNEL_H */
