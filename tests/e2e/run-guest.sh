#!/usr/bin/env bash
# Boots a TCG guest against a vhost-user virtio-fs daemon and reports the guest's verdict.
#
#   tests/e2e/run-guest.sh [options] [-- DAEMON_CMD [ARGS...]]
#   DAEMON="vhostfs --inode-file-handles=prefer --rlimit-nofile 4096" tests/e2e/run-guest.sh [options]
#
# The daemon command comes from the arguments after `--` or, failing that, from $DAEMON (split on
# whitespace). This script appends `--socket-path=SOCK --shared-dir=DIR` itself (and
# `--sandbox=none` for virtiofsd, which cannot build its namespace sandbox in this container),
# starts the daemon, waits for its socket, boots QEMU, waits for the guest's `E2E-STATUS:` line and
# for QEMU to exit, then checks that the daemon exited (or, if it keeps listening, stops on
# SIGTERM) cleanly.
#
# Options:
#   --initramfs FILE   guest initramfs (default: built with mkinitramfs.sh into the work dir)
#   --shared-dir DIR   directory to share (default: a fresh empty temp dir)
#   --log-dir DIR      where console.log, daemon.log, qemu.log go (default: a temp work dir,
#                      deleted on success unless E2E_KEEP=1, kept and printed on failure)
#   --timeout SECS     whole-run timeout (default: $E2E_TIMEOUT or 600)
#   --append ARGS      extra kernel command-line arguments (e.g. "e2e.script=/mnt/x.sh")
#   --tag TAG          virtio-fs tag (default: share)
# Environment: DAEMON, VHOSTFS_GUEST_DIR (default: REPO/target/guest), QEMU (default:
#   qemu-system-x86_64), E2E_MEM (default: 512M), E2E_SMP (default: 2), E2E_QUEUES (request
#   queues of the device, default: 1; the guest checks it uses that many), E2E_KEEP=1,
#   E2E_DAEMON_EXIT_TIMEOUT (seconds to wait for the daemon to exit by itself; default 10),
#   E2E_SHOW_LOGS=0 (do not dump log tails when the guest reports FAIL).
#
# Exit status: 0 guest PASS and daemon clean; 1 guest reported FAIL; 2 daemon problem (did not
# start, crashed, panicked, unclean exit); 3 harness problem (timeout, no status line, QEMU error).
# A summary line `E2E-RESULT: ...` with timings is printed last.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)

orig_args=("$@")
initramfs='' shared='' logdir='' append='' tag=share
timeout_s=${E2E_TIMEOUT:-600}
daemon_cmd=()
while [ $# -gt 0 ]; do
  case "$1" in
    --initramfs) initramfs=$2; shift 2 ;;
    --shared-dir) shared=$2; shift 2 ;;
    --log-dir) logdir=$2; shift 2 ;;
    --timeout) timeout_s=$2; shift 2 ;;
    --append) append=$2; shift 2 ;;
    --tag) tag=$2; shift 2 ;;
    --) shift; daemon_cmd=("$@"); break ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "run-guest: unknown argument $1 (see --help)" >&2; exit 3 ;;
  esac
done
if [ ${#daemon_cmd[@]} -eq 0 ]; then
  # shellcheck disable=SC2206 # word splitting of $DAEMON is the interface
  daemon_cmd=(${DAEMON:-})
fi
if [ ${#daemon_cmd[@]} -eq 0 ]; then
  echo "run-guest: no daemon command (set DAEMON=... or pass it after --)" >&2
  exit 3
fi

log() { echo "run-guest: $*" >&2; }
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$here/lib.sh"

qemu=${QEMU:-qemu-system-x86_64}
mem=${E2E_MEM:-512M}
smp=${E2E_SMP:-2}
queues=${E2E_QUEUES:-1}
daemon_exit_timeout=${E2E_DAEMON_EXIT_TIMEOUT:-10}
guest_dir=${VHOSTFS_GUEST_DIR:-$repo/target/guest}
kernel=$(find "$guest_dir/boot/" -maxdepth 1 -name 'vmlinuz-*' 2>/dev/null | sort -V | tail -n1 || true)
if [ -z "$kernel" ]; then
  log "no guest kernel at $guest_dir/boot/vmlinuz-* (run .ci/setup or set VHOSTFS_GUEST_DIR)"
  exit 3
fi
command -v "$qemu" >/dev/null || { log "$qemu not found (run .ci/setup)"; exit 3; }
command -v "${daemon_cmd[0]}" >/dev/null || { log "daemon ${daemon_cmd[0]} not found"; exit 2; }

work=$(mktemp -d "${TMPDIR:-/tmp}/vhostfs-e2e.XXXXXX")
[ -n "$logdir" ] || logdir=$work
mkdir -p "$logdir"
[ -n "$shared" ] || { shared=$work/shared; mkdir -p "$shared"; }
sock=$work/vhost-fs.sock
console=$logdir/console.log
dlog=$logdir/daemon.log
qlog=$logdir/qemu.log
: > "$console"

daemon_pid='' qemu_pid='' result=3 keep=${E2E_KEEP:-}

# shellcheck disable=SC2317 # invoked from the EXIT trap
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  [ -z "$qemu_pid" ] || stop "$qemu_pid" qemu
  [ -z "$daemon_pid" ] || stop_group "$daemon_pid"
  rm -f "$sock"
  if [ "$result" -ne 0 ] || [ "$rc" -ne 0 ]; then keep=1; fi
  if [ -n "$keep" ]; then
    log "logs kept in $logdir"
  fi
  # A --log-dir given by the caller is never deleted; the temp work dir is unless kept.
  if [ -z "$keep" ] || [ "$logdir" != "$work" ]; then rm -rf "$work"; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'log "interrupted"; exit 130' INT TERM

show_logs() {
  log "---- console (tail) ----"; tail -n 40 "$console" | tr -d '\r' >&2 || true
  log "---- daemon log (tail) ----"; tail -n 20 "$dlog" >&2 || true
  if [ -s "$qlog" ]; then log "---- qemu stderr ----"; tail -n 20 "$qlog" >&2 || true; fi
}
fail() { result=$1; shift; log "FAIL: $*"; show_logs; exit "$result"; }

if [ -z "$initramfs" ]; then
  initramfs=$work/initramfs.cpio.gz
  "$here/mkinitramfs.sh" "$initramfs" >/dev/null
fi

# ---- daemon ------------------------------------------------------------------------------------
dargs=("--socket-path=$sock" "--shared-dir=$shared")
if [ "$(basename "${daemon_cmd[0]}")" = virtiofsd ] && [[ " ${daemon_cmd[*]} " != *" --sandbox"* ]]; then
  dargs+=(--sandbox=none)
fi
log "daemon: ${daemon_cmd[*]} ${dargs[*]}"
t_daemon=$(now)
# setsid: not a group leader here, so it execs the daemon in a new session without forking:
# $! is the daemon's pid and the id of its process group.
setsid "${daemon_cmd[@]}" "${dargs[@]}" > "$dlog" 2>&1 < /dev/null &
daemon_pid=$!
for _ in $(seq 300); do
  socket_ready "$sock" && break
  kill -0 "$daemon_pid" 2>/dev/null || break
  sleep 0.1
done
if ! kill -0 "$daemon_pid" 2>/dev/null; then
  st=0; wait "$daemon_pid" || st=$?
  stop_group "$daemon_pid"; daemon_pid=''
  fail 2 "daemon exited (status $st) before QEMU connected"
fi
socket_ready "$sock" || fail 2 "daemon did not create $sock (or it did not listen) within 30 s"
t_sock=$(now)

# ---- QEMU --------------------------------------------------------------------------------------
qargs=(
  -accel tcg -cpu max -smp "$smp" -m "$mem"
  -object "memory-backend-memfd,id=mem,size=$mem,share=on" -numa 'node,memdev=mem'
  -chardev "socket,id=char0,path=$sock"
  -device "vhost-user-fs-pci,queue-size=1024,chardev=char0,tag=$tag,num-request-queues=$queues"
  -kernel "$kernel" -initrd "$initramfs"
  -append "console=ttyS0 quiet panic=-1 e2e.tag=$tag e2e.queues=$queues${append:+ $append}"
  -nic none -nographic -no-reboot
)
log "qemu: $(basename "$kernel"), $smp vCPUs, $mem, timeout ${timeout_s}s; console log $console"
t_qemu=$(now)
"$qemu" "${qargs[@]}" < /dev/null > "$console" 2> "$qlog" &
qemu_pid=$!

t_init='' t_mounted='' t_status='' timed_out='' daemon_died=''
deadline=$(awk -v a="$t_qemu" -v b="$timeout_s" 'BEGIN { printf "%d", a + b }')
while kill -0 "$qemu_pid" 2>/dev/null; do
  if [ -z "$t_init" ] && grep -q 'E2E-INIT uptime=' "$console"; then t_init=$(now); fi
  if [ -z "$t_mounted" ] && grep -q 'E2E-MOUNTED uptime=' "$console"; then t_mounted=$(now); fi
  if [ -z "$t_status" ] && grep -q 'E2E-STATUS: ' "$console"; then t_status=$(now); fi
  if [ "${EPOCHSECONDS}" -ge "$deadline" ]; then timed_out=1; break; fi
  if [ -z "$t_status" ] && ! kill -0 "$daemon_pid" 2>/dev/null; then
    # The daemon died under a running guest: its requests would hang until the timeout.
    daemon_died=${daemon_died:-$EPOCHSECONDS}
    if [ $((EPOCHSECONDS - daemon_died)) -ge 3 ]; then
      stop "$qemu_pid" qemu; qemu_pid=''
      st=0; wait "$daemon_pid" || st=$?
      stop_group "$daemon_pid"; daemon_pid=''
      fail 2 "daemon exited (status $st) while the guest was running"
    fi
  fi
  sleep 0.1
done
if [ -n "$timed_out" ]; then
  # Where the daemon's threads wait (a request stuck in the host, or all idle: the guest hung).
  threads=$(for t in $(pgrep -g "$daemon_pid" | sed 's|.*|/proc/&/task/*|'); do
    printf '%s:%s:%s ' "$(cat "$t/comm" 2>/dev/null)" "$(sed 's/.*) //; s/ .*//' "$t/stat" 2>/dev/null)" \
      "$(cat "$t/wchan" 2>/dev/null)"
  done)
  stop "$qemu_pid" qemu; qemu_pid=
  fail 3 "timeout: guest did not power off within ${timeout_s}s (daemon threads: ${threads% })"
fi
qemu_st=0; wait "$qemu_pid" || qemu_st=$?; qemu_pid=
t_end=$(now)
[ -n "$t_status" ] || t_status=$t_end
[ -n "$t_init" ] || { grep -q 'E2E-INIT uptime=' "$console" && t_init=$t_status; } || true
[ -n "$t_mounted" ] || { grep -q 'E2E-MOUNTED uptime=' "$console" && t_mounted=$t_status; } || true

# ---- daemon shutdown ---------------------------------------------------------------------------
daemon_note=
for _ in $(seq $((daemon_exit_timeout * 10))); do
  kill -0 "$daemon_pid" 2>/dev/null || break
  sleep 0.1
done
if kill -0 "$daemon_pid" 2>/dev/null; then
  # Still listening after the guest left: ask it to stop, like a VMM's shutdown would.
  kill -TERM "$daemon_pid"
  for _ in $(seq 50); do kill -0 "$daemon_pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$daemon_pid" 2>/dev/null; then
    stop_group "$daemon_pid"; daemon_pid=''
    daemon_note="did not exit within ${daemon_exit_timeout}s of QEMU exiting and ignored SIGTERM (killed)"
  else
    daemon_st=0; wait "$daemon_pid" || daemon_st=$?
    case "$daemon_st" in
      0|143) log "daemon stopped on SIGTERM (status $daemon_st)" ;;
      *) daemon_note="exited with status $daemon_st after SIGTERM" ;;
    esac
  fi
else
  daemon_st=0; wait "$daemon_pid" || daemon_st=$?
  if [ "$daemon_st" -ne 0 ]; then daemon_note="exited with status $daemon_st"; fi
fi
if [ -n "$daemon_pid" ]; then
  # A child that outlives the daemon a moment (the upgrade launcher exits once the daemon has,
  # after removing its socket and pid file) is reaped by init a little later: give the group 2 s
  # to empty.
  for _ in $(seq 20); do kill -0 -- "-$daemon_pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 -- "-$daemon_pid" 2>/dev/null; then
    daemon_note="${daemon_note:+$daemon_note; }left processes behind in its process group (killed)"
  fi
  stop_group "$daemon_pid"; daemon_pid=''
fi
if grep -qE "panicked at|RUST_BACKTRACE|Segmentation fault|AddressSanitizer" "$dlog"; then
  daemon_note="${daemon_note:+$daemon_note; }panic/crash in daemon log"
fi
t_daemon_done=$(now)

# ---- verdict -----------------------------------------------------------------------------------
status_line=$(tr -d '\r' < "$console" | grep -o 'E2E-STATUS: .*' | tail -n1 || true)
npass=$(tr -d '\r' < "$console" | grep -c '^PASS: ' || true)
nfail=$(tr -d '\r' < "$console" | grep -c '^FAIL: ' || true)
boot_s=- mount_s=- test_s=-
[ -z "$t_init" ] || boot_s=$(elapsed "$t_qemu" "$t_init")
[ -z "$t_mounted" ] || mount_s=$(elapsed "${t_init:-$t_qemu}" "$t_mounted")
[ -z "$t_mounted" ] || test_s=$(elapsed "$t_mounted" "$t_status")
timing="daemon_start=$(elapsed "$t_daemon" "$t_sock")s boot=${boot_s}s mount=${mount_s}s test=${test_s}s"
timing+=" poweroff=$(elapsed "$t_status" "$t_end")s daemon_exit=$(elapsed "$t_end" "$t_daemon_done")s"
timing+=" total=$(elapsed "$t_daemon" "$t_daemon_done")s"

if [ -n "$daemon_note" ]; then
  result=2
elif [ -z "$status_line" ]; then
  result=3
elif [[ "$status_line" == "E2E-STATUS: PASS"* ]]; then
  result=0
else
  result=1
fi
[ "$qemu_st" -eq 0 ] || log "note: qemu exited with status $qemu_st"

# QEMU 10's TCG can abort in iotlb_to_section while the firmware reprograms the memory map (a
# race inside QEMU; once in hundreds of boots here). When that happens before the guest's init
# ran, the daemon has served nothing yet: boot once more, and say so.
if [ "$result" = 3 ] && [ -z "$t_init" ] && [ -z "${E2E_RETRIED:-}" ] \
  && grep -q 'iotlb_to_section: Assertion' "$qlog"; then
  log "QEMU aborted in iotlb_to_section before the guest's init ran (a QEMU TCG race): booting once more"
  trap - EXIT INT TERM
  rm -rf "$work"
  E2E_RETRIED=1 exec "$0" "${orig_args[@]}"
fi

tr -d '\r' < "$console" | grep -E '^FAIL: ' >&2 || true
[ -z "$status_line" ] || log "guest: $status_line"
case $result in
  0) verdict=PASS ;;
  1) verdict=FAIL; [ "${E2E_SHOW_LOGS:-1}" = 0 ] || show_logs ;;
  2) verdict=DAEMON-ERROR; log "daemon: $daemon_note"; show_logs ;;
  *) verdict=ERROR; log "no E2E-STATUS line from the guest (qemu status $qemu_st)"; show_logs ;;
esac
echo "E2E-RESULT: $verdict checks_passed=$npass checks_failed=$nfail $timing guest=[${status_line#E2E-STATUS: }]"
exit "$result"
