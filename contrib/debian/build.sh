#!/usr/bin/env bash
# contrib/debian/build.sh -- make deb: Debian packages of redis-afork, built
# from the Debian source package the build tree comes from (upstream/pin).
#
#   contrib/debian/build.sh [OUTDIR]     (default: build/deb)
#   contrib/debian/build.sh --check-series
#       only apply the whole series (Debian's patches, then ours) to the
#       orig tarball in a temporary directory, with no fuzz, as dpkg-source
#       does; fail naming the first patch that does not apply (make
#       check-patches runs this when the Debian tarball is in the cache).
#
# OUTDIR/redis-<version>/ is Debian's source package (the orig tarball and
# debian/ of upstream/pin) with:
#   - contrib/debian/packaging.patch applied to debian/ (renamed binary
#     packages, same unit and file names; see the patch's header);
#   - debian/patches/afork/: patches/security/series, our sources
#     (src/afork*, as one patch) and patches/series, appended in that order
#     to Debian's series, so they apply after all of Debian's patches (its
#     CVE fixes and packaging defaults), as upstream/tree.sh applies them
#     after the CVE fixes;
#   - a changelog entry for version DEB_VERSION+aforkN.
# dpkg-buildpackage then builds the source package and the .debs into
# OUTDIR, with DEB_BUILD_OPTIONS=nocheck (and the nocheck profile): the
# package's check step runs upstream's whole Tcl suite with one client plus
# the cluster and Sentinel suites (make test-upstream runs the Tcl and
# cluster suites with 4 clients, about half an hour on 2 cores), while
# make test runs our tests and the upstream units around fork and
# persistence on the same code.
set -euo pipefail

top=$(cd "$(dirname "$0")/../.." && pwd)
. "$top/upstream/pin"
cache=$(realpath -m "${AFORK_CACHE:-$top/upstream/cache}")
check_series=0
if [ "${1:-}" = --check-series ]; then
    check_series=1
    out=$(mktemp -d "${TMPDIR:-/tmp}/afork-series.XXXXXX")
    trap 'rm -rf "$out"' EXIT
else
    out=$(realpath -m "${1:-$top/build/deb}")
fi
jobs=${JOBS:-$(nproc 2>/dev/null || echo 2)}

# Bump for each release of the packages made from the same Debian version.
AFORK_DEB_REVISION=1
version=$DEB_VERSION+afork$AFORK_DEB_REVISION
afork_version=$(sed -n 's/^#define AFORK_VERSION "\(.*\)"$/\1/p' "$top/src/afork.h")
# The Maintainer that packaging.patch gives debian/control.
maintainer=$(sed -n 's/^+Maintainer: //p' "$top/contrib/debian/packaging.patch")

die() {
    printf 'contrib/debian/build: %s\n' "$1" >&2
    shift
    for line in "$@"; do printf '  %s\n' "$line" >&2; done
    exit 1
}

if [ "$check_series" = 0 ]; then
    "$top/utils/install-deps.sh" --check deb
    "$top/upstream/fetch.sh"
fi

rm -rf "$out" && mkdir -p "$out"
src=$out/redis-$REDIS_VERSION
mkdir "$src"
ln -s "$cache/$ORIG_TARBALL" "$out/$ORIG_TARBALL"
tar -xzf "$cache/$ORIG_TARBALL" -C "$src" --strip-components=1
tar -xJf "$cache/$DEBIAN_TARBALL" -C "$src"

# Debian's packaging, renamed (GNU patch applies git renames).
patch -d "$src" -p1 -s -F0 --no-backup-if-mismatch <"$top/contrib/debian/packaging.patch" ||
    die "contrib/debian/packaging.patch does not apply to Debian's $DEB_VERSION packaging."

series_names() { sed -e 's/#.*//' -e 's/[[:space:]]*$//' "$1" | grep -v '^$' || true; }

# Our patches, after Debian's own.
pdir=$src/debian/patches/afork
mkdir -p "$pdir/security"
{
    echo
    echo "# redis-afork: the fixes Debian's CVE patches need on this release (their tests),"
    echo "# our sources, then our patches (the project's patches/series)."
} >>"$src/debian/patches/series"
for name in $(series_names "$top/patches/security/series"); do
    cp "$top/patches/security/$name" "$pdir/security/"
    echo "afork/security/$name" >>"$src/debian/patches/series"
done
{
    echo "Description: redis-afork's own server sources"
    echo " src/afork*.c and src/afork*.h, kept as files of their own in the"
    echo " redis-afork repository; the patches after this one hook them into Redis."
    echo "Author: $maintainer"
    echo "Forwarded: not-needed"
    echo "Last-Update: $(git -C "$top" log -1 --format=%cs -- src 2>/dev/null || date -u +%F)"
    echo "---"
    (cd "$top" && for f in src/afork*; do git diff --no-index /dev/null "$f" || true; done)
} >"$pdir/0000-redis-afork-sources.patch"
echo "afork/0000-redis-afork-sources.patch" >>"$src/debian/patches/series"
for name in $(series_names "$top/patches/series"); do
    cp "$top/patches/$name" "$pdir/"
    echo "afork/$name" >>"$src/debian/patches/series"
done

# Every patch of the series in order, with no fuzz (dpkg-source's rule).
if [ "$check_series" = 1 ]; then
    for name in $(series_names "$src/debian/patches/series"); do
        patch -d "$src" -p1 -s -F0 -N --no-backup-if-mismatch -r - \
            <"$src/debian/patches/$name" >/dev/null ||
            die "$name does not apply after the patches before it in Debian's series" \
                "(Debian $DEB_VERSION's, then ours): move its hunks off the lines Debian's patches change."
    done
    echo "contrib/debian/build: the series applies over Debian $DEB_VERSION's patches."
    exit 0
fi

# The changelog entry, dated like the checkout's last commit (reproducible).
date=$(git -C "$top" log -1 --format=%aD 2>/dev/null || date -R)
{
    echo "$DEB_PACKAGE ($version) unstable; urgency=medium"
    echo
    echo "  * redis-afork $afork_version: Redis $REDIS_VERSION with the redis-afork patch"
    echo "    series (debian/patches/afork/), packaged as redis-afork-server,"
    echo "    redis-afork-tools and redis-afork-sentinel, which replace redis-server,"
    echo "    redis-tools and redis-sentinel."
    echo
    echo " -- $maintainer  $date"
    echo
    cat "$src/debian/changelog"
} >"$src/debian/changelog.new"
mv "$src/debian/changelog.new" "$src/debian/changelog"

# The nocheck profile drops the test suite's Build-Depends (tcl-tls, ...).
export DEB_BUILD_PROFILES=nocheck DEB_BUILD_OPTIONS="nocheck parallel=$jobs"
(cd "$src" && dpkg-checkbuilddeps) ||
    die "the build dependencies above are missing; run: sudo utils/install-deps.sh deb"

echo "contrib/debian/build: building $DEB_PACKAGE $version in $src (log: $out/build.log)"
start=$(date +%s)
if ! (cd "$src" && dpkg-buildpackage -us -uc) >"$out/build.log" 2>&1; then
    tail -n 40 "$out/build.log" >&2
    die "dpkg-buildpackage failed (whole log: $out/build.log)."
fi
echo "contrib/debian/build: done in $(( $(date +%s) - start )) s:"
(cd "$out" && ls -1 ./*.deb ./*.dsc | sed 's|^\./|  |')
