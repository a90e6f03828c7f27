#!/bin/sh
# Builds and installs vhostfs with its man page, shell completions, systemd units and QEMU
# vhost-user.json.
#
#   contrib/install.sh                       # as root: into /usr (units into /usr/lib/systemd)
#   DESTDIR=/tmp/pkg contrib/install.sh      # staged, e.g. for a package
#   PREFIX=/usr/local contrib/install.sh     # the units and the JSON then name /usr/local/bin
#   PROFILE=dev contrib/install.sh           # a debug build (the tests use it)
#
# Then: systemctl daemon-reload; see docs/qemu.md and contrib/proxmox/README.md.
set -eu
cd "$(dirname "$0")/.."
PREFIX=${PREFIX:-/usr}
DESTDIR=${DESTDIR:-}
PROFILE=${PROFILE:-release}
case $PROFILE in dev) out=debug ;; *) out=$PROFILE ;; esac
target=${CARGO_TARGET_DIR:-target}

cargo build --locked --profile "$PROFILE" --features gen --bin vhostfs --bin vhostfs-gen
gen=$target/gen
"$target/$out/vhostfs-gen" "$gen" >/dev/null

bin=$PREFIX/bin/vhostfs
install -Dm0755 "$target/$out/vhostfs" "$DESTDIR$bin"
install -Dm0644 "$gen/man1/vhostfs.1" "$DESTDIR$PREFIX/share/man/man1/vhostfs.1"
install -Dm0644 "$gen/completions/vhostfs.bash" \
    "$DESTDIR$PREFIX/share/bash-completion/completions/vhostfs"
install -Dm0644 "$gen/completions/_vhostfs" "$DESTDIR$PREFIX/share/zsh/vendor-completions/_vhostfs"
install -Dm0644 "$gen/completions/vhostfs.fish" \
    "$DESTDIR$PREFIX/share/fish/vendor_completions.d/vhostfs.fish"
# The units and the JSON name the binary by its installed path.
for f in systemd/vhostfs@.socket systemd/vhostfs@.service qemu/50-vhostfs.json; do
    case $f in
        systemd/*) dest=$DESTDIR$PREFIX/lib/systemd/system/${f#systemd/} ;;
        qemu/*) dest=$DESTDIR$PREFIX/share/qemu/vhost-user/${f#qemu/} ;;
    esac
    mkdir -p "$(dirname "$dest")"
    sed "s|/usr/bin/vhostfs|$bin|g" "contrib/$f" > "$dest"
    chmod 0644 "$dest"
done
install -d -m0755 "$DESTDIR/etc/vhostfs"
echo "installed vhostfs into ${DESTDIR:-/}${DESTDIR:+ }(prefix $PREFIX)"
