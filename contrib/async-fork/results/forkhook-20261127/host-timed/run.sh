#!/bin/bash
# Host probe: latest_fork_usec of stock, before, after; 20 BGSAVEs each, interleaved.
set -e
CLI=/work/main/build/redis-8.0.6/src/redis-cli
declare -A BIN=([stock]=/work/main/build/stock/redis-8.0.6/src/redis-server [before]=/work/main/build/redis-server-prev-febed3e [after]=/tmp/hk/redis-server-after)
declare -A PORT=([stock]=7101 [before]=7102 [after]=7103)
ROUNDS=${ROUNDS:-20}
for n in stock before after; do
  d=/tmp/hk/$n; rm -rf $d; mkdir -p $d
  ${BIN[$n]} --port ${PORT[$n]} --dir $d --save "" --appendonly no --enable-debug-command yes --daemonize yes --logfile $d/log --dbfilename d.rdb
done
sleep 1
for n in stock before after; do $CLI -p ${PORT[$n]} debug populate 1000000 key 200 >/dev/null; done
out=/tmp/hk/forks.tsv; echo -e "round\tserver\tlatest_fork_usec\tinvol\thook_usec" > $out
order=(stock before after)
for r in $(seq 1 $ROUNDS); do
  k=$(( r % 3 )); ord="${order[@]:$k} ${order[@]:0:$k}"
  for n in $ord; do
    p=${PORT[$n]}
    $CLI -p $p bgsave >/dev/null
    while [ "$($CLI -p $p info persistence | tr -d '\r' | sed -n 's/^rdb_bgsave_in_progress://p')" != 0 ]; do sleep 0.1; done
    f=$($CLI -p $p info stats | tr -d '\r' | sed -n 's/^latest_fork_usec://p')
    i=$($CLI -p $p info fork 2>/dev/null | tr -d '\r' | sed -n 's/^latest_fork_involuntary_switches://p')
    h=$($CLI -p $p info fork 2>/dev/null | tr -d '\r' | sed -n 's/^latest_fork_hook_usec://p')
    echo -e "$r\t$n\t$f\t${i:--}\t${h:--}" >> $out
    sleep 0.5
  done
done
for n in stock before after; do $CLI -p ${PORT[$n]} shutdown nosave >/dev/null 2>&1 || true; done
