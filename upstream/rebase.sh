#!/usr/bin/env bash
# Move redis-afork to another upstream Redis release (make rebase).
#
#   upstream/rebase.sh VERSION
#
# 1. The build tree of the pinned release (build/redis-OLD) is made or
#    refreshed, and must agree with patches/ (upstream/tree.sh).
# 2. The Debian source package of VERSION is fetched into the download cache:
#    REDIS_DEBIAN_VERSION, or the newest version of VERSION any suite has.
# 3. A new tree, build/rebase/redis-VERSION, holds the old tree's history
#    (tags previous/upstream, previous/debian-fixes, previous/security-fixes,
#    previous/patched) and the new tarball committed on top of
#    previous/upstream (tag upstream).
# 4. On it, one by one with three-way merges (git am -3): Debian's *CVE*
#    fixes of the new package (tag debian-fixes), patches/security/ (tag
#    security-fixes), patches/. A patch whose change is already there is
#    dropped. At a conflict the script stops, naming the patch and the files
#    and saying what to do: fix them, git am --continue (or --skip), then run
#    it again with the same VERSION to apply the rest.
# 5. When all applied: the tree moves to build/redis-VERSION, upstream/pin
#    names the new release, patches/security/ and patches/ are exported from
#    the tree (what 'make patches' does). Nothing outside build/ changes
#    before that; rm -rf build/rebase/redis-VERSION gives up.
#
# Environment (make variables):
#   REDIS_DEBIAN_VERSION=5:X-N  the Debian source package version to use
#   REDIS_TARBALL=path, REDIS_DEBIAN_TARBALL=path
#                               the two files instead of apt (the Debian
#                               version is then REDIS_DEBIAN_VERSION, or read
#                               from the packaging's debian/changelog)
#   REDIS_ORIG_SHA256=, REDIS_DEBIAN_SHA256=
#                               the checksums the two files must have (apt
#                               already checks downloads against the archive's
#                               signed index)
#   AFORK_APT_URI, AFORK_APT_SUITES, AFORK_CACHE: as for upstream/fetch.sh
#   PATCHES_DIR: as for upstream/tree.sh
set -euo pipefail

new_version=${1:-}
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/.." && pwd)
pin=$here/pin
. "$pin"
patches=${PATCHES_DIR:-$top/patches}
cache=${AFORK_CACHE:-$here/cache}
old_tree=$top/build/redis-$REDIS_VERSION
tree=$top/build/rebase/redis-$new_version
state=$tree/.git/afork-rebase

. "$here/../utils/debian-archive.sh"
archive_tag=upstream/rebase
# The suites upstream/fetch.sh looks in.
archive_suites="experimental sid forky trixie-backports trixie trixie-updates trixie-proposed-updates trixie-security"
die() { archive_die "$@"; }
say() { printf 'upstream/rebase: %s\n' "$*"; }

# The same fixed identity and dates as upstream/tree.sh.
export GIT_COMMITTER_NAME="redis-afork build" GIT_COMMITTER_EMAIL="build@redis-afork.invalid"
export GIT_COMMITTER_DATE="2026-01-01T00:00:00Z"

g() { git -C "$tree" "$@"; }
rel() { realpath --relative-to="$top" "$1"; }

series_names() {
    [ -f "$1/series" ] || return 0
    sed -e 's/#.*//' -e 's/[[:space:]]*$//' "$1/series" | grep -v '^$' || true
}

# upstream_of 5:8.0.6-3 -> 8.0.6
upstream_of() {
    local v=${1#*:}
    echo "${v%-*}"
}

# Which Debian version of $new_version: given, or the newest in the archive.
resolve_debian_version() {
    if [ -n "${REDIS_DEBIAN_VERSION:-}" ]; then
        deb_version=$REDIS_DEBIAN_VERSION
    elif [ -n "${REDIS_DEBIAN_TARBALL:-}" ]; then
        deb_version=$(tar -xf "$REDIS_DEBIAN_TARBALL" -O debian/changelog |
            sed -n '1s/^[^ ]* (\([^)]*\)).*/\1/p')
        [ -n "$deb_version" ] ||
            die "no version in debian/changelog of $REDIS_DEBIAN_TARBALL; set REDIS_DEBIAN_VERSION."
    else
        archive_open deb-src ||
            die "the Debian archive could not be reached (tried: $archive_uris_used)." \
                "Set AFORK_APT_URI, or give the files: REDIS_TARBALL=... REDIS_DEBIAN_TARBALL=..."
        # The first (newest) whose upstream part, without epoch and Debian
        # revision, is the release asked for.
        deb_version=$(archive_versions "$DEB_PACKAGE" | awk -v want="$new_version" '{
            u = $1; sub(/^[0-9]+:/, "", u); sub(/-[^-]*$/, "", u)
            if (u == want && !found) { print $1; found = 1 } }')
        if [ -z "$deb_version" ]; then
            die "no suite carries a $DEB_PACKAGE source package of Redis $new_version." \
                "it has: $(archive_versions "$DEB_PACKAGE" | awk '{ printf "%s%s (%s)", s, $1, $2; s = ", " }')" \
                "Pick one of those, or give the files: REDIS_TARBALL=... REDIS_DEBIAN_TARBALL=..."
        fi
    fi
    [ "$(upstream_of "$deb_version")" = "$new_version" ] ||
        die "Debian version $deb_version is not Redis $new_version."
}

# check_sum FILE SHA256-OR-EMPTY VAR
check_sum() {
    [ -z "$2" ] || [ "$(sha256_of "$1")" = "$2" ] ||
        die "$(basename "$1") does not have $3." "expected: $2" "found:    $(sha256_of "$1")"
}

# take NAME SHA256-OR-EMPTY VAR: $cache/NAME.new becomes $cache/NAME when it
# has the checksum asked for; otherwise both new downloads are removed.
take() {
    local new=$cache/$1.new found
    if [ -n "$2" ] && [ "$(sha256_of "$new")" != "$2" ]; then
        found=$(sha256_of "$new")
        rm -f "$cache/$orig_tarball.new" "$cache/$debian_tarball.new"
        die "$1 does not have $3." "expected: $2" "found:    $found"
    fi
    mv "$new" "$cache/$1"
}

# The two files into the cache; sets orig_tarball, debian_tarball.
fetch_new() {
    local v=${deb_version#*:} f
    mkdir -p "$cache"
    if [ -n "${REDIS_TARBALL:-}" ] || [ -n "${REDIS_DEBIAN_TARBALL:-}" ]; then
        [ -f "${REDIS_TARBALL:-}" ] && [ -f "${REDIS_DEBIAN_TARBALL:-}" ] ||
            die "give both REDIS_TARBALL and REDIS_DEBIAN_TARBALL (existing files)."
        orig_tarball=$(basename "$REDIS_TARBALL")
        debian_tarball=$(basename "$REDIS_DEBIAN_TARBALL")
        # Debian's names, which upstream/fetch.sh asks apt for later.
        [[ $orig_tarball == "${DEB_PACKAGE}_$new_version".orig.tar.* ]] &&
            [[ $debian_tarball == "${DEB_PACKAGE}_$v".debian.tar.* ]] ||
            die "the files must have Debian's names for $DEB_PACKAGE $deb_version:" \
                "${DEB_PACKAGE}_$new_version.orig.tar.gz (or .xz) and ${DEB_PACKAGE}_$v.debian.tar.xz"
        cp "$REDIS_TARBALL" "$cache/$orig_tarball.new"
        cp "$REDIS_DEBIAN_TARBALL" "$cache/$debian_tarball.new"
    else
        [ -n "${archive_work:-}" ] || archive_open deb-src ||
            die "the Debian archive could not be reached (tried: $archive_uris_used)."
        say "fetching $DEB_PACKAGE $deb_version"
        archive_download "$DEB_PACKAGE" "$deb_version" ||
            die "apt-get source $DEB_PACKAGE=$deb_version failed (log above)."
        for f in "$archive_work"/dl/"${DEB_PACKAGE}_$new_version".orig.tar.*; do
            [ -f "$f" ] && orig_tarball=$(basename "$f")
        done
        for f in "$archive_work"/dl/"${DEB_PACKAGE}_$v".debian.tar.*; do
            [ -f "$f" ] && debian_tarball=$(basename "$f")
        done
        [ -n "${orig_tarball:-}" ] && [ -n "${debian_tarball:-}" ] ||
            die "apt-get source did not give an .orig and a .debian tarball: $(ls "$archive_work/dl")"
        mv "$archive_work/dl/$orig_tarball" "$cache/$orig_tarball.new"
        mv "$archive_work/dl/$debian_tarball" "$cache/$debian_tarball.new"
    fi
    take "$orig_tarball" "${REDIS_ORIG_SHA256:-}" REDIS_ORIG_SHA256
    take "$debian_tarball" "${REDIS_DEBIAN_SHA256:-}" REDIS_DEBIAN_SHA256
}

# The pin of the new release, in upstream/pin's layout.
write_new_pin() {
    sed -e "s|^REDIS_VERSION=.*|REDIS_VERSION=$new_version|" \
        -e "s|^DEB_VERSION=.*|DEB_VERSION=$deb_version|" \
        -e "s|^ORIG_TARBALL=.*|ORIG_TARBALL=$orig_tarball|" \
        -e "s|^ORIG_SHA256=.*|ORIG_SHA256=$(sha256_of "$cache/$orig_tarball")|" \
        -e "s|^DEBIAN_TARBALL=.*|DEBIAN_TARBALL=$debian_tarball|" \
        -e "s|^DEBIAN_SHA256=.*|DEBIAN_SHA256=$(sha256_of "$cache/$debian_tarball")|" \
        "$pin" >"$1"
}

# A new repository with the old tree's history and the new tarball on top of
# its upstream commit; the list of patches to apply in $state/todo.
start() {
    local final=$top/build/redis-$new_version
    [ ! -e "$final" ] || [ "$final" = "$old_tree" ] ||
        die "$(rel "$final") exists already; remove it (or move it away) first."
    # REDIS_TARBALL and REDIS_DEBIAN_TARBALL name the new release's files.
    env -u REDIS_TARBALL -u REDIS_DEBIAN_TARBALL "$here/tree.sh" patched "$old_tree" >/dev/null
    "$here/tree.sh" check "$old_tree" ||
        die "$(rel "$old_tree") and patches/ must agree before a rebase (see above)."
    fetch_new
    rm -rf "$tree" && mkdir -p "$tree"
    g init -q -b main
    g fetch -q --no-tags "$old_tree" '+refs/tags/*:refs/tags/previous/*' '+HEAD:refs/tags/previous/patched'
    mkdir -p "$state/debian" "$state/patches"
    write_new_pin "$state/pin"
    tar -xf "$cache/$orig_tarball" -C "$tree" --strip-components=1
    g update-ref refs/heads/main previous/upstream
    g add -A
    GIT_AUTHOR_NAME="Redis upstream" GIT_AUTHOR_EMAIL="upstream@redis-afork.invalid" \
        GIT_AUTHOR_DATE="$GIT_COMMITTER_DATE" \
        g commit -q -m "Redis $new_version, upstream" \
            -m "Unpacked from $orig_tarball (sha256 $(sha256_of "$cache/$orig_tarball")), Debian source package $DEB_PACKAGE $deb_version." \
            -m "Imported on top of Redis $REDIS_VERSION by upstream/rebase.sh."
    g tag upstream

    tar -xf "$cache/$debian_tarball" -C "$state/debian" debian/patches
    cp -r "$patches"/. "$state/patches/"
    local name
    {
        for name in $(series_names "$state/debian/debian/patches" | grep -i cve); do
            echo "debian $name"
        done
        echo "tag debian-fixes"
        for name in $(series_names "$state/patches/security"); do
            echo "security $name"
        done
        echo "tag security-fixes"
        for name in $(series_names "$state/patches"); do
            echo "ours $name"
        done
    } >"$state/todo.new"
    mv "$state/todo.new" "$state/todo"
    : >"$state/log"
    say "$(rel "$tree"): Redis $new_version ($DEB_PACKAGE $deb_version) on top of Redis $REDIS_VERSION;" \
        "$(grep -c '^debian ' "$state/todo" || true) Debian fixes," \
        "$(grep -c '^security ' "$state/todo" || true) security layer and" \
        "$(grep -c '^ours ' "$state/todo" || true) patches to apply"
}

patch_file() {
    case $1 in
    debian) echo "$state/debian/debian/patches/$2" ;;
    security) echo "$state/patches/security/$2" ;;
    ours) echo "$state/patches/$2" ;;
    esac
}

# Where a patch comes from, for messages.
patch_label() {
    case $1 in
    debian) echo "Debian's $2" ;;
    security) echo "patches/security/$2" ;;
    ours) echo "patches/$2" ;;
    esac
}

# Stop at a patch that did not apply, saying what to do.
stop_at() {
    local kind=$1 name=$2 files=$3 how=$4 t
    t=$(rel "$tree")
    {
        echo "upstream/rebase: $(patch_label "$kind" "$name") $how on Redis $new_version:"
        printf '  %s\n' $files
        echo "What to do next, in $t:"
        if [ "$how" = conflicts ]; then
            echo "  1. resolve the conflicts (git -C $t diff), then git -C $t add the files;"
        else
            echo "  1. apply it by hand: git -C $t am --show-current-patch=diff | git -C $t apply --reject"
            echo "     then fix the .rej hunks and git -C $t add the files;"
        fi
        echo "  2. git -C $t am --continue   (or am --skip to drop the patch);"
        echo "  3. make rebase REDIS_VERSION=$new_version   again: it applies the rest, then"
        echo "     writes upstream/pin, patches/security/ and patches/ (as make patches does)."
        echo "To give up: rm -rf $t (nothing outside build/ has changed)."
    } >&2
    exit 1
}

# Apply the next entries of $state/todo.
apply_todo() {
    local kind name file out files head
    while read -r kind name <"$state/todo" && [ -n "$kind" ]; do
        sed -i 1d "$state/todo"
        if [ "$kind" = tag ]; then
            g tag -f "$name" >/dev/null
            continue
        fi
        file=$(patch_file "$kind" "$name")
        head=$(g rev-parse HEAD)
        echo "$kind $name $head" >"$state/current"
        if out=$(g am -3 --whitespace=nowarn "$file" 2>&1); then
            # The three-way merge gave the tree we had: git am made no
            # commit ("No changes -- Patch already applied.").
            if [ "$(g rev-parse HEAD)" = "$head" ]; then
                echo "dropped $kind $name (its change is already in Redis $new_version)" >>"$state/log"
                say "$(patch_label "$kind" "$name"): already in Redis $new_version, dropped"
            else
                echo "applied $kind $name" >>"$state/log"
            fi
        else
            files=$(g diff --name-only --diff-filter=U)
            if [ -n "$files" ]; then
                echo "conflict $kind $name: $(echo $files)" >>"$state/log"
                stop_at "$kind" "$name" "$files" conflicts
            fi
            printf '%s\n' "$out" | grep -vE '^(hint|Applying):' >&2 || true
            files=$(sed -n 's|^diff --git a/\([^ ]*\) .*|\1|p' "$file" | sort -u)
            echo "failed $kind $name: $(echo $files)" >>"$state/log"
            stop_at "$kind" "$name" "$files" "does not apply"
        fi
        rm -f "$state/current"
    done
}

# After a stop: the user finished git am (--continue or --skip).
resume() {
    [ ! -d "$tree/.git/rebase-apply" ] ||
        die "git am is still in progress in $(rel "$tree")." \
            "Finish it: git -C $(rel "$tree") am --continue (or --skip), then run make rebase again."
    . "$state/pin"
    [ "$REDIS_VERSION" = "$new_version" ] || die "$(rel "$tree") is a rebase onto $REDIS_VERSION, not $new_version."
    . "$pin"
    if [ -f "$state/current" ]; then
        local kind name head
        read -r kind name head <"$state/current"
        if [ "$(g rev-parse HEAD)" = "$head" ]; then
            echo "skipped $kind $name (git am --skip)" >>"$state/log"
        else
            echo "resolved $kind $name" >>"$state/log"
        fi
        rm -f "$state/current"
    fi
    say "continuing in $(rel "$tree")"
}

# All applied: the tree becomes the build tree, upstream/pin and patches/
# describe it.
finish() {
    local final=$top/build/redis-$new_version out=$patches/security f
    local aside=$top/build/rebase/redis-$REDIS_VERSION.previous
    if [ "$final" = "$old_tree" ] && [ -e "$final" ]; then
        # The same release, a new Debian revision: keep the old tree aside.
        rm -rf "$aside"
        mv "$final" "$aside"
        say "the old tree is now $(rel "$aside")"
    fi
    [ ! -e "$final" ] || die "$(rel "$final") exists; remove it (or move it away), then run make rebase again."
    cp "$state/pin" "$pin"
    mv "$tree" "$final"
    tree=$final
    state=$tree/.git/afork-rebase
    # patches/security/: the layer as it applied on the new release.
    mkdir -p "$out"
    rm -f "$out"/*.patch "$out/series"
    g format-patch -q --zero-commit --no-signature -N -o "$out" debian-fixes..security-fixes
    : >"$out/series"
    for f in "$out"/*.patch; do
        [ -e "$f" ] && basename "$f" >>"$out/series"
    done
    rm -rf "$tree/.git/afork-security-applied"
    cp -rp "$out" "$tree/.git/afork-security-applied"
    "$here/tree.sh" export "$tree"
    "$here/tree.sh" patched "$tree" >/dev/null
    mv "$state/log" "$tree/.git/afork-rebase.log"
    rm -rf "$state"
    . "$pin"
    local log=$tree/.git/afork-rebase.log t
    t=$(rel "$tree")
    say "done: $t is Redis $REDIS_VERSION ($DEB_PACKAGE $DEB_VERSION) with" \
        "$(grep -c '^applied debian ' "$log" || true) Debian fixes," \
        "$(grep -cE '^(applied|resolved) security ' "$log" || true) security layer and" \
        "$(grep -cE '^(applied|resolved) ours ' "$log" || true) of our patches"
    grep -E '^(resolved|dropped|skipped)' "$log" | sed 's/^/  /' || true
    echo "upstream/pin, patches/security/ and patches/ now describe it. Review the patches"
    echo "against the old ones, then build, test and commit upstream/pin and patches/:"
    echo "  git -C $t range-diff previous/security-fixes..previous/patched security-fixes..HEAD"
    echo "  make && make test"
}

[ -n "$new_version" ] || die "usage: make rebase REDIS_VERSION=X [REDIS_DEBIAN_VERSION=5:X-N]"
if [ -f "$state/todo" ]; then
    resume
else
    resolve_debian_version
    if [ "$deb_version" = "$DEB_VERSION" ]; then
        # Given files of the pinned version must be the pinned files.
        check_sum "${REDIS_TARBALL:-/dev/null}" "${REDIS_TARBALL:+$ORIG_SHA256}" "the pinned sha256"
        check_sum "${REDIS_DEBIAN_TARBALL:-/dev/null}" "${REDIS_DEBIAN_TARBALL:+$DEBIAN_SHA256}" "the pinned sha256"
        say "upstream/pin already is Redis $REDIS_VERSION ($DEB_PACKAGE $DEB_VERSION): nothing to rebase."
        exit 0
    fi
    start
fi
apply_todo
finish
