#!/usr/bin/env bash
# Real-guest e2e test of filesystems mounted below the shared directory ("submounts"), under
# every sandbox, and of the daemon's fd pinning. run-all.sh calls it; it also runs alone (root):
#
#   tests/e2e/submounts.sh [--sandboxes "namespace chroot none"] [--summary-file FILE]
#
# The mixed share (built in a temp dir, everything unmounted/detached/removed on exit, also on
# failure or interrupt): the share dir on the host's ext4, bind-mounted on itself and made
# rshared (so host mounts made later propagate into the namespace sandbox), with below it
#   base/ (the share's own ext4)  xfs/ (loop image)  btrfs/ (loop image)  tmpfs/
#   ovl/ (overlayfs, layers on ext4, nfs_export=off: no file handles)  bind/ (bind mount of a dir
#   outside the share)  hot/TAG/ (the host mounts a tmpfs there while the guest runs)
# each seeded with t-TAG/{seed.txt,sub/nested.txt} per tag. A second share, a tmpfs, has a
# directory of E2E_MANY (20000) files and receives the 256 MiB file of the fd-pinning check.
#
# One boot per sandbox (namespace, chroot, none), with one vhost-user-fs device and daemon per
# configuration (8 daemons; the tag names it: SANDBOX-KIND-FH-ANN):
#   mix × --inode-file-handles prefer|mandatory|never × --announce-submounts|--no-announce-submounts
#   pin × prefer|mandatory (fd pinning; prefer also the fd count after `ls -l` of 20000 files)
# The guest (guest-submounts.sh) checks each tag in turn; the host answers its handshake steps
# (marker files in SHARE/.e2e/{ev,ack}: syncfs sector counters, the hot mount, the pinned file's
# space, the daemon's fds), and after poweroff checks where the guest's writes landed.
# Each configuration gets one summary line "  NAME: PASS|FAIL (...)" (what .ci/run counts):
#   submounts-SANDBOX-FH-announce|no-announce, fdpin-SANDBOX-FH
#
# Environment: VHOSTFS (daemon binary; default target/release/vhostfs, else target/debug) or
#   DAEMON (a binary alone, e.g. virtiofsd: --sandbox=none only, as it cannot build its namespace
#   sandbox here), VHOSTFS_GUEST_DIR, QEMU, E2E_LOG_DIR (logs go to E2E_LOG_DIR/submounts-*; else a
#   temp dir kept and printed only on failure), E2E_MANY (default 20000), E2E_BOOT_TIMEOUT
#   (seconds per boot, default 420).
# Exit status: 0 all passed, 1 some check failed, 2 setup error (tools missing, not root, ...).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$here/lib.sh"
log() { echo "submounts: $*"; }
die() { echo "submounts: $*" >&2; exit 2; }

sandboxes='' summary_file=''
while [ $# -gt 0 ]; do
  case "$1" in
    --sandboxes) sandboxes=$2; shift 2 ;;
    --summary-file) summary_file=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument $1 (see --help)" ;;
  esac
done

bin=${VHOSTFS:-${DAEMON:-}}
if [ -z "$bin" ]; then
  for b in "$repo/target/release/vhostfs" "$repo/target/debug/vhostfs"; do
    if [ -x "$b" ]; then bin=$b; break; fi
  done
fi
[ -n "$bin" ] || die "no vhostfs binary (cargo build --release) and no VHOSTFS=/path"
bin=$(command -v "$bin") || die "daemon $bin not found"
virtiofsd=''
[ "$(basename "$bin")" != virtiofsd ] || virtiofsd=1
if [ -z "$sandboxes" ]; then
  if [ -n "$virtiofsd" ]; then sandboxes=none; else sandboxes="namespace chroot none"; fi
fi
[ "$(id -u)" -eq 0 ] || die "must run as root (mounts, loop devices)"
qemu=${QEMU:-qemu-system-x86_64}
guest_dir=${VHOSTFS_GUEST_DIR:-$repo/target/guest}
kernel=$(find "$guest_dir/boot/" -maxdepth 1 -name 'vmlinuz-*' 2>/dev/null | sort -V | tail -n1 || true)
[ -n "$kernel" ] || die "no guest kernel at $guest_dir/boot/vmlinuz-* (run .ci/setup or set VHOSTFS_GUEST_DIR)"
for tool in "$qemu" gcc mkfs.xfs mkfs.btrfs losetup findmnt; do
  command -v "$tool" >/dev/null || die "$tool missing (.ci/setup installs it: qemu-system-x86, gcc, xfsprogs, btrfs-progs, util-linux)"
done
many=${E2E_MANY:-20000}
boot_timeout=${E2E_BOOT_TIMEOUT:-420}

# ---- state and cleanup -----------------------------------------------------------------------------
work=$(mktemp -d "${TMPDIR:-/tmp}/vhostfs-e2e-sub.XXXXXX")
if [ -n "${E2E_LOG_DIR:-}" ]; then
  logroot=$E2E_LOG_DIR/submounts
  mkdir -p "$logroot"
else
  logroot=$(mktemp -d "${TMPDIR:-/tmp}/vhostfs-e2e-sub-logs.XXXXXX")
fi
D=$work/share T=$work/pin
loops=() qemu_pid='' failed=0 summary=()
declare -A dpid=() loopdev=() handled=() pin_base=() sync_c=()

# Mount points at or below $work, deepest first.
mounts_in_work() { findmnt -rn -o TARGET | awk -v w="$work" '$0 == w || index($0, w "/") == 1' | sort -r; }
# shellcheck disable=SC2317 # invoked from the EXIT trap
cleanup() {
  local rc=$? m left
  trap - EXIT INT TERM
  [ -z "$qemu_pid" ] || stop "$qemu_pid"
  for t in "${!dpid[@]}"; do stop_group "${dpid[$t]}"; done
  for _ in 1 2 3; do
    left=$(mounts_in_work)
    [ -n "$left" ] || break
    for m in $left; do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true; done
  done
  for l in "${loops[@]}"; do losetup -d "$l" 2>/dev/null || true; done
  left=$(mounts_in_work)
  if [ -n "$left" ]; then
    echo "submounts: could not unmount, $work kept: $left" >&2
    rc=2
  else
    rm -rf "$work"
  fi
  if [ "$failed" -ne 0 ] || [ "$rc" -ne 0 ]; then
    log "logs kept in $logroot"
  elif [ -z "${E2E_LOG_DIR:-}" ]; then
    rm -rf "$logroot"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'log interrupted; exit 130' INT TERM

# ---- the shares ------------------------------------------------------------------------------------
FSS="base xfs btrfs tmpfs ovl bind"
# Configurations of one boot: KIND-FH-ANN. The first is what /init mounts (no submounts there).
CONFIGS="pin-prefer-ann pin-mandatory-ann mix-prefer-ann mix-prefer-noann mix-mandatory-ann
  mix-mandatory-noann mix-never-ann mix-never-noann"
short_sb() { case $1 in namespace) echo ns ;; *) echo "$1" ;; esac; }
all_tags=()
for sb in $sandboxes; do
  case "$sb" in namespace|chroot|none) ;; *) die "unknown sandbox $sb" ;; esac
  for c in $CONFIGS; do all_tags+=("$(short_sb "$sb")-$c"); done
done

t_setup=$(now)
gcc -O2 -Wall -static -o "$work/e2e-fsops" "$here/e2e-fsops.c"
fsops=$work/e2e-fsops
"$here/mkinitramfs.sh" --extra-bin "$fsops" "$work/initramfs.cpio.gz" "$here/guest-submounts.sh" >/dev/null

mkdir -p "$D" "$T" "$work/img" "$work/ovl/lower" "$work/ovl/upper" "$work/ovl/work" "$work/outside"
mount --bind "$D" "$D"
mount --make-rshared "$D"
mkdir -p "$D/.e2e/ev" "$D/.e2e/ack" "$D/hot"
for fs in $FSS; do mkdir -p "$D/$fs"; done
truncate -s 320M "$work/img/xfs.img"
mkfs.xfs -q -f "$work/img/xfs.img"
truncate -s 256M "$work/img/btrfs.img"
mkfs.btrfs -q -f "$work/img/btrfs.img" >/dev/null
for fs in xfs btrfs; do
  l=$(losetup -f --show "$work/img/$fs.img")
  loops+=("$l")
  loopdev[$fs]=$l
  mount "$l" "$D/$fs"
done
mount -t tmpfs -o size=64m,mode=0755 vhostfs-e2e-tmpfs "$D/tmpfs"
mount --bind "$work/outside" "$D/bind"
seed() { # DIR FS TAG
  mkdir -p "$1/sub"
  echo "seed $2 $3" > "$1/seed.txt"
  echo "nested $2 $3" > "$1/sub/nested.txt"
}
for tag in "${all_tags[@]}"; do
  [[ "$tag" == *-mix-* ]] || continue
  for fs in base xfs btrfs tmpfs bind; do seed "$D/$fs/t-$tag" "$fs" "$tag"; done
  seed "$work/ovl/lower/t-$tag" ovl "$tag"  # before the overlay is mounted
  mkdir -p "$D/hot/$tag"
done
mount -t overlay -o "lowerdir=$work/ovl/lower,upperdir=$work/ovl/upper,workdir=$work/ovl/work,nfs_export=off" \
  vhostfs-e2e-ovl "$D/ovl"
mount -t tmpfs -o size=320m,mode=0755 vhostfs-e2e-pin "$T"
mkdir -p "$T/.e2e/ev" "$T/.e2e/ack" "$T/pin" "$T/many"
(cd "$T/many" && seq -f 'f%05g' 1 "$many" | xargs touch)
echo "$many" > "$T/many.count"
# Preconditions the checks rely on.
r=$("$fsops" handle "$D/ovl/.") && die "the overlay encodes file handles ($r): mounted with nfs_export?"
log "overlay without file handles: name_to_handle_at -> $r"
for fs in xfs btrfs tmpfs; do
  "$fsops" handle "$D/$fs/." >/dev/null || die "$fs: no file handles"
done
log "setup (helper, initramfs, images, mounts, $many files) took $(elapsed "$t_setup" "$(now)") s"
findmnt -R -o TARGET,FSTYPE,SOURCE,PROPAGATION "$D" | sed 's/^/submounts:   /'
log "daemon: $bin ($("$bin" --version 2>/dev/null | head -n1 || echo 'version unknown'))"

# ---- host checks -----------------------------------------------------------------------------------
# hres TAG PASS|FAIL NAME [DETAIL]: a host check of TAG, into $res/TAG.host.
res=$work/results
mkdir -p "$res"
hres() {
  local line="$2: host: $3${4:+ ($4)}"
  line=${line//$'\n'/\\n}
  echo "$line" >> "$res/$1.host"
  [ "$2" = PASS ] || echo "submounts: $1: $line"
}
hexpect() { if [ "$3" = "$4" ]; then hres "$1" PASS "$2"; else hres "$1" FAIL "$2" "got '$3', want '$4'"; fi; }
habsent() { if [ -e "$3" ] || [ -L "$3" ]; then hres "$1" FAIL "$2" "$3 exists"; else hres "$1" PASS "$2"; fi; }

sectors() { awk '{ print $7 }' "/sys/block/${1#/dev/}/stat"; }
avail_bytes() { stat -f -c '%a %S' "$1" | awk '{ printf "%d", $1 * $2 }'; }
# The processes of TAG's daemon (the namespace sandbox's supervisor and its child) and the one
# serving the guest (the child in namespace mode).
daemon_procs() { local p=${dpid[$1]}; echo "$p"; cat /proc/"$p"/task/*/children 2>/dev/null || true; }
serving_pid() {
  local p=${dpid[$1]} c
  if [[ "$1" == ns-* ]] && [ -z "$virtiofsd" ]; then
    c=$(cat /proc/"$p"/task/*/children 2>/dev/null | awk '{ print $1; exit }' || true)
    echo "${c:-$p}"
  else
    echo "$p"
  fi
}
# fds of the daemon's processes on deleted inodes (guest memory memfds excepted).
deleted_fds() {
  local p
  for p in $(daemon_procs "$1"); do
    find "/proc/$p/fd" -mindepth 1 -maxdepth 1 -printf "pid $p fd %f -> %l\n" 2>/dev/null \
      | grep ' (deleted)$' | grep -v -- '-> /memfd:' || true
  done
}

# handle_event TAG EVENT: the host's part of a guest step, then its acknowledgement.
handle_event() {
  local tag=$1 ev=$2 share=$D fs k c0 c1 d f base t avail n
  [[ "$tag" != *-pin-* ]] || share=$T
  case "$ev" in
    sync-*-start|sync-*-written|sync-*-synced)
      fs=${ev#sync-}; fs=${fs%-*}
      k=$(sectors "${loopdev[$fs]}")
      case "$ev" in
        *-start)
          # Flush what earlier writes left dirty, so that only the guest's file is pending.
          sync -f "$D/$fs"
          sync_c[$tag.$fs.0]=$(sectors "${loopdev[$fs]}") ;;
        *-written) sync_c[$tag.$fs.1]=$k ;;
        *-synced)
          c0=${sync_c[$tag.$fs.0]:-?} c1=${sync_c[$tag.$fs.1]:-0}
          if [ $((k - c1)) -ge 2048 ]; then
            hres "$tag" PASS "syncfs in the guest reaches $fs" "${loopdev[$fs]} wrote $((k - c1)) sectors during the guest's sync -f"
          else
            hres "$tag" FAIL "syncfs in the guest reaches $fs" "${loopdev[$fs]} wrote $((k - c1)) sectors during the guest's sync -f, want >= 2048 (the 1 MiB file); written-sector counter: before the write $c0, after it $c1, after the sync $k"
          fi ;;
      esac ;;
    hot-ready)
      d=$D/hot/$tag
      if mount -t tmpfs -o size=4m vhostfs-e2e-hot "$d" && echo "hot $tag" > "$d/hot.txt"; then
        hres "$tag" PASS "hot: host mounted a tmpfs on hot/$tag while the guest runs"
      else
        hres "$tag" FAIL "hot: host mount on hot/$tag"
      fi ;;
    hot-seen)
      if umount -l "$D/hot/$tag"; then hres "$tag" PASS "hot: host unmounted it (umount -l)"
      else hres "$tag" FAIL "hot: host umount -l hot/$tag"; fi ;;
    pin-create)
      f=$T/pin/$tag.bin
      pin_base[$tag]=$(avail_bytes "$T")
      if ! dd if=/dev/zero of="$f" bs=1M count=256 status=none; then
        hres "$tag" FAIL "pin: host writes the 256 MiB file"
      fi ;;
    pin-looked)
      f=$T/pin/$tag.bin base=${pin_base[$tag]}
      rm -f "$f"
      t=$(now)
      while :; do
        avail=$(avail_bytes "$T")
        [ "$avail" -lt $((base - 1048576)) ] || break
        [ "$(elapsed "$t" "$(now)" | cut -d. -f1)" -lt 2 ] || break
        sleep 0.05
      done
      local took del
      took=$(elapsed "$t" "$(now)")
      del=$(deleted_fds "$tag")
      if [ "$avail" -ge $((base - 1048576)) ]; then
        hres "$tag" PASS "pin: the share's free space is back within 2 s of the host's rm" "after $took s"
      else
        hres "$tag" FAIL "pin: the share's free space is back within 2 s of the host's rm" "after $took s: $(( (base - avail) / 1048576 )) MiB still in use; daemon fds on deleted files: ${del:-none}"
      fi
      if [ -z "$del" ]; then
        hres "$tag" PASS "pin: no daemon fd on a deleted inode"
      else
        hres "$tag" FAIL "pin: no daemon fd on a deleted inode" "$(echo "$del" | awk 'NR <= 3' | tr '\n' ';')"
      fi ;;
    many-listed)
      sleep 2
      local p
      p=$(serving_pid "$tag")
      n=$(find "/proc/$p/fd" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l || true)
      if [ "$n" -lt 64 ]; then
        hres "$tag" PASS "fds: the serving process holds < 64 fds 2 s after ls -l of $many files" "$n fds"
      else
        hres "$tag" FAIL "fds: the serving process holds < 64 fds 2 s after ls -l of $many files" "pid $p holds $n: $(find "/proc/$p/fd" -mindepth 1 -maxdepth 1 -printf '%l\n' | sed -E 's/[0-9]+/N/g' | sort | uniq -c | sort -rn | awk 'NR <= 4' | awk '{ $1 = $1; print }' | tr '\n' ';')"
      fi ;;
    *) hres "$tag" FAIL "handshake: unknown step $ev" ;;
  esac
  : > "$share/.e2e/ack/$tag.$ev"
}
handle_events() {
  local f name
  for f in "$D"/.e2e/ev/* "$T"/.e2e/ev/*; do
    [ -e "$f" ] || continue
    name=${f##*/}
    [ -z "${handled[$name]:-}" ] || continue
    handled[$name]=1
    # (Called in a list: a failing host command is reported by the step's checks and the
    # acknowledgement still goes out, instead of ending this script under set -e.)
    handle_event "${name%%.*}" "${name#*.}" || true
  done
}

# verify_mix TAG FH ANN: after poweroff, what the guest left on the host.
verify_mix() {
  local tag=$1 fh=$2 ann=$3 fs d want_t want_fs where pair a b
  for fs in $FSS; do
    if [ "$fh" = mandatory ] && [ "$fs" = ovl ]; then
      habsent "$tag" "ovl: untouched (no copy-up) in mandatory mode" "$work/ovl/upper/t-$tag"
      continue
    fi
    d=$D/$fs/t-$tag
    if [ "$fh" = never ]; then
      hexpect "$tag" "$fs: seed.txt unchanged" "$(cat "$d/seed.txt" 2>&1)" "seed $fs $tag"
      continue
    fi
    hexpect "$tag" "$fs: renamed.txt content" "$(cat "$d/renamed.txt" 2>&1)" "seed $fs $tag"$'\n'"guest $tag"
    hexpect "$tag" "$fs: new.txt content" "$(cat "$d/new.txt" 2>&1)" "new $fs $tag"
    hexpect "$tag" "$fs: nested-moved.txt content" "$(cat "$d/nested-moved.txt" 2>&1)" "nested $fs $tag"
    habsent "$tag" "$fs: seed.txt renamed away" "$d/seed.txt"
    habsent "$tag" "$fs: sub/nested.txt moved away" "$d/sub/nested.txt"
    hexpect "$tag" "$fs: linked.txt is renamed.txt" "$(stat -c %i "$d/linked.txt" 2>&1)" "$(stat -c %i "$d/renamed.txt" 2>&1)"
    # The right host filesystem: the mount the file resolves to, and its st_dev.
    case $fs in
      base) want_t=$D want_fs=$(findmnt -n -o FSTYPE -T "$work") ;;
      *) want_t=$D/$fs want_fs=$(findmnt -n -o FSTYPE "$D/$fs") ;;
    esac
    where=$(findmnt -n -o TARGET,FSTYPE -T "$d/renamed.txt" 2>&1 | awk '{ $1 = $1; print }' || true)
    hexpect "$tag" "$fs: written files on the host's $want_fs at $want_t" "$where" "$want_t $want_fs"
    hexpect "$tag" "$fs: st_dev of the written files" "$(stat -c %d "$d/renamed.txt" "$d/new.txt" 2>&1 | sort -u)" "$(stat -c %d "$want_t")"
    case $fs in
      ovl) hexpect "$tag" "ovl: copied up into the upper layer" "$(cat "$work/ovl/upper/t-$tag/renamed.txt" 2>&1)" "seed $fs $tag"$'\n'"guest $tag"
           hexpect "$tag" "ovl: lower layer unchanged" "$(cat "$work/ovl/lower/t-$tag/seed.txt" 2>&1)" "seed $fs $tag" ;;
      bind) hexpect "$tag" "bind: in the directory outside the share" "$(cat "$work/outside/t-$tag/renamed.txt" 2>&1)" "seed $fs $tag"$'\n'"guest $tag" ;;
      xfs|btrfs)
        if [ "$ann" = ann ]; then
          hexpect "$tag" "$fs: sync.bin size" "$(stat -c %s "$d/sync.bin" 2>&1)" 1048576
        fi ;;
    esac
  done
  [ "$fh" != never ] || return 0
  for pair in xfs:btrfs base:tmpfs ovl:xfs bind:base tmpfs:bind; do
    a=${pair%:*} b=${pair#*:}
    if [ "$fh" = mandatory ] && { [ "$a" = ovl ] || [ "$b" = ovl ]; }; then continue; fi
    hexpect "$tag" "$a -> $b: source still on $a" "$(cat "$D/$a/t-$tag/x-to-$b.txt" 2>&1)" "x $a $tag"
    habsent "$tag" "$a -> $b: nothing on $b" "$D/$b/t-$tag/x-from-$a.txt"
  done
  if mountpoint -q "$D/hot/$tag"; then hres "$tag" FAIL "hot: hot/$tag unmounted" "still a mount point"
  else hexpect "$tag" "hot: hot/$tag empty" "$(ls -A "$D/hot/$tag" 2>&1)" ""; fi
}

# ---- one boot per sandbox --------------------------------------------------------------------------
case_name() { # TAG -> summary name
  local sb kind fh ann
  IFS=- read -r sb kind fh ann <<< "$1"
  case $sb in ns) sb=namespace ;; esac
  if [ "$kind" = pin ]; then echo "fdpin-$sb-$fh"
  else echo "submounts-$sb-$fh-$([ "$ann" = ann ] && echo announce || echo no-announce)"; fi
}

boot() {
  local sb=$1 ssb tags=() live=() tag kind fh ann logs t0 t_sock t_qemu t_init='' t_status='' t_end
  local deadline dead_since='' note='' qargs=() i=0 st
  ssb=$(short_sb "$sb")
  logs=$logroot/$sb
  mkdir -p "$logs"
  declare -A dnote=()
  for c in $CONFIGS; do tags+=("$ssb-$c"); done
  log "=== boot $sb: ${#tags[@]} daemons"
  t0=$(now)
  for tag in "${tags[@]}"; do
    IFS=- read -r _ kind fh ann <<< "$tag"
    local share=$D
    [ "$kind" != pin ] || share=$T
    local cmd=("$bin" "--socket-path=$work/$tag.sock" "--shared-dir=$share" "--inode-file-handles=$fh" --rlimit-nofile=4096)
    if [ -n "$virtiofsd" ]; then cmd+=(--sandbox=none); else cmd+=("--sandbox=$sb"); fi
    if [ "$ann" = ann ]; then cmd+=(--announce-submounts); else cmd+=(--no-announce-submounts); fi
    echo "${cmd[*]}" > "$logs/daemon-$tag.log"
    setsid "${cmd[@]}" >> "$logs/daemon-$tag.log" 2>&1 < /dev/null &
    dpid[$tag]=$!
  done
  for _ in $(seq 300); do
    local all=1
    for tag in "${tags[@]}"; do
      socket_ready "$work/$tag.sock" || { kill -0 "${dpid[$tag]}" 2>/dev/null && all=''; }
    done
    [ -z "$all" ] || break
    sleep 0.1
  done
  t_sock=$(now)
  for tag in "${tags[@]}"; do
    if socket_ready "$work/$tag.sock" && kill -0 "${dpid[$tag]}" 2>/dev/null; then
      live+=("$tag")
      qargs+=(-chardev "socket,id=c$i,path=$work/$tag.sock" -device "vhost-user-fs-pci,queue-size=1024,chardev=c$i,tag=$tag")
      i=$((i + 1))
    else
      st=0; wait "${dpid[$tag]}" 2>/dev/null || st=$?
      dnote[$tag]="daemon did not start (status $st): $(tail -n 2 "$logs/daemon-$tag.log" | tr '\n' ' ')"
    fi
  done
  if [ ${#live[@]} -gt 0 ]; then
    local tag_list
    tag_list=$(IFS=,; echo "${live[*]}")
    t_qemu=$(now)
    : > "$logs/console.log"
    "$qemu" -accel tcg -cpu max -smp 2 -m 512M \
      -object memory-backend-memfd,id=mem,size=512M,share=on -numa node,memdev=mem "${qargs[@]}" \
      -kernel "$kernel" -initrd "$work/initramfs.cpio.gz" \
      -append "console=ttyS0 quiet panic=-1 e2e.tag=${live[0]} e2e.tags=$tag_list e2e.timeout=$((boot_timeout - 20))" \
      -nic none -nographic -no-reboot < /dev/null > "$logs/console.log" 2> "$logs/qemu.log" &
    qemu_pid=$!
    deadline=$((EPOCHSECONDS + boot_timeout))
    while kill -0 "$qemu_pid" 2>/dev/null; do
      [ -n "$t_init" ] || ! grep -q 'E2E-INIT uptime=' "$logs/console.log" || t_init=$(now)
      [ -n "$t_status" ] || ! grep -q 'E2E-STATUS: ' "$logs/console.log" || t_status=$(now)
      handle_events
      if [ "$EPOCHSECONDS" -ge "$deadline" ]; then note="timeout: the guest did not power off within ${boot_timeout}s"; break; fi
      if [ -z "$t_status" ]; then
        for tag in "${live[@]}"; do
          if [ -z "${dnote[$tag]:-}" ] && ! kill -0 "${dpid[$tag]}" 2>/dev/null; then
            st=0; wait "${dpid[$tag]}" 2>/dev/null || st=$?
            dnote[$tag]="daemon exited (status $st) while the guest was running"
            dead_since=${dead_since:-$EPOCHSECONDS}
          fi
        done
        # The guest's requests to a dead daemon never complete: stop the boot.
        if [ -n "$dead_since" ] && [ $((EPOCHSECONDS - dead_since)) -ge 3 ]; then note="a daemon died: boot stopped"; break; fi
      fi
      sleep 0.1
    done
    # QEMU gone on its own (poweroff, a refused socket, a crash): its status, and its last word.
    if ! kill -0 "$qemu_pid" 2>/dev/null; then
      st=0; wait "$qemu_pid" 2>/dev/null || st=$?
      [ -n "$t_status" ] || note="QEMU exited with status $st: $(grep -v '^ *$' "$logs/qemu.log" | tail -n1 | cut -c1-200 || true)"
    fi
    stop "$qemu_pid"; qemu_pid=''
    t_end=$(now)
    [ -z "$note" ] || log "$note"
  else
    t_qemu=$(now) t_end=$t_qemu
  fi
  # The daemons leave when QEMU disconnects; one still there after 10 s gets SIGTERM.
  for _ in $(seq 100); do
    local any=''
    for tag in "${tags[@]}"; do ! kill -0 "${dpid[$tag]}" 2>/dev/null || any=1; done
    [ -n "$any" ] || break
    sleep 0.1
  done
  for tag in "${tags[@]}"; do
    local p=${dpid[$tag]}
    if kill -0 "$p" 2>/dev/null; then
      kill -TERM "$p" 2>/dev/null || true
      for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    fi
    if kill -0 "$p" 2>/dev/null; then
      dnote[$tag]="${dnote[$tag]:+${dnote[$tag]}; }ignored SIGTERM after QEMU left (killed)"
    elif [ -z "${dnote[$tag]:-}" ]; then
      st=0; wait "$p" 2>/dev/null || st=$?
      case $st in 0|143) ;; *) dnote[$tag]="daemon exited with status $st" ;; esac
    fi
    # A child that outlives the daemon a moment (the upgrade launcher exits once the daemon has,
    # after removing its socket and pid file) is reaped by init a little later: give the group 2 s
    # to empty.
    for _ in $(seq 20); do kill -0 -- "-$p" 2>/dev/null || break; sleep 0.1; done
    if kill -0 -- "-$p" 2>/dev/null; then
      dnote[$tag]="${dnote[$tag]:+${dnote[$tag]}; }left processes behind (killed)"
    fi
    stop_group "$p"
    unset "dpid[$tag]"
    if grep -qE 'panicked at|RUST_BACKTRACE|Segmentation fault' "$logs/daemon-$tag.log"; then
      dnote[$tag]="${dnote[$tag]:+${dnote[$tag]}; }panic/crash in its log"
    fi
  done
  # Leftovers of an aborted boot (the hot mounts and pinned files are normally gone already):
  # the next boot starts clean.
  for tag in "${tags[@]}"; do
    ! mountpoint -q "$D/hot/$tag" 2>/dev/null || umount -l "$D/hot/$tag"
    rm -f "$T/pin/$tag.bin"
  done
  local timing
  timing="daemon_start=$(elapsed "$t0" "$t_sock")s boot=$([ -n "$t_init" ] && elapsed "$t_qemu" "$t_init" || echo -)s"
  timing+=" guest=$([ -n "$t_init" ] && elapsed "$t_init" "${t_status:-$t_end}" || echo -)s total=$(elapsed "$t0" "$t_end")s"
  log "boot $sb: $timing"
  tr -d '\r' < "$logs/console.log" > "$logs/console.txt"
  # For a configuration without a result (CI keeps only the end of the output, where the summary
  # is): the boot's timing and the console's last line.
  local last
  last=$(grep -v '^ *$' "$logs/console.txt" | tail -n1 | cut -c1-160 || true)
  note+="${note:+; }$timing${last:+; console: $last}"

  # ---- verdict per configuration ----
  for tag in "${tags[@]}"; do
    IFS=- read -r _ kind fh ann <<< "$tag"
    local name gpass gfail hpass hfail result verdict fails
    name=$(case_name "$tag")
    result=$(grep -o "^TAG-RESULT: $tag .*" "$logs/console.txt" || true)
    [ "$kind" != mix ] || [ -z "$result" ] || verify_mix "$tag" "$fh" "$ann" || true
    touch "$res/$tag.host"
    cp "$res/$tag.host" "$logs/host-$tag.out"
    gpass=$(grep -c "^PASS: $tag: " "$logs/console.txt" || true)
    gfail=$(grep -c "^FAIL: $tag: " "$logs/console.txt" || true)
    hpass=$(grep -c '^PASS: ' "$res/$tag.host" || true)
    hfail=$(grep -c '^FAIL: ' "$res/$tag.host" || true)
    fails=$( { grep "^FAIL: $tag: " "$logs/console.txt" | sed "s/^FAIL: $tag: //"; sed -n 's/^FAIL: //p' "$res/$tag.host"; } \
      | sed 's/ (.*//' | awk 'NR <= 3' | paste -sd ';' - | sed 's/;/; /g' || true)
    if [ -n "${dnote[$tag]:-}" ]; then
      verdict="FAIL (${dnote[$tag]}; guest $gfail/$((gpass + gfail)) failed${fails:+: $fails})"
    elif [ -z "$result" ]; then
      verdict="FAIL (no result from the guest${note:+: $note}; guest $gfail/$((gpass + gfail)) failed${fails:+: $fails})"
    elif [ "$gfail" -eq 0 ] && [ "$hfail" -eq 0 ] && [[ "$result" == *" rc=0 "* ]] && [ "$gpass" -gt 0 ]; then
      verdict="PASS (guest $gpass checks, host $hpass)"
    else
      local rcinfo=${result#*"$tag" }
      verdict="FAIL (guest $gfail/$((gpass + gfail)) failed (${rcinfo}), host $hfail/$((hpass + hfail)) failed${fails:+: $fails})"
    fi
    local ts
    ts=$(echo "$result" | sed -n 's/.*test_s=\([0-9.]*\).*/\1/p')
    summary+=("$name: $verdict test=${ts:--}s")
    [[ "$verdict" == PASS* ]] || failed=$((failed + 1))
  done
  rm -f "$work"/*.sock
}

t_all=$(now)
for sb in $sandboxes; do boot "$sb"; done
log "total $(elapsed "$t_all" "$(now)") s (+ setup)"
if [ -n "$summary_file" ]; then
  printf '%s\n' "${summary[@]}" > "$summary_file"
else
  echo
  log "summary:"
  for s in "${summary[@]}"; do echo "  $s"; done
fi
[ "$failed" -eq 0 ] || { log "$failed configuration(s) FAILED"; exit 1; }
log "all configurations passed"
