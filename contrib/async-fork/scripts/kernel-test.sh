#!/usr/bin/env bash
# kernel-test.sh -- the kernel harness: fetch Linux 6.12, build the stock
# and the patched guest kernels, the test suite and the initramfs, boot each
# kernel under QEMU to run the suite, and print the tables (test x run, fork
# time vs size). Everything printed is also saved in
# KERNEL_OUT/results/<timestamp>/; phases.tsv there holds the seconds of each
# phase, drift.txt the hunks the series needed fuzz for (a source other than
# the series' base).
#
#   kernel-test.sh [TIER]      kernel-test.sh --help lists the tiers and knobs
#
# The tiers are the make targets kernel-build, kernel-test (CI),
# kernel-test-full, kernel-e2e and kernel-kasan; what each runs is set in
# one place below (set_tier), and only the knobs of usage() change it.
set -euo pipefail

prog=kernel-test die_status=2
. "$(dirname "$0")/lib.sh"

usage() {
    cat <<'EOF'
usage: kernel-test.sh [TIER]      (make kernel-TIER; make kernel-help)

Tiers:
  build   the builds only: stock, patched, the series configured out, debug
  test    (default; make kernel-test, CI) correctness, no timings:
          checkpatch, the debug build (lockdep, DEBUG_VM, KUnit) and the
          series configured out; the suite on the debug kernel with the
          feature off, on for all and opted in; the mm selftests off against
          on; redis-consistency (256 MiB x 8)
  full    (make kernel-test-full) also the stock and patched kernels, the
          suite on each with the fork-time tables, the mm selftests stock
          against patched, the short Redis latency experiment checked
          against stock Redis, the rebuild probe, fork-time on the host
  e2e     (make kernel-e2e) the Redis latency experiment: the stock kernel,
          the patched one with vm.async_fork=2 and =1, 10 BGSAVEs per cell;
          hours under TCG
  kasan   (make kernel-kasan) the patched tree with KASAN, DEBUG_PAGEALLOC,
          PREEMPT, lockdep and DEBUG_VM: the suite and its KUnit tests, then
          the mm selftests against the stock tree's KASAN build; hours

Knobs (environment, or make variables of the same name):
  KERNEL_TESTS   what of the tier to run, a comma list (default: all of it):
                 suite steps (forktest list, stress-fork, stress-vfork,
                 stress-mmap, stress-mremap, redis-bgsave; a chosen list
                 runs no mm selftests), or for e2e the save cells (stock,
                 afork-on, afork-off, afork-preempt, stock-rewrite,
                 afork-rewrite, stock-sync, afork-sync; default the first
                 three); make kernel-selftests takes mm selftests steps
                 (guest/mm-selftests list)
  KERNEL_SIZE    the Redis data size in MiB: redis-consistency's and the
                 short latency experiment's (default 256 for test, 512 for
                 full), the experiment's sizes for e2e (default 1024,1536)
  KERNEL_BUDGET  seconds for the whole run (default none; .ci/run sets it):
                 a phase starts only inside it, builds and boots are cut at
                 its end, and an overrun fails the run naming the phase
  KERNEL_DEB     a downloaded linux-source-6.12 .deb to build from, when
                 the archive no longer serves the series' base
  KERNEL_OUT     builds and results (default build/kernel)
  JOBS           parallel build jobs (default: the CPUs)
  AFORK_ACCEL    kvm or tcg (default: KVM where the CPU offers vmx or svm)
EOF
}

case ${1:-test} in
-h | --help) usage; exit 0 ;;
build | test | full | e2e | kasan) tier=${1:-test} ;;
*) usage >&2; exit 2 ;;
esac
tests=${KERNEL_TESTS:-all}
size=${KERNEL_SIZE:-}
case $size in '' | [1-9]*) ;; *) die "KERNEL_SIZE=$size: MiB, a number (e2e: a comma list)." ;; esac
[ -z "$size" ] || [ "$tier" = e2e ] || [[ $size =~ ^[0-9]+$ ]] ||
    die "KERNEL_SIZE=$size: one size in MiB (a list is for the e2e tier)."

# The mm selftests of test and full: the guest's list (guest/mm-selftests)
# but the slowest (migration, split_huge_page_test, khugepaged -s 2),
# uffd-unit-tests and ksm_tests -N -m 1 (make kernel-selftests runs all).
ci_selftests=$(sh "$contrib/guest/mm-selftests" list |
    grep -vxE 'mm-(migration|split_huge_page_test|khugepaged-s2|uffd-unit-tests|ksm_tests-N1)' |
    paste -sd, -)

# What each tier runs:
#   runs            suite boots, each KERNEL[:MODE[:SYSCTLS[:prctl]]], KERNEL
#                   stock, patched, debug (the patched tree with
#                   config/debug.config) or kasan (debug plus kasan.config)
#   e2e_kernel      the kernel of the Redis boot (none: no Redis boot), and
#                   e2e_steps its steps
#   selftests       mm selftests steps (0: none) on selftests_boots
#   redis_*         redis-consistency's size and rounds, redis-latency's
#                   sizes and BGSAVEs per cell and size; e2e_mem the guest's
#   host, probe     the fork-time run on the host, the rebuild probe
#   boot_timeout    wall-clock limit per boot (s)
set_tier() {
    runs="debug:off:vm.async_fork=0 debug:all:vm.async_fork=2
        debug:opt-in:vm.async_fork=1:prctl"
    e2e_kernel=debug e2e_steps=redis-consistency
    selftests=$ci_selftests selftests_boots="debug-off debug" selftests_timeout=1200
    selftests_step_timeout=600 selftests_repeat=2
    redis_mib=${size:-256} redis_rounds=8 redis_lat_mib=${size:-512} redis_lat_rounds=3
    e2e_cells='' host=0 probe=0 boot_timeout=1800
    case $tier in
    full | build)
        runs="stock patched:off:vm.async_fork=0 patched:all:vm.async_fork=2
            patched:opt-in:vm.async_fork=1:prctl debug:all:vm.async_fork=2"
        e2e_kernel=patched e2e_steps=redis-consistency,redis-latency
        selftests_boots="stock patched" redis_mib=${size:-512} redis_rounds=10
        host=1 probe=1 ;;
    e2e)
        runs='' e2e_kernel=patched selftests=0 redis_mib=512 redis_rounds=20
        redis_lat_mib=${size:-1024,1536} redis_lat_rounds=10 boot_timeout=7200
        e2e_cells=${KERNEL_TESTS:-} tests=all ;;
    kasan)
        runs="kasan:all:vm.async_fork=2" e2e_kernel=none selftests=all
        selftests_boots="stock-kasan kasan" selftests_timeout=14400
        selftests_step_timeout=2400 selftests_repeat=5 boot_timeout=14400 ;;
    esac
    # A run of chosen suite steps runs no selftests.
    [ "$tests" = all ] || selftests=0
    # The Redis guests: two servers, one whole copy-on-write copy and the RDB
    # in tmpfs need about 5 times the largest size (guest/redis-e2e
    # refuses a size that does not fit); they get 6.5 times, at least 6 GiB.
    e2e_mem=$(echo "$redis_mib,$redis_lat_mib" | tr , '\n' |
        awk 'BEGIN { m = 0 } $1 > m { m = $1 } END { n = int((m * 6.5 + 1023) / 1024) * 1024; print (n > 6144 ? n : 6144) }')
}
set_tier
e2e_smp=2
scale=1
debug_scale=0.25
stress=12
forktime=512,1024,2048,4096
forktest=$out/bin/forktest
initramfs=$out/initramfs.cpio
extra_steps="stress-fork stress-vfork stress-mmap stress-mremap redis-bgsave"

# Seconds left of KERNEL_BUDGET (a large number when there is none).
budget_left() {
    [ -n "${KERNEL_BUDGET:-}" ] || { echo 999999; return; }
    awk -v b="$KERNEL_BUDGET" -v u="$(since "$t_start")" 'BEGIN { printf "%d", b - u }'
}

# A phase may start only inside the budget; an overrun names the phase.
over_budget() {
    echo "kernel-test: OVER BUDGET: phase '$1' $2; KERNEL_BUDGET=$KERNEL_BUDGET s, $(since "$t_start") s used." >&2
    echo "  Raise KERNEL_BUDGET, or run a part (KERNEL_TESTS); phase times so far:" >&2
    echo "  $results/phases.tsv" >&2
    failed_runs+=("budget:$1")
    report || true
    exit 3
}

# phase NAME CMD...: run CMD (a function or a program) as a named phase:
# timed into phases.tsv, refused when the budget is spent, failed with the
# phase's name when it ends past the budget.
phase() {
    local name=$1 t0 rc=0
    shift
    [ "$(budget_left)" -gt 0 ] || over_budget "$name" "could not start"
    t0=$(date +%s.%N)
    printf '%s\n' "$name" >"$results/current-phase"
    "$@" || rc=$?
    printf '%s\t%s\t%s\n' "$name" "$(since "$t0")" "$rc" >>"$results/phases.tsv"
    [ "$(budget_left)" -gt 0 ] || over_budget "$name" "ran past the end of the budget"
    return "$rc"
}

# The budget as a command's time limit, at most $1 s.
limit() {
    local left
    left=$(budget_left)
    [ "$left" -lt "$1" ] && echo "$left" || echo "$1"
}

start_results() {
    results=$out/results/$(date +%Y%m%d-%H%M%S)
    mkdir -p "$results"
    exec > >(tee "$results/summary.txt") 2>&1
    echo "kernel-test: results in $results"
}

prepare_source() {
    local deb t0
    heading "Linux 6.12 source"
    t0=$(date +%s.%N)
    deb=$("$here/fetch-kernel.sh")
    "$here/kernel-tree.sh" prepare "$deb"
    kernel_version=$("$here/kernel-tree.sh" version)
    "$here/kernel-tree.sh" base | tee "$results/base.txt"
    cp "$out/patched/drift.txt" "$results/drift.txt" 2>/dev/null || true
    echo "source ready in $(since "$t0") s: Linux $kernel_version"
    echo "SOURCE_SECONDS=$(since "$t0")" >"$results/source.env"
}

# Every patch of the series must be checkpatch --strict clean.
checkpatch_series() {
    local p bad=0
    heading "checkpatch --strict: patches/"
    for p in "$contrib"/patches/*.patch; do
        [ -f "$p" ] || continue
        # The cover letter is prose, not a patch.
        [ "$(basename "$p")" = 0000-cover-letter.patch ] && continue
        # From the kernel tree: run inside another git checkout (ours),
        # checkpatch takes that repository for the one it checks.
        if (cd "$out/patched/linux" && ./scripts/checkpatch.pl --strict --no-tree -q "$p") \
            >"$results/checkpatch-$(basename "$p" .patch).txt" 2>&1; then
            echo "  clean: $(basename "$p")"
        else
            echo "  NOT CLEAN: $(basename "$p")"
            sed 's/^/    /' "$results/checkpatch-$(basename "$p" .patch).txt"
            bad=1
        fi
    done
    [ "$bad" = 0 ] || failed_runs+=("checkpatch")
}

# build_one NAME TREE [FRAGMENT...]: one kernel, cut at the budget's end.
# build_one [--targets "T..."] NAME TREE [FRAGMENT...]
build_one() {
    local targets=() name tree obj
    [ "$1" != --targets ] || { targets=(--targets "$2"); shift 2; }
    name=$1 tree=$2
    shift 2
    obj=$out/$tree/obj$([ "$name" = "$tree" ] || echo "-$name")
    timeout -k 10 "$(limit 86400)" "$here/build-kernel.sh" "${targets[@]}" "$tree" "$name" "$@" ||
        die "the $name kernel did not build (see above)."
    cp "$obj/afork-build.env" "$results/build-$name.env"
}

# Whether kernel $1 is booted by this run: a suite run, the Redis boot, the
# mm selftests; build, full and e2e build stock and patched always.
needs_kernel() {
    case $tier:$1 in build:stock | build:patched | full:stock | full:patched) return 0 ;; esac
    printf '%s\n' $runs | cut -d: -f1 | grep -qx "$1" && return 0
    [ "$e2e_kernel" = "$1" ] && return 0
    [ "$selftests" != 0 ] && case " $selftests_boots " in *" $1 "* | *" $1-off "*) return 0 ;; esac
    return 1
}

build_kernels() {
    if needs_kernel stock; then
        heading "build: stock kernel"
        phase "build stock" build_one stock stock
    fi
    if needs_kernel patched; then
        heading "build: patched kernel (CONFIG_ASYNC_FORK=y)"
        phase "build patched" build_one patched patched "$contrib/config/async-fork.config"
    fi
    # The series with the feature configured out: everything it touches
    # (mm/, kernel/, arch/x86/mm/) must still compile. Only those
    # directories, to keep CI short: the rest is the stock code.
    if [ "$tier" != kasan ]; then
        heading "build: patched tree, CONFIG_ASYNC_FORK off (mm/ kernel/ arch/x86/mm/)"
        phase "build noasync" build_one --targets "mm/ kernel/ arch/x86/mm/" noasync patched
    fi
    if [ "$tier" = build ] || needs_kernel debug; then
        heading "build: patched debug kernel (PROVE_LOCKING, DEBUG_VM, DEBUG_VM_PGFLAGS)"
        phase "build debug" build_one debug patched "$contrib/config/async-fork.config" \
            "$contrib/config/debug.config"
    fi
    if printf '%s\n' $runs | grep -q '^kasan'; then
        heading "build: patched KASAN kernel (debug + KASAN, DEBUG_PAGEALLOC, PREEMPT)"
        phase "build kasan" build_kasan
    fi
}

# The KASAN build (build-kasan.sh knows its fragments), cut at the budget's end.
build_kasan() {
    timeout -k 10 "$(limit 86400)" "$here/build-kasan.sh" patched ||
        die "the kasan kernel did not build (see above)."
    cp "$out/patched/obj-kasan/afork-build.env" "$results/build-kasan.env"
}

# Touch mm/memory.c in the patched tree and rebuild: the edit-compile loop.
rebuild_probe() {
    [ "$probe" = 1 ] || return 0
    [ -f "$(image_of patched)" ] || return 0
    heading "rebuild probe: touch mm/memory.c in the patched tree, rebuild"
    touch "$out/patched/linux/mm/memory.c"
    mv "$results/build-patched.env" "$results/build-patched.env.keep"
    build_one patched patched "$contrib/config/async-fork.config"
    mv "$results/build-patched.env" "$results/build-probe.env"
    mv "$results/build-patched.env.keep" "$results/build-patched.env"
}

build_forktest() {
    heading "build: forktest (static test suite)"
    mkdir -p "$(dirname "$forktest")"
    gcc -static -O2 -pthread -Wall -Wextra -Werror -o "$forktest.tmp" "$contrib"/tests/*.c ||
        die "the test suite does not compile."
    mv "$forktest.tmp" "$forktest"
    echo "$forktest: $("$forktest" list | wc -l) tests"
}

build_initramfs() {
    heading "build: initramfs"
    "$here/build-initramfs.sh" "$forktest" "$initramfs"
}

# The steps every run must report, in order.
expected_steps() {
    if [ "$tests" = all ]; then
        echo "$("$forktest" list | tr '\n' ' ')$extra_steps"
    else
        echo "$tests" | tr , ' '
    fi
}

# A boot that runs nothing: the time from QEMU start to power-off, on the
# stock kernel (the first run's when there is none).
measure_boot() {
    local kernel=stock
    [ -f "$(image_of stock)" ] || kernel=$(printf '%s\n' $runs | head -n 1 | cut -d: -f1)
    heading "boot time: $kernel kernel, no tests, to power-off"
    "$here/boot.sh" --kernel "$(image_of "$kernel")" --initrd "$initramfs" \
        --out "$results/boot-only" --label boot-only --tests none --expect "" \
        --timeout "$(limit 300)"
}

image_of() {
    case $1 in
    debug | kasan) echo "$out/patched/obj-$1/arch/x86/boot/bzImage" ;;
    *) echo "$out/$1/obj/arch/x86/boot/bzImage" ;;
    esac
}

# Run label: the kernel alone, or kernel-mode.
run_label() {
    local kernel mode
    IFS=: read -r kernel mode _ <<<"$1"
    echo "$kernel${mode:+-$mode}"
}

run_suite() {
    local spec=$1 kernel mode sysctls flag label args=()
    IFS=: read -r kernel mode sysctls flag <<<"$spec"
    label=$(run_label "$spec")
    [ -f "$(image_of "$kernel")" ] || die "run '$spec': no $kernel kernel built."
    local run_scale=$scale run_forktime=$forktime
    if [ "$kernel" = debug ] || [ "$kernel" = kasan ]; then
        # Lockdep, DEBUG_VM and KASAN checks, not timings: smaller and faster.
        run_scale=$debug_scale
        run_forktime=512
    fi
    # Two NUMA nodes, a CPU each: cpuset-mems moves a parent between them.
    args=(--kernel "$(image_of "$kernel")" --initrd "$initramfs" --out "$results/$label"
          --label "$label" --mode "${mode:-default}" --tests "$tests" --scale "$run_scale"
          --numa 2
          --stress "$stress" --forktime "$run_forktime" --timeout "$(limit "$boot_timeout")"
          --expect "$(expected_steps)")
    [ -n "$sysctls" ] && args+=(--sysctl "$sysctls")
    [ "$flag" = prctl ] && args+=(--prctl)
    # The debug builds carry the KUnit tests of the patch (config/debug.config).
    case $kernel in debug | kasan) args+=(--kunit async_fork) ;; esac
    heading "suite: $label"
    "$here/boot.sh" "${args[@]}" || failed_runs+=("$label")
}

# The kernel's mm selftests, stock vs patched (=2), or in test the debug
# kernel off vs on: kernel-selftests.sh, which finds the kernels built and
# keeps its results in mm-selftests/ of this run's (its problems.txt: what
# fails only with the feature on); a program that fails only with the
# feature on runs twice more on both.
mm_selftests() {
    [ "$selftests" != 0 ] || return 0
    heading "mm selftests: ${selftests_boots/ / vs } vm.async_fork=2 ($(echo "$selftests" | tr , '\n' | wc -l) steps)"
    "$here/kernel-selftests.sh" --steps "$selftests" --boots "$selftests_boots" \
        --repeat "$selftests_repeat" --timeout "$(limit "$selftests_timeout")" \
        --step-timeout "$selftests_step_timeout" --results "$results/mm-selftests" ||
        failed_runs+=("mm-selftests")
}

# A Redis end-to-end boot: the steps given, with the experiment's settings.
e2e_boot() {
    local kernel=$1 label=$2 steps=$3 boot_limit step_limit
    shift 3
    # A step that hangs is killed inside the guest, a minute before the
    # boot's own limit, so that the guest still reports it and powers off.
    boot_limit=$(limit "$boot_timeout")
    step_limit=$((boot_limit > 120 ? boot_limit - 60 : boot_limit))
    heading "redis end to end: $label ($steps; consistency $redis_mib MiB x $redis_rounds, latency $redis_lat_mib MiB x $redis_lat_rounds rounds, $e2e_smp vCPUs, $e2e_mem MiB)"
    "$here/boot.sh" --kernel "$(image_of "$kernel")" --initrd "$initramfs" \
        --out "$results/$label" --label "$label" --mode e2e --tests "$steps" --smp "$e2e_smp" \
        --mem "$e2e_mem" \
        --expect "$(echo "$steps" | tr , ' ')" --timeout "$boot_limit" \
        --append "afork.redis_mib=$redis_mib afork.redis_lat_mib=$redis_lat_mib afork.redis_lat_rounds=$redis_lat_rounds afork.redis_rounds=$redis_rounds afork.timeout=$step_limit${e2e_cells:+ afork.e2e_cells=$e2e_cells}" \
        "$@" || failed_runs+=("$label")
}

# One Redis boot, vm.async_fork=2: consistency on the debug kernel (test),
# or on the patched kernel with the short experiment whose redis-afork cells
# must not be worse than stock's (full).
redis_e2e() {
    [ "$e2e_kernel" != none ] || return 0
    phase "e2e $e2e_kernel" e2e_boot "$e2e_kernel" "e2e-$e2e_kernel" "$e2e_steps" \
        --sysctl vm.async_fork=2
}

# make kernel-e2e: the whole experiment, one boot per kernel mode; the
# patched boot also runs the full consistency check (20 rounds) and the
# idle fork-cost step (redis-forkcost, at the first latency size).
redis_experiment() {
    local boot
    e2e_labels=''
    for boot in stock patched optin; do
        e2e_labels="$e2e_labels e2e-$boot"
        case $boot in
        stock) phase "e2e stock" e2e_boot stock e2e-stock redis-latency ;;
        patched) phase "e2e patched" e2e_boot patched e2e-patched \
                     redis-consistency,redis-latency,redis-forkcost --sysctl vm.async_fork=2 ;;
        optin) phase "e2e opt-in" e2e_boot patched e2e-optin redis-latency --sysctl vm.async_fork=1 ;;
        esac
    done
}

host_fork_time() {
    [ "$host" = 1 ] || return 0
    [[ ",$tests," == *,fork-time,* ]] || [ "$tests" = all ] || return 0
    heading "fork-time on the host ($(uname -r)), same program, same sizes"
    mkdir -p "$results/host"
    AFORK_FORKTIME_MIB=$(echo "$forktime" | tr , ' ') nice -n "$nice_level" \
        "$forktest" run fork-time | tee "$results/host/console.log" || failed_runs+=("host")
    sed -n 's/^AFORK-FORKTIME //p' "$results/host/console.log" |
        awk '{ for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
               print v["mib"] "\t" v["reps"] "\t" v["fork_median_us"] "\t" v["fork_max_us"] "\t" v["ready_median_us"] "\t" v["ready_max_us"] }' \
        >"$results/host/forktime.tsv"
}


print_builds() {
    local f name
    echo "Kernel: Linux $kernel_version"
    echo "Source (fetch, unpack, git trees): $(env_value "$results/source.env" SOURCE_SECONDS) s"
    for name in stock patched noasync debug kasan probe; do
        f=$results/build-$name.env
        [ -f "$f" ] || continue
        printf 'Build %-8s %4s s (%s%s), ccache %s hits / %s misses\n' "$name:" \
            "$(env_value "$f" BUILD_SECONDS)" "$(env_value "$f" BUILD_KIND)" \
            "$([ "$name" = probe ] && echo ', after touching mm/memory.c')" \
            "$(env_value "$f" BUILD_CCACHE_HITS)" "$(env_value "$f" BUILD_CCACHE_MISSES)"
    done
}

print_runs() {
    local spec label f accel
    f=$results/boot-only/run.env
    accel=$(env_value "$f" RUN_ACCEL)
    echo "Accelerator: ${accel:-?} ($(grep -qwE 'vmx|svm' /proc/cpuinfo && echo 'vmx/svm present' || echo 'no vmx/svm in /proc/cpuinfo'))"
    [ -f "$f" ] && echo "Boot to power-off (no tests, kernel $(env_value "$f" RUN_KERNEL)): $(env_value "$f" RUN_WALL_SECONDS) s (init started at guest uptime $(env_value "$f" RUN_INIT_UPTIME))"
    for spec in $runs; do
        label=$(run_label "$spec")
        f=$results/$label/run.env
        [ -f "$f" ] || continue
        echo "Suite $label: $(fmt_duration "$(env_value "$f" RUN_WALL_SECONDS)") wall, kernel $(env_value "$f" RUN_KERNEL), mode $(env_value "$f" RUN_MODE)"
    done
    for label in $e2e_labels; do
        f=$results/$label/run.env
        [ ! -f "$f" ] || echo "Redis end to end $label: $(fmt_duration "$(env_value "$f" RUN_WALL_SECONDS)") wall"
    done
}

# Table: step x run -> PASS/FAIL (missing = FAIL).
print_test_table() {
    local spec label step verdict row
    printf '\n%-18s' "test"
    for spec in $runs; do printf ' %-14s' "$(run_label "$spec")"; done
    printf '\n'
    for step in $(expected_steps); do
        row=$(printf '%-18s' "$step")
        for spec in $runs; do
            label=$(run_label "$spec")
            verdict=$(awk -F'\t' -v s="$step" '$1 == s { print $2 " " $3 }' "$results/$label/results.tsv" 2>/dev/null)
            row+=$(printf ' %-14s' "${verdict:-FAIL -}")
        done
        echo "$row"
    done
}

# "median / max (ready median)" in ms for SIZE from a forktime.tsv, or "-".
forktime_cell() {
    local cell=-
    if [ -f "$1" ]; then
        cell=$(awk -F'\t' -v m="$2" '$1 == m { printf "%.2f / %.2f (%.2f)", $3 / 1000, $4 / 1000, $5 / 1000 }' "$1")
    fi
    printf ' %-26s' "${cell:--}"
}

# Table: size -> median / max fork time (ms) per run, host last.
print_forktime_table() {
    local spec label cols=() sizes size row
    for spec in $runs; do cols+=("$(run_label "$spec")"); done
    [ -f "$results/host/forktime.tsv" ] && cols+=(host)
    sizes=$(echo "$forktime" | tr , ' ')
    printf '\nfork() time in ms, median / max of the forks per size (child first runs after: median)\n'
    printf '%-8s' "MiB"
    for label in "${cols[@]}"; do printf ' %-26s' "$label"; done
    printf '\n'
    for size in $sizes; do
        row=$(printf '%-8s' "$size")
        for label in "${cols[@]}"; do
            row+=$(forktime_cell "$results/$label/forktime.tsv" "$size")
        done
        # A size no run measured (the debug runs fork 512 MiB only).
        [ -n "$(echo "${row#"$size"}" | tr -d ' -')" ] && echo "$row"
    done
    return 0
}

# The experiment's table (scripts/e2e-table.py), a plot, and in CI the
# check that redis-afork is not worse than stock on the patched kernel.
print_redis_tables() {
    local f py=python3 check=()
    [ "$e2e_kernel" != none ] || return 0
    f=$results/e2e-$e2e_kernel/console.txt
    if [ -f "$f" ]; then
        printf '\nredis-consistency (%s kernel, vm.async_fork=2, redis-afork, %s MiB): %s of %s rounds equal\n' \
            "$e2e_kernel" "$redis_mib" \
            "$(grep -c 'AFORK-CONSISTENCY .*equal=1' "$f")" "$(grep -c 'AFORK-CONSISTENCY ' "$f")"
    fi
    [[ ,$e2e_steps, == *,redis-latency,* ]] || [ "$tier" = e2e ] || return 0
    [ -x "$top/build/bench-venv/bin/python3" ] && py=$top/build/bench-venv/bin/python3
    [ "$tier" = e2e ] || check=(--check)
    "$py" "$here/e2e-table.py" "$results" $e2e_labels --plot "$results/e2e.png" "${check[@]}" ||
        failed_runs+=("redis-latency-vs-stock")
}

# fork() median of stock over patched-all per size: the speed-up.
print_speedup() {
    local a=$results/stock/forktime.tsv b=$results/patched-all/forktime.tsv
    [ -f "$a" ] && [ -f "$b" ] || return 0
    printf '\nfork() median, stock kernel / patched with vm.async_fork=2 (same guest, same program):\n'
    awk -F'\t' 'NR == FNR { s[$1] = $3; next }
        ($1 in s) && $3 > 0 { printf "  %6s MiB: %8.2f ms / %6.3f ms = %6.0fx (child copies for %.1f ms)\n", $1, s[$1] / 1000, $3 / 1000, s[$1] / $3, $5 / 1000 }' "$a" "$b"
}

# "series base X, source Y" and, loudly, the hunks that needed fuzz.
print_base() {
    cat "$results/base.txt" 2>/dev/null || echo "series base ?, source ? (no source prepared)"
}

# Seconds per phase, in the order they ran.
print_phases() {
    [ -f "$results/phases.tsv" ] || return 0
    printf '\nphase times (s):\n'
    awk -F'\t' '{ printf "  %-22s %8.1f%s\n", $1, $2, ($3 == 0 ? "" : "  (exit " $3 ")") }' "$results/phases.tsv"
    printf '  %-22s %8.1f\n' "total" "$(since "$t_start")"
}

# The reasons of each failed run, last, where a CI log's tail shows them.
print_problems() {
    local label f
    for label in "${failed_runs[@]}"; do
        f=$results/$label/problems.txt
        [ -s "$f" ] || continue
        echo "$label:"
        head -n 8 "$f" | sed 's/^/  /'
    done
}

# What failed once on the patched kernel only and not again in the repeats:
# counted like any other failure, and named where a CI log's tail shows it.
print_flaky() {
    local f=$results/mm-selftests/flaky.txt
    [ -s "$f" ] || return 0
    echo "mm-selftests: FLAKY (failed once with the feature on only, not again in the repeats; counted):"
    head -n 8 "$f" | sed 's/^/  /'
}

report() {
    heading "summary"
    print_base
    print_builds
    print_runs
    print_test_table
    print_forktime_table
    print_speedup
    print_redis_tables
    print_phases
    echo
    [ ! -s "$results/drift.txt" ] ||
        echo "kernel-test: DRIFT: the series was applied with fuzz to this source (see above, $results/drift.txt); refresh it: make kernel-patches"
    print_flaky
    if [ "${#failed_runs[@]}" -gt 0 ]; then
        print_problems
        echo "kernel-test: FAILED: ${failed_runs[*]} (details above and in $results)"
        return 1
    fi
    echo "kernel-test: all runs passed ($(fmt_duration "$(since "$t_start")") in all); results in $results"
}

e2e_labels=e2e-$e2e_kernel
t_start=$(date +%s.%N)
failed_runs=()
kernel_version='?'
start_results
phase source prepare_source
if [ "$tier" = e2e ]; then
    heading "build: stock and patched kernels"
    phase "build stock" build_one stock stock
    phase "build patched" build_one patched patched "$contrib/config/async-fork.config"
    phase "build forktest" build_forktest
    phase initramfs build_initramfs
    redis_experiment
    heading "summary"
    print_base
    print_runs
    print_redis_tables
    print_phases
    [ "${#failed_runs[@]}" -eq 0 ] || { echo "kernel-test: FAILED: ${failed_runs[*]}"; exit 1; }
    echo "kernel-test: the experiment ran ($(fmt_duration "$(since "$t_start")")); results in $results"
    exit 0
fi
phase checkpatch checkpatch_series
build_kernels
phase "build forktest" build_forktest
phase initramfs build_initramfs
[ "$tier" = build ] && { print_base; print_phases; exit 0; }
phase "rebuild probe" rebuild_probe
phase "boot only" measure_boot || failed_runs+=("boot-only")
for spec in $runs; do
    phase "suite $(run_label "$spec")" run_suite "$spec"
done
phase "mm selftests" mm_selftests
redis_e2e
phase "host fork-time" host_fork_time
report
