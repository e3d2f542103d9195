#!/usr/bin/env bash
# build-initramfs.sh -- build the guest's initramfs (an uncompressed cpio,
# the same for every kernel): busybox-static, guest/init, the static test
# suite (forktest), stress-ng and redis-server / redis-cli / redis-benchmark
# with the shared libraries they load (found with ldd).
#
#   build-initramfs.sh FORKTEST OUTPUT.cpio
#
# Environment:
#   REDIS_BIN_DIR     directory holding the redis programs
#                     (default build/redis-VERSION/src, VERSION from upstream/pin)
#   STOCK_REDIS_SERVER stock redis-server for the latency table
#                     (default build/stock/redis-VERSION/src/redis-server)
#   KERNEL_OUT        build/kernel (gen_init_cpio is compiled there)
set -euo pipefail

prog=kernel/initramfs
. "$(dirname "$0")/lib.sh"
. "$top/upstream/pin"
redis_dir=$(realpath -m "${REDIS_BIN_DIR:-$top/build/redis-$REDIS_VERSION/src}")
stock_redis=$(realpath -m "${STOCK_REDIS_SERVER:-$top/build/stock/redis-$REDIS_VERSION/src/redis-server}")

[ $# -eq 2 ] || die "usage: build-initramfs.sh FORKTEST OUTPUT.cpio"
forktest=$1
output=$2
stage=$out/initramfs
list=$stage/files.list

# The kernel's own cpio writer (device nodes and root ownership without root).
gen_init_cpio() {
    local tool=$out/tools/gen_init_cpio src=$out/stock/linux/usr/gen_init_cpio.c
    [ -f "$src" ] || die "no kernel tree at $out/stock/linux; run make kernel-src first."
    if [ ! -x "$tool" ] || [ "$src" -nt "$tool" ]; then
        mkdir -p "$(dirname "$tool")"
        gcc -O2 -o "$tool" "$src"
    fi
    printf '%s\n' "$tool"
}

entry_dir() { printf 'dir %s 0755 0 0\n' "$1" >>"$list"; }

# Add a file to the list at PATH, copied into the stage (stripped if ELF).
entry_file() {
    local path=$1 from=$2 mode=$3 copy=$stage/root$1
    mkdir -p "$(dirname "$copy")"
    cp -L "$from" "$copy"
    if [ "$mode" = 0755 ] && head -c 4 "$copy" | grep -q ELF; then
        strip --strip-debug "$copy" 2>/dev/null || true
    fi
    printf 'file %s %s %s 0 0\n' "$path" "$copy" "$mode" >>"$list"
}

# Shared libraries of a dynamic program, as "path" lines (interpreter too).
libraries_of() {
    ldd "$1" 2>/dev/null | awk '
        $2 == "=>" && $3 ~ /^\// { print $3 }
        $1 ~ /^\// { print $1 }'
}

# Libraries go to /lib/x86_64-linux-gnu (the loader's default directory);
# the interpreter keeps its own path.
add_libraries() {
    local lib
    for lib in $(libraries_of "$1"); do
        case $lib in
        */ld-linux*) target=$lib ;;
        *) target=/lib/x86_64-linux-gnu/$(basename "$lib") ;;
        esac
        grep -q " $target " "$list" || entry_file "$target" "$lib" 0755
    done
}

add_program() {
    local path=$1 from=$2
    [ -x "$from" ] || die "$from is missing." "${@:3}"
    entry_file "$path" "$from" 0755
    add_libraries "$from"
}

add_busybox() {
    local bb=/bin/busybox
    [ -x "$bb" ] || die "$bb is missing: apt-get install busybox-static"
    ldd "$bb" >/dev/null 2>&1 && die "$bb is dynamic: install busybox-static, not busybox."
    entry_file /bin/busybox "$bb" 0755
    for applet in sh mount mkdir cat echo sed awk tr grep cut date sleep timeout \
        poweroff ip ifconfig mkswap swapon dmesg uname nproc sync tee tail rm ls ps \
        head wc env kill free pidof taskset; do
        printf 'slink /bin/%s busybox 0777 0 0\n' "$applet" >>"$list"
    done
}

add_redis() {
    local p
    for p in redis-server redis-cli redis-benchmark; do
        add_program "/usr/bin/$p" "$redis_dir/$p" \
            "Build redis-afork first (make at the top level), or point REDIS_BIN_DIR" \
            "at the programs."
    done
    entry_file /usr/bin/redis-e2e "$contrib/guest/redis-e2e" 0755
    # Stock Redis for the side-by-side latency table, when it was built.
    if [ -x "$stock_redis" ]; then
        add_program /usr/bin/redis-server-stock "$stock_redis"
    else
        echo "kernel/initramfs: no stock redis-server ($stock_redis): the latency table has no stock rows" >&2
    fi
}

build_list() {
    rm -rf "$stage"
    mkdir -p "$stage/root"
    : >"$list"
    for d in /bin /sbin /usr /usr/bin /lib /lib/x86_64-linux-gnu /lib64 /proc /sys \
        /dev /tmp /etc /root; do
        entry_dir "$d"
    done
    printf 'nod /dev/console 0600 0 0 c 5 1\n' >>"$list"
    printf 'root:x:0:0:root:/root:/bin/sh\n' >"$stage/passwd"
    entry_file /etc/passwd "$stage/passwd" 0644
    entry_file /init "$contrib/guest/init" 0755
    entry_file /etc/afork-splat.ere "$splat_file" 0644
    add_busybox
    entry_file /bin/forktest "$forktest" 0755
    ldd "$forktest" >/dev/null 2>&1 && die "$forktest is not static."
    add_program /usr/bin/stress-ng /usr/bin/stress-ng "apt-get install stress-ng"
    add_redis
}

build_list
tool=$(gen_init_cpio)
mkdir -p "$(dirname "$output")"
"$tool" "$list" >"$output.tmp"
mv "$output.tmp" "$output"
echo "kernel/initramfs: $output ($(($(stat -c %s "$output") / 1024 / 1024)) MiB, $(grep -c '^file' "$list") files)"
