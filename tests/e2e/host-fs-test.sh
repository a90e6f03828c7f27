#!/usr/bin/env bash
# Host side of the e2e file-system test (pairs with guest-fs-test.sh).
#
#   tests/e2e/host-fs-test.sh prepare SHARED_DIR   # before boot: seed files + the big directory
#   tests/e2e/host-fs-test.sh verify  SHARED_DIR   # after the guest exited: check what it left
#
# E2E_MANY: number of files in host/many (default 20000). verify prints "PASS:/FAIL: host: ..."
# lines and exits with the number of failed checks.
set -euo pipefail

cmd=${1:?usage: $0 prepare|verify SHARED_DIR}
D=${2:?usage: $0 prepare|verify SHARED_DIR}
many=${E2E_MANY:-20000}

prepare() {
  if [ -e "$D/host" ] || [ -e "$D/guest" ]; then
    echo "host-fs-test: $D is not fresh (host/ or guest/ exists)" >&2
    exit 1
  fi
  mkdir -p "$D/host/many"
  head -c $((2 * 1024 * 1024 + 123)) /dev/urandom > "$D/host/seed.bin"
  md5sum "$D/host/seed.bin" | cut -d' ' -f1 > "$D/host/seed.md5"
  echo "delete me" > "$D/host/victim.txt"
  (cd "$D/host/many" && seq -f 'f%05g' 1 "$many" | xargs touch)
  echo "$many" > "$D/host/many.count"
}

fails=0
ok() { echo "PASS: host: $1"; }
ko() { fails=$((fails + 1)); echo "FAIL: host: $1${2:+ ($2)}"; }
expect() { if [ "$2" = "$3" ]; then ok "$1"; else ko "$1" "got '$2', want '$3'"; fi; }
absent() { if [ -e "$D/$1" ] || [ -L "$D/$1" ]; then ko "$1 absent" "still exists"; else ok "$1 absent"; fi; }
# attrs PATH: "type mode uid:gid size nlink"
attrs() { stat -c '%F %a %u:%g %s %h' "$D/$1" 2>&1 || true; }

verify() {
  local W=guest
  if [ ! -d "$D/$W" ]; then
    ko "guest dir $W exists" "the guest test did not run"
    return
  fi
  expect "listing of $W" "$(find "$D/$W" -mindepth 1 -maxdepth 1 -printf '%f\n' | LC_ALL=C sort | tr '\n' ' ')" \
    "big.bin big.bin.md5 dangling grow.bin hardlink.txt mode.txt modedir owned.txt renamed.txt replaced.txt sub symlink trunc.bin "
  expect "renamed.txt content" "$(cat "$D/$W/renamed.txt" 2>&1)" "hello
more"
  expect "renamed.txt attrs" "$(attrs $W/renamed.txt)" "regular file 644 0:0 11 2"
  expect "hardlink.txt same inode" "$(stat -c %i "$D/$W/hardlink.txt" 2>&1)" "$(stat -c %i "$D/$W/renamed.txt" 2>&1)"
  expect "symlink target" "$(readlink "$D/$W/symlink" 2>&1)" renamed.txt
  expect "dangling symlink target" "$(readlink "$D/$W/dangling" 2>&1)" does-not-exist
  expect "sub/a/moved.txt content" "$(cat "$D/$W/sub/a/moved.txt" 2>&1)" moving
  expect "replaced.txt content" "$(cat "$D/$W/replaced.txt" 2>&1)" new
  expect "mode.txt attrs (chmod 0640)" "$(attrs $W/mode.txt)" "regular file 640 0:0 5 1"
  expect "modedir attrs (chmod 0750)" "$(stat -c '%F %a %u:%g' "$D/$W/modedir" 2>&1)" "directory 750 0:0"
  expect "owned.txt attrs (chown 1000:1000)" "$(attrs $W/owned.txt)" "regular file 644 1000:1000 6 1"
  expect "owned.txt content" "$(cat "$D/$W/owned.txt" 2>&1)" owned
  expect "trunc.bin size" "$(stat -c %s "$D/$W/trunc.bin" 2>&1)" 12345
  expect "grow.bin size" "$(stat -c %s "$D/$W/grow.bin" 2>&1)" 1000000
  expect "grow.bin head" "$(head -c 2 "$D/$W/grow.bin" | od -An -tx1 | tr -d ' \n')" 780a
  expect "big.bin md5 matches the guest's" "$(md5sum < "$D/$W/big.bin" | cut -d' ' -f1)" "$(cat "$D/$W/big.bin.md5" 2>&1)"
  absent $W/created.txt
  absent $W/replacement.txt
  absent $W/gone.txt
  absent $W/tree
  absent $W/emptydir
  absent $W/link3
  absent host/victim.txt
  expect "host/many file count" "$(find "$D/host/many" -mindepth 1 | wc -l)" "$many"
  expect "seed.bin unchanged" "$(md5sum < "$D/host/seed.bin" | cut -d' ' -f1)" "$(cat "$D/host/seed.md5")"
  echo "== host verify: $fails failed =="
}

case "$cmd" in
  prepare) prepare ;;
  verify) verify; exit "$fails" ;;
  *) echo "usage: $0 prepare|verify SHARED_DIR" >&2; exit 2 ;;
esac
