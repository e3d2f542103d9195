#!/usr/bin/env bash
# series-drift.sh -- the kernel harness's drift path (apply-series.sh) on a
# small throw-away git tree instead of the kernel: a series made on a "base"
# tree applies strictly to it; to a "newer" tree whose context lines moved it
# applies with fuzz and the drift is reported (patch, file, hunk); to a tree
# where a patched function was removed it fails naming the patch and the file;
# strict mode (the source is the base) refuses any drift.
. "$(dirname "$0")/lib.sh"

apply=$top/contrib/async-fork/scripts/apply-series.sh
export GIT_AUTHOR_NAME=t GIT_AUTHOR_EMAIL=t@localhost GIT_COMMITTER_NAME=t GIT_COMMITTER_EMAIL=t@localhost

# mm.c: three functions of ten lines each.
write_mm() {
    local f
    for f in alpha beta gamma; do
        printf 'int %s(int x)\n{\n' "$f"
        printf "\tint ${f}_%d = x + %d;\n" 1 1 2 2 3 3 4 4 5 5 6 6
        printf '\treturn x;\n}\n\n'
    done
}

# A git tree at $1 holding mm.c as write_mm makes it, then edited by $2 (sed).
make_tree() {
    mkdir -p "$1"
    git -C "$1" init -q -b main
    write_mm | sed -e "${2:-}" >"$1/mm.c"
    printf 'other\n' >"$1/other.c"
    git -C "$1" add -A && git -C "$1" commit -q -m "tree"
}

# The series: 0001 changes beta() and adds a file, 0002 changes other.c.
make_tree "$work/base"
git -C "$work/base" checkout -q -b series
sed -i '/^int beta/,/^}/ s/^\tint beta_4 = x + 4;$/\tint beta_4 = x + 40;\t\/* patched *\//' "$work/base/mm.c"
printf 'new file\n' >"$work/base/new.c"
git -C "$work/base" add -A && git -C "$work/base" commit -q -m "mm: patch beta"
printf 'other, patched\n' >>"$work/base/other.c"
git -C "$work/base" commit -q -am "other: patch"
mkdir -p "$work/series"
git -C "$work/base" format-patch -q -o "$work/series" main..series
{ echo "# base-version: 1.0-1"; (cd "$work/series" && ls -1 -- *.patch); } >"$work/series/series"
p1=$(cd "$work/series" && ls -1 -- 0001-*.patch)

# 1. The base itself: strict.
make_tree "$work/t-base"
if out=$("$apply" --strict "$work/t-base" "$work/series/series" "$work/d-base" 2>&1) &&
    [ ! -s "$work/d-base" ] && grep -q 'applied strictly' <<<"$out" &&
    [ "$(git -C "$work/t-base" log --format=%s -2 | paste -sd,)" = "other: patch,mm: patch beta" ]; then
    ok "drift: the series applies strictly to its base, one commit per patch"
else
    err "drift: strict apply to the base" "$out / report: $(cat "$work/d-base" 2>/dev/null)"
fi

# 2. Newer: 5 lines inserted at the top (offset) and the third context line
# above beta()'s change edited (fuzz 1).
make_tree "$work/t-new" '1i /* a\n * newer\n * source\n * header\n */
/^int beta/,/^}/ s/^\tint beta_1 = x + 1;$/\tint beta_1 = x + 1; \/* moved on *\//'
if out=$("$apply" "$work/t-new" "$work/series/series" "$work/d-new" 2>&1); then
    if grep -qE "^$p1: mm.c: hunk 1 at line [0-9]+: fuzz [12], offset 5$" "$work/d-new" &&
        grep -q 'DRIFT' <<<"$out" && grep -q 'patched' "$work/t-new/mm.c" &&
        grep -q 'moved on' "$work/t-new/mm.c" && [ -f "$work/t-new/new.c" ] &&
        [ "$(git -C "$work/t-new" log --format=%s -1 HEAD~1)" = "mm: patch beta" ] &&
        [ -z "$(git -C "$work/t-new" status --porcelain)" ]; then
        ok "drift: a newer tree takes the series with fuzz and the report names patch, file and hunk"
    else
        err "drift: newer tree" "applied, but the report or the tree is wrong: $(cat "$work/d-new") / $out"
    fi
else
    err "drift: newer tree" "did not apply: $out"
fi

# 3. The same newer tree in strict mode: refused, naming the patch.
make_tree "$work/t-strict" '/^int beta/,/^}/ s/^\tint beta_1 = x + 1;$/\tint beta_1 = x + 1; \/* moved on *\//'
expect_fail "drift: strict mode (source = base) refuses a series that needs fuzz" \
    "$p1 does not apply strictly" \
    "$apply" --strict "$work/t-strict" "$work/series/series" "$work/d-strict"

# 4. beta() removed: no fuzz can apply it; the patch and the file are named.
make_tree "$work/t-gone" '/^int beta/,/^}/d'
if out=$("$apply" "$work/t-gone" "$work/series/series" "$work/d-gone" 2>&1); then
    err "drift: a removed function" "the series applied: $out"
elif grep -q 'mm.c: Hunk #1 FAILED' <<<"$out" && grep -q "$p1 does not apply" <<<"$out" &&
    grep -q 'then make kernel-patches' <<<"$out"; then
    ok "drift: a removed function fails, naming the patch, the file and what to do"
else
    err "drift: a removed function" "failed without naming patch, file and remedy: $out"
fi
if [ "$(git -C "$work/t-gone" log --format=%s -1)" = tree ] &&
    [ -z "$(git -C "$work/t-gone" status --porcelain)" ] &&
    [ ! -d "$work/t-gone/.git/rebase-apply" ]; then
    ok "drift: a failed series leaves the tree clean, with no git am in progress"
else
    err "drift: failed series" "the tree was left changed: $(git -C "$work/t-gone" status --porcelain)"
fi

# 5. A series naming a missing patch.
cp -r "$work/series" "$work/series-missing" && echo 0009-nope.patch >>"$work/series-missing/series"
make_tree "$work/t-missing"
expect_fail "drift: a series naming a missing patch is refused before anything is applied" \
    "names 0009-nope.patch, which does not exist" \
    "$apply" "$work/t-missing" "$work/series-missing/series"
exit $status
