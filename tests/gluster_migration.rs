//! A VM that moves between hosts on a GlusterFS share (issue 35 item 4), with the test guest as
//! QEMU: the source vhostfs serves a directory on mount A of a replicated volume
//! (tests/common/gluster.rs), the destination the same directory on mount B, the "other host";
//! the host's kernel forgets its inodes (drop_caches) between the save and the load, as memory
//! pressure on the destination host would.
//!
//! The guest holds every file by node ID and some open, migrates, and then reads each file
//! through the node ID it held, byte for byte, and writes through the open ones: mount A shows
//! exactly those writes. In each `--migration-mode`: `file-handles` cannot move FUSE inodes by
//! their handles (a FUSE handle names the node ID that mount's GlusterFS client gave, which means
//! nothing, or another file, on the other mount), so the source sends their paths;
//! `--migration-verify-handles` sends no FUSE handle to compare either.
//!
//! Each test starts its own glusterd and volume (see tests/common/gluster.rs): ~8-10 s each.

mod common;

use std::fs;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use common::gluster::Gluster;
use common::{Daemon, FuseClient, TempDir, TestGuest};

/// Files the guest holds.
const FILES: usize = 100;
/// Every this many files, one the guest keeps open for writing.
const OPEN_EVERY: usize = 10;
const LEN: usize = 48;
const RDONLY: u32 = libc::O_RDONLY as u32;
const RDWR: u32 = libc::O_RDWR as u32;
const MIB: usize = 1 << 20;

fn name(i: usize) -> String {
    format!("f{i:03}")
}

fn contents(i: usize) -> Vec<u8> {
    format!("{:<LEN$}", format!("file {i}")).into_bytes()
}

fn written(i: usize) -> Vec<u8> {
    format!("{:<LEN$}", format!("written on the destination to {i}")).into_bytes()
}

fn vhostfs(socket: &Path, share: &Path, args: &[&str]) -> Daemon {
    let bin =
        std::env::var_os("VHOSTFS_BIN").unwrap_or_else(|| env!("CARGO_BIN_EXE_vhostfs").into());
    let mut cmd = Command::new(&bin);
    cmd.arg(format!("--socket-path={}", socket.display()))
        .arg(format!("--shared-dir={}", share.display()))
        .arg("--log-level=error")
        .args(args);
    Daemon::spawn(&mut cmd, socket).unwrap_or_else(|e| panic!("cannot start {bin:?}: {e}"))
}

/// Source on mount A, destination on mount B, both with `args`; the guest holds every file,
/// migrates, and everything it held reads and writes the right file on the destination.
fn moves_from_a_to_b(args: &[&str]) {
    let g = Gluster::start();
    let (a, b) = (g.mount_a.join("share"), g.mount_b.join("share"));
    fs::create_dir(&a).unwrap();
    for i in 0..FILES {
        fs::write(a.join(name(i)), contents(i)).unwrap();
    }
    let sock_dir = TempDir::new("gluster-mig").unwrap();
    let (src_sock, dst_sock) = (sock_dir.join("src.sock"), sock_dir.join("dst.sock"));
    let _source = vhostfs(&src_sock, &a, args);
    let _dest = vhostfs(&dst_sock, &b, args);

    let guest = TestGuest::connect(&src_sock, 1, 256, 16 * MIB).expect("vhost-user set-up");
    let c = FuseClient::new(Arc::new(guest), 0);
    c.init().expect("FUSE_INIT");
    let mut held = Vec::new();
    for i in 0..FILES {
        let e = c.lookup(1, &name(i)).unwrap();
        let fh = (i % OPEN_EVERY == 0).then(|| c.open(e.nodeid, RDWR).unwrap().fh);
        held.push((e.nodeid, e.attr.ino, fh));
    }

    let saved = c.guest().save_state().expect("save on the source");
    let (queue, flags) = (c.queue(), c.flags());
    let guest = Arc::clone(c.guest());
    drop(c);
    fs::write("/proc/sys/vm/drop_caches", "3").unwrap();
    let moved = TestGuest::migrate(guest, &dst_sock, &saved)
        .unwrap_or_else(|e| panic!("the destination on mount B refused the state ({args:?}): {e}"));
    let c = FuseClient::resumed(Arc::new(moved), queue, flags);

    let mut wrong = Vec::new();
    for (i, &(nodeid, ino, fh)) in held.iter().enumerate() {
        match c.getattr(nodeid, None) {
            Ok(a) if a.attr.ino == ino => {}
            Ok(a) => wrong.push(format!(
                "{}: inode {} instead of {ino}",
                name(i),
                a.attr.ino
            )),
            Err(e) => wrong.push(format!("{}: GETATTR {e}", name(i))),
        }
        let read = c
            .open(nodeid, RDONLY)
            .and_then(|o| c.read(nodeid, o.fh, 0, 4096));
        match read {
            Ok(data) if data == contents(i) => {}
            Ok(data) => wrong.push(format!(
                "{}: read {:?}",
                name(i),
                String::from_utf8_lossy(&data)
            )),
            Err(e) => wrong.push(format!("{}: OPEN/READ {e}", name(i))),
        }
        if let Some(fh) = fh {
            if let Err(e) = c.write(nodeid, fh, 0, &written(i)) {
                wrong.push(format!("{}: WRITE through the held fh: {e}", name(i)));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "after the move from mount A to mount B ({args:?}), {} of {FILES} files wrong: {wrong:?}",
        wrong.len()
    );
    for i in 0..FILES {
        let want = if i % OPEN_EVERY == 0 {
            written(i)
        } else {
            contents(i)
        };
        assert_eq!(
            fs::read(a.join(name(i))).unwrap(),
            want,
            "{} on mount A",
            name(i)
        );
    }
}

#[test]
fn file_handles_mode_moves_fuse_inodes_by_path() {
    moves_from_a_to_b(&["--migration-mode=file-handles"]);
}

#[test]
fn find_paths_with_verify_handles_moves_between_mounts() {
    moves_from_a_to_b(&["--migration-mode=find-paths", "--migration-verify-handles"]);
}

#[test]
fn kubevirt_line_moves_between_mounts() {
    moves_from_a_to_b(&[
        "--sandbox=none",
        "--cache=auto",
        "--migration-on-error=guest-error",
        "--migration-mode=find-paths",
    ]);
}
