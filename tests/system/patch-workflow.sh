#!/usr/bin/env bash
# patch-workflow.sh -- the build tree / patches/ workflow loses no edit.
# Works on a throw-away tree and a copy of patches/, never on build/.
. "$(dirname "$0")/lib.sh"

ts=$top/upstream/tree.sh
export PATCHES_DIR=$work/patches
cp -r "$top/patches" "$PATCHES_DIR"
cd "$work"
t=redis   # relative, as the Makefile passes it
expect_ok "a fresh tree is made from pin + security fixes + patches/" "$ts" patched "$t"
n=$(grep -vc '^#' "$PATCHES_DIR/series")
cves=$(git -C "$t" log --oneline upstream..security-fixes | wc -l)
ours=$(git -C "$t" log --oneline security-fixes..HEAD | wc -l)
if [ "$cves" -ge 1 ] && [ "$ours" -eq "$n" ]; then
    ok "tree holds $cves security fix commits and $ours patch commits"
else
    err "tree commits" "$cves security fixes, $ours patches (series has $n)"
fi
expect_ok "check passes on a fresh tree" "$ts" check "$t"

echo "/* afork workflow test */" >>"$t/src/server.c"
expect_fail "check fails on an uncommitted edit" "uncommitted changes" "$ts" check "$t"
expect_fail "export refuses an uncommitted edit" "uncommitted changes" "$ts" export "$t"

git -C "$t" commit -qam "test: an edit made in the tree"
expect_fail "check fails on a commit not exported" "make patches" "$ts" check "$t"
expect_ok "export writes the commit into patches/" "$ts" export "$t"
last=$(tail -n 1 "$PATCHES_DIR/series")
if [ "$(grep -vc '^#' "$PATCHES_DIR/series")" -eq $((n + 1)) ] &&
    grep -q '^+/\* afork workflow test \*/' "$PATCHES_DIR/$last"; then
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

echo "missing.patch" >>"$PATCHES_DIR/series"
expect_fail "a series naming a missing patch is an error" "missing.patch, which does not exist" \
    "$ts" patched "$work/redis2"
exit $status
