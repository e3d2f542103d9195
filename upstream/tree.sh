#!/usr/bin/env bash
# The upstream build trees and the patch workflow.
#
# A build tree is a git repository made from the pinned upstream tarball:
#   commit "upstream"        the tarball as released       (tag: upstream)
#   one commit per fix       Debian's debian/patches/*CVE*  (tag: debian-fixes)
#   one commit per patch     patches/security/series: what Debian's fixes
#                            need on this release (their tests)
#                                                           (tag: security-fixes)
#   one commit per patch     patches/series, ours
# Upstream and the two security steps make the "security layer", which the
# stock tree stops at. Our own source files (src/*) and Tcl tests
# (tests/afork) are symlinked into the patched tree, so editing them there
# edits this repository.
#
# Usage: upstream/tree.sh COMMAND [TREE]
#   patched TREE   create TREE, or re-apply patches/ (and patches/security/)
#                  when they changed and the tree holds no work of its own;
#                  refresh our symlinks
#   stock TREE     create TREE with the security layer only (re-applying
#                  patches/security/ when it changed)
#   export TREE    write the tree's commits after security-fixes to patches/
#                  (patches/security/ is an input, edited as files); fail
#                  afterwards when a patch lacks its DEP-3 fields
#   check TREE     fail, saying what to do, if patches/ and TREE disagree
#                  or a patch (ours or the layer's) lacks its DEP-3 fields
# PATCHES_DIR overrides patches/ (used by the workflow's own tests).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/.." && pwd)
. "$here/pin"
patches=${PATCHES_DIR:-$top/patches}
layer=$patches/security
cache=${AFORK_CACHE:-$here/cache}

# Fixed identity and dates for the commits this script makes, so the same
# inputs always give the same commit ids (and the same redis_git_sha1).
export GIT_COMMITTER_NAME="redis-afork build" GIT_COMMITTER_EMAIL="build@redis-afork.invalid"
export GIT_COMMITTER_DATE="2026-01-01T00:00:00Z"

die() {
    printf 'upstream/tree: %s\n' "$1" >&2
    shift
    for line in "$@"; do printf '  %s\n' "$line" >&2; done
    exit 1
}

# Like die, but returns 1: for verdicts the caller may only want to print.
complain() {
    printf 'upstream/tree: %s\n' "$1" >&2
    shift
    for line in "$@"; do printf '  %s\n' "$line" >&2; done
    return 1
}

g() { git -C "$tree" "$@"; }

# Names listed in a series file, in order (comments and blanks skipped).
series_names() {
    [ -f "$1/series" ] || return 0
    sed -e 's/#.*//' -e 's/[[:space:]]*$//' "$1/series" | grep -v '^$' || true
}

apply_series() {
    local dir=$1 name
    for name in $(series_names "$dir"); do
        [ -f "$dir/$name" ] || die "$dir/series names $name, which does not exist."
        if ! g am --quiet --whitespace=nowarn "$dir/$name" >/dev/null 2>"$tree.am.log"; then
            cat "$tree.am.log" >&2
            g am --abort >/dev/null 2>&1 || true
            die "$name does not apply to $tree." \
                "Fix the patch (or rebase it: see docs/contributing.md, 'The patch workflow')."
        fi
    done
    rm -f "$tree.am.log"
}

# The tree's copy of the patches/security/ it was made with.
layer_applied() { echo "$tree/.git/afork-security-applied"; }

record_layer() {
    local applied
    applied=$(layer_applied)
    rm -rf "$applied" && mkdir -p "$applied"
    if [ -d "$layer" ]; then cp -rp "$layer"/. "$applied"/; fi
    return 0
}

layer_changed() { ! same_series "$layer" "$(layer_applied)"; }

# Our fixes for Debian's CVE tests, on top of debian-fixes; moves the
# security-fixes tag to the result.
apply_layer() {
    apply_series "$layer"
    g tag -f security-fixes >/dev/null
    record_layer
}

# Back to debian-fixes and the current patches/security/. Trees made before
# the layer existed have no debian-fixes tag: their security-fixes is it.
reapply_layer() {
    g rev-parse -q --verify debian-fixes >/dev/null || g tag debian-fixes security-fixes
    g reset -q --hard debian-fixes
    apply_layer
}

# Unpack the tarball and commit it, then the security layer.
make_base() {
    "$here/fetch.sh"
    local tmp=$tree.tmp deb
    rm -rf "$tmp" && mkdir -p "$tmp"
    tar -xzf "$cache/$ORIG_TARBALL" -C "$tmp" --strip-components=1
    tree=$tmp
    g init -q -b main
    g add -A
    GIT_AUTHOR_NAME="Redis upstream" GIT_AUTHOR_EMAIL="upstream@redis-afork.invalid" \
        GIT_AUTHOR_DATE="$GIT_COMMITTER_DATE" \
        g commit -q -m "Redis $REDIS_VERSION, upstream" \
            -m "Unpacked from $ORIG_TARBALL (sha256 $ORIG_SHA256), Debian source package $DEB_PACKAGE $DEB_VERSION."
    g tag upstream
    deb=$(mktemp -d "${TMPDIR:-/tmp}/afork-deb.XXXXXX")
    tar -xJf "$cache/$DEBIAN_TARBALL" -C "$deb"
    # Only the CVE fixes: Debian's packaging defaults are not ours to take.
    series_names "$deb/debian/patches" | grep -i 'cve' >"$deb/cve-series" || true
    # A new upstream release may carry all its fixes itself.
    [ -s "$deb/cve-series" ] ||
        echo "upstream/tree: no *CVE* entries in Debian's patch series of $DEB_VERSION" >&2
    cp "$deb/cve-series" "$deb/debian/patches/series"
    apply_series "$deb/debian/patches"
    rm -rf "$deb"
    g tag debian-fixes
    apply_layer
}

# Export the tree's own commits as a patch series into $1.
export_to() {
    local out=$1 f
    mkdir -p "$out"
    rm -f "$out"/*.patch "$out/series"
    g format-patch -q --zero-commit --no-signature -N -o "$out" security-fixes..HEAD
    : >"$out/series"
    for f in "$out"/*.patch; do
        [ -e "$f" ] && basename "$f" >>"$out/series"
    done
    return 0
}

# Do two series directories hold the same patches?
same_series() {
    local a=$1 b=$2 name
    cmp -s <(series_names "$a") <(series_names "$b") || return 1
    for name in $(series_names "$a"); do
        cmp -s "$a/$name" "$b/$name" || return 1
    done
}

record_applied() {
    local applied=$tree/.git/afork-applied
    rm -rf "$applied" && mkdir -p "$applied"
    export_to "$applied"
}

# Symlink our source files and tests into the tree; keep git blind to them.
link_ours() {
    local f exclude=$tree/.git/info/exclude
    mkdir -p "$(dirname "$exclude")"
    echo "# Written by upstream/tree.sh: our files, symlinked from $top" >"$exclude"
    for f in "$tree"/src/*; do   # drop links to files we no longer have
        [ -L "$f" ] && [ ! -e "$f" ] && rm -f "$f"
    done
    for f in "$top"/src/*; do
        [ -e "$f" ] || continue
        ln -sfn "$f" "$tree/src/$(basename "$f")"
        echo "/src/$(basename "$f")" >>"$exclude"
    done
    ln -sfn "$top/tests/afork" "$tree/tests/unit/afork"
    echo "/tests/unit/afork" >>"$exclude"
}

dirty_files() { g status --porcelain | head -n 10; }

# The patches of series directory $1 whose message lacks a DEP-3 field, one
# line each: "NAME: no FIELD...". From (the author) and Subject (the
# description, with the message body) are git's own; Forwarded (no,
# not-needed, or where it was sent) and Last-Update (YYYY-MM-DD) are the
# last lines of the commit message (docs/contributing.md).
missing_dep3() {
    local dir=$1 name msg want
    for name in $(series_names "$dir"); do
        [ -f "$dir/$name" ] || continue
        msg=$(sed '/^---$/q' "$dir/$name")
        want=()
        grep -q '^From: ' <<<"$msg" || want+=(From)
        grep -q '^Subject: ' <<<"$msg" || want+=(Subject)
        grep -qE '^Forwarded: [^[:space:]]' <<<"$msg" || want+=(Forwarded)
        grep -qE '^Last-Update: [0-9]{4}-[0-9]{2}-[0-9]{2}$' <<<"$msg" || want+=(Last-Update)
        [ ${#want[@]} -eq 0 ] || echo "$name: no ${want[*]}"
    done
}

# Complain about patches without their DEP-3 fields; 1 when there are some.
check_dep3() {
    local bad verdict=0
    bad=$(missing_dep3 "$patches")
    if [ -n "$bad" ]; then
        mapfile -t bad <<<"$bad"
        complain "patches/ has patches without their DEP-3 fields:" "${bad[@]}" \
            "End each commit message in $tree with lines such as" \
            "'Forwarded: not-needed' and 'Last-Update: $(date -u +%F)' (git rebase -i" \
            "security-fixes, reword), then run 'make patches'." || verdict=1
    fi
    bad=$(missing_dep3 "$layer")
    if [ -n "$bad" ]; then
        mapfile -t bad <<<"$bad"
        complain "patches/security has patches without their DEP-3 fields:" "${bad[@]}" \
            "Add the lines before each file's '---' line." || verdict=1
    fi
    return $verdict
}

cmd_stock() {
    if [ -d "$tree/.git" ] && [ "$(g rev-parse HEAD)" = "$(g rev-parse security-fixes)" ] &&
        [ -z "$(dirty_files)" ]; then
        if layer_changed; then
            echo "upstream/tree: patches/security changed; re-applying it to $tree"
            reapply_layer
        fi
        return 0
    fi
    local final=$tree
    rm -rf "$final"
    make_base
    mv "$tree" "$final"
    echo "upstream/tree: $final = Redis $REDIS_VERSION + security fixes (stock)"
}

cmd_patched() {
    if [ ! -d "$tree/.git" ]; then
        local final=$tree
        rm -rf "$final"
        make_base
        apply_series "$patches"
        record_applied
        mv "$tree" "$final"
        tree=$final
        link_ours
        echo "upstream/tree: $tree = Redis $REDIS_VERSION + security fixes + $(series_names "$patches" | wc -l) patches"
        return 0
    fi
    local now
    now=$(mktemp -d "${TMPDIR:-/tmp}/afork-now.XXXXXX")
    export_to "$now"
    if { ! same_series "$now" "$patches" || layer_changed; } &&
        same_series "$now" "$tree/.git/afork-applied" && [ -z "$(dirty_files)" ]; then
        # patches/ or patches/security/ moved on (a pull, a checkout) and the
        # tree has no work of its own: re-apply. Build outputs are untracked
        # and survive; only the files the patches touch rebuild.
        if layer_changed; then
            echo "upstream/tree: patches/security changed; re-applying the security layer and patches/ to $tree"
            reapply_layer
        else
            echo "upstream/tree: patches/ changed; re-applying them to $tree"
            g reset -q --hard security-fixes
        fi
        apply_series "$patches"
        record_applied
    fi
    rm -rf "$now"
    link_ours
    cmd_check || true
}

cmd_export() {
    [ -d "$tree/.git" ] || die "$tree does not exist; run make first."
    local d
    d=$(dirty_files)
    [ -z "$d" ] || die "$tree has uncommitted changes; commit them there first:" "$d"
    export_to "$patches"
    record_applied
    echo "upstream/tree: patches/ now holds $(series_names "$patches" | wc -l) patches from $tree"
    check_dep3 || exit 1
}

cmd_check() {
    [ -d "$tree/.git" ] || die "$tree does not exist; run make first."
    local d now verdict=0
    d=$(dirty_files)
    if [ -n "$d" ]; then
        complain "$tree has uncommitted changes that no patch carries:" "$d" \
            "Commit them in $tree (git -C $tree commit -a), then run 'make patches'" \
            "to export them into patches/; or discard them (git -C $tree checkout -- .)."
        return 1
    fi
    now=$(mktemp -d "${TMPDIR:-/tmp}/afork-now.XXXXXX")
    export_to "$now"
    if same_series "$now" "$patches"; then
        verdict=0
    elif same_series "$now" "$tree/.git/afork-applied"; then
        verdict=1
    elif same_series "$patches" "$tree/.git/afork-applied"; then
        verdict=2
    else
        verdict=3
    fi
    rm -rf "$now"
    if [ "$verdict" = 0 ] && layer_changed; then
        complain "patches/security changed since $tree was made (a pull or checkout?)." \
            "Run 'make' to re-apply the security layer and patches/; the tree holds no work of its own."
        return 1
    fi
    case $verdict in
    0) check_dep3 ;;
    1) complain "patches/ changed since $tree was made (a pull or checkout?)." \
           "Run 'make' to re-apply them; the tree holds no work of its own." ;;
    2) complain "$tree has commits that patches/ does not carry." \
           "Run 'make patches' to export them, then commit patches/ here." ;;
    *) complain "both patches/ and the commits in $tree changed since the tree was made." \
           "Keep one side: 'make patches' (the tree wins) or 'make distclean && make'" \
           "(patches/ wins; the tree's commits are lost unless you save them first)." ;;
    esac
}

cmd=${1:-}
# Absolute: git -C "$tree" would take relative paths from inside the tree.
tree=$(realpath -m "${2:-$top/build/redis-$REDIS_VERSION}")
case $cmd in
patched | stock | export | check) "cmd_$cmd" ;;
*) die "usage: upstream/tree.sh patched|stock|export|check [TREE]" ;;
esac
