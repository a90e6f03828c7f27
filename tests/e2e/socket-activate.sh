#!/usr/bin/env bash
# A DAEMON for run-all.sh / run-guest.sh that starts vhostfs the way a systemd socket unit does:
# systemd-socket-activate (Debian package systemd) listens on the socket the harness asks for and
# execs vhostfs with it as fd 3 (LISTEN_PID, LISTEN_FDS=1, LISTEN_FDNAMES=vhostfs).
#
#   DAEMON="tests/e2e/socket-activate.sh --cache=auto" tests/e2e/run-all.sh
#
# VHOSTFS: the vhostfs binary (default: target/release/vhostfs, else target/debug/vhostfs).
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
bin=${VHOSTFS:-$repo/target/release/vhostfs}
[[ -x $bin ]] || bin=$repo/target/debug/vhostfs
args=()
sock=
for a in "$@"; do
    case $a in
        --socket-path=*) sock=${a#--socket-path=} ;;
        *) args+=("$a") ;;
    esac
done
[[ -n $sock ]] || { echo "socket-activate.sh: no --socket-path= given" >&2; exit 2; }
exec systemd-socket-activate --listen="$sock" --fdname=vhostfs "$bin" "${args[@]}"
