/* afork.c -- identity of a redis-afork build.
 *
 * Says in INFO "server" that this redis-server is redis-afork, and which
 * version, while redis_version keeps reporting the upstream release it is
 * built from (clients and tools key features off that field).
 *
 * Copyright (c) 2026, redis-afork contributors. AGPLv3, see LICENSE. */

#include "server.h"

sds aforkInfoServer(sds info) {
    return sdscatprintf(info, "redis_afork_version:%s\r\n", AFORK_VERSION);
}
