#!/usr/bin/env bash
# Fetch the pinned upstream Redis source (upstream/pin) into the download
# cache, verified by sha256. Two files are needed:
#   - the upstream tarball  (redis_8.0.6.orig.tar.gz), the code we patch;
#   - Debian's packaging    (redis_8.0.6-3.debian.tar.xz), whose
#     debian/patches/*CVE* are the security fixes applied before our patches.
#
# Both come from the Debian source package with the ordinary apt client and a
# private apt state directory: nothing on the system changes, no root needed.
# The archive URI is copied from the machine's own Debian sources.
#
# Overrides (environment or make variables):
#   REDIS_TARBALL=path         use this upstream tarball instead of apt
#   REDIS_DEBIAN_TARBALL=path  use this Debian packaging tarball instead of apt
#   AFORK_APT_URI=uri          Debian archive to use (default: the machine's)
#   AFORK_CACHE=dir            download cache (default: upstream/cache)
# A given file is still checked against the pinned sha256.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
. "$here/pin"
cache=${AFORK_CACHE:-$here/cache}

die() {
    printf 'upstream/fetch: %s\n' "$1" >&2
    shift
    for line in "$@"; do printf '  %s\n' "$line" >&2; done
    exit 1
}

# verify FILE SHA256 -> 0 if the file has the pinned checksum
verify() {
    [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$2" ]
}

# Take a user-supplied file: verify it, then copy it into the cache.
take_given() {
    local given=$1 name=$2 sum=$3 var=$4
    [ -f "$given" ] || die "$var=$given: no such file."
    if ! verify "$given" "$sum"; then
        die "$var=$given does not have the pinned sha256." \
            "expected: $sum" \
            "found:    $(sha256sum "$given" | cut -d' ' -f1)" \
            "It is not the file $name of Debian source package $DEB_PACKAGE $DEB_VERSION."
    fi
    [ "$(readlink -f "$given")" = "$(readlink -f "$cache/$name")" ] ||
        cp "$given" "$cache/$name"
}

# Print the Debian archive URIs the machine's apt sources use (deb822 and
# one-line formats), main archive first, security archives last.
machine_uris() {
    local f
    for f in /etc/apt/sources.list.d/*.sources; do
        [ -r "$f" ] && awk 'tolower($1)=="uris:" { for (i = 2; i <= NF; i++) print $i }' "$f"
    done
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [ -r "$f" ] && sed -e 's/#.*//' -e 's/\[[^]]*\]//' "$f" |
            awk '$1=="deb" || $1=="deb-src" { print $2 }'
    done
    return 0
}

# Download the source package with a private apt state directory under $1.
apt_download() {
    local work=$1 uri=$2 out=$work/apt.log
    local keyring=/usr/share/keyrings/debian-archive-keyring.gpg
    mkdir -p "$work/sources" "$work/lists/partial" "$work/cache/archives/partial" "$work/dl"
    {
        echo "Types: deb-src"
        echo "URIs: $uri"
        echo "Suites: $DEB_SUITE"
        echo "Components: main"
        [ -f "$keyring" ] && echo "Signed-By: $keyring"
    } >"$work/sources/afork.sources"
    local opts=(-o Dir::Etc::SourceList=/dev/null
                -o Dir::Etc::SourceParts="$work/sources"
                -o Dir::State::Lists="$work/lists"
                -o Dir::Cache="$work/cache"
                -o APT::Sandbox::User="$(id -un)"
                -o Debug::NoLocking=1)
    echo "upstream/fetch: apt-get update ($DEB_SUITE sources from $uri)"
    if ! apt-get "${opts[@]}" update >"$out" 2>&1 ||
        grep -qE '^(E:|W: Failed to fetch|Err:)' "$out"; then
        tail -n 5 "$out" >&2
        return 2
    fi
    echo "upstream/fetch: apt-get source --download-only $DEB_PACKAGE=$DEB_VERSION"
    if ! (cd "$work/dl" && apt-get "${opts[@]}" source --download-only \
            "$DEB_PACKAGE=$DEB_VERSION") >"$out" 2>&1; then
        tail -n 5 "$out" >&2
        if grep -qiE 'unable to find a source package|can not find version' "$out"; then
            return 3
        fi
        return 2
    fi
}

fetch_with_apt() {
    command -v apt-get >/dev/null ||
        die "apt-get is not installed, so the Debian source package cannot be fetched." \
            "Download $ORIG_TARBALL and $DEBIAN_TARBALL (Debian source package" \
            "$DEB_PACKAGE $DEB_VERSION) and run:" \
            "make REDIS_TARBALL=/path/$ORIG_TARBALL REDIS_DEBIAN_TARBALL=/path/$DEBIAN_TARBALL"
    local uris
    uris=${AFORK_APT_URI:-$(machine_uris | grep -E '/debian/?$' | awk '!seen[$0]++' || true)}
    [ -n "$uris" ] ||
        die "no Debian archive URI found in /etc/apt/sources.list{,.d}." \
            "Set AFORK_APT_URI to a Debian archive URI, or give the tarballs" \
            "(REDIS_TARBALL=..., REDIS_DEBIAN_TARBALL=...)."
    local rc=2 uri
    work=$(mktemp -d "${TMPDIR:-/tmp}/afork-apt.XXXXXX")  # global: the EXIT trap needs it
    trap 'rm -rf "$work"' EXIT
    for uri in $uris; do
        rc=0
        apt_download "$work" "$uri" || rc=$?
        [ "$rc" -eq 0 ] && break
    done
    case $rc in
    0) ;;
    3) die "the Debian archive no longer carries $DEB_PACKAGE $DEB_VERSION ($DEB_SUITE)." \
           "Point AFORK_APT_URI at an archive or snapshot that still has it, or give" \
           "the tarballs: REDIS_TARBALL=... REDIS_DEBIAN_TARBALL=... (see README)." ;;
    *) die "the Debian archive could not be reached (tried: $(echo $uris))." \
           "Check the network or proxy, set AFORK_APT_URI to a reachable Debian" \
           "mirror, or give the tarballs: REDIS_TARBALL=... REDIS_DEBIAN_TARBALL=..." ;;
    esac
    local f
    for f in "$ORIG_TARBALL" "$DEBIAN_TARBALL"; do
        [ -f "$work/dl/$f" ] ||
            die "apt-get source did not produce $f; the package layout changed."
        mv "$work/dl/$f" "$cache/$f.new"
    done
}

check_cached() {
    local name=$1 sum=$2
    [ -f "$cache/$name.new" ] && mv "$cache/$name.new" "$cache/$name"
    verify "$cache/$name" "$sum" && return 0
    local found
    found=$(sha256sum "$cache/$name" | cut -d' ' -f1)
    rm -f "$cache/$name"
    die "sha256 mismatch for $name: the download is not the pinned file." \
        "expected: $sum" "found:    $found" \
        "The bad file was removed. Retry; if it fails again, the archive serves" \
        "a different $DEB_PACKAGE $DEB_VERSION than the one pinned in upstream/pin."
}

mkdir -p "$cache"
[ -n "${REDIS_TARBALL:-}" ] &&
    take_given "$REDIS_TARBALL" "$ORIG_TARBALL" "$ORIG_SHA256" REDIS_TARBALL
[ -n "${REDIS_DEBIAN_TARBALL:-}" ] &&
    take_given "$REDIS_DEBIAN_TARBALL" "$DEBIAN_TARBALL" "$DEBIAN_SHA256" REDIS_DEBIAN_TARBALL

if verify "$cache/$ORIG_TARBALL" "$ORIG_SHA256" &&
    verify "$cache/$DEBIAN_TARBALL" "$DEBIAN_SHA256"; then
    exit 0
fi
fetch_with_apt
check_cached "$ORIG_TARBALL" "$ORIG_SHA256"
check_cached "$DEBIAN_TARBALL" "$DEBIAN_SHA256"
echo "upstream/fetch: $ORIG_TARBALL and $DEBIAN_TARBALL verified in $cache"
