#!/usr/bin/env bash
# install-deps.sh -- install the Debian packages redis-afork needs to build,
# test and benchmark (Debian 12 or newer; runs apt-get update first).
# Used by .ci/run; users run it once: sudo utils/install-deps.sh
set -euo pipefail
packages=(
    build-essential pkg-config   # compile Redis and its vendored deps
    git                          # the build tree is a git repository
    xz-utils ca-certificates     # unpack / fetch the Debian source package
    tcl                          # upstream's Tcl test harness (tclsh 8.6)
    procps                       # ps, pgrep, kill used by the tests
    python3                      # test helpers
    python3-venv                 # make bench: its own venv (bench/requirements.txt)
    bison flex libelf-dev bc     # make kernel-test: build Linux 6.12 ...
    ccache                       # ... twice, sharing objects (stock, patched)
    qemu-system-x86              # ... boot it (TCG where KVM does not work)
    busybox-static stress-ng     # ... and the guest's userland
    strace                       # tests/system/strace-window.sh
    prometheus                   # promtool: tests/system/monitoring.sh (alert rules);
                                 # the service is not started by the tests
)
sudo=
[ "$(id -u)" -eq 0 ] || sudo=sudo
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update
$sudo apt-get install -y --no-install-recommends "${packages[@]}"
# make test-exporter builds redis_exporter with Go >= 1.22: Debian 13's
# golang-go is, Debian 12's (1.19) is not; install it only when it is.
if ! command -v go >/dev/null; then
    gover=$(apt-cache policy golang-go | sed -n 's/^ *Candidate: *[0-9]*:*\([0-9]*\.[0-9]*\).*/\1/p')
    if [ -n "$gover" ] && [ "$(printf '%s\n1.22\n' "$gover" | sort -V | head -1)" = 1.22 ]; then
        $sudo apt-get install -y --no-install-recommends golang-go
    else
        echo "note: apt's Go (${gover:-none}) is older than 1.22: make test-exporter needs a newer Go on PATH"
    fi
fi
