#!/bin/sh
# Time-boxed fuzzing of the FUSE dispatcher, for CI: fuzz/run-ci.sh [SECONDS] (default 300).
# Fails (non-zero) on the first crash or broken invariant; the input is left in
# fuzz/artifacts/dispatcher/. Needs cargo-fuzz (`cargo install cargo-fuzz`); on a stable
# toolchain the sanitizer flags go through RUSTC_BOOTSTRAP=1. New corpus entries go to a
# temporary directory, not to the checked-in corpus.
set -eu
cd "$(dirname "$0")"
secs=${1:-300}
if ! command -v cargo-fuzz >/dev/null 2>&1; then
    echo "fuzz/run-ci.sh: cargo-fuzz is missing: cargo install cargo-fuzz" >&2
    exit 2
fi
work=$(mktemp -d)
mkdir "$work/corpus" "$work/scratch"
cleanup() {
    if mountpoint -q "$work/scratch"; then umount "$work/scratch"; fi
    rm -rf "$work"
}
trap cleanup EXIT INT TERM
# The guest may FALLOCATE or grow files: as root, give the scratch share a small tmpfs.
if [ "$(id -u)" = 0 ]; then
    mount -t tmpfs -o size=64m vhostfs-fuzz "$work/scratch"
fi
VHOSTFS_FUZZ_DIR="$work/scratch" RUSTC_BOOTSTRAP=1 \
    cargo fuzz run dispatcher "$work/corpus" corpus/dispatcher -- \
    -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
