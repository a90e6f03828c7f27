#!/bin/sh
# Runs INSIDE the e2e guest (busybox sh), as root: the SETATTR probe (setattr-probe.c, built by
# run-all.sh and put in the initramfs as /bin/setattr-probe) on the virtio-fs mount, with the
# guest's /tmp (tmpfs) as the reference.
#
#   sh guest-setattr-test.sh MOUNTPOINT
#
# Prints the probe's PASS:/FAIL: lines and exits with its number of failed checks.
M=${1:?usage: guest-setattr-test.sh MOUNTPOINT}
echo "== vhostfs e2e setattr probe on $M =="
setattr-probe "$M"
