/* afork_config.h -- redis-afork's rows of the config table.
 *
 * Included by config.c just before static_configs[]; AFORK_CONFIGS is
 * expanded inside that table. Each value lives with the module that owns
 * it (afork_window.h, afork_thp.h, afork_kernel.h; afork.h for
 * fork-probe-root and fork-debug-fork-preempt), and the apply functions
 * are afork.c's. The fork-debug-* rows are hidden switches for the tests
 * and the bench's ablations, not for operators.
 *
 * Copyright (c) 2026, redis-afork contributors. AGPLv3, see LICENSE. */

#ifndef AFORK_CONFIG_H
#define AFORK_CONFIG_H

#include "afork_window.h"
#include "afork_thp.h"
#include "afork_kernel.h"

static configEnum afork_quiet_window_enum[] = {
    {"auto", AFORK_QUIET_AUTO},
    {"yes", AFORK_QUIET_YES},
    {"no", AFORK_QUIET_NO},
    {NULL, 0}
};

static configEnum afork_thp_enum[] = {
    {"auto", AFORK_THP_AUTO},
    {"yes", AFORK_THP_YES},
    {"no", AFORK_THP_NO},
    {NULL, 0}
};

/* fork-debug-thp-collapse-warm: auto chooses from the machine. */
static configEnum afork_thp_warm_enum[] = {
    {"auto", AFORK_THP_WARM_AUTO},
    {"yes", 1},
    {"no", 0},
    {NULL, 0}
};

#define AFORK_CONFIGS \
    createEnumConfig("fork-quiet-window", NULL, MODIFIABLE_CONFIG, afork_quiet_window_enum, afork_quiet_window_mode, AFORK_QUIET_AUTO, NULL, NULL), \
    createIntConfig("fork-quiet-window-timeout", NULL, MODIFIABLE_CONFIG, 1, 60000, afork_quiet_window_timeout_ms, 1000, INTEGER_CONFIG, NULL, NULL), \
    createIntConfig("fork-debug-ready-delay", NULL, MODIFIABLE_CONFIG | HIDDEN_CONFIG | DEBUG_CONFIG, 0, 60000, afork_debug_ready_delay_ms, 0, INTEGER_CONFIG, NULL, NULL), \
    createBoolConfig("fork-debug-fork-preempt", NULL, MODIFIABLE_CONFIG | HIDDEN_CONFIG | DEBUG_CONFIG, afork_debug_fork_preempt, 0, NULL, NULL), \
    createBoolConfig("fork-async-optin", NULL, MODIFIABLE_CONFIG, afork_async_optin, 1, NULL, aforkApplyAsyncOptIn), \
    createEnumConfig("fork-thp", NULL, IMMUTABLE_CONFIG, afork_thp_enum, afork_fork_thp, AFORK_THP_DEFAULT, NULL, NULL), \
    createIntConfig("fork-thp-collapse-rate", NULL, MODIFIABLE_CONFIG, 0, 100000, afork_thp_collapse_rate_mb, 256, INTEGER_CONFIG, NULL, aforkApplyThpTuning), \
    createLongLongConfig("fork-debug-thp-vma-size", NULL, MODIFIABLE_CONFIG | HIDDEN_CONFIG | DEBUG_CONFIG, 0, LLONG_MAX, afork_debug_thp_vma_size, AFORK_THP_VMA_SIZE_DEFAULT, MEMORY_CONFIG, aforkThpVmaSizeValid, aforkApplyThpTuning), \
    createEnumConfig("fork-debug-thp-collapse-warm", NULL, MODIFIABLE_CONFIG | HIDDEN_CONFIG | DEBUG_CONFIG, afork_thp_warm_enum, afork_debug_thp_collapse_warm, AFORK_THP_WARM_AUTO, NULL, aforkApplyThpTuning), \
    createIntConfig("fork-debug-thp-auto-fork-ms", NULL, MODIFIABLE_CONFIG | HIDDEN_CONFIG | DEBUG_CONFIG, 1, 3600000, afork_debug_thp_auto_fork_ms, AFORK_THP_AUTO_FORK_MS, INTEGER_CONFIG, NULL, NULL), \
    createStringConfig("fork-probe-root", NULL, MODIFIABLE_CONFIG | PROTECTED_CONFIG | HIDDEN_CONFIG | DEBUG_CONFIG, EMPTY_STRING_IS_NULL, afork_probe_root, NULL, NULL, aforkApplyProbeRoot)

#endif /* AFORK_CONFIG_H */
