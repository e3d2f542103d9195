#!/usr/bin/env bash
# boot.sh -- boot one guest kernel under QEMU with the test initramfs, wait
# for it to power off (wall-clock limit), and judge the serial console log.
#
#   boot.sh --kernel BZIMAGE --initrd CPIO --out DIR [options]
#
# Options:
#   --label NAME        name of this run in messages (default: guest)
#   --mode LABEL        mode label passed to the guest (afork.mode)
#   --sysctl K=V[,K=V]  sysctls the guest sets before the tests (vm.async_fork=1)
#   --prctl             tests opt in with prctl(PR_SET_ASYNC_FORK, 1)
#   --append "WORDS"    extra kernel command line
#   --tests LIST        comma list of steps, "all" (default) or "none"
#   --expect "NAMES"    steps that must report PASS (default: the guest's plan)
#   --scale F           size/iteration factor of the suite (default 1)
#   --inject T1,T2|all  deliberately break these steps inside the guest
#   --stress SECS       seconds per stress-ng stressor (default 20)
#   --forktime MIBS     comma list of fork-time sizes (default 512,1024,2048,4096)
#   --timeout SECS      wall-clock limit for the whole boot (default 1800)
#   --mem MIB           guest RAM (default 6144, the most allowed here)
#   --smp N             guest CPUs (default 2)
#   --numa N            N NUMA nodes (default: none, one node), the RAM and
#                       the CPUs split evenly between them (N must divide
#                       both), a CPU socket per node (CPUs of one socket in
#                       two nodes make the kernel warn); for the kernel's
#                       migration selftests and cpuset-mems (make kernel-test
#                       and make kernel-boot boot the suite with 2)
#   --kunit SUITES      comma list of KUnit suites built into the kernel: each
#                       must report "ok" on the console (they run at boot)
# Environment: AFORK_ACCEL=kvm|tcg forces the accelerator.
#
# Writes into DIR: console.log (the serial console), results.tsv
# (step, PASS/FAIL, seconds, reason), forktime.tsv, run.env, problems.txt.
# Exit status 0 only when every expected step passed and the console shows no
# panic, hang, kernel splat or missing result.
set -euo pipefail

prog=kernel/boot die_status=2
. "$(dirname "$0")/lib.sh"
# A console line that fails the run: a timestamped kernel message of splat.ere.
splat_re="^.*\[ *[0-9]+\.[0-9]+\] .*($splat_ere)"

parse_args() {
    kernel='' initrd='' out='' label='' mode=default sysctls='' prctl=0 append='' tests=all
    expect='' scale=1 inject='' stress=20 forktime=512,1024,2048,4096 timeout=1800
    mem=6144 smp=2 kunit='' numa=0
    while [ $# -gt 0 ]; do
        case $1 in
        --kernel) kernel=$2; shift ;;
        --initrd) initrd=$2; shift ;;
        --out) out=$2; shift ;;
        --label) label=$2; shift ;;
        --mode) mode=$2; shift ;;
        --sysctl) sysctls=$2; shift ;;
        --prctl) prctl=1 ;;
        --append) append=$2; shift ;;
        --tests) tests=$2; shift ;;
        --expect) expect=$2; shift ;;
        --scale) scale=$2; shift ;;
        --inject) inject=$2; shift ;;
        --stress) stress=$2; shift ;;
        --forktime) forktime=$2; shift ;;
        --timeout) timeout=$2; shift ;;
        --mem) mem=$2; shift ;;
        --smp) smp=$2; shift ;;
        --kunit) kunit=$2; shift ;;
        --numa) numa=$2; shift ;;
        *) die "unknown option $1 (see the header of $0)" ;;
        esac
        shift
    done
    [ -f "$kernel" ] || die "--kernel: no kernel image at '$kernel'."
    [ -f "$initrd" ] || die "--initrd: no initramfs at '$initrd'."
    [ -n "$out" ] || die "--out DIR is required."
    [ -n "$label" ] || label=guest
    if [ "$numa" -gt 0 ] && { [ $((mem % numa)) -ne 0 ] || [ $((smp % numa)) -ne 0 ]; }; then
        die "--numa $numa must divide --mem $mem and --smp $smp."
    fi
}

# --numa N: a RAM backend and a node per node, CPUs in contiguous ranges.
qemu_numa_args() {
    local i per_cpu=$((smp / numa))
    for ((i = 0; i < numa; i++)); do
        printf -- '-object memory-backend-ram,id=afork-node%d,size=%dM ' "$i" $((mem / numa))
        printf -- '-numa node,nodeid=%d,cpus=%d-%d,memdev=afork-node%d ' "$i" \
            $((i * per_cpu)) $(((i + 1) * per_cpu - 1)) "$i"
    done
}

# KVM only where the CPU really offers it (vmx/svm) and /dev/kvm is usable.
choose_accel() {
    if [ -n "${AFORK_ACCEL:-}" ]; then
        echo "$AFORK_ACCEL"
    elif grep -qwE 'vmx|svm' /proc/cpuinfo && [ -r /dev/kvm ] && [ -w /dev/kvm ]; then
        echo kvm
    else
        echo tcg
    fi
}

qemu_accel_args() {
    case $1 in
    kvm) echo "-accel kvm -cpu host" ;;
    tcg) echo "-accel tcg,thread=multi -cpu max" ;;
    *) die "AFORK_ACCEL must be kvm or tcg, not '$1'." ;;
    esac
}

kernel_cmdline() {
    # Two RAM disks of 256 MiB: ram0 is the guest's swap, ram1 a disk for
    # O_DIRECT (pinned-during-session).
    local words="console=ttyS0 panic=-1 brd.rd_nr=2 brd.rd_size=262144"
    words+=" afork.mode=$mode afork.tests=$tests afork.scale=$scale afork.stress=$stress"
    words+=" afork.forktime=$forktime afork.prctl=$prctl"
    [ -n "$sysctls" ] && words+=" afork.sysctl=$sysctls"
    [ -n "$inject" ] && words+=" afork.inject=$inject"
    # Under TCG the clocksource watchdog finds the TSC skewed against the
    # HPET now and then and switches to the HPET, whose reads trap, so that
    # identical boots time differently. tsc=reliable keeps the TSC (no
    # watchdog on it).
    [ "$accel" = tcg ] && words+=" tsc=reliable"
    [ -n "$append" ] && words+=" $append"
    echo "$words"
}

# x86's COMMAND_LINE_SIZE: the kernel cuts a longer command line, and the
# guest would then read a cut word (a sysctl, a step name) as asked.
cmdline_max=2047

check_cmdline() {
    local n
    n=$(kernel_cmdline | wc -c)
    [ "$n" -le "$cmdline_max" ] ||
        die "the kernel command line would be $((n - 1)) bytes, over the kernel's $cmdline_max:" \
            "the kernel would cut it. Ask for fewer steps (--tests) or a shorter --append."
}

# Show result lines while the guest runs.
follow_progress() {
    tail -n +1 -F --pid="$1" "$out/console.log" 2>/dev/null |
        grep --line-buffered -E 'AFORK-(BEGIN|RESULT|ERROR|SYSCTL)|AFORK-FORKTIME' |
        sed -u "s/^/  [$label] /" || true
}

run_qemu() {
    local accel=$1 qpid fpid start end
    : >"$out/console.log"
    start=$(date +%s.%N)
    # shellcheck disable=SC2046
    nice -n "$nice_level" timeout -k 10 "$timeout" qemu-system-x86_64 \
        -machine pc $(qemu_accel_args "$accel") -smp "$smp$([ "$numa" -gt 0 ] && echo ",sockets=$numa")" \
        -m "$mem" $([ "$numa" -gt 0 ] && qemu_numa_args) \
        -nodefaults -display none -no-reboot -monitor none \
        -serial "file:$out/console.log" \
        -kernel "$kernel" -initrd "$initrd" -append "$(kernel_cmdline)" \
        >"$out/qemu.log" 2>&1 &
    qpid=$!
    follow_progress "$qpid" &
    fpid=$!
    qemu_rc=0
    wait "$qpid" || qemu_rc=$?
    wait "$fpid" 2>/dev/null || true
    end=$(date +%s.%N)
    wall=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }')
}

problem() {
    printf '%s\n' "$*" >>"$out/problems.txt"
}

# The console log without the serial line's carriage returns (made once).
clean_console() { tr -d '\r' <"$out/console.log" >"$out/console.txt"; }

last_started_step() {
    local step
    step=$(sed -n 's/^.*AFORK-START \([^ ]*\).*$/\1/p' "$con" | tail -n 1)
    echo "${step:-none}"
}

check_console() {
    local splats
    if [ "$qemu_rc" -eq 124 ] || [ "$qemu_rc" -eq 137 ]; then
        problem "HANG: no power-off within $timeout s (last step started: $(last_started_step))"
    elif [ "$qemu_rc" -ne 0 ]; then
        problem "QEMU failed with status $qemu_rc: $(tail -n 3 "$out/qemu.log" | tr '\n' ' ')"
    fi
    if grep -q 'Kernel panic' "$con"; then
        problem "PANIC: $(grep -m1 'Kernel panic' "$con" | sed 's/^.*\] //')"
    fi
    # gup_test's dump_pages() case dumps pages on purpose.
    splats=$(grep -E "$splat_re" "$con" | grep -v 'Kernel panic' |
        grep -v 'gup_test: dump_pages() test' | head -n 20 || true)
    [ -z "$splats" ] || problem "KERNEL SPLAT on the console:" "$splats"
    grep -q 'AFORK-BEGIN' "$con" || problem "the guest init never started (no AFORK-BEGIN)"
    grep -q 'AFORK-END' "$con" ||
        problem "the guest stopped before the end (no AFORK-END; last step started: $(last_started_step))"
    if grep -q 'AFORK-DMESG splat' "$con"; then
        problem "the guest's dmesg holds a kernel splat"
    fi
    check_kunit
    sed -n 's/^.*AFORK-ERROR /guest error: /p' "$con" |
        while read -r line; do problem "$line"; done
    return 0
}

# KUnit prints each suite's verdict as a top-level KTAP line, "ok N SUITE"
# or "not ok N SUITE" (a suite whose tests were all skipped ends in "# SKIP"
# and does not count as passed).
check_kunit() {
    local suite
    for suite in ${kunit//,/ }; do
        if grep -Eq "\] not ok [0-9]+ $suite\$" "$con"; then
            problem "KUnit suite $suite failed:" \
                "$(grep -E '\] +not ok |EXPECTATION FAILED|Expected ' "$con" | sed 's/^.*\] *//' | head -n 8)"
        elif ! grep -Eq "\] ok [0-9]+ $suite\$" "$con"; then
            problem "KUnit suite $suite: no verdict on the console (is it built in?)"
        fi
    done
}

# results.tsv: one line per expected step, FAIL when missing or not clean.
collect_results() {
    local step line verdict secs reason status
    [ -n "$expect" ] || expect=$(sed -n 's/^.*AFORK-PLAN //p' "$con" | tail -n 1)
    : >"$out/results.tsv"
    for step in $expect; do
        line=$({ grep -E "AFORK-RESULT $step (PASS|FAIL)" "$con" || true; } | tail -n 1)
        status=$(sed -n "s/^.*AFORK-EXIT $step \([0-9]*\)$/\1/p" "$con" | tail -n 1)
        if [ -z "$line" ]; then
            verdict=FAIL secs=- reason="missing result line (exit status ${status:-none})"
            problem "$step: missing result line (exit status ${status:-none})"
        else
            verdict=$(awk '{print $2}' <<<"${line#*AFORK-RESULT }")
            secs=$(awk '{print $3}' <<<"${line#*AFORK-RESULT }")
            reason=$(cut -d' ' -f4- <<<"${line#*AFORK-RESULT }")
            if [ "$verdict" = PASS ] && [ "${status:-0}" != 0 ]; then
                verdict=FAIL reason="passed but exited with status $status"
            fi
            [ "$verdict" = PASS ] || problem "$step: FAIL $reason"
        fi
        printf '%s\t%s\t%s\t%s\n' "$step" "$verdict" "$secs" "$reason" >>"$out/results.tsv"
    done
}

collect_forktime() {
    sed -n 's/^.*AFORK-FORKTIME //p' "$con" |
        awk '{ for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
               print v["mib"] "\t" v["reps"] "\t" v["fork_median_us"] "\t" v["fork_max_us"] "\t" v["ready_median_us"] "\t" v["ready_max_us"] }' \
        >"$out/forktime.tsv"
}

write_env() {
    {
        echo "RUN_LABEL=$label"
        echo "RUN_MODE=$mode"
        echo "RUN_SYSCTL=$sysctls"
        echo "RUN_PRCTL=$prctl"
        echo "RUN_ACCEL=$1"
        echo "RUN_KERNEL=$(sed -n 's/^.*AFORK-BEGIN kernel=\([^ ]*\).*$/\1/p' "$con" | head -n 1)"
        echo "RUN_WALL_SECONDS=$wall"
        echo "RUN_INIT_UPTIME=$(sed -n 's/^.*AFORK-BEGIN.* uptime=\([^ ]*\).*$/\1/p' "$con" | head -n 1)"
        echo "RUN_QEMU_STATUS=$qemu_rc"
        echo "RUN_PROBLEMS=$(grep -c . "$out/problems.txt" || true)"
    } >"$out/run.env"
}

parse_args "$@"
command -v qemu-system-x86_64 >/dev/null || die "qemu-system-x86_64 is missing: apt-get install qemu-system-x86"
mkdir -p "$out"
: >"$out/problems.txt"
accel=$(choose_accel)
check_cmdline
echo "kernel/boot[$label]: $(basename "$kernel") under QEMU ($accel, $smp CPUs, $mem MiB$([ "$numa" -gt 0 ] && echo ", $numa NUMA nodes")), mode=$mode${sysctls:+ sysctl=$sysctls}$( [ "$prctl" = 1 ] && echo ' prctl')${inject:+ inject=$inject}"
run_qemu "$accel"
con=$out/console.txt
clean_console
check_console
collect_results
collect_forktime
write_env "$accel"
if [ -s "$out/problems.txt" ]; then
    echo "kernel/boot[$label]: FAILED after $wall s ($accel); see $out/console.log" >&2
    sed 's/^/  /' "$out/problems.txt" >&2
    exit 1
fi
echo "kernel/boot[$label]: all $(wc -l <"$out/results.tsv") steps passed in $wall s ($accel)"
