#!/usr/bin/env bash
# In-guest benchmark of vhostfs against virtiofsd 1.14 (QEMU, TCG: compare ratios, not absolutes).
#
#   benches/guest/run.sh [--rounds N] [--files N] [--jobs "JOB..."] [--kernel 6.12|6.1]
#                        [--runtime SECS] [--size SIZE] [--results FILE] [--markdown FILE]
#                        [--log-dir DIR] [--no-seed-checks]
#
# Each round boots the guest (2 vCPUs) three times: vhostfs with 1 request queue, virtiofsd 1.14
# (1 queue: more fails QEMU's device init), vhostfs with 2 request queues; odd rounds in this
# order, even rounds in the reverse one. In the guest, guest-bench.sh runs the jobs (default
# "seqread meta": fio 1 MiB sequential psync read of a SIZE file through the page cache, then
# the metadata jobs on FILES files: create, stat after drop_caches, stat again,
# `find . -type f | xargs stat` after drop_caches, `ls -l`, readdir, unlink; guest clock).
# The table gives the median over the rounds and, per vhostfs configuration, the ratio of
# medians as a speed-up, > 1 meaning vhostfs is faster (throughput vhostfs/virtiofsd, times
# virtiofsd/vhostfs), with the lowest and highest ratio of single rounds in parentheses.
# Then seed-checks.sh runs (unless --no-seed-checks).
#
# Options: --rounds (default 5), --files (10000), --jobs (see guest-bench.sh; default
# "seqread meta"), --kernel (guest kernel: 6.12, the e2e guest of target/guest, default; or 6.1,
# bookworm's cloud kernel of target/guest-6.1, whose virtio and FUSE drivers are modules: .ci/setup
# unpacks both), --runtime (10, time-based fio jobs), --size (256M), --results FILE (append each
# boot's results to FILE and make the table from all of FILE, so that a long run can be split
# into several invocations: rounds continue from the last one in FILE), --markdown FILE (also
# write the table there), --log-dir DIR (keep each boot's console/daemon logs; default: a temp
# dir, deleted unless something failed).
# Environment: VHOSTFS (default: target/release/vhostfs), VIRTIOFSD (default: virtiofsd in PATH
# or ~/.cargo/bin), FIO (default: fio in PATH), VHOSTFS_EXTRA (extra vhostfs options), plus
# run-guest.sh's (QEMU...). Both daemons run with their defaults (virtiofsd also gets
# --sandbox=none). Run as root.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
rounds=5 runtime=10 size=256M files=10000 markdown='' logroot='' seed=1
jobs='seqread meta' kernel=6.12 results=''
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --kernel) kernel=$2; shift 2 ;;
    --results) results=$2; shift 2 ;;
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
modules=()
case "$kernel" in
  6.12) guest_dir=${VHOSTFS_GUEST_DIR:-$repo/target/guest} ;;
  6.1)
    guest_dir=$repo/target/guest-6.1
    # Load order: the virtio ring and core, the PCI transport, FUSE, virtio-fs.
    for m in virtio_ring virtio virtio_pci_legacy_dev virtio_pci_modern_dev virtio_pci fuse virtiofs; do
      ko=$(find "$guest_dir/lib/modules/" -name "$m.ko" 2>/dev/null | head -n1)
      [ -n "$ko" ] || { log "no $m.ko under $guest_dir/lib/modules (run .ci/setup)"; exit 2; }
      modules+=(--module "$ko")
    done ;;
  *) log "--kernel 6.12 or 6.1, not $kernel"; exit 2 ;;
esac
# shellcheck disable=SC2206 # word splitting of $VHOSTFS_EXTRA is the interface
vhostfs_cmd=("$vhostfs" ${VHOSTFS_EXTRA:-})

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
"$repo/tests/e2e/mkinitramfs.sh" --extra-bin "$fio" "${modules[@]}" --compress zstd "$initramfs" >&2
[ -n "$results" ] || results=$work/results.tsv
touch "$results"
# Rounds continue from the last one already in the results file.
first=$(awk -F'\t' '$2 > m { m = $2 } END { print m + 0 }' "$results")

# boot NAME ROUND QUEUES DAEMON_CMD...: one guest run; appends its BENCH-RESULT lines to $results.
boot() {
  local name=$1 round=$2 queues=$3; shift 3
  local shared=$work/shared-$name-$round logs=$logroot/$name-$round rc=0
  mkdir -p "$shared" "$logs"
  cp "$here/guest-bench.sh" "$shared/bench.sh"
  printf 'RUNTIME=%s\nSIZE=%s\nFILES=%s\nJOBS="%s"\n' "$runtime" "$size" "$files" "$jobs" > "$shared/bench.env"
  log "round $round: $name ($queues request queue(s)): $*"
  # In the background + wait, so that the INT/TERM trap can stop it at once.
  VHOSTFS_GUEST_DIR=$guest_dir E2E_QUEUES=$queues E2E_SHOW_LOGS=1 "$repo/tests/e2e/run-guest.sh" --initramfs "$initramfs" \
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

for round in $(seq $((first + 1)) $((first + rounds))); do
  if [ $((round % 2)) = 1 ]; then
    boot vhostfs-1q "$round" 1 "${vhostfs_cmd[@]}"
    boot virtiofsd "$round" 1 "$virtiofsd"
    boot vhostfs-2q "$round" 2 "${vhostfs_cmd[@]}"
  else
    boot vhostfs-2q "$round" 2 "${vhostfs_cmd[@]}"
    boot virtiofsd "$round" 1 "$virtiofsd"
    boot vhostfs-1q "$round" 1 "${vhostfs_cmd[@]}"
  fi
done

python3 - "$results" "$markdown" <<'PY'
import statistics, sys
path, md = sys.argv[1], sys.argv[2]
vals, units, order, rounds = {}, {}, [], set()
for line in open(path):
    cfg, rnd, name, value, unit = line.rstrip("\n").split("\t")
    vals.setdefault((name, cfg), {})[int(rnd)] = float(value)
    units[name] = unit
    rounds.add(int(rnd))
    if name not in order:
        order.append(name)
cfgs = ["vhostfs-1q", "vhostfs-2q", "virtiofsd"]
head = ["job", "unit", "vhostfs 1q", "vhostfs 2q", "virtiofsd", "ratio 1q (rounds)", "ratio 2q (rounds)"]

def speedup(name, a, b):
    return a / b if units[name] != "s" else b / a

rows = []
for name in order:
    med = {c: statistics.median(vals[(name, c)].values()) for c in cfgs if (name, c) in vals}
    def ratio(c):
        ref = vals.get((name, "virtiofsd"), {})
        mine = vals.get((name, c), {})
        if not ref or not mine or not all(mine.values()) or not all(ref.values()):
            return "-"
        singles = [speedup(name, mine[r], ref[r]) for r in mine if r in ref]
        r = speedup(name, med[c], med["virtiofsd"])
        return f"{r:.2f} ({min(singles):.2f}–{max(singles):.2f})"
    fmt = (lambda v: f"{v:.2f}") if units[name] == "s" else (lambda v: f"{v:.1f}" if v < 1000 else f"{v:.0f}")
    rows.append([name, units[name]] + [fmt(med[c]) if c in med else "-" for c in cfgs]
                + [ratio("vhostfs-1q"), ratio("vhostfs-2q")])
widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
print()
print(f"median of {len(rounds)} round(s); ratio of medians = speed-up of vhostfs over virtiofsd "
      "(> 1: vhostfs faster), lowest–highest single round in parentheses")
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
