#!/bin/sh
# Runs INSIDE the e2e guest (busybox sh), as root: the pjdfstest POSIX suite (the Rust rewrite,
# crate pjdfstest 0.2.2, installed by .ci/setup and put in the initramfs as /bin/pjdfstest by
# run-all.sh) on the virtio-fs mount.
#
#   sh guest-pjdfstest-test.sh MOUNTPOINT
#
# Adds the suite's two dummy users (nobody, tests, each with a group of its own name), writes
# its configuration, runs it in MOUNTPOINT/pjd (mode 0755) with the guest's /tmp (tmpfs) as the
# second file system of the EXDEV tests, and prints its output; then one FAIL: line per failed
# test (with its message) or test that passed though listed as an expected failure, and a count
# line. Exits with the number of failures (at least 1 if the suite did not end with its summary).
M=${1:?usage: guest-pjdfstest-test.sh MOUNTPOINT}
echo "== vhostfs e2e pjdfstest on $M =="
if ! command -v pjdfstest > /dev/null; then
  echo "FAIL: pjdfstest: no /bin/pjdfstest in the initramfs"
  exit 1
fi

# The default [dummy_auth] entries: users nobody and tests, each in a group of the same name.
echo 'nobody:x:65534:65534:nobody:/:/bin/false' >> /etc/passwd
echo 'nobody:x:65534:' >> /etc/group
echo 'tests:x:1001:1001:pjdfstest:/:/bin/false' >> /etc/passwd
echo 'tests:x:1001:' >> /etc/group

# Features: those of the suite's own Linux (ext4) CI configuration (posix_fallocate, utimensat,
# utime_now), plus rename_ctime (Linux's rename updates the ctime; passes on the host's ext4 and
# tmpfs). Not enabled, so skipped: chflags/file flags, NFSv4 ACLs, st_birthtime (none on Linux),
# the EROFS tests (allow_remount: they remount the file system read-only), and link_count_max
# skips itself (pathconf(LINK_MAX) is glibc's 127 "unknown" on FUSE).
# naptime 0.01 s as in that configuration: the host's timestamps are finer than that.
# No expected_failures: the suite passes with none on the host's ext4 and tmpfs (0 failed,
# 13 and 14 skipped of 398).
conf=/tmp/pjdfstest.toml
cat > "$conf" <<'EOF'
[features]
posix_fallocate = {}
utimensat = {}
utime_now = {}
rename_ctime = {}

[settings]
naptime = 0.01
allow_remount = false

[dummy_auth]
entries = [["nobody", "nobody"], ["tests", "tests"]]
EOF

dir=$M/pjd
if ! { mkdir -p "$dir" && chmod 0755 "$dir"; }; then echo "FAIL: pjdfstest: mkdir $dir"; exit 1; fi
out=/tmp/pjdfstest.out
# No colours (the console is a tty), no backtraces (RUST_BACKTRACE unset): one line per test,
# then the failure's message on the lines that follow it.
NO_COLOR=1 CLICOLOR=0 pjdfstest -c "$conf" -p "$dir" -s /tmp > "$out" 2>&1
st=$?
cat "$out"

esc=$(printf '\033')
# Result lines: "NAME<blanks>ok|FAILED|skipped|failed as expected|PASSED UNEXPECTEDLY".
res='^[A-Za-z0-9_:]+ +(ok|FAILED|skipped|failed as expected|PASSED UNEXPECTEDLY)$'
sed "s/$esc\[[0-9;]*m//g" "$out" | awk -v res="$res" '
  function flush() { if (name != "") print "FAIL: pjdfstest " name ": " msg; name = "" }
  $0 ~ res || /^Summary: / {
    flush()
    if ($NF == "FAILED") { name = $1; msg = "" }
    else if ($0 ~ /PASSED UNEXPECTEDLY$/) { name = $1; msg = "passed, but listed in expected_failures" }
    next
  }
  name != "" { line = $0; gsub(/^[ \t]+/, "", line); if (line != "") msg = msg (msg == "" ? "" : " | ") line }
  END { flush() }' > /tmp/pjdfstest.fail
cat /tmp/pjdfstest.fail
failed=$(grep -c '^FAIL: ' /tmp/pjdfstest.fail)
summary=$(sed "s/$esc\[[0-9;]*m//g" "$out" | grep '^Summary: ' | tail -n 1)
if [ -z "$summary" ]; then
  echo "FAIL: pjdfstest: no summary line (exit status $st)"
  failed=$((failed + 1))
elif [ "$failed" -eq 0 ] && [ "$st" -ne 0 ]; then
  echo "FAIL: pjdfstest: exit status $st, but no failed test found in its output"
  failed=1
fi
[ "$failed" -ne 0 ] || echo "PASS: pjdfstest: ${summary#Summary: }"
echo "pjdfstest: $failed failure(s); suite: ${summary:-Summary: none} (exit status $st)"
# An exit status counts modulo 256.
[ "$failed" -le 255 ] || failed=255
exit "$failed"
