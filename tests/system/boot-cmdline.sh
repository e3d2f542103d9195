#!/usr/bin/env bash
# boot-cmdline.sh -- the kernel harness's boot.sh refuses a guest kernel
# command line longer than x86 takes (2047 bytes) before it starts QEMU:
# the kernel would cut it, and the guest would read a cut word (a sysctl,
# a step) as asked. A stand-in qemu-system-x86_64 on PATH records whether
# boot.sh got as far as starting it; no guest boots.
. "$(dirname "$0")/lib.sh"

boot=$top/contrib/async-fork/scripts/boot.sh
mkdir -p "$work/bin"
cat >"$work/bin/qemu-system-x86_64" <<'QEMU'
#!/bin/sh
echo started >"$QEMU_MARK"
exit 1
QEMU
chmod +x "$work/bin/qemu-system-x86_64"
: >"$work/bzImage" && : >"$work/initrd"
export QEMU_MARK=$work/qemu-started PATH=$work/bin:$PATH AFORK_ACCEL=tcg

steps() { python3 -c "import sys; print(','.join('mm-khugepaged@%d' % i for i in range(int(sys.argv[1]))))" "$1"; }
run_boot() {
    rm -f "$QEMU_MARK"
    "$boot" --kernel "$work/bzImage" --initrd "$work/initrd" --out "$work/out" \
        --sysctl vm.async_fork=2 --tests "$1" --timeout 5
}

expect_fail "boot.sh refuses a command line of 120 steps, naming the limit" \
    "command line would be [0-9]+ bytes, over the kernel's 2047" run_boot "$(steps 120)"
if [ -e "$QEMU_MARK" ]; then
    err "boot.sh refuses before QEMU starts" "QEMU was started"
else
    ok "boot.sh refuses before QEMU starts"
fi

# 15 steps fit: boot.sh goes on to start QEMU (the stand-in then fails).
run_boot "$(steps 15)" >/dev/null 2>&1 || true
if [ -e "$QEMU_MARK" ]; then
    ok "a command line of 15 steps is passed to QEMU"
else
    err "a command line of 15 steps is passed to QEMU" "boot.sh stopped before QEMU"
fi
exit $status
