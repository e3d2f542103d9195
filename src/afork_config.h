/* afork_config.h -- redis-afork's rows of the config table.
 *
 * Included by config.c just before static_configs[]; AFORK_CONFIGS is
 * expanded inside that table. Each value lives with the module that owns
 * it (afork_window.h, afork_thp.h, afork_kernel.h; afork.h for
 * fork-probe-root and fork-debug-fork-preempt), and the apply functions
 * are afork.c's. fork-thp-vma-size, fork-thp-quiet-save and
 * fork-thp-collapse-warm are deprecated: hidden, still honoured when set,
 * "auto" (chosen from the machine) when not.
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

/* The deprecated fork-thp tuning switches: "auto" is their default, "not
 * set": the value is then chosen from the machine (afork_thp.c). */
static configEnum afork_thp_tune_enum[] = {
    {"auto", AFORK_THP_TUNE_AUTO},
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
    createStringConfig("fork-thp-vma-size", NULL, MODIFIABLE_CONFIG | HIDDEN_CONFIG, ALLOW_EMPTY_STRING, afork_thp_vma_size, "auto", aforkThpVmaSizeValid, aforkApplyThpVmaSize), \
    createEnumConfig("fork-thp-quiet-save", NULL, MODIFIABLE_CONFIG | HIDDEN_CONFIG, afork_thp_tune_enum, afork_thp_quiet_save, AFORK_THP_TUNE_AUTO, NULL, aforkApplyThpQuietSave), \
    createEnumConfig("fork-thp-collapse-warm", NULL, MODIFIABLE_CONFIG | HIDDEN_CONFIG, afork_thp_tune_enum, afork_thp_collapse_warm, AFORK_THP_TUNE_AUTO, NULL, aforkApplyThpCollapseWarm), \
    createStringConfig("fork-probe-root", NULL, MODIFIABLE_CONFIG | PROTECTED_CONFIG | HIDDEN_CONFIG | DEBUG_CONFIG, EMPTY_STRING_IS_NULL, afork_probe_root, NULL, NULL, aforkApplyProbeRoot)

#endif /* AFORK_CONFIG_H */
