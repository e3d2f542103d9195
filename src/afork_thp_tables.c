/* afork_thp_tables.c -- a dict table that is being rehashed stays in
 * 4 KiB pages until its rehash is done (fork-thp).
 *
 * When a dict grows (a keyspace dict, or the dict of a hash, set or sorted
 * set, whose table is as large with millions of members), Redis allocates
 * a table twice the size and moves the entries into it incrementally: a
 * few buckets per command, each entry to a slot that its hash picks, so
 * anywhere in the new table. With
 * the heap in huge pages, the first write into each 2 MiB of the new table
 * faults in a huge page and zeroes all of it, and the few hundred commands
 * of one event-loop iteration write all over the table: nearly every huge
 * page of it is faulted, and zeroed, in that one iteration. The clients
 * wait for the whole table to be zeroed at once (a table of 8 million
 * buckets is 64 MiB), where with 4 KiB pages the same zeroing is spread
 * over the whole rehash. In a VM whose host backs guest memory on first
 * use, each of those huge-page faults also waits for the host.
 *
 * So while a table of at least TABLE_MIN_BYTES is the target of a rehash,
 * its whole huge pages are advised MADV_NOHUGEPAGE: its faults are 4 KiB
 * ones, spread over the rehash as before fork-thp. When the rehash ends
 * (or the dict goes), both tables are advised MADV_HUGEPAGE again: the old
 * one goes back to jemalloc as huge-page memory, and the new one, now
 * written all over, is collapsed by the next re-collapse pass (after the
 * next child, as split pages are). Until then the next fork copies its
 * page-table entries, one per 4 KiB.
 *
 * The kernel refuses MADV_COLLAPSE with EINVAL on a held table (a
 * MADV_NOHUGEPAGE range); the collapse thread skips such ranges.
 *
 * The ranges held are kept in a small fixed array (no allocation: this runs
 * inside dict code, and a lazy free's bio thread ends dicts too); a table
 * that finds it full is left in huge pages, as without this file.
 *
 * ----------------------------------------------------------------------------
 *
 * Copyright (c) 2026, redis-afork contributors. AGPLv3, see LICENSE. */

#include "server.h"
#include "afork_thp_int.h"
#include <sys/mman.h>

#define TABLE_MIN_BYTES (4ULL << 20)  /* smaller tables: a fault or two */
#define TABLE_SLOTS 64                /* the large dicts (keyspace, expires,
                                         collections) that rehash at once */

static struct {
    pthread_mutex_t lock;
    uint64_t start[TABLE_SLOTS];      /* 0: free slot */
    uint64_t end[TABLE_SLOTS];
    int held;                         /* fork_thp_tables_held */
    long long holds;                  /* fork_thp_tables_held_total */
    long long full;                   /* tables left in huge pages: no slot */
} tables = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* The whole huge pages inside [table, table + bytes); 0 if none. */
static int wholeHugePages(const void *table, size_t bytes, uint64_t *start, uint64_t *end) {
    uint64_t a = (uint64_t)(uintptr_t)table, e = a + bytes;
    *start = (a + THP_HUGE_SIZE - 1) & ~(THP_HUGE_SIZE - 1);
    *end = e & ~(THP_HUGE_SIZE - 1);
    return *end > *start;
}

/* A rehash into table (bytes long) starts: hold it in 4 KiB pages. */
void thpTablesHold(const void *table, size_t bytes) {
    uint64_t start, end;
    int slot = -1;
    if (bytes < TABLE_MIN_BYTES || !wholeHugePages(table, bytes, &start, &end)) return;
    pthread_mutex_lock(&tables.lock);
    for (int j = 0; j < TABLE_SLOTS && slot < 0; j++)
        if (tables.start[j] == 0) slot = j;
    if (slot >= 0) {
        tables.start[slot] = start;
        tables.end[slot] = end;
        tables.held++;
        tables.holds++;
    } else {
        tables.full++;
    }
    pthread_mutex_unlock(&tables.lock);
    if (slot >= 0 && madvise((void *)(uintptr_t)start, end - start, MADV_NOHUGEPAGE) != 0)
        thpTablesRelease(table, bytes);
}

/* A rehash is over, or the dict goes: table may be huge again. Tables that
 * were never held are left as they are. */
void thpTablesRelease(const void *table, size_t bytes) {
    uint64_t start, end;
    int slot = -1;
    if (!table || !wholeHugePages(table, bytes, &start, &end)) return;
    pthread_mutex_lock(&tables.lock);
    for (int j = 0; j < TABLE_SLOTS && slot < 0; j++)
        if (tables.start[j] == start && tables.end[j] == end) slot = j;
    pthread_mutex_unlock(&tables.lock);
    if (slot < 0) return;
    madvise((void *)(uintptr_t)start, end - start, MADV_HUGEPAGE);
    pthread_mutex_lock(&tables.lock);
    tables.start[slot] = tables.end[slot] = 0;
    tables.held--;
    pthread_mutex_unlock(&tables.lock);
}

/* INFO fork. */
void thpTablesCounts(int *held, long long *holds, long long *full) {
    pthread_mutex_lock(&tables.lock);
    *held = tables.held;
    *holds = tables.holds;
    *full = tables.full;
    pthread_mutex_unlock(&tables.lock);
}
