#!/usr/bin/env bash
# fetch-errors.sh -- upstream/fetch.sh verifies what it uses and says what to
# do when it cannot get it. Uses a private cache; never the real one.
. "$(dirname "$0")/lib.sh"

fetch=$top/upstream/fetch.sh
cache=$top/upstream/cache
orig=$cache/$ORIG_TARBALL
debian=$cache/$DEBIAN_TARBALL

expect_fail "a tarball with the wrong sha256 is refused" "does not have the pinned sha256" \
    env AFORK_CACHE="$work/c1" REDIS_TARBALL=/etc/hostname "$fetch"
expect_fail "a missing tarball path is named" "no such file" \
    env AFORK_CACHE="$work/c1" REDIS_TARBALL="$work/nope.tar.gz" "$fetch"
expect_fail "an unreachable archive is reported with what to do" "could not be reached.*" \
    env AFORK_CACHE="$work/c2" AFORK_APT_URI=http://127.0.0.1:9/debian "$fetch"

# Without apt-get on PATH: a PATH of everything in /usr/bin and /bin but it.
mkdir -p "$work/bin"
for f in /usr/bin/* /bin/*; do
    case ${f##*/} in apt-get) ;; *) ln -sf "$f" "$work/bin/${f##*/}" ;; esac
done
expect_fail "no apt-get: says which tarballs to give instead" "REDIS_TARBALL=.*REDIS_DEBIAN_TARBALL=" \
    env PATH="$work/bin" AFORK_CACHE="$work/c3" "$fetch"

if [ -f "$orig" ] && [ -f "$debian" ]; then
    expect_ok "given tarballs with the pinned sha256 are taken (no network)" \
        env PATH="$work/bin" AFORK_CACHE="$work/c4" REDIS_TARBALL="$orig" \
        REDIS_DEBIAN_TARBALL="$debian" "$fetch"
    cp "$orig" "$work/c4/$ORIG_TARBALL.bad" && echo x >>"$work/c4/$ORIG_TARBALL.bad"
    expect_fail "a corrupted tarball is refused" "does not have the pinned sha256" \
        env AFORK_CACHE="$work/c4" REDIS_TARBALL="$work/c4/$ORIG_TARBALL.bad" "$fetch"
else
    err "given tarballs" "no cached download in $cache to test with"
fi
exit $status
