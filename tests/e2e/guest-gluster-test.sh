#!/bin/sh
# Runs INSIDE the e2e guest (busybox sh), on a share that is a directory on mount A of a
# GlusterFS volume; tests/e2e/gluster.sh is the host side, which acts through mount B (the other
# host) when the guest leaves a marker file in the share, and answers with one.
#
#   sh guest-gluster-test.sh MOUNTPOINT
#
# 1. The wrong-file case (issue 35): 300 files written and read back in dc/; the host makes 300
#    others there through B and forgets its inodes (drop_caches); the guest drops its page cache
#    only (its dentries and inodes, so the node IDs it holds, stay), looks up and reads B's files
#    (through the node of dc/ it holds: on vhostfs before issue 35's fix, that node's file handle
#    opened another file once GlusterFS reused the node ID, "Not a directory"), then reads each
#    of its own again, byte for byte, and overwrites every 10th. The host checks through B which
#    files changed after the guest is done.
# 2. With e2e.hostb=1 on the kernel command line (--cache=auto: 1 s timeouts): the guest reads
#    six files, the host changes them through B (create, append, truncate, rename, delete,
#    replace by rename); 1.5 s later the guest sees every change, ENOENT (never ESTALE) only for
#    the names really gone.
# Prints PASS:/FAIL: lines and exits with the number of failures.
M=${1:?usage: guest-gluster-test.sh MOUNTPOINT}
echo "== vhostfs e2e GlusterFS share on $M =="
fails=0
ok() { echo "PASS: $1"; }
ko() { fails=$((fails + 1)); echo "FAIL: $1"; }
pad() { printf '%-64s' "$1"; }
# wait_marker NAME: until the host made $M/NAME (120 s at most). A missing name is not cached
# by the guest (the daemon answers ENOENT, not a negative entry), so each try asks the daemon.
wait_marker() {
  n=0
  while [ ! -e "$M/$1" ]; do
    n=$((n + 1))
    [ "$n" -lt 600 ] || { ko "the host did not make $1 within 120 s"; return 1; }
    sleep 0.2
  done
}

# 1. The wrong-file case.
D=$M/dc
mkdir "$D" || ko "mkdir $D"
i=0
while [ $i -lt 300 ]; do pad "file $i" > "$D/f$i" || ko "write f$i"; i=$((i + 1)); done
bad=0 i=0
while [ $i -lt 300 ]; do [ "$(cat "$D/f$i")" = "$(pad "file $i")" ] || bad=$((bad + 1)); i=$((i + 1)); done
if [ $bad -eq 0 ]; then ok "300 files written and read back"; else ko "300 files written: $bad read back wrong"; fi
: > "$M/ready1"
if wait_marker go1; then
  echo 1 > /proc/sys/vm/drop_caches
  n=0 i=0
  while [ $i -lt 300 ]; do n=$((n + $(wc -c < "$D/g$i"))); i=$((i + 1)); done
  if [ "$n" -eq $((300 * 64)) ]; then ok "host B's 300 files read through the share"
  else ko "host B's files: $n bytes, want $((300 * 64))"; fi
  bad=0 i=0
  while [ $i -lt 300 ]; do
    got=$(cat "$D/f$i" 2>&1)
    if [ "$got" != "$(pad "file $i")" ]; then
      bad=$((bad + 1))
      [ $bad -gt 5 ] || echo "  f$i read: $got"
    fi
    i=$((i + 1))
  done
  if [ $bad -eq 0 ]; then ok "300 held files read back right after the host forgot their inodes"
  else ko "after the host forgot their inodes, $bad of 300 held files read wrong"; fi
  i=0
  while [ $i -lt 300 ]; do pad "written $i" > "$D/f$i" || ko "overwrite f$i"; i=$((i + 10)); done
  : > "$M/done1"
fi

# 2. Changes made through mount B while the guest works.
if grep -q 'e2e.hostb=1' /proc/cmdline; then
  H=$M/hb
  for f in app trunc old gone repl; do cat "$H/$f" > /dev/null || ko "read $f before the changes"; done
  [ ! -e "$H/new" ] || ko "new exists before the host made it"
  : > "$M/ready2"
  if wait_marker go2; then
    sleep 1.5  # the entry and attribute timeouts of --cache=auto (1 s)
    # expect NAME WANT: NAME's contents are WANT
    expect() {
      got=$(cat "$H/$1" 2>&1)
      if [ "$got" = "$2" ]; then ok "host B: $1 reads '$2'"; else ko "host B: $1 reads '$got', want '$2'"; fi
    }
    # gone NAME: NAME is gone, with ENOENT
    gone() {
      if [ -e "$H/$1" ]; then ko "host B: $1 still there"; else
        err=$(cat "$H/$1" 2>&1)
        case "$err" in *"No such file"*) ok "host B: $1 gone (ENOENT)" ;; *) ko "host B: $1: '$err', want ENOENT" ;; esac
      fi
    }
    expect new "created by B"
    expect app "start+more"
    expect trunc "0123"
    gone old
    expect renamed "old"
    gone gone
    expect repl "replacement"
    n=$(cd "$H" && echo *)
    if [ "$n" = "app new renamed repl trunc" ]; then ok "host B: listing '$n'"; else ko "host B: listing '$n'"; fi
    : > "$M/done2"
  fi
fi
echo "gluster: $fails failure(s)"
exit "$fails"
