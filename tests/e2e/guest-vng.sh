#!/bin/sh
# The guest side of vng.sh: runs (as the guest's root, vng's default for --exec) in a virtme-ng
# guest whose root file system is the host's, served by vhostfs.
#
#   guest-vng.sh ro|rw DIR TOKEN
#
# DIR is a host directory outside vng's overlays (so a write goes to the host or fails) holding
# `from-host`. Prints VNG-* lines for the host to check: the root mount, the host file read
# through the share, and the result of writing TOKEN into DIR/marker. In the ro case / is first
# remounted read-write in the guest, so that only the daemon's --readonly can refuse the write.
mode=$1 dir=$2 token=$3
echo "VNG-ROOT: $(awk '$2 == "/" { print $1, $3, $4 }' /proc/mounts | head -n 1)"
echo "VNG-UID: $(id -u)"
echo "VNG-KERNEL: $(uname -r)"
echo "VNG-READ: $(cat "$dir/from-host" 2>&1)"
if [ "$mode" = ro ]; then
  if mount -o remount,rw / 2>/dev/null; then echo "VNG-REMOUNT: rw"; else echo "VNG-REMOUNT: failed"; fi
fi
if err=$( { echo "$token" > "$dir/marker"; } 2>&1 ); then
  echo "VNG-WRITE: ok $(cat "$dir/marker") $(stat -c %u:%g "$dir/marker")"
else
  echo "VNG-WRITE: failed: $err"
fi
echo "VNG-DONE"
