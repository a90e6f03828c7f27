#!/usr/bin/env bash
# Builds the tiny e2e guest initramfs from busybox-static.
#
#   tests/e2e/mkinitramfs.sh [--extra-bin FILE]... [--module FILE.ko]... [--compress gzip|zstd]
#                            OUT.cpio.gz [TEST_SCRIPT]
#
# TEST_SCRIPT (default: guest-fs-test.sh next to this file) is stored as /test.sh.
# --extra-bin FILE (repeatable) adds a host binary as /bin/NAME; a dynamically linked one with every
# library `ldd` lists and the dynamic loader at their host paths (used by benches/guest for fio),
# a static one alone (tests/e2e/posix-probe).
# --module FILE.ko (repeatable) adds a kernel module that /init loads with insmod, in the order
# given, before it mounts the share (a guest kernel whose virtio/FUSE drivers are modules, such as
# bookworm's 6.1 cloud kernel: see benches/guest/run.sh --kernel 6.1).
# --compress zstd decompresses much faster in a TCG guest than the default gzip; use it for big
# images. The /init
# mounts proc/sys/dev, mounts the virtio-fs share on /mnt and runs `sh SCRIPT /mnt`, prints PASS/FAIL
# lines and one final machine-readable line to the console, then powers off:
#
#   E2E-STATUS: PASS rc=0 boot_s=1.23 test_s=4.56
#   E2E-STATUS: FAIL rc=3 boot_s=1.23 test_s=4.56 reason=test
#
# Kernel command-line knobs (all optional):
#   e2e.tag=TAG         virtio-fs tag to mount (default: share)
#   e2e.script=PATH     guest path of the script to run instead of /test.sh (e.g. one on the share)
#   e2e.mountopts=OPTS  extra `mount -o` options for the share
#   e2e.timeout=SECS    guest-side timeout for the script (default: 0 = none)
# Environment: BUSYBOX (default: /bin/busybox, must be statically linked).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
extra_bins=() modules=() compress=gzip
while [ $# -gt 0 ]; do
  case "$1" in
    --extra-bin) extra_bins+=("$2"); shift 2 ;;
    --module) modules+=("$2"); shift 2 ;;
    --compress) compress=$2; shift 2 ;;
    *) break ;;
  esac
done
case "$compress" in
  gzip) compressor=(gzip -6) ;;
  zstd) compressor=(zstd -q -3 -T0) ;;
  *) echo "mkinitramfs: --compress gzip|zstd, not $compress" >&2; exit 1 ;;
esac
out=${1:?usage: $0 [--extra-bin FILE]... [--compress gzip|zstd] OUT.cpio.gz [TEST_SCRIPT]}
script=${2:-$here/guest-fs-test.sh}
busybox=${BUSYBOX:-/bin/busybox}

[ -f "$script" ] || { echo "mkinitramfs: no test script $script" >&2; exit 1; }
[ -x "$busybox" ] || { echo "mkinitramfs: $busybox missing (apt-get install busybox-static)" >&2; exit 1; }
if command -v file >/dev/null 2>&1 && ! file -L "$busybox" | grep -q 'statically linked'; then
  echo "mkinitramfs: $busybox is not statically linked (install busybox-static)" >&2
  exit 1
fi
for tool in cpio "${compressor[0]}"; do
  command -v "$tool" >/dev/null 2>&1 || { echo "mkinitramfs: $tool missing" >&2; exit 1; }
done

root=$(mktemp -d "${TMPDIR:-/tmp}/vhostfs-initramfs.XXXXXX")
# The guest's / (mktemp made it 0700): guest users other than root must reach /bin.
chmod 0755 "$root"
tmp_out="$out.tmp.$$"
trap 'rm -rf "$root" "$tmp_out"' EXIT

mkdir -p "$root"/{bin,sbin,usr/bin,usr/sbin,proc,sys,dev,mnt,tmp,root,etc}
cp "$busybox" "$root/bin/busybox"
chmod 0755 "$root/bin/busybox"
# One symlink per applet (done on the host: no need to run the guest's busybox here).
"$busybox" --list | while read -r applet; do
  [ "$applet" = busybox ] && continue
  [ -e "$root/bin/$applet" ] || ln -s busybox "$root/bin/$applet"
done
install -m 0755 "$script" "$root/test.sh"
for bin in "${extra_bins[@]}"; do
  [ -x "$bin" ] || { echo "mkinitramfs: --extra-bin $bin is not an executable" >&2; exit 1; }
  install -m 0755 "$bin" "$root/bin/$(basename "$bin")"
  # ldd lines: "libx.so.1 => /lib/.../libx.so.1 (0x...)" or "/lib64/ld-linux-x86-64.so.2 (0x...)".
  while read -r lib; do
    mkdir -p "$root$(dirname "$lib")"
    cp -L "$lib" "$root$lib"
  done < <(ldd "$bin" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }')
done
for ko in "${modules[@]}"; do
  [ -f "$ko" ] || { echo "mkinitramfs: --module $ko is not a file" >&2; exit 1; }
  mkdir -p "$root/lib/modules"
  install -m 0644 "$ko" "$root/lib/modules/$(basename "$ko")"
  basename "$ko" >> "$root/modules.list"
done
# Minimal passwd/group so `ls -l` / `stat` can print names; uid 1000 is the chown target.
printf 'root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000:user:/tmp:/bin/sh\n' > "$root/etc/passwd"
printf 'root:x:0:\nuser:x:1000:\n' > "$root/etc/group"

cat > "$root/init" <<'INIT'
#!/bin/sh
# vhostfs e2e guest init (busybox sh, PID 1). Never exits: always ends in `poweroff -f`.
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
mount -t tmpfs tmpfs /tmp
exec </dev/console >/dev/console 2>&1

up() { cut -d' ' -f1 /proc/uptime; }
boot_s=$(up)
echo "E2E-INIT uptime=$boot_s kernel=$(uname -r)"

if [ -f /modules.list ]; then
  while read -r ko; do
    insmod "/lib/modules/$ko" || echo "FAIL: insmod $ko"
  done < /modules.list
fi

tag=share script=/test.sh mountopts='' gtimeout=0
read -r cmdline < /proc/cmdline
for arg in $cmdline; do
  case "$arg" in
    e2e.tag=*) tag=${arg#*=} ;;
    e2e.script=*) script=${arg#*=} ;;
    e2e.mountopts=*) mountopts=${arg#*=} ;;
    e2e.timeout=*) gtimeout=${arg#*=} ;;
  esac
done

finish() { # $1=PASS|FAIL $2=rc $3=test seconds $4=reason
  if [ "$1" != PASS ]; then
    echo "---- guest dmesg (tail) ----"
    dmesg | grep -v drop_caches | tail -n 25
    echo "----------------------------"
  fi
  echo "E2E-STATUS: $1 rc=$2 boot_s=$boot_s test_s=$3${4:+ reason=$4}"
  sync
  poweroff -f
  sleep 10  # poweroff -f should not return; if it does, PID 1 exiting panics (panic=-1 -> QEMU exits)
  exit 1
}

if ! mount -t virtiofs ${mountopts:+-o "$mountopts"} "$tag" /mnt; then
  echo "FAIL: mount -t virtiofs $tag /mnt"
  finish FAIL 99 0 mount
fi
echo "E2E-MOUNTED uptime=$(up) tag=$tag"
if [ ! -f "$script" ]; then
  echo "FAIL: test script $script not found"
  finish FAIL 98 0 noscript
fi

t0=$(up)
if [ "$gtimeout" != 0 ]; then
  timeout "$gtimeout" sh "$script" /mnt
else
  sh "$script" /mnt
fi
rc=$?
t1=$(up)
test_s=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')

cd /
if ! umount /mnt; then
  echo "FAIL: umount /mnt"
  finish FAIL "$rc" "$test_s" umount
fi
if [ "$rc" -eq 0 ]; then
  finish PASS 0 "$test_s"
fi
finish FAIL "$rc" "$test_s" test
INIT
chmod 0755 "$root/init"

mkdir -p "$(dirname "$out")"
(cd "$root" && find . -print0 | LC_ALL=C sort -z | cpio --null -o -H newc -R 0:0 --quiet) | "${compressor[@]}" > "$tmp_out"
mv -f "$tmp_out" "$out"
echo "mkinitramfs: wrote $out ($(du -k "$out" | cut -f1) KiB, script $(basename "$script"))"
