#!/usr/bin/env bash
# fetch-kernel.sh -- download Debian's linux-source-6.12 package (Linux 6.12
# LTS with Debian's patches applied) into the download cache and print the
# path of the cached .deb on stdout.
#
# The package comes from Debian's "trixie" suite through the ordinary apt
# client with a private apt state directory: nothing in /etc or the system's
# apt state changes. The archive URI is taken from the machine's own apt
# sources (as upstream/fetch.sh does for the Redis source).
#
# A cached linux-source-6.12_*.deb is reused; the newest one wins.
# Overrides (environment):
#   KERNEL_DEB=path      use this linux-source-6.12 .deb (copied into the cache)
#   KERNEL_REFRESH=1     ask the archive again even if a .deb is cached
#   KERNEL_SUITE=suite   Debian suite to take the package from (default trixie)
#   AFORK_APT_URI=uri    Debian archive to use (default: the machine's)
#   AFORK_CACHE=dir      download cache (default: upstream/cache)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../../.." && pwd)
cache=$(realpath -m "${AFORK_CACHE:-$top/upstream/cache}")
package=linux-source-6.12
suite=${KERNEL_SUITE:-trixie}

die() {
    printf 'kernel/fetch: %s\n' "$1" >&2
    shift
    for line in "$@"; do printf '  %s\n' "$line" >&2; done
    exit 1
}

say() { printf 'kernel/fetch: %s\n' "$*" >&2; }

# Print the newest cached package file, if any.
newest_cached_deb() {
    local f
    for f in "$cache/${package}_"*_all.deb; do
        if [ -f "$f" ]; then printf '%s\n' "$f"; fi
    done | sort -V | tail -n 1
}

# Check that FILE is a linux-source-6.12 package holding the source tarball.
check_deb() {
    local deb=$1 name
    name=$(dpkg-deb -f "$deb" Package 2>/dev/null) ||
        die "$deb is not a readable Debian package."
    [ "$name" = "$package" ] || die "$deb is package '$name', not $package."
    dpkg-deb -c "$deb" | grep -q "usr/src/$package.tar.xz\$" ||
        die "$deb does not contain usr/src/$package.tar.xz; the package layout changed."
}

# Print the Debian archive URIs of the machine's apt sources (deb822 and
# one-line formats), keeping only main archives (".../debian").
machine_uris() {
    local f
    {
        for f in /etc/apt/sources.list.d/*.sources; do
            [ -r "$f" ] && awk 'tolower($1)=="uris:" { for (i = 2; i <= NF; i++) print $i }' "$f"
        done
        for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
            [ -r "$f" ] && sed -e 's/#.*//' -e 's/\[[^]]*\]//' "$f" |
                awk '$1=="deb" || $1=="deb-src" { print $2 }'
        done
    } | grep -E '/debian/?$' | awk '!seen[$0]++' || true
}

# Download the package into $1/dl with a private apt state under $1.
apt_download() {
    local work=$1 uri=$2 log=$1/apt.log
    local keyring=/usr/share/keyrings/debian-archive-keyring.gpg
    mkdir -p "$work/sources" "$work/lists/partial" "$work/cache/archives/partial" "$work/dl"
    {
        echo "Types: deb"
        echo "URIs: $uri"
        echo "Suites: $suite"
        echo "Components: main"
        [ -f "$keyring" ] && echo "Signed-By: $keyring"
    } >"$work/sources/afork-kernel.sources"
    local opts=(-o Dir::Etc::SourceList=/dev/null
                -o Dir::Etc::SourceParts="$work/sources"
                -o Dir::State::Lists="$work/lists"
                -o Dir::Cache="$work/cache"
                -o APT::Sandbox::User="$(id -un)"
                -o Debug::NoLocking=1)
    say "apt-get update ($suite from $uri)"
    if ! apt-get "${opts[@]}" update >"$log" 2>&1 ||
        grep -qE '^(E:|W: Failed to fetch|Err:)' "$log"; then
        tail -n 5 "$log" >&2
        return 2
    fi
    say "apt-get download $package (about 150 MB)"
    if ! (cd "$work/dl" && apt-get "${opts[@]}" download "$package") >"$log" 2>&1; then
        tail -n 5 "$log" >&2
        return 2
    fi
}

fetch_from_archive() {
    command -v apt-get >/dev/null ||
        die "apt-get is not installed, so $package cannot be fetched." \
            "Download a ${package}_*_all.deb and give it: KERNEL_DEB=/path/file.deb"
    local uris uri rc=2
    uris=${AFORK_APT_URI:-$(machine_uris)}
    [ -n "$uris" ] ||
        die "no Debian archive URI found in /etc/apt/sources.list{,.d}." \
            "Set AFORK_APT_URI to a Debian archive URI, or give KERNEL_DEB=/path/file.deb."
    work=$(mktemp -d "${TMPDIR:-/tmp}/afork-kernel-apt.XXXXXX")  # global for the trap
    trap 'rm -rf "$work"' EXIT
    for uri in $uris; do
        rc=0
        apt_download "$work" "$uri" || rc=$?
        [ "$rc" -eq 0 ] && break
    done
    [ "$rc" -eq 0 ] ||
        die "$package could not be downloaded from $suite (tried: $(echo $uris))." \
            "Check the network or proxy, set AFORK_APT_URI to a reachable Debian" \
            "mirror, or give a downloaded package: KERNEL_DEB=/path/file.deb"
    local deb
    deb=$(ls "$work/dl/${package}_"*_all.deb 2>/dev/null | head -n 1) ||
        true
    [ -n "$deb" ] || die "apt-get download did not produce a ${package}_*_all.deb."
    check_deb "$deb"
    mv "$deb" "$cache/$(basename "$deb")"
    printf '%s\n' "$cache/$(basename "$deb")"
}

mkdir -p "$cache"
if [ -n "${KERNEL_DEB:-}" ]; then
    [ -f "$KERNEL_DEB" ] || die "KERNEL_DEB=$KERNEL_DEB: no such file."
    check_deb "$KERNEL_DEB"
    target=$cache/$(basename "$KERNEL_DEB")
    [ "$(readlink -f "$KERNEL_DEB")" = "$(readlink -f "$target")" ] || cp "$KERNEL_DEB" "$target"
    printf '%s\n' "$target"
    exit 0
fi
cached=$(newest_cached_deb)
if [ -n "$cached" ] && [ "${KERNEL_REFRESH:-0}" != 1 ]; then
    printf '%s\n' "$cached"
    exit 0
fi
fetch_from_archive
