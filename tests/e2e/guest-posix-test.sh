#!/bin/sh
# Runs INSIDE the e2e guest (busybox sh): the POSIX conformance probe (posix-probe.c, built by
# run-all.sh and put in the initramfs as /bin/posix-probe) on the virtio-fs mount.
#
#   sh guest-posix-test.sh MOUNTPOINT
#
# Prints the probe's PASS:/FAIL: lines and exits with its number of failed checks.
M=${1:?usage: guest-posix-test.sh MOUNTPOINT}
echo "== vhostfs e2e POSIX probe on $M =="
posix-probe "$M"
