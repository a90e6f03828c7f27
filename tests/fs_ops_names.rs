//! Every name and attribute operation of vhostfs (INIT, DESTROY, LOOKUP, FORGET, BATCH_FORGET,
//! GETATTR, SETATTR, READLINK, SYMLINK, MKNOD, MKDIR, UNLINK, RMDIR, RENAME, RENAME2, LINK,
//! INTERRUPT, unknown opcodes), each checked on the reply and on the host directory; ownership
//! and mode of created files; confinement of names and symlinks; exit on disconnect.

mod common;
#[path = "fs_ops_names/confinement.rs"]
mod confinement;
#[path = "fs_ops_names/ownership.rs"]
mod ownership;
#[path = "fs_ops_names/session.rs"]
mod session;

use std::fs;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::fuse_abi::*;
use common::{FuseClient, Session};

/// Linux `new_encode_dev()`: the u32 device number in FUSE MKNOD and `fuse_attr.rdev`.
fn encode_dev(major: u32, minor: u32) -> u32 {
    (minor & 0xff) | (major << 8) | ((minor & !0xff) << 12)
}

fn mode_bits(mode: u32) -> u32 {
    mode & 0o7777
}

#[test]
fn init_negotiates_and_destroy_allows_a_new_init() {
    let s = Session::start(&[]);
    let c = &s.client;
    let check = |init: &InitOut| {
        assert_eq!((init.major, init.minor), (7, 38));
        assert_eq!(init.max_write, 1 << 20);
        assert_eq!(init.max_pages, 256);
        let flags = u64::from(init.flags) | (u64::from(init.flags2) << 32);
        for want in [
            FUSE_ASYNC_READ,
            FUSE_PARALLEL_DIROPS,
            FUSE_BIG_WRITES,
            FUSE_AUTO_INVAL_DATA,
            FUSE_ASYNC_DIO,
            FUSE_MAX_PAGES,
            FUSE_SUBMOUNTS,
            FUSE_DO_READDIRPLUS,
            FUSE_READDIRPLUS_AUTO,
        ] {
            assert_ne!(flags & want, 0, "INIT flag {want:#x} not negotiated");
        }
        // Offered but declined: the guest truncates with SETATTR after its ETXTBSY check
        // (tests/posix_gaps.rs).
        assert_eq!(
            flags & FUSE_ATOMIC_O_TRUNC,
            0,
            "FUSE_ATOMIC_O_TRUNC negotiated"
        );
        // Only what the guest offered comes back.
        assert_eq!(flags & !LINUX_6_12_VIRTIOFS_INIT_FLAGS, 0);
    };
    check(&s.init);

    fs::write(s.shared.join("f"), b"x").unwrap();
    let old = c.lookup(ROOT, "f").unwrap();
    c.destroy().expect("DESTROY");
    // Outside a session the daemon refuses everything but INIT.
    assert_eq!(c.lookup(ROOT, "f").err(), Some(libc::EIO));

    let again = c.init().expect("INIT after DESTROY");
    check(&again);
    // DESTROY forgot every node ID; the name can be looked up again.
    assert_eq!(c.getattr(old.nodeid, None).err(), Some(libc::EBADF));
    let e = c.lookup(ROOT, "f").expect("LOOKUP in the new session");
    assert_eq!(e.attr.ino, fs::metadata(s.shared.join("f")).unwrap().ino());
    c.getattr(e.nodeid, None)
        .expect("GETATTR in the new session");

    // A guest offering little gets only what it offered, and no max_pages without MAX_PAGES.
    c.destroy().unwrap();
    let small = c
        .init_with(FUSE_ASYNC_READ | FUSE_POSIX_LOCKS | FUSE_EXPORT_SUPPORT)
        .expect("INIT with few flags");
    assert_eq!((small.flags, small.flags2), (FUSE_ASYNC_READ as u32, 0));
    assert_eq!(small.max_pages, 0);
    c.getattr(ROOT, None).expect("GETATTR in the third session");
}

#[test]
fn lookup_getattr_and_forget() {
    let s = Session::start(&[]);
    let c = &s.client;
    fs::write(s.shared.join("f"), b"hello").unwrap();
    fs::set_permissions(s.shared.join("f"), fs::Permissions::from_mode(0o604)).unwrap();
    let host = fs::metadata(s.shared.join("f")).unwrap();

    let e = c.lookup(ROOT, "f").expect("LOOKUP");
    assert!(e.nodeid != 0 && e.nodeid != ROOT);
    assert_eq!(e.attr.ino, host.ino());
    assert_eq!(e.attr.size, 5);
    assert_eq!(e.attr.mode, libc::S_IFREG | 0o604);
    assert_eq!((e.attr.uid, e.attr.gid), (host.uid(), host.gid()));
    assert_eq!(c.lookup(ROOT, "missing").err(), Some(libc::ENOENT));
    assert_eq!(
        c.lookup(e.nodeid, "below-a-file").err(),
        Some(libc::ENOTDIR)
    );

    // A re-lookup returns the same node ID (and takes a second lookup).
    let e2 = c.lookup(ROOT, "f").unwrap();
    assert_eq!(e2.nodeid, e.nodeid);

    let a = c.getattr(e.nodeid, None).expect("GETATTR");
    assert_eq!(
        (a.attr.ino, a.attr.size, a.attr.mode),
        (host.ino(), 5, e.attr.mode)
    );
    assert_eq!(a.attr.mtime as i64, host.mtime());
    // With FUSE_GETATTR_FH the open file is asked, even if it was renamed on the host meanwhile.
    let o = c.open(e.nodeid, libc::O_RDONLY as u32).unwrap();
    fs::rename(s.shared.join("f"), s.shared.join("g")).unwrap();
    fs::write(s.shared.join("f"), b"another file").unwrap();
    let a = c.getattr(e.nodeid, Some(o.fh)).expect("GETATTR with fh");
    assert_eq!((a.attr.ino, a.attr.size), (host.ino(), 5));
    assert_eq!(
        c.getattr(e.nodeid, Some(o.fh + 1000)).err(),
        Some(libc::EBADF)
    );
    c.release(e.nodeid, o.fh, libc::O_RDONLY as u32).unwrap();

    // Two lookups: one FORGET leaves it alive, the second kills it.
    c.forget(e.nodeid, 1);
    c.getattr(e.nodeid, None).expect("one lookup left");
    c.forget(e.nodeid, 1);
    assert_eq!(c.getattr(e.nodeid, None).err(), Some(libc::EBADF));
    // LOOKUP works again and gives a working node ID.
    let back = c.lookup(ROOT, "g").expect("LOOKUP after FORGET");
    assert_eq!(back.attr.ino, host.ino());
    assert_eq!(c.getattr(back.nodeid, None).unwrap().attr.ino, host.ino());

    // BATCH_FORGET of several nodes at once, with counts.
    fs::write(s.shared.join("h"), b"").unwrap();
    let h = c.lookup(ROOT, "h").unwrap();
    c.lookup(ROOT, "h").unwrap();
    let g2 = c.lookup(ROOT, "g").unwrap();
    assert_eq!(g2.nodeid, back.nodeid);
    c.batch_forget(&[(h.nodeid, 1), (back.nodeid, 2)]);
    c.getattr(h.nodeid, None).expect("h has one lookup left");
    assert_eq!(c.getattr(back.nodeid, None).err(), Some(libc::EBADF));
    c.batch_forget(&[(h.nodeid, 1)]);
    assert_eq!(c.getattr(h.nodeid, None).err(), Some(libc::EBADF));
    // The root is never forgotten.
    c.forget(ROOT, 100);
    assert_eq!(
        c.getattr(ROOT, None).unwrap().attr.mode & libc::S_IFMT,
        libc::S_IFDIR
    );
}

#[test]
fn setattr_with_and_without_fh() {
    let s = Session::start(&[]);
    let c = &s.client;
    let path = s.shared.join("f");
    fs::write(&path, b"0123456789").unwrap();
    let e = c.lookup(ROOT, "f").unwrap();

    // Mode, without fh.
    let a = c
        .setattr(e.nodeid, &set_mode(libc::S_IFREG | 0o4751))
        .expect("SETATTR mode");
    assert_eq!(a.attr.mode, libc::S_IFREG | 0o4751);
    assert_eq!(fs::metadata(&path).unwrap().mode(), libc::S_IFREG | 0o4751);

    // Owner and group, each alone and together.
    let set_owner = |valid, uid, gid| {
        let attr = SetattrIn {
            valid,
            uid,
            gid,
            ..Default::default()
        };
        c.setattr(e.nodeid, &attr).expect("SETATTR uid/gid")
    };
    let a = set_owner(FATTR_UID | FATTR_GID, 1000, 1001);
    assert_eq!((a.attr.uid, a.attr.gid), (1000, 1001));
    let a = set_owner(FATTR_GID, 7, 2002);
    assert_eq!((a.attr.uid, a.attr.gid), (1000, 2002));
    let m = fs::metadata(&path).unwrap();
    assert_eq!((m.uid(), m.gid()), (1000, 2002));

    // Size, without fh and through an open file.
    let a = c.setattr(e.nodeid, &set_size(3)).expect("SETATTR size");
    assert_eq!(a.attr.size, 3);
    assert_eq!(fs::read(&path).unwrap(), b"012");
    let o = c.open(e.nodeid, libc::O_RDWR as u32).unwrap();
    let a = c
        .setattr(e.nodeid, &with_fh(set_size(8192), o.fh))
        .expect("SETATTR size via fh");
    assert_eq!(a.attr.size, 8192);
    assert_eq!(fs::metadata(&path).unwrap().len(), 8192);

    // Explicit times, without fh, then through the fh.
    let a = c
        .setattr(e.nodeid, &set_times((1_000_000_000, 5), (1_100_000_000, 7)))
        .expect("SETATTR times");
    assert_eq!((a.attr.atime, a.attr.atimensec), (1_000_000_000, 5));
    assert_eq!((a.attr.mtime, a.attr.mtimensec), (1_100_000_000, 7));
    let m = fs::metadata(&path).unwrap();
    assert_eq!((m.atime(), m.atime_nsec()), (1_000_000_000, 5));
    assert_eq!((m.mtime(), m.mtime_nsec()), (1_100_000_000, 7));
    // Only mtime, via fh: atime is left alone.
    c.setattr(
        e.nodeid,
        &SetattrIn {
            valid: FATTR_MTIME | FATTR_FH,
            fh: o.fh,
            mtime: 1_200_000_000,
            ..Default::default()
        },
    )
    .expect("SETATTR mtime via fh");
    let m = fs::metadata(&path).unwrap();
    assert_eq!(
        (m.atime(), m.mtime(), m.mtime_nsec()),
        (1_000_000_000, 1_200_000_000, 0)
    );

    // NOW for both.
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let a = c
        .setattr(e.nodeid, &set_times_now())
        .expect("SETATTR times NOW");
    let m = fs::metadata(&path).unwrap();
    for t in [
        m.atime(),
        m.mtime(),
        a.attr.atime as i64,
        a.attr.mtime as i64,
    ] {
        assert!((t - now).abs() <= 5, "time {t} is not now ({now})");
    }

    // Mode through the fh.
    c.setattr(e.nodeid, &with_fh(set_mode(libc::S_IFREG | 0o600), o.fh))
        .expect("SETATTR mode via fh");
    assert_eq!(mode_bits(fs::metadata(&path).unwrap().mode()), 0o600);
    c.release(e.nodeid, o.fh, libc::O_RDWR as u32).unwrap();

    // A stale fh is refused, and so is an unknown node.
    let stale = with_fh(set_size(1), o.fh);
    assert_eq!(c.setattr(e.nodeid, &stale).err(), Some(libc::EBADF));
    assert_eq!(fs::metadata(&path).unwrap().len(), 8192);
    assert_eq!(
        c.setattr(0xdead_0000, &SetattrIn::default()).err(),
        Some(libc::EBADF)
    );
}

#[test]
fn symlink_and_readlink() {
    let s = Session::start(&[]);
    let c = &s.client;
    let e = c.symlink(ROOT, "l", "some/where/../x").expect("SYMLINK");
    assert_eq!(e.attr.mode & libc::S_IFMT, libc::S_IFLNK);
    assert_eq!(e.attr.size, "some/where/../x".len() as u64);
    let host = fs::symlink_metadata(s.shared.join("l")).unwrap();
    assert!(host.file_type().is_symlink());
    assert_eq!(host.ino(), e.attr.ino);
    assert_eq!(
        fs::read_link(s.shared.join("l")).unwrap().to_str(),
        Some("some/where/../x")
    );
    assert_eq!(c.readlink(e.nodeid).expect("READLINK"), b"some/where/../x");
    assert_eq!(c.symlink(ROOT, "l", "other").err(), Some(libc::EEXIST));

    fs::write(s.shared.join("f"), b"").unwrap();
    let f = c.lookup(ROOT, "f").unwrap();
    assert_eq!(c.readlink(f.nodeid).err(), Some(libc::EINVAL));
}

#[test]
fn mknod_fifo_and_char_device() {
    let s = Session::start(&[]);
    let c = &s.client;
    let e = c
        .mknod(ROOT, "fifo", libc::S_IFIFO | 0o640, 0, 0o022)
        .expect("MKNOD fifo");
    assert_eq!(e.attr.mode, libc::S_IFIFO | 0o640);
    let host = fs::symlink_metadata(s.shared.join("fifo")).unwrap();
    assert!(host.file_type().is_fifo());
    assert_eq!(host.mode(), libc::S_IFIFO | 0o640);
    assert_eq!(host.ino(), e.attr.ino);

    // A char device with a minor above 255 (exercises the split minor encoding); we are root.
    let rdev = encode_dev(10, 300);
    let e = c
        .mknod(ROOT, "chr", libc::S_IFCHR | 0o600, rdev, 0)
        .expect("MKNOD char device");
    assert_eq!(e.attr.mode, libc::S_IFCHR | 0o600);
    assert_eq!(e.attr.rdev, rdev);
    let host = fs::symlink_metadata(s.shared.join("chr")).unwrap();
    assert!(host.file_type().is_char_device());
    assert_eq!(host.rdev(), libc::makedev(10, 300));

    assert_eq!(
        c.mknod(ROOT, "fifo", libc::S_IFIFO | 0o600, 0, 0).err(),
        Some(libc::EEXIST)
    );
}

#[test]
fn mkdir_unlink_rmdir() {
    let s = Session::start(&[]);
    let c = &s.client;
    let d = c.mkdir(ROOT, "d", 0o750, 0o022).expect("MKDIR");
    assert_eq!(d.attr.mode, libc::S_IFDIR | 0o750);
    assert_eq!(d.attr.nlink, 2);
    let host = fs::metadata(s.shared.join("d")).unwrap();
    assert!(host.is_dir());
    assert_eq!(mode_bits(host.mode()), 0o750);
    assert_eq!(host.ino(), d.attr.ino);
    assert_eq!(c.mkdir(ROOT, "d", 0o755, 0).err(), Some(libc::EEXIST));

    // A subdirectory made through the daemon bumps the parent's nlink on the host.
    let sub = c
        .mkdir(d.nodeid, "sub", 0o700, 0)
        .expect("MKDIR in a subdir");
    assert_eq!(fs::metadata(s.shared.join("d")).unwrap().nlink(), 3);
    fs::write(s.shared.join("d/sub/file"), b"x").unwrap();

    assert_eq!(c.rmdir(d.nodeid, "sub").err(), Some(libc::ENOTEMPTY));
    assert!(s.shared.join("d/sub/file").exists());
    assert_eq!(c.unlink(d.nodeid, "sub").err(), Some(libc::EISDIR));
    assert_eq!(c.rmdir(sub.nodeid, "file").err(), Some(libc::ENOTDIR));
    c.unlink(sub.nodeid, "file").expect("UNLINK");
    assert!(!s.shared.join("d/sub/file").exists());
    assert_eq!(c.unlink(sub.nodeid, "file").err(), Some(libc::ENOENT));
    c.rmdir(d.nodeid, "sub").expect("RMDIR");
    assert!(!s.shared.join("d/sub").exists());
    assert_eq!(c.rmdir(d.nodeid, "sub").err(), Some(libc::ENOENT));
    c.rmdir(ROOT, "d").expect("RMDIR d");
    assert_eq!(fs::read_dir(s.shared.path()).unwrap().count(), 0);
}

#[test]
fn rename_and_rename2() {
    let s = Session::start(&[]);
    let c = &s.client;
    fs::create_dir(s.shared.join("d")).unwrap();
    fs::write(s.shared.join("a"), b"A").unwrap();
    fs::write(s.shared.join("b"), b"B").unwrap();
    let d = c.lookup(ROOT, "d").unwrap();
    let a = c.lookup(ROOT, "a").unwrap();
    let b = c.lookup(ROOT, "b").unwrap();

    // Plain RENAME across directories: the node ID travels with the inode.
    c.rename(ROOT, "a", d.nodeid, "a2").expect("RENAME");
    assert!(!s.shared.join("a").exists());
    assert_eq!(fs::read(s.shared.join("d/a2")).unwrap(), b"A");
    assert_eq!(c.lookup(d.nodeid, "a2").unwrap().nodeid, a.nodeid);
    assert_eq!(c.rename(ROOT, "a", ROOT, "x").err(), Some(libc::ENOENT));

    // RENAME2 with RENAME_NOREPLACE onto an existing name.
    assert_eq!(
        c.rename2(d.nodeid, "a2", ROOT, "b", libc::RENAME_NOREPLACE)
            .err(),
        Some(libc::EEXIST)
    );
    assert_eq!(fs::read(s.shared.join("b")).unwrap(), b"B");
    assert_eq!(fs::read(s.shared.join("d/a2")).unwrap(), b"A");
    c.rename2(d.nodeid, "a2", ROOT, "c", libc::RENAME_NOREPLACE)
        .expect("RENAME_NOREPLACE to a free name");
    assert_eq!(fs::read(s.shared.join("c")).unwrap(), b"A");

    // RENAME_EXCHANGE swaps the two names.
    c.rename2(ROOT, "b", ROOT, "c", libc::RENAME_EXCHANGE)
        .expect("RENAME_EXCHANGE");
    assert_eq!(fs::read(s.shared.join("b")).unwrap(), b"A");
    assert_eq!(fs::read(s.shared.join("c")).unwrap(), b"B");
    assert_eq!(c.lookup(ROOT, "b").unwrap().nodeid, a.nodeid);
    assert_eq!(c.lookup(ROOT, "c").unwrap().nodeid, b.nodeid);
    assert_eq!(
        c.rename2(ROOT, "b", ROOT, "nothing", libc::RENAME_EXCHANGE)
            .err(),
        Some(libc::ENOENT)
    );

    // Plain RENAME replaces.
    c.rename(ROOT, "b", ROOT, "c").expect("RENAME over a file");
    assert_eq!(fs::read(s.shared.join("c")).unwrap(), b"A");
    assert!(!s.shared.join("b").exists());
    // Unknown flags are refused.
    assert_eq!(
        c.rename2(ROOT, "c", ROOT, "e", 1 << 7).err(),
        Some(libc::EINVAL)
    );
    assert!(s.shared.join("c").exists());
}

#[test]
fn hard_link_has_the_same_node_id() {
    let s = Session::start(&[]);
    let c = &s.client;
    fs::write(s.shared.join("f"), b"data").unwrap();
    let f = c.lookup(ROOT, "f").unwrap();
    let l = c.link(f.nodeid, ROOT, "g").expect("LINK");
    assert_eq!(l.nodeid, f.nodeid);
    assert_eq!(l.attr.nlink, 2);
    assert_eq!(l.attr.ino, f.attr.ino);
    let (hf, hg) = (
        fs::metadata(s.shared.join("f")).unwrap(),
        fs::metadata(s.shared.join("g")).unwrap(),
    );
    assert_eq!((hf.nlink(), hg.ino()), (2, hf.ino()));
    assert_eq!(c.lookup(ROOT, "g").unwrap().nodeid, f.nodeid);
    assert_eq!(c.getattr(f.nodeid, None).unwrap().attr.nlink, 2);
    assert_eq!(c.link(f.nodeid, ROOT, "g").err(), Some(libc::EEXIST));

    let d = c.mkdir(ROOT, "d", 0o755, 0).unwrap();
    assert_eq!(c.link(d.nodeid, ROOT, "d2").err(), Some(libc::EPERM));
    assert!(!s.shared.join("d2").exists());
    c.link(f.nodeid, d.nodeid, "h").expect("LINK into a subdir");
    assert_eq!(fs::metadata(s.shared.join("f")).unwrap().nlink(), 3);
}
