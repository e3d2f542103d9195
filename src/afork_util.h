/* afork_util.h -- helpers shared by redis-afork's modules.
 *
 * See afork_util.c. Nothing here keeps state or calls another afork file, so
 * every module may use it without depending on another module.
 *
 * Copyright (c) 2026, redis-afork contributors. AGPLv3, see LICENSE. */

#ifndef AFORK_UTIL_H
#define AFORK_UTIL_H

#include <sys/types.h>
#include <sched.h>

ssize_t aforkReadFile(const char *path, char *buf, size_t size);
long aforkReadIntFile(const char *path);
int aforkReadBracketed(const char *path, char *out, size_t size);
long long aforkKbField(const char *text, const char *name);
int aforkLinuxAtLeast(int major, int minor);
const char *aforkJemallocOpt(const char *name);
int aforkCpulistAdd(const char *cpulist, cpu_set_t *set);
int aforkSetTaskCpus(pid_t pid, const char *cpulist);

#endif /* AFORK_UTIL_H */
