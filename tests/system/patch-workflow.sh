#!/usr/bin/env bash
# patch-workflow.sh -- the build tree / patches/ workflow loses no edit.
# Works on a throw-away tree and a copy of patches/, never on build/.
. "$(dirname "$0")/lib.sh"

ts=$top/upstream/tree.sh
# The test's own commits need an identity; a fresh machine has none.
export GIT_AUTHOR_NAME=t GIT_AUTHOR_EMAIL=t@localhost GIT_COMMITTER_NAME=t GIT_COMMITTER_EMAIL=t@localhost
export PATCHES_DIR=$work/patches
cp -r "$top/patches" "$PATCHES_DIR"
cd "$work"
t=redis   # relative, as the Makefile passes it
expect_ok "a fresh tree is made from pin + security fixes + patches/" "$ts" patched "$t"
n=$(grep -vc '^#' "$PATCHES_DIR/series")
nl=$(grep -vc '^#' "$PATCHES_DIR/security/series")
cves=$(git -C "$t" log --oneline upstream..debian-fixes | wc -l)
layer=$(git -C "$t" log --oneline debian-fixes..security-fixes | wc -l)
ours=$(git -C "$t" log --oneline security-fixes..HEAD | wc -l)
# As many Debian fix commits as the pinned packaging lists *CVE* patches
# (none when the release carries its fixes itself).
want_cves=$(tar -xJOf "${AFORK_CACHE:-$top/upstream/cache}/$DEBIAN_TARBALL" debian/patches/series |
    sed -e 's/#.*//' | grep -ci 'cve')
if [ "$cves" -eq "$want_cves" ] && [ "$layer" -eq "$nl" ] && [ "$ours" -eq "$n" ]; then
    ok "tree holds $cves Debian fix commits, $layer of patches/security and $ours patch commits"
else
    err "tree commits" "$cves Debian fixes ($want_cves listed), $layer layer ($nl listed), $ours patches (series has $n)"
fi
expect_ok "check passes on a fresh tree" "$ts" check "$t"

echo "/* afork workflow test */" >>"$t/src/server.c"
expect_fail "check fails on an uncommitted edit" "uncommitted changes" "$ts" check "$t"
expect_fail "export refuses an uncommitted edit" "uncommitted changes" "$ts" export "$t"

git -C "$t" commit -qam "test: an edit made in the tree"
expect_fail "check fails on a commit not exported" "make patches" "$ts" check "$t"
expect_fail "export writes a commit without DEP-3 fields, then names what it lacks" \
    "test-an-edit-made-in-the-tree.patch: no Forwarded Last-Update" "$ts" export "$t"
expect_fail "check fails on a patch without DEP-3 fields" "test-an-edit-made-in-the-tree.patch: no Forwarded" \
    "$ts" check "$t"
git -C "$t" commit -q --amend -m "test: an edit made in the tree" -m "Forwarded: not-needed
Last-Update: 2026-01-01"
expect_ok "export writes the commit, DEP-3 fields and all, into patches/" "$ts" export "$t"
last=$(tail -n 1 "$PATCHES_DIR/series")
if [ "$(grep -vc '^#' "$PATCHES_DIR/series")" -eq $((n + 1)) ] &&
    grep -q '^+/\* afork workflow test \*/' "$PATCHES_DIR/$last" &&
    grep -qx 'Forwarded: not-needed' "$PATCHES_DIR/$last"; then
    ok "the new patch $last carries the edit"
else
    err "exported patch" "series: $(cat "$PATCHES_DIR/series")"
fi
expect_ok "check passes after export" "$ts" check "$t"

# Someone else's patches/ (a pull): drop the new patch again.
rm "$PATCHES_DIR/$last"
sed -i '$d' "$PATCHES_DIR/series"
expect_fail "check says patches/ changed since the tree was made" "re-apply" "$ts" check "$t"
expect_ok "patched re-applies the new patches/" "$ts" patched "$t"
if ! grep -q 'afork workflow test' "$t/src/server.c" &&
    [ "$(git -C "$t" log --oneline security-fixes..HEAD | wc -l)" -eq "$n" ]; then
    ok "the re-applied tree matches patches/"
else
    err "re-apply" "tree still has the dropped commit"
fi
expect_ok "check passes after re-apply" "$ts" check "$t"

# The security layer changes (a pull): re-applied under our patches.
first=$(head -n 1 "$PATCHES_DIR/security/series")
sed -i '0,/^---$/s//afork workflow test: layer changed\n---/' "$PATCHES_DIR/security/$first"
expect_fail "check says patches/security changed" "patches/security changed" "$ts" check "$t"
expect_ok "patched re-applies the security layer and patches/" "$ts" patched "$t"
if git -C "$t" log --format=%B debian-fixes..security-fixes | grep -q 'layer changed'; then
    if [ "$(git -C "$t" log --oneline security-fixes..HEAD | wc -l)" -eq "$n" ]; then
        ok "the changed layer patch is under security-fixes, our $n patches on top"
    else
        err "layer re-apply" "$(git -C "$t" log --oneline security-fixes..HEAD | wc -l) patches on top, expected $n"
    fi
else
    err "layer re-apply" "the changed layer patch is not in debian-fixes..security-fixes"
fi
expect_ok "check passes after the layer is re-applied" "$ts" check "$t"
expect_ok "a stock tree is made from pin + the security layer" "$ts" stock "$work/stock"
if [ "$(git -C "$work/stock" rev-parse HEAD)" = "$(git -C "$t" rev-parse security-fixes)" ]; then
    ok "the stock tree is the patched tree's security-fixes"
else
    err "stock tree" "HEAD $(git -C "$work/stock" log --oneline -1), patched tree's security-fixes $(git -C "$t" log --oneline -1 security-fixes)"
fi

echo "missing.patch" >>"$PATCHES_DIR/series"
expect_fail "a series naming a missing patch is an error" "missing.patch, which does not exist" \
    "$ts" patched "$work/redis2"
exit $status
