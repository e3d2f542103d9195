#!/usr/bin/env bash
# install-deps.sh -- utils/install-deps.sh installs by set (the kernel
# harness's packages only for kernel), and a make goal whose packages are
# missing stops before anything starts, naming the one command that fixes
# it. Missing packages are simulated with a dpkg-query in front of PATH;
# nothing is installed or removed.
. "$(dirname "$0")/lib.sh"

deps=$top/utils/install-deps.sh
kernel_pkgs="qemu-system-x86 busybox-static stress-ng bison flex libelf-dev bc ccache libnuma-dev liburing-dev"

has_all() { # has_all LIST WORDS...: every word is a line of LIST
    local list=$1 w
    shift
    for w in "$@"; do grep -qx "$w" <<<"$list" || return 1; done
}
has_none() {
    local list=$1 w
    shift
    for w in "$@"; do grep -qx "$w" <<<"$list" && return 1; done
    return 0
}

default=$("$deps" --list)
if has_all "$default" build-essential git tcl && has_none "$default" $kernel_pkgs; then
    ok "the default set (build, test) has the toolchain and tcl, none of the kernel harness's packages"
else
    err "default set" "$(paste -sd' ' <<<"$default")"
fi
kernel=$("$deps" --list kernel)
# shellcheck disable=SC2086
if has_all "$kernel" $kernel_pkgs build-essential; then
    ok "the kernel set adds the harness's packages to the build set"
else
    err "kernel set" "$(paste -sd' ' <<<"$kernel")"
fi
all=$("$deps" --list all)
missing=
for s in build test bench deb kernel; do
    while read -r p; do grep -qx "$p" <<<"$all" || missing="$missing $p"; done < <("$deps" --list "$s")
done
if [ -z "$missing" ]; then ok "all is every set"; else err "all" "lacks$missing"; fi
expect_fail "an unknown set is refused" 'usage:' "$deps" --check nosuchset

# A fake dpkg-query: tcl is not installed, everything else is.
mkdir -p "$work/bin"
cat >"$work/bin/dpkg-query" <<'EOF'
#!/bin/sh
for a; do pkg=$a; done
[ "$pkg" = tcl ] && exit 1
printf 'ii '
EOF
chmod +x "$work/bin/dpkg-query"
if PATH=$work/bin:$PATH "$deps" --check build; then
    ok "--check build passes without tcl (a test-only package)"
else
    err "--check build" "failed although only tcl is missing"
fi
expect_fail "--check test names tcl and the command" \
    '^Missing packages \(for: test\): tcl$' env PATH="$work/bin:$PATH" "$deps" --check test

# make test stops at the check: the message, and no build step after it.
out=$(PATH=$work/bin:$PATH make -C "$top" TREE="$work/no-tree" STOCK="$work/no-stock" test 2>&1)
rc=$?
if [ "$rc" -ne 0 ] && grep -qx 'run: sudo utils/install-deps.sh test' <<<"$out" &&
    ! grep -q 'upstream/tree\|upstream/fetch' <<<"$out" && [ ! -e "$work/no-tree" ]; then
    ok "make test without tcl stops first: run: sudo utils/install-deps.sh test"
else
    err "make test without tcl" "status $rc: $out"
fi
exit $status
