#!/bin/sh
# Runs INSIDE the e2e guest (busybox sh): the killpriv probe (killpriv-probe.c, built by
# run-all.sh and put in the initramfs as /bin/killpriv-probe) on the virtio-fs mount.
#
#   sh guest-killpriv-test.sh MOUNTPOINT
#
# Prints the probe's PASS:/FAIL: lines and exits with its number of failed checks.
M=${1:?usage: guest-killpriv-test.sh MOUNTPOINT}
echo "== vhostfs e2e killpriv probe on $M =="
killpriv-probe "$M"
