#!/bin/sh
# Runs INSIDE the e2e guest (busybox sh) that tests/e2e/migration.sh boots and live-migrates: the
# migration probe (migration-probe.c, in the initramfs as /bin/migration-probe) on the virtio-fs
# mount. It does I/O until the host creates MOUNTPOINT/stop after the switch-over.
#
#   sh guest-migration-test.sh MOUNTPOINT
#
# Prints the probe's PASS:/FAIL: lines and exits with its number of failed checks.
M=${1:?usage: guest-migration-test.sh MOUNTPOINT}
migration-probe "$M"
