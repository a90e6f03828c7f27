# Shared by the host-side e2e scripts (sourced): timing, waiting and stopping processes. The
# caller defines log().
# shellcheck shell=bash

now() { echo "${EPOCHREALTIME/,/.}"; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }

# wait_for SECS CMD...: runs CMD every 0.1 s until it succeeds (status 0) or SECS have passed
# (status 1).
wait_for() {
  local n=$(($1 * 10)); shift
  for _ in $(seq "$n"); do "$@" && return 0; sleep 0.1; done
  return 1
}

# socket_ready PATH: PATH is a socket and listens. A daemon's socket file can exist a moment
# before it listens (virtiofsd's does; vhostfs renames its socket into place once it listens),
# and a QEMU started in that moment is refused and exits. A socket /proc/net/unix does not list
# under PATH (bound under another name, or in another network namespace) counts as listening.
socket_ready() {
  [ -S "$1" ] || return 1
  awk -v p="$1" '$8 == p && $6 == "01" { if ($4 == "00010000") l = 1; else b = 1 }
    END { exit (b && !l) }' /proc/net/unix
}

# stop PID [NAME]: SIGTERM, wait up to 5 s, then SIGKILL (said with log); reaps it. Only ever
# signals the given pid.
stop() {
  local pid=$1 name=${2:-process}
  kill -0 "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null || true; return 0; }
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then
    log "$name (pid $pid) ignored SIGTERM; sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
  fi
  wait "$pid" 2>/dev/null || true
}

# stop_group PGID: like stop, for a process group (a daemon started with setsid, so that the
# children of a wrapper script are stopped too).
stop_group() {
  local pgid=$1
  kill -0 -- "-$pgid" 2>/dev/null || { wait "$pgid" 2>/dev/null || true; return 0; }
  kill -TERM -- "-$pgid" 2>/dev/null || true
  for _ in $(seq 50); do kill -0 -- "-$pgid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 -- "-$pgid" 2>/dev/null; then
    log "daemon process group $pgid ignored SIGTERM; sending SIGKILL"
    kill -KILL -- "-$pgid" 2>/dev/null || true
  fi
  wait "$pgid" 2>/dev/null || true
}

# Boots a TCG guest in the background (its pid in $! for the caller) with one vhost-user-fs
# device, tag "share", on SOCKET; APPEND goes after "console=ttyS0 quiet panic=-1"; the
# console and QEMU's stderr go to LOGconsole.log and LOGqemu.log (LOG: a path prefix).
#   boot_fs_guest MEM SOCKET KERNEL INITRD APPEND LOG
boot_fs_guest() {
  local mem=$1 sock=$2 kernel=$3 initrd=$4 append=$5 log=$6
  qemu-system-x86_64 -accel tcg -cpu max -smp 2 -m "$mem" \
    -object "memory-backend-memfd,id=mem,size=$mem,share=on" -numa node,memdev=mem \
    -chardev "socket,id=char0,path=$sock" \
    -device vhost-user-fs-pci,queue-size=1024,chardev=char0,tag=share \
    -kernel "$kernel" -initrd "$initrd" \
    -append "console=ttyS0 quiet panic=-1 $append" \
    -nic none -nographic -no-reboot < /dev/null > "${log}console.log" 2> "${log}qemu.log" &
}
