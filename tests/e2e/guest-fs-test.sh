#!/bin/sh
# vhostfs e2e file-system test; runs INSIDE the guest (busybox sh) on the virtio-fs mount.
#
#   sh guest-fs-test.sh MOUNTPOINT
#
# Expects the host to have prepared MOUNTPOINT/host/ (see host-fs-test.sh prepare); works in
# MOUNTPOINT/guest/ (must not exist yet) and leaves files there that the host checks afterwards
# (host-fs-test.sh verify). Prints "PASS: name" / "FAIL: name (details)" per check and exits with
# the number of failed checks (0 = success).
# Not `set -e`: every check runs even if an earlier one failed.

M=${1:?usage: guest-fs-test.sh MOUNTPOINT}
H=$M/host
W=$M/guest
BIG_MIB=${E2E_BIG_MIB:-8}
pass=0
fail=0

ok() { pass=$((pass + 1)); echo "PASS: $1"; }
ko() { fail=$((fail + 1)); echo "FAIL: $1${2:+ ($2)}"; }
# check NAME COMMAND...: PASS if the command succeeds.
check() { n=$1; shift; if "$@"; then ok "$n"; else ko "$n" "command failed: $*"; fi; }
# expect NAME GOT WANT: PASS if equal.
expect() { if [ "$2" = "$3" ]; then ok "$1"; else ko "$1" "got '$2', want '$3'"; fi; }
drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches; }
now() { cut -d' ' -f1 /proc/uptime; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }

echo "== vhostfs e2e guest test on $M =="
grep " $M " /proc/mounts || true
if [ ! -d "$H" ]; then
  ko "host dir $H present" "the host did not prepare the share"
  exit 1
fi

# --- request queues ----------------------------------------------------------------------------
# The driver lists its virtqueues under /sys/fs/virtiofs/N/mqs/: 0 is the high-priority queue,
# then one per request queue it uses (at most one per vCPU); e2e.queues= on the kernel command
# line says how many request queues the device offers.
want_q=$(tr ' ' '\n' < /proc/cmdline | sed -n 's/^e2e.queues=//p')
if [ -n "$want_q" ]; then
  cpus=$(grep -c ^processor /proc/cpuinfo)
  [ "$want_q" -gt "$cpus" ] && want_q=$cpus
  got_q=$(($(ls -d /sys/fs/virtiofs/*/mqs/* 2>/dev/null | wc -l) - 1))
  expect "request queues in use" "$got_q" "$want_q"
fi

# --- mkdir ------------------------------------------------------------------------------------
check "mkdir work dir" mkdir "$W"
check "mkdir nested" mkdir -p "$W/sub/a/b"
check "mkdir existing fails" sh -c "! mkdir '$W/sub' 2>/dev/null"

# --- create, write, read back ----------------------------------------------------------------
echo hello > "$W/created.txt"
expect "create + read" "$(cat "$W/created.txt" 2>&1)" hello
echo more >> "$W/created.txt"
expect "append" "$(cat "$W/created.txt" 2>&1)" "hello
more"

t=$(now)
dd if=/dev/urandom of="$W/big.bin" bs=1M count="$BIG_MIB" 2>/dev/null
sum_cached=$(md5sum "$W/big.bin" | cut -d' ' -f1)
drop_caches
sum_uncached=$(md5sum "$W/big.bin" | cut -d' ' -f1)
expect "write ${BIG_MIB} MiB, read back after drop_caches (md5)" "$sum_uncached" "$sum_cached"
expect "big file size" "$(stat -c %s "$W/big.bin")" $((BIG_MIB * 1048576))
echo "$sum_cached" > "$W/big.bin.md5"
echo "     (big file write+read: $(since "$t") s)"

# overwrite in the middle without truncating (offset write)
dd if=/dev/zero of="$W/big.bin" bs=4096 seek=3 count=2 conv=notrunc 2>/dev/null
drop_caches
expect "pwrite in the middle keeps size" "$(stat -c %s "$W/big.bin")" $((BIG_MIB * 1048576))
expect "pwrite in the middle reads back zeros" \
  "$(dd if="$W/big.bin" bs=4096 skip=3 count=2 2>/dev/null | md5sum | cut -d' ' -f1)" \
  "$(dd if=/dev/zero bs=4096 count=2 2>/dev/null | md5sum | cut -d' ' -f1)"
md5sum "$W/big.bin" | cut -d' ' -f1 > "$W/big.bin.md5"

# --- host -> guest --------------------------------------------------------------------------
expect "read host-written file (md5)" "$(md5sum "$H/seed.bin" | cut -d' ' -f1)" "$(cat "$H/seed.md5")"

# --- rename ---------------------------------------------------------------------------------
check "rename" mv "$W/created.txt" "$W/renamed.txt"
check "rename: old name gone" test ! -e "$W/created.txt"
expect "rename: content kept" "$(cat "$W/renamed.txt" 2>&1)" "hello
more"
echo moving > "$W/tomove.txt"
check "rename across directories" mv "$W/tomove.txt" "$W/sub/a/moved.txt"
echo old > "$W/replaced.txt"
echo new > "$W/replacement.txt"
check "rename over existing file" mv -f "$W/replacement.txt" "$W/replaced.txt"
drop_caches
expect "rename over existing: new content" "$(cat "$W/replaced.txt" 2>&1)" new

# --- hard link -------------------------------------------------------------------------------
check "hard link" ln "$W/renamed.txt" "$W/hardlink.txt"
drop_caches
expect "hard link: link count" "$(stat -c %h "$W/renamed.txt")" 2
expect "hard link: same inode" "$(stat -c %i "$W/hardlink.txt")" "$(stat -c %i "$W/renamed.txt")"
expect "hard link: same content" "$(cat "$W/hardlink.txt" 2>&1)" "$(cat "$W/renamed.txt" 2>&1)"

# --- symlink --------------------------------------------------------------------------------
check "symlink" ln -s renamed.txt "$W/symlink"
drop_caches
expect "readlink" "$(readlink "$W/symlink")" renamed.txt
check "symlink is a link" test -L "$W/symlink"
expect "read through symlink" "$(head -n1 "$W/symlink" 2>&1)" hello
ln -s does-not-exist "$W/dangling"
expect "dangling symlink readlink" "$(readlink "$W/dangling")" does-not-exist

# --- chmod ----------------------------------------------------------------------------------
echo mode > "$W/mode.txt"
check "chmod 0640" chmod 0640 "$W/mode.txt"
drop_caches
expect "chmod: mode" "$(stat -c %a "$W/mode.txt")" 640
mkdir "$W/modedir"
chmod 0750 "$W/modedir"
expect "chmod dir: mode" "$(stat -c %a "$W/modedir")" 750

# --- chown ----------------------------------------------------------------------------------
echo owned > "$W/owned.txt"
check "chown 1000:1000" chown 1000:1000 "$W/owned.txt"
drop_caches
expect "chown: owner" "$(stat -c %u:%g "$W/owned.txt")" 1000:1000

# --- truncate -------------------------------------------------------------------------------
dd if=/dev/urandom of="$W/trunc.bin" bs=64k count=16 2>/dev/null
head -c 12345 "$W/trunc.bin" > /tmp/trunc.expect
check "truncate shrink" truncate -s 12345 "$W/trunc.bin"
drop_caches
expect "truncate shrink: size" "$(stat -c %s "$W/trunc.bin")" 12345
expect "truncate shrink: content" "$(md5sum < "$W/trunc.bin")" "$(md5sum < /tmp/trunc.expect)"
echo x > "$W/grow.bin"
check "truncate grow" truncate -s 1000000 "$W/grow.bin"
drop_caches
expect "truncate grow: size" "$(stat -c %s "$W/grow.bin")" 1000000
expect "truncate grow: tail reads zeros" "$(tail -c 10 "$W/grow.bin" | od -An -tx1 | tr -d ' \n')" 00000000000000000000

# --- delete files and directories ------------------------------------------------------------
echo bye > "$W/gone.txt"
check "unlink" rm "$W/gone.txt"
check "unlink: gone" test ! -e "$W/gone.txt"
check "unlink host-created file" rm "$H/victim.txt"
check "rmdir non-empty fails" sh -c "! rmdir '$W/sub' 2>/dev/null"
check "mkdir + rmdir" sh -c "mkdir '$W/emptydir' && rmdir '$W/emptydir' && test ! -e '$W/emptydir'"
mkdir -p "$W/tree/x/y"
for i in 1 2 3 4 5; do echo "$i" > "$W/tree/x/f$i"; echo "$i" > "$W/tree/x/y/g$i"; done
check "rm -rf tree" rm -rf "$W/tree"
drop_caches
check "rm -rf tree: gone" test ! -e "$W/tree"
ln "$W/renamed.txt" "$W/link3"
expect "hard link: third link count" "$(stat -c %h "$W/hardlink.txt")" 3
expect "unlink one of three links: nlink" "$(rm "$W/link3" && stat -c %h "$W/renamed.txt")" 2

# --- big directory ---------------------------------------------------------------------------
want=$(cat "$H/many.count")
drop_caches
t=$(now)
ls -l "$H/many" > /tmp/ls.out 2> /tmp/ls.err
ls_rc=$?
lines=$(wc -l < /tmp/ls.out)
echo "     (ls -l of $want files: $(since "$t") s, rc=$ls_rc)"
if [ "$ls_rc" -ne 0 ]; then head -n 3 /tmp/ls.err; fi
expect "ls -l $want files: exit status" "$ls_rc" 0
expect "ls -l $want files: line count" "$lines" $((want + 1))
expect "ls -l $want files: no errors" "$(wc -l < /tmp/ls.err)" 0
# shellcheck disable=SC2012 # names are plain f00001...; busybox find is no better here
expect "readdir $want files (ls -1A)" "$(ls -1A "$H/many" | wc -l)" "$want"

# --- statfs ---------------------------------------------------------------------------------
check "statfs (df)" df "$M"

sync
echo "== guest test: $pass passed, $fail failed =="
exit "$fail"
