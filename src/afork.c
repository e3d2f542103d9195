/* afork.c -- redis-afork's glue: startup, cron, INFO and stats.
 *
 * Says in INFO "server" that this redis-server is redis-afork, and which
 * version, while redis_version keeps reporting the upstream release it is
 * built from (clients and tools key features off that field). Owns the
 * "# Fork" INFO section and the periodic work of the other afork files.
 *
 * Copyright (c) 2026, redis-afork contributors. AGPLv3, see LICENSE. */

#include "server.h"

#define AFORK_PROBE_PERIOD_MS 5000      /* Async-fork kernel interfaces */
#define AFORK_SYSTEM_PERIOD_MS 1000     /* THP modes, VmPTE */
#define AFORK_SMAPS_PERIOD_MS 10000     /* smaps_rollup: read by a thread */

sds aforkInfoServer(sds info) {
    return sdscatprintf(info, "redis_afork_version:%s\r\n", AFORK_VERSION);
}

/* main(), once the server is initialised. */
void aforkInit(void) {
    aforkStatsInit();
    aforkWindowInit();
    aforkKernelRefresh();
    aforkSystemInit();
    aforkThpInit();
    serverLog(LL_NOTICE, "redis-afork %s: Async-fork kernel: %s (%s), fork quiet window: %s, "
              "THP %s, page tables %lld kB",
              AFORK_VERSION, aforkKernelName(afork_kernel.kind),
              afork_kernel.enabled ? "enabled for this process" : "not enabled",
              aforkQuietWindowEnabled() ? "on" : "off", afork_system.thp_enabled,
              afork_system.page_table_bytes / 1024);
}

/* serverCron, first thing: 1 to skip the tick (a quiet window is open). */
int aforkCron(void) {
    static mstime_t last_probe = 0, last_system = 0, last_smaps = 0;
    if (aforkWindowCronHeld()) return 1;
    aforkStatsCron();
    if (server.mstime - last_probe >= AFORK_PROBE_PERIOD_MS) {
        last_probe = server.mstime;
        aforkKernelRefresh();
    }
    if (server.mstime - last_system >= AFORK_SYSTEM_PERIOD_MS) {
        int smaps = server.mstime - last_smaps >= AFORK_SMAPS_PERIOD_MS;
        last_system = server.mstime;
        if (smaps) last_smaps = server.mstime;
        aforkSystemRefresh(smaps);
    }
    return 0;
}

void aforkResetStats(void) {
    aforkStatsReset();
    afork_stats.max_child_ready_usec = 0;
    afork_stats.quiet_windows = 0;
    afork_stats.quiet_window_timeouts = 0;
    afork_stats.quiet_window_eofs = 0;
    afork_stats.quiet_deferred_logs = 0;
    afork_stats.quiet_dropped_logs = 0;
    aforkThpResetStats();
}

/* INFO "fork": appended when the section is wanted. Cached values only. */
sds aforkInfoFork(sds info, int wanted, int *sections) {
    if (!wanted) return info;
    if ((*sections)++) info = sdscat(info, "\r\n");
    info = sdscatprintf(info,
        "# Fork\r\n"
        "fork_async_kernel:%s\r\n"
        "fork_async_kernel_mode:%d\r\n"
        "fork_async_enabled:%d\r\n",
        aforkKernelName(afork_kernel.kind),
        afork_kernel.mode,
        afork_kernel.enabled);
    info = aforkInfoForkCost(info);
    info = sdscatprintf(info,
        "fork_quiet_window_enabled:%d\r\n"
        "fork_quiet_window_active:%d\r\n"
        "latest_fork_quiet_window_usec:%lld\r\n"
        "fork_quiet_windows:%lld\r\n"
        "fork_quiet_window_timeouts:%lld\r\n"
        "fork_quiet_window_eofs:%lld\r\n"
        "fork_quiet_deferred_logs:%lld\r\n"
        "fork_quiet_dropped_logs:%lld\r\n",
        aforkQuietWindowEnabled(),
        aforkQuietWindowOpen(),
        afork_stats.latest_quiet_window_usec,
        afork_stats.quiet_windows,
        afork_stats.quiet_window_timeouts,
        afork_stats.quiet_window_eofs,
        afork_stats.quiet_deferred_logs,
        afork_stats.quiet_dropped_logs);
    info = aforkInfoForkSystem(info);
    return aforkInfoForkThp(info);
}
