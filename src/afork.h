/* afork.h -- the redis-afork API: everything upstream Redis calls into.
 *
 * redis-afork is upstream Redis plus a small patch series (patches/ in the
 * redis-afork repository). The patches only add one-line hooks that call the
 * functions declared here; the logic lives in our own src/afork*.c files.
 * This header is included by server.h, so keep it free of server.h types
 * beyond sds.
 *
 * Copyright (c) 2026, redis-afork contributors. AGPLv3, see LICENSE. */

#ifndef AFORK_H
#define AFORK_H

#include "sds.h"

#define AFORK_VERSION "0.1.0"

/* INFO "server" section: append the redis-afork fields. */
sds aforkInfoServer(sds info);

#endif /* AFORK_H */
