#!/usr/bin/env bash
# fetch-kernel.sh -- get Debian's linux-source-6.12 package (Linux 6.12 LTS
# with Debian's patches applied) into the download cache and print the path
# of the .deb on stdout.
#
# Which version: the series' base (the "# base-version:" and
# "# base-sha256:" lines of patches/series, the source the series was made
# and tested on) when any suite still carries it, verified by its sha256;
# otherwise the newest linux-source-6.12 any suite carries, and the series is
# then applied through the drift path (apply-series.sh), reported loudly.
# Debian keeps only a few versions per suite and replaces them every few
# weeks, so the base is looked for in every suite that can carry the package
# (utils/debian-archive.sh: private apt state, nothing on the system changes).
#
# Order: KERNEL_DEB if given; the base in the cache; the base in the
# archive; the newest in the archive; the newest in the cache (archive
# unreachable). Messages go to stderr, "base" or "drift" lines included.
#
#   fetch-kernel.sh [--series FILE]   (FILE: the series whose base is
#                                      wanted, default patches/series)
#
# Environment:
#   KERNEL_DEB=path      use this linux-source-6.12 .deb (copied into the cache)
#   AFORK_APT_URI=uri    Debian archive(s) to use (default: the machine's)
#   AFORK_APT_SUITES="a b"  suites to look in (default: all that can carry it)
#   AFORK_CACHE=dir      download cache (default: upstream/cache)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../../.." && pwd)
cache=$(realpath -m "${AFORK_CACHE:-$top/upstream/cache}")
series=$here/../patches/series
[ "${1:-}" != --series ] || series=${2:?--series needs a file}
package=linux-source-6.12

. "$top/utils/debian-archive.sh"
archive_tag=kernel/fetch
# Every suite that can carry linux-source-6.12.
archive_suites="trixie trixie-updates trixie-proposed-updates trixie-backports trixie-security
    bookworm-backports bookworm-security forky sid"
die() { archive_die "$@"; }
say() { archive_say "$@"; }

# series_header KEY: the value of "# KEY: value" in the series file.
series_header() {
    sed -n "s/^# *$1: *//p" "$series" 2>/dev/null | head -n 1
}

base_version=$(series_header base-version)
base_sha=$(series_header base-sha256)

deb_name() { printf '%s_%s_all.deb' "$package" "$1"; }

# Check that FILE is a linux-source-6.12 package holding the source tarball.
check_deb() {
    local deb=$1 name
    name=$(dpkg-deb -f "$deb" Package 2>/dev/null) ||
        die "$deb is not a readable Debian package."
    [ "$name" = "$package" ] || die "$deb is package '$name', not $package."
    dpkg-deb -c "$deb" | grep -q "usr/src/$package.tar.xz\$" ||
        die "$deb does not contain usr/src/$package.tar.xz; the package layout changed."
}

# Say whether DEB is the series' base; a file of the base version with
# another sha256 is refused.
classify() {
    local deb=$1 version sum
    version=$(dpkg-deb -f "$deb" Version)
    if [ -z "$base_version" ]; then
        say "patches/series records no base; using $version as it is"
    elif [ "$version" = "$base_version" ]; then
        sum=$(sha256_of "$deb")
        [ -z "$base_sha" ] || [ "$sum" = "$base_sha" ] ||
            die "sha256 mismatch for $(basename "$deb"): it is not the series' base." \
                "expected: $base_sha (patches/series, base-sha256)" \
                "found:    $sum" \
                "The archive serves a different $package $version than the one the" \
                "series was made on. Remove the file and retry, or give the right one" \
                "with KERNEL_DEB=/path/$(deb_name "$version")."
        if [ -n "$base_sha" ]; then
            say "base $base_version (sha256 verified)"
        else
            say "base $base_version (patches/series records no sha256 to verify)"
        fi
    else
        say "drift: source $version is not the series' base $base_version;" \
            "the series will be applied with bounded fuzz and the drift reported"
    fi
}

# The newest of the VERSION arguments, in dpkg's order.
newest_version() {
    local best= v
    for v in "$@"; do
        if [ -z "$best" ] || dpkg --compare-versions "$v" gt "$best"; then best=$v; fi
    done
    printf '%s\n' "$best"
}

newest_cached_deb() {
    local f versions=()
    for f in "$cache/${package}_"*_all.deb; do
        [ -f "$f" ] && versions+=("$(dpkg-deb -f "$f" Version)")
    done
    [ "${#versions[@]}" -gt 0 ] || return 0
    printf '%s\n' "$cache/$(deb_name "$(newest_version "${versions[@]}")")"
}

# Download VERSION from the open archive into the cache; print its path.
download() {
    local version=$1 deb
    archive_download "$package" "$version" ||
        die "apt-get download $package=$version failed (log above)." \
            "Retry, or give a downloaded package: KERNEL_DEB=/path/$(deb_name "$version")"
    deb=$archive_work/dl/$(deb_name "${version#*:}")
    [ -f "$deb" ] || deb=$(ls "$archive_work/dl/${package}_"*_all.deb 2>/dev/null | head -n 1)
    [ -n "$deb" ] && [ -f "$deb" ] || die "apt-get download did not produce a ${package} .deb."
    check_deb "$deb"
    mv "$deb" "$cache/$(deb_name "$version")"
    printf '%s\n' "$cache/$(deb_name "$version")"
}

# Use the archive: the base if any suite has it, else the newest.
fetch_from_archive() {
    local versions newest suite
    archive_open deb || return 2
    versions=$(archive_versions "$package")
    [ -n "$versions" ] ||
        die "no suite carries $package (looked in: $(echo ${AFORK_APT_SUITES:-$archive_suites}) at $archive_uris_used)." \
            "Give a downloaded package: KERNEL_DEB=/path/${package}_VERSION_all.deb"
    if [ -n "$base_version" ]; then
        suite=$(awk -v v="$base_version" '$1 == v { print $2; exit }' <<<"$versions")
        if [ -n "$suite" ]; then
            say "base $base_version found in $suite"
            download "$base_version"
            return 0
        fi
        say "no suite carries the base $base_version any more; it now has:" \
            "$(awk '{ printf "%s%s (%s)", sep, $1, $2; sep = ", " }' <<<"$versions")"
    fi
    # shellcheck disable=SC2046
    newest=$(newest_version $(awk '{ print $1 }' <<<"$versions"))
    suite=$(awk -v v="$newest" '$1 == v { print $2; exit }' <<<"$versions")
    say "taking the newest, $newest from $suite"
    download "$newest"
}

mkdir -p "$cache"
if [ -n "${KERNEL_DEB:-}" ]; then
    [ -f "$KERNEL_DEB" ] || die "KERNEL_DEB=$KERNEL_DEB: no such file."
    check_deb "$KERNEL_DEB"
    classify "$KERNEL_DEB"
    target=$cache/$(deb_name "$(dpkg-deb -f "$KERNEL_DEB" Version)")
    [ "$(readlink -f "$KERNEL_DEB")" = "$(readlink -f "$target")" ] || cp "$KERNEL_DEB" "$target"
    printf '%s\n' "$target"
    exit 0
fi
base_cached=$cache/$(deb_name "${base_version:-none}")
if [ -n "$base_version" ] && [ -f "$base_cached" ]; then
    classify "$base_cached"
    printf '%s\n' "$base_cached"
    exit 0
fi
command -v apt-get >/dev/null ||
    die "apt-get is not installed, so $package cannot be fetched." \
        "Download a ${package}_*_all.deb and give it: KERNEL_DEB=/path/file.deb"
rc=0
deb=$(fetch_from_archive) || rc=$?
if [ "$rc" -eq 0 ]; then
    classify "$deb"
    printf '%s\n' "$deb"
    exit 0
fi
[ "$rc" -eq 2 ] || exit "$rc"
deb=$(newest_cached_deb)
[ -n "$deb" ] ||
    die "$package could not be downloaded (tried: ${AFORK_APT_URI:-the Debian archives of /etc/apt/sources.list.d})." \
        "Check the network or proxy, set AFORK_APT_URI to a reachable Debian" \
        "mirror, or give a downloaded package: KERNEL_DEB=/path/file.deb"
say "the archive could not be reached; using the cached $(basename "$deb")"
classify "$deb"
printf '%s\n' "$deb"
