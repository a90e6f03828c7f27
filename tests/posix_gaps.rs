//! Three POSIX behaviours that conformance suites check in a real guest (issue 10 item 4), at
//! the daemon level; `tests/e2e/posix-probe.c` checks them in a Linux guest.
//! - utimensat(AT_SYMLINK_NOFOLLOW) reaches us as SETATTR of times on the symlink's node: it
//!   sets the link's own times, never its target's.
//! - ETXTBSY is the guest kernel's check, which for `open(O_RDONLY | O_TRUNC)` only comes
//!   after `->open()`: so we decline FUSE_ATOMIC_O_TRUNC (the guest then opens without O_TRUNC
//!   and truncates with SETATTR once its check passed), and a file keeps one node ID and
//!   generation across CREATE, LOOKUP, READDIRPLUS and GETATTR (else the guest would make a
//!   second inode, with a write count of its own).
//! - LSEEK SEEK_DATA/SEEK_HOLE answers exactly what the host file system answers, ENXIO and
//!   negative offsets included, on files of many layouts, beyond 4 GiB, after appending.

mod common;

use std::fs::{self, File};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{symlink, FileExt, MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use common::fuse_abi::*;
use common::Session;

const HANDLE_MODES: [&str; 2] = ["--inode-file-handles=never", "--inode-file-handles=prefer"];

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// (atime, mtime) of `path` itself (a symlink is not followed), in (seconds, nanoseconds).
fn times(path: &Path) -> ((i64, i64), (i64, i64)) {
    let m = fs::symlink_metadata(path).unwrap();
    ((m.atime(), m.atime_nsec()), (m.mtime(), m.mtime_nsec()))
}

#[test]
fn utimes_on_a_symlink_set_the_links_own_times() {
    for mode in HANDLE_MODES {
        let s = Session::start(&[mode]);
        let c = &s.client;
        let (target, link, dangling) = (s.shared.join("t"), s.shared.join("l"), s.shared.join("d"));
        fs::write(&target, b"target").unwrap();
        symlink("t", &link).unwrap();
        symlink("missing", &dangling).unwrap();
        let t = c.lookup(ROOT, "t").unwrap();
        c.setattr(t.nodeid, &set_times((1_000_000_000, 1), (1_000_000_001, 2)))
            .expect("SETATTR times of the target");
        let target_times = ((1_000_000_000, 1), (1_000_000_001, 2));
        assert_eq!(times(&target), target_times, "{mode}");

        // utimensat(link, AT_SYMLINK_NOFOLLOW): the link's times, in the reply and on the host.
        let l = c.lookup(ROOT, "l").unwrap();
        assert_eq!(l.attr.mode & libc::S_IFMT, libc::S_IFLNK);
        let a = c
            .setattr(l.nodeid, &set_times((1_100_000_000, 3), (1_100_000_001, 4)))
            .expect("SETATTR times of a symlink");
        assert_eq!(a.attr.mode & libc::S_IFMT, libc::S_IFLNK, "{mode}");
        assert_eq!(a.attr.ino, l.attr.ino);
        assert_eq!(
            (
                (a.attr.atime, a.attr.atimensec),
                (a.attr.mtime, a.attr.mtimensec)
            ),
            ((1_100_000_000, 3), (1_100_000_001, 4)),
            "{mode}"
        );
        assert_eq!(
            times(&link),
            ((1_100_000_000, 3), (1_100_000_001, 4)),
            "{mode}"
        );
        assert_eq!(times(&target), target_times, "{mode}: the target changed");
        let g = c.getattr(l.nodeid, None).unwrap();
        assert_eq!((g.attr.mtime, g.attr.mtimensec), (1_100_000_001, 4));

        // UTIME_OMIT for atime (FATTR_MTIME alone).
        c.setattr(
            l.nodeid,
            &SetattrIn {
                valid: FATTR_MTIME,
                mtime: 1_200_000_000,
                mtimensec: 5,
                ..Default::default()
            },
        )
        .expect("SETATTR mtime of a symlink");
        assert_eq!(
            times(&link),
            ((1_100_000_000, 3), (1_200_000_000, 5)),
            "{mode}"
        );
        assert_eq!(times(&target), target_times, "{mode}");

        // UTIME_NOW for both.
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64;
        c.setattr(l.nodeid, &set_times_now())
            .expect("SETATTR times NOW of a symlink");
        let ((at, _), (mt, _)) = times(&link);
        assert!(
            (at - now).abs() <= 5 && (mt - now).abs() <= 5,
            "{at} {mt} vs {now}"
        );
        assert_eq!(times(&target), target_times, "{mode}");

        // A dangling link has times of its own too.
        let d = c.lookup(ROOT, "d").unwrap();
        c.setattr(d.nodeid, &set_times((1_300_000_000, 6), (1_300_000_001, 7)))
            .expect("SETATTR times of a dangling symlink");
        assert_eq!(times(&dangling), ((1_300_000_000, 6), (1_300_000_001, 7)));

        // Following the link is the guest's business: it sends the target's node.
        let before = times(&link);
        c.setattr(t.nodeid, &set_times((1_400_000_000, 8), (1_400_000_001, 9)))
            .unwrap();
        assert_eq!(times(&target), ((1_400_000_000, 8), (1_400_000_001, 9)));
        assert_eq!(times(&link), before, "{mode}: the link changed");

        // As the caller: a user who does not own the link may not set explicit times.
        assert_eq!(
            c.with_creds(1000, 1000)
                .setattr(l.nodeid, &set_times((1, 0), (2, 0)))
                .err(),
            Some(libc::EPERM),
            "{mode}"
        );
        assert_eq!(times(&link), before, "{mode}");
        // Mode bits of a symlink still cannot be changed (Linux has none to change).
        let chmod = set_mode(0o700);
        assert_eq!(c.setattr(l.nodeid, &chmod).err(), Some(libc::EOPNOTSUPP));
    }
}

#[test]
fn atomic_o_trunc_is_declined_so_the_guest_checks_etxtbsy_first() {
    let s = Session::start(&[]);
    assert_ne!(LINUX_6_12_VIRTIOFS_INIT_FLAGS & FUSE_ATOMIC_O_TRUNC, 0);
    let flags = u64::from(s.init.flags) | (u64::from(s.init.flags2) << 32);
    assert_eq!(
        flags & FUSE_ATOMIC_O_TRUNC,
        0,
        "FUSE_ATOMIC_O_TRUNC negotiated"
    );

    // open(O_RDONLY | O_TRUNC) from such a guest: OPEN without O_TRUNC leaves the file alone
    // (the guest's ETXTBSY check comes next), then SETATTR of size 0, mtime now, without fh.
    let c = &s.client;
    let path = s.shared.join("exe");
    fs::write(&path, b"#!/bin/sh\nsleep 9\n").unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
    let e = c.lookup(ROOT, "exe").unwrap();
    let o = c.open(e.nodeid, libc::O_RDONLY as u32).expect("OPEN");
    assert_eq!(fs::read(&path).unwrap(), b"#!/bin/sh\nsleep 9\n");
    let trunc = SetattrIn {
        valid: FATTR_SIZE | FATTR_MTIME | FATTR_MTIME_NOW | FATTR_CTIME,
        size: 0,
        ..Default::default()
    };
    let a = c.setattr(e.nodeid, &trunc).expect("SETATTR size 0");
    assert_eq!(a.attr.size, 0);
    assert_eq!(fs::metadata(&path).unwrap().len(), 0);
    // The read-only handle still reads (nothing now).
    assert_eq!(c.read(e.nodeid, o.fh, 0, 64).unwrap(), b"");
    c.release(e.nodeid, o.fh, libc::O_RDONLY as u32).unwrap();
}

/// The identity the guest keys its inode on: (node ID, generation, host inode, file type).
fn identity(e: &EntryOut) -> (u64, u64, u64, u32) {
    (
        e.nodeid,
        e.generation,
        e.attr.ino,
        e.attr.mode & libc::S_IFMT,
    )
}

/// The READDIRPLUS entry of `name` in the root directory.
fn readdirplus_entry(s: &Session, name: &str) -> EntryOut {
    let c = &s.client;
    let d = c.opendir(ROOT, libc::O_RDONLY as u32).unwrap();
    let entries = c.readdirplus(ROOT, d.fh, 0, 64 * 1024).unwrap();
    c.releasedir(ROOT, d.fh).unwrap();
    entries
        .into_iter()
        .find(|e| e.dirent.name == name.as_bytes())
        .unwrap_or_else(|| panic!("{name} not in READDIRPLUS"))
        .entry
}

#[test]
fn an_executable_keeps_one_node_across_create_lookup_readdirplus_getattr() {
    for mode in HANDLE_MODES {
        let s = Session::start(&[mode]);
        let c = &s.client;
        // As `cp -p` makes it: CREATE, WRITE, SETATTR of mode and times, RELEASE.
        let (e, o) = c
            .create(ROOT, "exe", 0o700, libc::O_WRONLY as u32, 0)
            .expect("CREATE");
        let id = identity(&e);
        assert_eq!(id.3, libc::S_IFREG);
        c.write(e.nodeid, o.fh, 0, &[0x7f; 8192]).unwrap();
        let mut cp = set_times((1_000_000_000, 0), (1_000_000_000, 0));
        cp.valid |= FATTR_MODE;
        cp.mode = libc::S_IFREG | 0o755;
        let a = c.setattr(e.nodeid, &cp).unwrap();
        assert_eq!((a.attr.ino, a.attr.mode), (id.2, libc::S_IFREG | 0o755));
        c.release(e.nodeid, o.fh, libc::O_WRONLY as u32).unwrap();

        // The exec's LOOKUP (after the guest dropped its dentry), OPEN and GETATTR.
        let l = c.lookup(ROOT, "exe").unwrap();
        assert_eq!(identity(&l), id, "{mode}: LOOKUP");
        let x = c.open(e.nodeid, libc::O_RDONLY as u32).unwrap();
        let g = c.getattr(e.nodeid, Some(x.fh)).unwrap();
        assert_eq!((g.attr.ino, g.attr.mode), (id.2, libc::S_IFREG | 0o755));
        // `ls -l` meanwhile: READDIRPLUS must name the same node.
        let r = readdirplus_entry(&s, "exe");
        assert_eq!(identity(&r), id, "{mode}: READDIRPLUS");
        assert_eq!(r.attr.mode, libc::S_IFREG | 0o755);
        // Dropping some lookups (not all) and looking up again: still the same node.
        c.forget(e.nodeid, 2);
        let again = c.lookup(ROOT, "exe").unwrap();
        assert_eq!(identity(&again), id, "{mode}: LOOKUP after FORGET");
        let g = c.getattr(e.nodeid, None).unwrap();
        assert_eq!((g.attr.ino, g.attr.mode & libc::S_IFMT), (id.2, id.3));
        c.release(e.nodeid, x.fh, libc::O_RDONLY as u32).unwrap();

        // A file the host made: LOOKUP first or READDIRPLUS first, the same node either way.
        fs::write(s.shared.join("host-exe"), b"\x7fELF").unwrap();
        let r = readdirplus_entry(&s, "host-exe");
        let l = c.lookup(ROOT, "host-exe").unwrap();
        assert_eq!(identity(&l), identity(&r), "{mode}: host file");
        assert_eq!(identity(&readdirplus_entry(&s, "host-exe")), identity(&l));
    }
}

/// lseek(2) on the host file: the offset, or the errno.
fn host_lseek(f: &File, offset: i64, whence: i32) -> Result<u64, i32> {
    // SAFETY: a valid fd; lseek touches no memory.
    let r = unsafe { libc::lseek64(f.as_raw_fd(), offset, whence) };
    if r < 0 {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap())
    } else {
        Ok(r as u64)
    }
}

/// Every interesting offset of a file with data ranges starting or ending at `edges` and size
/// `size`: each edge and its neighbours, the size and past it, negative ones, 4 GiB edges.
fn probe_offsets(edges: &[u64], size: u64) -> Vec<i64> {
    let mut offs = vec![0, 1, -1, -4096, i64::MIN, i64::MAX, 1 << 32, (1 << 32) + 1];
    for &e in edges.iter().chain([size, 2 * size + 4096].iter()) {
        let e = e as i64;
        offs.extend([e - 1, e, e + 1]);
    }
    offs
}

/// Checks LSEEK SEEK_DATA and SEEK_HOLE through the daemon against the host at every probe
/// offset of the file `name` (data ranges `data` of 64 KiB each), through a handle opened
/// with `flags`. Returns how many answers were ENXIO (so a caller can see they were checked).
fn compare_seeks(s: &Session, name: &str, data: &[u64], flags: u32) -> usize {
    let c = &s.client;
    let host = File::open(s.shared.join(name)).unwrap();
    let size = host.metadata().unwrap().len();
    let edges: Vec<u64> = data.iter().flat_map(|&d| [d, d + 64 * KIB]).collect();
    let e = c.lookup(ROOT, name).unwrap();
    let o = c.open(e.nodeid, flags).unwrap();
    let mut enxio = 0;
    for off in probe_offsets(&edges, size) {
        for whence in [libc::SEEK_DATA, libc::SEEK_HOLE] {
            let want = host_lseek(&host, off, whence);
            let got = c.lseek(e.nodeid, o.fh, off as u64, whence as u32);
            assert_eq!(got, want, "{name}: lseek({off}, {whence}) (size {size})");
            enxio += usize::from(want == Err(libc::ENXIO));
        }
    }
    c.release(e.nodeid, o.fh, flags).unwrap();
    enxio
}

/// A host file `name` of size `size` with 64 KiB of data at each offset in `data`.
fn sparse_file(dir: &Path, name: &str, data: &[u64], size: u64) {
    let f = File::create(dir.join(name)).unwrap();
    f.set_len(size).unwrap();
    for &d in data {
        f.write_at(&[b'x'; 64 * 1024], d).unwrap();
    }
}

#[test]
fn seek_data_and_seek_hole_answer_as_the_host_does() {
    let s = Session::start(&[]);
    let c = &s.client;
    let layouts: &[(&str, &[u64], u64)] = &[
        ("empty", &[], 0),
        ("data-only", &[0], 64 * KIB),
        ("hole-first", &[MIB], MIB + 64 * KIB),
        ("hole-last", &[0], MIB),
        ("data-hole-data", &[0, MIB], MIB + 64 * KIB),
        ("beyond-4g", &[0, 4 * GIB, 5 * GIB + MIB], 6 * GIB),
        ("past-4g-only", &[4 * GIB + 64 * KIB], 4 * GIB + 128 * KIB),
    ];
    for &(name, data, size) in layouts {
        sparse_file(s.shared.path(), name, data, size);
        let enxio = compare_seeks(&s, name, data, libc::O_RDONLY as u32);
        // Negative offsets and offsets at or past EOF are ENXIO for both whences.
        assert!(enxio >= 2 * 6, "{name}: only {enxio} ENXIO answers");
    }
    // The answers the suites expect, spelled out once.
    let e = c.lookup(ROOT, "beyond-4g").unwrap();
    let o = c.open(e.nodeid, libc::O_RDONLY as u32).unwrap();
    let (data, hole) = (libc::SEEK_DATA as u32, libc::SEEK_HOLE as u32);
    assert_eq!(c.lseek(e.nodeid, o.fh, 64 * KIB, data), Ok(4 * GIB));
    assert_eq!(
        c.lseek(e.nodeid, o.fh, 4 * GIB, hole),
        Ok(4 * GIB + 64 * KIB)
    );
    assert_eq!(c.lseek(e.nodeid, o.fh, 6 * GIB - 1, hole), Ok(6 * GIB - 1));
    assert_eq!(c.lseek(e.nodeid, o.fh, 6 * GIB, hole), Err(libc::ENXIO));
    assert_eq!(
        c.lseek(e.nodeid, o.fh, 5 * GIB + 2 * MIB, data),
        Err(libc::ENXIO)
    );
    for neg in [-1i64, i64::MIN] {
        assert_eq!(c.lseek(e.nodeid, o.fh, neg as u64, data), Err(libc::ENXIO));
        assert_eq!(c.lseek(e.nodeid, o.fh, neg as u64, hole), Err(libc::ENXIO));
    }
    // SEEK_SET to a negative offset stays EINVAL, as lseek(2) says.
    assert_eq!(
        c.lseek(e.nodeid, o.fh, -1i64 as u64, libc::SEEK_SET as u32),
        Err(libc::EINVAL)
    );
    c.release(e.nodeid, o.fh, libc::O_RDONLY as u32).unwrap();
}

#[test]
fn seek_data_and_seek_hole_after_appending_and_punching() {
    let s = Session::start(&[]);
    let c = &s.client;
    sparse_file(s.shared.path(), "grow", &[0], MIB);
    // Appended through an O_APPEND handle (the guest sends WRITE at its i_size).
    let e = c.lookup(ROOT, "grow").unwrap();
    let flags = (libc::O_WRONLY | libc::O_APPEND) as u32;
    let a = c.open(e.nodeid, flags).unwrap();
    assert_eq!(c.write(e.nodeid, a.fh, MIB, &[b'y'; 8192]), Ok(8192));
    assert_eq!(
        fs::metadata(s.shared.join("grow")).unwrap().len(),
        MIB + 8192
    );
    let (data, hole) = (libc::SEEK_DATA as u32, libc::SEEK_HOLE as u32);
    assert_eq!(c.lseek(e.nodeid, a.fh, 64 * KIB, data), Ok(MIB));
    assert_eq!(c.lseek(e.nodeid, a.fh, MIB, hole), Ok(MIB + 8192));
    assert_eq!(c.lseek(e.nodeid, a.fh, MIB + 8192, data), Err(libc::ENXIO));
    c.release(e.nodeid, a.fh, flags).unwrap();
    compare_seeks(&s, "grow", &[0, MIB], flags);

    // A hole punched in the middle of data (FALLOCATE through the daemon).
    sparse_file(
        s.shared.path(),
        "punched",
        &[0, 64 * KIB, 128 * KIB],
        192 * KIB,
    );
    let p = c.lookup(ROOT, "punched").unwrap();
    let o = c.open(p.nodeid, libc::O_RDWR as u32).unwrap();
    let punch = (libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE) as u32;
    c.fallocate(p.nodeid, o.fh, 64 * KIB, 64 * KIB, punch)
        .unwrap();
    assert_eq!(c.lseek(p.nodeid, o.fh, 0, hole), Ok(64 * KIB));
    assert_eq!(c.lseek(p.nodeid, o.fh, 64 * KIB, data), Ok(128 * KIB));
    c.release(p.nodeid, o.fh, libc::O_RDWR as u32).unwrap();
    compare_seeks(
        &s,
        "punched",
        &[0, 64 * KIB, 128 * KIB],
        libc::O_RDWR as u32,
    );
}
