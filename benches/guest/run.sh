#!/usr/bin/env bash
# In-guest benchmark of vhostfs against virtiofsd 1.14 (QEMU, TCG: compare ratios, not absolutes).
#
#   benches/guest/run.sh [--rounds N] [--runtime SECS] [--size SIZE] [--files N]
#                        [--markdown FILE] [--log-dir DIR] [--no-seed-checks]
#
# Each round boots the guest (2 vCPUs) three times, in this order: vhostfs with 1 request queue,
# virtiofsd 1.14 (1 queue: more fails QEMU's device init), vhostfs with 2 request queues. In the
# guest, guest-bench.sh runs fio (seq write and seq read with 1 MiB blocks, 4 KiB random read at
# iodepth 16 with io_uring; --direct=1, each RUNTIME seconds on a SIZE file) and a metadata job
# (create FILES files of 4 KiB, stat all, `ls -l`, unlink all; guest clock). The table gives
# the median over the rounds and, per vhostfs configuration, its ratio to virtiofsd as a speed-up:
# > 1 means vhostfs is faster (throughput vhostfs/virtiofsd, times virtiofsd/vhostfs).
# Then seed-checks.sh runs (unless --no-seed-checks).
#
# Options: --rounds (default 2), --runtime (10), --size (256M), --files (10000), --markdown FILE
# (also write the table there), --log-dir DIR (keep each boot's console/daemon logs; default: a
# temp dir, deleted unless something failed).
# Environment: VHOSTFS (default: target/release/vhostfs), VIRTIOFSD (default: virtiofsd in PATH
# or ~/.cargo/bin), FIO (default: fio in PATH), plus run-guest.sh's (VHOSTFS_GUEST_DIR, QEMU...).
# Both daemons run with their defaults (virtiofsd also gets --sandbox=none). Run as root.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
rounds=2 runtime=10 size=256M files=10000 markdown='' logroot='' seed=1
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --runtime) runtime=$2; shift 2 ;;
    --size) size=$2; shift 2 ;;
    --files) files=$2; shift 2 ;;
    --markdown) markdown=$2; shift 2 ;;
    --log-dir) logroot=$2; shift 2 ;;
    --no-seed-checks) seed=0; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "run.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

log() { echo "bench: $*" >&2; }
vhostfs=${VHOSTFS:-$repo/target/release/vhostfs}
virtiofsd=${VIRTIOFSD:-$(command -v virtiofsd || echo "$HOME/.cargo/bin/virtiofsd")}
fio=${FIO:-$(command -v fio || true)}
[ -x "$vhostfs" ] || { log "no $vhostfs (cargo build --release, or set VHOSTFS)"; exit 2; }
[ -x "$virtiofsd" ] || { log "no virtiofsd (set VIRTIOFSD)"; exit 2; }
[ -n "$fio" ] || { log "no fio on the host (apt-get install -y fio)"; exit 2; }
command -v python3 >/dev/null || { log "python3 is needed for the table"; exit 2; }

work=$(mktemp -d "${TMPDIR:-/tmp}/vhostfs-bench.XXXXXX")
keep=${logroot:+1}
[ -n "$logroot" ] || logroot=$work/logs
rg_pid=''
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

t0=$EPOCHSECONDS
initramfs=$work/initramfs-fio.cpio.zst
"$repo/tests/e2e/mkinitramfs.sh" --extra-bin "$fio" --compress zstd "$initramfs" >&2
results=$work/results.tsv
: > "$results"

# boot NAME ROUND QUEUES DAEMON_CMD...: one guest run; appends its BENCH-RESULT lines to $results.
boot() {
  local name=$1 round=$2 queues=$3; shift 3
  local shared=$work/shared-$name-$round logs=$logroot/$name-$round rc=0
  mkdir -p "$shared" "$logs"
  cp "$here/guest-bench.sh" "$shared/bench.sh"
  printf 'RUNTIME=%s\nSIZE=%s\nFILES=%s\n' "$runtime" "$size" "$files" > "$shared/bench.env"
  log "round $round: $name ($queues request queue(s)): $*"
  # In the background + wait, so that the INT/TERM trap can stop it at once.
  E2E_QUEUES=$queues E2E_SHOW_LOGS=1 "$repo/tests/e2e/run-guest.sh" --initramfs "$initramfs" \
    --shared-dir "$shared" --log-dir "$logs" --timeout 600 --append e2e.script=/mnt/bench.sh \
    -- "$@" > "$logs/run-guest.out" 2>&1 &
  rg_pid=$!
  wait "$rg_pid" || rc=$?
  rg_pid=''
  rm -rf "$shared"
  tr -d '\r' < "$logs/console.log" | grep -E '^(FAIL:|== guest bench)' >&2 || true
  if [ "$rc" -ne 0 ]; then
    tail -n 30 "$logs/run-guest.out" >&2
    log "$name round $round failed (run-guest.sh status $rc)"
    exit 1
  fi
  tr -d '\r' < "$logs/console.log" | awk -v c="$name" -v r="$round" \
    '$1 == "BENCH-RESULT" { print c "\t" r "\t" $2 "\t" $3 "\t" $4 }' | tee -a "$results" >&2
}

for round in $(seq "$rounds"); do
  boot vhostfs-1q "$round" 1 "$vhostfs"
  boot virtiofsd "$round" 1 "$virtiofsd"
  boot vhostfs-2q "$round" 2 "$vhostfs"
done

python3 - "$results" "$markdown" "$rounds" <<'PY'
import statistics, sys
path, md, rounds = sys.argv[1], sys.argv[2], sys.argv[3]
vals, units, order = {}, {}, []
for line in open(path):
    cfg, _rnd, name, value, unit = line.rstrip("\n").split("\t")
    vals.setdefault((name, cfg), []).append(float(value))
    units[name] = unit
    if name not in order:
        order.append(name)
cfgs = ["vhostfs-1q", "vhostfs-2q", "virtiofsd"]
head = ["workload", "unit", "vhostfs 1q", "vhostfs 2q", "virtiofsd", "ratio 1q", "ratio 2q"]
rows = []
for name in order:
    med = {c: statistics.median(vals[(name, c)]) for c in cfgs if (name, c) in vals}
    ref = med.get("virtiofsd")
    def ratio(c):
        if ref is None or c not in med or not med[c] or not ref:
            return "-"
        r = med[c] / ref if units[name] != "s" else ref / med[c]
        return f"{r:.2f}"
    fmt = (lambda v: f"{v:.2f}") if units[name] == "s" else (lambda v: f"{v:.1f}" if v < 1000 else f"{v:.0f}")
    rows.append([name, units[name]] + [fmt(med[c]) if c in med else "-" for c in cfgs]
                + [ratio("vhostfs-1q"), ratio("vhostfs-2q")])
widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
print()
print(f"median of {rounds} round(s); ratio = speed-up of vhostfs over virtiofsd (> 1: vhostfs faster)")
for r in [head] + rows:
    print("  ".join(str(x).ljust(w) for x, w in zip(r, widths)))
if md:
    with open(md, "w") as f:
        f.write("| " + " | ".join(head) + " |\n|" + "---|" * len(head) + "\n")
        for r in rows:
            f.write("| " + " | ".join(r) + " |\n")
PY
[ -z "$markdown" ] || log "markdown table written to $markdown"
log "benchmark took $((EPOCHSECONDS - t0)) s"
if [ "$seed" = 1 ]; then
  VHOSTFS=$vhostfs "$here/seed-checks.sh" --files "$files"
fi
