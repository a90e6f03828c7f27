#!/usr/bin/env bash
# Host side of the e2e `translate-*` cases (guest side: guest-translate-test.sh).
#
#   translate-host.sh --make MODE DIR     prepare the share DIR for MODE (kubevirt|incus|docker)
#   translate-host.sh --verify MODE DIR   check what the guest left there
#
# --make writes DIR/translate-mode and gives the share the owner the launcher's share has (the
# mapped guest root must be able to create in it), plus host files of known owners and ACLs.
# --verify checks owners with stat and ACLs with getfacl (package acl), prints PASS:/FAIL: lines
# and exits with the number of failed checks.
set -uo pipefail
op=${1:?usage: translate-host.sh --make|--verify MODE DIR} mode=${2:?mode} dir=${3:?dir}
fail=0
ok() { echo "PASS: host: $1"; }
ko() { fail=$((fail + 1)); echo "FAIL: host: $1${2:+ ($2)}"; }
expect() { if [ "$2" = "$3" ]; then ok "$1"; else ko "$1" "got '$2', want '$3'"; fi; }
has() { if grep -Eq "$3" <<< "$2"; then ok "$1"; else ko "$1" "no line '$3' in: $(tr '\n' ' ' <<< "$2")"; fi; }
owner() { stat -c %u:%g "$1" 2>&1; }

case "$op:$mode" in
  --make:kubevirt) share_owner=107:107 ;;
  --make:incus) share_owner=1000000:1000000 ;;
  --make:docker) share_owner=1000:1000 ;;
  --verify:*) ;;
  *) echo "translate-host.sh: bad arguments $*" >&2; exit 2 ;;
esac

if [ "$op" = --make ]; then
  set -e
  echo "$mode" > "$dir/translate-mode"
  chown "$share_owner" "$dir"
  chmod 0755 "$dir"
  mkdir "$dir/pub"
  chown "$share_owner" "$dir/pub"
  chmod 1777 "$dir/pub"
  case "$mode" in
    kubevirt)
      touch "$dir/host107" "$dir/host0"
      chown 107:107 "$dir/host107" ;;
    incus)
      touch "$dir/hostfile" "$dir/acl-host"
      chown 1001000:1001000 "$dir/hostfile"
      chown 1000000:1000000 "$dir/acl-host"
      setfacl -m u:1001234:rw,g:1001235:r "$dir/acl-host" ;;
  esac
  exit 0
fi

case "$mode" in
  kubevirt)
    expect "created by guest 0" "$(owner "$dir/by0")" 0:0
    expect "created by guest 1000" "$(owner "$dir/pub/by1000")" 1000:1000
    ;;
  incus)
    expect "created by guest 0" "$(owner "$dir/by0")" 1000000:1000000
    expect "created by guest 1000" "$(owner "$dir/pub/by1000")" 1001000:1001000
    expect "mkdir by guest 0" "$(owner "$dir/dir0")" 1000000:1000000
    expect "chown 1234:1235 in the guest" "$(owner "$dir/chowned")" 1001234:1001235
    if [ -e "$dir/pub/byfar" ] || [ -e "$dir/pub/dirfar" ]; then ko "forbidden uid created nothing"; else ok "forbidden uid created nothing"; fi
    acl=$(getfacl -n -c "$dir/by0" 2>&1)
    has "getfacl: user:1001000:rwx" "$acl" '^user:1001000:rwx'
    has "getfacl: group:1001000:r-x" "$acl" '^group:1001000:r-x'
    if grep -q '70000' <<< "$acl"; then ko "no entry for the forbidden uid"; else ok "no entry for the forbidden uid"; fi
    has "getfacl: default:user:1001000:r-x" "$(getfacl -n -c "$dir/dir0" 2>&1)" '^default:user:1001000:r-x'
    has "getfacl: inherited user:1001000:r-x" "$(getfacl -n -c "$dir/dir0/child" 2>&1)" '^user:1001000:r-x'
    ;;
  docker)
    expect "created by guest 0" "$(owner "$dir/by0")" 1000:0
    expect "created by guest 1000" "$(owner "$dir/pub/by1000")" 1000:1000
    expect "created by guest 70000" "$(owner "$dir/pub/by70000")" 1000:70000
    expect "xattr under Docker's prefix" "$(getfattr --only-values -n user.docker.desktop.user.k "$dir/by0" 2>/dev/null)" v
    ;;
esac
exit "$fail"
