# lib.sh -- what the kernel harness's scripts share: where the build lives,
# how a script reports and stops, timing, and the kernel messages that fail
# a run. Sourced by each script after it sets `prog` (its name in messages)
# and, where it differs from 1, `die_status`.

lib_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
here=$lib_dir
contrib=$(cd "$lib_dir/.." && pwd)
top=$(cd "$contrib/../.." && pwd)
# The build and results folder (KERNEL_OUT, default build/kernel); exported
# so that the scripts a script runs use the same one.
out=$(realpath -m "${KERNEL_OUT:-$top/build/kernel}")
export KERNEL_OUT=$out
# Builds and guests run niced, so that the machine stays usable.
nice_level=10

# die MESSAGE [DETAIL...]: say what stopped the script and how to go on.
die() {
    printf '%s: %s\n' "$prog" "$1" >&2
    shift
    for line in "$@"; do printf '  %s\n' "$line" >&2; done
    exit "${die_status:-1}"
}

say() { printf '%s: %s\n' "$prog" "$*"; }

heading() { printf '\n== %s\n' "$*"; }

# Seconds since $1 (an epoch with fractions).
since() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }

fmt_duration() { awk -v s="$1" 'BEGIN { printf "%dm%02ds", s / 60, s % 60 }'; }

# The value of KEY in an env file; empty when the file or the key is missing.
env_value() { [ -f "$1" ] || return 0; sed -n "s/^$2=//p" "$1" | head -n 1; }

# The kernel messages that fail a run wherever they appear: splat.ere, one
# extended regular expression of the message part, which boot.sh (the
# console), selftests-table.py and the guest's init (its dmesg) all read.
splat_file=$lib_dir/splat.ere
splat_ere=$(cat "$splat_file")
