#!/usr/bin/env bash
# apply-series.sh -- apply a patch series to a git tree, tolerating the small
# drift of a newer (or older) source than the one the series was made on.
#
#   apply-series.sh [--strict] TREE SERIES [DRIFT_REPORT]
#
# TREE is a git work tree at the commit to patch; SERIES a file naming the
# patches in order (lines; "#" comments and its "# base-version:" header
# allowed), the patches beside it. Each patch goes in with `git am`. When the
# strict `git am` fails, the patch is applied with patch(1) and a bounded fuzz
# (2 context lines) and committed with its own
# message and author (`git am --continue`): the drift. Every hunk that needed
# fuzz or moved is written to DRIFT_REPORT ("patch: file: hunk ...") and to
# stderr, and the script says DRIFT at the end. A patch that does not apply
# even with fuzz stops the script with exit 1, naming the patch, the files
# and hunks that failed, and what to do. Exit 0: applied (with or without
# drift). --strict refuses any drift (the source is the base).
set -euo pipefail

strict=0
[ "${1:-}" != --strict ] || { strict=1; shift; }
tree=${1:?usage: apply-series.sh TREE SERIES [DRIFT_REPORT]}
series=${2:?usage: apply-series.sh TREE SERIES [DRIFT_REPORT]}
report=${3:-/dev/null}
fuzz=2
dir=$(cd "$(dirname "$series")" && pwd)

prog=apply-series
. "$(dirname "$0")/lib.sh"

[ -f "$series" ] || die "no series file $series."
mapfile -t patches < <(sed -e 's/#.*//' -e 's/[[:space:]]*$//' "$series" | awk 'NF')
for name in "${patches[@]}"; do
    [ -f "$dir/$name" ] || die "$series names $name, which does not exist."
done

# The "Hunk #N succeeded at L with fuzz F (offset O lines)." lines of
# patch(1)'s output, as "file: hunk N at L: fuzz F, offset O" lines.
drift_lines() {
    awk '/^(checking|patching) file / { file = $3 }
         /^Hunk #[0-9]+ succeeded/ {
             n = $2; sub("#", "", n); at = $5; fz = 0; off = 0
             if (match($0, /fuzz [0-9]+/)) fz = substr($0, RSTART + 5, RLENGTH - 5)
             if (match($0, /offset -?[0-9]+/)) off = substr($0, RSTART + 7, RLENGTH - 7)
             printf "%s: hunk %s at line %s: fuzz %s, offset %s\n", file, n, at, fz, off }'
}

# The files and hunks patch(1) could not apply, one line each.
failed_lines() {
    awk '/^(checking|patching) file / { file = $3 }
         /^Hunk #[0-9]+ FAILED/ { print file ": " $0 }
         /^can.t find file to patch/ { print "a file the patch names is missing: " $0 }
         /No file to patch/ { print $0 }' |
        sed -e 's/^/  /'
}

apply_with_fuzz() {
    local p=$1 name out files
    name=$(basename "$p")
    if ! out=$(cd "$tree" && patch -p1 -F"$fuzz" --dry-run -f <"$p" 2>&1); then
        git -C "$tree" am --abort >/dev/null 2>&1 || true
        printf '%s\n' "$out" | failed_lines >&2
        die "$name does not apply to $tree, even with fuzz $fuzz (files and hunks above)." \
            "The source moved too far from the series' base. Rebase the series by hand:" \
            "  cd $tree && git am $p" \
            "  (fix the rejected hunks, git add, git am --continue), then make kernel-patches." \
            "Or build the base source: KERNEL_DEB=/path/linux-source-6.12_BASE_all.deb."
    fi
    (cd "$tree" && patch -p1 -F"$fuzz" -f --no-backup-if-mismatch -s <"$p") >/dev/null ||
        die "$name: patch(1) failed after its dry run succeeded." "Tree: $tree"
    mapfile -t files < <(printf '%s\n' "$out" | sed -n 's/^checking file //p')
    git -C "$tree" add -A -f -- "${files[@]}"
    GIT_EDITOR=true git -C "$tree" am --continue >/dev/null ||
        die "$name: git am --continue failed after applying it with fuzz." "Tree: $tree"
    printf '%s\n' "$out" | drift_lines | sed "s|^|$name: |" |
        awk '{ print } END { if (NR == 0) print "'"$name"': applied by patch(1) with no moved hunk" }' |
        tee -a "$report" | sed 's/^/apply-series: drift: /' >&2
}

: >"$report"
count=0
for name in "${patches[@]}"; do
    p=$dir/$name
    count=$((count + 1))
    if git -C "$tree" am -q "$p" >/dev/null 2>&1; then
        echo "apply-series: $(basename "$p"): applied" >&2
        continue
    fi
    [ "$strict" != 1 ] || {
        git -C "$tree" am --abort >/dev/null 2>&1 || true
        die "$(basename "$p") does not apply strictly, and --strict" \
            "(the source is the series' base: the series itself is broken)." \
            "Fix it in $tree (git am $p), then make kernel-patches."
    }
    echo "apply-series: $(basename "$p"): strict git am failed; trying fuzz $fuzz" >&2
    apply_with_fuzz "$p"
done
if [ -s "$report" ]; then
    echo "apply-series: DRIFT: $count patch(es) applied, $(cut -d: -f1 "$report" | sort -u | wc -l) with fuzz; see $report" >&2
else
    echo "apply-series: $count patch(es) applied strictly" >&2
fi
