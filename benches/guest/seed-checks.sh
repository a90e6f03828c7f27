#!/usr/bin/env bash
# The seeds' lessons, as checks against vhostfs in a TCG guest. Each prints PASS/FAIL with numbers.
#
#   benches/guest/seed-checks.sh [--files N] [--tries N] [--log-dir DIR]
#
# 1. write-size: `dd if=/dev/zero of=/mnt/f bs=128k count=8 conv=fsync` in the guest reaches the
#    daemon as 8 WRITEs of 131072 bytes (max_write 1 MiB / max_pages 256 negotiated), not 256 of
#    4 KiB. Counted from the stats vhostfs logs at exit with --log-level=debug.
# 2. no-reopen-on-read (modes prefer and never): a sequential read of a 64 MiB file with 1 MiB blocks
#    after drop_caches makes no openat/open_by_handle_at in the daemon after the first OPEN. The
#    daemon runs under `strace -f -c -e trace=openat,open_by_handle_at`; a 1-block read and the
#    64-block read (same script otherwise) may differ only by boot-to-boot noise (≤ 8 opens of
#    each kind, against ~450 more READs), and READ must be >= 64.
# 3. handles-cost: creating N (default 10,000) 4 KiB files with --inode-file-handles=prefer costs
#    < 5 % more than with never. Boots alternate prefer/never, TRIES times each (default 3);
#    the best (lowest) guest-timed create of each mode is compared.
# Environment: VHOSTFS (default: target/release/vhostfs); run-guest.sh's variables. Run as root.
# Exit status: the number of failed checks.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
files=10000 tries=3 logroot=''
while [ $# -gt 0 ]; do
  case "$1" in
    --files) files=$2; shift 2 ;;
    --tries) tries=$2; shift 2 ;;
    --log-dir) logroot=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "seed-checks: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
log() { echo "seed-checks: $*" >&2; }
vhostfs=${VHOSTFS:-$repo/target/release/vhostfs}
[ -x "$vhostfs" ] || { log "no $vhostfs (cargo build --release, or set VHOSTFS)"; exit 2; }
command -v strace >/dev/null || { log "strace missing (apt-get install -y strace)"; exit 2; }

work=$(mktemp -d "${TMPDIR:-/tmp}/vhostfs-seed.XXXXXX")
keep=${logroot:+1}
[ -n "$logroot" ] || logroot=$work/logs
failed=0 rg_pid=''
# shellcheck disable=SC2317 # invoked from the traps
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [ -n "$rg_pid" ]; then kill -TERM "$rg_pid" 2>/dev/null || true; wait "$rg_pid" 2>/dev/null || true; fi
  if [ "$rc" -ne 0 ] && [ -z "$keep" ]; then
    mv "$logroot" "${work}-logs" 2>/dev/null && log "logs kept in ${work}-logs"
  fi
  rm -rf "$work"
  exit "$rc"
}
trap cleanup EXIT
trap 'log interrupted; exit 130' INT TERM

initramfs=$work/initramfs.cpio.gz
"$repo/tests/e2e/mkinitramfs.sh" "$initramfs" >&2

verdict() { # NAME OK(0/1) DETAILS
  if [ "$2" = 1 ]; then echo "PASS: $1 ($3)"; else echo "FAIL: $1 ($3)"; failed=$((failed + 1)); fi
}

# boot NAME SHARED SCRIPT DAEMON_CMD...: runs SCRIPT (a file in SHARED) in the guest; logs in
# $logroot/NAME. Exits on a harness or daemon error.
boot() {
  local name=$1 shared=$2 script=$3; shift 3
  local logs=$logroot/$name rc=0
  mkdir -p "$logs"
  E2E_SHOW_LOGS=1 "$repo/tests/e2e/run-guest.sh" --initramfs "$initramfs" --shared-dir "$shared" \
    --log-dir "$logs" --timeout 600 --append "e2e.script=/mnt/$script" -- "$@" \
    > "$logs/run-guest.out" 2>&1 &
  rg_pid=$!
  wait "$rg_pid" || rc=$?
  rg_pid=''
  if [ "$rc" -ne 0 ]; then
    tail -n 30 "$logs/run-guest.out" >&2
    log "$name: run-guest.sh failed with status $rc"
    exit 1
  fi
}
# stat_of NAME OPCODE FIELD: count or bytes of OPCODE in the stats vhostfs logged at exit.
stat_of() {
  grep -o "stats: $2 count=[0-9]* bytes=[0-9]*" "$logroot/$1/daemon.log" \
    | sed -n "s/.* $3=\([0-9]*\).*/\1/p" | tail -n1 | grep . || echo 0
}

# ---- 1. write size ------------------------------------------------------------------------------
s=$work/write && mkdir -p "$s"
printf 'dd if=/dev/zero of=/mnt/f bs=128k count=8 conv=fsync\n' > "$s/t.sh"
boot write-size "$s" t.sh "$vhostfs" --log-level=debug
n=$(stat_of write-size WRITE count) b=$(stat_of write-size WRITE bytes)
verdict "write-size: dd bs=128k count=8 -> 8 WRITEs of 131072 bytes" \
  "$([ "$n" = 8 ] && [ "$b" = 1048576 ] && echo 1)" \
  "WRITE count=$n bytes=$b, $([ "$n" -gt 0 ] && echo $((b / n)) || echo 0) bytes per WRITE"

# no_more_opens "openat=A open_by_handle_at=B" "openat=C open_by_handle_at=D": the 64-block
# run's opens exceed the 1-block run's by at most 8 of each. The daemon's start-up (sandbox,
# threads) and the guest's own requests make a few opens that vary by about ±6 from boot to boot,
# while a re-open per READ would add one for each of the ~450 extra READs.
no_more_opens() {
  awk -v a="$1" -v b="$2" 'BEGIN {
    split(a, x, /[ =]/); split(b, y, /[ =]/)
    exit !(y[2] <= x[2] + 8 && y[4] <= x[4] + 8) }'
}

# ---- 2. no re-open per READ -------------------------------------------------------------------------
for mode in prefer never; do
  declare -A opens=()
  for blocks in 1 64; do
    s=$work/read-$mode-$blocks && mkdir -p "$s"
    head -c $((64 * 1048576)) /dev/zero > "$s/big"
    # Same script size and shape for both runs: only the block count differs.
    printf 'sync; echo 3 > /proc/sys/vm/drop_caches\ndd if=/mnt/big of=/dev/null bs=1M count=%02d\n' \
      "$blocks" > "$s/t.sh"
    name=read-$mode-$blocks
    mkdir -p "$logroot/$name"
    boot "$name" "$s" t.sh strace -f -c -e trace=openat,open_by_handle_at -o "$logroot/$name/strace.txt" \
      "$vhostfs" --log-level=debug "--inode-file-handles=$mode"
    opens[$blocks]=$(awk '$NF == "openat" || $NF == "open_by_handle_at" { n[$NF] = $4 }
      END { printf "openat=%d open_by_handle_at=%d", n["openat"], n["open_by_handle_at"] }' \
      "$logroot/$name/strace.txt")
    reads=$(stat_of "$name" READ count) rbytes=$(stat_of "$name" READ bytes)
    rm -rf "$s"
  done
  verdict "no-reopen-on-read ($mode): a 64 MiB read adds no open per READ over a 1 MiB read" \
    "$(no_more_opens "${opens[1]}" "${opens[64]}" && [ "$reads" -ge 64 ] && echo 1)" \
    "1 block: ${opens[1]}; 64 blocks: ${opens[64]}; 64-block run: READ count=$reads bytes=$rbytes"
  unset opens
done

# ---- 3. cost of file handles on creates ----------------------------------------------------------
declare -A best=()
for try in $(seq "$tries"); do
  for mode in prefer never; do
    s=$work/create && mkdir -p "$s"
    cp "$here/guest-bench.sh" "$s/bench.sh"
    printf 'FILES=%s\nJOBS=create\n' "$files" > "$s/bench.env"
    boot "create-$mode-$try" "$s" bench.sh "$vhostfs" "--inode-file-handles=$mode"
    t=$(tr -d '\r' < "$logroot/create-$mode-$try/console.log" | awk '$1 == "BENCH-RESULT" { print $3 }')
    rm -rf "$s"
    [ -n "$t" ] || { log "create-$mode-$try: no result"; exit 1; }
    log "create $files files, $mode, try $try: $t s"
    best[$mode]=$(awk -v a="${best[$mode]:-}" -v b="$t" 'BEGIN { print (a == "" || b < a) ? b : a }')
  done
done
ratio=$(awk -v p="${best[prefer]}" -v n="${best[never]}" 'BEGIN { printf "%.3f", p / n }')
verdict "handles-cost: create $files files, prefer/never < 1.05" \
  "$(awk -v r="$ratio" 'BEGIN { if (r < 1.05) print 1 }')" \
  "best of $tries: prefer ${best[prefer]} s, never ${best[never]} s, ratio $ratio"

if [ "$failed" -eq 0 ]; then log "all checks passed"; else log "$failed check(s) FAILED"; fi
exit "$failed"
