#!/usr/bin/env bash
# The Debian packages on this machine, installed and purged again (as root; .ci/run calls it):
#   1. contrib/debian/build.sh builds vhostfs and vhostfs-as-virtiofsd; lintian: no error and no
#      warning; the files, the version of the changelog.
#   2. dpkg -i vhostfs: the installed /usr/bin/vhostfs serves the test guest
#      (tests/installed_package.rs), man page, completions, units and the QEMU JSON in place.
#   3. vhostfs-as-virtiofsd with a stand-in for Debian's virtiofsd package (a package named
#      virtiofsd shipping /usr/libexec/virtiofsd) installed before, upgraded while diverted, and
#      installed after: /usr/libexec/virtiofsd is vhostfs (--version, and it serves the test
#      guest), virtiofsd's binary sits at /usr/libexec/virtiofsd.distrib; removing
#      vhostfs-as-virtiofsd gives the path back.
#   4. dpkg -P: no file left, no diversion, nothing for dpkg -S.
# Leaves the machine as it found it, on failure too: files that the packages would overwrite
# are saved and put back; it refuses to run if any of the three packages is installed.
# Run it under the heavy lock: `flock /tmp/vhostfs-heavy.lock tests/package/deb.sh`.
set -euo pipefail
cd "$(dirname "$0")/../.."
export DEBIAN_FRONTEND=noninteractive
target=${CARGO_TARGET_DIR:-target}
log() { echo "deb: $*"; }
die() { echo "deb: FAIL: $*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || die "must run as root (dpkg -i)"
status_of() { dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null || true; }
installed() { [ "$(status_of "$1")" = installed ]; }
absent() { [ ! -e "$1" ] && [ ! -L "$1" ]; }
known() { local s; s=$(status_of "$1"); [ -n "$s" ] && [ "$s" != not-installed ]; }
for p in vhostfs vhostfs-as-virtiofsd virtiofsd; do
  if known "$p"; then
    die "package $p is on this machine (dpkg -l $p); the test would replace it: remove it first"
  fi
done
if dpkg-divert --list | grep -q 'virtiofsd'; then
  die "a diversion of virtiofsd exists (dpkg-divert --list): the test would remove it"
fi

start=$(date +%s)
local_diversion=0
work=$(mktemp -d /tmp/vhostfs-deb.XXXXXX)
saved=$work/saved
mkdir -p "$saved"
cleanup() {
  status=$?
  set +e
  for p in vhostfs-as-virtiofsd virtiofsd vhostfs; do
    if known "$p"; then dpkg -P "$p" >/dev/null 2>&1; fi
  done
  if [ "$local_diversion" = 1 ]; then
    dpkg-divert --local --no-rename --remove /usr/libexec/virtiofsd >/dev/null
  fi
  if [ "$(dpkg-divert --listpackage /usr/libexec/virtiofsd)" = vhostfs-as-virtiofsd ]; then
    dpkg-divert --package vhostfs-as-virtiofsd --remove --rename \
      --divert /usr/libexec/virtiofsd.distrib /usr/libexec/virtiofsd >/dev/null
  fi
  # Put back what was there before (a contrib/install.sh install, another test's JSON).
  (cd "$saved" && find . -type f -o -type l) | while read -r f; do
    mkdir -p "$(dirname "/${f#./}")" && mv -f "$saved/${f#./}" "/${f#./}"
  done
  rm -rf "$work"
  log "cleaned up ($(( $(date +%s) - start )) s)"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# 1. Build and lint.
t=$(date +%s)
contrib/debian/build.sh >"$work/build.log" 2>&1 || { cat "$work/build.log"; die "build"; }
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
deb=$target/debian/vhostfs_${version}-1_amd64.deb
as_deb=$target/debian/vhostfs-as-virtiofsd_${version}-1_amd64.deb
{ [ -f "$deb" ] && [ -f "$as_deb" ]; } || die "no $deb or $as_deb"
log "built $(basename "$deb") and $(basename "$as_deb") in $(( $(date +%s) - t )) s"
if ! out=$(lintian --fail-on error,warning --display-info "$deb" "$as_deb" 2>&1); then
  echo "$out"
  die "lintian: errors or warnings"
fi
echo "$out" | grep -v 'running with root' || true
log "lintian: no errors, no warnings"
changelog_version=$(head -1 contrib/debian/changelog | sed -n 's/^vhostfs (\([^)]*\)).*/\1/p')
[ "$changelog_version" = "${version}-1" ] \
  || die "contrib/debian/changelog is at $changelog_version, the package at ${version}-1"

# Save what the packages (and the stand-in) would overwrite at paths they ship.
files=$work/files
for d in "$deb" "$as_deb"; do dpkg-deb -c "$d"; done |
  awk '$1 !~ /^d/ { sub(/^\./, "", $6); print $6 }' | sort -u >"$files"
echo /usr/libexec/virtiofsd.distrib >>"$files"
while read -r f; do
  if [ -e "$f" ] || [ -L "$f" ]; then
    mkdir -p "$saved$(dirname "$f")" && mv "$f" "$saved$f"
    log "saved the existing $f (put back at the end)"
  fi
done <"$files"

for f in /usr/bin/vhostfs /usr/share/man/man1/vhostfs.1.gz \
  /usr/share/bash-completion/completions/vhostfs /usr/share/zsh/vendor-completions/_vhostfs \
  /usr/share/fish/vendor_completions.d/vhostfs.fish /usr/lib/systemd/system/vhostfs@.service \
  /usr/lib/systemd/system/vhostfs@.socket /usr/share/qemu/vhost-user/50-vhostfs.json \
  /usr/share/doc/vhostfs/copyright /usr/share/doc/vhostfs/changelog.Debian.gz; do
  grep -qx "$f" "$files" || die "$(basename "$deb") lacks $f"
done

# 2. Install; the installed binary serves the test guest.
dpkg -i "$deb" >/dev/null
installed vhostfs || die "dpkg -i $deb"
[ "$(/usr/bin/vhostfs --version)" = "vhostfs $version" ] || die "/usr/bin/vhostfs --version"
zcat /usr/share/man/man1/vhostfs.1.gz | grep -q '^\.TH vhostfs 1' || die "man page"
grep -q '"binary": "/usr/bin/vhostfs"' /usr/share/qemu/vhost-user/50-vhostfs.json || die "JSON"
grep -q '^ExecStart=/usr/bin/vhostfs ' /usr/lib/systemd/system/vhostfs@.service || die "unit"
guest_session() {
  VHOSTFS_INSTALLED=$1 cargo test --locked -q --test installed_package -- --ignored \
    >"$work/guest.log" 2>&1 || { cat "$work/guest.log"; die "test guest against $1"; }
  grep -q '^test result: ok. 1 passed' "$work/guest.log" || { cat "$work/guest.log"; die "no test ran"; }
  log "the test guest mounted the share of $1"
}
guest_session /usr/bin/vhostfs

# 3. vhostfs as /usr/libexec/virtiofsd, with and without Debian's virtiofsd.
stub=$work/stub
mkdir -p "$stub/DEBIAN" "$stub/usr/libexec"
cat >"$stub/DEBIAN/control" <<EOF
Package: virtiofsd
Version: 0.0.0~vhostfs.test
Architecture: all
Maintainer: vhostfs tests <tests@invalid>
Description: stand-in for Debian's virtiofsd (tests/package/deb.sh)
EOF
printf '#!/bin/sh\necho "virtiofsd stand-in"\n' >"$stub/usr/libexec/virtiofsd"
chmod 0755 "$stub/usr/libexec/virtiofsd"
dpkg-deb --root-owner-group -b "$stub" "$work/virtiofsd.deb" >/dev/null

expect_libexec() { # WHAT: "vhostfs" or "stand-in"; then whether .distrib holds the stand-in
  local got
  got=$(/usr/libexec/virtiofsd --version 2>&1) || die "/usr/libexec/virtiofsd --version: $got"
  case $1 in
    vhostfs) [ "$got" = "vhostfs $version" ] || die "/usr/libexec/virtiofsd is \"$got\", not vhostfs" ;;
    stand-in) [ "$got" = "virtiofsd stand-in" ] || die "/usr/libexec/virtiofsd is \"$got\", not virtiofsd" ;;
  esac
  if [ "$2" = distrib ]; then
    [ "$(/usr/libexec/virtiofsd.distrib)" = "virtiofsd stand-in" ] || die "no virtiofsd.distrib"
    # dpkg names a diverted file by its packaged path: both packages own /usr/libexec/virtiofsd.
    dpkg -S /usr/libexec/virtiofsd | grep -Eqx \
      '(virtiofsd, vhostfs-as-virtiofsd|vhostfs-as-virtiofsd, virtiofsd): /usr/libexec/virtiofsd' \
      || die "dpkg -S /usr/libexec/virtiofsd: $(dpkg -S /usr/libexec/virtiofsd 2>&1)"
  else
    [ ! -e /usr/libexec/virtiofsd.distrib ] || die "/usr/libexec/virtiofsd.distrib left over"
  fi
  log "/usr/libexec/virtiofsd --version: $got${2:+ (virtiofsd at .distrib)}"
}
diverted() { dpkg-divert --list /usr/libexec/virtiofsd | grep -q 'by vhostfs-as-virtiofsd'; }

log "virtiofsd installed first"
dpkg -i "$work/virtiofsd.deb" >/dev/null
expect_libexec stand-in ""
dpkg -i "$as_deb" >/dev/null
diverted || die "no diversion after dpkg -i vhostfs-as-virtiofsd"
[ "$(dpkg-divert --truename /usr/libexec/virtiofsd)" = /usr/libexec/virtiofsd.distrib ] \
  || die "dpkg-divert --truename"
expect_libexec vhostfs distrib
guest_session /usr/libexec/virtiofsd
dpkg -i "$work/virtiofsd.deb" >/dev/null # an upgrade of virtiofsd while diverted
expect_libexec vhostfs distrib
dpkg -r vhostfs-as-virtiofsd >/dev/null
! diverted || die "diversion left after dpkg -r vhostfs-as-virtiofsd"
expect_libexec stand-in ""
dpkg -P virtiofsd >/dev/null

log "virtiofsd installed later"
dpkg -i "$as_deb" >/dev/null
expect_libexec vhostfs ""
dpkg -i "$work/virtiofsd.deb" >/dev/null
expect_libexec vhostfs distrib
dpkg -P vhostfs-as-virtiofsd >/dev/null
! diverted || die "diversion left after dpkg -P vhostfs-as-virtiofsd"
expect_libexec stand-in ""
dpkg -P virtiofsd >/dev/null

log "a local diversion of /usr/libexec/virtiofsd is there: the install stops, nothing changes"
dpkg-divert --local --no-rename --divert /usr/libexec/virtiofsd.distrib --add /usr/libexec/virtiofsd \
  >/dev/null
local_diversion=1
if dpkg -i "$as_deb" >"$work/clash.log" 2>&1; then die "dpkg -i succeeded over a local diversion"; fi
grep -q 'clashes with .local diversion' "$work/clash.log" || { cat "$work/clash.log"; die "no clash"; }
! known vhostfs-as-virtiofsd || die "vhostfs-as-virtiofsd left in state $(status_of vhostfs-as-virtiofsd)"
[ "$(dpkg-divert --listpackage /usr/libexec/virtiofsd)" = LOCAL ] || die "the local diversion went"
dpkg-divert --local --no-rename --remove /usr/libexec/virtiofsd >/dev/null
local_diversion=0

log "vhostfs-as-virtiofsd alone, purged"
dpkg -i "$as_deb" >/dev/null
expect_libexec vhostfs ""
dpkg -P vhostfs-as-virtiofsd >/dev/null
absent /usr/libexec/virtiofsd || die "/usr/libexec/virtiofsd left"
! diverted || die "diversion left"

# 4. Purge: nothing left.
dpkg -P vhostfs >/dev/null
for p in vhostfs vhostfs-as-virtiofsd virtiofsd; do
  ! known "$p" || die "package $p still known to dpkg"
done
while read -r f; do
  absent "$f" || die "$f left after purge"
  ! dpkg -S "$f" >/dev/null 2>&1 || die "dpkg -S $f: $(dpkg -S "$f" 2>&1)"
done <"$files"
for d in /usr/share/doc/vhostfs /usr/share/doc/vhostfs-as-virtiofsd; do
  [ ! -e "$d" ] || die "$d left after purge"
done
! dpkg-divert --list | grep -q virtiofsd || die "dpkg-divert --list: $(dpkg-divert --list | grep virtiofsd)"
log "purged: no files, no diversion, dpkg -S finds nothing"
log "PASS in $(( $(date +%s) - start )) s"
