//! Requests the Windows guest service (virtio-win's virtiofs.exe) sends that a daemon must
//! accept (issue 34 item 2; `shared/notes/windows-guest.md`, "Requests a daemon must accept"):
//! `LOOKUP(1, ".")` opens the share, `LOOKUP(1, "")` and `LOOKUP(1, "..")` start the walk of an
//! absolute or `../` symlink target and must not leave the share; GETATTR with FUSE_GETATTR_FH
//! and fh 0 (a symlink, which the service never opens), RELEASE and RELEASEDIR of fh 0;
//! READLINK with a 300-byte reply buffer; CREATE without O_CREAT; SETATTR with the S_IFDIR bits
//! in the mode and FATTR_CTIME; FORGET with a count larger than the lookups. In both
//! `--inode-file-handles` modes that reach inodes differently.

mod common;

use std::fs;
use std::os::unix::fs::MetadataExt;

use common::fuse_abi::*;
use common::Session;

const FH_MODES: [&str; 2] = ["--inode-file-handles=prefer", "--inode-file-handles=never"];

#[test]
fn the_share_root_and_dot_names_stay_in_the_share() {
    for fh_mode in FH_MODES {
        let s = Session::start(&[fh_mode]);
        let c = &s.client;
        fs::create_dir_all(s.shared.join("d/e")).unwrap();
        let root_ino = fs::metadata(s.shared.path()).unwrap().ino();
        for name in [".", "", ".."] {
            let e = c.lookup(ROOT, name).expect(name);
            assert_eq!(e.nodeid, ROOT, "{fh_mode} LOOKUP(1, {name:?})");
            assert_eq!(e.attr.ino, root_ino, "{fh_mode} LOOKUP(1, {name:?})");
            assert_eq!(e.attr.mode & libc::S_IFMT, libc::S_IFDIR);
        }
        let d = c.lookup(ROOT, "d").unwrap();
        let e = c.lookup(d.nodeid, "e").unwrap();
        assert_eq!(
            c.lookup(d.nodeid, ".").unwrap().nodeid,
            d.nodeid,
            "{fh_mode}"
        );
        assert_eq!(
            c.lookup(d.nodeid, "").unwrap().nodeid,
            d.nodeid,
            "{fh_mode}"
        );
        assert_eq!(c.lookup(d.nodeid, "..").unwrap().nodeid, ROOT, "{fh_mode}");
        assert_eq!(
            c.lookup(e.nodeid, "..").unwrap().nodeid,
            d.nodeid,
            "{fh_mode}"
        );
        // Still a single name component: no path.
        assert_eq!(c.lookup(ROOT, "d/e").err(), Some(libc::EINVAL));
        assert_eq!(c.lookup(ROOT, "./d").err(), Some(libc::EINVAL));
        // A file has no entries.
        fs::write(s.shared.join("f"), b"x").unwrap();
        let f = c.lookup(ROOT, "f").unwrap();
        assert_eq!(c.lookup(f.nodeid, ".").err(), Some(libc::ENOTDIR));

        // The service never gives these lookups back; a FORGET of more than it looked up, of
        // the root or a file, changes nothing the guest still uses.
        c.forget(ROOT, 1_000_000);
        c.forget(f.nodeid, 1_000_000);
        assert_eq!(
            c.getattr(ROOT, None).unwrap().attr.ino,
            root_ino,
            "{fh_mode}"
        );
        assert_eq!(c.lookup(ROOT, ".").unwrap().nodeid, ROOT);
        assert!(c.lookup(ROOT, "f").is_ok(), "{fh_mode}");
    }
}

#[test]
fn handle_zero_names_no_handle() {
    for fh_mode in FH_MODES {
        let s = Session::start(&[fh_mode]);
        let c = &s.client;
        fs::create_dir(s.shared.join("d")).unwrap();
        fs::write(s.shared.join("d/f"), b"data").unwrap();
        std::os::unix::fs::symlink("d/f", s.shared.join("l")).unwrap();
        let l = c.lookup(ROOT, "l").unwrap();
        let d = c.lookup(ROOT, "d").unwrap();
        let f = c.lookup(d.nodeid, "f").unwrap();
        // GETATTR(FUSE_GETATTR_FH, fh 0): the node's own attributes.
        let a = c
            .getattr(l.nodeid, Some(0))
            .expect("GETATTR(FH 0) of a symlink");
        assert_eq!(a.attr.mode & libc::S_IFMT, libc::S_IFLNK, "{fh_mode}");
        let a = c
            .getattr(d.nodeid, Some(0))
            .expect("GETATTR(FH 0) of a directory");
        assert_eq!(a.attr.mode & libc::S_IFMT, libc::S_IFDIR, "{fh_mode}");
        assert_eq!(c.getattr(f.nodeid, Some(0)).unwrap().attr.size, 4);
        // And with a directory handle.
        let dh = c.opendir(d.nodeid, 0).unwrap();
        let a = c
            .getattr(d.nodeid, Some(dh.fh))
            .expect("GETATTR(FH) of a directory");
        assert_eq!(a.attr.mode & libc::S_IFMT, libc::S_IFDIR);
        // RELEASE and RELEASEDIR of fh 0: nothing to release, no error.
        assert_eq!(c.release(l.nodeid, 0, 0), Ok(()), "{fh_mode}");
        assert_eq!(
            c.raw(FUSE_RELEASEDIR, d.nodeid, &[0u8; 24], 16).map(drop),
            Ok(()),
            "{fh_mode}"
        );
        // A real handle is still needed where one is named: an unknown one is EBADF.
        assert_eq!(c.getattr(f.nodeid, Some(9999)).err(), Some(libc::EBADF));
        c.releasedir(d.nodeid, dh.fh).unwrap();
    }
}

#[test]
fn the_services_readlink_create_and_setattr_forms() {
    let s = Session::start(&[]);
    let c = &s.client;
    fs::create_dir(s.shared.join("d")).unwrap();
    let target = "d/".to_string() + &"t".repeat(250);
    std::os::unix::fs::symlink(&target, s.shared.join("l")).unwrap();
    let l = c.lookup(ROOT, "l").unwrap();
    // READLINK with the service's 300-byte request (260 bytes of reply after the header).
    let got = c.raw(FUSE_READLINK, l.nodeid, &[], 300).expect("READLINK");
    assert_eq!(got, target.as_bytes());
    // CREATE with the access mode and O_EXCL, no O_CREAT, mode without S_IFREG.
    let d = c.lookup(ROOT, "d").unwrap();
    let flags = (libc::O_RDWR | libc::O_EXCL) as u32;
    let (e, o) = c
        .create(d.nodeid, "new.txt", 0o664, flags, 0)
        .expect("CREATE");
    assert_eq!(e.attr.mode, libc::S_IFREG | 0o664);
    assert_eq!(
        c.create(d.nodeid, "new.txt", 0o664, flags, 0).err(),
        Some(libc::EEXIST)
    );
    c.fallocate(e.nodeid, o.fh, 0, 8192, 1)
        .expect("FALLOCATE KEEP_SIZE");
    // SetBasicInfo: mode (with S_IFDIR for a directory), times and FATTR_CTIME.
    let basic = |mode| SetattrIn {
        valid: FATTR_MODE | FATTR_ATIME | FATTR_MTIME | FATTR_CTIME,
        mode,
        atime: 1_600_000_000,
        mtime: 1_600_000_001,
        ..Default::default()
    };
    let a = c
        .setattr(d.nodeid, &basic(libc::S_IFDIR | 0o775))
        .expect("SETATTR dir");
    assert_eq!(a.attr.mode, libc::S_IFDIR | 0o775);
    let a = c.setattr(e.nodeid, &basic(0o444)).expect("SETATTR file");
    assert_eq!(
        (a.attr.mode, a.attr.mtime),
        (libc::S_IFREG | 0o444, 1_600_000_001)
    );
    c.release(e.nodeid, o.fh, flags).unwrap();
}
