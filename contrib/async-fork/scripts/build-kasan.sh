#!/usr/bin/env bash
# build-kasan.sh -- the KASAN build of one tree (make kernel-kasan):
# config/kasan.config on top of debug.config, into TREE/obj-kasan.
#
#   build-kasan.sh patched   the series, with async-fork.config
#   build-kasan.sh stock     the control: the stock tree built the same
#                            way, without the lines of debug.config that
#                            name CONFIG_ASYNC_FORK (build-kernel.sh
#                            refuses a setting the tree does not have)
#
# Environment: as build-kernel.sh's.
set -euo pipefail

prog=kernel/build-kasan die_status=2
. "$(dirname "$0")/lib.sh"

case ${1:-} in
patched)
    exec "$here/build-kernel.sh" patched kasan "$contrib/config/async-fork.config" \
        "$contrib/config/debug.config" "$contrib/config/kasan.config" ;;
stock)
    mkdir -p "$out/stock"
    grep -v ASYNC_FORK "$contrib/config/debug.config" >"$out/stock/debug-stock.config"
    exec "$here/build-kernel.sh" stock kasan "$out/stock/debug-stock.config" \
        "$contrib/config/kasan.config" ;;
*) die "usage: build-kasan.sh patched|stock" ;;
esac
