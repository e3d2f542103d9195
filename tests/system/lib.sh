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

# The drop-in dataset (tests/system/dataset.py). The caller defines
# c PORT ARGS...: redis-cli against PORT, output without CRs.
# dataset_load PORT ROUND: write round ROUND of it.
dataset_load() {
    local out
    out=$(python3 "$top/tests/system/dataset.py" "$2" | c "$1" --pipe)
    grep -q "errors: 0," <<<"$out" || { err "load round $2 on port $1" "$out"; return 1; }
}

# dataset_state PORT: what must be equal between a writer and a reader: the
# digest, plus what the digest may not cover (field TTLs, stream groups and
# PELs, functions, the second database).
dataset_state() {
    local p=$1
    c "$p" debug digest
    c "$p" hexpiretime hfe:small FIELDS 5 f0 f1 f2 f3 f4 | tr '\n' ' '; echo
    c "$p" hpexpiretime hfe:big FIELDS 3 field0 field5 field500 | tr '\n' ' '; echo
    c "$p" xinfo groups stream | tr '\n' ' '; echo
    c "$p" xpending stream g1 | tr '\n' ' '; echo
    c "$p" xpending stream g2 | tr '\n' ' '; echo
    c "$p" function list | tr '\n' ' '; echo
    c "$p" -n 3 get db3:key
    c "$p" fcall_ro dropin_echo 0 ok
}
