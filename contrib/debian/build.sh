#!/bin/sh
# Builds the Debian packages with cargo-deb (`cargo install --locked cargo-deb`, see .ci/setup):
#   target/debian/vhostfs_VERSION-1_ARCH.deb               the daemon, man page, completions,
#                                                          systemd units, QEMU vhost-user.json
#   target/debian/vhostfs-as-virtiofsd_VERSION-1_ARCH.deb  /usr/libexec/virtiofsd -> vhostfs
# Prints the two paths. See docs/packaging.md.
set -eu
cd "$(dirname "$0")/../.."
target=${CARGO_TARGET_DIR:-target}

cargo build --locked --release --bin vhostfs
# The man page and completions come from the command line, not the build profile: a debug
# vhostfs-gen is enough.
cargo build --locked --features gen --bin vhostfs-gen
rm -rf "$target/gen"
"$target/debug/vhostfs-gen" "$target/gen" >/dev/null

cargo deb --locked --no-build --quiet
cargo deb --locked --no-build --quiet --variant=as-virtiofsd
