//! Every file, directory and data operation of vhostfs (OPEN, CREATE, TMPFILE, READ, WRITE,
//! FLUSH, RELEASE, FSYNC, OPENDIR, READDIR, READDIRPLUS, RELEASEDIR, FSYNCDIR, STATFS, ACCESS,
//! FALLOCATE, LSEEK, COPY_FILE_RANGE, SYNCFS, STATX, the xattr operations), each checked on the
//! reply and on the host directory; `--readonly`, `--cache`, and four request queues at once.

mod common;
#[path = "fs_ops_data/dirs.rs"]
mod dirs;
#[path = "fs_ops_data/options.rs"]
mod options;
#[path = "fs_ops_data/xattrs.rs"]
mod xattrs;

use std::collections::BTreeSet;
use std::ffi::CString;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::UNIX_EPOCH;

use common::fuse_abi::*;
use common::fuse_client::XattrReply;
use common::Session;

const MIB: usize = 1 << 20;

/// Deterministic test data.
fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// The value of xattr `name` of `path` on the host, if it has one.
fn host_xattr(path: &Path, name: &str) -> Option<Vec<u8>> {
    let p = CString::new(path.as_os_str().as_bytes()).unwrap();
    let n = CString::new(name).unwrap();
    let mut buf = vec![0u8; 4096];
    // SAFETY: C strings and a writable buffer of buf.len() bytes.
    let len = unsafe { libc::getxattr(p.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    (len >= 0).then(|| {
        buf.truncate(len as usize);
        buf
    })
}

#[test]
fn create_open_read_write_flush_fsync_release() {
    let s = Session::start(&[]);
    let c = &s.client;
    let path = s.shared.join("f");
    let (e, o) = c.create(ROOT, "f", 0o644, RDWR, 0).expect("CREATE");
    assert_eq!(e.attr.mode, libc::S_IFREG | 0o644);
    assert_eq!(e.attr.size, 0);
    assert_eq!(fs::metadata(&path).unwrap().ino(), e.attr.ino);

    // O_EXCL on an existing name, and CREATE under a file.
    let excl = RDWR | libc::O_CREAT as u32 | libc::O_EXCL as u32;
    assert_eq!(
        c.create(ROOT, "f", 0o644, excl, 0).err(),
        Some(libc::EEXIST)
    );
    assert_eq!(
        c.create(e.nodeid, "x", 0o644, RDWR, 0).err(),
        Some(libc::ENOTDIR)
    );

    // 1 MiB in one WRITE, then a write at an offset past the end (a hole in between).
    let big = pattern(MIB, 1);
    assert_eq!(
        c.write(e.nodeid, o.fh, 0, &big).expect("1 MiB WRITE"),
        MIB as u32
    );
    assert_eq!(fs::read(&path).unwrap(), big);
    let tail = pattern(1000, 2);
    assert_eq!(
        c.write(e.nodeid, o.fh, 3 * MIB as u64, &tail).unwrap(),
        1000
    );
    let host = fs::read(&path).unwrap();
    assert_eq!(host.len(), 3 * MIB + 1000);
    assert!(host[MIB..3 * MIB].iter().all(|&b| b == 0));
    assert_eq!(&host[3 * MIB..], &tail[..]);
    // Overwrite in the middle.
    c.write(e.nodeid, o.fh, 100, b"middle").unwrap();
    assert_eq!(&fs::read(&path).unwrap()[100..106], b"middle");

    // READ: 1 MiB at once, at offsets, across the end and past it.
    let r = c.read(e.nodeid, o.fh, 0, MIB as u32).expect("1 MiB READ");
    assert_eq!(r.len(), MIB);
    assert_eq!(&r[..100], &big[..100]);
    assert_eq!(&r[100..106], b"middle");
    assert_eq!(&r[106..], &big[106..]);
    assert_eq!(
        c.read(e.nodeid, o.fh, 3 * MIB as u64 + 900, 4096).unwrap(),
        &tail[900..]
    );
    assert!(c
        .read(e.nodeid, o.fh, 4 * MIB as u64, 4096)
        .unwrap()
        .is_empty());
    // Data written on the host is read back.
    fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .and_then(|f| std::os::unix::fs::FileExt::write_at(&f, b"HOST", 10))
        .unwrap();
    assert_eq!(c.read(e.nodeid, o.fh, 10, 4).unwrap(), b"HOST");

    c.flush(e.nodeid, o.fh, 0x1234).expect("FLUSH");
    c.fsync(e.nodeid, o.fh, false).expect("FSYNC");
    c.fsync(e.nodeid, o.fh, true).expect("FSYNC datasync");
    c.release(e.nodeid, o.fh, RDWR).expect("RELEASE");
    assert_eq!(c.read(e.nodeid, o.fh, 0, 16).err(), Some(libc::EBADF));
    assert_eq!(c.write(e.nodeid, o.fh, 0, b"x").err(), Some(libc::EBADF));
    assert_eq!(c.flush(e.nodeid, o.fh, 0).err(), Some(libc::EBADF));
    assert_eq!(c.fsync(e.nodeid, o.fh, false).err(), Some(libc::EBADF));
    assert_eq!(c.release(e.nodeid, o.fh, RDWR).err(), Some(libc::EBADF));

    // OPEN read-only: reads work, writes do not.
    let ro = c.open(e.nodeid, RDONLY).expect("OPEN");
    assert_eq!(c.read(e.nodeid, ro.fh, 100, 6).unwrap(), b"middle");
    assert_eq!(c.write(e.nodeid, ro.fh, 0, b"x").err(), Some(libc::EBADF));
    c.release(e.nodeid, ro.fh, RDONLY).unwrap();
    // OPEN with O_TRUNC truncates (a guest strips O_TRUNC, as FUSE_ATOMIC_O_TRUNC is not
    // negotiated, but a client that sends it gets what open(2) does).
    let tr = c
        .open(e.nodeid, libc::O_WRONLY as u32 | libc::O_TRUNC as u32)
        .expect("OPEN O_TRUNC");
    assert_eq!(fs::metadata(&path).unwrap().len(), 0);
    c.release(e.nodeid, tr.fh, 0).unwrap();
    // A directory cannot be opened for writing.
    assert_eq!(
        c.open(ROOT, libc::O_WRONLY as u32).err(),
        Some(libc::EISDIR)
    );
    assert_eq!(c.open(0xdead_0000, RDONLY).err(), Some(libc::EBADF));
}

#[test]
fn tmpfile_then_link_gives_it_a_name() {
    let s = Session::start(&[]);
    let c = &s.client;
    let (e, o) = c.tmpfile(ROOT, 0o600, RDWR, 0).expect("TMPFILE");
    assert_eq!(e.attr.mode, libc::S_IFREG | 0o600);
    assert_eq!(e.attr.nlink, 0);
    assert_eq!(fs::read_dir(s.shared.path()).unwrap().count(), 0);
    let data = pattern(10_000, 3);
    assert_eq!(c.write(e.nodeid, o.fh, 0, &data).unwrap(), 10_000);

    let l = c
        .link(e.nodeid, ROOT, "named")
        .expect("LINK of the tmpfile");
    assert_eq!(l.nodeid, e.nodeid);
    assert_eq!(l.attr.nlink, 1);
    let host = fs::metadata(s.shared.join("named")).unwrap();
    assert_eq!(host.ino(), e.attr.ino);
    assert_eq!(host.mode() & 0o7777, 0o600);
    assert_eq!(fs::read(s.shared.join("named")).unwrap(), data);
    assert_eq!(c.lookup(ROOT, "named").unwrap().nodeid, e.nodeid);
    c.release(e.nodeid, o.fh, RDWR).unwrap();
    assert_eq!(fs::read(s.shared.join("named")).unwrap(), data);
}

#[test]
fn statfs_access_syncfs() {
    let s = Session::start(&[]);
    let c = &s.client;
    let st = c.statfs(ROOT).expect("STATFS");
    let p = CString::new(s.shared.path().as_os_str().as_bytes()).unwrap();
    let mut host = std::mem::MaybeUninit::<libc::statvfs>::zeroed();
    // SAFETY: C string and a writable statvfs.
    assert_eq!(unsafe { libc::statvfs(p.as_ptr(), host.as_mut_ptr()) }, 0);
    // SAFETY: filled by statvfs.
    let host = unsafe { host.assume_init() };
    assert_eq!(st.bsize as u64, host.f_bsize);
    assert_eq!(st.frsize as u64, host.f_frsize);
    assert_eq!(st.blocks, host.f_blocks);
    assert_eq!(st.files, host.f_files);
    assert_eq!(st.namelen as u64, host.f_namemax);
    assert!(st.bfree > 0 && st.bavail <= st.bfree);

    fs::write(s.shared.join("secret"), b"x").unwrap();
    fs::set_permissions(s.shared.join("secret"), fs::Permissions::from_mode(0o600)).unwrap();
    fs::write(s.shared.join("script"), b"x").unwrap();
    fs::set_permissions(s.shared.join("script"), fs::Permissions::from_mode(0o755)).unwrap();
    let secret = c.lookup(ROOT, "secret").unwrap().nodeid;
    let script = c.lookup(ROOT, "script").unwrap().nodeid;
    let (r, w, x, f) = (
        libc::R_OK as u32,
        libc::W_OK as u32,
        libc::X_OK as u32,
        libc::F_OK as u32,
    );
    // Root may read and write anything, but execute only what someone may execute.
    c.access(secret, f).expect("ACCESS F_OK");
    c.access(secret, r | w).expect("ACCESS R|W as root");
    assert_eq!(c.access(secret, x).err(), Some(libc::EACCES));
    c.access(script, r | w | x).expect("ACCESS R|W|X as root");
    let user = c.with_creds(1000, 1000);
    assert_eq!(user.access(secret, r).err(), Some(libc::EACCES));
    user.access(script, r | x)
        .expect("others may read and execute the script");
    assert_eq!(user.access(script, w).err(), Some(libc::EACCES));
    assert_eq!(c.access(0xdead_0000, f).err(), Some(libc::EBADF));

    c.syncfs().expect("SYNCFS");
}

#[test]
fn fallocate_lseek_copy_file_range() {
    let s = Session::start(&[]);
    let c = &s.client;
    let path = s.shared.join("sparse");
    let (e, o) = c.create(ROOT, "sparse", 0o644, RDWR, 0).unwrap();

    // FALLOCATE mode 0 grows the file and allocates.
    c.fallocate(e.nodeid, o.fh, 0, 2 * MIB as u64, 0)
        .expect("FALLOCATE");
    let m = fs::metadata(&path).unwrap();
    assert_eq!(m.len(), 2 * MIB as u64);
    assert!(m.blocks() * 512 >= 2 * MIB as u64, "{} blocks", m.blocks());
    // Back to a sparse file: data at 0..4K and 1M..1M+4K, holes elsewhere.
    c.setattr(e.nodeid, &set_size(0)).unwrap();
    let block = pattern(4096, 4);
    c.write(e.nodeid, o.fh, 0, &block).unwrap();
    c.write(e.nodeid, o.fh, MIB as u64, &block).unwrap();
    assert_eq!(fs::metadata(&path).unwrap().len(), MIB as u64 + 4096);

    let (data, hole) = (libc::SEEK_DATA as u32, libc::SEEK_HOLE as u32);
    assert_eq!(c.lseek(e.nodeid, o.fh, 0, data).expect("SEEK_DATA"), 0);
    assert_eq!(c.lseek(e.nodeid, o.fh, 0, hole).expect("SEEK_HOLE"), 4096);
    assert_eq!(c.lseek(e.nodeid, o.fh, 4096, data).unwrap(), MIB as u64);
    assert_eq!(
        c.lseek(e.nodeid, o.fh, MIB as u64, hole).unwrap(),
        MIB as u64 + 4096
    );
    assert_eq!(
        c.lseek(e.nodeid, o.fh, MIB as u64 + 4096, data).err(),
        Some(libc::ENXIO)
    );
    assert_eq!(
        c.lseek(e.nodeid, o.fh, 17, libc::SEEK_SET as u32).unwrap(),
        17
    );

    // PUNCH_HOLE | KEEP_SIZE frees the first block without changing the size.
    let blocks_before = fs::metadata(&path).unwrap().blocks();
    let punch = (libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE) as u32;
    c.fallocate(e.nodeid, o.fh, 0, 4096, punch)
        .expect("PUNCH_HOLE");
    let m = fs::metadata(&path).unwrap();
    assert_eq!(m.len(), MIB as u64 + 4096);
    assert!(m.blocks() < blocks_before);
    assert!(fs::read(&path).unwrap()[..4096].iter().all(|&b| b == 0));
    assert_eq!(c.lseek(e.nodeid, o.fh, 0, data).unwrap(), MIB as u64);
    // KEEP_SIZE alone past the end allocates without growing.
    c.fallocate(
        e.nodeid,
        o.fh,
        2 * MIB as u64,
        4096,
        libc::FALLOC_FL_KEEP_SIZE as u32,
    )
    .unwrap();
    assert_eq!(fs::metadata(&path).unwrap().len(), MIB as u64 + 4096);

    // COPY_FILE_RANGE into another file, at an offset.
    let (d, od) = c.create(ROOT, "copy", 0o644, RDWR, 0).unwrap();
    let args = CopyFileRangeIn {
        fh_in: o.fh,
        offset_in: MIB as u64,
        nodeid_out: d.nodeid,
        fh_out: od.fh,
        offset_out: 10,
        len: 4096,
        flags: 0,
    };
    assert_eq!(
        c.copy_file_range(e.nodeid, &args).expect("COPY_FILE_RANGE"),
        4096
    );
    let copy = fs::read(s.shared.join("copy")).unwrap();
    assert_eq!(copy.len(), 4106);
    assert!(copy[..10].iter().all(|&b| b == 0));
    assert_eq!(&copy[10..], &block[..]);
    assert_eq!(c.read(d.nodeid, od.fh, 10, 4096).unwrap(), block);
    let bad = CopyFileRangeIn {
        fh_out: od.fh + 1000,
        ..args
    };
    assert_eq!(c.copy_file_range(e.nodeid, &bad).err(), Some(libc::EBADF));
}

#[test]
fn statx_reports_btime() {
    let s = Session::start(&[]);
    let c = &s.client;
    fs::write(s.shared.join("f"), b"12345").unwrap();
    let host = fs::metadata(s.shared.join("f")).unwrap();
    let btime = host
        .created()
        .expect("the share's filesystem records birth times")
        .duration_since(UNIX_EPOCH)
        .unwrap();
    let e = c.lookup(ROOT, "f").unwrap();
    let mask = libc::STATX_BASIC_STATS | libc::STATX_BTIME;
    let check = |out: &StatxOut| {
        let st = &out.stat;
        assert_eq!(st.mask & mask, mask, "mask {:#x}", st.mask);
        assert_eq!((st.ino, st.size), (host.ino(), 5));
        assert_eq!(u32::from(st.mode), host.mode());
        assert_eq!(st.nlink, 1);
        assert_eq!(
            (st.btime.tv_sec, st.btime.tv_nsec),
            (btime.as_secs() as i64, btime.subsec_nanos())
        );
        assert_eq!(
            (st.mtime.tv_sec, st.mtime.tv_nsec as i64),
            (host.mtime(), host.mtime_nsec())
        );
    };
    check(&c.statx(e.nodeid, None, 0, mask).expect("STATX"));
    let o = c.open(e.nodeid, RDONLY).unwrap();
    check(
        &c.statx(e.nodeid, Some(o.fh), libc::AT_STATX_FORCE_SYNC as u32, mask)
            .expect("STATX fh"),
    );
    assert_eq!(c.statx(0xdead_0000, None, 0, mask).err(), Some(libc::EBADF));
}
