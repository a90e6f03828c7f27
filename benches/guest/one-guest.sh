#!/usr/bin/env bash
# The in-guest jobs with every daemon in ONE guest: one vhost-user-fs device per daemon, the
# guest alternating between them job by job (QEMU, TCG: compare ratios, not absolutes).
#
#   benches/guest/one-guest.sh [--rounds N] [--files N] [--cu-files N] [--cu-rounds N]
#                              [--jobs LIST] [--slice N] [--kernel 6.12|6.1] [--pin CPU]
#                              [--log-dir DIR] [--] NAME=CMD[@QUEUES]...
#
# run.sh boots a guest per daemon, so boot-to-boot differences and the machine's changing load
# land between the daemons; here they share the guest and run each job back to back, in a
# rotating order (job j of round r starts with daemon (j + r) mod D), so a ratio compares runs
# seconds apart (and stat and stat again, by default, slices of them: see --slice).
# Each daemon gets its own share, filled on the host with FILES files of 4 KiB (a `drop_caches`
# in the guest makes them as cold as files it created) and a 256 MiB file. Per round, each
# daemon in turn: seqread (fio 1 MiB psync through the page cache, after drop_caches), stat
# after drop_caches, stat again 1.1 s later, `find . -type f | xargs stat`, `ls -l` and a readdir
# after drop_caches. Then CU-ROUNDS times: create CU-FILES files of 4 KiB, drop_caches, unlink
# them (`rm -rf`). The last daemon is the reference: the table gives each daemon's median and
# its speed-up over the reference (ratio of medians; lowest–highest single round in parentheses).
#
# Daemons: NAME=CMD (CMD split on whitespace; `--socket-path` and `--shared-dir` are appended),
# @QUEUES the device's request queues (default 1). Default: vhostfs (target/release or $VHOSTFS)
# with 1 queue, then virtiofsd 1.14 (--sandbox=none). Options: --rounds (5), --files (10000),
# --cu-files (1000), --cu-rounds (as many as --rounds: every row of the table has as many
# rounds; it was 3; 0: none), --jobs (the per-round jobs to run, in order, of: seqread stat
# stat-again find lsl readdir; default all), --slice N (1000; stat and stat-again on all devices
# at once, N names at a time on each device in turn: the machine's drift over a job's seconds,
# which spans 0.7-1.4 between two devices run one after the other, is shared by all devices; 0:
# each device in turn, as the other jobs), --kernel (6.12; 6.1: see run.sh), --pin CPU (each
# device's jobs run on the vCPU its request interrupt is delivered to: with 1 queue, whether the
# reply's interrupt and the waiting process share a vCPU otherwise changes a one-request-at-a-time
# job by up to ~3x under TCG, at the guest scheduler's whim; a 6.1 guest's vectors are first
# moved to vCPU CPU, 6.12's are kernel-managed and stay where the kernel put them; the output
# starts with the affinities and, per vector, the interrupts each vCPU took during the jobs),
# --log-dir DIR (keep the console and daemon logs; default: a temp dir, kept only on failure).
# Run as root.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
rounds=5 files=10000 cu_files=1000 cu_rounds='' slice=1000 jobs='seqread stat stat-again find lsl readdir'
kernel=6.12 pin='' logdir='' specs=()
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --files) files=$2; shift 2 ;;
    --cu-files) cu_files=$2; shift 2 ;;
    --cu-rounds) cu_rounds=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --slice) slice=$2; shift 2 ;;
    --kernel) kernel=$2; shift 2 ;;
    --pin) pin=$2; shift 2 ;;
    --log-dir) logdir=$2; shift 2 ;;
    --) shift; specs+=("$@"); break ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "one-guest.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) specs+=("$1"); shift ;;
  esac
done
cu_rounds=${cu_rounds:-$rounds}
case "$slice" in
  ''|*[!0-9]*) echo "one-guest.sh: --slice takes a number of names (0: off), not '$slice'" >&2; exit 2 ;;
esac
for j in $jobs; do
  case "$j" in
    seqread|stat|stat-again|find|lsl|readdir) ;;
    *) echo "one-guest.sh: --jobs: no job $j (seqread stat stat-again find lsl readdir)" >&2; exit 2 ;;
  esac
done
log() { echo "one-guest: $*" >&2; }
# shellcheck source-path=SCRIPTDIR source=../../tests/e2e/lib.sh
. "$repo/tests/e2e/lib.sh"
virtiofsd=${VIRTIOFSD:-$(command -v virtiofsd || echo "$HOME/.cargo/bin/virtiofsd")}
if [ ${#specs[@]} -eq 0 ]; then
  specs=("vhostfs=${VHOSTFS:-$repo/target/release/vhostfs}" "virtiofsd=$virtiofsd --sandbox=none")
fi
fio=$(command -v fio) || { log "no fio on the host (apt-get install -y fio)"; exit 2; }
modules=()
case "$kernel" in
  6.12) guest_dir=$repo/target/guest ;;
  6.1)
    guest_dir=$repo/target/guest-6.1
    for m in virtio_ring virtio virtio_pci_legacy_dev virtio_pci_modern_dev virtio_pci fuse virtiofs; do
      ko=$(find "$guest_dir/lib/modules/" -name "$m.ko" 2>/dev/null | head -n1)
      [ -n "$ko" ] || { log "no $m.ko under $guest_dir/lib/modules (run .ci/setup)"; exit 2; }
      modules+=(--module "$ko")
    done ;;
  *) log "--kernel 6.12 or 6.1, not $kernel"; exit 2 ;;
esac
kernel_img=$(find "$guest_dir/boot/" -maxdepth 1 -name 'vmlinuz-*' 2>/dev/null | sort -V | tail -n1)
[ -n "$kernel_img" ] || { log "no guest kernel under $guest_dir/boot (run .ci/setup)"; exit 2; }

work=$(mktemp -d "${TMPDIR:-/tmp}/vhostfs-oneguest.XXXXXX")
keep=${logdir:+1}
[ -n "$logdir" ] || logdir=$work/logs
mkdir -p "$logdir"
pids=() qemu_pid=''
# shellcheck disable=SC2317 # invoked from the traps
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  [ -z "$qemu_pid" ] || kill -TERM "$qemu_pid" 2>/dev/null || true
  for p in "${pids[@]}"; do kill -TERM -- "-$p" 2>/dev/null || true; done
  sleep 0.5
  for p in "${pids[@]}"; do kill -KILL -- "-$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  if [ "$rc" -ne 0 ] && [ -z "$keep" ]; then
    mv "$logdir" "${work}-logs" 2>/dev/null && log "logs kept in ${work}-logs"
  fi
  rm -rf "$work"
  exit "$rc"
}
trap cleanup EXIT
trap 'log interrupted; exit 130' INT TERM

"$repo/tests/e2e/mkinitramfs.sh" --extra-bin "$fio" "${modules[@]}" --compress zstd \
  "$work/initramfs.cpio.zst" >&2
names=() qargs=()
head -c 256M /dev/urandom > "$work/big"
for i in "${!specs[@]}"; do
  spec=${specs[$i]} queues=1
  names+=("${spec%%=*}")
  cmd=${spec#*=}
  if [[ "$cmd" == *@* ]]; then queues=${cmd##*@}; cmd=${cmd%@*}; fi
  share=$work/share-$i
  mkdir -p "$share/m"
  python3 -c "
import sys
b = b'x' * 4096
for i in range(int(sys.argv[2])):
    with open(f'{sys.argv[1]}/f{i}', 'wb') as f: f.write(b)" "$share/m" "$files"
  cp "$work/big" "$share/big"
  # shellcheck disable=SC2206 # word splitting of CMD is the interface
  argv=($cmd)
  log "daemon $i (${names[$i]}, $queues queue(s)): ${argv[*]}"
  setsid "${argv[@]}" "--socket-path=$work/$i.sock" "--shared-dir=$share" \
    > "$logdir/daemon-$i.log" 2>&1 < /dev/null &
  pids+=($!)
  tag=share$i; [ "$i" = 0 ] && tag=share
  qargs+=(-chardev "socket,id=c$i,path=$work/$i.sock"
    -device "vhost-user-fs-pci,queue-size=1024,chardev=c$i,tag=$tag,num-request-queues=$queues")
done
rm -f "$work/big"
nd=${#specs[@]}
for i in $(seq 0 $((nd - 1))); do
  wait_for 30 socket_ready "$work/$i.sock" || {
    log "daemon $i did not create its socket (or it did not listen) within 30 s"
    tail "$logdir/daemon-$i.log" >&2; exit 1
  }
done
cp "$here/one-guest-bench.sh" "$work/share-0/bench.sh"
[ "$slice" != 0 ] || slice=''
printf 'ND=%s\nROUNDS=%s\nJOBS="%s"\nSLICE=%s\nCU=%s\nCUROUNDS=%s\nPIN=%s\n' "$nd" "$rounds" "$jobs" "$slice" \
  "$cu_files" "$cu_rounds" "$pin" \
  > "$work/share-0/bench.env"
t0=$EPOCHSECONDS
log "guest: $(basename "$kernel_img"), $nd devices, $files files each, $rounds rounds"
qemu-system-x86_64 -accel tcg -cpu max -smp 2 -m 512M \
  -object memory-backend-memfd,id=mem,size=512M,share=on -numa node,memdev=mem "${qargs[@]}" \
  -kernel "$kernel_img" -initrd "$work/initramfs.cpio.zst" \
  -append "console=ttyS0 quiet panic=-1 e2e.tag=share e2e.script=/mnt/bench.sh" \
  -nic none -nographic -no-reboot < /dev/null > "$logdir/console.log" 2> "$logdir/qemu.log" &
qemu_pid=$!
wait "$qemu_pid" || { log "qemu exited with status $?"; exit 1; }
qemu_pid=''
tr -d '\r' < "$logdir/console.log" > "$work/console.txt"
if grep -E '^FAIL' "$work/console.txt" >&2 || ! grep -q 'E2E-STATUS: PASS' "$work/console.txt"; then
  log "the guest failed"; tail -n 20 "$work/console.txt" >&2; exit 1
fi
log "guest run took $((EPOCHSECONDS - t0)) s"
grep -E '^(AFFINITY|IRQ) ' "$work/console.txt" || true
python3 - "$work/console.txt" "${names[@]}" <<'PY'
import statistics, sys
names = sys.argv[2:]
vals, order = {}, []
for line in open(sys.argv[1]):
    p = line.split()
    if len(p) != 5 or p[0] != "BENCH-RESULT":
        continue
    _, d, job, rnd, secs = p
    vals.setdefault((job, int(d)), {})[int(rnd)] = float(secs)
    if job not in order:
        order.append(job)
ref = len(names) - 1
head = ["job (s)"] + names + [f"{n} / {names[ref]}" for n in names[:ref]]
rows = []
for job in order:
    b = vals.get((job, ref), {})
    row = [job] + [f"{statistics.median(vals[(job, d)].values()):.3f}" for d in range(len(names))]
    for d in range(ref):
        a = vals[(job, d)]
        singles = [b[r] / a[r] for r in a if r in b and a[r] > 0]
        ratio = statistics.median(b.values()) / statistics.median(a.values())
        row.append(f"{ratio:.2f} ({min(singles):.2f}–{max(singles):.2f})")
    rows.append(row)
print(f"median per daemon; speed-up over {names[ref]} (ratio of medians of the times; "
      "lowest–highest single round)")
print("| " + " | ".join(head) + " |\n|" + "---|" * len(head))
for r in rows:
    print("| " + " | ".join(r) + " |")
PY
