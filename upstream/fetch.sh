#!/usr/bin/env bash
# Fetch the pinned upstream Redis source (upstream/pin) into the download
# cache, verified by sha256. Two files are needed:
#   - the upstream tarball  (ORIG_TARBALL), the code we patch;
#   - Debian's packaging    (DEBIAN_TARBALL), whose
#     debian/patches/*CVE* are the security fixes applied before our patches.
#
# Both come from the Debian source package, looked for in every suite that
# can carry it (experimental, sid, forky, trixie and its backports, updates and security
# suites) through utils/debian-archive.sh: the ordinary apt client with a
# private apt state, nothing on the system changes, no root needed. The
# archive URIs are the machine's own Debian sources.
#
# Overrides (environment or make variables):
#   REDIS_TARBALL=path         use this upstream tarball instead of apt
#   REDIS_DEBIAN_TARBALL=path  use this Debian packaging tarball instead of apt
#   AFORK_APT_URI=uri          Debian archive(s) to use (default: the machine's)
#   AFORK_APT_SUITES="a b"     suites to look in (default: all that can carry it)
#   AFORK_CACHE=dir            download cache (default: upstream/cache)
# A given file is still checked against the pinned sha256.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
. "$here/pin"
cache=${AFORK_CACHE:-$here/cache}

. "$here/../utils/debian-archive.sh"
archive_tag=upstream/fetch
# Every suite that can carry a Redis 8 source package, newest first
# (experimental may be the only one with a new upstream release).
archive_suites="experimental sid forky trixie-backports trixie trixie-updates trixie-proposed-updates trixie-security"
die() { archive_die "$@"; }

# verify FILE SHA256 -> 0 if the file has the pinned checksum
verify() {
    [ -f "$1" ] && [ "$(sha256_of "$1")" = "$2" ]
}

# Take a user-supplied file: verify it, then copy it into the cache.
take_given() {
    local given=$1 name=$2 sum=$3 var=$4
    [ -f "$given" ] || die "$var=$given: no such file."
    if ! verify "$given" "$sum"; then
        die "$var=$given does not have the pinned sha256." \
            "expected: $sum" \
            "found:    $(sha256_of "$given")" \
            "It is not the file $name of Debian source package $DEB_PACKAGE $DEB_VERSION."
    fi
    [ "$(readlink -f "$given")" = "$(readlink -f "$cache/$name")" ] ||
        cp "$given" "$cache/$name"
}

# Say what to do when the pinned version is in no suite.
die_not_carried() {
    local others
    others=$(archive_versions "$DEB_PACKAGE" | awk '{ printf "%s%s (%s)", sep, $1, $2; sep = ", " }')
    die "no suite of the Debian archive carries $DEB_PACKAGE $DEB_VERSION any more." \
        "looked in: ${AFORK_APT_SUITES:-$archive_suites} at $archive_uris_used" \
        "it now has: ${others:-no $DEB_PACKAGE source package at all}" \
        "To build the pinned version, give its two files (same sha256 as upstream/pin):" \
        "  make REDIS_TARBALL=/path/$ORIG_TARBALL REDIS_DEBIAN_TARBALL=/path/$DEBIAN_TARBALL" \
        "or point AFORK_APT_URI at an archive or snapshot that still has it." \
        "Moving to a newer Debian version is a separate step, which rewrites patches/" \
        "and upstream/pin: make rebase REDIS_VERSION=X (docs/contributing.md, \"Moving to a new Redis\")."
}

fetch_with_apt() {
    command -v apt-get >/dev/null ||
        die "apt-get is not installed, so the Debian source package cannot be fetched." \
            "Download $ORIG_TARBALL and $DEBIAN_TARBALL (Debian source package" \
            "$DEB_PACKAGE $DEB_VERSION) and run:" \
            "make REDIS_TARBALL=/path/$ORIG_TARBALL REDIS_DEBIAN_TARBALL=/path/$DEBIAN_TARBALL"
    archive_open deb-src ||
        die "the Debian archive could not be reached (tried: $archive_uris_used)." \
            "Check the network or proxy, set AFORK_APT_URI to a reachable Debian" \
            "mirror, or give the tarballs: REDIS_TARBALL=... REDIS_DEBIAN_TARBALL=..."
    local suite
    suite=$(archive_versions "$DEB_PACKAGE" | awk -v v="$DEB_VERSION" '$1 == v { print $2; exit }')
    [ -n "$suite" ] || die_not_carried
    echo "upstream/fetch: $DEB_PACKAGE $DEB_VERSION found in $suite"
    archive_download "$DEB_PACKAGE" "$DEB_VERSION" ||
        die "apt-get source $DEB_PACKAGE=$DEB_VERSION failed (log above)." \
            "Retry, or give the tarballs: REDIS_TARBALL=... REDIS_DEBIAN_TARBALL=..."
    local f
    for f in "$ORIG_TARBALL" "$DEBIAN_TARBALL"; do
        [ -f "$archive_work/dl/$f" ] ||
            die "apt-get source did not produce $f; the package layout changed."
        mv "$archive_work/dl/$f" "$cache/$f.new"
    done
}

check_cached() {
    local name=$1 sum=$2
    [ -f "$cache/$name.new" ] && mv "$cache/$name.new" "$cache/$name"
    verify "$cache/$name" "$sum" && return 0
    local found
    found=$(sha256_of "$cache/$name")
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
