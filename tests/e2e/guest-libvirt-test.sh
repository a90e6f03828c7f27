#!/bin/sh
# Runs INSIDE the e2e guest (busybox sh) that tests/e2e/libvirt.sh boots under libvirt: writes a
# file on the virtio-fs share and reads it back, makes a directory owned by 1000:1000. The host
# then checks the file's content and both owners (mapped ones under an <idmap>).
#
#   sh guest-libvirt-test.sh MOUNTPOINT
M=${1:?usage: guest-libvirt-test.sh MOUNTPOINT}
fails=0
check() { if eval "$2"; then echo "PASS: $1"; else echo "FAIL: $1"; fails=$((fails + 1)); fi; }
echo "== vhostfs e2e libvirt guest on $M =="
check "write $M/written.txt" "echo 'written by the libvirt guest' > $M/written.txt && sync"
check "read it back" "[ \"\$(cat $M/written.txt)\" = 'written by the libvirt guest' ]"
check "read the host's file" "[ \"\$(cat $M/from-host.txt)\" = 'from the host' ]"
check "mkdir + chown 1000:1000" "mkdir $M/owned && chown 1000:1000 $M/owned"
check "the guest sees 1000:1000" "[ \"\$(stat -c %u:%g $M/owned)\" = 1000:1000 ]"
ls -ln "$M"
exit "$fails"
