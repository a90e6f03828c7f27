#!/bin/sh
# shellcheck disable=SC2317 # the job functions run through run()
# one-guest.sh's guest side (busybox sh + fio): device 0 is mounted on /mnt (tag share), device i
# is mounted here on /mnt$i (tag share$i); each holds m/f0..f(N-1) (4 KiB each) and big (256 MiB).
# Knobs from /mnt/bench.env: ND (devices), ROUNDS, CU (files to create and unlink), CUROUNDS,
# PIN (a vCPU number, or empty: the jobs and every request queue's interrupt on that vCPU).
# Prints "BENCH-RESULT DEVICE JOB ROUND SECONDS" per job run.
# shellcheck disable=SC1091 # written by one-guest.sh
. /mnt/bench.env
rc=0
root() { if [ "$1" = 0 ]; then echo /mnt; else echo "/mnt$1"; fi; }
for i in $(seq 1 $((ND - 1))); do
  mkdir -p "/mnt$i"
  mount -t virtiofs "share$i" "/mnt$i" || { echo "FAIL: mount share$i"; exit 1; }
done
if [ -n "${PIN:-}" ]; then
  # The same vCPU for the reply's interrupt and the process waiting for it, on every device.
  # shellcheck disable=SC2013 # IRQ numbers, one word each
  for irq in $(awk '/virtio[0-9]+-requests/ { sub(":", "", $1); print $1 }' /proc/interrupts); do
    echo "$PIN" > "/proc/irq/$irq/smp_affinity_list" || { echo "FAIL: irq $irq affinity"; exit 1; }
  done
  taskset -p -c "$PIN" $$ > /dev/null || { echo "FAIL: taskset"; exit 1; }
fi
now() { cut -d' ' -f1 /proc/uptime; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.3f", b - a }'; }
drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches; }
# shellcheck disable=SC2012 # names are plain f0..fN
ls /mnt/m > /tmp/n0
files=$(wc -l < /tmp/n0)
for i in $(seq 0 $((ND - 1))); do sed "s|^|$(root "$i")/m/|" /tmp/n0 > "/tmp/names-$i"; done

sizes_ok() { awk -v n="$files" '$1 == 4096 { ok++ } END { exit ok != n }'; }
j_seqread() { fio --name=seqread --filename="$1/big" --rw=read --bs=1M --size=256M \
  --output-format=terse > /dev/null 2>/tmp/fio.err || { cat /tmp/fio.err; false; }; }
j_stat() { xargs stat -c %s < "/tmp/names-$2" | sizes_ok; }
# shellcheck disable=SC2038 # names are plain f0..fN
j_find() { (cd "$1/m" && find . -type f | xargs stat -c %s) | sizes_ok; }
# shellcheck disable=SC2012 # `ls -l` is the workload
j_lsl() { [ "$(ls -l "$1/m" | wc -l)" -eq $((files + 1)) ]; }
j_readdir() { set -- "$1"/m/f*; [ "$#" -eq "$files" ]; }

# run DEVICE ROUND JOB [warm]: times one job on one device (after drop_caches unless "warm").
run() {
  d=$1 r=$2 job=$3
  [ "${4:-}" = warm ] || drop_caches
  t=$(now)
  "j_${job%-again}" "$(root "$d")" "$d" || { echo "FAIL: $job on device $d"; rc=1; }
  echo "BENCH-RESULT $d $job $r $(since "$t")"
}
k=0
for r in $(seq "$ROUNDS"); do
  for job in seqread stat stat-again find lsl readdir; do
    k=$((k + 1))
    for x in $(seq 0 $((ND - 1))); do
      d=$(( (x + k) % ND ))
      if [ "$job" = stat-again ]; then
        # Warm the dentries, then wait out the 1 s timeouts: every name is revalidated.
        drop_caches; j_stat "$(root "$d")" "$d"; sleep 1.1; run "$d" "$r" stat-again warm
      else
        run "$d" "$r" "$job"
      fi
    done
  done
done
blk=$(head -c 4096 /dev/zero | tr '\0' x)
for r in $(seq "$CUROUNDS"); do
  k=$((k + 1))
  for x in $(seq 0 $((ND - 1))); do
    d=$(( (x + k) % ND )) dir=$(root "$(( (x + k) % ND ))")/cu
    mkdir -p "$dir"
    drop_caches
    t=$(now)
    i=0
    while [ "$i" -lt "$CU" ]; do
      printf '%s' "$blk" > "$dir/f$i" || { echo "FAIL: create $dir/f$i"; rc=1; break; }
      i=$((i + 1))
    done
    echo "BENCH-RESULT $d create-$CU $r $(since "$t")"
    drop_caches
    t=$(now)
    rm -rf "$dir" || { echo "FAIL: rm -rf $dir"; rc=1; }
    echo "BENCH-RESULT $d unlink-$CU $r $(since "$t")"
  done
done
grep -E 'virtio[0-9]+-requests' /proc/interrupts | sed 's/^/IRQ /'
for i in $(seq 1 $((ND - 1))); do umount "/mnt$i"; done
exit "$rc"
