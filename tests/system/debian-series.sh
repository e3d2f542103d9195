#!/usr/bin/env bash
# debian-series.sh -- the Debian package applies our series after Debian's
# own patches with no fuzz (dpkg-source's rule); contrib/debian/build.sh
# --check-series checks that in a second, where make deb would fail after a
# full build. Ours must apply; a patch whose context is a line Debian's
# patches change (zmalloc.c's jemalloc macros) must fail, named.
. "$(dirname "$0")/lib.sh"

expect_ok "debian: our series applies over Debian's patches, no fuzz" \
    "$top/contrib/debian/build.sh" --check-series

# A copy of what --check-series reads, with one more patch at the end.
copy=$work/top
mkdir -p "$copy/contrib" "$copy/upstream" "$copy/src"
cp -r "$top/contrib/debian" "$copy/contrib/"
cp -r "$top/patches" "$copy/"
cp "$top/upstream/pin" "$copy/upstream/"
cp "$top"/src/afork* "$copy/src/"
cat >"$copy/patches/9999-touch-the-jemalloc-macros.patch" <<'PATCH'
Subject: [PATCH] a hook on the lines Debian's patches change

Forwarded: not-needed
Last-Update: 2026-11-29
---
diff --git a/src/zmalloc.c b/src/zmalloc.c
--- a/src/zmalloc.c
+++ b/src/zmalloc.c
@@ -60,6 +60,7 @@ void zlibc_free(void *ptr) {
 #define free(ptr) tc_free(ptr)
 /* Explicitly override malloc/free etc when using jemalloc. */
 #elif defined(USE_JEMALLOC)
+/* a hook */
 #define malloc(size) je_malloc(size)
 #define calloc(count,size) je_calloc(count,size)
 #define realloc(ptr,size) je_realloc(ptr,size)
PATCH
echo 9999-touch-the-jemalloc-macros.patch >>"$copy/patches/series"
expect_fail "debian: a patch on the lines Debian changes is named" \
    '9999-touch-the-jemalloc-macros.patch does not apply' \
    env AFORK_CACHE="${AFORK_CACHE:-$top/upstream/cache}" "$copy/contrib/debian/build.sh" --check-series

# The same patch applies to upstream's zmalloc.c alone (the test's patch is
# right; only Debian's lines make it fail).
mkdir -p "$work/orig"
tar -xzf "${AFORK_CACHE:-$top/upstream/cache}/$ORIG_TARBALL" -C "$work/orig" --strip-components=1 \
    redis-$REDIS_VERSION/src/zmalloc.c
expect_ok "debian: that patch applies to upstream's own zmalloc.c" \
    patch -d "$work/orig" -p1 -s -F0 --dry-run -i "$copy/patches/9999-touch-the-jemalloc-macros.patch"
exit $status
