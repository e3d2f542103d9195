#!/usr/bin/env bash
# kernel-selftests.sh -- the kernel's own mm selftests
# (tools/testing/selftests/mm of the same Linux 6.12 source) on the stock
# kernel and on the patched kernel with vm.async_fork=2, and the comparison:
# per program and per failing or skipped case, stock vs patched
# (make kernel-selftests).
#
#   kernel-selftests.sh [--steps LIST] [--boots "A B"] [--repeat N]
#                       [--timeout S] [--step-timeout S] [--results DIR]
#
# In order: the source trees (kernel-tree.sh prepare), the stock and the
# patched kernels (build-kernel.sh: the kernels of make kernel-test, nothing
# is rebuilt when they are up to date), forktest and the initramfs of make
# kernel-test, the selftests (static, from the stock tree, into
# KERNEL_OUT/selftests/mm) and a second cpio with them and guest/mm-selftests
# appended to that initramfs (the kernel unpacks both), then one boot per
# kernel with two NUMA nodes and 4 vCPUs (migration needs both nodes and
# 3 CPUs, ksm_tests -N the nodes), each
# step one program as guest/mm-selftests runs it, and the table
# (selftests-table.py). Results in KERNEL_OUT/results/<timestamp>/ (or
# --results DIR): summary.txt, phases.tsv, problems.txt (what
# fails only on the patched kernel, a line each), selftests-stock/ and selftests-patched/ (boot.sh's
# files, console.txt with every program's output), cases.tsv, table.txt
# (table-first.txt: before the repeats), selftests-KERNEL-repeat/.
#
# Exit status: 0 when the patched kernel fails nothing that the stock kernel
# passes (a case, a program, or a clean boot: a kernel splat, panic or hang
# only on the patched kernel counts as a failure); 1 otherwise; 2 when a
# build or boot could not be made.
#
# Options (make kernel-selftests: KERNEL_TESTS gives --steps):
#   --steps LIST        comma list of guest/mm-selftests steps, or all
#                       (default: KERNEL_TESTS, else all)
#   --boots "A B"       the boots to make (default "stock patched"): kasan
#                       is the patched tree's KASAN build (make kernel-kasan),
#                       compared with stock instead, or with stock-kasan, the
#                       stock tree built the same way (the control for what
#                       only a 10 times slower kernel fails), when that boot
#                       is among them; "debug-off debug" is make kernel-test's
#                       pair (CI): the patched debug build (lockdep,
#                       DEBUG_VM) with vm.async_fork=0 against itself with =2
#   --repeat N          runs again, on both kernels, of a program that failed
#                       only on the patched kernel (default 5; 0: none); one
#                       that fails on stock too, in any run, no longer counts
#   --timeout S         wall-clock limit per boot (default 3600)
#   --step-timeout S    seconds per program (default 600)
#   --results DIR       the results folder (default: a new one,
#                       KERNEL_OUT/results/<timestamp>; kernel-test.sh gives
#                       a folder inside its own)
# Environment: KERNEL_OUT, JOBS, AFORK_ACCEL (as for kernel-test.sh).
set -euo pipefail

prog=kernel-selftests die_status=2
. "$(dirname "$0")/lib.sh"
stock_src=$out/stock/linux
sdir=$out/selftests
forktest=$out/bin/forktest
base_cpio=$out/initramfs.cpio
cpio=$out/initramfs-selftests.cpio
steps=${KERNEL_TESTS:-all} boots="stock patched" repeat=5 boot_timeout=3600
step_timeout=600 results=''
while [ $# -gt 0 ]; do
    [ $# -ge 2 ] || die "$1 needs a value"
    case $1 in
    --steps) steps=$2 ;;
    --boots) boots=$2 ;;
    --repeat) repeat=$2 ;;
    --timeout) boot_timeout=$2 ;;
    --step-timeout) step_timeout=$2 ;;
    --results) results=$2 ;;
    *) die "unknown argument '$1' (kernel-selftests.sh: see its header)" ;;
    esac
    shift 2
done

say() { heading "$*"; }

phase() {
    local name=$1 t0 rc=0
    shift
    t0=$(date +%s.%N)
    "$@" || rc=$?
    printf '%s\t%s\t%s\n' "$name" "$(since "$t0")" "$rc" >>"$results/phases.tsv"
    return "$rc"
}

# The programs' build needs: libnuma (migration, ksm_tests) and liburing
# (cow's and gup_longterm's io_uring cases), static.
check_deps() {
    local missing=()
    [ -f /usr/include/numa.h ] && [ -f /usr/lib/x86_64-linux-gnu/libnuma.a ] || missing+=(libnuma-dev)
    [ -f /usr/include/liburing.h ] && [ -f /usr/lib/x86_64-linux-gnu/liburing.a ] || missing+=(liburing-dev)
    [ "${#missing[@]}" -eq 0 ] ||
        die "the mm selftests need ${missing[*]}: utils/install-deps.sh kernel installs them"
}

prepare_source() {
    local deb
    deb=$("$here/fetch-kernel.sh")
    "$here/kernel-tree.sh" prepare "$deb"
    "$here/kernel-tree.sh" base | tee "$results/base.txt"
}

build_kernels() {
    say "build: the kernels of the boots: $boots (up to date: nothing to do)"
    case " $boots " in *" stock "* | *" kasan "*)
        "$here/build-kernel.sh" stock stock || die "the stock kernel did not build."
        cp "$out/stock/obj/afork-build.env" "$results/build-stock.env" ;;
    esac
    case " $boots " in *" patched "*)
        "$here/build-kernel.sh" patched patched "$contrib/config/async-fork.config" ||
            die "the patched kernel did not build."
        cp "$out/patched/obj/afork-build.env" "$results/build-patched.env" ;;
    esac
    case " $boots " in *" debug "* | *" debug-off "*)
        "$here/build-kernel.sh" patched debug "$contrib/config/async-fork.config" \
            "$contrib/config/debug.config" || die "the debug kernel did not build."
        cp "$out/patched/obj-debug/afork-build.env" "$results/build-debug.env" ;;
    esac
    case " $boots " in *" kasan "*)
        "$here/build-kasan.sh" patched || die "the KASAN kernel did not build."
        cp "$out/patched/obj-kasan/afork-build.env" "$results/build-kasan.env" ;;
    esac
    case " $boots " in *" stock-kasan "*)
        "$here/build-kasan.sh" stock || die "the stock KASAN kernel did not build."
        cp "$out/stock/obj-kasan/afork-build.env" "$results/build-stock-kasan.env" ;;
    esac
}

# forktest and the initramfs of make kernel-test (guest/init runs the mm-*
# steps too); the selftests go in a second cpio appended to it.
build_base_initramfs() {
    say "build: forktest and the initramfs"
    mkdir -p "$(dirname "$forktest")"
    gcc -static -O2 -pthread -Wall -Wextra -Werror -o "$forktest.tmp" "$contrib"/tests/*.c ||
        die "forktest does not compile."
    mv "$forktest.tmp" "$forktest"
    "$here/build-initramfs.sh" "$forktest" "$base_cpio"
}

# The programs the steps run (the second word of each guest/mm-selftests
# line), static, out of the source tree (OUTPUT=), against the tree's own
# UAPI headers (make headers into KERNEL_OUT/selftests/hdr). khugepaged.c
# of 6.12 uses KSFT_SKIP without including kselftest.h: it gets the header
# with -include.
build_selftests() {
    local progs p t0 mmdir=$stock_src/tools/testing/selftests/mm
    say "build: tools/testing/selftests/mm (static) from $stock_src"
    t0=$(date +%s.%N)
    mkdir -p "$sdir/mm"
    nice -n "$nice_level" make -s -C "$stock_src" O="$sdir/hdr" ARCH=x86_64 headers ||
        die "make headers failed in $stock_src."
    progs=$(sh "$contrib/guest/mm-selftests" programs)
    selftests_make "$mmdir" "" $(printf '%s\n' $progs | grep -vx khugepaged)
    selftests_make "$mmdir" "-include $mmdir/../kselftest.h" $(printf '%s\n' $progs | grep -x khugepaged)
    for p in $progs; do
        ldd "$sdir/mm/$p" >/dev/null 2>&1 && die "$sdir/mm/$p is not static."
    done
    echo "$(echo "$progs" | wc -w) programs in $sdir/mm in $(since "$t0") s"
}

# selftests_make MMDIR EXTRA_CFLAGS PROGRAM...: build those programs.
selftests_make() {
    local mmdir=$1 extra=$2 log=$sdir/build.log
    shift 2
    [ $# -gt 0 ] || return 0
    nice -n "$nice_level" make -s -C "$mmdir" -j"${JOBS:-$(nproc)}" OUTPUT="$sdir/mm" \
        KHDR_INCLUDES="-isystem $sdir/hdr/usr/include" LDFLAGS=-static \
        EXTRA_CFLAGS="$extra" "${@/#/$sdir/mm/}" >"$log" 2>&1 ||
        { grep -E 'error|Error' "$log" | head -n 20 >&2; die "the mm selftests did not build ($log)."; }
}

# The second cpio: /usr/bin/mm-selftests and /usr/lib/mm-selftests/*,
# appended to the initramfs of kernel-test (concatenated archives are
# unpacked one after the other).
build_cpio() {
    local list=$sdir/cpio.list p
    say "build: initramfs with the selftests"
    {
        printf 'dir /usr 0755 0 0\ndir /usr/bin 0755 0 0\ndir /usr/lib 0755 0 0\n'
        printf 'dir /usr/lib/mm-selftests 0755 0 0\n'
        printf 'file /usr/bin/mm-selftests %s 0755 0 0\n' "$contrib/guest/mm-selftests"
        for p in $(sh "$contrib/guest/mm-selftests" programs); do
            strip --strip-debug -o "$sdir/mm/$p.stripped" "$sdir/mm/$p"
            printf 'file /usr/lib/mm-selftests/%s %s 0755 0 0\n' "$p" "$sdir/mm/$p.stripped"
        done
    } >"$list"
    "$out/tools/gen_init_cpio" "$list" >"$sdir/mm.cpio"
    cat "$base_cpio" "$sdir/mm.cpio" >"$cpio.tmp"
    mv "$cpio.tmp" "$cpio"
    echo "$cpio ($(($(stat -c %s "$cpio") / 1024 / 1024)) MiB)"
}

# One boot: every step, two NUMA nodes; boot.sh's verdict is read by the
# table script (a program's FAIL is the stock kernel's too, or not).
boot_one() {
    local kernel=$1 suffix=${2:-} args=()
    local image=$out/$kernel/obj/arch/x86/boot/bzImage
    local sysctl=vm.async_fork=2
    case $kernel in
    kasan) image=$out/patched/obj-kasan/arch/x86/boot/bzImage ;;
    stock-kasan) image=$out/stock/obj-kasan/arch/x86/boot/bzImage ;;
    debug) image=$out/patched/obj-debug/arch/x86/boot/bzImage ;;
    debug-off) image=$out/patched/obj-debug/arch/x86/boot/bzImage sysctl=vm.async_fork=0 ;;
    esac
    case $kernel in stock*) sysctl='' ;; esac
    args=(--kernel "$image" --initrd "$cpio"
          --out "$results/selftests-$kernel$suffix" --label "mm-$kernel$suffix" --mode selftests
          --tests "$steps" --numa 2 --smp 4 --timeout "$boot_timeout"
          --expect "$(echo "$steps" | tr , ' ')" --append "afork.timeout=$step_timeout")
    [ -z "$sysctl" ] || args+=(--sysctl "$sysctl")
    say "boot: $kernel${sysctl:+, $sysctl}, $(echo "$steps" | tr , '\n' | wc -l) programs"
    "$here/boot.sh" "${args[@]}" || true
    [ -s "$results/selftests-$kernel$suffix/console.txt" ] || die "the $kernel boot left no console log."
}

check_deps
command -v qemu-system-x86_64 >/dev/null || die "qemu-system-x86_64 is missing: apt-get install qemu-system-x86"
t_start=$(date +%s.%N)
results=$(realpath -m "${results:-$out/results/$(date +%Y%m%d-%H%M%S)}")
mkdir -p "$results"
exec > >(tee "$results/summary.txt") 2>&1
echo "kernel-selftests: results in $results"
[ "$steps" != all ] || steps=$(sh "$contrib/guest/mm-selftests" list | paste -sd, -)
phase source prepare_source
phase "build kernels" build_kernels
phase "build initramfs" build_base_initramfs
phase "build selftests" build_selftests
phase "build cpio" build_cpio
for k in $boots; do
    case $k in stock | patched | kasan | stock-kasan | debug | debug-off) ;; *) die "--boots: unknown boot '$k' (stock, patched, kasan, stock-kasan, debug, debug-off)" ;; esac
    phase "boot $k" boot_one "$k"
done
rc=0
# The boot compared with stock: the KASAN build's when it is among them.
cmp=patched ref=stock
case " $boots " in *" kasan "*) cmp=kasan ;; esac
case " $boots " in *" stock-kasan "*) ref=stock-kasan ;; esac
case " $boots " in *" debug "*) cmp=debug ;; esac
case " $boots " in *" debug-off "*) ref=debug-off ;; esac
python3 "$here/selftests-table.py" "$results" --steps "$steps" --patched "$cmp" --stock "$ref" >"$results/table-first.txt" || rc=$?
# A program that failed only on the patched kernel runs again, on both:
# a failure the stock kernel shows too, in any run, is the test's or the
# emulator's, not the series'.
if [ "$rc" = 1 ] && [ "$repeat" -gt 0 ] && [ -s "$results/regressed-steps.txt" ]; then
    steps_all=$steps
    steps=$(for s in $(cat "$results/regressed-steps.txt"); do
        for i in $(seq 1 "$repeat"); do printf '%s@%d,' "$s" "$i"; done; done)
    steps=${steps%,}
    for k in $boots; do
        phase "repeat $k" boot_one "$k" -repeat
    done
    steps=$steps_all
    rc=0
    python3 "$here/selftests-table.py" "$results" --steps "$steps" --patched "$cmp" --stock "$ref" >/dev/null || rc=$?
fi
cat "$results/table.txt"
printf '\nphase times (s):\n'
awk -F'\t' '{ printf "  %-22s %8.1f%s\n", $1, $2, ($3 == 0 ? "" : "  (exit " $3 ")") }' "$results/phases.tsv"
printf '  %-22s %8.1f\n' total "$(since "$t_start")"
case $rc in
0) echo "kernel-selftests: $cmp fails nothing that $ref passes; results in $results" ;;
1) echo "kernel-selftests: FAILED: $cmp fails what $ref passes (above); results in $results" ;;
*) echo "kernel-selftests: the table could not be made (status $rc); results in $results" ;;
esac
exit "$rc"
