#!/bin/sh
# Guest side of tests/e2e/submounts.sh; runs INSIDE the guest (busybox sh, not `set -e`).
#
#   sh guest-submounts.sh MOUNTPOINT             # what /init runs: every tag of e2e.tags=
#   sh guest-submounts.sh --tag TAG MOUNTPOINT   # one tag's checks (the loop below runs this)
#
# The kernel command line names the virtio-fs tags: e2e.tags=T1,T2,... (one device, one daemon
# each) and e2e.tag=T1 (the one /init mounted on MOUNTPOINT); the others are mounted on /s/TAG.
# A tag is SANDBOX-KIND-FH-ANN, e.g. ns-mix-prefer-ann: KIND `mix` is the mixed share (ext4 base
# with xfs, btrfs, tmpfs, overlayfs and bind submounts, see submounts.sh), `pin` the tmpfs share
# of the fd-pinning checks; FH the daemon's --inode-file-handles; ANN ann|noann its
# --[no-]announce-submounts.
#
# Output: "PASS: TAG: check" / "FAIL: TAG: check (details)" per check, and per tag a line
# "TAG-RESULT: TAG rc=N test_s=S" (rc = failed checks; 137 = killed by the per-tag timeout).
#
# Host handshake: `step NAME` creates MOUNTPOINT/.e2e/ev/TAG.NAME and waits until the host (which
# polls that directory) has acted and created MOUNTPOINT/.e2e/ack/TAG.NAME.
# The fs op helper e2e-fsops (e2e-fsops.c) makes single syscalls and prints "OK" or the errno name.

# shellcheck disable=SC2012 # `ls` is what is tested (listing through the mount); names are plain
TAG_TIMEOUT=${E2E_TAG_TIMEOUT:-200}
now() { cut -d' ' -f1 /proc/uptime; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }
cmdline_arg() { tr ' ' '\n' < /proc/cmdline | sed -n "s/^$1=//p"; }

# ---- the loop over tags --------------------------------------------------------------------------
if [ "${1:-}" != --tag ]; then
  M0=${1:?usage: guest-submounts.sh MOUNTPOINT}
  first=$(cmdline_arg e2e.tag)
  failed_tags=0
  for tag in $(cmdline_arg e2e.tags | tr ',' ' '); do
    mp=$M0
    if [ "$tag" != "$first" ]; then
      mp=/s/$tag
      mkdir -p "$mp"
      if ! mount -t virtiofs "$tag" "$mp"; then
        echo "FAIL: $tag: mount -t virtiofs $tag $mp"
        echo "TAG-RESULT: $tag rc=1 test_s=0"
        failed_tags=$((failed_tags + 1))
        continue
      fi
    fi
    echo "== $tag on $mp =="
    t=$(now)
    timeout -s KILL "$TAG_TIMEOUT" sh "$0" --tag "$tag" "$mp"
    rc=$?
    [ "$rc" -ne 137 ] || echo "FAIL: $tag: did not finish within ${TAG_TIMEOUT}s (killed)"
    echo "TAG-RESULT: $tag rc=$rc test_s=$(since "$t")"
    [ "$rc" -eq 0 ] || failed_tags=$((failed_tags + 1))
  done
  # Submounts the guest automounted below MOUNTPOINT would make /init's `umount` of it fail.
  awk -v p="$M0/" 'index($2, p) == 1 { print $2 }' /proc/mounts | sort -r | while read -r m; do
    umount -l "$m"
  done
  exit "$failed_tags"
fi

# ---- one tag -------------------------------------------------------------------------------------
tag=$2
M=$3
IFS=- read -r sb kind fh ann <<EOF
$tag
EOF
: "$sb"
pass=0
fail=0
ok() { pass=$((pass + 1)); echo "PASS: $tag: $1${2:+ ($2)}"; }
ko() { fail=$((fail + 1)); echo "FAIL: $tag: $1${2:+ ($2)}"; }
check() { _cn=$1; shift; if "$@"; then ok "$_cn"; else ko "$_cn" "command failed: $*"; fi; }
expect() { if [ "$2" = "$3" ]; then ok "$1"; else ko "$1" "got '$2', want '$3'"; fi; }
# expect_err NAME RESULT ERRNO: an e2e-fsops result whose first word must be ERRNO.
expect_err() { if [ "${2%% *}" = "$3" ]; then ok "$1"; else ko "$1" "got '$2', want $3"; fi; }
drop_caches() { echo 3 > /proc/sys/vm/drop_caches; }
step() {
  : > "$M/.e2e/ev/$tag.$1" || { ko "handshake $1: create marker"; return 1; }
  _si=0
  while [ ! -e "$M/.e2e/ack/$tag.$1" ]; do
    _si=$((_si + 1))
    if [ "$_si" -gt 150 ]; then ko "handshake $1: no answer from the host within 30 s"; return 1; fi
    sleep 0.2
  done
}
# is_mount PATH: /proc/mounts lists PATH as a virtiofs mount.
# shellcheck disable=SC2317 # also called through within_10s (hot_gone)
is_mount() { awk -v p="$1" '$2 == p && $3 == "virtiofs" { f = 1 } END { exit !f }' /proc/mounts; }
# mounts_below PATH: the guest mounts below PATH.
mounts_below() { awk -v p="$1/" 'index($2, p) == 1 { print $2 }' /proc/mounts; }

echo "config: sandbox=$sb kind=$kind inode-file-handles=$fh submounts=$ann mount=$M"

# ---- the fd-pinning share -------------------------------------------------------------------------
if [ "$kind" = pin ]; then
  f=$M/pin/$tag.bin
  if step pin-create; then  # the host writes a 256 MiB file on its tmpfs
    expect "pin: stat of the host's 256 MiB file" "$(stat -c %s "$f" 2>&1)" 268435456
    check "pin: ls -l of it" sh -c "ls -l '$f' > /dev/null"
    # Looked up and stat'ed, never opened. The host now deletes it and checks that its space
    # comes back within 2 s and that no daemon fd is left on the deleted inode.
    step pin-looked
  fi
  if [ "$fh" = prefer ]; then
    want=$(cat "$M/many.count")
    drop_caches
    t=$(now)
    ls -l "$M/many" > /tmp/ls.out 2> /tmp/ls.err
    ls_rc=$?
    echo "     (ls -l of $want files: $(since "$t") s, rc=$ls_rc)"
    head -n 3 /tmp/ls.err
    expect "ls -l $want files: exit status" "$ls_rc" 0
    expect "ls -l $want files: line count" "$(wc -l < /tmp/ls.out)" $((want + 1))
    expect "ls -l $want files: no errors" "$(wc -l < /tmp/ls.err)" 0
    # Idle while the host waits 2 s and counts the daemon's fds (then acknowledges).
    : > "$M/.e2e/ev/$tag.many-listed"
    sleep 3
    i=0
    while [ ! -e "$M/.e2e/ack/$tag.many-listed" ] && [ "$i" -lt 150 ]; do i=$((i + 1)); sleep 0.2; done
    check "handshake many-listed: host answered" test -e "$M/.e2e/ack/$tag.many-listed"
  fi
  echo "== $tag: $pass passed, $fail failed =="
  exit "$fail"
fi

# ---- the mixed share ------------------------------------------------------------------------------
# ovl first: in mandatory mode its failing lookups come before everything else is checked.
FSS="ovl base xfs btrfs tmpfs bind"
full=1
[ "$fh" != never ] || full=''  # never: the visibility checks only
served() { [ "$fh" != mandatory ] || [ "$1" != ovl ]; }
# Mount root of a filesystem in the guest's view (base is the share's own ext4).
root_of() { if [ "$1" = base ]; then echo "$M"; else echo "$M/$1"; fi; }

grep " $M" /proc/mounts

# --- visibility: list and read every seeded file ---
for fs in $FSS; do
  d=$M/$fs/t-$tag
  if ! served "$fs"; then
    # mandatory: the overlay has no file handles, so its lookups must fail, with an errno that
    # says so (not one that looks like a missing file or an I/O error); the rest keeps working.
    r1=$(e2e-fsops stat "$M/ovl")
    r2=$(e2e-fsops stat "$d/seed.txt")
    case "${r2%% *}" in
      OK) ko "ovl: lookups fail without file handles (mandatory)" "stat $d/seed.txt succeeded: $r2; stat $M/ovl: $r1" ;;
      EIO|ENOENT|ESTALE|E\?) ko "ovl: lookups fail with a clear errno (mandatory)" "stat $M/ovl: $r1; stat $d/seed.txt: $r2" ;;
      *) ok "ovl: lookups fail with a clear errno (mandatory)" "stat $M/ovl: $r1; stat ovl/t-$tag/seed.txt: $r2" ;;
    esac
    continue
  fi
  expect "$fs: list t-$tag/" "$(ls -A "$d" 2>&1 | tr '\n' ' ')" "seed.txt sub "
  expect "$fs: list t-$tag/sub/" "$(ls -A "$d/sub" 2>&1 | tr '\n' ' ')" "nested.txt "
  expect "$fs: read seed.txt" "$(cat "$d/seed.txt" 2>&1)" "seed $fs $tag"
  expect "$fs: read sub/nested.txt" "$(cat "$d/sub/nested.txt" 2>&1)" "nested $fs $tag"
done

if [ -n "$full" ]; then
  # --- write, create, rename and link within each filesystem ---
  for fs in $FSS; do
    served "$fs" || continue
    d=$M/$fs/t-$tag
    check "$fs: append to seed.txt" sh -c "echo 'guest $tag' >> '$d/seed.txt'"
    expect "$fs: read back the appended seed.txt" "$(cat "$d/seed.txt" 2>&1)" "seed $fs $tag
guest $tag"
    check "$fs: create new.txt" sh -c "echo 'new $fs $tag' > '$d/new.txt'"
    expect "$fs: rename seed.txt renamed.txt" "$(e2e-fsops rename "$d/seed.txt" "$d/renamed.txt")" OK
    check "$fs: seed.txt gone after the rename" test ! -e "$d/seed.txt"
    expect "$fs: rename sub/nested.txt nested-moved.txt (across directories)" \
      "$(e2e-fsops rename "$d/sub/nested.txt" "$d/nested-moved.txt")" OK
    expect "$fs: link renamed.txt linked.txt" "$(e2e-fsops link "$d/renamed.txt" "$d/linked.txt")" OK
    expect "$fs: link count 2" "$(stat -c %h "$d/renamed.txt" 2>&1)" 2
  done
  drop_caches
  for fs in $FSS; do
    served "$fs" || continue
    d=$M/$fs/t-$tag
    expect "$fs: renamed.txt after drop_caches" "$(cat "$d/renamed.txt" 2>&1)" "seed $fs $tag
guest $tag"
    expect "$fs: linked.txt after drop_caches" "$(cat "$d/linked.txt" 2>&1)" "seed $fs $tag
guest $tag"
    expect "$fs: nested-moved.txt after drop_caches" "$(cat "$d/nested-moved.txt" 2>&1)" "nested $fs $tag"
    expect "$fs: new.txt after drop_caches" "$(cat "$d/new.txt" 2>&1)" "new $fs $tag"
    expect "$fs: list t-$tag/ after the renames" "$(ls -A "$d" 2>&1 | tr '\n' ' ')" \
      "linked.txt nested-moved.txt new.txt renamed.txt sub "
  done

  # --- rename(2) and link(2) across filesystems: EXDEV ---
  for pair in xfs:btrfs base:tmpfs ovl:xfs bind:base tmpfs:bind; do
    a=${pair%:*} b=${pair#*:}
    if ! served "$a" || ! served "$b"; then continue; fi
    src=$M/$a/t-$tag/x-to-$b.txt dst=$M/$b/t-$tag/x-from-$a.txt
    echo "x $a $tag" > "$src"
    expect_err "rename $a -> $b: EXDEV" "$(e2e-fsops rename "$src" "$dst")" EXDEV
    expect_err "link $a -> $b: EXDEV" "$(e2e-fsops link "$src" "$dst")" EXDEV
    expect "$a -> $b: source intact" "$(cat "$src" 2>&1)" "x $a $tag"
    check "$a -> $b: nothing at the destination" test ! -e "$dst"
  done

  # --- st_dev / mounts ---
  list=/tmp/devino.$tag
  : > "$list"
  for fs in $FSS; do
    served "$fs" || continue
    d=$M/$fs/t-$tag
    stat -c '%d:%i %n' "$(root_of "$fs")" "$d" "$d/sub" "$d/renamed.txt" "$d/nested-moved.txt" \
      "$d/new.txt" >> "$list" 2>&1
  done
  mdev=$(stat -c %d "$M")
  if [ "$ann" = ann ]; then
    n=0 devs=''
    for fs in $FSS; do
      served "$fs" || continue
      n=$((n + 1))
      devs="$devs $fs=$(stat -c %d "$(root_of "$fs")")"
      [ "$fs" = base ] || check "$fs: a mount of its own in the guest (/proc/mounts)" is_mount "$M/$fs"
      expect "$fs: files have the st_dev of their mount" \
        "$(stat -c %d "$M/$fs/t-$tag/renamed.txt" "$M/$fs/t-$tag/sub" | sort -u | tr '\n' ' ')" \
        "$(stat -c %d "$(root_of "$fs")") "
    done
    expect "one st_dev per filesystem ($devs )" \
      "$(echo "$devs" | tr ' ' '\n' | sed -n 's/.*=//p' | sort -u | wc -l)" "$n"
    expect "(st_dev, st_ino) pairs do not collide across filesystems" \
      "$(awk '{ print $1 }' "$list" | sort | uniq -d | tr '\n' ' ')" ""
  else
    expect "one st_dev for the whole share (no-announce-submounts)" \
      "$(awk -F'[: ]' '{ print $1 }' "$list" | sort -u | tr '\n' ' ')" "$mdev "
    expect "no guest mounts below the share (no-announce-submounts)" "$(mounts_below "$M" | tr '\n' ' ')" ""
    echo "     (info: $(awk '{ print $1 }' "$list" | sort | uniq -d | wc -l) (st_dev, st_ino) pairs shared by files of different host filesystems; expected without submounts)"
  fi

  # --- syncfs reaches the host filesystem (the host reads the loop device's written sectors) ---
  if [ "$ann" = ann ]; then
    for fs in xfs btrfs; do
      d=$M/$fs/t-$tag
      step "sync-$fs-start" || continue  # the host syncs the fs itself and reads the counter
      dd if=/dev/urandom of="$d/sync.bin" bs=1M count=1 2> /dev/null
      expect "$fs: 1 MiB written for syncfs" "$(stat -c %s "$d/sync.bin" 2>&1)" 1048576
      step "sync-$fs-written" || continue  # the host reads the counter again
      check "$fs: sync -f (syncfs) of the written file" sync -f "$d/sync.bin"
      step "sync-$fs-synced"  # the host checks the counter grew by the file's 2048 sectors
    done
  fi

  # --- a host mount appearing and going away under the running guest ---
  # within_10s CMD: CMD succeeds within 10 s (polled every 0.2 s).
  within_10s() {
    i=0
    while [ "$i" -lt 50 ]; do
      "$@" && return 0
      i=$((i + 1))
      sleep 0.2
    done
    return 1
  }
  # shellcheck disable=SC2317 # called through within_10s
  hot_appeared() { [ "$(cat "$hd/hot.txt" 2>/dev/null)" = "hot $tag" ]; }
  # shellcheck disable=SC2317 # called through within_10s
  hot_gone() { [ ! -e "$hd/hot.txt" ] && { [ "$ann" != ann ] || ! is_mount "$hd"; }; }
  hd=$M/hot/$tag
  expect "hot: $hd empty before the host mounts on it" "$(ls -A "$hd" 2>&1)" ""
  pdev=$(stat -c %d "$M/hot")
  if step hot-ready; then  # the host mounts a tmpfs on it with hot.txt
    t=$(now)
    if within_10s hot_appeared; then
      ok "hot: a filesystem mounted on the host appears in the guest" "after $(since "$t") s"
    else
      ko "hot: a filesystem mounted on the host appears in the guest within 10 s" "ls -A: $(ls -A "$hd" 2>&1 | tr '\n' ' ')"
    fi
    if [ "$ann" = ann ]; then
      check "hot: a mount of its own in the guest (/proc/mounts)" is_mount "$hd"
      check "hot: its own st_dev" test "$(stat -c %d "$hd")" != "$pdev"
    else
      check "hot: no guest mount (no-announce-submounts)" sh -c "! awk '\$2 == \"$hd\"' /proc/mounts | grep -q ."
      expect "hot: the share's st_dev" "$(stat -c %d "$hd")" "$pdev"
    fi
    if step hot-seen; then  # the host unmounts it (umount -l)
      t=$(now)
      if within_10s hot_gone; then
        ok "hot: unmounted on the host, gone in the guest" "after $(since "$t") s"
      else
        ko "hot: unmounted on the host, gone in the guest within 10 s" \
          "ls -A: $(ls -A "$hd" 2>&1 | tr '\n' ' '); guest mount: $(awk -v p="$hd" '$2 == p' /proc/mounts)"
      fi
      check "hot: ls -la of the old mount point: no errors" sh -c "ls -la '$hd' > /dev/null 2> /tmp/hot.err && ! test -s /tmp/hot.err"
      check "hot: the share's root still lists" sh -c "ls -la '$M' > /dev/null 2> /tmp/root.err && ! test -s /tmp/root.err"
    fi
  fi
  for fs in $FSS; do
    served "$fs" || continue
    expect "$fs: still readable at the end" "$(cat "$M/$fs/t-$tag/renamed.txt" 2>&1)" "seed $fs $tag
guest $tag"
  done
fi

echo "== $tag: $pass passed, $fail failed =="
exit "$fail"
