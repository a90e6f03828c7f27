#!/usr/bin/env bash
# A real libvirt (11.x from bookworm-backports, .ci/setup) starts vhostfs for a TCG domain booting
# the e2e guest kernel, three ways:
#   libvirt-binary  system libvirtd, <filesystem><binary path='.../vhostfs'/>
#   libvirt-json    system libvirtd, no <binary>: libvirt finds vhostfs through 50-vhostfs.json in
#                   /usr/share/qemu/vhost-user/ (installed for the case, removed after)
#   libvirt-idmap   session libvirtd of an unprivileged user (qemu:///session), with an <idmap>:
#                   libvirt passes --uid-map/--gid-map, vhostfs enters a user namespace through
#                   newuidmap/newgidmap, and the guest's files land with the mapped owners
# The guest (guest-libvirt-test.sh) writes and reads back a file, reads one the host wrote, makes a
# directory owned by 1000:1000; the host checks the result, the owners, that the domain log has no
# QEMU error, that vhostfs is gone after the domain shut off, and prints libvirt's vhostfs command
# line (docs/qemu.md quotes it).
#
#   tests/e2e/libvirt.sh [--summary-file FILE]
#
# VHOSTFS: the binary (default: target/release/vhostfs, else target/debug/vhostfs); E2E_LOG_DIR:
# keep the logs there (default: a temp dir, printed on failure); E2E_LOCK=FILE: take flock(1) on
# FILE around each boot only (on a shared machine: E2E_LOCK=/tmp/vhostfs-heavy.lock; not when the
# caller holds that lock already, as run-all.sh under flock does). The daemons (virtlogd,
# libvirtd) are started by hand (no systemd here) and stopped at the end. Must run as root, with
# no other libvirtd running. ~15 s per case on 2 cores, ~50 s in all.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$here/lib.sh"
log() { echo "libvirt: $*"; }
die() { log "$*" >&2; exit 2; }

summary_file=
[ "${1:-}" != --summary-file ] || summary_file=$2
bin=${VHOSTFS:-$repo/target/release/vhostfs}
[ -x "$bin" ] || bin=$repo/target/debug/vhostfs
[ -x "$bin" ] || die "no vhostfs binary (cargo build --release, or VHOSTFS=...)"
[ "$(id -u)" -eq 0 ] || die "must run as root"
for c in libvirtd virtlogd virsh setpriv useradd newuidmap newgidmap qemu-system-x86_64; do
  command -v "$c" >/dev/null || die "$c not found (run .ci/setup)"
done
ver=$(libvirtd --version | awk '{ print $NF }')
[ "${ver%%.*}" -ge 11 ] || die "libvirt $ver: the test needs 11.x (bookworm-backports, .ci/setup)"
kernel=$(find "$repo/target/guest/boot/" -maxdepth 1 -name 'vmlinuz-*' 2>/dev/null | sort -V | tail -n1)
[ -n "$kernel" ] || die "no guest kernel under target/guest (run .ci/setup)"
if virsh -q -c qemu:///system version >/dev/null 2>&1; then
  die "a system libvirtd is already running; this test starts and stops its own"
fi

json_dir=/usr/share/qemu/vhost-user
json=$json_dir/50-vhostfs.json
user=vhostfs-e2e
subid=200000 subcount=65536
work=$(mktemp -d /tmp/vhostfs-libvirt.XXXXXX)
chmod 0755 "$work"  # libvirt-qemu (system QEMU) and $user (session) read the kernel and initramfs
logroot=${E2E_LOG_DIR:-$work/logs}/libvirt
mkdir -p "$logroot"
home=$work/home run=$work/run
defined=() made_user='' json_saved='' json_installed='' failed=0 summary=()
as_user() {
  setpriv --reuid="$user" --regid="$user" --init-groups \
    env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME="$home" XDG_RUNTIME_DIR="$run" "$@"
}
stop_pidfile() { # PIDFILE NAME: a daemon started with -d (not our child) by its pid file
  [ -s "$1" ] || return 0
  local pid
  pid=$(cat "$1")
  kill -TERM "$pid" 2>/dev/null || return 0
  for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
  log "$2 (pid $pid) ignored SIGTERM; sending SIGKILL"
  kill -KILL "$pid" 2>/dev/null || true
}
# shellcheck disable=SC2317 # invoked from the EXIT trap
cleanup() {
  local rc=$? d
  trap - EXIT INT TERM
  for d in "${defined[@]}"; do  # "URI NAME"
    if [[ $d == *session* ]]; then
      as_user virsh -q -c qemu:///session destroy "${d#* }" >/dev/null 2>&1 || true
      as_user virsh -q -c qemu:///session undefine "${d#* }" >/dev/null 2>&1 || true
    else
      virsh -q -c qemu:///system destroy "${d#* }" >/dev/null 2>&1 || true
      virsh -q -c qemu:///system undefine "${d#* }" >/dev/null 2>&1 || true
      rm -f /var/log/libvirt/qemu/"${d#* }"*.log
    fi
  done
  stop_pidfile "$run/libvirt/libvirtd.pid" "session libvirtd"
  stop_pidfile "$run/libvirt/virtlogd.pid" "session virtlogd"
  stop_pidfile "$work/libvirtd.pid" libvirtd
  stop_pidfile "$work/virtlogd.pid" virtlogd
  [ -z "$json_installed" ] || rm -f "$json"
  [ -z "$json_saved" ] || mv -f "$json_saved" "$json"
  if [ -n "$made_user" ]; then
    usermod --del-subuids "$subid-$((subid + subcount - 1))" \
      --del-subgids "$subid-$((subid + subcount - 1))" "$user" 2>/dev/null || true
    userdel "$user" 2>/dev/null || true
  fi
  if [ "$failed" -ne 0 ] || [ "$rc" -ne 0 ]; then
    if [ -z "${E2E_LOG_DIR:-}" ]; then
      mkdir -p /tmp/vhostfs-libvirt-logs
      rm -rf /tmp/vhostfs-libvirt-logs/libvirt
      mv "$logroot" /tmp/vhostfs-libvirt-logs/ && logroot=/tmp/vhostfs-libvirt-logs/libvirt
    fi
    log "logs kept in $logroot"
  fi
  rm -rf "$work"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

t0=$(now)
install -m0755 "$bin" "$work/vhostfs"
install -m0644 "$kernel" "$work/vmlinuz"
"$here/mkinitramfs.sh" "$work/initramfs.cpio.gz" "$here/guest-libvirt-test.sh" >/dev/null
chmod 0644 "$work/initramfs.cpio.gz"

# ---- the daemons, by hand ----------------------------------------------------------------------
virtlogd -d -p "$work/virtlogd.pid"
libvirtd -d -p "$work/libvirtd.pid"
for _ in $(seq 100); do virsh -q -c qemu:///system version >/dev/null 2>&1 && break; sleep 0.1; done
virsh -q -c qemu:///system version >/dev/null || die "libvirtd did not come up"
log "libvirt $ver (system libvirtd pid $(cat "$work/libvirtd.pid"), up at $(elapsed "$t0" "$(now)") s), vhostfs $("$bin" --version | head -n1)"

# domain_xml NAME DIR SHARE FS_EXTRA: a TCG domain booting the e2e kernel and initramfs, its serial
# console in DIR/console.log, SHARE as virtio-fs tag "share".
domain_xml() {
  cat <<XML
<domain type='qemu'>
  <name>$1</name>
  <memory unit='MiB'>512</memory>
  <vcpu>2</vcpu>
  <memoryBacking><source type='memfd'/><access mode='shared'/></memoryBacking>
  <os>
    <type arch='x86_64' machine='pc'>hvm</type>
    <kernel>$work/vmlinuz</kernel>
    <initrd>$work/initramfs.cpio.gz</initrd>
    <cmdline>console=ttyS0 quiet panic=-1 e2e.tag=share e2e.queues=1</cmdline>
  </os>
  <features><acpi/></features>
  <cpu mode='maximum'/>
  <on_poweroff>destroy</on_poweroff>
  <on_reboot>destroy</on_reboot>
  <on_crash>destroy</on_crash>
  <devices>
    <emulator>$(command -v qemu-system-x86_64)</emulator>
    <filesystem type='mount'>
      <driver type='virtiofs' queue='1024'/>$4
      <source dir='$3'/>
      <target dir='share'/>
    </filesystem>
    <serial type='file'><source path='$2/console.log'/><target port='0'/></serial>
    <memballoon model='none'/>
  </devices>
</domain>
XML
}

# run_domain CASE URI QEMU_LOG_DIR OWNER_FILE OWNER_DIR FS_EXTRA: defines and boots the domain
# (under the heavy lock), waits for it to shut off, checks the guest's verdict and the host's view.
run_domain() {
  local name=$1 uri=$2 qlogdir=$3 want_file=$4 want_dir=$5 extra=$6
  local dir=$work/$name logs=$logroot/$name virsh=(virsh -q -c "$2") t1 t2 st='' problems=()
  [[ $uri == *session* ]] && virsh=(as_user virsh -q -c "$uri")
  local dom=vhostfs-e2e-$name
  mkdir -p "$dir/share" "$logs"
  echo 'from the host' > "$dir/share/from-host.txt"
  [[ $uri != *session* ]] || chown -R "$user:" "$dir"
  domain_xml "$dom" "$dir" "$dir/share" "$extra" > "$dir/domain.xml"
  "${virsh[@]}" define "$dir/domain.xml" >/dev/null
  defined+=("$uri $dom")
  log "=== case $name ($uri; at $(elapsed "$t0" "$(now)") s)"
  t1=$(now)
  if [ -n "${E2E_LOCK:-}" ]; then exec 9>"$E2E_LOCK"; flock 9; fi
  "${virsh[@]}" start "$dom" >/dev/null || problems+=("virsh start failed")
  for _ in $(seq 300); do
    st=$("${virsh[@]}" domstate "$dom" 2>/dev/null || true)
    [ "$st" = "shut off" ] && break
    sleep 1
  done
  [ "$st" = "shut off" ] || { "${virsh[@]}" destroy "$dom" >/dev/null 2>&1 || true; problems+=("timeout: domain still $st after 300 s"); }
  if [ -n "${E2E_LOCK:-}" ]; then flock -u 9; exec 9>&-; fi
  t2=$(now)
  cp "$dir/console.log" "$qlogdir/$dom.log" "$qlogdir/$dom-fs0-virtiofsd.log" "$logs/" 2>/dev/null || true
  tr -d '\r' < "$dir/console.log" | grep -E '^(PASS|FAIL): ' | sed 's/^/  guest /' || true
  tr -d '\r' < "$dir/console.log" | grep -q '^E2E-STATUS: PASS' || problems+=("guest: $(tr -d '\r' < "$dir/console.log" | grep -o 'E2E-STATUS: .*' || echo 'no E2E-STATUS line')")
  [ "$(cat "$dir/share/written.txt" 2>/dev/null)" = 'written by the libvirt guest' ] || problems+=("host: written.txt missing or wrong")
  [ "$(stat -c %u:%g "$dir/share/written.txt" 2>/dev/null)" = "$want_file" ] \
    || problems+=("host: written.txt owned by $(stat -c %u:%g "$dir/share/written.txt" 2>/dev/null), want $want_file")
  [ "$(stat -c %u:%g "$dir/share/owned" 2>/dev/null)" = "$want_dir" ] \
    || problems+=("host: owned/ owned by $(stat -c %u:%g "$dir/share/owned" 2>/dev/null), want $want_dir")
  local argv
  argv=$(grep -A1 'Starting external device: virtiofsd' "$logs/$dom.log" | tail -n1 || true)
  [[ $argv == "$work/vhostfs "* ]] || problems+=("libvirt did not start $work/vhostfs (domain log: ${argv:-no external device line})")
  log "libvirt's command line: ${argv//$work/WORK}"
  # QEMU's own complaints (e.g. a vhost-user channel the daemon closed) end up in the domain log.
  if grep -E 'qemu-system-x86_64: ' "$logs/$dom.log" | grep -v 'terminating on signal'; then
    problems+=("QEMU reported an error in the domain log")
  fi
  ! grep -qE 'panicked at|ERROR' "$logs/$dom-fs0-virtiofsd.log" 2>/dev/null || problems+=("error/panic in the vhostfs log")
  ! pgrep -f "^$work/vhostfs " >/dev/null || problems+=("vhostfs still running after the domain shut off")
  "${virsh[@]}" undefine "$dom" >/dev/null
  local verdict=PASS p
  for p in "${problems[@]}"; do log "FAIL($name): $p"; done
  if [ ${#problems[@]} -gt 0 ]; then
    # The reasons go into the summary line too: all CI keeps of a run is its tail.
    p=$(printf '%s; ' "${problems[@]}")
    verdict="FAIL(${p%; })"
    failed=$((failed + 1))
  fi
  summary+=("libvirt-$name: $verdict | boot+test=$(elapsed "$t1" "$t2")s")
}

# 1. <binary path=...>: libvirt asks the binary for --print-capabilities and starts it with --fd.
run_domain binary qemu:///system /var/log/libvirt/qemu 0:0 1000:1000 "
      <binary path='$work/vhostfs'/>"

# 2. No <binary>: libvirt picks the first "fs" vhost-user JSON; ours, naming this binary.
if [ -e "$json" ]; then json_saved=$work/50-vhostfs.json.saved; mv "$json" "$json_saved"; fi
mkdir -p "$json_dir"
json_installed=1
sed "s|/usr/bin/vhostfs|$work/vhostfs|" "$repo/contrib/qemu/50-vhostfs.json" > "$json"
run_domain json qemu:///system /var/log/libvirt/qemu 0:0 1000:1000 ""
rm -f "$json"; json_installed=''
[ -z "$json_saved" ] || { mv -f "$json_saved" "$json"; json_saved=''; }

# 3. <idmap> under a session libvirtd: guest 0 -> the user, guest 1.. -> its subordinate ids.
if ! id "$user" >/dev/null 2>&1; then
  useradd --system --no-create-home --home-dir "$home" --shell /usr/sbin/nologin "$user"
  made_user=1
fi
grep -q "^$user:$subid:$subcount\$" /etc/subuid 2>/dev/null \
  || usermod --add-subuids "$subid-$((subid + subcount - 1))" "$user"
grep -q "^$user:$subid:$subcount\$" /etc/subgid 2>/dev/null \
  || usermod --add-subgids "$subid-$((subid + subcount - 1))" "$user"
uid=$(id -u "$user") gid=$(id -g "$user")
install -d -m0700 -o "$user" -g "$user" "$home" "$run"
as_user virtlogd -d
as_user libvirtd -d
for _ in $(seq 100); do as_user virsh -q -c qemu:///session version >/dev/null 2>&1 && break; sleep 0.1; done
as_user virsh -q -c qemu:///session version >/dev/null || die "the session libvirtd did not come up"
run_domain idmap qemu:///session "$home/.cache/libvirt/qemu/log" "$uid:$gid" \
  "$((subid + 999)):$((subid + 999))" "
      <binary path='$work/vhostfs'/>
      <idmap>
        <uid start='0' target='$uid' count='1'/>
        <uid start='1' target='$subid' count='$((subcount - 1))'/>
        <gid start='0' target='$gid' count='1'/>
        <gid start='1' target='$subid' count='$((subcount - 1))'/>
      </idmap>"

echo
log "summary (total $(elapsed "$t0" "$(now)") s):"
for s in "${summary[@]}"; do echo "  $s"; done
[ -z "$summary_file" ] || printf '%s\n' "${summary[@]}" > "$summary_file"
[ "$failed" -eq 0 ]
