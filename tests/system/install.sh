#!/usr/bin/env bash
# install.sh -- `make install DESTDIR=... [PREFIX=...]` installs the programs
# under DESTDIR/PREFIX/bin and redis.conf as DESTDIR/etc/redis-afork/redis.conf,
# keeps an existing redis.conf, and what it installed is redis-afork: the
# server runs with the installed config and names itself in --version and
# INFO server.
. "$(dirname "$0")/lib.sh"

root=$work/root
if ! make -s -C "$top" install DESTDIR="$root" >"$work/install.log" 2>&1; then
    err "make install" "$(tail -n 20 "$work/install.log")"
    exit 1
fi
bin=$root/usr/local/bin
missing=
for p in redis-server redis-cli redis-benchmark redis-check-rdb redis-check-aof redis-sentinel; do
    [ -x "$bin/$p" ] || missing="$missing $p"
done
if [ -z "$missing" ]; then ok "programs installed in DESTDIR/usr/local/bin"; else err "install" "missing:$missing"; fi

version=$(sed -n 's/^#define AFORK_VERSION "\(.*\)"$/\1/p' "$top/src/afork.h")
if "$bin/redis-server" --version | grep -qE "^Redis server v=${REDIS_VERSION//./\\.} .* afork=$version\$"; then
    ok "the installed redis-server --version says v=$REDIS_VERSION ... afork=$version"
else
    err "installed --version" "$("$bin/redis-server" --version)"
fi
conf=$root/etc/redis-afork/redis.conf
if [ -f "$conf" ] && cmp -s "$conf" "$tree/redis.conf" && grep -q '^# fork-quiet-window' "$conf"; then
    ok "redis.conf (documenting our options) installed as DESTDIR/etc/redis-afork/redis.conf"
else
    err "config" "$conf missing or not the built tree's redis.conf"
fi

# The installed server with the installed config is redis-afork.
port=$(free_port)
"$bin/redis-server" "$conf" --port "$port" --dir "$work" --save '' --daemonize no \
    --logfile "$work/server.log" &
pid=$!
for _ in $(seq 50); do "$bin/redis-cli" -p "$port" ping 2>/dev/null | grep -q PONG && break; sleep 0.1; done
info=$("$bin/redis-cli" -p "$port" info server 2>&1 | tr -d '\r')
if grep -qx "redis_afork_version:$version" <<<"$info" && grep -qx "config_file:$conf" <<<"$info"; then
    ok "the installed server runs with the installed redis.conf: redis_afork_version:$version"
else
    err "installed server" "$info $(tail -n 5 "$work/server.log" 2>&1)"
fi
kill "$pid" 2>/dev/null
wait "$pid" 2>/dev/null

# A second install keeps an edited redis.conf and puts the new one beside it.
echo "# edited by the operator" >>"$conf"
if make -s -C "$top" install DESTDIR="$root" >"$work/install2.log" 2>&1 &&
    grep -q '^# edited by the operator' "$conf" && cmp -s "$conf.default" "$tree/redis.conf"; then
    ok "make install again keeps an edited redis.conf (the new one: redis.conf.default)"
else
    err "reinstall" "$(tail -n 5 "$work/install2.log"; ls "$root/etc/redis-afork")"
fi

# PREFIX and SYSCONFDIR move the two parts.
if make -s -C "$top" install DESTDIR="$root" PREFIX=/opt/afork SYSCONFDIR=/opt/afork/etc \
        >"$work/install3.log" 2>&1 &&
    [ -x "$root/opt/afork/bin/redis-server" ] && [ -f "$root/opt/afork/etc/redis-afork/redis.conf" ]; then
    ok "PREFIX=/opt/afork SYSCONFDIR=/opt/afork/etc install there"
else
    err "PREFIX/SYSCONFDIR" "$(tail -n 5 "$work/install3.log")"
fi
exit $status
