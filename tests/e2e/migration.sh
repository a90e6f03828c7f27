#!/usr/bin/env bash
# Live migration of a TCG guest with a virtio-fs share between two QEMU processes on this host,
# each with its own daemon on the same shared directory (issue 12). Per case: one guest boot; the
# guest (migration-probe.c) keeps a writer (a counter line every 5 ms, appended to a file it keeps
# open), a reader and a second reader ("victim") of other open files busy; the host migrates it
# through QMP (return-path on both sides; the destination started with -incoming unix:...),
# quits the source QEMU, checks the source daemon exits with status 0, lets the guest go on for
# 2 s on the destination, then stops it. Cases:
#   migration-find-paths    --migration-mode=find-paths
#   migration-file-handles  --migration-mode=file-handles
#   migration-kubevirt      KubeVirt's argv line (--sandbox=none --cache=auto
#                           --migration-on-error=guest-error --migration-mode=find-paths); the host
#                           renames victim.dat after the source saved its state and before the
#                           destination loads it (the destination daemon is held with SIGSTOP
#                           until then): only the victim's reads fail, with EIO
#   migration-drop-caches   find-paths; the host's kernel forgets its inodes (drop_caches) after the
#                           source saved its state and before the destination loads it
# With --hosts A B (directories on two mounts of one shared filesystem, e.g. GlusterFS: two
# "hosts"), each case's share is a directory under A for the source and the same directory under
# B for the destination (and so on, alternating, with --hops); the rename of the KubeVirt case
# is made through B. tests/e2e/gluster.sh runs it so.
# Each passes when the guest's checks pass (no I/O error, every line of the written file exactly
# once, the victim as expected), the host sees the same file, the file grew after the switch-over,
# and both daemons exit with status 0. Downtime and total time (query-migrate) are printed.
#
#   tests/e2e/migration.sh [--summary-file FILE] [--cases "NAME..."] [--hops N] [--bench ROUNDS]
#                          [--hosts A B] [--prefix NAME]
#
# --cases: a subset (names without "migration-"); --prefix: the cases' names start with NAME-
# instead of migration-; --hops N: migrate N times per boot (ping-pong
# onto a fresh destination each time; default 1); --bench ROUNDS: instead of the cases, ROUNDS
# rounds alternating vhostfs ($VHOSTFS) and virtiofsd ($VIRTIOFSD, default: virtiofsd on PATH or
# ~/.cargo/bin/virtiofsd; which goes first alternates), each a find-paths boot with --hops
# migrations (default 3 there), then
# the downtime and total time of every migration and the vhostfs/virtiofsd ratios.
# VHOSTFS: the daemon binary (default target/release/vhostfs, else target/debug/vhostfs; a
# virtiofsd binary works too and gets --sandbox=none); E2E_LOG_DIR: keep the logs there (default:
# a temp dir, printed on failure). ~25 s per case on 2 cores. Must run as root.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$here/lib.sh"
log() { echo "migration: $*"; }
die() { log "$*" >&2; exit 2; }

summary_file='' cases='find-paths file-handles kubevirt' hops='' bench=0 host_a='' host_b='' prefix=migration
while [ $# -gt 0 ]; do
  case "$1" in
    --summary-file) summary_file=$2; shift 2 ;;
    --cases) cases=$2; shift 2 ;;
    --hops) hops=$2; shift 2 ;;
    --bench) bench=$2; shift 2 ;;
    --hosts) host_a=$2 host_b=$3; shift 3 ;;
    --prefix) prefix=$2; shift 2 ;;
    *) die "unknown argument $1 (see the header of $0)" ;;
  esac
done
bin=${VHOSTFS:-$repo/target/release/vhostfs}
[ -z "${VHOSTFS:-}" ] || bin=$(command -v "$VHOSTFS" || echo "$VHOSTFS")
[ -x "$bin" ] || bin=$repo/target/debug/vhostfs
[ -x "$bin" ] || die "no vhostfs binary (cargo build --release, or VHOSTFS=...)"
[ "$(id -u)" -eq 0 ] || die "must run as root"
for c in qemu-system-x86_64 python3 gcc; do command -v "$c" >/dev/null || die "$c not found (run .ci/setup)"; done
kernel=$(find "$repo/target/guest/boot/" -maxdepth 1 -name 'vmlinuz-*' 2>/dev/null | sort -V | tail -n1)
[ -n "$kernel" ] || die "no guest kernel under target/guest (run .ci/setup)"
if [ "$bench" != 0 ]; then
  virtiofsd=${VIRTIOFSD:-$(command -v virtiofsd || echo "$HOME/.cargo/bin/virtiofsd")}
  [ -x "$virtiofsd" ] || die "--bench needs virtiofsd (VIRTIOFSD=...)"
fi

work=$(mktemp -d /tmp/vhostfs-migration.XXXXXX)
logroot=${E2E_LOG_DIR:-$work/logs}/migration
mkdir -p "$logroot"
failed=0 summary=() pids=() spawned='' dpid='' qpid='' st=''
# shellcheck disable=SC2317 # invoked from the EXIT trap
cleanup() {
  local rc=$? p
  trap - EXIT INT TERM
  for p in "${pids[@]}"; do stop_group "$p"; done
  if [ "$failed" -ne 0 ] || [ "$rc" -ne 0 ]; then
    if [ -z "${E2E_LOG_DIR:-}" ]; then
      rm -rf /tmp/vhostfs-migration-logs
      mv "$logroot" /tmp/vhostfs-migration-logs && logroot=/tmp/vhostfs-migration-logs
    fi
    log "logs kept in $logroot"
  fi
  rm -rf "$work"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

gcc -O2 -static -Wall -o "$work/migration-probe" "$here/migration-probe.c" \
  || die "cannot build tests/e2e/migration-probe.c (gcc -static, libc6-dev)"
"$here/mkinitramfs.sh" --extra-bin "$work/migration-probe" "$work/initramfs.cpio.gz" \
  "$here/guest-migration-test.sh" >/dev/null
probe=$work/migration-probe

# spawn LOG CMD...: starts CMD in a session of its own (setsid execs it: $! is its pid and process
# group), output to LOG; the pid is remembered for cleanup and left in $spawned.
spawn() {
  local out=$1; shift
  setsid "$@" > "$out" 2>&1 < /dev/null &
  spawned=$!
  pids+=("$spawned")
}
forget() { local p keep=(); for p in "${pids[@]}"; do [ "$p" = "$1" ] || keep+=("$p"); done; pids=("${keep[@]}"); }
gone() { ! kill -0 "$1" 2>/dev/null; }
# exit_status PID SECS: waits for PID to exit by itself; its status in $st ("running" if not)
exit_status() {
  st=running
  wait_for "$2" gone "$1" || return 0
  st=0
  wait "$1" || st=$?
  forget "$1"
}
qmp() { python3 "$here/qmp.py" "$@"; }
field() { python3 -c 'import json,sys; v=json.loads(sys.argv[1]); print(v.get(sys.argv[2], "-") if isinstance(v, dict) else "-")' "$@"; }

# start_daemon DIR N SHARED DAEMON ARGS...: daemon N on DIR/fs-N.sock; sets $dpid
start_daemon() {
  local dir=$1 n=$2 shared=$3; shift 3
  local cmd=("$@" "--socket-path=$dir/fs-$n.sock" "--shared-dir=$shared")
  if [ "$(basename "$1")" = virtiofsd ] && [[ " ${cmd[*]} " != *" --sandbox"* ]]; then cmd+=(--sandbox=none); fi
  echo "${cmd[*]}" > "$dir/daemon-$n.cmd"
  spawn "$dir/daemon-$n.log" "${cmd[@]}"
  dpid=$spawned
  wait_for 30 socket_ready "$dir/fs-$n.sock" || return 1
}
# start_qemu DIR N [INCOMING-URI]: QEMU N on daemon N's socket, QMP on DIR/qmp-N.sock; sets $qpid
start_qemu() {
  local dir=$1 n=$2
  local args=(
    -accel tcg -cpu max -smp 2 -m 512M
    -object 'memory-backend-memfd,id=mem,size=512M,share=on' -numa 'node,memdev=mem'
    -chardev "socket,id=char0,path=$dir/fs-$n.sock"
    -device 'vhost-user-fs-pci,queue-size=1024,chardev=char0,tag=share'
    -kernel "$kernel" -initrd "$work/initramfs.cpio.gz"
    -append "console=ttyS0 quiet panic=-1 e2e.tag=share"
    -nic none -display none -monitor none -serial "file:$dir/console-$n.log"
    -qmp "unix:$dir/qmp-$n.sock,server=on,wait=off" -no-reboot
  )
  [ -z "${3:-}" ] || args+=(-incoming "$3")
  spawn "$dir/qemu-$n.log" qemu-system-x86_64 "${args[@]}"
  qpid=$spawned
  wait_for 30 qmp "$dir/qmp-$n.sock" run query-status >/dev/null 2>&1
}

# migrate_case NAME EXPECT HOPS DAEMON ARGS...: one boot, HOPS migrations; appends to $summary,
# and "NAME DAEMON downtime_ms total_ms" lines to $work/times. EXPECT: victim-ok, victim-eio (the
# host renames the victim between save and load) or dropped (the host drops its caches then).
migrate_case() {
  local name=$1 expect=$2 nhops=$3; shift 3
  local dir=$logroot/$name shared=$work/$name-shared t0 n=0 src_q src_d why='' info st lines_switch lines_end
  local times=() caps='{"capabilities":[{"capability":"return-path","state":true}]}' held=0
  [ -z "$host_a" ] || shared=$host_a/$name
  mkdir -p "$dir" "$shared"
  # share_of N: daemon N's shared dir (under A and B in turn with --hosts)
  share_of() { if [ -n "$host_a" ] && [ $(($1 % 2)) = 1 ]; then echo "$host_b/$name"; else echo "$shared"; fi; }
  [ "$expect" = victim-ok ] || held=1
  log "=== $name: $* (expect $expect, $nhops migration(s))"
  t0=$(now)
  "$probe" --make "$([ "$expect" = victim-eio ] && echo victim-eio || echo victim-ok)" "$shared"
  start_daemon "$dir" 0 "$shared" "$@" || why="daemon 0 did not start"
  [ -n "$why" ] || start_qemu "$dir" 0 || why="QEMU 0 did not start"
  src_q=$qpid src_d=$dpid
  if [ -z "$why" ] && ! wait_for 180 grep -q E2E-MIGRATION-READY "$dir/console-0.log"; then why="the guest did not start its I/O"; fi
  local boot_s
  boot_s=$(elapsed "$t0" "$(now)")
  while [ -z "$why" ] && [ "$n" -lt "$nhops" ]; do
    n=$((n + 1))
    sleep 1  # let the guest's I/O run for a while on the source
    start_daemon "$dir" "$n" "$(share_of "$n")" "$@" || { why="daemon $n did not start"; break; }
    local dst_d=$dpid
    start_qemu "$dir" "$n" "unix:$dir/mig-$n.sock" || { why="QEMU $n did not start"; break; }
    local dst_q=$qpid
    if ! qmp "$dir/qmp-$n.sock" run migrate-set-capabilities "$caps" >/dev/null \
      || ! qmp "$dir/qmp-$((n - 1)).sock" run migrate-set-capabilities "$caps" >/dev/null; then
      why="migrate-set-capabilities failed"; break
    fi
    [ "$held" = 0 ] || kill -STOP "$dst_d"
    if ! qmp "$dir/qmp-$((n - 1)).sock" run migrate "{\"uri\":\"unix:$dir/mig-$n.sock\"}" > "$dir/migrate-$n.out" 2>&1; then
      [ "$held" = 0 ] || kill -CONT "$dst_d"
      why="migrate $n refused: $(cat "$dir/migrate-$n.out")"; break
    fi
    if [ "$held" = 1 ]; then
      # The source has stopped the guest and saves device states (its daemon's among them) while
      # the destination, waiting on its held daemon, cannot load them yet: rename (through the
      # destination's share) or drop the caches now.
      qmp "$dir/qmp-$((n - 1)).sock" wait device,completed,failed,cancelled 180 > /dev/null || true
      sleep 1
      if [ "$expect" = victim-eio ]; then
        mv "$(share_of "$n")/victim.dat" "$(share_of "$n")/victim.renamed"
      else
        echo 3 > /proc/sys/vm/drop_caches
      fi
      kill -CONT "$dst_d"
    fi
    info=$(qmp "$dir/qmp-$((n - 1)).sock" wait completed,failed,cancelled 180 2>&1) || true
    echo "$info" > "$dir/query-migrate-$n.json"
    st=$(field "$info" status 2>/dev/null || echo "?")
    if [ "$st" != completed ]; then
      why="migration $n: status $st ($(field "$info" error-desc 2>/dev/null || echo "$info"))"; break
    fi
    times+=("downtime=$(field "$info" downtime)ms total=$(field "$info" total-time)ms")
    echo "$name $(basename "$1") $(field "$info" downtime) $(field "$info" total-time)" >> "$work/times"
    # (read through the destination's share: with --hosts, the source's mount may still
    # cache the file as it was before the switch-over for its attribute timeout)
    lines_switch=$("$probe" --lines "$(share_of "$n")")
    qmp "$dir/qmp-$((n - 1)).sock" run quit >/dev/null 2>&1 || true
    exit_status "$src_q" 20
    [ "$st" = 0 ] || { why="source QEMU $((n - 1)) after quit: status $st"; break; }
    exit_status "$src_d" 10
    [ "$st" = 0 ] || { why="source daemon $((n - 1)): status $st after its QEMU quit"; break; }
    src_q=$dst_q src_d=$dst_d
  done
  if [ -z "$why" ]; then
    sleep 2  # the guest goes on on the destination
    lines_end=$("$probe" --lines "$(share_of "$n")")
    [ "$lines_end" -gt "$lines_switch" ] || why="written.log did not grow after the switch-over ($lines_switch lines)"
    touch "$(share_of "$n")/stop"
    exit_status "$src_q" 120
    [ -n "$why" ] || [ "$st" = 0 ] || why="the guest did not power off (QEMU $n: $st)"
    exit_status "$src_d" 10
    [ -n "$why" ] || [ "$st" = 0 ] || why="destination daemon $n: status $st after the guest powered off"
  fi
  local status_line=''
  status_line=$(tr -d '\r' < "$dir/console-$n.log" | grep -o 'E2E-STATUS: .*' | tail -n1 || true)
  cat "$dir"/console-*.log | tr -d '\r' | grep -E '^(PASS|FAIL): ' || true
  if [ -z "$why" ] && [[ "$status_line" != "E2E-STATUS: PASS"* ]]; then why="guest: ${status_line:-no status line}"; fi
  if [ -z "$why" ] && ! "$probe" --verify "$(share_of "$n")" > "$dir/host-verify.out"; then why="host: $(cat "$dir/host-verify.out")"; fi
  if [ -z "$why" ] && grep -qE "panicked at|RUST_BACKTRACE" "$dir"/daemon-*.log; then why="panic in a daemon log"; fi
  for p in "${pids[@]}"; do stop_group "$p"; done
  pids=()
  rm -rf "$shared"
  local verdict=PASS
  if [ -n "$why" ]; then
    verdict="FAIL($why)"; failed=$((failed + 1))
    for f in "$dir"/console-*.log; do log "---- $(basename "$f") (tail)"; tail -n 15 "$f" | tr -d '\r'; done
    for f in "$dir"/daemon-*.log "$dir"/qemu-*.log; do [ ! -s "$f" ] || { log "---- $(basename "$f") (tail)"; tail -n 10 "$f"; }; done
  fi
  summary+=("$name: $verdict | boot=${boot_s}s ${times[*]} case=$(elapsed "$t0" "$(now)")s")
  log "${summary[-1]}"
}

if [ "$bench" = 0 ]; then
  for c in $cases; do
    case "$c" in
      find-paths|file-handles) migrate_case "$prefix-$c" victim-ok "${hops:-1}" "$bin" "--migration-mode=$c" ;;
      kubevirt) migrate_case "$prefix-kubevirt" victim-eio "${hops:-1}" "$bin" --sandbox=none \
        --cache=auto --migration-on-error=guest-error --migration-mode=find-paths ;;
      drop-caches) migrate_case "$prefix-drop-caches" dropped "${hops:-1}" "$bin" --migration-mode=find-paths ;;
      *) die "unknown case $c" ;;
    esac
  done
else
  for r in $(seq "$bench"); do
    order=("$bin" "$virtiofsd")
    [ $((r % 2)) = 1 ] || order=("$virtiofsd" "$bin")
    for d in "${order[@]}"; do
      migrate_case "bench-$(basename "$d")-$r" victim-ok "${hops:-3}" "$d" --migration-mode=find-paths
    done
  done
  log "downtime and total time per migration (ms), find-paths, 512 MiB TCG guest:"
  awk '{ dt[$2] = dt[$2] " " $3; tt[$2] = tt[$2] " " $4 } END { for (d in dt) printf "  %-10s downtime:%s | total:%s\n", d, dt[d], tt[d] }' "$work/times"
  vname=$(basename "$bin")
  # Per round: the vhostfs/virtiofsd ratio of the mean downtime; then the ratio of the overall means.
  awk -v v="$vname" '{ split($1, a, "-"); r = a[length(a)]; s[$2, r] += $3; c[$2, r]++; S[$2] += $3; C[$2]++; R[r] = 1 }
    END { lo = 1e9; hi = 0; for (r in R) if (c["virtiofsd", r] && s["virtiofsd", r] > 0) {
            x = (s[v, r] / c[v, r]) / (s["virtiofsd", r] / c["virtiofsd", r]); if (x < lo) lo = x; if (x > hi) hi = x }
          if (C[v] && C["virtiofsd"]) printf "  mean downtime: %s %.1f ms, virtiofsd %.1f ms, ratio %.2f (per-round range %.2f-%.2f)\n",
            v, S[v] / C[v], S["virtiofsd"] / C["virtiofsd"], (S[v] / C[v]) / (S["virtiofsd"] / C["virtiofsd"]), lo, hi }' "$work/times"
fi

echo
log "summary:"
for s in "${summary[@]}"; do echo "  $s"; done
[ -z "$summary_file" ] || printf '%s\n' "${summary[@]}" > "$summary_file"
[ "$failed" -eq 0 ] || { log "$failed case(s) FAILED"; exit 1; }
log "all cases passed"
