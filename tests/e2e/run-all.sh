#!/usr/bin/env bash
# End-to-end tests of a virtio-fs daemon in a TCG guest (what .ci/run calls).
#
#   tests/e2e/run-all.sh
#
# Daemon selection:
#   VHOSTFS      daemon binary (default: target/release/vhostfs, else target/debug/vhostfs)
#   DAEMON_ARGS  its arguments (default: "--inode-file-handles=prefer --rlimit-nofile 4096")
#   DAEMON       overrides both: a binary alone gets DAEMON_ARGS appended; a command with
#                arguments is used as is. E.g. DAEMON=virtiofsd tests/e2e/run-all.sh
# The harness appends --socket-path/--shared-dir (and --sandbox=none for virtiofsd).
# Other knobs:
#   E2E_NEGATIVE=1  also run the daemon with --inode-file-handles=never and expect the 20,000-file
#                   directory checks (and only those) to fail with ENFILE: proves the test can fail.
#                   Meaningful for virtiofsd 1.14.
#   E2E_LOG_DIR     keep logs (console/daemon/qemu per case) there; default: temp dir, kept
#                   and printed only on failure.
#   E2E_MANY        files in the big directory (default 20000); E2E_TIMEOUT (default 600 s).
#   E2E_SUBMOUNTS=0 skip submounts.sh (3 boots, ~3.5 min; run for a vhostfs binary only).
#   E2E_CASES       run only these cases (space-separated names, e.g. "mmap-allow mmap-deny";
#                   "submounts" for submounts.sh, "libvirt" for libvirt.sh: 3 boots, ~2 min,
#                   "systemd-nspawn" for systemd.sh: systemd in a container, 2 boots, ~35 s;
#                   "migration" for migration.sh: 3 boots, 6 QEMUs, ~65 s);
#                   "gluster" for gluster.sh: a GlusterFS volume, 11 cases, 12 boots, ~3 min);
#                   "upgrade" for upgrade.sh: in-place upgrades under fio, 1 boot, ~70 s;
#                   "vng" for vng.sh: virtme-ng on the host's root, 4 boots, ~1.5 min).
#   PJDFSTEST       the pjdfstest binary of the pjdfstest cases (default:
#                   target/pjdfstest/bin/pjdfstest, installed by .ci/setup).
#   VHOSTFS_GUEST_DIR, QEMU, E2E_MEM, E2E_SMP: see run-guest.sh.
# Must run as root (chown to 1000:1000 in the guest needs a root daemon).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$here/lib.sh"
log() { echo "run-all: $*"; }

default_args=${DAEMON_ARGS:---inode-file-handles=prefer --rlimit-nofile 4096}
if [ -n "${DAEMON:-}" ]; then
  # shellcheck disable=SC2206 # word splitting of $DAEMON is the interface
  daemon=(${DAEMON})
  if [ ${#daemon[@]} -eq 1 ]; then
    # shellcheck disable=SC2206
    daemon+=(${default_args})
  fi
else
  bin=${VHOSTFS:-}
  if [ -z "$bin" ]; then
    for b in "$repo/target/release/vhostfs" "$repo/target/debug/vhostfs"; do
      if [ -x "$b" ]; then bin=$b; break; fi
    done
  fi
  if [ -z "$bin" ]; then
    echo "run-all: no vhostfs binary (cargo build [--release]); or set VHOSTFS=/path or DAEMON=virtiofsd" >&2
    exit 2
  fi
  # shellcheck disable=SC2206
  daemon=("$bin" ${default_args})
fi
if ! command -v "${daemon[0]}" >/dev/null; then
  echo "run-all: daemon ${daemon[0]} not found" >&2
  exit 2
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "run-all: warning: not root; chown and the daemon's privileged operations will fail" >&2
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/vhostfs-e2e-all.XXXXXX")
logroot=${E2E_LOG_DIR:-$work/logs}
failed=0
rg_pid='' viewer_pid=''
# shellcheck disable=SC2317 # invoked from the EXIT trap
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [ -n "$rg_pid" ] && kill -0 "$rg_pid" 2>/dev/null; then
    # run-guest.sh stops its QEMU and daemon on SIGTERM.
    kill -TERM "$rg_pid" 2>/dev/null || true
    wait "$rg_pid" 2>/dev/null || true
  fi
  # The log viewer (tail --pid) ends within a second of run-guest.sh.
  [ -z "$viewer_pid" ] || wait "$viewer_pid" 2>/dev/null || true
  if [ "$failed" -ne 0 ] || [ "$rc" -ne 0 ]; then
    [ -n "${E2E_LOG_DIR:-}" ] || { mkdir -p "$logroot" && log "logs kept in $logroot"; }
    rm -rf "$work/cases" "$work/initramfs.cpio.gz"
    [ -n "${E2E_LOG_DIR:-}" ] && rm -rf "$work"
  else
    rm -rf "$work"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

t0=$(now)
"$here/mkinitramfs.sh" "$work/initramfs.cpio.gz" >/dev/null
# build_probe NAME CASES: NAME-probe.c built static for the busybox guest, in an initramfs
# of its own with guest-NAME-test.sh; prints its path (nothing if it cannot be built: CASES fail).
build_probe() {
  if gcc -O2 -static -Wall -o "$work/$1-probe" "$here/$1-probe.c" \
    && "$here/mkinitramfs.sh" --extra-bin "$work/$1-probe" "$work/$1.cpio.gz" "$here/guest-$1-test.sh" >/dev/null; then
    echo "$work/$1.cpio.gz"
  else
    log "cannot build tests/e2e/$1-probe.c (gcc -static, libc6-dev): the $2 fail" >&2
  fi
}
probe_initramfs=$(build_probe posix "posix case")
# mmap-probe.c, xattr-probe.c and writeback-probe.c also prepare and verify the share on the host.
mmap_initramfs=$(build_probe mmap "mmap cases")
xattr_initramfs=$(build_probe xattr "xattrmap case")
writeback_initramfs=$(build_probe writeback "writeback case")
# setfacl/getfacl (package acl) and setfattr/getfattr (attr), with their libraries.
translate_bins=()
for b in setfacl getfacl setfattr getfattr; do
  translate_bins+=(--extra-bin "$(command -v "$b" || echo "/missing/$b")")
done
translate_initramfs=$work/translate.cpio.gz
"$here/mkinitramfs.sh" "${translate_bins[@]}" "$translate_initramfs" "$here/guest-translate-test.sh" >/dev/null \
  || { log "cannot build the translate initramfs (setfacl/getfacl: package acl; setfattr/getfattr: attr): the translate cases fail" >&2; translate_initramfs=''; }
killpriv_initramfs=$(build_probe killpriv "killpriv case")
setattr_initramfs=$(build_probe setattr "setattr cases")
# pjdfstest (crate 0.2.2, which .ci/setup installs under target/pjdfstest; PJDFSTEST=/path
# overrides), dynamically linked: mkinitramfs.sh copies its libraries. Without it the pjdfstest
# cases fail.
pjdfstest=${PJDFSTEST:-$repo/target/pjdfstest/bin/pjdfstest}
pjdfstest_initramfs=$work/pjdfstest.cpio.gz
if [ ! -x "$pjdfstest" ] || ! "$here/mkinitramfs.sh" --extra-bin "$pjdfstest" "$pjdfstest_initramfs" \
  "$here/guest-pjdfstest-test.sh" >/dev/null; then
  log "no pjdfstest initramfs (binary $pjdfstest: .ci/setup installs it): the pjdfstest cases fail" >&2
  pjdfstest_initramfs=''
fi
log "initramfs built in $(elapsed "$t0" "$(now)") s"
log "daemon: ${daemon[*]} ($("${daemon[0]}" --version 2>/dev/null | head -n1 || echo 'version unknown'))"

summary=()
# harness_failure LOGDIR: why run-guest.sh gave up (timeout, daemon exit, QEMU error) and the
# last lines of the console and the daemon log, as "; REASON; console: LINE; daemon: LINE", for
# the summary line: CI shows only the end of the output.
harness_failure() {
  local why con dmn
  why=$(sed -n 's/^run-guest: FAIL: //p' "$1/run-guest.out" 2>/dev/null | tail -n1) || true
  # stderr first: a console log that was never written (no QEMU) is no error here.
  con=$(tr -d '\r' 2>/dev/null < "$1/console.log" | grep -v '^ *$' | tail -n1 | cut -c1-160) || true
  dmn=$(grep -v '^ *$' "$1/daemon.log" 2>/dev/null | tail -n1 | cut -c1-200) || true
  [ -z "$why" ] || printf '; %s' "$why"
  [ -z "$con" ] || printf '; console: %s' "$con"
  [ -z "$dmn" ] || printf '; daemon: %s' "$dmn"
}
# run_case NAME EXPECT CMD...   EXPECT: pass | fail-ls (guest must fail the big-directory checks and nothing else)
# CASE_INITRAMFS=FILE: boot that initramfs instead (its own guest script); then CASE_HOST=0 skips
# host-fs-test.sh (the guest gets an empty share and the host verifies nothing), unless
# CASE_PREPARE / CASE_VERIFY name commands to run with the shared dir as last argument before
# the boot / after a guest PASS (a failing CASE_VERIFY fails the case).
# run_viewed OUT HIDE CMD...: runs CMD with its output in OUT, shown on the terminal as it comes
# (lines matching the extended regex HIDE left out, if HIDE is not empty); sets st to its exit
# status. In the background + `wait`, so that a SIGTERM/SIGINT to this script is handled at once
# (the trap stops CMD: run-guest.sh and the scripts stop their QEMU and daemons).
run_viewed() {
  local out=$1 hide=$2; shift 2
  : > "$out" # there before the viewer follows it
  "$@" >> "$out" 2>&1 &
  rg_pid=$!
  if [ -n "$hide" ]; then
    tail -n +1 -f --pid="$rg_pid" "$out" | grep --line-buffered -vE "$hide" &
  else
    tail -n +1 -f --pid="$rg_pid" "$out" &
  fi
  viewer_pid=$!
  st=0
  wait "$rg_pid" || st=$?
  rg_pid=''
  wait "$viewer_pid" || true
  viewer_pid=''
}
run_case() {
  local name=$1 expect=$2; shift 2
  local dir=$work/cases/$name logs=$logroot/$name rc=0 st t1 t2 t3 t4 prep verify_rc=0 verdict
  local initramfs=${CASE_INITRAMFS:-$work/initramfs.cpio.gz} host=${CASE_HOST:-1}
  # CASE_GROUP=NAME: E2E_CASES may also name the case by its group.
  if [ -n "${E2E_CASES:-}" ] && [[ " $E2E_CASES " != *" $name "* ]] \
    && [[ " $E2E_CASES " != *" ${CASE_GROUP:-$name} "* ]]; then return 0; fi
  mkdir -p "$dir" "$logs"
  log "=== case $name: $* (expect $expect)"
  t1=$(now)
  if [ "$host" = 1 ]; then "$here/host-fs-test.sh" prepare "$dir/shared"; else mkdir -p "$dir/shared"; fi
  # shellcheck disable=SC2086 # word splitting of CASE_PREPARE is the interface
  [ -z "${CASE_PREPARE:-}" ] || ${CASE_PREPARE} "$dir/shared"
  t2=$(now)
  prep=$(elapsed "$t1" "$t2")
  run_viewed "$logs/run-guest.out" '^(PASS: |     \()|logs kept in' \
    env E2E_SHOW_LOGS="$([ "$expect" = pass ] && echo 1 || echo 0)" "$here/run-guest.sh" \
    --initramfs "$initramfs" --shared-dir "$dir/shared" --log-dir "$logs" -- "$@"
  rc=$(grep -o '^E2E-RESULT: [A-Z-]*' "$logs/run-guest.out" | awk '{ print $2 }' || true)
  t3=$(now)
  case "$expect" in
    pass)
      if [ "$rc" = PASS ] && [ "$host" != 1 ] && [ -n "${CASE_VERIFY:-}" ]; then
        # shellcheck disable=SC2086 # word splitting of CASE_VERIFY is the interface
        ${CASE_VERIFY} "$dir/shared" > "$logs/host-verify.out" 2>&1 || verify_rc=$?
        grep '^FAIL' "$logs/host-verify.out" || true
        if [ "$verify_rc" -eq 0 ]; then verdict=PASS; else verdict="FAIL(host verify: $verify_rc failed)"; fi
      elif [ "$rc" = PASS ] && [ "$host" != 1 ]; then
        verdict=PASS
      elif [ "$rc" = PASS ]; then
        "$here/host-fs-test.sh" verify "$dir/shared" > "$logs/host-verify.out" || verify_rc=$?
        grep '^FAIL' "$logs/host-verify.out" || true
        if [ "$verify_rc" -eq 0 ]; then verdict=PASS; else verdict="FAIL(host verify: $verify_rc failed)"; fi
      else
        verdict="FAIL(guest: ${rc:-no result}$(harness_failure "$logs"))"
      fi ;;
    fail-ls)
      local bad
      local big='^FAIL: (ls -l|readdir) [0-9]+ files'
      bad=$(tr -d '\r' < "$logs/console.log" | grep '^FAIL: ' | grep -Evc "$big" || true)
      if [ "$rc" = FAIL ] && [ "$bad" -eq 0 ] && tr -d '\r' < "$logs/console.log" | grep -Eq "$big"; then
        verdict="PASS(failed as expected: $(tr -d '\r' < "$logs/console.log" | grep -Ec "$big") big-directory checks)"
      else
        verdict="FAIL(expected only the big-directory checks to fail; guest: ${rc:-no result}, other failures: $bad)"
      fi ;;
  esac
  t4=$(now)
  local timing
  timing=$(grep -o 'daemon_start=.*total=[0-9.]*s' "$logs/run-guest.out" || echo "no timings")
  summary+=("$name: $verdict | prepare=${prep}s $timing verify=$(elapsed "$t3" "$t4")s")
  [[ "$verdict" == PASS* ]] || failed=$((failed + 1))
  rm -rf "$dir"  # shared dir (20,000 files); logs stay under $logroot
}

run_case prefer pass "${daemon[@]}"
# POSIX gaps conformance suites found (issue 10): utimensat(AT_SYMLINK_NOFOLLOW), ETXTBSY of a
# file being executed (and no truncation of it), SEEK_DATA/SEEK_HOLE as the host answers.
if [ -n "$probe_initramfs" ]; then
  CASE_INITRAMFS=$probe_initramfs CASE_HOST=0 run_case posix pass "${daemon[@]}"
else
  summary+=("posix: FAIL(posix-probe.c did not build)")
  failed=$((failed + 1))
fi
# pjdfstest, the POSIX suite (its Rust rewrite, crate 0.2.2), as guest root on an empty share:
# ~400 tests of chmod, chown, link, mkdir, mkfifo, mknod, open, rename, rmdir, symlink, truncate,
# unlink, utimensat, posix_fallocate, as root and as two dummy users; passes with 0 failures.
# Again with --inode-file-handles=never (not for virtiofsd). A missing suite binary fails both.
never_args=()
for a in "${daemon[@]}"; do [[ "$a" == --inode-file-handles* ]] || never_args+=("$a"); done
never_args+=(--inode-file-handles=never)
# in_both_modes NAME INITRAMFS WHY-MISSING: case NAME (the daemon as given) and NAME-never
# (--inode-file-handles=never, not for virtiofsd) booting INITRAMFS; an empty INITRAMFS fails
# both with WHY-MISSING.
in_both_modes() {
  local name=$1 initramfs=$2 missing=$3 m
  for m in '' -never; do
    [ -z "$m" ] || [ "$(basename "${daemon[0]}")" != virtiofsd ] || continue
    [ -z "${E2E_CASES:-}" ] || [[ " $E2E_CASES " == *" $name$m "* ]] || continue
    if [ -z "$initramfs" ]; then
      summary+=("$name$m: FAIL($missing)")
      failed=$((failed + 1))
    elif [ -z "$m" ]; then
      CASE_INITRAMFS=$initramfs CASE_HOST=0 run_case "$name" pass "${daemon[@]}"
    else
      CASE_INITRAMFS=$initramfs CASE_HOST=0 run_case "$name-never" pass "${never_args[@]}"
    fi
  done
}
in_both_modes pjdfstest "$pjdfstest_initramfs" \
  "no pjdfstest initramfs: binary $pjdfstest missing? .ci/setup installs it"
# mmap of files opened for direct I/O (--cache=never): shared mappings only with --allow-mmap
# (FUSE_DIRECT_IO_ALLOW_MMAP; the guest refuses them with ENODEV without), private ones either
# way; both read the host's data, and a store through a shared mapping reaches the host file.
for m in allow deny; do
  if [ -z "$mmap_initramfs" ]; then
    summary+=("mmap-$m: FAIL(mmap-probe.c did not build)")
    failed=$((failed + 1))
    continue
  fi
  mmap_args=(--cache=never)
  [ "$m" = deny ] || mmap_args+=(--allow-mmap)
  CASE_INITRAMFS=$mmap_initramfs CASE_HOST=0 CASE_PREPARE="$work/mmap-probe --make $m" \
    CASE_VERIFY="$work/mmap-probe --verify $m" run_case "mmap-$m" pass "${daemon[@]}" "${mmap_args[@]}"
done
# --xattrmap with Docker Desktop's map: guest names live under user.docker.desktop. on the host,
# host names outside it are hidden from the guest.
if [ -n "$xattr_initramfs" ]; then
  CASE_INITRAMFS=$xattr_initramfs CASE_HOST=0 CASE_PREPARE="$work/xattr-probe --make" \
    CASE_VERIFY="$work/xattr-probe --verify" run_case xattrmap pass "${daemon[@]}" \
    --xattr '--xattrmap=:prefix:all::user.docker.desktop.::bad:all:::'
else
  summary+=("xattrmap: FAIL(xattr-probe.c did not build)")
  failed=$((failed + 1))
fi
# --writeback (FUSE_WRITEBACK_CACHE): 4 processes write, append, truncate, mmap and fsync their
# own files and their ranges of a shared one, checked against in-memory models; then again after
# a guest cache drop, and on the host after the guest unmounted (contents, sizes, mtimes).
if [ -n "$writeback_initramfs" ]; then
  CASE_INITRAMFS=$writeback_initramfs CASE_HOST=0 CASE_PREPARE="$work/writeback-probe --make" \
    CASE_VERIFY="$work/writeback-probe --verify" run_case writeback pass "${daemon[@]}" --writeback
else
  summary+=("writeback: FAIL(writeback-probe.c did not build)")
  failed=$((failed + 1))
fi
# --security-label=always: INIT fails unless the guest offers FUSE_SECURITY_CTX (no mount), and
# then every create, mkdir, mknod and symlink of the fs test carries the guest kernel's security
# context record (empty: no LSM gives labels in this guest), which the daemon must parse.
run_case security-label pass "${daemon[@]}" --security-label=always
# --translate-uid/--translate-gid with the lines of KubeVirt (host:107:0:1, and its migration
# options), Incus (its id range, the rest forbidden, with --posix-acl: ACL ids translated both
# ways) and Docker Desktop (every uid squashed onto 1000, its xattrmap): owners on the host and
# in `ls -ln`, EPERM for a forbidden uid, setfacl/getfacl (E2E_CASES="translate" runs the three).
translate_lines=(
  "kubevirt|--sandbox=none --cache=auto --migration-on-error=guest-error --migration-mode=find-paths --translate-uid=host:107:0:1"
  "incus|--translate-uid=map:0:1000000:65536 --translate-gid=map:0:1000000:65536 --translate-uid=forbid-guest:65536:4294901759 --translate-gid=forbid-guest:65536:4294901759 --posix-acl"
  "docker|--xattr --xattrmap=:prefix:all::user.docker.desktop.::bad:all::: --translate-uid squash-guest:0:1000:4294967295 --announce-submounts --sandbox=none --cache=auto"
)
for line in "${translate_lines[@]}"; do
  m=${line%%|*}
  # shellcheck disable=SC2206 # the launcher's arguments, split on blanks
  line_args=(${line#*|})
  if [ -z "$translate_initramfs" ]; then
    summary+=("translate-$m: FAIL(no translate initramfs)")
    failed=$((failed + 1))
    continue
  fi
  CASE_GROUP=translate CASE_INITRAMFS=$translate_initramfs CASE_HOST=0 \
    CASE_PREPARE="$here/translate-host.sh --make $m" CASE_VERIFY="$here/translate-host.sh --verify $m" \
    run_case "translate-$m" pass "${daemon[@]}" "${line_args[@]}"
done
# --killpriv-v2: a guest user (uid 1000) writes, truncates, opens with O_TRUNC and chgrps setuid
# and setgid files; the bits end as on the guest's tmpfs, in the guest and on the host, and the
# vhostfs INIT answer (its daemon log) carries FUSE_HANDLE_KILLPRIV_V2.
if [ -n "$killpriv_initramfs" ]; then
  kp_verify="$work/killpriv-probe --verify"
  [ "$(basename "${daemon[0]}")" != vhostfs ] || kp_verify+=" $logroot/killpriv/daemon.log"
  CASE_INITRAMFS=$killpriv_initramfs CASE_HOST=0 CASE_PREPARE="$work/killpriv-probe --make" \
    CASE_VERIFY="$kp_verify" run_case killpriv pass "${daemon[@]}" --killpriv-v2
else
  summary+=("killpriv: FAIL(killpriv-probe.c did not build)")
  failed=$((failed + 1))
fi
# SETATTR as the guest's kernel allowed it (issue 38; what the C pjdfstest's chmod/12.t, chown/00.t
# and chown/05.t check, which the crate's port lacks): a non-owner's write clears setuid/setgid
# of root's files, the owner chgrps every file type to a supplementary group (chown, lchown,
# fchownat NOFOLLOW), set-id bits after its chgrp, truncate and touch allowed only through a
# supplementary group, and the refusals (EPERM, EACCES); all as on the guest's tmpfs, also after
# drop_caches. Again with --inode-file-handles=never (not for virtiofsd).
in_both_modes setattr "$setattr_initramfs" "setattr-probe.c did not build"
# Multi-queue: the guest spreads requests over 2 request queues (2 vCPUs); virtiofsd serves 1.
if [ "$(basename "${daemon[0]}")" != virtiofsd ]; then
  E2E_QUEUES=2 run_case prefer-2-queues pass "${daemon[@]}"
  # Started the way a systemd socket unit starts it (systemd-socket-activate passes the listening
  # socket as fd 3 with LISTEN_PID/LISTEN_FDS/LISTEN_FDNAMES).
  VHOSTFS="${daemon[0]}" run_case socket-activated pass "$here/socket-activate.sh" "${daemon[@]:1}"
fi
# Runs a script that writes one "name: PASS|FAIL..." line per case into its --summary-file
# (vhostfs only): run_script CASE SCRIPT TITLE, CASE being the E2E_CASES name that selects it.
run_script() {
  local name=$1 script=$2 title=$3 sf=$work/$1.summary st=0 line
  [ "$(basename "${daemon[0]}")" = vhostfs ] || return 0
  [ -z "${E2E_CASES:-}" ] || [[ " $E2E_CASES " == *" $name "* ]] || return 0
  log "=== $script: $title"
  # Its output is kept in a file, so that a script that ends without a result can be told by
  # its last line in the summary (all CI keeps of a run is its tail).
  run_viewed "$work/$name.out" '' \
    env VHOSTFS="${daemon[0]}" E2E_LOG_DIR="$logroot" "$here/$script" --summary-file "$sf"
  if [ ! -s "$sf" ]; then
    line=$(grep -v '^[[:space:]]*$' "$work/$name.out" | tail -n 1 | cut -c1-300 || true)
    summary+=("$name: FAIL($script exited with status $st before any result; its last line: ${line:-none}; logs in $logroot)")
    failed=$((failed + 1))
    return
  fi
  while IFS= read -r line; do
    summary+=("$line")
    [[ "$line" == *": PASS"* ]] || failed=$((failed + 1))
  done < "$sf"
}
# Filesystems mounted below the share (xfs, btrfs, tmpfs, overlayfs, bind) under each sandbox,
# and fd pinning: submounts.sh boots once per sandbox with 8 daemons (vhostfs only: virtiofsd
# cannot build its namespace sandbox here; run `DAEMON=virtiofsd tests/e2e/submounts.sh` for
# its sandbox=none reference run).
if [ "${E2E_SUBMOUNTS:-1}" = 1 ]; then
  run_script submounts submounts.sh "mixed share under each sandbox, fd pinning"
fi
# A real libvirt (system and session libvirtd, started by hand) starts vhostfs for TCG domains:
# <binary path=...>, discovery through 50-vhostfs.json, <idmap> (~50 s; vhostfs only).
run_script libvirt libvirt.sh "libvirt 11 starts vhostfs (binary path, JSON discovery, idmap)"
# Live migration between two QEMUs, each with its own vhostfs on the same share, while the guest
# writes and reads open files: find-paths, file-handles, KubeVirt's line with a file renamed by the
# host between save and load (1 boot per case, ~20 s each; vhostfs only).
run_script migration migration.sh "live migration between two QEMUs (find-paths, file-handles, KubeVirt's line)"
# A share on GlusterFS (issue 35): a volume started here, mounted twice (hosts A and B); the
# wrong-file case in each cache mode, changes through B, mandatory's refusal, the fs test,
# pjdfstest against virtiofsd 1.14 on the same volume, live migration from A to B (vhostfs only).
run_script gluster gluster.sh "a share on GlusterFS: wrong-file case, host B's changes, pjdfstest vs virtiofsd, migration A to B"
# systemd as PID 1 of a container (systemd-nspawn) drives vhostfs@share.socket/.service installed
# by contrib/install.sh from this tree; QEMU connects through the socket; then `systemctl reload`
# under a second guest (~35 s, 2 boots).
run_script systemd-nspawn systemd.sh "vhostfs@share.socket/.service under systemd in a container"
# In-place upgrade under a live guest: fio randrw with verify and an appending shell through
# three upgrades (SIGHUP, `vhostfs upgrade` to a second build, back); ~70 s, vhostfs only
# (the second build: VHOSTFS2, default target/debug/vhostfs).
run_script upgrade upgrade.sh "in-place upgrade under fio (3 upgrades, 10,000 inodes held)"
# virtme-ng (vng) boots the e2e kernel on the host's root served by vhostfs as the virtiofsd on
# PATH: as root and as a throw-away user, read-only and --rw (4 boots; vhostfs only).
run_script vng vng.sh "virtme-ng boots a guest on vhostfs (root/user x ro/rw)"
if [ "${E2E_NEGATIVE:-0}" = 1 ]; then
  neg=()
  for a in "${daemon[@]}"; do [[ "$a" == --inode-file-handles* ]] || neg+=("$a"); done
  run_case never-negative fail-ls "${neg[@]}" --inode-file-handles=never
fi

echo
log "summary (total $(elapsed "$t0" "$(now)") s):"
for s in "${summary[@]}"; do echo "  $s"; done
if [ "$failed" -ne 0 ]; then
  log "$failed case(s) FAILED"
  exit 1
fi
log "all cases passed"
