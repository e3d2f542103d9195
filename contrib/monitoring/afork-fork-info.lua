-- afork-fork-info.lua -- redis-afork's INFO fork for redis_exporter.
--
-- redis_exporter keeps only the INFO fields it knows, so none of `INFO fork`
-- reaches Prometheus. Given to the exporter with --script (or
-- REDIS_EXPORTER_SCRIPT), this script returns every field of the section,
-- and the exporter exports each as
--
--     redis_script_values{key="<field>", filename="<this file>"}
--
-- with the value INFO shows, in INFO's unit (the suffix: _usec, _bytes...).
-- The exporter only takes numbers, so a field whose value is a word (a mode,
-- a state) is a set of series key="<field>_<state>", 1 for the state it is
-- in and 0 for the other states it can have: thp_enabled:madvise ->
-- thp_enabled_madvise 1, thp_enabled_always 0, thp_enabled_never 0;
-- fork_thp_heap:refused: <why> -> fork_thp_heap_refused 1. A word not
-- listed below is still exported, with 1. On a server without the section
-- (stock Redis) it returns nothing: the exporter says redis_script_result 2.
-- See contrib/monitoring/README.md.

-- The states each word field can be in (README's INFO reference).
local STATES = {
    fork_async_kernel = {"none", "anolis", "bytedance", "afork"},
    fork_async_optin = {"in", "out", "unsupported", "failed", "not-tried"},
    thp_enabled = {"always", "madvise", "never"},
    thp_defrag = {"always", "defer", "defer+madvise", "madvise", "never"},
    jemalloc_opt_thp = {"default", "always", "never"},
    jemalloc_opt_metadata_thp = {"disabled", "auto", "always"},
    fork_thp_heap = {"on", "off", "waiting", "refused"},
    fork_thp_collapse_status = {"off", "ready", "running", "khugepaged-only"},
}

local result = {}

local function emit(key, value)
    table.insert(result, key)
    table.insert(result, value)
end

local function stateKey(field, state)
    return field .. "_" .. (string.gsub(state, "[^%w]", "_"))
end

local info = redis.call("INFO", "fork")
for line in string.gmatch(info, "[^\r\n]+") do
    local field, value = string.match(line, "^([%w_]+):(.*)$")
    if field and tonumber(value) then
        emit(field, value)
    elseif field then
        local word = string.match(value, "^[^:]*")
        local known = false
        for _, state in ipairs(STATES[field] or {}) do
            emit(stateKey(field, state), state == word and "1" or "0")
            known = known or state == word
        end
        if not known then emit(stateKey(field, word), "1") end
    end
end
return result
