#!/usr/bin/env bash
# The host's own systemd as PID 1 of a container (systemd-nspawn --boot --volatile=yes, package
# systemd-container) drives vhostfs@share.socket/.service, installed there by contrib/install.sh:
#   - the socket unit listens, the service is not running;
#   - QEMU (on the host, through the socket directory bind-mounted from the container) connects:
#     systemd starts the service with the socket as fd 3; Type=notify: systemd reports it started
#     only after READY=1; the TCG guest mounts the share, writes and reads back, chowns;
#   - QEMU's disconnect ends vhostfs with exit 0 (Result=success), the socket keeps listening;
#   - a connection activates it again; `systemctl stop` ends it cleanly (status 0);
#   - under the default sandbox (namespace), `systemctl reload` under a connected guest (guest-reload-test.sh,
#     appending to a file it holds open) hands the session to a new process, which becomes the
#     main pid; the guest sees no error; QEMU's disconnect then ends it with status 0;
#   - stopping the socket unit removes the socket, no pid file is left.
#
#   tests/e2e/systemd.sh [--summary-file FILE]
#
# No systemd is needed on the host (there is none here). VHOSTFS is not used: install.sh builds
# (PROFILE=dev) from this tree. E2E_LOCK=FILE: take flock(1) on FILE around the QEMU boot. Must run
# as root. ~35 s (2 boots).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$here/lib.sh"
log() { echo "systemd: $*"; }
die() { log "$*" >&2; exit 2; }

summary_file=
[ "${1:-}" != --summary-file ] || summary_file=$2
[ "$(id -u)" -eq 0 ] || die "must run as root"
command -v systemd-nspawn >/dev/null || die "systemd-nspawn not found (systemd-container, .ci/setup)"
[ -x /lib/systemd/systemd ] || die "no /lib/systemd/systemd to boot"
kernel=$(find "$repo/target/guest/boot/" -maxdepth 1 -name 'vmlinuz-*' 2>/dev/null | sort -V | tail -n1)
[ -n "$kernel" ] || die "no guest kernel under target/guest (run .ci/setup)"

work=$(mktemp -d /tmp/vhostfs-systemd.XXXXXX)
logroot=${E2E_LOG_DIR:-$work/logs}/systemd
mkdir -p "$logroot" "$work/run" "$work/share"
machine=vhostfs-e2e-$$
nspawn_pid='' qemu_pid='' leader='' failed=0 problems=()
# in_ct CMD...: run CMD in the container (all its namespaces), with cargo on PATH for install.sh.
in_ct() {
  nsenter -t "$leader" -a env -i HOME=/root TERM=dumb \
    PATH=/root/.cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$@"
}
# shellcheck disable=SC2317 # invoked from the EXIT trap
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  [ -z "$qemu_pid" ] || stop "$qemu_pid" qemu
  if [ -n "$nspawn_pid" ] && kill -0 "$nspawn_pid" 2>/dev/null; then
    in_ct journalctl --no-pager -o short-monotonic > "$logroot/journal.log" 2>&1 || true
    # SIGTERM to nspawn: the container's systemd halts; wait for it to finish.
    kill -TERM "$nspawn_pid" 2>/dev/null || true
    for _ in $(seq 300); do kill -0 "$nspawn_pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$nspawn_pid" 2>/dev/null; then log "the container did not halt in 30 s: SIGKILL"; kill -KILL "$nspawn_pid"; fi
    wait "$nspawn_pid" 2>/dev/null || true
  fi
  if [ "$failed" -ne 0 ] || [ "$rc" -ne 0 ]; then
    if [ -z "${E2E_LOG_DIR:-}" ]; then
      rm -rf /tmp/vhostfs-systemd-logs && mkdir -p /tmp/vhostfs-systemd-logs
      mv "$logroot" /tmp/vhostfs-systemd-logs/ && logroot=/tmp/vhostfs-systemd-logs/systemd
    fi
    log "logs kept in $logroot"
  fi
  rm -rf "$work"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
check() { # NAME CONDITION...: a host-side check
  local name=$1; shift
  if "$@"; then log "PASS: $name"; else log "FAIL: $name"; problems+=("$name"); fi
}
show() { in_ct systemctl show -P "$1" "$2"; }

t0=$(now)
"$here/mkinitramfs.sh" "$work/initramfs.cpio.gz" "$here/guest-libvirt-test.sh" >/dev/null
echo 'from the host' > "$work/share/from-host.txt"

# ---- the container -----------------------------------------------------------------------------
# --volatile=yes: a tmpfs root with the host's /usr (made writable by a throw-away overlay, for
# install.sh); the tree that builds is bind-mounted at its own path, cargo with it, and the host's
# /etc/alternatives (cc is /etc/alternatives/cc; the container's /etc starts empty).
systemd-nspawn -D / --volatile=yes --overlay=/usr::/usr --boot --machine="$machine" \
  --console=pipe --register=no --keep-unit \
  --bind="$repo" --bind=/root/.cargo --bind-ro=/root/.rustup --bind-ro=/etc/alternatives \
  --bind="$work/run:/run/vhostfs" --bind="$work/share:/srv/share" \
  > "$logroot/nspawn.log" 2>&1 < /dev/null &
nspawn_pid=$!
for _ in $(seq 300); do
  leader=$(pgrep -P "$nspawn_pid" -x systemd || true)
  [ -n "$leader" ] && break
  kill -0 "$nspawn_pid" 2>/dev/null || break
  sleep 0.1
done
[ -n "$leader" ] || { cat "$logroot/nspawn.log" >&2; die "systemd-nspawn did not start systemd"; }
state=''
for _ in $(seq 600); do
  state=$(in_ct systemctl is-system-running 2>/dev/null || true)
  [[ $state == running || $state == degraded || $state == maintenance ]] && break
  sleep 0.1
done
log "container $machine: PID 1 is $(in_ct cat /proc/1/comm) (host pid $leader), system $state at $(elapsed "$t0" "$(now)") s"
check "PID 1 of the container is systemd" [ "$(in_ct cat /proc/1/comm)" = systemd ]
check "the container booted (running or degraded)" grep -qxE 'running|degraded' <<< "$state"

# ---- install and enable ------------------------------------------------------------------------
in_ct sh -c "cd '$repo' && PROFILE=dev contrib/install.sh" > "$logroot/install.log" 2>&1 \
  || { cat "$logroot/install.log" >&2; die "contrib/install.sh failed in the container"; }
log "installed: $(in_ct /usr/bin/vhostfs --version | head -n1) at $(elapsed "$t0" "$(now)") s"
in_ct sh -c 'printf "SHARED_DIR=/srv/share\nVHOSTFS_ARGS=--inode-file-handles=prefer\n" > /etc/vhostfs/share.conf'
in_ct systemctl daemon-reload
in_ct systemctl start vhostfs@share.socket
check "socket unit listening" [ "$(show ActiveState vhostfs@share.socket)" = active ]
check "the socket exists (bind-mounted to the host)" [ -S "$work/run/share.sock" ]
check "the service is not running before a connection" [ "$(show ActiveState vhostfs@share.service)" = inactive ]

# ---- QEMU connects: socket activation, readiness, the guest's checks -------------------------------
if [ -n "${E2E_LOCK:-}" ]; then exec 9>"$E2E_LOCK"; flock 9; fi
t1=$(now)
boot_fs_guest 512M "$work/run/share.sock" "$kernel" "$work/initramfs.cpio.gz" \
  "e2e.tag=share e2e.queues=1" "$logroot/"
qemu_pid=$!
seen_active='' main_pid=''
for _ in $(seq 1200); do
  kill -0 "$qemu_pid" 2>/dev/null || break
  if [ -z "$seen_active" ] && [ "$(show ActiveState vhostfs@share.service)" = active ]; then
    seen_active=1 main_pid=$(show MainPID vhostfs@share.service)
  fi
  sleep 0.1
done
if kill -0 "$qemu_pid" 2>/dev/null; then problems+=("QEMU still running after 120 s"); fi
stop "$qemu_pid" qemu; qemu_pid=''
if [ -n "${E2E_LOCK:-}" ]; then flock -u 9; exec 9>&-; fi
t2=$(now)
tr -d '\r' < "$logroot/console.log" | grep -E '^(PASS|FAIL): ' | sed 's/^/  guest /' || true
check "guest: E2E-STATUS PASS" grep -q '^E2E-STATUS: PASS' <(tr -d '\r' < "$logroot/console.log")
check "the connection started vhostfs@share.service (seen active, main pid ${main_pid:-none})" [ -n "$seen_active" ]
# Type=notify: "Started ..." is logged when READY=1 arrives, not at fork.
notified() {
  [ "$(show Type vhostfs@share.service)" = notify ] \
    && in_ct journalctl -q -u vhostfs@share.service --grep 'Started vhostfs' >/dev/null
}
check "Type=notify, and systemd logged it started (READY=1)" notified
check "the host sees the guest's file" [ "$(cat "$work/share/written.txt" 2>/dev/null)" = 'written by the libvirt guest' ]
check "owners on the host 0:0 and 1000:1000" \
  [ "$(stat -c %u:%g "$work/share/written.txt" "$work/share/owned" 2>/dev/null | tr '\n' ' ')" = "0:0 1000:1000 " ]
for _ in $(seq 50); do [ "$(show ActiveState vhostfs@share.service)" = inactive ] && break; sleep 0.1; done
check "QEMU's disconnect: the service exited 0 (Result=success)" \
  [ "$(show ActiveState vhostfs@share.service) $(show Result vhostfs@share.service) $(show ExecMainStatus vhostfs@share.service)" = "inactive success 0" ]
check "the socket unit still listens" [ "$(show ActiveState vhostfs@share.socket)" = active ]

# ---- activated again, then systemctl stop ------------------------------------------------------
python3 -c 'import socket, sys, time
s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); time.sleep(30)' "$work/run/share.sock" &
client=$!
for _ in $(seq 100); do [ "$(show SubState vhostfs@share.service)" = running ] && break; sleep 0.1; done
check "a second connection activates it again" [ "$(show SubState vhostfs@share.service)" = running ]
in_ct systemctl stop vhostfs@share.service
check "systemctl stop: clean exit (Result=success, status 0)" \
  [ "$(show Result vhostfs@share.service) $(show ExecMainStatus vhostfs@share.service)" = "success 0" ]
kill "$client" 2>/dev/null || true; wait "$client" 2>/dev/null || true

# ---- systemctl reload: an in-place upgrade under a connected guest (default sandbox) -----------
"$here/mkinitramfs.sh" "$work/reload.cpio.gz" "$here/guest-reload-test.sh" >/dev/null
if [ -n "${E2E_LOCK:-}" ]; then exec 9>"$E2E_LOCK"; flock 9; fi
t3=$(now)
boot_fs_guest 512M "$work/run/share.sock" "$kernel" "$work/reload.cpio.gz" \
  "e2e.tag=share e2e.queues=1" "$logroot/reload-"
qemu_pid=$!
for _ in $(seq 1200); do
  [ -e "$work/share/reload-go" ] && break
  kill -0 "$qemu_pid" 2>/dev/null || break
  sleep 0.1
done
before=$(show MainPID vhostfs@share.service)
reload_ok=''
if [ -e "$work/share/reload-go" ]; then
  sleep 1
  in_ct systemctl reload vhostfs@share.service > "$logroot/reload.log" 2>&1 && reload_ok=1
  sleep 1
fi
after=$(show MainPID vhostfs@share.service)
touch "$work/share/reload-done"
for _ in $(seq 1200); do kill -0 "$qemu_pid" 2>/dev/null || break; sleep 0.1; done
stop "$qemu_pid" qemu; qemu_pid=''
if [ -n "${E2E_LOCK:-}" ]; then flock -u 9; exec 9>&-; fi
t4=$(now)
tr -d '\r' < "$logroot/reload-console.log" | grep -E '^(PASS|FAIL): ' | sed 's/^/  guest /' || true
check "systemctl reload succeeded under a connected guest" [ -n "$reload_ok" ]
check "the main pid moved to the new process ($before -> $after)" [ "$before" != "$after" -a "$after" != 0 ]
check "reload guest: E2E-STATUS PASS" grep -q '^E2E-STATUS: PASS' <(tr -d '\r' < "$logroot/reload-console.log")
for _ in $(seq 50); do [ "$(show ActiveState vhostfs@share.service)" = inactive ] && break; sleep 0.1; done
check "after the reload, QEMU's disconnect: exit 0 (Result=success)" \
  [ "$(show ActiveState vhostfs@share.service) $(show Result vhostfs@share.service) $(show ExecMainStatus vhostfs@share.service)" = "inactive success 0" ]

in_ct systemctl stop vhostfs@share.socket
check "stopping the socket unit removes the socket" [ ! -e "$work/run/share.sock" ]
check "no pid file left" [ -z "$(find "$work/run" -name '*.pid')" ]
in_ct journalctl -q --no-pager -u vhostfs@share.service -u vhostfs@share.socket > "$logroot/units.log" 2>&1 || true
! grep -qE 'panicked at|ERROR' "$logroot/units.log" || problems+=("error in the units' journal")

verdict=PASS
[ ${#problems[@]} -eq 0 ] || { verdict="FAIL(${problems[*]})"; failed=1; }
line="systemd-nspawn: $verdict | boot+test=$(elapsed "$t1" "$t2")s reload boot+test=$(elapsed "$t3" "$t4")s total=$(elapsed "$t0" "$(now)")s"
echo "  $line"
[ -z "$summary_file" ] || echo "$line" > "$summary_file"
[ "$failed" -eq 0 ]
