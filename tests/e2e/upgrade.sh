#!/usr/bin/env bash
# In-place upgrade under a live guest (issue 13 item 1). vhostfs (its default sandbox, namespace:
# the new process joins the old one's mount namespace) serves a TCG
# guest (tests/e2e/guest-upgrade-test.sh, fio in its initramfs) that holds E2E_MANY (10,000)
# inodes, runs a baseline fio job, then fio (randrw 4 KiB, 4 jobs, 30 s, verify=crc32c) and a
# shell appending to a file it holds open. Meanwhile the host upgrades vhostfs three times:
#   1. SIGHUP, to the same binary;
#   2. `vhostfs upgrade --socket-path`, the binary path replaced by a second build
#      (VHOSTFS2, default target/debug/vhostfs);
#   3. `vhostfs upgrade` again, the first build back.
# Checks: each upgrade's new pid serves (the pid file names it, the old pid is gone), the
# guest's fio and appender end with no error and a complete file, its dmesg is clean, the last
# daemon exits 0 when QEMU goes; reports the max fio latency with and without upgrades and the
# pause each new process logged.
#
#   tests/e2e/upgrade.sh [--summary-file FILE]
#
# VHOSTFS: the first build (default target/release/vhostfs). Must run as root. ~70 s.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$here/lib.sh"
log() { echo "upgrade: $*"; }
die() { log "$*" >&2; exit 2; }

summary_file=
[ "${1:-}" != --summary-file ] || summary_file=$2
[ "$(id -u)" -eq 0 ] || die "must run as root"
build1=${VHOSTFS:-$repo/target/release/vhostfs}
build2=${VHOSTFS2:-$repo/target/debug/vhostfs}
[ -x "$build1" ] || die "no $build1 (cargo build --release)"
[ -x "$build2" ] || die "no second build $build2 (cargo build)"
fio=$(command -v fio) || die "fio not found (.ci/setup)"
kernel=$(find "$repo/target/guest/boot/" -maxdepth 1 -name 'vmlinuz-*' 2>/dev/null | sort -V | tail -n1)
[ -n "$kernel" ] || die "no guest kernel under target/guest (run .ci/setup)"

work=$(mktemp -d /tmp/vhostfs-upgrade.XXXXXX)
logroot=${E2E_LOG_DIR:-$work/logs}/upgrade
mkdir -p "$logroot" "$work/share/many" "$work/bin"
sock=$work/vfs.sock
bin=$work/bin/vhostfs
qemu_pid='' first_pid='' problems=()
# shellcheck disable=SC2317 # invoked from the EXIT trap
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  [ -z "$qemu_pid" ] || stop "$qemu_pid" qemu
  # After an upgrade the serving daemon is no child of ours: the pid file names it.
  local pid
  pid=$(cat "$sock.pid" 2>/dev/null || true)
  [ -z "$pid" ] || kill -KILL "$pid" 2>/dev/null || true
  [ -z "$first_pid" ] || stop "$first_pid" vhostfs
  if [ ${#problems[@]} -ne 0 ] || [ "$rc" -ne 0 ]; then
    if [ -z "${E2E_LOG_DIR:-}" ]; then
      rm -rf /tmp/vhostfs-upgrade-logs && mkdir -p /tmp/vhostfs-upgrade-logs
      mv "$logroot" /tmp/vhostfs-upgrade-logs/ && logroot=/tmp/vhostfs-upgrade-logs/upgrade
    fi
    log "logs kept in $logroot"
  fi
  rm -rf "$work"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
check() { # NAME CONDITION...
  local name=$1; shift
  if "$@"; then log "PASS: $name"; else log "FAIL: $name"; problems+=("$name"); fi
}
# install BUILD: puts BUILD at the daemon's binary path the way a package upgrade does (rename).
install_build() { cp "$1" "$bin.new" && mv -f "$bin.new" "$bin"; }
pid_now() { cat "$sock.pid" 2>/dev/null || true; }
gone() { ! kill -0 "$1" 2>/dev/null; }
# taken_over OLD: waits (30 s) until the pid file names a live process other than OLD, and OLD is gone.
taken_over() {
  local p
  for _ in $(seq 300); do
    p=$(pid_now)
    if [ -n "$p" ] && [ "$p" != "$1" ] && kill -0 "$p" 2>/dev/null && ! kill -0 "$1" 2>/dev/null; then
      echo "$p"; return 0
    fi
    sleep 0.1
  done
  return 1
}

t0=$(now)
many=${E2E_MANY:-10000}
(cd "$work/share/many" && seq -f 'f%05g' 1 "$many" | xargs touch)
"$here/mkinitramfs.sh" --extra-bin "$fio" --compress zstd "$work/initramfs.cpio.zst" \
  "$here/guest-upgrade-test.sh" > /dev/null
install_build "$build1"
setsid "$bin" --socket-path="$sock" --shared-dir="$work/share" \
  --inode-file-handles=prefer --log-level=info > "$logroot/daemon.log" 2>&1 < /dev/null &
first_pid=$!
wait_for 30 socket_ready "$sock" || die "vhostfs did not create its socket (or it did not listen) within 30 s"

if [ -n "${E2E_LOCK:-}" ]; then exec 9>"$E2E_LOCK"; flock 9; fi
t1=$(now)
boot_fs_guest 1G "$sock" "$kernel" "$work/initramfs.cpio.zst" "e2e.tag=share" "$logroot/"
qemu_pid=$!
for _ in $(seq 3000); do
  [ -e "$work/share/upgrade-go" ] && break
  kill -0 "$qemu_pid" 2>/dev/null || break
  sleep 0.1
done
[ -e "$work/share/upgrade-go" ] || problems+=("the guest never started the upgrade phase")

upgrades=0 pids=("$first_pid")
if [ -e "$work/share/upgrade-go" ]; then
  sleep 5
  old=$(pid_now)
  kill -HUP "$old"
  if new=$(taken_over "$old"); then upgrades=$((upgrades + 1)); pids+=("$new"); fi
  check "upgrade 1 (SIGHUP, same build): pid ${new:-none} took over from $old" [ "$upgrades" -eq 1 ]
  if [ "$upgrades" -eq 1 ]; then
    st=0; wait "$first_pid" || st=$?; first_pid=''
    check "the first process exited 0" [ "$st" -eq 0 ]
  fi
fi
if [ "$upgrades" -eq 1 ]; then
  sleep 6
  install_build "$build2"
  old=$(pid_now)
  out=$("$bin" upgrade --socket-path="$sock" 2>&1) && new=$(pid_now) && [ "$new" != "$old" ] \
    && upgrades=$((upgrades + 1)) && pids+=("$new")
  check "upgrade 2 (vhostfs upgrade, second build): $out" [ "$upgrades" -eq 2 ]
  sleep 6
  install_build "$build1"
  old=$(pid_now)
  out=$("$bin" upgrade --socket-path="$sock" 2>&1) && new=$(pid_now) && [ "$new" != "$old" ] \
    && upgrades=$((upgrades + 1)) && pids+=("$new")
  check "upgrade 3 (vhostfs upgrade, first build back): $out" [ "$upgrades" -eq 3 ]
else
  # Nobody serves the guest any more: its I/O would hang until the timeout.
  stop "$qemu_pid" qemu; qemu_pid=''
fi
if [ -n "$qemu_pid" ]; then
  for _ in $(seq 3000); do kill -0 "$qemu_pid" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$qemu_pid" 2>/dev/null && problems+=("QEMU still running after 300 s")
  stop "$qemu_pid" qemu; qemu_pid=''
fi
if [ -n "${E2E_LOCK:-}" ]; then flock -u 9; exec 9>&-; fi
t2=$(now)

console=$(tr -d '\r' < "$logroot/console.log")
grep -E '^(PASS|FAIL): ' <<< "$console" | sed 's/^/  guest /' || true
check "guest: E2E-STATUS PASS" grep -q '^E2E-STATUS: PASS' <<< "$console"
last=${pids[-1]}
for _ in $(seq 100); do kill -0 "$last" 2>/dev/null || break; sleep 0.1; done
check "the last daemon exited when QEMU went" gone "$last"
check "no pid file or socket left" [ ! -e "$sock.pid" -a ! -e "$sock" ]
! grep -qE 'panicked at|ERROR' "$logroot/daemon.log" || problems+=("error in the daemon log")
base=$(sed -n 's/^E2E-FIO base maxlat_us=\([0-9]*\).*/\1/p' <<< "$console")
up=$(sed -n 's/^E2E-FIO up maxlat_us=\([0-9]*\).*/\1/p' <<< "$console")
pauses=$(sed -n 's/.*queues stood still for \([0-9.]*\) ms.*/\1/p' "$logroot/daemon.log" | tr '\n' ' ')
log "fio max latency: ${base:-?} us without upgrades, ${up:-?} us with 3 upgrades; daemon-side pauses (ms): ${pauses:-?}"

verdict=PASS
[ ${#problems[@]} -eq 0 ] || verdict="FAIL(${problems[*]})"
line="upgrade: $verdict | upgrades=$upgrades fio_maxlat_us base=${base:-?} up=${up:-?} pauses_ms=[${pauses% }] boot+test=$(elapsed "$t1" "$t2")s total=$(elapsed "$t0" "$(now)")s"
echo "  $line"
[ -z "$summary_file" ] || echo "$line" > "$summary_file"
[ ${#problems[@]} -eq 0 ]
