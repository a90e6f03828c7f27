//! Errors of the host filesystem reach the guest as they are, and the daemon goes on serving:
//! a full tmpfs (ENOSPC, out of space and out of inodes), a tmpfs remounted read-only under the
//! running daemon (EROFS), and files and directories the host deletes, renames or replaces
//! while the guest holds their node IDs and open handles (in both `--inode-file-handles` modes).
//!
//! EIO is not tested: producing it needs a failing block device (device-mapper `error` target,
//! a yanked loop device), which is too much machinery for this suite.

mod common;

use std::ffi::CString;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use common::fuse_abi::*;
use common::{Mount, Session};

const KIB: usize = 1 << 10;
const HANDLE_MODES: [&str; 2] = ["--inode-file-handles=never", "--inode-file-handles=prefer"];
/// Both modes, and `prefer` without the fd cache: then no fd of the daemon keeps a deleted
/// file's inode number from being reused (ext4 reuses it at once).
const REUSE_MODES: [&[&str]; 3] = [
    &["--inode-file-handles=never"],
    &["--inode-file-handles=prefer"],
    &["--inode-file-handles=prefer", "--fd-cache-size=0"],
];

/// WRITEs of 64 KiB at increasing offsets until one fails; returns the bytes written and the
/// error.
fn write_until_error(c: &common::FuseClient, nodeid: u64, fh: u64) -> (usize, i32) {
    let chunk = vec![0x5a; 64 * KIB];
    let mut written = 0;
    for _ in 0..64 {
        match c.write(nodeid, fh, written as u64, &chunk) {
            Ok(n) => written += n as usize,
            Err(e) => return (written, e),
        }
    }
    panic!("{written} bytes written to a 1 MiB tmpfs without an error");
}

#[test]
fn full_tmpfs_gives_enospc_and_space_freed_on_the_host_is_usable_again() {
    let fs = Mount::tmpfs("size=1m,mode=0755");
    let mut s = Session::start_in(fs.path(), &[]);
    let c = &s.client;
    let (e, o) = c.create(ROOT, "big", 0o644, RDWR, 0).unwrap();
    // A write that only partly fits is short; the next one gets ENOSPC.
    let (written, errno) = write_until_error(c, e.nodeid, o.fh);
    assert_eq!(errno, libc::ENOSPC);
    assert!(written > 0 && written <= 1 << 20, "{written} bytes");
    assert_eq!(
        fs::metadata(s.shared.join("big")).unwrap().len(),
        written as u64
    );
    // Data written before the error is intact.
    assert_eq!(c.read(e.nodeid, o.fh, 0, 16).unwrap(), vec![0x5a; 16]);
    c.release(e.nodeid, o.fh, RDWR).unwrap();
    // Nothing fits now, not even one byte in another file.
    let (small, so) = c.create(ROOT, "small", 0o644, RDWR, 0).unwrap();
    assert_eq!(
        c.write(small.nodeid, so.fh, 0, &[1; 4 * KIB]).err(),
        Some(libc::ENOSPC)
    );
    // The host deletes the big file: the guest can write again.
    fs::remove_file(s.shared.join("big")).unwrap();
    let data = vec![7u8; 256 * KIB];
    assert_eq!(
        c.write(small.nodeid, so.fh, 0, &data).unwrap(),
        data.len() as u32
    );
    assert_eq!(fs::read(s.shared.join("small")).unwrap(), data);
    assert!(s.daemon.is_alive());
}

/// Bytes in use on the filesystem of `path`.
fn used_bytes(path: &Path) -> u64 {
    let c = CString::new(path.as_os_str().as_bytes()).unwrap();
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::zeroed();
    // SAFETY: a valid C string and a writable statvfs.
    assert_eq!(unsafe { libc::statvfs(c.as_ptr(), st.as_mut_ptr()) }, 0);
    // SAFETY: statvfs filled it.
    let st = unsafe { st.assume_init() };
    (st.f_blocks - st.f_bfree) * st.f_frsize
}

/// Writes a 512 KiB file `name` and releases it; the guest keeps its node (no FORGET), and the
/// daemon its cached fd (GETATTR).
fn half_meg(c: &common::FuseClient, name: &str) -> u64 {
    let (e, o) = c.create(ROOT, name, 0o644, RDWR, 0).unwrap();
    for i in 0..8 {
        let n = c.write(e.nodeid, o.fh, (i * 64 * KIB) as u64, &[1; 64 * KIB]);
        assert_eq!(n, Ok(64 * KIB as u32));
    }
    c.release(e.nodeid, o.fh, RDWR).unwrap();
    assert_eq!(c.getattr(e.nodeid, None).unwrap().attr.size, 512 << 10);
    e.nodeid
}

#[test]
fn deleted_files_give_their_space_back_while_the_guest_holds_their_nodes() {
    let fs = Mount::tmpfs("size=4m,mode=0755");
    let mut s = Session::start_in(fs.path(), &["--inode-file-handles=prefer"]);
    let c = &s.client;
    let empty = used_bytes(fs.path());
    // Unlinked by the guest: freed at once.
    half_meg(c, "a");
    assert!(used_bytes(fs.path()) >= empty + (512 << 10));
    c.unlink(ROOT, "a").unwrap();
    assert!(used_bytes(fs.path()) < empty + (64 << 10), "UNLINK");
    // Renamed over by the guest: freed at once.
    half_meg(c, "b");
    c.create(ROOT, "c", 0o644, RDWR, 0).unwrap();
    c.rename(ROOT, "c", ROOT, "b").unwrap();
    assert!(used_bytes(fs.path()) < empty + (64 << 10), "RENAME");
    // Deleted by the host: freed by the next GETATTR of the node (which is then stale).
    let d = half_meg(c, "d");
    fs::remove_file(s.shared.join("d")).unwrap();
    assert_eq!(c.getattr(d, None).err(), Some(libc::ESTALE));
    assert!(used_bytes(fs.path()) < empty + (64 << 10), "host unlink");
    assert!(s.daemon.is_alive());
}

#[test]
fn tmpfs_out_of_inodes_gives_enospc_on_create_and_mkdir() {
    let fs = Mount::tmpfs("size=1m,nr_inodes=16,mode=0755");
    let mut s = Session::start_in(fs.path(), &[]);
    let c = &s.client;
    let mut created = Vec::new();
    let errno = loop {
        let name = format!("f{}", created.len());
        match c.create(ROOT, &name, 0o644, RDWR, 0) {
            Ok((e, o)) => {
                c.release(e.nodeid, o.fh, RDWR).unwrap();
                created.push(name);
            }
            Err(errno) => break errno,
        }
        assert!(created.len() <= 16, "more files than nr_inodes=16");
    };
    assert_eq!(errno, libc::ENOSPC, "after {} files", created.len());
    assert!(!created.is_empty());
    assert_eq!(c.mkdir(ROOT, "d", 0o755, 0).err(), Some(libc::ENOSPC));
    assert_eq!(c.symlink(ROOT, "l", "t").err(), Some(libc::ENOSPC));
    // An unlink by the guest frees an inode: one more create works.
    c.unlink(ROOT, &created[0]).unwrap();
    c.mkdir(ROOT, "d", 0o755, 0).unwrap();
    assert!(s.shared.join("d").is_dir());
    assert!(s.daemon.is_alive());
}

#[test]
fn tmpfs_remounted_read_only_under_the_daemon_gives_erofs() {
    for sandbox in ["--sandbox=namespace", "--sandbox=none"] {
        let fs = Mount::tmpfs("size=1m,mode=0755");
        let mut s = Session::start_in(fs.path(), &[sandbox]);
        let c = &s.client;
        fs::write(s.shared.join("f"), b"content").unwrap();
        fs::create_dir(s.shared.join("d")).unwrap();
        fs::write(s.shared.join("d/inner"), b"x").unwrap();
        let f = c.lookup(ROOT, "f").unwrap();
        let d = c.lookup(ROOT, "d").unwrap();
        let ro = c.open(f.nodeid, RDONLY).unwrap();
        fs.remount_ro();

        assert_eq!(
            c.create(ROOT, "new", 0o644, RDWR, 0).err(),
            Some(libc::EROFS),
            "{sandbox}"
        );
        assert_eq!(c.mkdir(d.nodeid, "sub", 0o755, 0).err(), Some(libc::EROFS));
        assert_eq!(c.open(f.nodeid, RDWR).err(), Some(libc::EROFS));
        let chmod = set_mode(libc::S_IFREG | 0o600);
        assert_eq!(c.setattr(f.nodeid, &chmod).err(), Some(libc::EROFS));
        assert_eq!(c.unlink(d.nodeid, "inner").err(), Some(libc::EROFS));
        assert_eq!(c.rename(ROOT, "f", d.nodeid, "f2").err(), Some(libc::EROFS));
        // Reading goes on: the handle opened before, a new one, attributes, listings.
        assert_eq!(c.read(f.nodeid, ro.fh, 0, 64).unwrap(), b"content");
        let again = c.open(f.nodeid, RDONLY).unwrap();
        assert_eq!(c.read(f.nodeid, again.fh, 3, 64).unwrap(), b"tent");
        assert_eq!(c.getattr(f.nodeid, None).unwrap().attr.size, 7);
        let od = c.opendir(d.nodeid, 0).unwrap();
        let names: Vec<Vec<u8>> = c
            .readdir(d.nodeid, od.fh, 0, 4096)
            .unwrap()
            .into_iter()
            .map(|e| e.name)
            .collect();
        assert!(names.contains(&b"inner".to_vec()), "{sandbox}: {names:?}");
        assert_eq!(c.lookup(d.nodeid, "inner").unwrap().attr.size, 1);
        assert_eq!(fs::read_dir(s.shared.path()).unwrap().count(), 2);
        assert!(s.daemon.is_alive(), "{sandbox}");
    }
}

#[test]
fn file_unlinked_on_the_host_stays_readable_through_its_open_handle() {
    for mode in HANDLE_MODES {
        let mut s = Session::start(&[mode]);
        let c = &s.client;
        fs::write(s.shared.join("f"), b"before").unwrap();
        let f = c.lookup(ROOT, "f").unwrap();
        let o = c.open(f.nodeid, RDWR).unwrap();
        fs::remove_file(s.shared.join("f")).unwrap();

        assert_eq!(c.lookup(ROOT, "f").err(), Some(libc::ENOENT), "{mode}");
        assert_eq!(c.getattr(f.nodeid, Some(o.fh)).unwrap().attr.nlink, 0);
        assert_eq!(c.read(f.nodeid, o.fh, 0, 64).unwrap(), b"before");
        assert_eq!(c.write(f.nodeid, o.fh, 6, b"+after").unwrap(), 6);
        assert_eq!(c.read(f.nodeid, o.fh, 0, 64).unwrap(), b"before+after");
        c.release(f.nodeid, o.fh, RDWR).unwrap();
        // Without an open file: the O_PATH fd of `never` still holds the inode (nlink 0); the
        // handle of `prefer` names a deleted inode, which the host refuses to open (ESTALE).
        let attr = c.getattr(f.nodeid, None);
        if mode.ends_with("never") {
            assert_eq!(attr.unwrap().attr.nlink, 0, "{mode}");
            assert_eq!(c.open(f.nodeid, RDONLY).err(), None, "{mode}");
        } else {
            assert_eq!(attr.err(), Some(libc::ESTALE), "{mode}");
            assert_eq!(c.open(f.nodeid, RDONLY).err(), Some(libc::ESTALE));
        }
        // A new file of the same name is a new node, even when the host reuses the deleted
        // inode's number (ext4 does at once): the stale node does not shadow it.
        fs::write(s.shared.join("f"), b"new").unwrap();
        let n = c.lookup(ROOT, "f").unwrap();
        assert_ne!(n.nodeid, f.nodeid, "{mode}");
        let o = c.open(n.nodeid, RDONLY).expect(mode);
        assert_eq!(c.read(n.nodeid, o.fh, 0, 64).unwrap(), b"new");
        // Forgetting the stale node leaves the name's node alone.
        c.forget(f.nodeid, 1);
        assert_eq!(c.lookup(ROOT, "f").unwrap().nodeid, n.nodeid, "{mode}");
        assert_eq!(c.getattr(n.nodeid, None).unwrap().attr.size, 3);
        assert!(s.daemon.is_alive(), "{mode}");
    }
}

#[test]
fn directory_renamed_on_the_host_keeps_its_node_id() {
    for mode in HANDLE_MODES {
        let mut s = Session::start(&[mode]);
        let c = &s.client;
        fs::create_dir_all(s.shared.join("a/d")).unwrap();
        fs::create_dir(s.shared.join("b")).unwrap();
        fs::write(s.shared.join("a/d/x"), b"x").unwrap();
        let a = c.lookup(ROOT, "a").unwrap();
        let d = c.lookup(a.nodeid, "d").unwrap();
        fs::rename(s.shared.join("a/d"), s.shared.join("b/d2")).unwrap();

        // Node IDs follow the inode, not the name.
        let x = c.lookup(d.nodeid, "x").expect(mode);
        assert_eq!(
            x.attr.ino,
            fs::metadata(s.shared.join("b/d2/x")).unwrap().ino()
        );
        c.mkdir(d.nodeid, "made", 0o755, 0).unwrap();
        assert!(s.shared.join("b/d2/made").is_dir(), "{mode}");
        assert_eq!(c.lookup(a.nodeid, "d").err(), Some(libc::ENOENT), "{mode}");
        let b = c.lookup(ROOT, "b").unwrap();
        assert_eq!(c.lookup(b.nodeid, "d2").unwrap().nodeid, d.nodeid, "{mode}");
        assert!(s.daemon.is_alive(), "{mode}");
    }
}

#[test]
fn file_replaced_on_the_host_is_a_new_node() {
    for mode in HANDLE_MODES {
        let mut s = Session::start(&[mode]);
        let c = &s.client;
        fs::write(s.shared.join("f"), b"old").unwrap();
        let old = c.lookup(ROOT, "f").unwrap();
        fs::write(s.shared.join("f.new"), b"new!").unwrap();
        fs::rename(s.shared.join("f.new"), s.shared.join("f")).unwrap();

        let new = c.lookup(ROOT, "f").unwrap();
        assert_ne!(new.nodeid, old.nodeid, "{mode}");
        assert_ne!(new.attr.ino, old.attr.ino);
        assert_eq!(new.attr.size, 4);
        let o = c.open(new.nodeid, RDONLY).unwrap();
        assert_eq!(c.read(new.nodeid, o.fh, 0, 16).unwrap(), b"new!");
        // The old node is the replaced inode: kept by `never`'s fd, gone for `prefer`.
        let attr = c.getattr(old.nodeid, None);
        if mode.ends_with("never") {
            let attr = attr.unwrap().attr;
            assert_eq!((attr.nlink, attr.size), (0, 3), "{mode}");
        } else {
            assert_eq!(attr.err(), Some(libc::ESTALE), "{mode}");
        }
        assert!(s.daemon.is_alive(), "{mode}");
    }
}

#[test]
fn a_held_name_looked_up_again_follows_the_host() {
    // The guest holds a node and looks its name up again and again (with handles, after a few
    // such lookups answered from the name's statx and handle, without opening it): whatever
    // the host did to the name in between shows.
    for args in REUSE_MODES {
        let s = Session::start(args);
        let mode = args.join(" ");
        let c = &s.client;
        let f = s.shared.join("f");
        fs::write(&f, b"one").unwrap();
        let a = c.lookup(ROOT, "f").unwrap();
        for _ in 0..5 {
            assert_eq!(c.lookup(ROOT, "f").unwrap().nodeid, a.nodeid, "{mode}");
        }
        // Another file renamed over the name: its own node, with its attributes.
        fs::write(s.shared.join("g"), b"two!").unwrap();
        fs::rename(s.shared.join("g"), &f).unwrap();
        let b = c.lookup(ROOT, "f").unwrap();
        assert_ne!(b.nodeid, a.nodeid, "{mode}");
        let ino = fs::metadata(&f).unwrap().ino();
        assert_eq!((b.attr.ino, b.attr.size), (ino, 4), "{mode}");
        assert_eq!(c.lookup(ROOT, "f").unwrap().nodeid, b.nodeid, "{mode}");
        // Deleted, and a new file of the name (ext4 gives it the deleted inode's number at
        // once): a new node, not the held one of the same number.
        fs::remove_file(&f).unwrap();
        assert_eq!(c.lookup(ROOT, "f").err(), Some(libc::ENOENT), "{mode}");
        fs::write(&f, b"three").unwrap();
        let n = c.lookup(ROOT, "f").unwrap();
        assert_ne!(
            n.nodeid, b.nodeid,
            "{mode}: inode {ino} again? {}",
            n.attr.ino
        );
        assert_eq!(n.attr.size, 5, "{mode}");
        assert_eq!(c.lookup(ROOT, "f").unwrap().nodeid, n.nodeid, "{mode}");
        // A symlink in its place: the symlink's node, not what it points to.
        fs::remove_file(&f).unwrap();
        std::os::unix::fs::symlink("/etc", &f).unwrap();
        let l = c.lookup(ROOT, "f").unwrap();
        assert_eq!(l.attr.mode & libc::S_IFMT, libc::S_IFLNK, "{mode}");
        assert_eq!(c.lookup(ROOT, "f").unwrap().nodeid, l.nodeid, "{mode}");
        // Every lookup counted once: each node dies at its last FORGET.
        for (node, lookups) in [(a.nodeid, 6), (b.nodeid, 2), (n.nodeid, 2), (l.nodeid, 2)] {
            c.forget(node, lookups - 1);
            assert_ne!(c.getattr(node, None).err(), Some(libc::EBADF), "{mode}");
            c.forget(node, 1);
            assert_eq!(c.getattr(node, None).err(), Some(libc::EBADF), "{mode}");
        }
    }
}

/// The entries of one READDIRPLUS of the root: name → (node ID, inode number), without `.`
/// and `..` (which carry no entry).
fn listing(c: &common::FuseClient) -> std::collections::BTreeMap<String, (u64, u64)> {
    let dh = c.opendir(ROOT, 0).unwrap();
    let all = c.readdirplus(ROOT, dh.fh, 0, 64 * KIB as u32).unwrap();
    c.releasedir(ROOT, dh.fh).unwrap();
    all.into_iter()
        .filter(|p| p.entry.nodeid != 0)
        .map(|p| {
            let name = String::from_utf8(p.dirent.name).unwrap();
            (name, (p.entry.nodeid, p.entry.attr.ino))
        })
        .collect()
}

#[test]
fn a_listing_of_held_names_follows_the_host() {
    // READDIRPLUS of names whose inodes the guest holds (with handles, answered from each
    // name's statx and handle): the held nodes, each lookup counted; and a name the host
    // deleted and made again (ext4 reuses the number at once) gets a new node.
    for args in REUSE_MODES {
        let s = Session::start(args);
        let mode = args.join(" ");
        let c = &s.client;
        let names = ["f0", "f1", "f2"];
        for n in names {
            fs::write(s.shared.join(n), n).unwrap();
        }
        let held: Vec<u64> = names
            .iter()
            .map(|n| c.lookup(ROOT, n).unwrap().nodeid)
            .collect();
        let first = listing(c);
        for (n, id) in names.iter().zip(&held) {
            assert_eq!(first[*n].0, *id, "{mode}: {n}");
        }
        fs::remove_file(s.shared.join("f1")).unwrap();
        fs::write(s.shared.join("f1"), b"new").unwrap();
        let ino = fs::metadata(s.shared.join("f1")).unwrap().ino();
        let second = listing(c);
        assert_eq!(
            (second["f0"].0, second["f2"].0),
            (held[0], held[2]),
            "{mode}"
        );
        assert_ne!(second["f1"].0, held[1], "{mode}: inode {ino}");
        assert_eq!(second["f1"].1, ino, "{mode}");
        // f0: one LOOKUP and two listings.
        c.forget(held[0], 2);
        assert_ne!(c.getattr(held[0], None).err(), Some(libc::EBADF), "{mode}");
        c.forget(held[0], 1);
        assert_eq!(c.getattr(held[0], None).err(), Some(libc::EBADF), "{mode}");
    }
}
