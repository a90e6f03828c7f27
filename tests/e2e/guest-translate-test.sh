#!/bin/sh
# Runs INSIDE the e2e guest (busybox sh): uid/gid translation (--translate-uid/--translate-gid)
# with the command line of the launcher the host wrote into MOUNTPOINT/translate-mode (see
# translate-host.sh, which prepared the share and checks the host side afterwards):
#   kubevirt  --translate-uid=host:107:0:1 (the share and its files belong to host uid 107)
#   incus     map:0:1000000:65536 for uids and gids, forbid-guest for the rest, --posix-acl
#   docker    --translate-uid squash-guest:0:1000:4294967295 with Docker Desktop's xattrmap
# Files are created as guest uid 0 and (su) 1000, owners read with `ls -ln`, a forbidden uid
# (70000) must get EPERM, ACLs set with setfacl must read back with guest ids.
#
#   sh guest-translate-test.sh MOUNTPOINT
#
# Prints PASS:/FAIL: lines and exits with the number of failed checks.
M=${1:?usage: guest-translate-test.sh MOUNTPOINT}
pass=0
fail=0
ok() { pass=$((pass + 1)); echo "PASS: $1"; }
ko() { fail=$((fail + 1)); echo "FAIL: $1${2:+ ($2)}"; }
expect() { if [ "$2" = "$3" ]; then ok "$1"; else ko "$1" "got '$2', want '$3'"; fi; }
# has NAME TEXT PATTERN: PASS if a line of TEXT matches PATTERN (grep -E).
has() { if printf '%s\n' "$2" | grep -Eq "$3"; then ok "$1"; else ko "$1" "no line '$3' in: $(printf '%s' "$2" | tr '\n' ' ')"; fi; }
drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches; }
# owner PATH: uid:gid as `ls -ln` shows them.
# shellcheck disable=SC2012 # the owner as `ls -ln` shows it is the point
owner() { ls -lnd "$1" | awk '{ print $3 ":" $4 }'; }
# as UID CMD: runs CMD (a shell command) as the guest user with that uid (and gid).
as() { su -s /bin/sh "u$1" -c "$2"; }
# eperm NAME UID CMD: CMD run as UID must fail with "Operation not permitted".
eperm() {
  out=$(as "$2" "$3" 2>&1)
  case "$out" in
    *"Operation not permitted"*) ok "$1" ;;
    *) ko "$1" "want EPERM, got: $out" ;;
  esac
}

for id in 1000 70000; do
  echo "u$id:x:$id:$id::/tmp:/bin/sh" >> /etc/passwd
  echo "u$id:x:$id:" >> /etc/group
done

mode=$(cat "$M/translate-mode") || { echo "FAIL: no $M/translate-mode"; exit 1; }
echo "== vhostfs e2e translate test on $M: $mode =="

if touch "$M/by0"; then ok "create as guest root"; else ko "create as guest root"; fi
if as 1000 "touch $M/pub/by1000"; then ok "create as guest uid 1000"; else ko "create as guest uid 1000"; fi
if mkdir "$M/dir0"; then ok "mkdir as guest root"; else ko "mkdir as guest root"; fi
drop_caches
case "$mode" in
  kubevirt)
    expect "ls -ln: share (host 107:107)" "$(owner "$M")" 0:107
    expect "ls -ln: host file of 107" "$(owner "$M/host107")" 0:107
    expect "ls -ln: host file of 0" "$(owner "$M/host0")" 0:0
    expect "ls -ln: created by guest 0" "$(owner "$M/by0")" 0:0
    expect "ls -ln: created by guest 1000" "$(owner "$M/pub/by1000")" 1000:1000
    ;;
  incus)
    expect "ls -ln: share (host 1000000)" "$(owner "$M")" 0:0
    expect "ls -ln: host file of 1001000" "$(owner "$M/hostfile")" 1000:1000
    expect "ls -ln: created by guest 0" "$(owner "$M/by0")" 0:0
    expect "ls -ln: created by guest 1000" "$(owner "$M/pub/by1000")" 1000:1000
    eperm "forbidden uid 70000: create is EPERM" 70000 "touch $M/pub/byfar"
    eperm "forbidden uid 70000: mkdir is EPERM" 70000 "mkdir $M/pub/dirfar"
    if chown 70000 "$M/by0" 2>/dev/null; then ko "chown to forbidden uid 70000 is EPERM"; else ok "chown to forbidden uid 70000 is EPERM"; fi
    touch "$M/chowned"
    if chown 1234:1235 "$M/chowned"; then ok "chown 1234:1235"; else ko "chown 1234:1235"; fi
    drop_caches
    expect "ls -ln: chowned" "$(owner "$M/chowned")" 1234:1235
    if setfacl -m u:1000:rwx,g:1000:rx "$M/by0"; then ok "setfacl -m u:1000:rwx,g:1000:rx"; else ko "setfacl -m"; fi
    drop_caches
    acl=$(getfacl -n -c "$M/by0" 2>&1)
    has "getfacl: user:1000:rwx" "$acl" '^user:1000:rwx'
    has "getfacl: group:1000:r-x" "$acl" '^group:1000:r-x'
    acl=$(getfacl -n -c "$M/acl-host" 2>&1)
    has "getfacl of a host ACL: user:1234:rw-" "$acl" '^user:1234:rw-'
    has "getfacl of a host ACL: group:1235:r--" "$acl" '^group:1235:r--'
    if setfacl -d -m u:1000:rx "$M/dir0"; then ok "setfacl -d -m u:1000:rx"; else ko "setfacl -d"; fi
    touch "$M/dir0/child"
    drop_caches
    has "getfacl: default:user:1000:r-x" "$(getfacl -n -c "$M/dir0" 2>&1)" '^default:user:1000:r-x'
    has "getfacl: inherited user:1000:r-x" "$(getfacl -n -c "$M/dir0/child" 2>&1)" '^user:1000:r-x'
    if setfacl -m u:70000:r "$M/by0" 2>/dev/null; then ko "setfacl naming forbidden uid 70000 fails"; else ok "setfacl naming forbidden uid 70000 fails"; fi
    ;;
  docker)
    expect "ls -ln: share (host 1000:1000)" "$(owner "$M")" 1000:1000
    expect "ls -ln: created by guest 0 (uid squashed)" "$(owner "$M/by0")" 1000:0
    expect "ls -ln: created by guest 1000" "$(owner "$M/pub/by1000")" 1000:1000
    if as 70000 "touch $M/pub/by70000"; then ok "create as guest uid 70000"; else ko "create as guest uid 70000"; fi
    expect "ls -ln: created by guest 70000 (uid squashed)" "$(owner "$M/pub/by70000")" 1000:70000
    if setfattr -n user.k -v v "$M/by0"; then ok "setfattr user.k"; else ko "setfattr user.k"; fi
    expect "getfattr user.k" "$(getfattr --only-values -n user.k "$M/by0" 2>/dev/null)" v
    ;;
  *) ko "mode" "unknown mode $mode" ;;
esac
echo "translate: $pass passed, $fail failed"
exit "$fail"
