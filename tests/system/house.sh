#!/usr/bin/env bash
# house.sh -- the conventions of docs/contributing.md that a tool can check:
#  - every commit after $style_base (where the convention began to hold):
#    a subject `area: what it does` of at most 72 characters, the area the
#    part changed (never a step of work such as "review" or "results"), no
#    measured figure in the subject, and a body that says why;
#  - CHANGELOG.md's newest version is the one the server reports
#    (AFORK_VERSION in src/afork.h, redis_afork_version in INFO);
#  - results folders (bench/results, contrib/async-fork/results) hold only
#    what the docs cite: every folder's name is in a tracked .md file
#    outside them, and every folder a .md file names as a path exists.
#   tests/system/house.sh [BASE]    check the commits after BASE instead
. "$(dirname "$0")/lib.sh"

style_base=${1:-d118d92}
process_words='review|results?|investigations?|wip|fixup|misc|notes?|experiments?|tmp|update'
figure='[0-9]+(\.[0-9]+)? ?(ms|us|ns|s|%|x|[KMG]i?B)([^A-Za-z]|$)'

# check_subject SUBJECT: why SUBJECT breaks the convention, or nothing.
check_subject() {
    local s=$1 area
    [ "${#s}" -le 72 ] || { echo "longer than 72 characters"; return; }
    [[ $s =~ ^([a-z0-9_/.-]+(,\ ?[a-z0-9_/.-]+)*):\ [^\ ] ]] ||
        { echo "not 'area: what it does'"; return; }
    area=${BASH_REMATCH[1]}
    grep -qiwE "$process_words" <<<"${area//\// }" && { echo "area '$area' names a step of work"; return; }
    grep -qE "$figure" <<<"${s#*: }" && { echo "a figure in the subject"; return; }
}

# The checker itself, on subjects it must refuse and accept.
bad=0
for s in "results: steady 4 GB runs" "review fixes" "src/thp: cut the stall to 0.21x of stock's" \
    "bench: add the probe fix for the diskless sync ablation of the 26th of November 2026 runs"; do
    [ -n "$(check_subject "$s")" ] || { err "commit style checker" "accepted '$s'"; bad=1; }
done
for s in "patches: move to Redis 8.6.3 and regroup the series for review" "src/thp, docs: say why"; do
    [ -z "$(check_subject "$s")" ] || { err "commit style checker" "refused '$s': $(check_subject "$s")"; bad=1; }
done
[ "$bad" = 1 ] || ok "the commit style checker refuses process areas, long subjects and figures"

cd "$top" || exit 1
if ! git rev-parse --git-dir >/dev/null 2>&1; then
    echo "[skip]: commit style: not a git checkout"
elif ! git cat-file -e "$style_base^{commit}" 2>/dev/null; then
    echo "[skip]: commit style: $style_base is not in this clone's history (shallow?)"
else
    n=0 broken=()
    while IFS=$'\t' read -r h s; do
        n=$((n + 1))
        why=$(check_subject "$s")
        [ -n "$(git log -1 --format=%b "$h" | tr -d '[:space:]')" ] || why="${why:+$why; }no body"
        [ -z "$why" ] || broken+=("$h $s ($why)")
    done < <(git log --no-merges --format='%h%x09%s' "$style_base..HEAD")
    if [ ${#broken[@]} -eq 0 ]; then
        ok "commit style: the $n commits after $style_base have 'area: what' subjects and a body"
    else
        err "commit style" "$(printf '%s | ' "${broken[@]}")"
    fi
fi

changelog=$(sed -n 's/^## \[\([0-9][0-9.]*\)\].*/\1/p' "$top/CHANGELOG.md" 2>/dev/null | head -n 1)
version=$(sed -n 's/^#define AFORK_VERSION "\(.*\)"/\1/p' "$top/src/afork.h")
if [ -n "$changelog" ] && [ "$changelog" = "$version" ]; then
    ok "CHANGELOG.md's newest version is AFORK_VERSION ($version)"
else
    err "CHANGELOG.md" "newest version '${changelog}', src/afork.h says '$version'"
fi

# The results folders, and the ones the docs name ("bench/results/NAME",
# "async-fork/results/NAME", or "results/NAME" in contrib/async-fork's
# docs; build/... paths are a machine's, not the repository's).
folders=$(git ls-files bench/results contrib/async-fork/results 2>/dev/null |
    sed -nE 's#^(bench/results|contrib/async-fork/results)/([^/]+)/.*#\2#p' | sort -u)
cited=$(git grep -ohE '[A-Za-z0-9_./-]*results/[A-Za-z0-9_-][A-Za-z0-9_.-]*[A-Za-z0-9]' \
        -- '*.md' ':!bench/results' ':!contrib/async-fork/results' 2>/dev/null |
    grep -vE '(^|/)(build|kernel)/results/' | sed -E 's#.*results/##' | sort -u)
uncited=
for f in $folders; do
    git grep -qE "(^|[^A-Za-z0-9-])$f([^A-Za-z0-9-]|\$)" -- '*.md' ':!bench/results' \
        ':!contrib/async-fork/results' || uncited+="$f "
done
missing=$(comm -13 <(echo "$folders") <(echo "$cited") | tr '\n' ' ')
if [ -z "$folders" ]; then
    err "results folders" "none found under bench/results or contrib/async-fork/results"
elif [ -z "${uncited// /}" ] && [ -z "${missing// /}" ]; then
    ok "results: each of the $(wc -w <<<"$folders") folders is cited, each citation has its folder"
else
    err "results" "${uncited:+cited nowhere: $uncited}${missing:+ cited but missing: $missing}"
fi

# The kernel series' cover letter is written once, cover-letter.txt, and
# make kernel-patches generates 0000-cover-letter.patch from it.
cover=$top/contrib/async-fork/cover-letter.txt
letter=$top/contrib/async-fork/patches/0000-cover-letter.patch
if [ -f "$cover" ] && [ -f "$letter" ] &&
    python3 - "$cover" "$letter" <<'EOF'
import sys
text = open(sys.argv[1]).read().split("\n", 1)
patch = open(sys.argv[2]).read()
subject = " ".join(patch.split("Subject: [", 1)[1].split("]", 1)[1].split("\n\n", 1)[0].split())
sys.exit(0 if text[1].strip() in patch and text[0].strip() in subject else 1)
EOF
then
    ok "kernel: 0000-cover-letter.patch carries cover-letter.txt (make kernel-patches)"
else
    err "kernel cover letter" "0000-cover-letter.patch differs from cover-letter.txt: run make kernel-patches"
fi

# A folder is named <scenario>[-<sizes>]-<yyyymmdd>, with a word after the
# date only where two runs of one day need telling apart; raw per-sample
# data (more than 2000 lines) is committed gzipped.
badname=$(grep -vE '^[a-z0-9]+(-[a-z0-9]+)*-20[0-9]{6}(-[a-z]+)*$' <<<"$folders" | tr '\n' ' ')
raw=$(git ls-files bench/results contrib/async-fork/results | grep -vE '\.(gz|png)$' |
    while read -r f; do [ "$(wc -l <"$f")" -le 2000 ] || printf '%s ' "$f"; done)
if [ -z "${badname// /}" ] && [ -z "$raw" ]; then
    ok "results: folders named <scenario>-<sizes>-<date>, raw data compressed"
else
    err "results" "${badname:+not <scenario>-<sizes>-<date>: $badname}${raw:+ over 2000 lines, gzip them: $raw}"
fi
exit "$status"
