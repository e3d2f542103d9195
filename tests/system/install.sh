#!/usr/bin/env bash
# install.sh -- `make install PREFIX=...` installs the programs and the config.
. "$(dirname "$0")/lib.sh"

prefix=$work/prefix
if ! make -s -C "$top" install PREFIX="$prefix" >"$work/install.log" 2>&1; then
    err "make install" "$(tail -n 20 "$work/install.log")"
    exit 1
fi
missing=
for p in redis-server redis-cli redis-benchmark redis-check-rdb redis-check-aof redis-sentinel; do
    [ -x "$prefix/bin/$p" ] || missing="$missing $p"
done
if [ -z "$missing" ]; then ok "programs installed in PREFIX/bin"; else err "install" "missing:$missing"; fi

if "$prefix/bin/redis-server" --version | grep -q "^Redis server v=$REDIS_VERSION "; then
    ok "the installed redis-server says $REDIS_VERSION"
else
    err "installed --version" "$("$prefix/bin/redis-server" --version)"
fi
conf=$prefix/etc/redis-afork/redis.conf
if [ -f "$conf" ] && cmp -s "$conf" "$tree/redis.conf"; then
    ok "redis.conf installed in PREFIX/etc/redis-afork"
else
    err "config" "$conf missing or not the built tree's redis.conf"
fi
exit $status
