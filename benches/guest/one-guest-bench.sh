#!/bin/sh
# shellcheck disable=SC2317 # the job functions run through run()
# one-guest.sh's guest side (busybox sh + fio): device 0 is mounted on /mnt (tag share), device i
# is mounted here on /mnt$i (tag share$i); each holds m/f0..f(N-1) (4 KiB each) and big (256 MiB).
# Knobs from /mnt/bench.env: ND (devices), ROUNDS, JOBS (the per-round jobs, in order), CU (files
# to create and unlink), CUROUNDS, PIN (a vCPU number, or empty: each device's jobs on the vCPU of
# its request interrupt, moved to PIN where the guest allows it), SLICE (names per slice, or empty:
# stat and stat-again run on each device in turn; else they run on all devices at once, a slice of
# SLICE names on each device in turn, each device's time the sum of its slices).
# Prints "BENCH-RESULT DEVICE JOB ROUND SECONDS" per job run.
# shellcheck disable=SC1091 # written by one-guest.sh
. /mnt/bench.env
rc=0
root() { if [ "$1" = 0 ]; then echo /mnt; else echo "/mnt$1"; fi; }
for i in $(seq 1 $((ND - 1))); do
  mkdir -p "/mnt$i"
  mount -t virtiofs "share$i" "/mnt$i" || { echo "FAIL: mount share$i"; exit 1; }
done
# Seconds since boot: the monotonic clock in /proc/timer_list (nanoseconds), or /proc/uptime
# where there is none (10 ms steps: a 0.12 s readdir read 0.12 or 0.13).
now() {
  awk '/^now at/ { printf "%.6f\n", $3 / 1e9; found = 1; exit } END { exit !found }' \
    /proc/timer_list 2> /dev/null || cut -d' ' -f1 /proc/uptime
}
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.3f", b - a }'; }
drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches; }
# irqs: "IRQ COUNT-PER-VCPU... NAME" for every virtio-fs vector.
irqs() { awk 'NR == 1 { n = NF; next } /virtio[0-9]+-(requests|hiprio)/ {
  s = $1; sub(":", "", s); for (c = 2; c <= n + 1; c++) s = s " " $c; print s " " $NF }' /proc/interrupts; }
# vcpu_of D: the vCPU that device D's first request queue's interrupt is delivered to (6.1 has no
# /sys/fs/virtiofs to tell the devices apart: there, the one vCPU of all request interrupts).
vcpu_of() {
  tag=share; [ "$1" = 0 ] || tag=share$1
  want=-requests
  for t in /sys/fs/virtiofs/*/tag; do
    [ -f "$t" ] && [ "$(cat "$t")" = "$tag" ] && want="^$(basename "$(readlink "${t%/tag}/device")")-requests.0$"
  done
  for irq in $(irqs | awk -v w="$want" '$NF ~ w { print $1 }'); do
    cat "/proc/irq/$irq/effective_affinity_list"
  done | sort -u | tr '\n' ' '
}
if [ -n "${PIN:-}" ]; then
  # The reply's interrupt and the process waiting for it on the same vCPU, for every device. A
  # 6.1 guest lets the vectors be moved (all to PIN, the high-priority ones too, so that no
  # device's FORGET interrupts land elsewhere); 6.12's virtio-fs asks for kernel-managed request
  # vectors (smp_affinity cannot be written: EIO), so there each device's jobs go to its vector.
  for irq in $(irqs | awk '{ print $1 }'); do
    echo "$PIN" 2> /dev/null > "/proc/irq/$irq/smp_affinity_list" ||
      echo "AFFINITY irq $irq: managed by the kernel, left where it is"
  done
  # A moved vector takes its new vCPU at its next interrupt: make each one fire.
  for d in $(seq 0 $((ND - 1))); do drop_caches; ls -a "$(root "$d")/" > /dev/null; done
  for d in $(seq 0 $((ND - 1))); do
    c=$(vcpu_of "$d")
    case "$c" in
      *[0-9]' ') c=${c% } ;;
      *) echo "FAIL: device $d's request interrupts on vCPU(s) '$c', not one"; exit 1 ;;
    esac
    case "$c" in *[!0-9]*) echo "FAIL: device $d's request interrupts on vCPUs '$c', not one"; exit 1 ;; esac
    eval "vcpu_$d=$c"
    echo "AFFINITY device $d: jobs on vCPU $c"
  done
fi
# on D: the jobs that follow are for device D (with PIN, on its vector's vCPU).
on() {
  [ -n "${PIN:-}" ] || return 0
  eval "taskset -p -c \"\$vcpu_$1\" $$" > /dev/null || { echo "FAIL: taskset"; exit 1; }
}
# What the guest made of it: each vector's asked and effective vCPUs; where device 0's jobs run
# (a child of this shell, as every job is).
irqs | while read -r irq rest; do
  echo "AFFINITY irq $irq ${rest##* }: smp_affinity_list $(cat "/proc/irq/$irq/smp_affinity_list")" \
    "effective $(cat "/proc/irq/$irq/effective_affinity_list")"
done
on 0
sh -c 'echo "AFFINITY device 0 jobs: $(taskset -p $$)"'
irqs > /tmp/irqs-before
# shellcheck disable=SC2012 # names are plain f0..fN
ls /mnt/m > /tmp/n0
files=$(wc -l < /tmp/n0)
for i in $(seq 0 $((ND - 1))); do sed "s|^|$(root "$i")/m/|" /tmp/n0 > "/tmp/names-$i"; done

# sizes_ok [N]: N sizes read (default: all the files), each 4096.
sizes_ok() { awk -v n="${1:-$files}" '$1 == 4096 { ok++ } END { exit ok != n }'; }
j_seqread() { fio --name=seqread --filename="$1/big" --rw=read --bs=1M --size=256M \
  --output-format=terse > /dev/null 2>/tmp/fio.err || { cat /tmp/fio.err; false; }; }
# One stat for all names (-s): when busybox xargs splits 10,000 names into several commands, this
# TCG guest hands some of them corrupted names (/mnt1/m/f31t1/m/f2989: the same few in every pass;
# the list itself is intact, and the host's busybox splits it correctly).
# stat_names LIST [N]: one stat for all the names of LIST, which holds N (default: all the files).
stat_names() { xargs -s 1000000 stat -c %s < "$1" | sizes_ok "${2:-}"; }
j_stat() { stat_names "/tmp/names-$2"; }
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
# sliced ROUND JOB: stat or stat-again on all devices at once, SLICE names at a time on each
# device in turn (the device that starts moves on by one each slice), so that the machine's drift
# over a job's seconds is shared by all devices; prints each device's sum of its slices. Every
# device's names are looked up first, then drop_caches: for stat, each daemon gets the 10,000
# FORGETs that drop_caches starts (and returns before they are all sent) as the slices begin, as
# it would with one device; for stat-again, the names are looked up once more and the 1 s
# timeouts waited out, so that every name is revalidated.
sliced() {
  r=$1 job=$2
  drop_caches
  for d in $(seq 0 $((ND - 1))); do on "$d"; j_stat "$(root "$d")" "$d"; done
  drop_caches
  if [ "$job" = stat-again ]; then
    for d in $(seq 0 $((ND - 1))); do on "$d"; j_stat "$(root "$d")" "$d"; done
    sleep 1.1
  fi
  : > /tmp/slice-times
  c=0
  for sl in /tmp/slices-0.*; do
    sl=${sl##*.}
    for x in $(seq 0 $((ND - 1))); do
      d=$(( (x + c + r) % ND ))
      f=/tmp/slices-$d.$sl
      on "$d"
      n=$(wc -l < "$f")
      t=$(now)
      stat_names "$f" "$n" || { echo "FAIL: $job slice $sl on device $d"; rc=1; }
      echo "$d $(since "$t")" >> /tmp/slice-times
    done
    c=$((c + 1))
  done
  awk -v job="$job" -v r="$r" '{ s[$1] += $2 }
    END { for (d in s) printf "BENCH-RESULT %s %s %s %.3f\n", d, job, r, s[d] }' /tmp/slice-times
}
if [ -n "${SLICE:-}" ]; then
  for i in $(seq 0 $((ND - 1))); do
    awk -v n="$SLICE" -v p="/tmp/slices-$i." '{ f = sprintf("%s%04d", p, int((NR - 1) / n)); print > f }' "/tmp/names-$i"
  done
fi
# Job j of round r starts with device (j + r) mod ND: every job's order rotates from round to
# round (with the job's number alone, an even number of jobs on 2 devices ran each job in the
# same order in every round).
for r in $(seq "$ROUNDS"); do
  j=0
  for job in $JOBS; do
    j=$((j + 1))
    case "$job" in stat|stat-again) if [ -n "${SLICE:-}" ]; then sliced "$r" "$job"; continue; fi ;; esac
    for x in $(seq 0 $((ND - 1))); do
      d=$(( (x + j + r) % ND ))
      on "$d"
      if [ "$job" = stat-again ]; then
        # Warm the dentries, then wait out the 1 s timeouts: every name is revalidated.
        drop_caches; j_stat "$(root "$d")" "$d"; sleep 1.1; run "$d" "$r" stat-again warm
      else
        run "$d" "$r" "$job"
      fi
    done
  done
done
k=0
blk=$(head -c 4096 /dev/zero | tr '\0' x)
for r in $(seq "$CUROUNDS"); do
  k=$((k + 1))
  for x in $(seq 0 $((ND - 1))); do
    d=$(( (x + k) % ND )) dir=$(root "$(( (x + k) % ND ))")/cu
    on "$d"
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
# Interrupts taken per vCPU during the jobs, per vector.
irqs | awk 'NR == FNR { for (c = 2; c < NF; c++) b[$1, c] = $c; next }
  { s = "IRQ " $1 " " $NF ":"; for (c = 2; c < NF; c++) s = s " cpu" c - 2 "=" $c - b[$1, c]; print s }' \
  /tmp/irqs-before -
for i in $(seq 1 $((ND - 1))); do umount "/mnt$i"; done
exit "$rc"
