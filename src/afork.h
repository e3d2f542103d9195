/* afork.h -- the redis-afork API: everything upstream Redis calls into.
 *
 * redis-afork is upstream Redis plus a small patch series (patches/ in the
 * redis-afork repository). The patches only add one-line hooks, and every
 * hook calls one of the functions declared here, all defined in afork.c,
 * which passes the event on to our modules in a fixed order (see afork.c).
 * This header is included by server.h (before most of its types), so it
 * uses only basic types and sds.
 *
 * Copyright (c) 2026, redis-afork contributors. AGPLv3, see LICENSE. */

#ifndef AFORK_H
#define AFORK_H

#include <sys/types.h>
#include <sys/time.h>
#include "sds.h"

#define AFORK_VERSION "0.3.0"

/* Startup and exit (main, linuxMemoryWarnings). */
void aforkConfigLoaded(void);
int aforkThpWanted(void);
void aforkInit(void);

/* The life of a fork child (redisFork, resetChildState). */
void aforkBeforeFork(int purpose);
void aforkInChild(void);
void aforkAfterFork(pid_t childpid);
void aforkAfterForkTimed(pid_t childpid, long long usec);
void aforkChildGone(void);

/* The event loop (serverCron, beforeSleep). */
int aforkCron(void);     /* 1 = skip this tick */
void aforkEventLoopSample(long long usec);

/* A keyspace dict's rehash (kvstore.c's rehashing callbacks). */
void aforkTableRehashing(const void *table, size_t bytes);
void aforkTableDone(const void *old_table, size_t old_bytes, const void *new_table,
                    size_t new_bytes);

/* A hash's, set's or sorted set's dict: the rehashing callbacks of their
 * dictTypes (server.c, t_hash.c). */
struct dict;
void aforkDictRehashingStarted(struct dict *d);
void aforkDictRehashingCompleted(struct dict *d);

/* What the quiet window holds back (serverLogRaw, purges, bio threads,
 * bugReportStart). */
int aforkLogDefer(int level, const char *msg);
void aforkLogTime(struct timeval *tv);
int aforkPurgeHeld(void);
void aforkBackgroundWait(void);
void aforkBugReport(void);

/* Reports (INFO, CONFIG RESETSTAT, LATENCY DOCTOR, --check-system). */
sds aforkInfoServer(sds info);
sds aforkVersion(sds version);
sds aforkInfoFork(sds info, int wanted, int *sections);
void aforkResetStats(void);
sds aforkLatencyAdvice(sds report, const char *event, int *advices);
int aforkCheckAsyncFork(sds *msg);
int aforkCheckForkThp(sds *msg);

/* Config owned by afork.c (afork_config.h rows and their apply functions). */
extern char *afork_probe_root;
extern int afork_debug_fork_preempt;
int aforkApplyProbeRoot(const char **err);
int aforkApplyAsyncOptIn(const char **err);
int aforkApplyThpTuning(const char **err);

#endif /* AFORK_H */
