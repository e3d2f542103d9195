#!/usr/bin/env bash
# selftests-table.sh -- the verdict of make kernel-selftests's comparison
# (contrib/async-fork/scripts/selftests-table.py) on consoles written here
# in the form guest/init prints: a kernel splat only the patched kernel
# prints counts against the program that ran, is named in problems.txt,
# and no longer counts once the stock kernel prints it in a repeat run; it
# still counts (listed as flaky too) when neither kernel prints it again.
# The patched kernel's asynchronous forks per program are in the table.
. "$(dirname "$0")/lib.sh"

table=$top/contrib/async-fork/scripts/selftests-table.py

# console DIR STEP... [-- SPLAT-STEP SPLAT]: a boot that ran STEPs, each
# passing; SPLAT printed by the kernel while SPLAT-STEP ran.
console() {
    local dir=$1 t=10 step splat_step='' splat=''
    shift
    mkdir -p "$dir"
    : >"$dir/console.txt" && : >"$dir/results.tsv" && : >"$dir/problems.txt"
    local steps=()
    while [ $# -gt 0 ]; do
        [ "$1" = -- ] && { splat_step=$2 splat=$3; break; }
        steps+=("$1")
        shift
    done
    for step in "${steps[@]}"; do
        t=$((t + 1))
        {
            echo "AFORK-START $step"
            echo "ok 1 first case"
            [ "$step" != "$splat_step" ] || echo "[   $t.000001] $splat"
            echo "AFORK-EXIT $step 0"
            echo "AFORK-MM-SESSIONS $step $t $((t * 3))"
            echo "AFORK-RESULT $step PASS 1s"
        } >>"$dir/console.txt"
        printf '%s\tPASS\t1s\t\n' "$step" >>"$dir/results.tsv"
    done
}

stall='rcu: INFO: rcu_preempt self-detected stall on CPU'

r=$work/first
console "$r/selftests-stock" mm-a mm-b
console "$r/selftests-patched" mm-a mm-b -- mm-b "$stall"
rc=0
python3 "$table" "$r" --steps mm-a,mm-b >"$work/out1" || rc=$?
if [ "$rc" != 1 ]; then
    err "a splat only on patched fails the comparison" "exit $rc: $(cat "$work/out1")"
elif ! grep -qx "mm-b" "$r/regressed-steps.txt"; then
    err "a splat only on patched is held against the program that ran" "regressed-steps: $(cat "$r/regressed-steps.txt")"
elif ! grep -q "^mm-b: kernel message only on the patched kernel: $stall" "$r/problems.txt"; then
    err "problems.txt names the program and the splat" "$(cat "$r/problems.txt")"
elif ! grep -q "^mm-a .* 11/33 *same$" "$work/out1"; then
    err "the table gives the program's asynchronous forks and tables deferred" "$(cat "$work/out1")"
else
    ok "a splat only on patched fails the comparison, named with its program"
fi

# The repeats: the stock kernel prints the same line while mm-b runs again.
console "$r/selftests-stock-repeat" mm-b@1 mm-b@2 -- mm-b@2 "$stall"
console "$r/selftests-patched-repeat" mm-b@1 mm-b@2
rc=0
python3 "$table" "$r" --steps mm-a,mm-b >"$work/out2" || rc=$?
if [ "$rc" != 0 ] || ! grep -q "mm-b .*stock 1/3, patched 1/3 -> fails on stock too" "$work/out2"; then
    err "a splat the stock kernel prints in a repeat no longer counts" "exit $rc: $(cat "$work/out2")"
else
    ok "a splat the stock kernel prints in a repeat no longer counts"
fi

# The repeats: only the patched kernel prints it again.
console "$r/selftests-stock-repeat" mm-b@1 mm-b@2
console "$r/selftests-patched-repeat" mm-b@1 mm-b@2 -- mm-b@1 "$stall"
rc=0
python3 "$table" "$r" --steps mm-a,mm-b >"$work/out3" || rc=$?
if [ "$rc" != 1 ] || ! grep -q "mm-b .*stock 0/3, patched 2/3 -> never on stock" "$work/out3"; then
    err "a splat that only the patched kernel prints, again, stays a regression" "exit $rc: $(cat "$work/out3")"
else
    ok "a splat that only the patched kernel prints, again, stays a regression"
fi

# The repeats: neither kernel prints it again: flaky on patched only, and
# that still counts.
console "$r/selftests-stock-repeat" mm-b@1 mm-b@2
console "$r/selftests-patched-repeat" mm-b@1 mm-b@2
rc=0
python3 "$table" "$r" --steps mm-a,mm-b >"$work/out4" || rc=$?
if [ "$rc" != 1 ] || ! grep -q "mm-b .*stock 0/3, patched 1/3 -> failed once" "$work/out4"; then
    err "a splat the patched kernel printed once, not in the repeats, still counts" "exit $rc: $(cat "$work/out4")"
elif ! grep -q "^mm-b: kernel message only on the patched kernel: $stall" "$r/flaky.txt" ||
    ! grep -q "^mm-b: kernel message only on the patched kernel: $stall" "$r/problems.txt"; then
    err "flaky.txt and problems.txt both name it" "flaky: $(cat "$r/flaky.txt"); problems: $(cat "$r/problems.txt")"
else
    ok "a splat the patched kernel printed once, not in the repeats, is listed as flaky and counted"
fi

# The same splat on both kernels: no regression, and problems.txt is empty.
r=$work/both
console "$r/selftests-stock" mm-a -- mm-a "$stall"
console "$r/selftests-patched" mm-a -- mm-a "$stall"
rc=0
python3 "$table" "$r" --steps mm-a >"$work/out4" || rc=$?
if [ "$rc" != 0 ] || [ -s "$r/problems.txt" ]; then
    err "a splat on both kernels is no regression" "exit $rc: $(cat "$work/out4")"
else
    ok "a splat on both kernels is no regression"
fi
exit $status
