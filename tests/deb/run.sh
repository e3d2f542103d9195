#!/usr/bin/env bash
# tests/deb/run.sh -- make test-deb: the packages of make deb on this machine.
#
#   tests/deb/run.sh [DEBDIR]     (default: build/deb; root, or sudo is used)
#
# 0. The source package unpacks (dpkg-source -x applies every patch) and
#    its series has Debian's patches first, then ours in the project's order.
# 1. On a clean machine: installs redis-afork-tools, -server and -sentinel
#    with dpkg -i (service starts denied by policy-rc.d, as in a container),
#    checks what Debian's redis-server gives (the redis user, /var/lib/redis,
#    /etc/redis/redis.conf with our options documented, the systemd units
#    under Debian's names, logrotate, Provides), verifies the units with
#    systemd-analyze, starts the server as redis-server.service does (its
#    ExecStart, User, Group, UMask, RuntimeDirectory, and a NOTIFY_SOCKET
#    that must receive READY=1; only --port is added, a free one), BGSAVEs,
#    checks INFO server names redis-afork, stops it with SIGTERM as systemd
#    does, then purges the packages and checks that nothing is left running
#    or installed.
# 2. As a drop-in: installs Debian's own redis-server with apt (the
#    machine's suites), saves a key with it, then installs ours with
#    `apt-get install ./*.deb` as README says: Debian's packages go, the
#    conffile becomes ours, and redis-afork serves the saved key.
# The machine is restored on any exit: servers stopped, packages purged
# (and what apt pulled in for Debian's redis-server), the previous
# policy-rc.d back. Refuses to run where Debian's redis packages (or ours)
# are installed already. Ends with "N passed, N failed, N skipped".
set -uo pipefail

if [ "$(id -u)" -ne 0 ]; then
    exec sudo -E "$0" "$@"
fi

. "$(dirname "$0")/../system/lib.sh"
. "$(dirname "$0")/lib.sh"
debdir=$(realpath -m "${1:-$top/build/deb}")

ours="redis-afork-tools redis-afork-server redis-afork-sentinel"
theirs="redis redis-server redis-tools redis-sentinel"
version=$(sed -n '1s/^[a-z0-9-]* (\(.*\)).*/\1/p' "$debdir/redis-$REDIS_VERSION/debian/changelog" 2>/dev/null)
debs=()
for p in $ours; do
    f=$(ls "$debdir"/"${p}_"*.deb 2>/dev/null | head -n 1)
    [ -n "$f" ] && debs+=("$f")
done
if [ ${#debs[@]} -ne 3 ] || [ -z "$version" ]; then
    err "packages" "no redis-afork-{tools,server,sentinel} .debs in $debdir (make deb)"
    finish
fi
installed() { dpkg-query -W -f='${db:Status-Abbrev}' "$1" 2>/dev/null | grep -q '^[ic]'; }
# Installed, or removed with its conffiles kept (rc).
present() { dpkg-query -W -f='${db:Status-Abbrev}' "$1" 2>/dev/null | grep -q '^.[^n]'; }
for p in $ours $theirs; do
    if present "$p"; then
        err "clean machine" "$p is installed; this test installs and purges redis packages, so it runs only without $theirs $ours"
        finish
    fi
done
if pgrep -f '^/usr/bin/redis-(server|sentinel|check-rdb)' >/dev/null; then
    err "clean machine" "a /usr/bin/redis-server runs; stop it first"
    finish
fi

# ------------------------------------------------------ restore on exit
server_pid=
policy=/usr/sbin/policy-rc.d
had_policy=0
[ -e "$policy" ] && had_policy=1 && cp -p "$policy" "$work/policy-rc.d.saved"
had_user=0
id redis >/dev/null 2>&1 && had_user=1
rundir_made=
packages() { dpkg-query -W -f='${db:Status-Abbrev} ${Package}\n' | awk '$1 == "ii" { print $2 }' | sort; }
: >"$work/pulled"
purge_all() {
    local p left=()
    for p in $ours $theirs; do present "$p" && left+=("$p"); done
    [ ${#left[@]} -eq 0 ] || dpkg --purge "${left[@]}" >>"$work/purge.log" 2>&1
}
restore() {
    stop_server KILL
    purge_all
    # What apt pulled in for Debian's redis-server (libjemalloc2, ...).
    # shellcheck disable=SC2046
    [ ! -s "$work/pulled" ] || dpkg --purge $(cat "$work/pulled") >/dev/null 2>&1
    if [ "$had_policy" = 1 ]; then cp -p "$work/policy-rc.d.saved" "$policy"; else rm -f "$policy"; fi
    [ "$had_user" = 1 ] || ! id redis >/dev/null 2>&1 || userdel redis >/dev/null 2>&1
    [ -z "$rundir_made" ] || rm -rf "$rundir_made"
    rm -rf "$work"
}
trap restore EXIT

# Services are not started by the packages' postinst here: the test starts
# the server itself, as the unit would.
printf '#!/bin/sh\nexit 101\n' >"$policy"
chmod 755 "$policy"

# ------------------------------------------------------ serving as the unit does
unit=/lib/systemd/system/redis-server.service
port=$(free_port)
chmod 755 "$work"
cli() { redis-cli -p "$port" "$@"; }

# start_as_unit LABEL: redis-server.service's ExecStart (--port added) as its
# User/Group with its UMask and RuntimeDirectory; waits for READY=1.
start_as_unit() {
    local label=$1 exec_start user group rundir notify=$work/notify.sock listener
    exec_start=$(unit_value ExecStart)
    user=$(unit_value User)
    group=$(unit_value Group)
    rundir=/run/$(unit_value RuntimeDirectory)
    [ -e "$rundir" ] || rundir_made=$rundir
    install -d -o "$user" -g "$group" -m "$(unit_value RuntimeDirectoryMode)" "$rundir"
    rm -f "$notify"
    python3 - "$notify" >"$work/notify.log" 2>&1 <<'EOF' &
import os, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sys.argv[1]); os.chmod(sys.argv[1], 0o777)
s.settimeout(30)
while True:
    msg = s.recv(4096).decode()
    print(msg.replace("\n", " "), flush=True)
    if "READY=1" in msg: break
EOF
    listener=$!
    for _ in $(seq 50); do [ -S "$notify" ] && break; sleep 0.1; done
    # shellcheck disable=SC2086  # ExecStart is split into words, as systemd does
    (umask "$(unit_value UMask)" && cd / && NOTIFY_SOCKET=$notify exec setpriv \
        --reuid="$user" --regid="$group" --init-groups -- $exec_start --port "$port") \
        >"$work/server.out" 2>&1 &
    server_pid=$!
    if wait "$listener" && grep -q 'READY=1' "$work/notify.log"; then
        ok "$label: started as redis-server.service does (User=$user), READY=1 received"
    else
        err "$label: READY=1" "not received: $(cat "$work/notify.log" "$work/server.out"; tail -n 5 /var/log/redis/redis-server.log 2>&1)"
        return 1
    fi
}


# ====================================================== 0. the source package
dsc=$debdir/redis_${version#*:}.dsc
if [ -f "$dsc" ] && (cd "$work" && dpkg-source -x "$dsc" src) >"$work/dpkg-source.log" 2>&1 &&
    cmp -s "$work/src/src/afork.c" "$top/src/afork.c"; then
    ok "$(basename "$dsc") unpacks with dpkg-source -x, all patches applying, our sources in it"
else
    err "source package" "$(tail -n 10 "$work/dpkg-source.log" 2>&1)"
fi
# Our series comes after every patch of Debian's (its CVE fixes included),
# patches/security before our sources, then patches/series in its order.
debian_tarball=${AFORK_CACHE:-$top/upstream/cache}/$DEBIAN_TARBALL
series=$(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$work/src/debian/patches/series" 2>/dev/null)
want=$( (tar -xJOf "$debian_tarball" debian/patches/series |
        sed -e 's/#.*//' -e '/^[[:space:]]*$/d'
    sed -e 's/#.*//' -e '/^[[:space:]]*$/d' -e 's|^|afork/security/|' "$top/patches/security/series"
    echo afork/0000-redis-afork-sources.patch
    sed -e 's/#.*//' -e '/^[[:space:]]*$/d' -e 's|^|afork/|' "$top/patches/series") 2>/dev/null)
if [ -n "$series" ] && [ "$series" = "$want" ] && grep -q 'CVE' <<<"$series"; then
    ok "debian/patches/series: Debian's $(grep -vc '^afork/' <<<"$series") patches, then our $(grep -c '^afork/' <<<"$series")"
else
    err "series order" "expected Debian's series ($debian_tarball), then ours: $(diff <(echo "$want") <(echo "$series") | head)"
fi
rm -rf "$work/src"

# ====================================================== 1. a clean machine
if dpkg -i "${debs[@]}" >"$work/dpkg-i.log" 2>&1; then
    ok "dpkg -i installs $ours ($version)"
else
    err "dpkg -i" "$(tail -n 20 "$work/dpkg-i.log")"
    finish
fi
bad=
for p in $ours; do
    v=$(dpkg-query -W -f='${Version}' "$p")
    [ "$v" = "$version" ] || bad="$bad $p=$v"
done
if [ -z "$bad" ]; then ok "all three are installed at version $version"; else err "versions" "$bad, expected $version"; fi
prov=$(dpkg-query -W -f='${Provides} ${Conflicts} ${Replaces}' redis-afork-server)
if [[ $prov == "redis-server (= $version) redis-server redis-server" ]]; then
    ok "redis-afork-server provides, conflicts with and replaces redis-server"
else
    err "redis-afork-server relations" "$prov"
fi

redis_uid=$(id -u redis 2>/dev/null || echo 0)
if [ "$redis_uid" != 0 ] &&
    [ "$(stat -c %U:%a /var/lib/redis)" = redis:750 ] &&
    [ "$(stat -c %U /var/log/redis)" = redis ] &&
    [ "$(stat -c %U:%G:%a /etc/redis/redis.conf)" = redis:redis:640 ]; then
    ok "the redis user, /var/lib/redis, /var/log/redis, /etc/redis/redis.conf (redis:redis 640)"
else
    err "user and directories" "$(id redis 2>&1); $(ls -ld /var/lib/redis /var/log/redis /etc/redis/redis.conf 2>&1)"
fi
missing=
for f in /usr/bin/redis-server /usr/bin/redis-cli /usr/bin/redis-sentinel /usr/bin/redis-check-rdb \
    /etc/redis/sentinel.conf /lib/systemd/system/redis-server.service \
    /lib/systemd/system/redis-server@.service /lib/systemd/system/redis-sentinel.service \
    /etc/logrotate.d/redis-server /etc/init.d/redis-server /etc/default/redis-server; do
    [ -e "$f" ] || missing="$missing $f"
done
if [ -z "$missing" ]; then
    ok "programs, units, init script, logrotate and default files under Debian's names"
else
    err "installed files" "missing:$missing"
fi
if grep -q '^# fork-quiet-window auto' /etc/redis/redis.conf &&
    grep -q '^# fork-thp auto' /etc/redis/redis.conf &&
    grep -q '^dir /var/lib/redis' /etc/redis/redis.conf; then
    ok "/etc/redis/redis.conf has Debian's defaults and documents our options"
else
    err "redis.conf" "$(grep -n 'fork-\|^dir ' /etc/redis/redis.conf | head)"
fi
if /usr/bin/redis-server --version | grep -qE "^Redis server v=${REDIS_VERSION//./\\.} .* afork=[0-9.]+\$"; then
    ok "redis-server --version: $(/usr/bin/redis-server --version)"
else
    err "--version" "$(/usr/bin/redis-server --version 2>&1)"
fi

if ! command -v systemd-analyze >/dev/null; then
    err "systemd-analyze verify" "systemd-analyze is not installed; run: sudo utils/install-deps.sh deb"
elif out=$(SYSTEMD_LOG_LEVEL=notice systemd-analyze verify --man=no "$unit" \
        /lib/systemd/system/redis-sentinel.service 2>&1) && [ -z "$out" ]; then
    ok "systemd-analyze verify: redis-server.service and redis-sentinel.service, no complaint"
else
    err "systemd-analyze verify" "$out"
fi
exec_start=$(unit_value ExecStart)
if [ "$(unit_value User)" = redis ] && [ "$(unit_value Type)" = notify ] &&
    [[ $exec_start == "/usr/bin/redis-server /etc/redis/redis.conf "* ]]; then
    ok "unit: Type=notify, User=redis, ExecStart=$exec_start"
else
    err "unit" "$(grep -E '^(Type|User|ExecStart)=' "$unit")"
fi

if start_as_unit "redis-afork"; then
    info=$(cli info server | tr -d '\r')
    if grep -qx 'redis_afork_version:[0-9.]*' <<<"$info" &&
        grep -qx "redis_version:$REDIS_VERSION" <<<"$info" &&
        grep -qx 'executable:/usr/bin/redis-server' <<<"$info" &&
        grep -qx 'config_file:/etc/redis/redis.conf' <<<"$info"; then
        ok "INFO server: $(grep -E '^redis_afork_version' <<<"$info"), /usr/bin/redis-server with /etc/redis/redis.conf"
    else
        err "INFO server" "$info"
    fi
    if [ "$(ps -o user= -p "$server_pid")" = redis ]; then
        ok "the server runs as redis"
    else
        err "server user" "$(ps -o user=,args= -p "$server_pid")"
    fi
    cli set afork:deb "$version" >/dev/null
    before=$(cli info persistence | tr -d '\r' | sed -n 's/^rdb_changes_since_last_save://p')
    cli bgsave >/dev/null
    for _ in $(seq 100); do
        cli info persistence | grep -q '^rdb_bgsave_in_progress:0' && [ -e /var/lib/redis/dump.rdb ] && break
        sleep 0.1
    done
    persist=$(cli info persistence | tr -d '\r')
    fork=$(cli info fork | tr -d '\r')
    if [ "${before:-0}" -gt 0 ] && grep -qx 'rdb_last_bgsave_status:ok' <<<"$persist" &&
        [ "$(stat -c %U /var/lib/redis/dump.rdb 2>/dev/null)" = redis ] &&
        grep -qE '^max_fork_usec:[1-9][0-9]*$' <<<"$fork"; then
        ok "BGSAVE: /var/lib/redis/dump.rdb written by redis, INFO fork $(grep '^max_fork_usec' <<<"$fork")"
    else
        err "BGSAVE" "$persist $(grep latest_fork <<<"$fork"); $(ls -l /var/lib/redis)"
    fi
    if grep -q 'Background saving terminated with success' /var/log/redis/redis-server.log; then
        ok "the log goes to /var/log/redis/redis-server.log"
    else
        err "log file" "$(tail -n 5 /var/log/redis/redis-server.log 2>&1)"
    fi
    pid=$server_pid
    if stop_server TERM && ! kill -0 "$pid" 2>/dev/null; then
        ok "SIGTERM: the server saved and exited with status 0"
    else
        err "SIGTERM" "the server failed to stop cleanly: $(tail -n 5 /var/log/redis/redis-server.log)"
    fi
fi

if dpkg --purge $ours >"$work/purge.log" 2>&1; then
    ok "dpkg --purge $ours"
else
    err "dpkg --purge" "$(tail -n 20 "$work/purge.log")"
fi
left=
for p in $ours; do present "$p" && left="$left package:$p"; done
for f in /usr/bin/redis-server /usr/bin/redis-check-rdb /etc/redis /var/lib/redis /var/log/redis \
    /lib/systemd/system/redis-server.service /etc/logrotate.d/redis-server /etc/init.d/redis-server; do
    [ -e "$f" ] && left="$left $f"
done
[ "$had_user" = 1 ] || ! id redis >/dev/null 2>&1 || left="$left user:redis"
# Processes of the (now deleted) redis uid, or of the packaged programs.
running=$(pgrep -l -U "$redis_uid"; pgrep -a -f '^/usr/bin/redis-(server|sentinel|check-rdb)')
if [ -z "$left" ] && [ -z "$running" ]; then
    ok "after the purge: no process, no package, no file, no redis user"
else
    err "purge left" "$left ${running:+running: $running}"
fi

# ====================================================== 2. a drop-in for Debian's
export DEBIAN_FRONTEND=noninteractive
packages >"$work/packages.before"
apt-get install -y --no-install-recommends redis-server >"$work/apt-debian.log" 2>&1
packages | comm -13 "$work/packages.before" - | grep -vxE "${theirs// /|}" >"$work/pulled"
if installed redis-server; then
    theirs_version=$(dpkg-query -W -f='${Version}' redis-server)
    ok "Debian's redis-server $theirs_version installed with apt"
else
    err "Debian's redis-server" "apt-get install failed: $(tail -n 10 "$work/apt-debian.log")"
    finish
fi
uid=$(id -u redis)
if start_as_unit "Debian's redis-server $theirs_version"; then
    cli set afork:dropin "saved by $theirs_version" >/dev/null
    stop_server TERM
fi
if apt-get install -y "${debs[@]}" >"$work/apt-ours.log" 2>&1; then
    ok "apt-get install ./redis-afork-*.deb over Debian's packages"
else
    err "apt-get install ./*.deb" "$(tail -n 20 "$work/apt-ours.log")"
    finish
fi
gone=1
for p in redis-server redis-tools; do
    dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null | grep -q '^ii' && gone=0
done
now=
for p in $ours; do now="$now $(dpkg-query -W -f='${db:Status-Abbrev}' "$p")"; done
if [ "$gone" = 1 ] && [ "$now" = " ii  ii  ii " ]; then
    ok "Debian's redis-server and redis-tools removed, ours installed"
else
    err "replacement" "ours:$now; $(dpkg -l 'redis*' | grep '^[a-z][a-z]' | tail -n 5)"
fi
if grep -q '^# fork-quiet-window auto' /etc/redis/redis.conf && [ "$(id -u redis)" = "$uid" ] &&
    [ "$(stat -c %U:%G:%a /etc/redis/redis.conf)" = redis:redis:640 ]; then
    ok "the unmodified /etc/redis/redis.conf is now ours; the redis user is kept (uid $uid)"
else
    err "conffile takeover" "$(ls -l /etc/redis; id redis)"
fi
if start_as_unit "redis-afork over Debian's data"; then
    v=$(cli get afork:dropin)
    afork=$(cli info server | tr -d '\r' | sed -n 's/^redis_afork_version://p')
    if [ "$v" = "saved by $theirs_version" ] && [ -n "$afork" ]; then
        ok "redis-afork $afork serves the key Debian's $theirs_version saved in /var/lib/redis"
    else
        err "data kept" "afork:dropin='$v', redis_afork_version='$afork'"
    fi
    stop_server TERM
fi
purge_all
left=
for p in $ours $theirs; do present "$p" && left="$left $p"; done
if [ -z "$left" ] && [ ! -e /etc/redis ] && [ ! -e /var/lib/redis ]; then
    ok "ours and Debian's (left with its conffiles by apt) purged"
else
    err "second purge" "left:$left; $(tail -n 10 "$work/purge.log")"
fi
finish
