#!/bin/bash
# vmstat_sample.sh SECONDS -- /proc/vmstat's migration, compaction and page
# counters every 0.5 s, unix time first, to set beside read_stall.c: does
# the guest migrate or compact pages when the probe stalls?
keys='^(pgmigrate_success|pgmigrate_fail|compact_migrate_scanned|compact_free_scanned|compact_isolated|compact_stall|compact_daemon_wake|compact_daemon_migrate_scanned|compact_daemon_free_scanned|thp_migration_success|pgalloc_normal|pgfree|thp_collapse_alloc) '
echo "t $(grep -E "$keys" /proc/vmstat | awk '{print $1}' | tr '\n' ' ')"
end=$(( $(date +%s) + $1 ))
while [ "$(date +%s)" -lt "$end" ]; do
    echo "$(date +%s.%N) $(grep -E "$keys" /proc/vmstat | awk '{print $2}' | tr '\n' ' ')"
    sleep 0.5
done
