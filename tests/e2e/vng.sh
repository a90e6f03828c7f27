#!/usr/bin/env bash
# virtme-ng (`vng`, the tool kernel developers boot test kernels with) boots the e2e kernel on
# the host's own root file system, served by vhostfs as the `virtiofsd` vng finds first on PATH
# (a directory with a `virtiofsd` symlink to the vhostfs binary), without KVM (--disable-kvm,
# TCG). Four runs, each one boot:
#   vng-root-ro   vng run by root, read-only root (vng's default: the daemon gets --readonly
#                 --cache always)
#   vng-root-rw   vng --rw run by root (--cache auto)
#   vng-user-ro   the same as a throw-away unprivileged user (vhostfs-vng, removed on exit)
#   vng-user-rw
# In each the guest (guest-vng.sh, as the guest's root) reads a host file through the share and
# writes a marker into a host directory outside vng's overlays; ro runs first remount / rw in
# the guest, so that only the daemon can refuse the write. A run passes when vng exits 0; the
# guest's / is a virtiofs mount ("ROOTFS"), ro or rw as asked; it read the host file; the
# daemon's argv is vng's line (`--syslog --no-announce-submounts [--readonly] --socket-path S
# --shared-dir / --sandbox none --cache always|auto`) and its log is vhostfs's (its INIT line);
# ro: the write failed with "Read-only file system" and the host has no marker; rw: the host has
# the marker with the guest's content, owned by the user who ran vng (0:0, or the user's: an
# unprivileged daemon creates everything as itself); the daemon is gone after vng exits. Each
# run's wall time (vng start to exit) is printed.
#
#   tests/e2e/vng.sh [--summary-file FILE] [--cases "root-ro root-rw user-ro user-rw"]
#
# VNG: the vng binary (default target/vng-venv/bin/vng, installed by .ci/setup, else vng on
# PATH); VHOSTFS: the daemon (default target/release/vhostfs, else target/debug/vhostfs);
# VHOSTFS_GUEST_DIR: the kernel (default target/guest, its boot/vmlinuz-*; its lib/modules/ is
# what vng loads modules from); E2E_VNG_DIR: where the marker directories go (default target/,
# or /vhostfs-vng-e2e when the checkout is under /etc /home /lib /opt /root /srv /tmp /usr /var,
# which vng overlays in the guest; a given E2E_VNG_DIR there fails);
# E2E_VNG_TIMEOUT: seconds per boot (default 300); E2E_LOCK=FILE: flock(1) on FILE around each
# boot; E2E_LOG_DIR: keep the logs there. A missing vng, kernel, QEMU, udevd or vhostfs binary is
# a FAIL of every run (exit 1), never a skip. Must run as root (it creates the user). ~20 s per
# boot on 2 cores (vng's guest waits for udev to settle: ~10 s of it).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$here/lib.sh"
log() { echo "vng: $*"; }

summary_file='' cases='root-ro root-rw user-ro user-rw'
while [ $# -gt 0 ]; do
  case "$1" in
    --summary-file) summary_file=$2; shift 2 ;;
    --cases) cases=$2; shift 2 ;;
    *) echo "vng: unknown argument $1 (see the header of $0)" >&2; exit 2 ;;
  esac
done
summary=() failed=0
emit() { # LINE: one summary line
  summary+=("$1")
  [[ "$1" == *": PASS"* ]] || failed=$((failed + 1))
}
finish() {
  local s
  for s in "${summary[@]}"; do echo "  $s"; done
  [ -z "$summary_file" ] || printf '%s\n' "${summary[@]}" > "$summary_file"
  [ "$failed" -eq 0 ]
}
# fail_all REASON: a prerequisite is missing: every run fails with REASON.
fail_all() {
  local c
  log "$1" >&2
  for c in $cases; do emit "vng-$c: FAIL($1)"; done
  finish || true
  exit 1
}

# ---- prerequisites -----------------------------------------------------------------------------
[ "$(id -u)" -eq 0 ] || fail_all "must run as root (it creates a throw-away user)"
vng=${VNG:-}
if [ -z "$vng" ]; then
  vng=$repo/target/vng-venv/bin/vng
  [ -x "$vng" ] || vng=$(command -v vng || echo "$vng")
fi
[ -x "$vng" ] || fail_all "no vng (virtme-ng): run .ci/setup (target/vng-venv) or set VNG=..."
vng_version=$("$vng" --version 2>&1) || fail_all "$vng --version failed: $vng_version"
bin=${VHOSTFS:-$repo/target/release/vhostfs}
[ -z "${VHOSTFS:-}" ] || bin=$(command -v "$VHOSTFS" || echo "$VHOSTFS")
[ -n "${VHOSTFS:-}" ] || [ -x "$bin" ] || bin=$repo/target/debug/vhostfs
[ -x "$bin" ] || fail_all "no vhostfs binary at $bin (cargo build --release, or VHOSTFS=...)"
bin=$(readlink -f "$bin")
guest_dir=${VHOSTFS_GUEST_DIR:-$repo/target/guest}
kernel=$(find "$guest_dir/boot/" -maxdepth 1 -name 'vmlinuz-*' 2>/dev/null | sort -V | tail -n1 || true)
[ -n "$kernel" ] || fail_all "no guest kernel at $guest_dir/boot/vmlinuz-* (run .ci/setup)"
kernel=$(readlink -f "$kernel")
command -v qemu-system-x86_64 >/dev/null || fail_all "qemu-system-x86_64 not found (run .ci/setup)"
# vng's guest init creates the script's I/O ports (/dev/virtio-ports/virtme.*) through udev, from
# the host's root: without udevd it falls back to the console and vng exits 255, output lost.
[ -x /lib/systemd/systemd-udevd ] || command -v udevd >/dev/null \
  || fail_all "no udevd on the host (package udev, .ci/setup): vng's guest needs it"
moddir=$guest_dir/lib/modules/$(basename "$kernel" | sed 's/^vmlinuz-//')
[ -e "$moddir/modules.dep" ] || command -v depmod >/dev/null \
  || fail_all "no $moddir/modules.dep and no depmod (package kmod, .ci/setup)"
overlaid() {
  case "$1/" in /etc/*|/home/*|/lib/*|/opt/*|/root/*|/srv/*|/tmp/*|/usr/*|/var/*) return 0 ;; esac
  return 1
}
base=$(readlink -f "${E2E_VNG_DIR:-$repo/target}")
if overlaid "$base"; then
  [ -z "${E2E_VNG_DIR:-}" ] \
    || fail_all "E2E_VNG_DIR $base is under a directory vng overlays in the guest (a write there never reaches the host)"
  # A checkout under /tmp, /home, /var...: the markers go to a directory of the root's own.
  base=/vhostfs-vng-e2e
  mkdir -p "$base"
  chmod 0755 "$base"
fi

work=$(mktemp -d /tmp/vhostfs-vng.XXXXXX)
chmod 0755 "$work"
marks=$(mktemp -d "$base/vng-e2e.XXXXXX")
chmod 0755 "$marks"
# The guest runs its script from here: the checkout itself may be under a directory vng hides.
install -m 0755 "$here/guest-vng.sh" "$marks/guest-vng.sh"
logroot=${E2E_LOG_DIR:-$work/logs}/vng
mkdir -p "$logroot" "$work/bin" "$work/home"
chmod 0755 "$logroot"
ln -s "$bin" "$work/bin/virtiofsd"
user=vhostfs-vng user_made='' pgid=''
daemon_re="^$work/bin/virtiofsd --syslog"
# shellcheck disable=SC2317 # invoked from the EXIT trap
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  [ -z "$pgid" ] || stop_group "$pgid"
  pkill -KILL -f "$daemon_re" 2>/dev/null || true
  if [ -n "$user_made" ]; then
    pkill -KILL -u "$user" 2>/dev/null || true
    userdel "$user" 2>/dev/null || true
  fi
  if [ "$failed" -ne 0 ] || [ "$rc" -ne 0 ]; then
    if [ -z "${E2E_LOG_DIR:-}" ]; then
      rm -rf /tmp/vhostfs-vng-logs
      mv "$logroot" /tmp/vhostfs-vng-logs && logroot=/tmp/vhostfs-vng-logs
    fi
    log "logs kept in $logroot"
  fi
  rm -rf "$work" "$marks"
  [ "$base" != /vhostfs-vng-e2e ] || rmdir "$base" 2>/dev/null || true
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
if [[ " $cases " == *" user-"* ]]; then
  # A stale one (a killed run) goes first.
  ! id "$user" >/dev/null 2>&1 || userdel "$user" 2>/dev/null || true
  useradd --system --user-group --no-create-home --home-dir "$work/home" --shell /usr/sbin/nologin "$user"
  user_made=1
  chown "$user:$user" "$work/home"
  # The user runs the checkout's vng, kernel, vhostfs and guest script: a checkout below a
  # directory others may not enter (a CI clone under /root) gets search permission (o+x, not
  # read) on each such directory, so that it can.
  for f in "$vng" "$kernel" "$bin"; do
    d=$(dirname "$(readlink -f "$f")")
    while [ "$d" != / ]; do
      if ! setpriv "--reuid=$user" "--regid=$user" --init-groups test -x "$d"; then
        log "giving others search permission on $d (the user runs must reach $f)"
        chmod o+x "$d"
      fi
      d=$(dirname "$d")
    done
  done
fi
log "$vng_version, $(basename "$kernel"), virtiofsd -> $bin"

# ---- one run -----------------------------------------------------------------------------------
# run_vng WHO MODE: WHO root|user, MODE ro|rw.
run_vng() {
  local who=$1 mode=$2 name="vng-$1-$2" problems=() as=() owner=0:0 uidgid
  # Output in $work (which the user can reach, where E2E_LOG_DIR may not be), copied to the logs.
  local uname=root dir=$marks/$1-$2 out=$work/vng-$1-$2.out err=$work/vng-$1-$2.err
  local token="written by the $1 $2 guest" rwopt=() argv='' dpid='' st=0 t1 t2 wall deadline timed_out=''
  mkdir -p "$dir"
  echo 'from the host' > "$dir/from-host"
  : > "$out"; : > "$err"
  if [ "$who" = user ]; then
    uidgid=$(id -u "$user"):$(id -g "$user")
    owner=$uidgid uname=$user
    chown "$uidgid" "$dir" "$out" "$err"
    as=(setpriv "--reuid=$user" "--regid=$user" --init-groups)
  fi
  [ "$mode" = ro ] || rwopt=(--rw)
  log "=== $name: $vng --run $(basename "$kernel") --disable-kvm ${rwopt[*]} --exec ..."
  if [ -n "${E2E_LOCK:-}" ]; then exec 9>"$E2E_LOCK"; flock 9; fi
  t1=$(now)
  # The user opens its own output files: vng hands /proc/self/fd/{0,1,2} to QEMU, which reopens
  # them as that user (a pipe or file of root's would not do, and vng would lose the output).
  # setsid: not a group leader here, so it execs: $! is the pid and process group of the run.
  # shellcheck disable=SC2016 # expanded by that sh
  setsid "${as[@]}" env -i HOME="$work/home" USER="$uname" LOGNAME="$uname" TERM=dumb \
    PATH="$work/bin:$(dirname "$vng"):/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin" \
    OUT="$out" ERR="$err" DIR="$dir" \
    sh -c 'cd "$DIR" && exec "$@" > "$OUT" 2> "$ERR" < /dev/null' sh \
    "$vng" --verbose --run "$kernel" --disable-kvm "${rwopt[@]}" \
    --exec "sh $marks/guest-vng.sh $mode $dir '$token'" &
  pgid=$!
  deadline=$((EPOCHSECONDS + ${E2E_VNG_TIMEOUT:-300}))
  while kill -0 "$pgid" 2>/dev/null; do
    if [ -z "$argv" ]; then
      dpid=$(pgrep -f "$daemon_re" | head -n1 || true)
      [ -z "$dpid" ] || argv=$(tr '\0' ' ' < "/proc/$dpid/cmdline" 2>/dev/null || true)
    fi
    if [ "$EPOCHSECONDS" -ge "$deadline" ]; then timed_out=1; break; fi
    sleep 0.1
  done
  if [ -n "$timed_out" ]; then
    stop_group "$pgid"
    problems+=("timeout after ${E2E_VNG_TIMEOUT:-300} s")
  else
    wait "$pgid" || st=$?
  fi
  pgid=''
  t2=$(now)
  if [ -n "${E2E_LOCK:-}" ]; then flock -u 9; exec 9>&-; fi
  wall=$(elapsed "$t1" "$t2")
  cp "$out" "$err" "$logroot/"
  grep '^VNG-' "$out" | sed 's/^/  guest /' || true

  local root read write remount want_argv cache=auto ro_opt=''
  root=$(sed -n 's/^VNG-ROOT: //p' "$out")
  read=$(sed -n 's/^VNG-READ: //p' "$out")
  write=$(sed -n 's/^VNG-WRITE: //p' "$out")
  remount=$(sed -n 's/^VNG-REMOUNT: //p' "$out")
  [ "$st" -eq 0 ] || problems+=("vng exited with status $st")
  grep -q '^VNG-DONE$' "$out" || problems+=("no VNG-DONE from the guest")
  [[ "$root" == "ROOTFS virtiofs $mode,"* ]] || problems+=("guest root is '${root:-?}', want ROOTFS virtiofs $mode")
  [ "$read" = 'from the host' ] || problems+=("guest read '${read:-?}' from the host file")
  [ "$mode" = rw ] || { cache=always ro_opt='--readonly '; }
  want_argv="$work/bin/virtiofsd --syslog --no-announce-submounts ${ro_opt}--socket-path /tmp/virtme[^ ]* --shared-dir / --sandbox none --cache $cache "
  log "daemon argv: ${argv:-not seen}"
  [[ "$argv" =~ ^${want_argv}$ ]] || problems+=("daemon argv '${argv:-not seen}' is not vng's line")
  # (QEMU reopens vng's stderr with O_TRUNC: the daemon's start-up lines are gone by then.)
  grep -q 'vhostfs::fuse_server::init\] FUSE session' "$err" \
    || problems+=("no vhostfs 'FUSE session' line in vng's output (another virtiofsd? 9p?)")
  wait_for 5 sh -c "! pgrep -f '$daemon_re' >/dev/null" || problems+=("the daemon outlived vng")
  if [ "$mode" = ro ]; then
    [ "$remount" = rw ] || problems+=("the guest could not remount / rw: ${remount:-?}")
    [[ "$write" == "failed: "*"Read-only file system"* ]] || problems+=("guest write: '${write:-?}', want Read-only file system")
    [ ! -e "$dir/marker" ] || problems+=("the host has the ro guest's marker")
  else
    [[ "$write" == "ok $token "* ]] || problems+=("guest write: '${write:-?}'")
    [ "$(cat "$dir/marker" 2>/dev/null || true)" = "$token" ] || problems+=("host marker content '$(cat "$dir/marker" 2>/dev/null || true)'")
    [ "$(stat -c %u:%g "$dir/marker" 2>/dev/null || true)" = "$owner" ] \
      || problems+=("host marker owner $(stat -c %u:%g "$dir/marker" 2>/dev/null || true), want $owner")
  fi
  if [ ${#problems[@]} -eq 0 ]; then
    emit "$name: PASS | wall=${wall}s"
  else
    local reasons
    reasons=$(printf '%s; ' "${problems[@]}")
    emit "$name: FAIL(${reasons%; }) | wall=${wall}s"
    tail -n 5 "$err" | sed 's/^/  vng stderr: /' >&2 || true
  fi
}

for c in $cases; do
  case "$c" in
    root-ro|root-rw|user-ro|user-rw) run_vng "${c%-*}" "${c#*-}" ;;
    *) emit "vng-$c: FAIL(unknown case)" ;;
  esac
done
finish
