#!/usr/bin/env bash
# install-deps.sh -- install the Debian packages redis-afork needs (Debian 12
# or newer; runs apt-get update first), by what they are for:
#
#   sudo utils/install-deps.sh [SET...]      install SETs (default: build test)
#   utils/install-deps.sh --check SET...     exit 1, naming what is missing and
#                                            the command that installs it
#   utils/install-deps.sh --list [SET...]    print the packages of SETs
#
# SETs: build (make, make run), test (make test), bench (make bench),
# deb (make deb, make test-deb), kernel (make kernel-test), all.
# `make deps GOAL` runs this for GOAL's sets (with sudo when not root);
# the make targets run --check before they start. .ci/run installs all.
set -euo pipefail

# build: compile Redis and run it.
set_build=(
    build-essential pkg-config   # compile Redis and its vendored deps
    git                          # the build tree is a git repository
    xz-utils ca-certificates     # unpack / fetch the Debian source package
    python3                      # utils/run.sh, test helpers
)
# test: what make test needs beyond build. Test-only tools go here.
set_test=(
    tcl                          # upstream's Tcl test harness (tclsh 8.6)
    procps                       # ps, pgrep, kill used by the tests
    strace                       # tests/system/strace-window.sh
    python3-venv                 # the bench smoke test (tests/system/bench-smoke.sh)
    prometheus                   # promtool: tests/system/monitoring.sh (alert rules);
                                 # the service is not started by the tests
)
# bench: make bench (its own venv from bench/requirements.txt) and
# make bench-stalls (forkbench.stalls: perf record of the server's stalls).
set_bench=(
    python3-venv
    linux-perf
)
# deb: make deb (dpkg-buildpackage; the Build-Depends of Debian's redis
# source package, less what contrib/debian/packaging.patch drops; Lua as
# liblua5.1-0-dev, the real package behind the virtual liblua5.1-dev) and
# make test-deb (systemd-analyze verify on the units; a Debian trixie root
# for the upgrade over Debian's packages).
set_deb=(
    dpkg-dev debhelper
    libhiredis-dev liblua5.1-0-dev liblzf-dev libssl-dev libsystemd-dev
    lua-bitop-dev lua-cjson-dev pkgconf
    adduser                      # the packages' postinst (the redis user)
    systemd                      # systemd-analyze verify
    mmdebstrap                   # tests/deb/upgrade.sh: the trixie root
)
# kernel: make kernel-test.
set_kernel=(
    bison flex libelf-dev bc     # build Linux 6.12 ...
    ccache                       # ... twice, sharing objects (stock, patched)
    qemu-system-x86              # ... boot it (TCG where KVM does not work)
    busybox-static stress-ng     # ... and the guest's userland
    libnuma-dev liburing-dev     # ... and the kernel's mm selftests (make kernel-selftests)
)
all_sets="build test bench deb kernel"

usage() {
    echo "usage: utils/install-deps.sh [--check|--list] [build|test|bench|deb|kernel|all]..." >&2
    exit 2
}

mode=install
case ${1:-} in
--check | --list) mode=${1#--} && shift ;;
-*) usage ;;
esac
sets=("$@")
[ ${#sets[@]} -gt 0 ] || sets=(build test)

# Every set includes build; "all" is every set.
packages=("${set_build[@]}")
for s in "${sets[@]}"; do
    case $s in
    all) for a in $all_sets; do eval 'packages+=("${set_'"$a"'[@]}")'; done ;;
    build | test | bench | deb | kernel) eval 'packages+=("${set_'"$s"'[@]}")' ;;
    *) usage ;;
    esac
done
mapfile -t packages < <(printf '%s\n' "${packages[@]}" | sort -u)

if [ "$mode" = list ]; then
    printf '%s\n' "${packages[@]}"
    exit 0
fi
if [ "$mode" = check ]; then
    # Debian only: elsewhere there is no package database to ask.
    command -v dpkg-query >/dev/null || exit 0
    missing=()
    for p in "${packages[@]}"; do
        dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null | grep -q '^ii' ||
            missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && exit 0
    echo "Missing packages (for: ${sets[*]}): ${missing[*]}" >&2
    echo "run: sudo utils/install-deps.sh ${sets[*]}" >&2
    exit 1
fi

sudo=
[ "$(id -u)" -eq 0 ] || sudo=sudo
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update
$sudo apt-get install -y --no-install-recommends "${packages[@]}"
# make test-exporter builds redis_exporter with Go >= 1.22: Debian 13's
# golang-go is, Debian 12's (1.19) is not; install it only when it is.
if [[ " ${sets[*]} " =~ \ (test|all)\  ]] && ! command -v go >/dev/null; then
    gover=$(apt-cache policy golang-go | sed -n 's/^ *Candidate: *[0-9]*:*\([0-9]*\.[0-9]*\).*/\1/p')
    if [ -n "$gover" ] && [ "$(printf '%s\n1.22\n' "$gover" | sort -V | head -1)" = 1.22 ]; then
        $sudo apt-get install -y --no-install-recommends golang-go
    else
        echo "note: apt's Go (${gover:-none}) is older than 1.22: make test-exporter needs a newer Go on PATH"
    fi
fi
