//! Two requirements of issue 34 item 2 through the Windows service's client
//! (`tests/common/windows_client.rs`), which never sends FORGET but after its own delete and
//! sends FALLOCATE KEEP_SIZE in every copy of a non-empty file:
//!
//! - no node ID the guest still holds is handed out for another file, when the host deletes a
//!   held file, or renames another over it, and a new file gets its inode number (ext4 reuses a
//!   freed number at once; the share is under /var/tmp, on disk), whether the host or the
//!   client makes the new file; in both `--inode-file-handles` modes (`never` keeps the
//!   deleted inode open while the guest holds its node, so its number cannot come back: what
//!   the held node reaches is checked instead);
//! - FALLOCATE KEEP_SIZE works on every filesystem under the share or answers EOPNOTSUPP: a
//!   copy into a tmpfs and into a ramfs (no fallocate) mounted below the share.

mod common;

use std::ffi::CString;
use std::fs;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::fuse_abi::*;
use common::windows_client::{Failed, Opened, WindowsClient};
use common::{FuseClient, Mount, Session, TempDir};

/// The file-handle modes. `prefer` keeps an O_PATH fd of a handle-backed inode in its fd cache
/// for about a second after its last use (which keeps the number from being reused meanwhile);
/// `never` holds one per node the guest holds.
const MODES: [&[&str]; 3] = [
    &["--inode-file-handles=prefer"],
    &["--inode-file-handles=prefer", "--fd-cache-size=0"],
    &["--inode-file-handles=never"],
];
/// How long new files are made, one per 20 ms, waiting for a freed inode number to come back.
const REUSE_DEADLINE: Duration = Duration::from_secs(10);
/// New files made when the daemon keeps the deleted inode open (`never`).
const PINNED_TRIES: usize = 64;

/// One test at a time: the shares of this file are all on the same ext4 (/tmp and /var/tmp
/// here), where another test's new file could take the number one test waits for.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

const OLD: &[u8] = b"file A, before the host changed it";

/// A share on disk (/var/tmp), holding `a.txt`, and the Windows client, which has listed and
/// read it: it holds `a.txt`'s node and will never forget it.
fn held_file(args: &[&str]) -> (Session, WindowsClient, Opened) {
    let s = Session::start_in(Path::new("/var/tmp"), args);
    fs::write(s.shared.join("a.txt"), OLD).unwrap();
    let w = WindowsClient::mount(Arc::clone(s.client.guest())).expect("mount");
    assert_eq!(w.dir_s("").unwrap(), ["a.txt"]);
    assert_eq!(w.read_file("a.txt").unwrap(), OLD);
    let a = w.open("a.txt", RDONLY).unwrap();
    w.close(&a);
    assert!(w.held(a.nodeid) > 0);
    assert_eq!(
        a.attr.ino,
        fs::metadata(s.shared.join("a.txt")).unwrap().ino()
    );
    (s, w, a)
}

/// The filesystem type of `path` (statfs `f_type`), for messages.
fn fs_type(path: &Path) -> String {
    let c = CString::new(path.as_os_str().as_bytes()).unwrap();
    let mut st = std::mem::MaybeUninit::<libc::statfs>::zeroed();
    // SAFETY: a valid C string and a writable statfs.
    assert_eq!(unsafe { libc::statfs(c.as_ptr(), st.as_mut_ptr()) }, 0);
    // SAFETY: statfs filled it.
    format!("{:#x}", unsafe { st.assume_init() }.f_type)
}

/// Makes new files with `make(i)`, which returns file i's inode number, until one has the
/// number `ino`: returns its index. When the number does not come back within the bound, the
/// daemon must be keeping the old inode alive (`pinned`, checked by the caller): `None`;
/// otherwise the test cannot show anything, and fails.
fn until_reused(
    ino: u64,
    pinned: bool,
    share: &Path,
    mut make: impl FnMut(usize) -> u64,
) -> Option<usize> {
    let deadline = Instant::now() + REUSE_DEADLINE;
    for i in 0.. {
        if make(i) == ino {
            eprintln!("inode number {ino} reused by new file {i}");
            return Some(i);
        }
        if pinned && i + 1 == PINNED_TRIES {
            eprintln!("inode number {ino} not reused by {PINNED_TRIES} new files");
            return None;
        }
        assert!(
            Instant::now() < deadline,
            "inode number {ino} not reused by {} new files in {REUSE_DEADLINE:?}: the share \
             ({}, f_type {}) must be on a filesystem that reuses inode numbers (ext4), with no \
             other process making files on it meanwhile",
            i + 1,
            share.display(),
            fs_type(share)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    unreachable!()
}

/// The host makes `new-<i>` files holding `new file <i>` until one has inode number `ino`.
fn host_makes_files(s: &Session, ino: u64, pinned: bool) -> Option<(String, Vec<u8>)> {
    let share = s.shared.path();
    let i = until_reused(ino, pinned, share, |i| {
        let p = share.join(format!("new-{i}"));
        fs::write(&p, format!("new file {i}")).unwrap();
        fs::metadata(&p).unwrap().ino()
    })?;
    Some((format!("new-{i}"), format!("new file {i}").into_bytes()))
}

/// What the guest reaches through the node it held of the replaced file `a`: nothing (ESTALE,
/// ENOENT) once its number is another file's; while the daemon keeps the deleted inode open
/// (`never`), that inode (no links, its own bytes), never the new file.
fn old_node_is_not_the_new_file(c: &FuseClient, a: &Opened, reused: bool, mode: &str) {
    let gone = |r: Result<(), i32>, what: &str| {
        let errno = r.expect_err(what);
        assert!(
            errno == libc::ESTALE || errno == libc::ENOENT,
            "{mode}: {what} through the held node of a file whose inode number is reused: \
             errno {errno}"
        );
    };
    if reused {
        gone(c.getattr(a.nodeid, None).map(drop), "GETATTR");
        gone(c.open(a.nodeid, RDONLY).map(drop), "OPEN");
        return;
    }
    let attr = c
        .getattr(a.nodeid, None)
        .expect("GETATTR of the kept inode")
        .attr;
    assert_eq!(
        (attr.ino, attr.nlink, attr.size),
        (a.attr.ino, 0, OLD.len() as u64),
        "{mode}: the held node reaches the deleted inode, kept open"
    );
    let o = c.open(a.nodeid, RDONLY).expect("OPEN of the kept inode");
    assert_eq!(c.read(a.nodeid, o.fh, 0, 4096).unwrap(), OLD, "{mode}");
    c.release(a.nodeid, o.fh, RDONLY).unwrap();
}

/// The Windows client opens and reads `name` (two walks, OPEN, GETATTR(FH), READ, RELEASE)
/// and lists the root: a node of its own, not the held `a`, with the host's inode and bytes.
fn client_reaches(w: &WindowsClient, s: &Session, a: &Opened, name: &str, bytes: &[u8]) -> u64 {
    let o = w.open(name, RDONLY).expect(name);
    assert_ne!(
        o.nodeid, a.nodeid,
        "{name}: the held node of inode {}",
        a.attr.ino
    );
    let host_ino = fs::metadata(s.shared.join(name)).unwrap().ino();
    assert_eq!(o.attr.ino, host_ino, "{name}");
    assert_eq!(w.read(&o, 0, 4096).unwrap(), bytes, "{name}");
    w.close(&o);
    let root = w.open("", 0).unwrap();
    let listed = w.read_directory(&root).unwrap();
    w.close(&root);
    let e = listed.iter().find(|(n, _)| n == name).expect(name).1;
    assert_eq!(
        (e.nodeid, e.attr.ino),
        (o.nodeid, host_ino),
        "{name} listed"
    );
    o.nodeid
}

/// Runs `test` in every file-handle mode, one test of this file at a time, on a share holding
/// `a.txt`, held by the Windows client ([`held_file`]): `test(mode, pinned, ...)`, `pinned`
/// when the daemon keeps the deleted inode open (`never`).
fn in_every_mode(test: impl Fn(&str, bool, &Session, &WindowsClient, &Opened)) {
    let _one = one_at_a_time();
    for args in MODES {
        let mode = args.join(" ");
        let (s, w, a) = held_file(args);
        test(&mode, mode.ends_with("never"), &s, &w, &a);
    }
}

#[test]
fn a_held_node_is_not_handed_out_after_the_host_deletes_its_file() {
    in_every_mode(|mode, pinned, s, w, a| {
        fs::remove_file(s.shared.join("a.txt")).unwrap();
        let made = host_makes_files(s, a.attr.ino, pinned);
        // The file with the number (or, kept by `never`, a new file) takes A's name too.
        let new = match &made {
            Some((name, bytes)) => {
                fs::rename(s.shared.join(name), s.shared.join("a.txt")).unwrap();
                bytes.clone()
            }
            None => {
                fs::write(s.shared.join("a.txt"), b"a new a.txt").unwrap();
                b"a new a.txt".to_vec()
            }
        };
        client_reaches(w, s, a, "a.txt", &new);
        old_node_is_not_the_new_file(&s.client, a, made.is_some(), mode);
        assert_eq!(w.errors(), [].into(), "{mode}");
    });
}

#[test]
fn a_held_node_is_not_handed_out_after_the_host_renames_a_file_over_it() {
    in_every_mode(|mode, pinned, s, w, a| {
        fs::write(s.shared.join("b.txt"), b"file B").unwrap();
        fs::rename(s.shared.join("b.txt"), s.shared.join("a.txt")).unwrap();
        let b = client_reaches(w, s, a, "a.txt", b"file B");
        let made = host_makes_files(s, a.attr.ino, pinned);
        if let Some((name, bytes)) = &made {
            let n = client_reaches(w, s, a, name, bytes);
            assert_ne!(n, b, "{mode}");
        }
        old_node_is_not_the_new_file(&s.client, a, made.is_some(), mode);
        assert_eq!(w.errors(), [].into(), "{mode}");
    });
}

#[test]
fn a_held_node_is_not_handed_out_to_the_clients_own_create() {
    // The service's CREATE fails when it returns a node ID the service holds (L693): its
    // copy of a file would fail after the file exists.
    in_every_mode(|mode, pinned, s, w, a| {
        fs::write(s.shared.join("b.txt"), b"file B").unwrap();
        fs::rename(s.shared.join("b.txt"), s.shared.join("a.txt")).unwrap();
        let share = s.shared.path();
        let made = until_reused(a.attr.ino, pinned, share, |i| {
            let name = format!("copy-{i}");
            // The client's own check: a CREATE returning a held node ID fails (EEXIST).
            w.copy_in(&name, name.as_bytes())
                .unwrap_or_else(|f| panic!("{mode}: copy of {name}: {f:?}"));
            fs::metadata(share.join(&name)).unwrap().ino()
        });
        if let Some(i) = made {
            let name = format!("copy-{i}");
            client_reaches(w, s, a, &name, name.as_bytes());
        }
        old_node_is_not_the_new_file(&s.client, a, made.is_some(), mode);
        assert_eq!(
            w.errors(),
            [(FUSE_LOOKUP, w.replies()[&FUSE_CREATE])].into()
        );
    });
}

/// A ramfs at `at` (a directory of the share), detached on drop.
struct Ramfs(PathBuf);

impl Ramfs {
    fn at(at: &Path) -> Ramfs {
        fs::create_dir(at).unwrap();
        let target = CString::new(at.as_os_str().as_bytes()).unwrap();
        // SAFETY: valid C strings.
        let rc = unsafe {
            libc::mount(
                c"vhostfs-test".as_ptr(),
                target.as_ptr(),
                c"ramfs".as_ptr(),
                0,
                c"mode=0755".as_ptr().cast(),
            )
        };
        let e = std::io::Error::last_os_error();
        assert_eq!(rc, 0, "mount ramfs on {}: {e}", at.display());
        Ramfs(at.to_path_buf())
    }
}

impl Drop for Ramfs {
    fn drop(&mut self) {
        let target = CString::new(self.0.as_os_str().as_bytes()).unwrap();
        // SAFETY: a valid C string.
        unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
    }
}

/// A share with a tmpfs at `tmpfs/` and a ramfs at `ramfs/`. The fields drop in order: the
/// mounts are detached before the session removes the share's directory, on a failure too.
struct Submounts {
    _tmpfs: Mount,
    _ramfs: Ramfs,
    s: Session,
}

/// FALLOCATE KEEP_SIZE on the host: 0 or the errno.
fn host_keep_size(path: &Path) -> i32 {
    let f = fs::File::create(path).unwrap();
    // SAFETY: an open fd.
    let rc = unsafe { libc::fallocate(f.as_raw_fd(), libc::FALLOC_FL_KEEP_SIZE, 0, 4096) };
    let errno = if rc == 0 {
        0
    } else {
        std::io::Error::last_os_error().raw_os_error().unwrap()
    };
    fs::remove_file(path).unwrap();
    errno
}

fn submounts(args: &[&str]) -> Submounts {
    let shared = TempDir::new("win-falloc-shared").unwrap();
    let tmpfs = Mount::tmpfs_at(&shared.join("tmpfs"), "size=64m,mode=0755");
    let ramfs = Ramfs::at(&shared.join("ramfs"));
    // What the host filesystems do, or the test shows nothing.
    assert_eq!(host_keep_size(&shared.join("tmpfs/probe")), 0, "tmpfs");
    assert_eq!(
        host_keep_size(&shared.join("ramfs/probe")),
        libc::EOPNOTSUPP,
        "ramfs has no fallocate"
    );
    let s = Session::start_on_share(shared, args);
    Submounts {
        _tmpfs: tmpfs,
        _ramfs: ramfs,
        s,
    }
}

/// The client's FALLOCATE (KEEP_SIZE, from 0, the owner's ids, the fh of its OPEN) of
/// `len` bytes on an existing file; returns the errno and the file's size after it by GETATTR.
fn keep_size(w: &WindowsClient, c: &FuseClient, path: &str, len: u64) -> (i32, u64) {
    let o = w.open(path, RDWR).unwrap();
    let owner = c.with_creds(w.owner().0, w.owner().1);
    let r = owner.fallocate(o.nodeid, o.fh, 0, len, libc::FALLOC_FL_KEEP_SIZE as u32);
    let size = c.getattr(o.nodeid, Some(o.fh)).unwrap().attr.size;
    w.close(&o);
    (r.err().unwrap_or(0), size)
}

#[test]
fn fallocate_keep_size_works_on_every_filesystem_of_the_share_or_answers_eopnotsupp() {
    let _one = one_at_a_time();
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 253) as u8).collect();
    let len = data.len() as u64;
    for args in [
        ["--inode-file-handles=prefer"],
        ["--inode-file-handles=never"],
    ] {
        let m = submounts(&args);
        let share = m.s.shared.path();
        let w = WindowsClient::mount(Arc::clone(m.s.client.guest())).expect("mount");
        // Copy a folder in: MKDIR, SetBasicInfo, a file (CREATE, GETATTR, FALLOCATE KEEP_SIZE,
        // GETATTR, WRITEs, SETATTR, RELEASE) and an empty one (no FALLOCATE).
        let mut fallocates = 0;
        for dir in ["base", "tmpfs/folder", "ramfs/folder"] {
            let at = |name: &str| format!("{dir}/{name}");
            w.mkdir(dir)
                .unwrap_or_else(|f| panic!("{args:?} {dir}: {f:?}"));
            w.touch_dir(dir).unwrap();
            let copied = w.copy_in(&at("data.bin"), &data);
            fallocates += 1;
            if dir.starts_with("ramfs") {
                // EOPNOTSUPP (the service's STATUS_NOT_SUPPORTED) fails the service's create
                // after the file exists (L700), empty; a copy that replaces it (the service's
                // Overwrite: SETATTR of the size, no FALLOCATE) completes it.
                let unsupported = Failed {
                    opcode: FUSE_FALLOCATE,
                    errno: libc::EOPNOTSUPP,
                };
                assert_eq!(copied.map(drop), Err(unsupported), "{args:?}");
                assert_eq!(fs::metadata(share.join(at("data.bin"))).unwrap().len(), 0);
                w.overwrite(&at("data.bin"), &data).unwrap();
            } else {
                copied.unwrap_or_else(|f| panic!("{args:?} {dir}: {f:?}"));
            }
            w.copy_in(&at("empty.txt"), b"").unwrap();
            assert_eq!(fs::read(share.join(at("data.bin"))).unwrap(), data, "{dir}");
            assert_eq!(fs::read(share.join(at("empty.txt"))).unwrap(), b"", "{dir}");
            let meta = fs::metadata(share.join(dir)).unwrap();
            assert_eq!(meta.mode() & 0o7777, 0o775, "{args:?} {dir}");
            assert_eq!(w.replies()[&FUSE_FALLOCATE], fallocates, "{args:?} {dir}");

            // The same FALLOCATE past the end: the size stays, the space is reserved.
            let extra = 1 << 20;
            let (errno, size) = keep_size(&w, &m.s.client, &at("data.bin"), len + extra);
            assert_eq!(size, len, "{args:?} {dir}: KEEP_SIZE changed the size");
            let host = fs::metadata(share.join(at("data.bin"))).unwrap();
            assert_eq!(host.len(), len, "{args:?} {dir}");
            if dir.starts_with("ramfs") {
                assert_eq!(errno, libc::EOPNOTSUPP, "{args:?} {dir}");
            } else {
                assert_eq!(errno, 0, "{args:?} {dir}");
                assert!(
                    host.blocks() * 512 >= len + extra,
                    "{args:?} {dir}: {host:?}"
                );
            }
        }
        // The only error replies: the walks of the 6 new names, the ramfs's FALLOCATE.
        let want = [(FUSE_LOOKUP, 6), (FUSE_FALLOCATE, 1)].into();
        assert_eq!(w.errors(), want, "{args:?}");
    }
}
