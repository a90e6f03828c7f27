#!/bin/sh
# Runs INSIDE the e2e guest (busybox sh): the writeback data-integrity exerciser
# (writeback-probe.c, built by run-all.sh and put in the initramfs as /bin/writeback-probe) on the
# virtio-fs mount; the daemon runs with --writeback. The init script unmounts the share after it,
# and run-all.sh then verifies the files on the host (writeback-probe --verify).
#
#   sh guest-writeback-test.sh MOUNTPOINT
#
# Prints the probe's PASS:/FAIL: lines and exits with its number of failed checks.
M=${1:?usage: guest-writeback-test.sh MOUNTPOINT}
echo "== vhostfs e2e writeback exerciser on $M =="
writeback-probe run "$M"
