/* afork_alloc.h -- zmalloc.c's malloc, calloc and realloc with jemalloc,
 * able to send an allocation to fork-thp's slack arena.
 *
 * jemalloc rounds a large allocation up to its size class, up to a quarter
 * more than asked. In 4 KiB pages the rounded-up tail costs nothing until
 * the caller writes into it (an sds grows into it; a value set once never
 * does); in a huge page it is resident with the rest. With the keyspace in
 * huge pages, a dataset of large values would then use up to a quarter
 * more memory than with upstream. So an allocation whose size class leaves
 * at least a page unused goes to an arena kept in 4 KiB pages
 * (afork_thp_slack.c sets it up and sets afork_alloc_slack_flags to its
 * mallocx() flags). Until then, and always without fork-thp, the flags are
 * 0 and every call is upstream's.
 *
 * Only a size above SLACK_MIN_SIZE can leave a whole page: below it the
 * size classes are at most a page apart. The others cost one comparison.
 *
 * Included by zmalloc.c only, after its allocator macros (including the
 * *_with_usize ones of Redis 8.2 and newer), which thereby
 * defines afork_alloc_slack_flags (redis-cli and redis-benchmark link
 * zmalloc.o without the server's files). With Redis's own jemalloc it
 * redefines zmalloc.c's malloc, calloc and realloc to the functions below;
 * with any other allocator (libc, tcmalloc, a system jemalloc without the
 * je_ prefix) it does nothing. The hook in zmalloc.c is this one include,
 * away from the macros themselves, which distributions patch.
 *
 * ----------------------------------------------------------------------------
 *
 * Copyright (c) 2026, redis-afork contributors. AGPLv3, see LICENSE. */

#ifndef AFORK_ALLOC_H
#define AFORK_ALLOC_H

#if defined(USE_JEMALLOC) && !defined(USE_SYSTEM_JEMALLOC)

#include <stddef.h>
#include <stdint.h>
#include <jemalloc/jemalloc.h>

#define AFORK_SLACK_PAGE 4096
#define AFORK_SLACK_MIN_SIZE (32 * 1024)

/* mallocx() flags of the slack arena; 0 until fork-thp sets it up. */
int afork_alloc_slack_flags = 0;

/* The flags for an allocation of size: the slack arena's when its size
 * class would leave a page or more unused, else 0 (upstream's call). */
static inline int aforkAllocFlags(size_t size) {
    if (size <= AFORK_SLACK_MIN_SIZE || !afork_alloc_slack_flags) return 0;
    size_t usable = je_nallocx(size, 0);
    return usable && usable - size >= AFORK_SLACK_PAGE ? afork_alloc_slack_flags : 0;
}

static inline void *aforkMalloc(size_t size) {
    int flags = aforkAllocFlags(size);
    return flags ? je_mallocx(size, flags) : je_malloc(size);
}

static inline void *aforkCalloc(size_t count, size_t size) {
    if (size && count > SIZE_MAX / size) return je_calloc(count, size);   /* fails as upstream */
    int flags = aforkAllocFlags(count * size);
    return flags ? je_mallocx(count * size, flags | MALLOCX_ZERO) : je_calloc(count, size);
}

/* A move goes to the arena the new size calls for; jemalloc resizes in
 * place, in the old arena, when it can. */
static inline void *aforkRealloc(void *ptr, size_t size) {
    if (!ptr) return aforkMalloc(size);
    int flags = aforkAllocFlags(size);
    return flags ? je_rallocx(ptr, size, flags) : je_realloc(ptr, size);
}

#undef malloc
#undef calloc
#undef realloc
#define malloc(size) aforkMalloc(size)
#define calloc(count,size) aforkCalloc(count,size)
#define realloc(ptr,size) aforkRealloc(ptr,size)

#if defined(HAVE_ALLOC_WITH_USIZE)
/* Redis 8.2 and newer allocate through jemalloc's *_with_usize() calls,
 * which also return the usable size; the same routing, the size read
 * back with sallocx() when the slack arena took the allocation. */
static inline void *aforkMallocWithUsize(size_t size, size_t *usize) {
    int flags = aforkAllocFlags(size);
    if (!flags) return je_malloc_with_usize(size, usize);
    void *ptr = je_mallocx(size, flags);
    if (ptr) *usize = je_sallocx(ptr, 0);
    return ptr;
}

static inline void *aforkCallocWithUsize(size_t count, size_t size, size_t *usize) {
    if (size && count > SIZE_MAX / size) return je_calloc_with_usize(count, size, usize);
    int flags = aforkAllocFlags(count * size);
    if (!flags) return je_calloc_with_usize(count, size, usize);
    void *ptr = je_mallocx(count * size, flags | MALLOCX_ZERO);
    if (ptr) *usize = je_sallocx(ptr, 0);
    return ptr;
}

static inline void *aforkReallocWithUsize(void *ptr, size_t size, size_t *old_usize, size_t *new_usize) {
    int flags = ptr ? aforkAllocFlags(size) : 0;
    if (!flags) return je_realloc_with_usize(ptr, size, old_usize, new_usize);
    *old_usize = je_sallocx(ptr, 0);
    void *newptr = je_rallocx(ptr, size, flags);
    if (newptr) *new_usize = je_sallocx(newptr, 0);
    return newptr;
}

#undef malloc_with_usize
#undef calloc_with_usize
#undef realloc_with_usize
#define malloc_with_usize(size,usize) aforkMallocWithUsize(size,usize)
#define calloc_with_usize(num,size,usize) aforkCallocWithUsize(num,size,usize)
#define realloc_with_usize(ptr,size,old,new) aforkReallocWithUsize(ptr,size,old,new)
#endif /* HAVE_ALLOC_WITH_USIZE */

#endif /* USE_JEMALLOC && !USE_SYSTEM_JEMALLOC */
#endif
