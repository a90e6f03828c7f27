#!/usr/bin/env bash
# A share on a distributed filesystem (issue 35): a GlusterFS volume started here (Debian's
# glusterfs-server/-client, glusterd started by hand, no systemd; a replicated volume of two
# bricks in this run's temp dir), mounted twice on this machine: mount A, where the daemons'
# shares are, and mount B, "the other host". One volume for all cases (start-up ~5 s). Cases:
#   gluster-mandatory       --inode-file-handles=mandatory refuses the share (one error line)
#   gluster-cache-MODE      for MODE auto, always, metadata, never (vhostfs, prefer): the
#                           wrong-file case of guest-gluster-test.sh in a real guest (the host
#                           drops its caches while the guest holds 300 files; every read right,
#                           every write in its own file, checked through B); with auto also the
#                           changes host B makes while the guest works, and no daemon fd left on
#                           the names B removed
#   gluster-fs              the e2e fs test (guest-fs-test.sh, host-fs-test.sh: E2E_MANY 2,000)
#   gluster-pjdfstest       pjdfstest (the crate) in the guest, vhostfs and virtiofsd 1.14
#                           (--sandbox=none) each on its own directory: passes when vhostfs fails
#                           no test virtiofsd passes (each one's failures are printed)
#   gluster-migration-*     tests/e2e/migration.sh --hosts A B: find-paths, file-handles,
#                           KubeVirt's line (the victim renamed through B between save and
#                           load), drop-caches (the host forgets its inodes between save and load)
#
#   tests/e2e/gluster.sh [--summary-file FILE] [--cases "NAME..."]
#
# --cases: a subset (names without "gluster-"; "migration" for the four migration cases).
# VHOSTFS: the daemon (default target/release/vhostfs, else target/debug/vhostfs); VIRTIOFSD:
# virtiofsd 1.14 (default: on PATH or ~/.cargo/bin); PJDFSTEST: see run-all.sh. E2E_LOG_DIR:
# keep the logs there. ~3 min on 2 cores (release build; 185 s through run-all.sh). Must run as root; glusterd's port 24007 must be free.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$here/lib.sh"
log() { echo "gluster: $*"; }
die() { log "$*" >&2; exit 2; }

summary_file='' cases='mandatory cache-auto cache-always cache-metadata cache-never fs pjdfstest migration'
while [ $# -gt 0 ]; do
  case "$1" in
    --summary-file) summary_file=$2; shift 2 ;;
    --cases) cases=$2; shift 2 ;;
    *) die "unknown argument $1 (see the header of $0)" ;;
  esac
done
bin=${VHOSTFS:-$repo/target/release/vhostfs}
[ -x "$bin" ] || bin=$repo/target/debug/vhostfs
[ -x "$bin" ] || die "no vhostfs binary (cargo build --release, or VHOSTFS=...)"
virtiofsd=${VIRTIOFSD:-$(command -v virtiofsd || echo "$HOME/.cargo/bin/virtiofsd")}
pjdfstest=${PJDFSTEST:-$repo/target/pjdfstest/bin/pjdfstest}
[ "$(id -u)" -eq 0 ] || die "must run as root"
export PATH=$PATH:/usr/sbin:/sbin
for c in glusterd gluster glusterfs; do
  command -v "$c" >/dev/null || die "$c not found: run .ci/setup (glusterfs-server, glusterfs-client)"
done
! ss -Hltn 'sport = :24007' | grep -q . || die "port 24007 is taken: another glusterd runs here"
want() { [[ " $cases " == *" $1 "* ]]; }

work=$(mktemp -d /tmp/vhostfs-gluster.XXXXXX)
logroot=${E2E_LOG_DIR:-$work/logs}/gluster
G=$work/g
mkdir -p "$logroot" "$G"/{wd,run,log,brick1,brick2,a,b}
A=$G/a B=$G/b
failed=0 summary=() glusterd_pid='' volume=''
gcli() {
  timeout 60 gluster --glusterd-sock="$G/run/glusterd.socket" --log-file="$G/log/cli.log" --mode=script "$@"
}
# The pids of what glusterd and the mounts started (bricks, self-heal daemon, FUSE clients),
# and the files they keep outside $G (brick sockets, brick logs).
volume_pids() { cat "$G"/run/vols/vhostfs/*.pid "$G"/run/shd/vhostfs/*.pid "$G"/run/mount-*.pid 2>/dev/null || true; }
outside_files() {
  local p
  for p in $(volume_pids); do
    { tr '\0' '\n' < "/proc/$p/cmdline"; } 2>/dev/null | awk '$0 == "-S" || $0 == "-l" { getline; print }'
  done | grep -v "^$G/" | grep -v 'glustershd.log$' || true
}
# shellcheck disable=SC2317 # invoked from the EXIT trap
cleanup() {
  local rc=$? m p
  trap - EXIT INT TERM
  local outside pids
  outside=$(outside_files) pids=$(volume_pids)
  for m in "$A" "$B"; do
    if mountpoint -q "$m"; then umount "$m" 2>/dev/null || umount -l "$m"; fi
  done
  if [ "$volume" = started ]; then gcli volume stop vhostfs force >/dev/null || log "volume stop failed"; fi
  if [ -n "$volume" ]; then gcli volume delete vhostfs >/dev/null || log "volume delete failed"; fi
  [ -z "$glusterd_pid" ] || stop "$glusterd_pid" glusterd
  for p in $pids; do
    if { tr '\0' ' ' < "/proc/$p/cmdline"; } 2>/dev/null | grep -q "$G"; then stop "$p" "gluster process"; fi
  done
  [ -z "$outside" ] || while IFS= read -r f; do rm -f "$f"; done <<< "$outside"
  cp -r "$G/log" "$logroot/glusterfs-logs" 2>/dev/null || true
  if [ "$failed" -ne 0 ] || [ "$rc" -ne 0 ]; then log "logs kept in $logroot"; fi
  [ -n "${E2E_LOG_DIR:-}" ] || [ "$failed" -ne 0 ] || [ "$rc" -ne 0 ] || rm -rf "$logroot"
  rm -rf "$work/g" "$work"/*.cpio.gz "$work/shares"
  [ -n "${E2E_LOG_DIR:-}" ] || [ "$failed" -ne 0 ] || [ "$rc" -ne 0 ] || rm -rf "$work"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The volume: glusterd on its own working and run dirs, replica 2 over two bricks here, mounted
# at A and B; ready once a file written through A reads back through B.
t0=$(now)
cat > "$G/glusterd.vol" <<EOF
volume management
    type mgmt/glusterd
    option working-directory $G/wd
    option run-directory $G/run
    option glusterd-sockfile $G/run/glusterd.socket
    option transport-type socket
    option transport.socket.listen-port 24007
    option ping-timeout 0
    option event-threads 1
end-volume
EOF
glusterd -N -f "$G/glusterd.vol" -p "$G/run/glusterd.pid" -l "$G/log/glusterd.log" > "$G/log/glusterd.stderr" 2>&1 &
glusterd_pid=$!
wait_for 30 gcli volume list >/dev/null 2>&1 || die "glusterd did not answer within 30 s: $(tail -n 5 "$G/log/glusterd.log")"
host=$(hostname)
# force: the bricks are on the root filesystem
gcli volume create vhostfs replica 2 "$host:$G/brick1" "$host:$G/brick2" force >/dev/null || die "volume create failed"
volume=created
gcli volume start vhostfs >/dev/null || die "volume start failed"
volume=started
for m in a b; do
  glusterfs --volfile-server=127.0.0.1 --volfile-id=vhostfs -l "$G/log/mount-$m.log" \
    -p "$G/run/mount-$m.pid" "$G/$m" || die "glusterfs mount $m failed"
  wait_for 10 mountpoint -q "$G/$m" || die "$G/$m is not mounted 10 s after glusterfs returned"
done
echo probe > "$A/.probe"
wait_for 10 grep -q probe "$B/.probe" 2>/dev/null || die "a file written through A did not show through B"
rm "$A/.probe"
log "volume vhostfs (replica 2) up and mounted at A=$A and B=$B in $(elapsed "$t0" "$(now)") s"

# The guest images.
"$here/mkinitramfs.sh" "$work/gluster.cpio.gz" "$here/guest-gluster-test.sh" >/dev/null
"$here/mkinitramfs.sh" "$work/fs.cpio.gz" >/dev/null
pjd_initramfs=''
if [ -x "$pjdfstest" ] && "$here/mkinitramfs.sh" --extra-bin "$pjdfstest" "$work/pjdfstest.cpio.gz" \
  "$here/guest-pjdfstest-test.sh" >/dev/null; then pjd_initramfs=$work/pjdfstest.cpio.gz; fi

# boot NAME INITRAMFS SHARE APPEND DAEMON ARGS...: one guest on SHARE (a directory under A);
# sets $res to the guest's verdict (PASS, FAIL, ...) and $t_case to the time taken.
boot() {
  local name=$1 initramfs=$2 share=$3 append=$4 t; shift 4
  mkdir -p "$logroot/$name"
  t=$(now)
  E2E_SHOW_LOGS=0 "$here/run-guest.sh" --initramfs "$initramfs" --shared-dir "$share" \
    --log-dir "$logroot/$name" --append "$append" -- "$@" > "$logroot/$name/run-guest.out" 2>&1 || true
  res=$(grep -o '^E2E-RESULT: [A-Z-]*' "$logroot/$name/run-guest.out" | awk '{ print $2 }' || true)
  t_case=$(elapsed "$t" "$(now)")
  tr -d '\r' < "$logroot/$name/console.log" 2>/dev/null | grep -E '^(PASS|FAIL): |^  ' | grep -v '^PASS: pjdfstest' || true
}
# verdict NAME WHY: the case's summary line (WHY empty: PASS)
verdict() {
  if [ -z "$2" ]; then summary+=("gluster-$1: PASS | ${t_case}s"); else
    summary+=("gluster-$1: FAIL($2) | ${t_case}s"); failed=$((failed + 1)); fi
  log "${summary[-1]}"
}
guest_why() { tr -d '\r' < "$logroot/$1/console.log" 2>/dev/null | grep -m1 '^FAIL: ' | cut -c7-200 || echo "guest: ${res:-no result}"; }

if want mandatory; then
  log "=== mandatory"
  mkdir -p "$A/mandatory"
  t=$(now) st=0
  timeout 30 "$bin" --socket-path="$work/mandatory.sock" --shared-dir="$A/mandatory" \
    --inode-file-handles=mandatory > "$logroot/mandatory.log" 2>&1 || st=$?
  t_case=$(elapsed "$t" "$(now)")
  cat "$logroot/mandatory.log"
  lines=$(grep -cE '^vhostfs: error: | ERROR ' "$logroot/mandatory.log" || true)
  why=''
  if [ "$st" = 0 ] || [ "$st" = 124 ]; then why="exit status $st: it served the share";
  elif [ "$lines" != 1 ]; then why="$lines error lines, want one";
  elif ! grep -qi 'handle' "$logroot/mandatory.log"; then why="the error line does not say why (file handles)"; fi
  verdict mandatory "$why"
fi

# The host's part of guest-gluster-test.sh, in the background while the guest runs: through B,
# after the guest's markers (SHARE on A, SHARE_B the same directory on B).
host_side() {
  local share=$1 share_b=$2 hostb=$3 i p links
  wait_for 300 test -e "$share/ready1" || return 0
  for i in $(seq 0 299); do printf '%-64s' "other $i" > "$share_b/dc/g$i"; done
  sleep 2.5  # vhostfs's fd cache closes an fd 1 s after its last use
  echo 3 > /proc/sys/vm/drop_caches
  : > "$share_b/go1"
  [ "$hostb" = 1 ] || return 0
  wait_for 300 test -e "$share/ready2" || return 0
  local H=$share_b/hb
  echo "created by B" > "$H/new"
  echo "+more" >> "$H/app"
  truncate -s 4 "$H/trunc"
  mv "$H/old" "$H/renamed"
  rm "$H/gone"
  echo replacement > "$H/tmp" && mv "$H/tmp" "$H/repl"
  : > "$share_b/go2"
  wait_for 300 test -e "$share/done2" || return 0
  sleep 1
  # No daemon fd left on what B removed (the guest saw it gone; its kernel forgot the node).
  for p in $(pgrep -f -- "--shared-dir=$share\$"); do
    links=$(find "/proc/$p/fd" -type l -printf '%l\n' 2>/dev/null | grep -E '/hb/(gone|old)( \(deleted\))?$' || true)
    [ -z "$links" ] || echo "FAIL: daemon pid $p still holds: $links"
  done > "$work/fds-$(basename "$share")"
}
# check_b SHARE_B: what guest-gluster-test.sh's writes left, read through B
check_b() {
  local d=$1 i want bad=0
  for i in $(seq 0 299); do
    if [ $((i % 10)) = 0 ]; then want=$(printf '%-64s' "written $i"); else want=$(printf '%-64s' "file $i"); fi
    [ "$(cat "$d/dc/f$i")" = "$want" ] || { bad=$((bad + 1)); [ $bad -gt 3 ] || echo "  B: dc/f$i holds '$(cat "$d/dc/f$i")'" >&2; }
    [ "$(cat "$d/dc/g$i")" = "$(printf '%-64s' "other $i")" ] || { bad=$((bad + 1)); echo "  B: dc/g$i changed" >&2; }
  done
  echo "$bad"
}
for mode in auto always metadata never; do
  want "cache-$mode" || continue
  log "=== cache-$mode"
  share=$A/shares/cache-$mode share_b=$B/shares/cache-$mode hostb=0 append=''
  mkdir -p "$share"
  if [ "$mode" = auto ]; then
    hostb=1 append=e2e.hostb=1
    mkdir "$share/hb"
    echo -n start > "$share/hb/app"; echo -n 0123456789 > "$share/hb/trunc"
    echo -n old > "$share/hb/old"; echo -n gone > "$share/hb/gone"; echo -n original > "$share/hb/repl"
  fi
  host_side "$share" "$share_b" "$hostb" &
  hpid=$!
  boot "cache-$mode" "$work/gluster.cpio.gz" "$share" "$append" "$bin" --cache="$mode"
  kill "$hpid" 2>/dev/null || true
  wait "$hpid" 2>/dev/null || true
  why=''
  if [ "$res" != PASS ]; then why=$(guest_why "cache-$mode");
  else
    bad=$(check_b "$share_b")
    [ "$bad" = 0 ] || why="through B, $bad files not as the guest left them"
    fds=$work/fds-cache-$mode
    if [ -z "$why" ] && [ -s "$fds" ]; then why=$(head -n1 "$fds"); fi
  fi
  verdict "cache-$mode" "$why"
done

if want fs; then
  log "=== fs"
  share=$A/shares/fs
  mkdir -p "$share"
  E2E_MANY=2000 "$here/host-fs-test.sh" prepare "$share"
  boot fs "$work/fs.cpio.gz" "$share" '' "$bin"
  why=''
  if [ "$res" != PASS ]; then why=$(guest_why fs);
  elif ! E2E_MANY=2000 "$here/host-fs-test.sh" verify "$share" > "$logroot/fs/host-verify.out" 2>&1; then
    why="host verify: $(grep -m1 '^FAIL' "$logroot/fs/host-verify.out")"; fi
  verdict fs "$why"
fi

if want pjdfstest; then
  log "=== pjdfstest (vhostfs, then virtiofsd)"
  why='' t_all=$(now)
  if [ -z "$pjd_initramfs" ]; then why="no pjdfstest initramfs ($pjdfstest: .ci/setup installs it)";
  elif [ ! -x "$virtiofsd" ]; then why="no virtiofsd to compare with ($virtiofsd: .ci/setup installs it)"; fi
  if [ -z "$why" ]; then
    for d in vhostfs virtiofsd; do
      mkdir -p "$A/shares/pjd-$d"
      if [ "$d" = vhostfs ]; then boot pjdfstest-vhostfs "$pjd_initramfs" "$A/shares/pjd-$d" '' "$bin" > /dev/null
      else boot pjdfstest-virtiofsd "$pjd_initramfs" "$A/shares/pjd-$d" '' "$virtiofsd" > /dev/null; fi
      tr -d '\r' < "$logroot/pjdfstest-$d/console.log" | grep -E '^FAIL: pjdfstest [^ ]+:' \
        | awk '{ print $3 }' | sort -u > "$work/pjd-$d.failed"
      tr -d '\r' < "$logroot/pjdfstest-$d/console.log" | grep -E '^pjdfstest: ' | sed "s/^/  $d: /" || true
      grep -q '^Summary: \|pjdfstest: [0-9]* failure' <(tr -d '\r' < "$logroot/pjdfstest-$d/console.log") \
        || why="$d: the suite did not run to its summary"
    done
  fi
  if [ -z "$why" ]; then
    sed 's/^/  vhostfs failed: /' "$work/pjd-vhostfs.failed"
    sed 's/^/  virtiofsd failed: /' "$work/pjd-virtiofsd.failed"
    only=$(comm -23 "$work/pjd-vhostfs.failed" "$work/pjd-virtiofsd.failed" | tr '\n' ' ')
    [ -z "$only" ] || why="vhostfs fails what virtiofsd passes: $only"
  fi
  t_case=$(elapsed "$t_all" "$(now)")
  verdict pjdfstest "$why"
fi

if want migration; then
  log "=== migration between mount A and mount B"
  st=0
  env VHOSTFS="$bin" E2E_LOG_DIR="$logroot" "$here/migration.sh" --hosts "$A/shares" "$B/shares" \
    --prefix gluster-migration --cases "find-paths file-handles kubevirt drop-caches" \
    --summary-file "$work/migration.summary" || st=$?
  if [ -s "$work/migration.summary" ]; then
    while IFS= read -r line; do
      summary+=("$line")
      [[ "$line" == *": PASS"* ]] || failed=$((failed + 1))
    done < "$work/migration.summary"
  else
    summary+=("gluster-migration: FAIL(migration.sh exited with status $st before any result)")
    failed=$((failed + 1))
  fi
fi

echo
log "summary:"
for s in "${summary[@]}"; do echo "  $s"; done
[ -z "$summary_file" ] || printf '%s\n' "${summary[@]}" > "$summary_file"
[ "$failed" -eq 0 ] || { log "$failed case(s) FAILED"; exit 1; }
log "all cases passed"
