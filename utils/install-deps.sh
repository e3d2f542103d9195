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
)
sudo=
[ "$(id -u)" -eq 0 ] || sudo=sudo
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update
$sudo apt-get install -y --no-install-recommends "${packages[@]}"
