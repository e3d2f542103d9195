#!/usr/bin/env bash
# kernel-tree.sh -- prepare the kernel source trees the builds use.
#
#   kernel-tree.sh prepare DEB   unpack DEB (linux-source-6.12) once into a
#                                pristine git tree (tag "stock") and keep a git
#                                worktree (branch "patched") with
#                                contrib/async-fork/patches/series applied by
#                                apply-series.sh (git am; on a source other
#                                than the series' base, bounded fuzz with a
#                                drift report); re-applies when either changes
#   kernel-tree.sh version       print "<kernel version> (Debian <package version>)"
#   kernel-tree.sh base          print "series base X, source Y" (+ drift)
#   kernel-tree.sh export        write the commits of the patched worktree
#                                (stock..patched) to patches/ and patches/series,
#                                recording the source as the series' new base
#
# The drift report of the last application is $KERNEL_OUT/patched/drift.txt
# (empty: applied strictly).
#
# Layout (KERNEL_OUT, default build/kernel):
#   stock/linux    pristine tree, git repository   stock/obj    its O= build
#   patched/linux  git worktree of the same repo   patched/obj  its O= build
# Both trees sit at the same depth next to their build directories, so the
# compiler sees the same relative paths in both builds and ccache (with
# CCACHE_BASEDIR=KERNEL_OUT) shares one cache between them.
set -euo pipefail

prog=kernel/tree
. "$(dirname "$0")/lib.sh"
stock=$out/stock/linux
patched=$out/patched/linux
patches=$contrib/patches
drift=$out/patched/drift.txt

# A fixed identity for the commits made in the build trees.
export GIT_AUTHOR_NAME="redis-afork kernel harness" GIT_AUTHOR_EMAIL="afork@localhost"
export GIT_COMMITTER_NAME=$GIT_AUTHOR_NAME GIT_COMMITTER_EMAIL=$GIT_AUTHOR_EMAIL


git_stock() { git -C "$stock" "$@"; }
git_patched() { git -C "$patched" "$@"; }

# The patch files named by patches/series, in order (comments and blanks skipped).
series_files() {
    [ -f "$patches/series" ] || return 0
    sed -e 's/#.*//' -e 's/[[:space:]]*$//' "$patches/series" | awk 'NF' |
        while read -r name; do
            [ -f "$patches/$name" ] || die "patches/series names $name, which does not exist."
            printf '%s\n' "$patches/$name"
        done
}

# A digest of the series and its patches: the worktree is rebuilt when it changes.
series_digest() {
    { cat "$patches/series" 2>/dev/null || true; series_files | xargs -r cat; } |
        sha256sum | cut -d' ' -f1
}

# Unpack the source tarball inside DEB into a new git repository at $stock.
unpack_stock() {
    local deb=$1 debver tmp
    debver=$(dpkg-deb -f "$deb" Version)
    tmp=$out/stock/linux.tmp
    rm -rf "$tmp" "$stock" "$out/patched/linux"
    mkdir -p "$tmp"
    say "unpacking $(basename "$deb") (1.6 GB of source, about a minute)"
    dpkg-deb --fsys-tarfile "$deb" |
        tar -xO ./usr/src/linux-source-6.12.tar.xz |
        xz -d | tar -x -C "$tmp" --strip-components=1
    [ -f "$tmp/Makefile" ] && [ -d "$tmp/mm" ] ||
        die "$deb did not unpack to a kernel tree."
    say "recording the pristine tree in git (tag stock)"
    git -C "$tmp" init -q -b linux
    git -C "$tmp" config core.looseCompression 1
    git -C "$tmp" config gc.auto 0
    git -C "$tmp" add -A -f .
    git -C "$tmp" commit -q -m "Linux $(make_version "$tmp") from Debian linux-source-6.12 $debver"
    git -C "$tmp" tag stock
    printf '%s\n' "$debver" >"$tmp/.git/afork-debian-version"
    sha256sum "$deb" | cut -d' ' -f1 >"$tmp/.git/afork-debian-sha256"
    mv "$tmp" "$stock"
}

# Print the kernel version (VERSION.PATCHLEVEL.SUBLEVEL) of tree $1.
make_version() {
    awk -F' *= *' '$1=="VERSION"{v=$2} $1=="PATCHLEVEL"{p=$2} $1=="SUBLEVEL"{s=$2}
                   END{print v "." p "." s}' "$1/Makefile"
}

# Create the patched worktree, or re-apply the series after it changed.
sync_patched() {
    local digest stamp=$stock/.git/afork-series-applied
    digest=$(series_digest)
    if [ ! -d "$patched" ]; then
        say "creating the patched worktree"
        git_stock worktree prune
        git_stock worktree add -q -B patched "$patched" stock
    elif [ -f "$stamp" ] && [ "$(head -n 1 "$stamp")" = "$digest" ]; then
        return 0
    else
        refuse_unexported_work "$stamp"
        say "patches/ changed: resetting the patched worktree to stock"
        git_patched am --abort >/dev/null 2>&1 || true
        git_patched reset -q --hard stock
    fi
    apply_series
    printf '%s\n%s\n' "$digest" "$(git_patched rev-parse HEAD)" >"$stamp"
}

# Stop rather than drop edits or commits made in the worktree itself.
refuse_unexported_work() {
    local stamp=$1
    [ -z "$(git_patched status --porcelain --untracked-files=no)" ] ||
        die "$patched has uncommitted changes and patches/ changed." \
            "Commit them there and run: make kernel-patches (or discard them)."
    if [ -f "$stamp" ] &&
        [ "$(sed -n 2p "$stamp")" != "$(git_patched rev-parse HEAD)" ]; then
        die "$patched holds commits that patches/ does not carry, and patches/ changed." \
            "Export them first (make kernel-patches) or reset the worktree:" \
            "git -C $patched reset --hard stock"
    fi
}

# "# KEY: value" from the series header.
series_header() {
    sed -n "s/^# *$1: *//p" "$patches/series" 2>/dev/null | head -n 1
}

stock_debver() { cat "$stock/.git/afork-debian-version"; }

# Apply the series; strictly when the source is the series' base.
apply_series() {
    local base strict=0 rel
    base=$(series_header base-version)
    mkdir -p "$(dirname "$drift")"
    : >"$drift"
    if [ -z "$(series_files)" ]; then
        say "patches/series is empty: the patched kernel is the stock source"
        return 0
    fi
    if [ "$base" = "$(stock_debver)" ]; then
        strict=1
    else
        rel=newer
        dpkg --compare-versions "$(stock_debver)" lt "${base:-0}" && rel=older
        say "source $(stock_debver) is $rel than the series' base ${base:-(none recorded)}:" \
            "applying with bounded fuzz if git am fails"
    fi
    "$here/apply-series.sh" $([ "$strict" = 1 ] && echo --strict) "$patched" "$patches/series" "$drift" ||
        die "the series does not apply to Linux $(make_version "$stock") (Debian $(stock_debver))," \
            "series base ${base:-(none recorded)}: see the patch, files and hunks above."
}

# "series base X, source Y", and the drift if the series needed fuzz.
print_base() {
    [ -f "$stock/.git/afork-debian-version" ] || die "no kernel tree yet; run make kernel-src."
    printf 'series base %s, source %s\n' "$(series_header base-version)" "$(stock_debver)"
    if [ -s "$drift" ]; then
        printf 'DRIFT: the series needed fuzz on this source (refresh with make kernel-patches):\n'
        sed 's/^/  /' "$drift"
    fi
}

prepare() {
    local deb=$1 debver
    [ -f "$deb" ] || die "no such package file: $deb"
    debver=$(dpkg-deb -f "$deb" Version)
    if [ ! -f "$stock/.git/afork-debian-version" ] ||
        [ "$(cat "$stock/.git/afork-debian-version")" != "$debver" ]; then
        unpack_stock "$deb"
    fi
    sync_patched
    say "Linux $(make_version "$stock") (Debian linux-source-6.12 $debver): $stock, $patched"
}

print_version() {
    [ -f "$stock/.git/afork-debian-version" ] || die "no kernel tree yet; run make kernel-src."
    printf '%s (Debian linux-source-6.12 %s)\n' "$(make_version "$stock")" \
        "$(cat "$stock/.git/afork-debian-version")"
}

# The version of the posting the series would be: raised when a reviewed
# series changes.
series_version=4

export_series() {
    [ -d "$patched" ] || die "no patched worktree yet; run make kernel-src."
    [ -z "$(git_patched status --porcelain --untracked-files=no)" ] ||
        die "$patched has uncommitted changes; commit them first."
    rm -f "$patches"/*.patch
    # 0000-cover-letter.patch: subject and text from cover-letter.txt (its
    # first line and the rest), then git's shortlog and diffstat. Numbered
    # as the posting would be: [RFC PATCH vN i/n], N the version below.
    git_patched -c branch.patched.description="$(cat "$contrib/cover-letter.txt")" \
        format-patch -q --no-signature --zero-commit --numbered \
        --subject-prefix="RFC PATCH v$series_version" \
        --cover-letter --cover-from-description=subject -o "$patches" stock..HEAD
    {
        echo "# Applied in order by scripts/apply-series.sh (git am) on top of tag stock."
        echo "# The Debian linux-source-6.12 the series was made and tested on, and its"
        echo "# .deb's sha256 (scripts/fetch-kernel.sh prefers it; another source gets"
        echo "# the drift path). Written by make kernel-patches."
        echo "# base-version: $(stock_debver)"
        echo "# base-sha256: $(cat "$stock/.git/afork-debian-sha256" 2>/dev/null || echo unknown)"
        (cd "$patches" && ls -1 -- *.patch 2>/dev/null | grep -v '^0000-cover-letter' || true)
    } >"$patches/series"
    : >"$drift"
    say "exported $(grep -vc '^#' "$patches/series" || true) patch(es) to $patches"
    local stamp=$stock/.git/afork-series-applied
    printf '%s\n%s\n' "$(series_digest)" "$(git_patched rev-parse HEAD)" >"$stamp"
}

case ${1:-} in
prepare) [ $# -eq 2 ] || die "usage: kernel-tree.sh prepare DEB"; prepare "$2" ;;
version) print_version ;;
base) print_base ;;
export) export_series ;;
*) die "usage: kernel-tree.sh prepare DEB | version | base | export" ;;
esac
