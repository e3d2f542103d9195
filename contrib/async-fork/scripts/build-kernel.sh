#!/usr/bin/env bash
# build-kernel.sh -- configure and build one guest kernel (bzImage) out of
# tree, through ccache.
#
#   build-kernel.sh TREE [NAME [FRAGMENT...]]
#
# TREE is "stock" or "patched" (the trees kernel-tree.sh prepares), or any
# other KERNEL_OUT/TREE/linux tree laid out the same way (a scratch
# worktree for an experiment shares the ccache just as well). NAME
# labels the build (default: TREE); a NAME other than TREE builds into
# TREE/obj-NAME, so a later debug build of the patched tree lives next to the
# normal one. The config is tinyconfig + config/guest.config + FRAGMENTs; it
# is regenerated only when a fragment or the source version changes, so an
# edit in the tree rebuilds just what depends on it.
#
# ccache: CCACHE_DIR (default KERNEL_OUT/ccache) is shared by all builds and
# CCACHE_BASEDIR=KERNEL_OUT makes paths relative, so the patched build hits
# the stock build's cache for every file the patches leave alone.
#
# Writes KERNEL_OUT/TREE/obj[-NAME]/afork-build.env: the image path, kernel
# release, seconds taken, clean/incremental, ccache hits and misses.
# Options (before TREE): --targets "T..." compiles these make targets
# instead of bzImage (e.g. "mm/ kernel/", kernel-test.sh's configured-out
# check). Environment: JOBS (default nproc), KERNEL_OUT, CCACHE_DIR.
set -euo pipefail

prog=kernel/build
. "$(dirname "$0")/lib.sh"
jobs=${JOBS:-$(nproc)}
targets=bzImage
if [ "${1:-}" = --targets ]; then
    targets=${2:?--targets needs a list}
    shift 2
fi

say() { printf 'kernel/build[%s]: %s\n' "$name" "$*"; }

kmake() {
    nice -n "$nice_level" make -s -C "$src" O="$obj" ARCH=x86_64 "$@"
}

# Print the "CONFIG_X=v" / "# CONFIG_X is not set" lines of the fragments.
wanted_settings() {
    cat "${fragments[@]}" | grep -E '^(CONFIG_[A-Za-z0-9_]+=|# CONFIG_[A-Za-z0-9_]+ is not set)'
}

# Fail if the final .config dropped or changed a setting the fragments ask for.
check_config() {
    local line sym bad=()
    while read -r line; do
        if [[ $line == "# "* ]]; then
            sym=${line#\# }
            sym=${sym%% *}
            grep -qE "^$sym=[ym]" "$obj/.config" && bad+=("$line (it is: $(grep -E "^$sym=" "$obj/.config"))")
        else
            sym=${line%%=*}
            grep -qxF -- "$line" "$obj/.config" ||
                bad+=("$line (it is: $(grep -E "^(# )?${sym}[= ]" "$obj/.config" || echo absent))")
        fi
    done < <(wanted_settings)
    [ "${#bad[@]}" -eq 0 ] ||
        die "the kernel config does not hold these fragment settings" \
            "(a dependency is missing or a name changed):" "${bad[@]}"
}

config_digest() {
    { cat "${fragments[@]}"; awk '/^(VERSION|PATCHLEVEL|SUBLEVEL|EXTRAVERSION) =/' "$src/Makefile"; } |
        sha256sum | cut -d' ' -f1
}

configure() {
    local digest
    digest=$(config_digest)
    if [ -f "$obj/.config" ] && [ "$(cat "$obj/afork-config.sha256" 2>/dev/null)" = "$digest" ]; then
        return 0
    fi
    say "configuring: tinyconfig + $(printf '%s ' "${fragments[@]##*/}")"
    mkdir -p "$obj"
    kmake tinyconfig >/dev/null
    (cd "$obj" && "$src/scripts/kconfig/merge_config.sh" -m -O "$obj" "$obj/.config" \
        "${fragments[@]}") >"$obj/afork-merge.log" 2>&1 ||
        { tail -n 20 "$obj/afork-merge.log" >&2; die "merge_config.sh failed."; }
    kmake olddefconfig >/dev/null
    check_config
    printf '%s\n' "$digest" >"$obj/afork-config.sha256"
}

setup_ccache() {
    command -v ccache >/dev/null ||
        die "ccache is not installed: utils/install-deps.sh kernel installs it."
    export CCACHE_DIR=${CCACHE_DIR:-$out/ccache}
    export CCACHE_BASEDIR=$out CCACHE_NOHASHDIR=1
    export CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-4G}
    cc="ccache gcc"
}

# Print "hits misses" from ccache's counters.
ccache_counts() {
    ccache --print-stats | awk '
        $1=="direct_cache_hit" || $1=="preprocessed_cache_hit" { h += $2 }
        $1=="cache_miss" { m += $2 }
        END { print h + 0, m + 0 }'
}

build() {
    local kind=incremental start end before after release
    [ -f "$obj/vmlinux" ] || kind=clean
    before=$(ccache_counts)
    say "building $targets ($kind, -j$jobs, nice $nice_level, CC=$cc)"
    start=$(date +%s)
    # Fixed build stamps: identical inputs give identical objects (ccache hits).
    kmake -j"$jobs" CC="$cc" LOCALVERSION="-$name" \
        KBUILD_BUILD_TIMESTAMP="2000-01-01" KBUILD_BUILD_USER=afork \
        KBUILD_BUILD_HOST=afork KBUILD_BUILD_VERSION=1 $targets ||
        die "the $name kernel did not build (see the compiler messages above)."
    end=$(date +%s)
    after=$(ccache_counts)
    release=$(kmake -s kernelrelease LOCALVERSION="-$name")
    write_env "$kind" $((end - start)) "$release" "$before" "$after"
    say "built $release in $((end - start)) s ($kind)$(ccache_note "$before" "$after")"
}

ccache_note() {
    set -- $1 $2
    printf '; ccache: %d hits, %d misses' $(($3 - $1)) $(($4 - $2))
}

write_env() {
    local kind=$1 secs=$2 release=$3
    set -- $4 $5
    {
        echo "BUILD_NAME=$name"
        echo "BUILD_TREE=$tree"
        echo "BUILD_IMAGE=$obj/arch/x86/boot/bzImage"
        echo "BUILD_RELEASE=$release"
        echo "BUILD_KIND=$kind"
        echo "BUILD_SECONDS=$secs"
        echo "BUILD_CCACHE_HITS=$(($3 - $1))"
        echo "BUILD_CCACHE_MISSES=$(($4 - $2))"
    } >"$obj/afork-build.env"
}

[ $# -ge 1 ] || die "usage: build-kernel.sh TREE [NAME [FRAGMENT...]]   (TREE: stock or patched)"
tree=$1
name=${2:-$tree}
shift $(($# >= 2 ? 2 : 1))
case $tree in */* | .* | "") die "TREE is a name under $out (stock, patched), not '$tree'." ;; esac
src=$out/$tree/linux
obj=$out/$tree/obj
[ "$name" = "$tree" ] || obj=$out/$tree/obj-$name
[ -f "$src/Makefile" ] || die "no source tree at $src; run make kernel-src first."
fragments=("$contrib/config/guest.config")
for f in "$@"; do
    [ -f "$f" ] || die "no such config fragment: $f"
    fragments+=("$(cd "$(dirname "$f")" && pwd)/$(basename "$f")")
done
setup_ccache
configure
build
