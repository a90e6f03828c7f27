#!/bin/sh
# Runs INSIDE the e2e guest (busybox sh): the xattr probe (xattr-probe.c, built by run-all.sh and
# put in the initramfs as /bin/xattr-probe) on the virtio-fs mount.
#
#   sh guest-xattr-test.sh MOUNTPOINT
#
# Prints the probe's PASS:/FAIL: lines and exits with its number of failed checks.
M=${1:?usage: guest-xattr-test.sh MOUNTPOINT}
echo "== vhostfs e2e xattr probe on $M =="
xattr-probe "$M"
