#!/bin/sh
# shellcheck disable=SC2317 # the job functions below run through timed()
# vhostfs in-guest benchmark; runs INSIDE the guest (busybox sh + fio) on the virtio-fs mount.
#
#   sh guest-bench.sh MOUNTPOINT
#
# Knobs come from MOUNTPOINT/bench.env (written by run.sh): RUNTIME (seconds per time-based fio
# job), SIZE (fio file size), FILES (metadata jobs), JOBS (space-separated, in this order by
# default: "seqread meta"; also "seqread-direct seqwrite randread", or "create" for the create
# phase alone).
# Prints one line per result: "BENCH-RESULT name value unit" (MiB/s, IOPS or guest seconds).
M=${1:?usage: guest-bench.sh MOUNTPOINT}
RUNTIME=10 SIZE=256M FILES=10000 JOBS="seqread meta"
# shellcheck disable=SC1091 # written by run.sh next to this script
[ -f "$M/bench.env" ] && . "$M/bench.env"
W=$M/work
rc=0

# Seconds since boot: the monotonic clock in /proc/timer_list (nanoseconds), or /proc/uptime
# where there is none (10 ms steps: a 0.12 s readdir read 0.12 or 0.13).
now() {
  awk '/^now at/ { printf "%.6f\n", $3 / 1e9; found = 1; exit } END { exit !found }' \
    /proc/timer_list 2> /dev/null || cut -d' ' -f1 /proc/uptime
}
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.3f", b - a }'; }
drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches; }
result() { echo "BENCH-RESULT $1 $2 $3"; }

# shellcheck disable=SC2012 # sysfs names are plain numbers
echo "== guest bench: $(ls /sys/fs/virtiofs/*/mqs 2>/dev/null | tr '\n' ' ')(request queues in use) =="
mkdir -p "$W" || exit 1

# fio_job NAME FIELD UNIT ARGS...: terse v3 field 7/8 = read KiB/s / IOPS, 48/49 = write.
fio_job() {
  name=$1 field=$2 unit=$3; shift 3
  drop_caches
  out=$(fio --name="$name" --filename="$W/fio.dat" --size="$SIZE" --output-format=terse "$@" 2>/tmp/fio.err)
  v=$(echo "$out" | awk -F';' -v f="$field" -v u="$unit" \
    '$1 == 3 { if (u == "MiB/s") printf "%.1f", $f / 1024; else printf "%d", $f }')
  if [ -z "$v" ] || [ "$v" = 0 ] || [ "$v" = 0.0 ]; then
    echo "FAIL: fio $name"; cat /tmp/fio.err; rc=1; return
  fi
  result "$name" "$v" "$unit"
}

# seq_passes NAME ARGS...: three fio passes over the whole file, each after drop_caches (one pass
# of 256 MiB lasts well under a second here); prints the passes' mean MiB/s.
seq_passes() {
  name=$1; shift
  sum=0
  for _ in 1 2 3; do
    drop_caches
    out=$(fio --name="$name" --filename="$W/fio.dat" --size="$SIZE" --output-format=terse "$@" 2>/tmp/fio.err)
    v=$(echo "$out" | awk -F';' '$1 == 3 { printf "%.1f", $7 / 1024 }')
    if [ -z "$v" ] || [ "$v" = 0.0 ]; then echo "FAIL: fio $name"; cat /tmp/fio.err; rc=1; return; fi
    sum=$(awk -v a="$sum" -v b="$v" 'BEGIN { print a + b }')
  done
  result "$name" "$(awk -v a="$sum" 'BEGIN { printf "%.1f", a / 3 }')" MiB/s
}

# The fio file, laid out once (untimed) for the read jobs.
layout() {
  [ -f "$W/fio.dat" ] && return
  fio --name=layout --filename="$W/fio.dat" --size="$SIZE" --rw=write --bs=1M --direct=1 \
    --output-format=terse > /dev/null 2>/tmp/fio.err || { echo "FAIL: fio layout"; cat /tmp/fio.err; rc=1; }
}

# timed NAME CMD...: runs CMD, prints its guest seconds as NAME (FAIL if CMD fails).
timed() {
  name=$1; shift
  t=$(now)
  "$@" || { echo "FAIL: $name"; rc=1; }
  result "$name" "$(since "$t")" s
}

# Checks: every stat printed size 4096; a listing counted FILES entries.
# One stat (and one rm) for all names (-s): busybox xargs splitting 10,000 names into several
# commands hands a few corrupted names to them in the TCG guest (docs/benchmarks.md, ninth session;
# seen again with a3da8eb and today's build alike); one-guest-bench.sh does the same.
stat_names() { xargs -s 1000000 stat -c %s < /tmp/names | awk -v n="$FILES" '$1 == 4096 { ok++ } END { exit ok != n }'; }
# shellcheck disable=SC2038 # names are plain f0..fN
find_stat() { (cd "$1" && find . -type f | xargs stat -c %s) | awk -v n="$FILES" '$1 == 4096 { ok++ } END { exit ok != n }'; }
# shellcheck disable=SC2012 # `ls -l` is the workload; names are plain f0..fN
ls_l() { [ "$(ls -l "$1" | wc -l)" -eq $((FILES + 1)) ]; }
# A plain readdir: the shell's glob reads the directory and stats nothing.
readdir() { set -- "$1"/f*; [ "$#" -eq "$FILES" ]; }
unlink_names() { xargs -s 1000000 rm -f < /tmp/names; }

# The metadata jobs of one directory of FILES files of 4 KiB (the independent in-guest benchmark
# of issue 14): create; stat of every name after drop_caches (one LOOKUP at a time); stat of them
# again, after the 1 s timeouts (revalidations); `find . -type f | xargs stat` after drop_caches (READDIRPLUS, then
# stats); `ls -l` and a plain readdir after drop_caches; unlink of every name after drop_caches.
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
  timed "stat-${FILES}" stat_names
  # Past the 1 s entry and attribute timeout of --cache=auto, so that every name is revalidated
  # (a LOOKUP each): without the pause, how many are depends on how long the first pass took.
  sleep 1.1
  timed "stat-again-${FILES}" stat_names
  drop_caches
  timed "find-stat-${FILES}" find_stat "$d"
  drop_caches
  timed "ls-l-${FILES}" ls_l "$d"
  drop_caches
  timed "readdir-${FILES}" readdir "$d"
  drop_caches
  timed "unlink-${FILES}" unlink_names
  rmdir "$d"
}

for job in $JOBS; do
  case "$job" in
    # One 1 MiB psync read at a time through the page cache (the guest's readahead decides what
    # reaches the daemon), one pass over the file: the independent benchmark's job.
    seqread) layout; seq_passes seqread-1M --rw=read --bs=1M ;;
    seqread-direct) layout; fio_job seqread-1M-direct 7 MiB/s --rw=read --bs=1M --direct=1 \
      --runtime="$RUNTIME" --time_based ;;
    seqwrite) fio_job seqwrite-1M 48 MiB/s --rw=write --bs=1M --direct=1 --runtime="$RUNTIME" --time_based ;;
    randread) layout; fio_job randread-4k-qd16 8 IOPS --rw=randread --bs=4k --ioengine=io_uring \
      --iodepth=16 --direct=1 --runtime="$RUNTIME" --time_based ;;
    meta) meta all ;;
    create) meta create ;;
    *) echo "FAIL: unknown job $job"; rc=1 ;;
  esac
done
rm -f "$W/fio.dat"
exit "$rc"
