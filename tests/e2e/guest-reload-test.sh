#!/bin/sh
# Guest side of the `systemctl reload` check of tests/e2e/systemd.sh (busybox sh). $1: the share.
# Opens a file, writes to it, creates reload-go and keeps appending a counter line every 20 ms
# (through the fd it holds) until the host creates reload-done (after the reload); then the
# file must hold every line exactly once and a new file must work.
m=$1
fails=0
pass() { echo "PASS: $*"; }
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
exec 3>"$m/held.log"
i=0
touch "$m/reload-go"
t=0
while [ ! -e "$m/reload-done" ] && [ "$t" -lt 3000 ]; do
  i=$((i + 1)); t=$((t + 1))
  echo "$i" >&3 || { fail "append $i"; break; }
  usleep 20000
done
exec 3>&-
if [ -e "$m/reload-done" ]; then pass "the host reloaded"; else fail "no reload-done within 60 s"; fi
if seq 1 "$i" | cmp -s - "$m/held.log"; then pass "held.log has lines 1..$i"; else fail "held.log is not 1..$i"; fi
if echo after > "$m/after.txt" && [ "$(cat "$m/after.txt")" = after ]; then pass "a new file after the reload"; else fail "a new file after the reload"; fi
bad=$(dmesg | grep -iE 'virtio.?fs|fuse' | grep -iE 'error|fail|timeout|abort' | head -n 3)
if [ -z "$bad" ]; then pass "dmesg: no virtio-fs error"; else fail "dmesg: $bad"; fi
[ "$fails" -eq 0 ]
