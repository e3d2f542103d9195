/* afork_spawn.h -- helper programs started without a fork (afork_spawn.c),
 * as seen by afork.c, the only caller.
 *
 * Copyright (c) 2026, redis-afork contributors. AGPLv3, see LICENSE. */

#ifndef AFORK_SPAWN_H
#define AFORK_SPAWN_H

#include <sys/types.h>

pid_t aforkSpawnProcess(char **argv);

#endif /* AFORK_SPAWN_H */
