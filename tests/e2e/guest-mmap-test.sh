#!/bin/sh
# Runs INSIDE the e2e guest (busybox sh): the mmap probe (mmap-probe.c, built by run-all.sh and put
# in the initramfs as /bin/mmap-probe) on the virtio-fs mount, in the mode the host wrote into
# MOUNTPOINT/mmap-expect (allow: the daemon runs with --allow-mmap; deny: without).
#
#   sh guest-mmap-test.sh MOUNTPOINT
#
# Prints the probe's PASS:/FAIL: lines and exits with its number of failed checks.
M=${1:?usage: guest-mmap-test.sh MOUNTPOINT}
mode=$(cat "$M/mmap-expect") || { echo "FAIL: no $M/mmap-expect"; exit 1; }
echo "== vhostfs e2e mmap probe on $M (expect: $mode) =="
mmap-probe "$mode" "$M"
