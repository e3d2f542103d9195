#!/usr/bin/env bash
# tests/deb/upgrade.sh -- part of make test-deb: redis-afork's packages
# installed in place over the Debian redis-server packages that users run
# today, in a Debian trixie root made with mmdebstrap (this machine may be
# older than trixie):
#   - trixie's own redis-server (Redis 8.0);
#   - the newest redis-server of experimental, sid or forky that installs
#     on trixie.
# For each: Debian's redis-server is installed with apt and started as its
# unit starts it (ExecStart as User=redis), given the drop-in dataset
# (tests/system/dataset.py: every type, hash fields with TTLs, streams with
# consumer groups), its state read (DEBUG DIGEST and what the digest does
# not cover), then stopped with SIGTERM (it saves). `apt-get install
# ./redis-afork-*.deb` then replaces it in place: the redis user and the
# unmodified /etc/redis/redis.conf are kept, and redis-afork started the
# same way on the same /var/lib/redis has the same state. Then a purge of
# everything: no package, file or user left in the root.
#
# The archive moves: each line is looked for in every suite that can carry
# it, and a line the archive no longer serves (or whose packages no longer
# install on trixie) is reported "[skip]:" with the reason, not passed.
# The root and the archive URIs are the machine's own Debian sources.
#
#   tests/deb/upgrade.sh [DEBDIR]     (root, or sudo is used)
# Ends with "N passed, N failed, N skipped".
set -uo pipefail

if [ "$(id -u)" -ne 0 ]; then
    exec sudo -E "$0" "$@"
fi

. "$(dirname "$0")/../system/lib.sh"
. "$(dirname "$0")/lib.sh"
debdir=$(realpath -m "${1:-$top/build/deb}")

root=$work/trixie
server_pid=
mounted=()
cleanup() {
    local m
    stop_server KILL
    for m in "${mounted[@]}"; do umount "$m" 2>/dev/null || umount -l "$m"; done
    rm -rf --one-file-system "$work"
}
trap cleanup EXIT

debs=()
for p in redis-afork-tools redis-afork-server redis-afork-sentinel; do
    f=$(ls "$debdir"/"${p}_"*.deb 2>/dev/null | head -n 1)
    [ -n "$f" ] && debs+=("$f")
done
if [ ${#debs[@]} -ne 3 ]; then
    err "packages" "no redis-afork-{tools,server,sentinel} .debs in $debdir (make deb)"
    finish
fi
if ! command -v mmdebstrap >/dev/null; then
    err "mmdebstrap" "not installed; run: sudo utils/install-deps.sh deb"
    finish
fi

# ------------------------------------------------------ the trixie root
# The machine's archive URIs (utils/debian-archive.sh reads them).
archive_work=$work
. "$top/utils/debian-archive.sh"
uris=${AFORK_APT_URI:-$(archive_machine_uris)}
main_uri=$(grep -v -- '-security$' <<<"$uris" | head -n 1)
security_uri=$(grep -- '-security$' <<<"$uris" | head -n 1)
if [ -z "$main_uri" ]; then
    err "archive" "no Debian archive URI in /etc/apt/sources.list{,.d} (or AFORK_APT_URI)"
    finish
fi
newer_suites="experimental sid forky"
mirrors=("deb $main_uri trixie main" "deb $main_uri trixie-updates main")
[ -z "$security_uri" ] || mirrors+=("deb $security_uri trixie-security main")
if mmdebstrap --variant=minbase trixie "$root" "${mirrors[@]}" >"$work/mmdebstrap.log" 2>&1; then
    ok "a Debian trixie root made with mmdebstrap ($(cat "$root/etc/debian_version"))"
else
    err "mmdebstrap trixie" "$(tail -n 10 "$work/mmdebstrap.log")"
    finish
fi
# Then the newer suites, which never give a package by themselves: what is
# asked for by version comes from them, its dependencies from trixie.
for s in $newer_suites; do echo "deb $main_uri $s main"; done >"$root/etc/apt/sources.list.d/newer.list"
# A mirror may serve a snapshot older than a suite's Valid-Until (sid's and
# experimental's Release files are valid for days only): accept it, as
# the machine's own apt does.
echo 'Acquire::Check-Valid-Until "false";' >"$root/etc/apt/apt.conf.d/99afork-snapshot"
for s in trixie trixie-updates trixie-security; do
    printf 'Package: *\nPin: release n=%s\nPin-Priority: 990\n\n' "$s"
done >"$root/etc/apt/preferences.d/trixie"
for m in proc sys; do
    mount -t "${m/sys/sysfs}" "$m" "$root/$m" && mounted=("$root/$m" "${mounted[@]}")
done
printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
chmod 755 "$root/usr/sbin/policy-rc.d"
mkdir -p "$root/tmp/debs"
cp "${debs[@]}" "$root/tmp/debs/"
debs_in_root=()
for f in "${debs[@]}"; do debs_in_root+=("/tmp/debs/${f##*/}"); done
in_root() { chroot "$root" env DEBIAN_FRONTEND=noninteractive LC_ALL=C "$@"; }
if in_root apt-get update >"$work/apt-update.log" 2>&1; then
    ok "the root's apt reads trixie and $newer_suites"
else
    err "apt-get update in the root" "$(grep -E '^(E|W):' "$work/apt-update.log" | head -n 5)"
fi
c() { local p=$1; shift; timeout 20 chroot "$root" redis-cli -p "$p" "$@" 2>&1 | tr -d '\r'; }

# ------------------------------------------------------ serving as the unit does
unit=$root/lib/systemd/system/redis-server.service
port=$(free_port)

# start_server LABEL: the unit's ExecStart (with --port and the DEBUG
# command added) as its User, in the root; waits for PONG.
start_server() {
    local label=$1 exec_start user uid gid rundir
    exec_start=$(unit_value ExecStart)
    user=$(unit_value User)
    uid=$(chroot "$root" id -u "$user") gid=$(chroot "$root" id -g "$user")
    rundir=/run/$(unit_value RuntimeDirectory)
    install -d -o "$uid" -g "$gid" -m "$(unit_value RuntimeDirectoryMode)" "$root$rundir"
    # shellcheck disable=SC2086  # ExecStart is split into words, as systemd does
    (umask "$(unit_value UMask)" && exec chroot --userspec="$uid:$gid" "$root" \
        $exec_start --port "$port" --enable-debug-command local) >"$work/server.out" 2>&1 &
    server_pid=$!
    for _ in $(seq 100); do
        [ "$(c "$port" ping)" = PONG ] && return 0
        sleep 0.1
    done
    err "$label: start" "no PONG: $(cat "$work/server.out"; tail -n 5 "$root/var/log/redis/redis-server.log" 2>&1)"
    return 1
}


installed_version() { chroot "$root" dpkg-query -W -f='${db:Status-Abbrev} ${Version}' "$1" 2>/dev/null | awk '$1 == "ii" { print $2 }'; }

# ------------------------------------------------------ one upgrade
# upgrade LINE VERSION: Debian's redis-server VERSION, then ours over it.
upgrade() {
    local line=$1 v=$2 state uid left
    if ! in_root apt-get install -y --no-install-recommends "redis-server=$v" "redis-tools=$v" \
            >"$work/apt-$line.log" 2>&1; then
        err "$line: Debian's redis-server $v" "apt-get install failed: $(tail -n 5 "$work/apt-$line.log")"
        return 1
    fi
    ok "$line: Debian's redis-server $v installed with apt"
    start_server "Debian's $v" || return 1
    dataset_load "$port" 1 && dataset_load "$port" 2 || { stop_server KILL; return 1; }
    state=$(dataset_state "$port")
    uid=$(chroot "$root" id -u redis)
    if stop_server TERM && [ -s "$root/var/lib/redis/dump.rdb" ]; then
        ok "$line: Debian's $v saved the dataset to /var/lib/redis/dump.rdb on SIGTERM"
    else
        err "$line: Debian's $v SIGTERM" "no saved dump.rdb: $(tail -n 5 "$root/var/log/redis/redis-server.log")"
        return 1
    fi
    if in_root apt-get install -y "${debs_in_root[@]}" >"$work/apt-ours-$line.log" 2>&1 &&
        [ -z "$(installed_version redis-server)" ] &&
        [ -n "$(installed_version redis-afork-server)" ]; then
        ok "$line: apt-get install ./redis-afork-*.deb replaced $v in place"
    else
        err "$line: apt-get install ./redis-afork-*.deb" "$(tail -n 10 "$work/apt-ours-$line.log")"
        return 1
    fi
    if grep -q '^# fork-quiet-window' "$root/etc/redis/redis.conf" &&
        [ "$(chroot "$root" id -u redis)" = "$uid" ] &&
        [ "$(stat -c %a "$root/etc/redis/redis.conf")" = 640 ]; then
        ok "$line: the unmodified redis.conf is now ours, the redis user kept (uid $uid)"
    else
        err "$line: conffile and user" "$(ls -l "$root/etc/redis"; chroot "$root" id redis)"
    fi
    if start_server "redis-afork over $v"; then
        if [ "$(dataset_state "$port")" = "$state" ] &&
            c "$port" info server | grep -q '^redis_afork_version:'; then
            ok "$line: redis-afork serves what $v saved: same digest, field TTLs, groups, functions"
        else
            err "$line: data kept" "$(diff <(echo "$state") <(dataset_state "$port") | head -n 6 | tr '\n' '|')"
        fi
        stop_server TERM
    fi
    in_root dpkg --purge redis-afork-server redis-afork-sentinel redis-afork-tools redis-server redis-tools \
        >"$work/purge-$line.log" 2>&1
    left=$(chroot "$root" dpkg-query -W -f='${db:Status-Abbrev} ${Package}\n' 'redis*' 2>/dev/null |
        awk '$1 != "un" { print $2 }' | tr '\n' ' ')
    [ ! -e "$root/etc/redis" ] || left+=" /etc/redis"
    [ ! -e "$root/var/lib/redis" ] || left+=" /var/lib/redis"
    ! chroot "$root" id redis >/dev/null 2>&1 || left+=" user:redis"
    if [ -z "${left// /}" ]; then
        ok "$line: purged: no package, file or user left"
    else
        err "$line: purge" "left:$left; $(tail -n 5 "$work/purge-$line.log")"
    fi
}

# newest_version SUITES...: the newest redis-server of SUITES that installs
# here (its dependencies from trixie), or nothing.
newest_version() {
    local v
    for v in $(in_root apt-cache madison redis-server |
            awk -F' *[|] *' -v s=" $* " '{ split($3, w, " "); split(w[2], x, "/")
                if (index(s, " " x[1] " ")) print $2 }' | sort -u -r -V); do
        if in_root apt-get install -s "redis-server=$v" "redis-tools=$v" >/dev/null 2>&1; then
            echo "$v"
            return
        fi
    done
}

v=$(newest_version trixie trixie-updates trixie-security)
if [ -n "$v" ]; then upgrade trixie "$v"; else skip "trixie: no redis-server in trixie that installs"; fi
v=$(newest_version $newer_suites)
if [ -n "$v" ]; then upgrade newest "$v"; else skip "newest: no redis-server of $newer_suites installs on trixie"; fi
finish
