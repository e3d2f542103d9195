#!/usr/bin/env bash
# fetch-suites.sh -- both fetchers (upstream/fetch.sh for the Redis source,
# contrib/async-fork/scripts/fetch-kernel.sh for linux-source-6.12) look for
# their pinned version in every suite, through the one helper
# utils/debian-archive.sh. Tested against a local file: apt repository made
# here (several suites, unsigned, trusted because it is a file: URI):
#   - the version is found in a second suite;
#   - the version is in no suite (Redis: what to do; kernel: the newest is
#     taken, and said to be drift);
#   - a checksum mismatch;
# each with its own message. Never touches the real cache or archive.
. "$(dirname "$0")/lib.sh"

kfetch=$top/contrib/async-fork/scripts/fetch-kernel.sh
rfetch=$top/upstream/fetch.sh
repo=$work/repo
real_cache=$top/upstream/cache

# add_file SUITE KIND STANZA-FILE: append a stanza to the suite's
# Packages (KIND binary) or Sources (KIND source) index.
add_stanza() {
    local dir=$repo/dists/$1/main
    case $2 in
    binary) mkdir -p "$dir/binary-amd64"; cat "$3" >>"$dir/binary-amd64/Packages" ;;
    source) mkdir -p "$dir/source"; cat "$3" >>"$dir/source/Sources" ;;
    esac
    echo >>"$([ "$2" = binary ] && echo "$dir/binary-amd64/Packages" || echo "$dir/source/Sources")"
}

# Write every suite's Release file (unsigned) with the indexes' sha256.
write_releases() {
    local d s f
    for d in "$repo"/dists/*; do
        s=$(basename "$d")
        {
            printf 'Suite: %s\nCodename: %s\nComponents: main\nArchitectures: amd64\n' "$s" "$s"
            printf 'Date: %s\nSHA256:\n' "$(LC_ALL=C date -u -R)"
            (cd "$d" && for f in main/*/Packages main/*/Sources; do
                [ -f "$f" ] && printf ' %s %s %s\n' "$(sha256_of "$f")" "$(stat -c %s "$f")" "$f"
            done)
        } >"$d/Release"
    done
}

sha256_of() { sha256sum "$1" | cut -d' ' -f1; }

# expect_deb NAME DEB PATTERN... -- CMD...: CMD succeeds, prints DEB as its
# last line and says every PATTERN (grep).
expect_deb() {
    local name=$1 want=$2 out p pats=()
    shift 2
    while [ "$1" != -- ]; do pats+=("$1"); shift; done
    shift
    if ! out=$("$@" 2>&1); then err "$name" "failed: $out"; return; fi
    [ "$(tail -n 1 <<<"$out")" = "$want" ] || { err "$name" "gave not $want: $out"; return; }
    for p in "${pats[@]}"; do
        grep -q -- "$p" <<<"$out" || { err "$name" "did not say /$p/: $out"; return; }
    done
    ok "$name"
}

# A fake linux-source-6.12 VERSION into SUITE; prints the .deb's path.
add_kernel_deb() {
    local suite=$1 version=$2 pkg=$work/pkg-$2 deb
    mkdir -p "$pkg/DEBIAN" "$pkg/usr/src" "$repo/pool"
    printf 'Package: linux-source-6.12\nVersion: %s\nArchitecture: all\nMaintainer: t <t@localhost>\nDescription: test\n' \
        "$version" >"$pkg/DEBIAN/control"
    echo "$version" | xz >"$pkg/usr/src/linux-source-6.12.tar.xz"
    deb=$repo/pool/linux-source-6.12_${version}_all.deb
    dpkg-deb -Zxz --build "$pkg" "$deb" >/dev/null
    {
        cat "$pkg/DEBIAN/control"
        printf 'Filename: pool/%s\nSize: %s\nSHA256: %s\n' "$(basename "$deb")" \
            "$(stat -c %s "$deb")" "$(sha256_of "$deb")"
    } >"$work/stanza"
    add_stanza "$suite" binary "$work/stanza"
    printf '%s\n' "$deb"
}

# A Redis source package VERSION into SUITE, made of files ORIG and DEBIAN.
add_redis_source() {
    local suite=$1 version=$2 orig=$3 debian=$4 dir=$repo/pool/redis-$1 f dsc
    mkdir -p "$dir"
    cp "$orig" "$dir/$ORIG_TARBALL"
    cp "$debian" "$dir/$(basename "$debian")"
    dsc=$dir/redis_${version#*:}.dsc
    printf 'Format: 3.0 (quilt)\nSource: redis\nVersion: %s\n' "$version" >"$dsc"
    {
        printf 'Package: redis\nVersion: %s\nFormat: 3.0 (quilt)\nDirectory: pool/redis-%s\n' "$version" "$suite"
        printf 'Files:\n'
        for f in "$dsc" "$dir/$ORIG_TARBALL" "$dir/$(basename "$debian")"; do
            printf ' %s %s %s\n' "$(md5sum "$f" | cut -d' ' -f1)" "$(stat -c %s "$f")" "$(basename "$f")"
        done
        printf 'Checksums-Sha256:\n'
        for f in "$dsc" "$dir/$ORIG_TARBALL" "$dir/$(basename "$debian")"; do
            printf ' %s %s %s\n' "$(sha256_of "$f")" "$(stat -c %s "$f")" "$(basename "$f")"
        done
    } >"$work/stanza"
    add_stanza "$suite" source "$work/stanza"
}

# --- kernel: base in the second suite, base nowhere, base with another sha256
new_deb=$(add_kernel_deb trixie 6.12.999-1)
base_deb=$(add_kernel_deb trixie-backports 6.12.500-1)
write_releases
series() { printf '# base-version: %s\n# base-sha256: %s\n0001-x.patch\n' "$1" "$2" >"$work/series-$1"; echo "$work/series-$1"; }
kenv=(env AFORK_APT_URI="file:$repo" AFORK_APT_SUITES="trixie trixie-backports")

expect_deb "kernel fetch: the series' base is found in a second suite and verified" \
    "$work/k1/linux-source-6.12_6.12.500-1_all.deb" \
    'base 6.12.500-1 found in trixie-backports' 'base 6.12.500-1 (sha256 verified)' -- \
    "${kenv[@]}" AFORK_CACHE="$work/k1" "$kfetch" --series "$(series 6.12.500-1 "$(sha256_of "$base_deb")")"
expect_deb "kernel fetch: a cached base is used without asking the archive" \
    "$work/k1/linux-source-6.12_6.12.500-1_all.deb" 'sha256 verified' -- \
    "${kenv[@]}" AFORK_CACHE="$work/k1" AFORK_APT_URI=http://127.0.0.1:9/debian \
    "$kfetch" --series "$work/series-6.12.500-1"
expect_deb "kernel fetch: a base in no suite falls back to the newest, announced as drift" \
    "$work/k2/linux-source-6.12_6.12.999-1_all.deb" \
    'no suite carries the base 6.12.400-1' 'drift: source 6.12.999-1 is not the series. base 6.12.400-1' -- \
    "${kenv[@]}" AFORK_CACHE="$work/k2" "$kfetch" --series "$(series 6.12.400-1 0123)"
expect_fail "kernel fetch: a base with another sha256 is refused" \
    "sha256 mismatch for linux-source-6.12_6.12.500-1_all.deb: it is not the series' base" \
    "${kenv[@]}" AFORK_CACHE="$work/k3" "$kfetch" --series "$(series 6.12.500-1 "$(printf '%064d' 0)")"
expect_fail "kernel fetch: an unreachable archive and an empty cache say what to do" \
    "could not be downloaded.*|KERNEL_DEB=" \
    env AFORK_CACHE="$work/k4" AFORK_APT_URI=http://127.0.0.1:9/debian "$kfetch" --series "$work/series-6.12.500-1"
expect_deb "kernel fetch: an unreachable archive falls back to the newest cached package" \
    "$work/k2/linux-source-6.12_6.12.999-1_all.deb" 'could not be reached; using the cached' -- \
    env AFORK_CACHE="$work/k2" AFORK_APT_URI=http://127.0.0.1:9/debian \
    "$kfetch" --series "$work/series-6.12.500-1"

# --- Redis: pinned version in the second suite, in no suite, wrong checksum
orig=$real_cache/$ORIG_TARBALL deb=$real_cache/$DEBIAN_TARBALL
if [ ! -f "$orig" ] || [ ! -f "$deb" ]; then
    err "redis fetch" "no cached $ORIG_TARBALL / $DEBIAN_TARBALL in $real_cache (make fetch first)"
    exit 1
fi
newer=${DEB_VERSION%-*}-9
rm -rf "$repo" && mkdir -p "$repo"
add_redis_source sid "$newer" "$orig" "$deb"
add_redis_source trixie-backports "$DEB_VERSION" "$orig" "$deb"
write_releases
renv=(env AFORK_APT_URI="file:$repo" AFORK_APT_SUITES="sid trixie-backports")
if out=$("${renv[@]}" AFORK_CACHE="$work/r1" "$rfetch" 2>&1) &&
    grep -q "$DEB_PACKAGE $DEB_VERSION found in trixie-backports" <<<"$out" &&
    [ "$(sha256_of "$work/r1/$ORIG_TARBALL")" = "$ORIG_SHA256" ] &&
    [ "$(sha256_of "$work/r1/$DEBIAN_TARBALL")" = "$DEBIAN_SHA256" ]; then
    ok "redis fetch: the pinned version is found in a second suite and verified"
else
    err "redis fetch: pinned version in a second suite" "$out"
fi
expect_fail "redis fetch: a version in no suite says what it has and what to do" \
    "no suite of the Debian archive carries $DEB_PACKAGE $DEB_VERSION" \
    env AFORK_APT_URI="file:$repo" AFORK_APT_SUITES=sid AFORK_CACHE="$work/r2" "$rfetch"
out=$(env AFORK_APT_URI="file:$repo" AFORK_APT_SUITES=sid AFORK_CACHE="$work/r2" "$rfetch" 2>&1 || true)
if grep -q "it now has: $newer (sid)" <<<"$out" && grep -q 'REDIS_TARBALL=' <<<"$out" &&
    grep -q 'make rebase REDIS_VERSION=' <<<"$out"; then
    ok "redis fetch: ... naming the versions found, the tarball overrides and the rebase"
else
    err "redis fetch: version in no suite" "the message lacks what to do: $out"
fi
cp "$orig" "$work/bad.tar.gz" && echo x >>"$work/bad.tar.gz"
rm -rf "$repo" && mkdir -p "$repo"
add_redis_source trixie "$DEB_VERSION" "$work/bad.tar.gz" "$deb"
write_releases
expect_fail "redis fetch: a download with another sha256 is refused and removed" \
    "sha256 mismatch for $ORIG_TARBALL: the download is not the pinned file" \
    env AFORK_APT_URI="file:$repo" AFORK_APT_SUITES=trixie AFORK_CACHE="$work/r3" "$rfetch"
[ ! -e "$work/r3/$ORIG_TARBALL" ] && ok "redis fetch: ... and the bad file is not left in the cache" ||
    err "redis fetch: bad file" "still in the cache"
exit $status
