#!/usr/bin/env bash
# run.sh -- start redis-afork in the foreground with utils/run.conf (make run).
# Usage: utils/run.sh TREE   (PORT=n to listen elsewhere, DATA=dir for data)
# Ctrl-C makes Redis save and exit cleanly.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
tree=${1:?usage: utils/run.sh TREE}
server=$tree/src/redis-server
[ -x "$server" ] || { echo "utils/run.sh: $server is not built; run make" >&2; exit 1; }
data=${DATA:-$top/data}
mkdir -p "$data"
echo "redis-afork on 127.0.0.1:${PORT:-6379}, data in $data (Ctrl-C to stop)"
exec "$server" "$top/utils/run.conf" --dir "$data" --port "${PORT:-6379}"
