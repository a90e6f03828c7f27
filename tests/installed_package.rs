//! The vhostfs that the Debian package put on this machine, run by tests/package/deb.sh with
//! `VHOSTFS_INSTALLED=/usr/bin/vhostfs`, and with `/usr/libexec/virtiofsd` once
//! vhostfs-as-virtiofsd diverts it: its `--version`, and the test guest served over
//! `--socket-path` and over `--fd` with the argv Proxmox VE gives the daemon at that path.
//! Ignored by a plain `cargo test`: it needs the package installed (as root).

mod common;

use std::os::fd::AsRawFd;
use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::process::Command;

use common::smoke::{inherit_fd, serve_until_exit};
use common::TempDir;

fn installed() -> PathBuf {
    std::env::var_os("VHOSTFS_INSTALLED")
        .map(PathBuf::from)
        .expect("VHOSTFS_INSTALLED: the installed binary (tests/package/deb.sh sets it)")
}

#[test]
#[ignore = "needs the .deb installed: run by tests/package/deb.sh"]
fn installed_binary_serves_the_test_guest() {
    let bin = installed();
    let out = Command::new(&bin).arg("--version").output().unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("vhostfs {}", env!("CARGO_PKG_VERSION")),
        "{} is not this build's vhostfs",
        bin.display()
    );

    let shared = TempDir::new("installed-shared").unwrap();
    let dir = TempDir::new("installed-sock").unwrap();

    let socket = dir.join("path.sock");
    let mut cmd = Command::new(&bin);
    cmd.arg(format!("--socket-path={}", socket.display()))
        .arg(format!("--shared-dir={}", shared.path().display()));
    serve_until_exit(&mut cmd, &socket, shared.path(), |_| {});

    // Proxmox VE's argv (tests/launchers.rs): a socket it listens on, passed as --fd.
    let socket = dir.join("fd.sock");
    let listener = UnixListener::bind(&socket).unwrap();
    let fd = listener.as_raw_fd();
    let mut cmd = Command::new(&bin);
    cmd.arg(format!("--fd={fd}"))
        .arg(format!("--shared-dir={}", shared.path().display()))
        .args([
            "--announce-submounts",
            "--cache=auto",
            "--inode-file-handles=prefer",
            "--syslog",
        ]);
    inherit_fd(&mut cmd, fd, fd);
    serve_until_exit(&mut cmd, &socket, shared.path(), |_| {});
}
