#!/usr/bin/env bash
# Boots a throw-away guest in which DIR is served by vhostfs, and drops into a shell there (or
# runs CMD and exits with its status):
#
#   contrib/try.sh DIR [-- CMD...]
#
# after `sudo .ci/setup` (QEMU 10, the 6.12 guest kernel in target/guest, virtme-ng 1.42 in
# target/vng-venv) and `cargo build --release`. As root or as any user; no KVM needed: the guest
# runs under TCG (~20 s to the shell on 2 cores, most of it the guest's udev settling).
# TRY_KVM=1 lets vng use /dev/kvm where you can open it (not the default: on a host whose KVM is
# broken, such as a nested set-up that fails with "KVM internal error ... emulation failure",
# the first try would crash).
#
# How: virtme-ng (`vng`, what kernel developers boot test kernels with) runs the kernel, finding
# vhostfs as the `virtiofsd` first on PATH (a temp dir with a symlink). DIR is mounted read-write
# at /mnt (`vng --rwdir /mnt=DIR`), the shell starts in /mnt, as you (your uid; the daemon runs
# as you too). The guest's / is the host's own root, read-only and served by a second vhostfs
# (vng's --readonly line), so the guest has your usual tools and nothing but DIR can be changed
# on the host. Why not DIR as the root file system (`vng --root DIR`): that needs DIR to be a
# whole system (a shell, libraries), and the point is to try vhostfs on any directory.
#
# Environment: VHOSTFS (default target/release/vhostfs, else target/debug/vhostfs), VNG (default
# target/vng-venv/bin/vng, else vng on PATH), TRY_KERNEL (default target/guest/boot/vmlinuz-*),
# TRY_KVM=1 (see above). Exit status: CMD's (or the shell's); 1 if a part
# is missing (said in one line).
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
die() { echo "try.sh: $*" >&2; exit 1; }
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit "$1"; }
case "${1:-}" in -h|--help) usage 0 ;; '') usage 1 >&2 ;; esac
dir=$1; shift
if [ $# -gt 0 ]; then
  [ "$1" = -- ] || die "expected -- before the command (contrib/try.sh DIR [-- CMD...])"
  shift
fi
[ -d "$dir" ] || die "missing: the directory $dir"
dir=$(cd "$dir" && pwd -P)

command -v qemu-system-x86_64 >/dev/null || die "missing: QEMU (no qemu-system-x86_64 on PATH; sudo .ci/setup installs QEMU 10)"
kernel=${TRY_KERNEL:-$(find "$repo/target/guest/boot/" -maxdepth 1 -name 'vmlinuz-*' 2>/dev/null | sort -V | tail -n1 || true)}
[ -r "$kernel" ] || die "missing: a kernel (no readable ${TRY_KERNEL:-$repo/target/guest/boot/vmlinuz-*}; sudo .ci/setup unpacks one, or set TRY_KERNEL=)"
kernel=$(readlink -f "$kernel")
vng=${VNG:-$repo/target/vng-venv/bin/vng}
[ -n "${VNG:-}" ] || [ -x "$vng" ] || vng=$(command -v vng || echo "$vng")
[ -x "$vng" ] || die "missing: vng (virtme-ng; no $vng; sudo .ci/setup installs it in target/vng-venv, or set VNG=)"
bin=${VHOSTFS:-$repo/target/release/vhostfs}
[ -n "${VHOSTFS:-}" ] || [ -x "$bin" ] || bin=$repo/target/debug/vhostfs
[ -x "$bin" ] || die "missing: the vhostfs binary (no ${VHOSTFS:-$repo/target/release/vhostfs}; run cargo build --release, or set VHOSTFS=)"
bin=$(readlink -f "$bin")
# vng's guest sets up its command's input and output through udev, from the host's root.
[ -x /lib/systemd/systemd-udevd ] || command -v udevd >/dev/null \
  || die "missing: udevd on the host (package udev; sudo .ci/setup installs it), which vng's guest runs"
moddir=$(dirname "$(dirname "$kernel")")/lib/modules/$(basename "$kernel" | sed 's/^vmlinuz-//')
if [ -d "$moddir" ] && [ ! -e "$moddir/modules.dep" ] && { ! command -v depmod >/dev/null || [ ! -w "$moddir" ]; }; then
  die "missing: $moddir/modules.dep (sudo .ci/setup runs depmod for it)"
fi

bindir=$(mktemp -d "${TMPDIR:-/tmp}/vhostfs-try.XXXXXX")
trap 'rm -rf "$bindir"' EXIT
ln -s "$bin" "$bindir/virtiofsd"
args=(--run "$kernel" --rwdir "/mnt=$dir" --cwd /mnt --user "$(id -un)")
accel="KVM"
if [ "${TRY_KVM:-0}" != 1 ] || [ ! -r /dev/kvm ] || [ ! -w /dev/kvm ]; then
  args+=(--disable-kvm)
  accel="TCG, no KVM"
fi
if [ $# -gt 0 ]; then
  args+=(--exec "$(printf '%q ' "$@")")
fi
echo "try.sh: booting $(basename "$kernel") ($accel); $dir is /mnt in the guest, served by $bin; / is the host's, read-only" >&2
st=0
PATH="$bindir:$(dirname "$vng"):$PATH" "$vng" "${args[@]}" || st=$?
exit "$st"
