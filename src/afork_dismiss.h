/* afork_dismiss.h -- the fork child's give-back of whole huge pages under
 * fork-thp (afork_dismiss.c), as seen by afork.c.
 *
 * Copyright (c) 2026, redis-afork contributors. AGPLv3, see LICENSE. */

#ifndef AFORK_DISMISS_H
#define AFORK_DISMISS_H

int aforkDismissAllocation(void *ptr, int huge_heap);

#endif /* AFORK_DISMISS_H */
