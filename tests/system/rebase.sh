#!/usr/bin/env bash
# rebase.sh -- make rebase (upstream/rebase.sh) on a throw-away copy of the
# repository, offline: onto the pinned release it does nothing; onto a
# fabricated release (the pinned tarball with the line that the INFO server
# patch hooks into changed, and the series' last patch already in it) it
# stops at the INFO server patch naming src/server.c, leaving upstream/pin
# and patches/ alone; once the conflict is resolved and git am continued,
# a second run drops the last patch, applies the
# rest and writes upstream/pin and patches/ for the new release, every
# other patch carrying the same change.
. "$(dirname "$0")/lib.sh"

export GIT_AUTHOR_NAME=t GIT_AUTHOR_EMAIL=t@localhost GIT_COMMITTER_NAME=t GIT_COMMITTER_EMAIL=t@localhost
pinned_cache=${AFORK_CACHE:-$top/upstream/cache}
for f in "$ORIG_TARBALL" "$DEBIAN_TARBALL"; do
    if [ ! -f "$pinned_cache/$f" ]; then
        err "rebase test" "$pinned_cache/$f is missing (make fetch)"
        exit 1
    fi
done

# The copy: what rebase.sh reads and writes, and its own cache.
repo=$work/repo
mkdir -p "$repo/upstream" "$repo/tests" "$work/cache"
cp "$top"/upstream/*.sh "$top/upstream/pin" "$repo/upstream/"
cp -r "$top/utils" "$top/src" "$top/patches" "$repo/"
cp -r "$top/tests/afork" "$repo/tests/"
cp "$pinned_cache/$ORIG_TARBALL" "$pinned_cache/$DEBIAN_TARBALL" "$work/cache/"
export AFORK_CACHE=$work/cache
unset PATCHES_DIR REDIS_TARBALL REDIS_DEBIAN_TARBALL REDIS_DEBIAN_VERSION \
    REDIS_ORIG_SHA256 REDIS_DEBIAN_SHA256
rb=$repo/upstream/rebase.sh
sha256_of() { sha256sum "$1" | cut -d" " -f1; }
cp "$repo/upstream/pin" "$work/pin.before"
cp -r "$repo/patches" "$work/patches.before"

expect_fail "no version is a usage error" "usage: make rebase REDIS_VERSION=" "$rb" ""
expect_ok "onto the pinned release it does nothing" \
    env REDIS_DEBIAN_VERSION="$DEB_VERSION" "$rb" "$REDIS_VERSION"
if cmp -s "$work/pin.before" "$repo/upstream/pin" && [ ! -e "$repo/build" ]; then
    ok "onto the pinned release: upstream/pin unchanged, no tree made"
else
    err "no-op rebase" "pin changed or build/ made: $(ls "$repo/build" 2>&1)"
fi

# The fabricated release: the pinned one with 99 as its patch level, the
# pinned tarball with one line changed right where the INFO server patch
# ($p3) adds its hook and with the series' last patch ($p16) already made
# (upstream took it), and Debian's packaging as pinned. Both patches are
# found by what they do, not by number, so the series may be regrouped.
p3=$(cd "$repo/patches" && grep -l 'aforkInfoServer(info)' $(grep -v '^#' series) | head -n 1)
p16=$(grep -v '^#' "$repo/patches/series" | tail -n 1)
before_p3=$(( $(grep -v '^#' "$repo/patches/series" | grep -nx "$p3" | cut -d: -f1) - 1 ))
new=${REDIS_VERSION%.*}.99
mkdir "$work/fab"
tar -xzf "$work/cache/$ORIG_TARBALL" -C "$work/fab"
mv "$work/fab/redis-$REDIS_VERSION" "$work/fab/redis-$new"
sed -i "s/\"$REDIS_VERSION\"/\"$new\"/" "$work/fab/redis-$new/src/version.h"
sed -i 's|^\( *info = getListensInfoString(info);\)$|\1 /* rebase test */|' \
    "$work/fab/redis-$new/src/server.c"
if [ -z "$p3" ] || [ "$p3" = "$p16" ]; then
    err "fabricated release" "no patch of patches/series adds aforkInfoServer(info), or it is the last one"
    exit 1
fi
if ! grep -q 'rebase test' "$work/fab/redis-$new/src/server.c" ||
    ! patch -s -p1 -d "$work/fab/redis-$new" <"$repo/patches/$p16" >"$work/patch.log" 2>&1; then
    err "fabricated release" "server.c lost the line $p3 hooks into, or $p16 does not apply: $(cat "$work/patch.log")"
    exit 1
fi
tar -czf "$work/redis_$new.orig.tar.gz" -C "$work/fab" "redis-$new"
cp "$work/cache/$DEBIAN_TARBALL" "$work/redis_$new-1.debian.tar.xz"
fab=(env REDIS_TARBALL="$work/redis_$new.orig.tar.gz"
     REDIS_DEBIAN_TARBALL="$work/redis_$new-1.debian.tar.xz"
     REDIS_DEBIAN_VERSION="5:$new-1")

expect_fail "a file without the given checksum is refused" "does not have REDIS_ORIG_SHA256" \
    "${fab[@]}" REDIS_ORIG_SHA256=0000 "$rb" "$new"
if [ -z "$(ls "$work/cache" | grep -v "^$ORIG_TARBALL\$" | grep -v "^$DEBIAN_TARBALL\$" | grep -v "^redis_$new-1.debian.tar.xz\$")" ]; then
    ok "... and it is not left in the cache"
else
    err "refused file" "the cache holds: $(ls "$work/cache")"
fi
cp "$work/redis_$new.orig.tar.gz" "$work/redis-new.tar.gz"
expect_fail "files without Debian's names are refused" "must have Debian's names" \
    "${fab[@]}" REDIS_TARBALL="$work/redis-new.tar.gz" "$rb" "$new"

# The old tree (made by the run above) must hold no work of its own.
old=$repo/build/redis-$REDIS_VERSION
echo "/* rebase test: unexported */" >>"$old/src/server.c"
expect_fail "uncommitted work in the old tree stops the rebase" "must agree before a rebase" \
    "${fab[@]}" "$rb" "$new"
git -C "$old" checkout -q -- src/server.c
mkdir -p "$repo/build/redis-$new"
expect_fail "an existing build/redis-$new is not overwritten" "redis-$new exists already" \
    "${fab[@]}" "$rb" "$new"
rmdir "$repo/build/redis-$new"

t=$repo/build/rebase/redis-$new
if out=$("${fab[@]}" "$rb" "$new" 2>&1); then
    err "conflict" "the rebase did not stop"
elif grep -q "patches/$p3 conflicts on Redis $new:" <<<"$out" &&
    grep -qx '  src/server.c' <<<"$out" && grep -q 'am --continue' <<<"$out"; then
    ok "the conflict stops the rebase, naming patches/$p3, src/server.c and git am --continue"
else
    err "conflict message" "$out"
fi
out=$("${fab[@]}" "$rb" "$new" 2>&1 || true)
if grep -q 'still in progress' <<<"$out"; then
    ok "a second run while git am is stopped says so"
else
    err "run during git am" "$out"
fi
conflicted=$(git -C "$t" diff --name-only --diff-filter=U)
if [ "$conflicted" = src/server.c ]; then
    ok "the conflict is in src/server.c, as the message said"
else
    err "conflicted files" "'$conflicted'"
fi
if cmp -s "$work/pin.before" "$repo/upstream/pin" &&
    diff -r -q "$work/patches.before" "$repo/patches" >/dev/null; then
    ok "at the stop, upstream/pin and patches/ are untouched"
else
    err "stop" "upstream/pin or patches/ changed before the rebase finished"
fi
ours=$(git -C "$t" log --oneline security-fixes..HEAD | wc -l)
if [ "$ours" -eq "$before_p3" ] && [ "$(git -C "$t" rev-parse upstream^)" = "$(git -C "$t" rev-parse previous/upstream)" ]; then
    ok "Redis $new is committed on top of the old upstream, the $before_p3 patches before $p3 applied before the stop"
else
    err "tree at the stop" "$ours of our patches applied; upstream^ $(git -C "$t" log --oneline -1 upstream^)"
fi

# Resolve as a person would: the new upstream line, the hook after it.
# Keep our side of each conflict only: the patch's other hunks in the same
# file (it also hooks getVersion) stay applied.
awk '/^<<<<<<< /{c=1; next} c==1 && /^(\|\|\|\|\|\|\||=======)/{c=2; next}
     c==2 && /^>>>>>>> /{c=0; next} c!=2' "$t/src/server.c" >"$work/server.c" &&
    cp "$work/server.c" "$t/src/server.c"
sed -i 's|^\( *\)info = getListensInfoString(info); /\* rebase test \*/$|&\n\1info = aforkInfoServer(info);|' \
    "$t/src/server.c"
git -C "$t" add src/server.c
expect_ok "git am --continue after the fix" git -C "$t" am --continue
if out=$("${fab[@]}" "$rb" "$new" 2>&1); then
    ok "the second run applies the rest"
else
    err "second run" "$out"
fi
if grep -q "patches/$p16: already in Redis $new, dropped" <<<"$out"; then
    ok "$p16, which the new release already has, is dropped and said so"
else
    err "already applied patch" "$out"
fi

t=$repo/build/redis-$new
. "$repo/upstream/pin"
if [ "$REDIS_VERSION" = "$new" ] && [ "$DEB_VERSION" = "5:$new-1" ] &&
    [ "$ORIG_TARBALL" = "redis_$new.orig.tar.gz" ] &&
    [ "$ORIG_SHA256" = "$(sha256_of "$work/redis_$new.orig.tar.gz")" ] &&
    [ "$DEBIAN_SHA256" = "$(sha256_of "$work/redis_$new-1.debian.tar.xz")" ]; then
    ok "upstream/pin names Redis $new, its Debian version, files and checksums"
else
    err "new pin" "$(cat "$repo/upstream/pin")"
fi
n=$(grep -vc '^#' "$work/patches.before/series")
nl=$(grep -vc '^#' "$work/patches.before/security/series")
if [ "$(git -C "$t" log --oneline security-fixes..HEAD | wc -l)" -eq $((n - 1)) ] &&
    [ "$(git -C "$t" log --oneline debian-fixes..security-fixes | wc -l)" -eq "$nl" ] &&
    grep -q "\"$new\"" "$t/src/version.h" && [ ! -e "$repo/build/rebase/redis-$new" ]; then
    ok "build/redis-$new holds Redis $new, $nl security layer and $((n - 1)) patch commits"
else
    err "new tree" "$(git -C "$t" log --oneline upstream..HEAD | wc -l) commits above upstream"
fi
# Every patch but $p16 makes the same change as before, in the same order
# (only numbers, line numbers and blob ids may differ), $p3 with the new
# context line.
changes() { grep -E '^[-+]' "$1" | grep -vE '^(\+\+\+|---)( |$)'; }
same=yes
for dir in "" security/; do
    before=($(grep -v '^#' "$work/patches.before/${dir}series" | grep -vx "$p16"))
    after=($(grep -v '^#' "$repo/patches/${dir}series"))
    [ "${#before[@]}" -eq "${#after[@]}" ] || same="${dir}series has ${#after[@]} patches, not ${#before[@]}"
    for i in "${!before[@]}"; do
        cmp -s <(changes "$work/patches.before/$dir${before[i]}") \
            <(changes "$repo/patches/$dir${after[i]:-none}") || same="$dir${before[i]} changed"
    done
done
if [ "$same" = yes ] && grep -q 'rebase test' "$repo/patches/$p3"; then
    ok "patches/ and patches/security/ carry the same changes but $p16's, $p3 on the new context"
else
    err "exported patches" "$same"
fi
expect_ok "make check-patches agrees with the rebased tree" "$repo/upstream/tree.sh" check "$t"
if git -C "$t" log --oneline -1 previous/patched >/dev/null 2>&1 &&
    grep -q "^resolved ours $p3" "$t/.git/afork-rebase.log"; then
    ok "the old tree's history is kept (previous/*) and the log names the resolved patch"
else
    err "history" "no previous/patched tag or no 'resolved ours $p3' in the log"
fi
exit $status
