# lib.sh -- helpers for the shell system tests in tests/system (sourced).
# Each test prints "[ok]: name" or "[err]: name: why", as upstream's Tcl
# harness does, so tests/run.sh counts both kinds of test the same way.

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
. "$top/upstream/pin"
tree=${TREE:-$top/build/redis-$REDIS_VERSION}
stock=${STOCK:-$top/build/stock/redis-$REDIS_VERSION}
status=0
work=$(mktemp -d "${TMPDIR:-/tmp}/afork-systest.XXXXXX")
trap 'rm -rf "$work"' EXIT

ok() { echo "[ok]: $1"; }
err() { echo "[err]: $1: $2"; status=1; }

# expect_fail NAME PATTERN CMD...: CMD must fail and say PATTERN (grep -E).
expect_fail() {
    local name=$1 pattern=$2 out
    shift 2
    if out=$("$@" 2>&1); then
        err "$name" "succeeded, expected a failure"
    elif ! grep -qE "$pattern" <<<"$out"; then
        err "$name" "failed without saying /$pattern/: $out"
    else
        ok "$name"
    fi
}

# expect_ok NAME CMD...: CMD must succeed.
expect_ok() {
    local name=$1 out
    shift
    if out=$("$@" 2>&1); then ok "$name"; else err "$name" "$out"; fi
}

# A TCP port nobody listens on.
free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# need_strace_and_stock NAME: tests that compare with stock under strace
# stop here, as a failure named NAME, when either is missing.
need_strace_and_stock() {
    if ! command -v strace >/dev/null; then
        err "$1" "strace is not installed; run: sudo utils/install-deps.sh test"
        exit 1
    fi
    if [ ! -x "$stock/src/redis-server" ]; then
        err "$1" "no stock build at $stock (make stock)"
        exit 1
    fi
}
