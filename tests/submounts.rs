//! Filesystems mounted below the shared directory: visible to the guest in every sandbox mode
//! and file-handle mode, announced as submounts (FUSE_ATTR_SUBMOUNT) unless
//! `--no-announce-submounts`, a filesystem without file handles (overlayfs) served through O_PATH
//! fds in `prefer` and refused in `mandatory`, and mounts the host adds or removes below a
//! shared share while the daemon serves (propagation into the namespace sandbox).
//! The real-guest counterpart with xfs, btrfs, tmpfs, overlayfs and a bind mount:
//! `tests/e2e/submounts.sh`.

mod common;

use std::fs;
use std::time::{Duration, Instant};

use common::fuse_abi::*;
use common::{FuseClient, Mount, Session, TempDir};

/// A share with a tmpfs at `tmp/` holding `f`; returns the share and the mount guard.
fn share_with_tmpfs() -> (TempDir, Mount) {
    let shared = TempDir::new("submounts-shared").unwrap();
    fs::write(shared.join("base"), b"on the base fs").unwrap();
    let m = Mount::tmpfs_at(&shared.join("tmp"), "");
    fs::write(shared.join("tmp/f"), b"in the tmpfs").unwrap();
    (shared, m)
}

fn read_all(c: &FuseClient, nodeid: u64) -> Vec<u8> {
    let o = c.open(nodeid, libc::O_RDONLY as u32).expect("open");
    let data = c.read(nodeid, o.fh, 0, 4096).expect("read");
    c.release(nodeid, o.fh, libc::O_RDONLY as u32).unwrap();
    data
}

/// LOOKUP `tmp` then `tmp/f` and READ it; returns the `tmp` entry's attr flags.
fn read_through_submount(c: &FuseClient) -> u32 {
    let dir = c
        .lookup(FUSE_ROOT_ID, "tmp")
        .expect("lookup of the mount point");
    let f = c.lookup(dir.nodeid, "f").expect("lookup in the submount");
    assert_eq!(read_all(c, f.nodeid), b"in the tmpfs");
    dir.attr.flags
}

fn check_mode(sandbox: &str, handles: &str) {
    let (shared, m) = share_with_tmpfs();
    let tmp_path = shared.join("tmp");
    let s = Session::start_on_share(
        shared,
        &[
            &format!("--sandbox={sandbox}"),
            &format!("--inode-file-handles={handles}"),
        ],
    );
    let c = &s.client;
    let flags = read_through_submount(c);
    assert_eq!(
        flags & FUSE_ATTR_SUBMOUNT,
        FUSE_ATTR_SUBMOUNT,
        "{sandbox}/{handles}: the mount point is announced"
    );
    let base = c.lookup(FUSE_ROOT_ID, "base").unwrap();
    assert_eq!(base.attr.flags & FUSE_ATTR_SUBMOUNT, 0);
    // A file the guest creates in the submount lands on the host's tmpfs, not under it.
    let dir = c.lookup(FUSE_ROOT_ID, "tmp").unwrap();
    let (e, o) = c
        .create(dir.nodeid, "new", 0o644, libc::O_RDWR as u32, 0)
        .unwrap();
    assert_eq!(c.write(e.nodeid, o.fh, 0, b"guest").unwrap(), 5);
    c.release(e.nodeid, o.fh, 0).unwrap();
    assert_eq!(fs::read(tmp_path.join("new")).unwrap(), b"guest");
    // Unmounted (detached) before the share goes: a mount in it would leave it in /tmp.
    drop(m);
    drop(s);
}

#[test]
fn namespace_sandbox_sees_submounts_in_every_handle_mode() {
    for handles in ["prefer", "never", "mandatory"] {
        check_mode("namespace", handles);
    }
}

#[test]
fn chroot_and_no_sandbox_see_submounts() {
    for sandbox in ["chroot", "none"] {
        for handles in ["prefer", "never", "mandatory"] {
            check_mode(sandbox, handles);
        }
    }
}

#[test]
fn no_announce_submounts_serves_them_unflagged() {
    let (shared, m) = share_with_tmpfs();
    let s = Session::start_on_share(shared, &["--no-announce-submounts"]);
    assert_eq!(read_through_submount(&s.client) & FUSE_ATTR_SUBMOUNT, 0);
    drop(m);
}

#[test]
fn an_overlay_without_handles_is_served_by_fds_in_prefer_and_refused_in_mandatory() {
    let layers = TempDir::new("submounts-layers").unwrap();
    for (i, (handles, sandbox)) in [
        ("prefer", "none"),
        ("prefer", "namespace"),
        ("mandatory", "namespace"),
    ]
    .into_iter()
    .enumerate()
    {
        let shared = TempDir::new("submounts-shared").unwrap();
        fs::write(shared.join("base"), b"on the base fs").unwrap();
        let work = layers.join(&i.to_string());
        let m = Mount::overlay(&shared.join("ovl"), &work);
        let s = Session::start_on_share(
            shared,
            &[
                &format!("--inode-file-handles={handles}"),
                &format!("--sandbox={sandbox}"),
            ],
        );
        let c = &s.client;
        match handles {
            "prefer" => {
                let dir = c
                    .lookup(FUSE_ROOT_ID, "ovl")
                    .expect("lookup of the overlay");
                assert_eq!(dir.attr.flags & FUSE_ATTR_SUBMOUNT, FUSE_ATTR_SUBMOUNT);
                let f = c.lookup(dir.nodeid, "from-lower").unwrap();
                assert_eq!(read_all(c, f.nodeid), b"lower layer");
                let (e, o) = c
                    .create(dir.nodeid, "up", 0o644, libc::O_RDWR as u32, 0)
                    .unwrap();
                c.release(e.nodeid, o.fh, 0).unwrap();
                assert!(work.join("upper/up").exists(), "written to the upper layer");
            }
            _ => {
                // No handles there: the overlay is refused with one errno, twice the same, and
                // the rest of the share is served.
                for _ in 0..2 {
                    assert_eq!(c.lookup(FUSE_ROOT_ID, "ovl").err(), Some(libc::EOPNOTSUPP));
                }
                let b = c.lookup(FUSE_ROOT_ID, "base").unwrap();
                assert_eq!(read_all(c, b.nodeid), b"on the base fs");
            }
        }
        let mut s = s;
        assert!(s.daemon.is_alive());
        drop(m);
    }
}

/// Polls `f` for up to 10 s until it returns true.
fn eventually(mut f: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + Duration::from_secs(10);
    while Instant::now() < end {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

#[test]
fn host_mounts_below_a_shared_share_come_and_go_while_serving() {
    for sandbox in ["namespace", "chroot", "none"] {
        let shared = TempDir::new("submounts-shared").unwrap();
        fs::create_dir(shared.join("live")).unwrap();
        let bind = Mount::shared_bind(shared.path());
        let live = shared.join("live");
        let s = Session::start_on_share(shared, &[&format!("--sandbox={sandbox}")]);
        let c = &s.client;
        let before = c.lookup(FUSE_ROOT_ID, "live").unwrap();
        assert_eq!(c.lookup(before.nodeid, "f").err(), Some(libc::ENOENT));
        let m = Mount::tmpfs_at(&live, "");
        fs::write(live.join("f"), b"in the tmpfs").unwrap();
        // The guest re-looks the name up when its entry times out.
        let after = c.lookup(FUSE_ROOT_ID, "live").unwrap();
        assert_ne!(
            after.nodeid, before.nodeid,
            "{sandbox}: the mount point is a new node"
        );
        assert_eq!(after.attr.flags & FUSE_ATTR_SUBMOUNT, FUSE_ATTR_SUBMOUNT);
        let f = c
            .lookup(after.nodeid, "f")
            .expect("a file of the new mount");
        assert_eq!(read_all(c, f.nodeid), b"in the tmpfs");
        drop(m);
        assert!(
            eventually(
                || c.lookup(FUSE_ROOT_ID, "live").map(|e| e.nodeid).ok() == Some(before.nodeid)
            ),
            "{sandbox}: the unmounted filesystem is still served"
        );
        assert_eq!(c.lookup(before.nodeid, "f").err(), Some(libc::ENOENT));
        let mut s = s;
        assert!(s.daemon.is_alive());
        drop(bind);
    }
}
