#!/usr/bin/env bash
# run.sh -- make bench and make bench-stalls: set up the benchmark's Python
# (build/bench-venv, from bench/requirements.txt) and run the forkbench
# package against the two builds.
#
#   bench/run.sh [--sizes "1 4 8"] [--repeat 5] [--peer NAME=BINARY[:ARGS]]
#                [--out DIR] [other options of python3 -m forkbench]
#   bench/run.sh --venv          only set up the venv (tests/run.sh: pytest)
#
# Environment: TREE, STOCK (build trees), BENCH_VENV, BENCH_MODULE
# (forkbench, or forkbench.stalls for make bench-stalls).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
. "$top/upstream/pin"
tree=${TREE:-$top/build/redis-$REDIS_VERSION}
stock=${STOCK:-$top/build/stock/redis-$REDIS_VERSION}
venv=${BENCH_VENV:-$top/build/bench-venv}
# Servers run in their own folders: the build trees must be absolute paths
# (make passes them relative to the checkout).
tree=$(cd "$top" && realpath -m "$tree")
stock=$(cd "$top" && realpath -m "$stock")
req=$top/bench/requirements.txt

# (Re)create the venv when requirements.txt changed since it was made.
if ! cmp -s "$req" "$venv/requirements.txt" 2>/dev/null; then
    echo "bench: installing Python packages into $venv"
    rm -rf "$venv"
    if ! python3 -m venv "$venv"; then
        echo "bench: python3 -m venv failed (Debian: apt-get install python3-venv)" >&2
        exit 1
    fi
    "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$req"
    cp "$req" "$venv/requirements.txt"
fi
[ "${1:-}" != --venv ] || exit 0

out_default=$top/bench/results/$(date -u +%Y%m%d-%H%M%S)
has_out=no
for a in "$@"; do [ "$a" = --out ] && has_out=yes; done
extra=()
[ $has_out = yes ] || extra=(--out "$out_default")
export PYTHONPATH=$top/bench${PYTHONPATH:+:$PYTHONPATH}
exec "$venv/bin/python3" -m "${BENCH_MODULE:-forkbench}" \
    --afork-bin "$tree/src" --stock-bin "$stock/src" "${extra[@]}" "$@"
