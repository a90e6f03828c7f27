#!/bin/sh
# vhostfs in-guest benchmark; runs INSIDE the guest (busybox sh + fio) on the virtio-fs mount.
#
#   sh guest-bench.sh MOUNTPOINT
#
# Knobs come from MOUNTPOINT/bench.env (written by run.sh): RUNTIME (seconds per fio job),
# SIZE (fio file size), FILES (metadata job), JOBS (space-separated subset of
# "seqwrite seqread randread meta" or "create" for the create phase alone).
# Prints one line per result: "BENCH-RESULT name value unit" (MiB/s, IOPS or guest seconds).
M=${1:?usage: guest-bench.sh MOUNTPOINT}
RUNTIME=10 SIZE=256M FILES=10000 JOBS="seqwrite seqread randread meta"
# shellcheck disable=SC1091 # written by run.sh next to this script
[ -f "$M/bench.env" ] && . "$M/bench.env"
W=$M/work
rc=0

now() { cut -d' ' -f1 /proc/uptime; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }
drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches; }
result() { echo "BENCH-RESULT $1 $2 $3"; }

# shellcheck disable=SC2012 # sysfs names are plain numbers
echo "== guest bench: $(ls /sys/fs/virtiofs/*/mqs 2>/dev/null | tr '\n' ' ')(request queues in use) =="
mkdir -p "$W" || exit 1

# fio NAME FIELD SCALE ARGS...: terse v3 field 7/8 = read KiB/s / IOPS, 48/49 = write.
fio_job() {
  name=$1 field=$2 unit=$3; shift 3
  drop_caches
  out=$(fio --name="$name" --filename="$W/fio.dat" --size="$SIZE" --direct=1 \
    --runtime="$RUNTIME" --time_based --output-format=terse "$@" 2>/tmp/fio.err)
  v=$(echo "$out" | awk -F';' -v f="$field" -v u="$unit" \
    '$1 == 3 { if (u == "MiB/s") printf "%.1f", $f / 1024; else printf "%d", $f }')
  if [ -z "$v" ] || [ "$v" = 0 ] || [ "$v" = 0.0 ]; then
    echo "FAIL: fio $name"; cat /tmp/fio.err; rc=1; return
  fi
  result "$name" "$v" "$unit"
}

meta() {
  d=$W/meta
  mkdir -p "$d"
  blk=$(head -c 4096 /dev/zero | tr '\0' x)
  awk -v d="$d" -v n="$FILES" 'BEGIN { for (i = 0; i < n; i++) print d "/f" i }' > /tmp/names
  drop_caches
  t=$(now)
  i=0
  while [ "$i" -lt "$FILES" ]; do
    printf '%s' "$blk" > "$d/f$i" || { echo "FAIL: create $d/f$i"; rc=1; return; }
    i=$((i + 1))
  done
  result "create-${FILES}" "$(since "$t")" s
  [ "$1" = create ] && { rm -rf "$d"; return; }
  drop_caches
  t=$(now)
  xargs stat -c %s < /tmp/names | awk '$1 != 4096 { bad++ } END { exit bad > 0 }' || { echo "FAIL: stat"; rc=1; }
  result "stat-${FILES}" "$(since "$t")" s
  drop_caches
  t=$(now)
  # shellcheck disable=SC2012 # `ls -l` is the workload; names are plain f0..fN
  n=$(ls -l "$d" | wc -l)
  result "ls-l-${FILES}" "$(since "$t")" s
  [ "$n" -eq $((FILES + 1)) ] || { echo "FAIL: ls -l listed $n lines"; rc=1; }
  drop_caches
  t=$(now)
  xargs rm -f < /tmp/names || { echo "FAIL: unlink"; rc=1; }
  result "unlink-${FILES}" "$(since "$t")" s
  rmdir "$d"
}

for job in $JOBS; do
  case "$job" in
    seqwrite) fio_job seqwrite-1M 48 MiB/s --rw=write --bs=1M ;;
    seqread) fio_job seqread-1M 7 MiB/s --rw=read --bs=1M ;;
    randread) fio_job randread-4k-qd16 8 IOPS --rw=randread --bs=4k --ioengine=io_uring --iodepth=16 ;;
    meta) meta all ;;
    create) meta create ;;
    *) echo "FAIL: unknown job $job"; rc=1 ;;
  esac
done
rm -f "$W/fio.dat"
exit "$rc"
