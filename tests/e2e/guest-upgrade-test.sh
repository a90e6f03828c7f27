#!/bin/sh
# Guest side of tests/e2e/upgrade.sh (busybox sh; fio added to the initramfs). $1: the share.
#   1. holds every inode of many/ (the host made E2E_MANY files there) by listing it with -l;
#   2. a baseline fio run (randrw 4 KiB, 4 jobs, verify=crc32c, 10 s): its max latency;
#   3. creates upgrade-go, on which the host upgrades vhostfs three times, while
#      - fio runs the same job for 30 s, and
#      - a shell appends a counter line every 20 ms to append.log, which it holds open;
#   4. checks: fio exits 0 with no error, append.log has every line exactly once, dmesg has no
#      virtio-fs/FUSE error. Prints E2E-FIO lines with the max latencies (usec).
m=$1
fails=0
pass() { echo "PASS: $*"; }
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
# fio's terse (v3) line: field 5 the error, 39 and 80 the read and write max latency (usec).
maxlat() { awk -F';' '{ r = $39; w = $80; print (r > w ? r : w) }' "$1"; }
job() { # NAME SECONDS
  fio --name="$1" --directory="$m/fio" --rw=randrw --bs=4k --numjobs=4 --time_based \
    --runtime="$2" --size=8M --ioengine=psync --verify=crc32c --group_reporting \
    --output-format=terse --output="/tmp/$1.terse" --eta=never
}

# shellcheck disable=SC2012 # ls -l: LOOKUP and GETATTR of every entry, which the guest then holds
held=$(ls -l "$m/many" | wc -l)
if [ "$held" -gt 1 ]; then pass "holding $((held - 1)) inodes of many/"; else fail "listing many/"; fi
mkdir -p "$m/fio"
if job base 10; then pass "baseline fio"; else fail "baseline fio (rc $?)"; fi
echo "E2E-FIO base maxlat_us=$(maxlat /tmp/base.terse) error=$(cut -d';' -f5 /tmp/base.terse)"

(
  exec 3>>"$m/append.log"
  i=0
  while [ ! -e "$m/upgrade-stop" ]; do
    i=$((i + 1))
    echo "$i" >&3 || { echo "append $i failed" > /tmp/append.err; break; }
    usleep 20000
  done
  echo "$i" > /tmp/appended
) &
appender=$!
touch "$m/upgrade-go"
if job up 30; then pass "fio through the upgrades"; else fail "fio through the upgrades (rc $?)"; fi
err=$(cut -d';' -f5 /tmp/up.terse)
if [ "$err" = 0 ]; then pass "fio: no error, verification passed"; else fail "fio error $err"; fi
echo "E2E-FIO up maxlat_us=$(maxlat /tmp/up.terse) error=$err"
touch "$m/upgrade-stop"
wait "$appender"
n=$(cat /tmp/appended 2>/dev/null)
if [ ! -e /tmp/append.err ]; then pass "appends never failed"; else fail "$(cat /tmp/append.err)"; fi
if [ -n "$n" ] && seq 1 "$n" | cmp -s - "$m/append.log"; then
  pass "append.log has lines 1..$n, each once"
else
  fail "append.log is not 1..$n ($(wc -l < "$m/append.log") lines)"
fi
bad=$(dmesg | grep -iE 'virtio.?fs|fuse' | grep -iE 'error|fail|timeout|abort' | head -n 3)
if [ -z "$bad" ]; then pass "dmesg: no virtio-fs error"; else fail "dmesg: $bad"; fi
[ "$fails" -eq 0 ]
