//! The same file operations in each `--inode-file-handles` mode: `never` reaches inodes through
//! O_PATH fds (re-opened via /proc/self/fd), `prefer` and `mandatory` through file handles. Every
//! operation that opens an inode for I/O goes through a different path per mode.

mod common;

use std::fs;
use std::os::unix::fs::MetadataExt;

use common::fuse_abi::*;
use common::Session;

fn exercise(mode: &str) {
    let s = Session::start(&[&format!("--inode-file-handles={mode}"), "--xattr"]);
    let c = &s.client;
    fs::write(s.shared.join("host.txt"), b"written by the host").unwrap();
    fs::create_dir(s.shared.join("dir")).unwrap();

    // Existing file: OPEN for reading and for writing, READ, WRITE.
    let f = c.lookup(ROOT, "host.txt").expect("lookup");
    let ro = c
        .open(f.nodeid, RDONLY)
        .unwrap_or_else(|e| panic!("{mode}: open O_RDONLY: errno {e}"));
    assert_eq!(
        c.read(f.nodeid, ro.fh, 0, 100).unwrap(),
        b"written by the host"
    );
    c.release(f.nodeid, ro.fh, 0).unwrap();
    let rw = c
        .open(f.nodeid, RDWR)
        .unwrap_or_else(|e| panic!("{mode}: open O_RDWR: errno {e}"));
    assert_eq!(c.write(f.nodeid, rw.fh, 0, b"WRITTEN").unwrap(), 7);
    c.release(f.nodeid, rw.fh, 0).unwrap();
    assert_eq!(
        fs::read(s.shared.join("host.txt")).unwrap(),
        b"WRITTEN by the host"
    );

    // SETATTR size without an fh opens the inode itself.
    let attr = set_size(3);
    assert_eq!(c.setattr(f.nodeid, &attr).expect("truncate").attr.size, 3);
    assert_eq!(fs::read(s.shared.join("host.txt")).unwrap(), b"WRI");

    // Directories: OPENDIR + READDIRPLUS, and creating inside a looked-up directory.
    let d = c.lookup(ROOT, "dir").expect("lookup dir");
    let (e, o) = c
        .create(d.nodeid, "new", 0o600, RDWR, 0)
        .expect("create in dir");
    c.write(e.nodeid, o.fh, 0, b"new file").unwrap();
    c.release(e.nodeid, o.fh, 0).unwrap();
    let dh = c.opendir(d.nodeid, 0).expect("opendir");
    let names: Vec<String> = c
        .readdirplus(d.nodeid, dh.fh, 0, 4096)
        .expect("readdirplus")
        .into_iter()
        .map(|e| String::from_utf8(e.dirent.name).unwrap())
        .collect();
    assert!(names.contains(&"new".to_string()), "{mode}: {names:?}");
    c.releasedir(d.nodeid, dh.fh).unwrap();

    // Hard link: one node ID; xattrs and SYNCFS open the inode too.
    let l = c.link(e.nodeid, ROOT, "hardlink").expect("link");
    assert_eq!(l.nodeid, e.nodeid);
    assert_eq!(fs::metadata(s.shared.join("hardlink")).unwrap().nlink(), 2);
    c.setxattr(f.nodeid, "user.mode", mode.as_bytes(), 0)
        .expect("setxattr");
    c.syncfs().expect("syncfs");
    c.rename(d.nodeid, "new", ROOT, "moved").expect("rename");
    c.unlink(ROOT, "moved").expect("unlink");
    assert_eq!(fs::read(s.shared.join("hardlink")).unwrap(), b"new file");
}

#[test]
fn never_mode_opens_through_proc_self_fd() {
    exercise("never");
}

#[test]
fn prefer_mode_opens_through_file_handles() {
    exercise("prefer");
}

#[test]
fn mandatory_mode_opens_through_file_handles() {
    exercise("mandatory");
}
