//! `--writeback` (FUSE_WRITEBACK_CACHE) against a real daemon: negotiated only with the option
//! and only when the guest offers it; under it a write-only open is read-write on the host (the
//! guest's page cache READs through it), O_APPEND is left to the guest (its WRITEs carry the
//! offsets), and the host file ends up as the guest's requests say. Checked on the host: the
//! daemon's fd flags (`/proc/PID/fdinfo`) and the files.

mod common;

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};

use common::fuse_abi::*;
use common::fuse_client::from_bytes;
use common::Session;
use vm_memory::ByteValued;

const WRONLY: u32 = libc::O_WRONLY as u32;
const APPEND: u32 = libc::O_APPEND as u32;
/// `fuse_write_in.write_flags`: a write of the page cache, on a handle the kernel picked.
const FUSE_WRITE_CACHE: u32 = 1;

fn writeback(s: &Session) -> bool {
    s.client.flags() & FUSE_WRITEBACK_CACHE != 0
}

/// The access mode and O_APPEND of the daemon's one open fd of `name`.
fn host_fd(s: &Session, name: &str) -> i32 {
    let ino = fs::metadata(s.shared.join(name)).unwrap().ino();
    let flags = s.host_fd_flags(ino);
    assert_eq!(flags.len(), 1, "{name}: flags of the open fds {flags:?}");
    flags[0] & (libc::O_ACCMODE | libc::O_APPEND)
}

/// WRITE of `data` at `offset` with `write_flags` and the file's open `flags`, as the kernel
/// sends it; returns the bytes written.
fn write_with(
    s: &Session,
    nodeid: u64,
    fh: u64,
    offset: u64,
    data: &[u8],
    write_flags: u32,
    flags: u32,
) -> u32 {
    let inp = WriteIn {
        fh,
        offset,
        size: data.len() as u32,
        fuse_flags: write_flags,
        flags,
        ..Default::default()
    };
    let mut body = inp.as_slice().to_vec();
    body.extend_from_slice(data);
    let reply = s
        .client
        .raw(FUSE_WRITE, nodeid, &body, 16 + 8)
        .expect("WRITE");
    from_bytes::<WriteOut>(&reply, "WRITE").size
}

#[test]
fn negotiated_only_with_the_option_and_when_offered() {
    assert!(!writeback(&Session::start(&[])));
    for args in [&["--writeback"][..], &["-o", "writeback"]] {
        let s = Session::start(args);
        assert!(writeback(&s), "{args:?}");
        // A guest that does not offer it (a new INIT on the session) does not get it, and its
        // write-only opens stay write-only.
        let out = s
            .client
            .init_with(LINUX_6_12_VIRTIOFS_INIT_FLAGS & !FUSE_WRITEBACK_CACHE)
            .unwrap();
        assert_eq!(u64::from(out.flags) & FUSE_WRITEBACK_CACHE, 0);
        fs::write(s.shared.join("f"), b"data").unwrap();
        let e = s.client.lookup(ROOT, "f").unwrap();
        let o = s.client.open(e.nodeid, WRONLY).unwrap();
        assert_eq!(host_fd(&s, "f"), libc::O_WRONLY);
        s.client.release(e.nodeid, o.fh, WRONLY).unwrap();
    }
    assert!(!writeback(&Session::start(&[
        "--writeback",
        "-o",
        "no_writeback"
    ])));
}

/// OPEN, CREATE and TMPFILE with O_WRONLY: read-write on the host under writeback (the READ the
/// guest needs to fill a page works), write-only without (the READ fails with EBADF).
#[test]
fn write_only_opens_are_read_write_on_the_host() {
    for (args, mode, read) in [
        (&["--writeback"][..], libc::O_RDWR, Ok(b"data".to_vec())),
        (&[][..], libc::O_WRONLY, Err(libc::EBADF)),
    ] {
        let s = Session::start(args);
        let c = &s.client;
        fs::write(s.shared.join("f"), b"data").unwrap();
        let e = c.lookup(ROOT, "f").unwrap();
        let o = c.open(e.nodeid, WRONLY).expect("OPEN");
        assert_eq!(host_fd(&s, "f"), mode, "OPEN {args:?}");
        assert_eq!(c.read(e.nodeid, o.fh, 0, 4096), read, "{args:?}");
        c.release(e.nodeid, o.fh, WRONLY).unwrap();

        let (e, o) = c.create(ROOT, "new", 0o644, WRONLY, 0).expect("CREATE");
        assert_eq!(host_fd(&s, "new"), mode, "CREATE {args:?}");
        assert_eq!(c.write(e.nodeid, o.fh, 0, b"page").unwrap(), 4);
        let read = read.clone().map(|_| b"page".to_vec());
        assert_eq!(c.read(e.nodeid, o.fh, 0, 4096), read, "{args:?}");
        c.release(e.nodeid, o.fh, WRONLY).unwrap();

        let (e, o) = c.tmpfile(ROOT, 0o600, WRONLY, 0).expect("TMPFILE");
        assert_eq!(c.write(e.nodeid, o.fh, 0, b"tmp").unwrap(), 3);
        let read = read.map(|_| b"tmp".to_vec());
        assert_eq!(c.read(e.nodeid, o.fh, 0, 4096), read, "TMPFILE {args:?}");
        c.release(e.nodeid, o.fh, WRONLY).unwrap();
    }
}

/// The widened CREATE: the host checks the caller's own access mode first (as the caller), so
/// a guest user gets exactly the files it may write; the read side is the daemon's, for the
/// guest kernel's page cache only.
#[test]
fn widened_create_checks_the_callers_own_access() {
    let s = Session::start(&["--writeback"]);
    let user = s.client.with_creds(1000, 1000);
    // Write-only for its owner, the caller: CREATE (no O_EXCL) of the existing file works,
    // read-write on the host although the caller may not read it (the guest never lets it:
    // its read(2) of an O_WRONLY file fails before any request).
    let mine = s.shared.join("write-only");
    fs::write(&mine, b"secret").unwrap();
    std::os::unix::fs::chown(&mine, Some(1000), Some(1000)).unwrap();
    fs::set_permissions(&mine, fs::Permissions::from_mode(0o200)).unwrap();
    let (e, o) = user
        .create(ROOT, "write-only", 0o600, WRONLY, 0)
        .expect("CREATE");
    assert_eq!(host_fd(&s, "write-only"), libc::O_RDWR);
    user.release(e.nodeid, o.fh, WRONLY).unwrap();
    // Not writable by the caller: refused as without writeback, whatever the daemon may do.
    let theirs = s.shared.join("read-only");
    fs::write(&theirs, b"theirs").unwrap();
    fs::set_permissions(&theirs, fs::Permissions::from_mode(0o644)).unwrap();
    assert_eq!(
        user.create(ROOT, "read-only", 0o600, WRONLY, 0).map(drop),
        Err(libc::EACCES)
    );
    assert_eq!(fs::read(&theirs).unwrap(), b"theirs");
}

/// O_APPEND under writeback: not on the host fd, and the guest's offsets are where the data
/// goes (a page written back twice lands once). Without writeback the host appends.
#[test]
fn o_append_is_left_to_the_guest() {
    // Without writeback too: a shared mmap of an O_APPEND file writes its pages back through
    // that handle, at their offsets (an O_APPEND host fd appended them: 0123456789XXXXXXXX).
    for (args, host) in [
        (&["--writeback"][..], libc::O_RDWR),
        (&[][..], libc::O_WRONLY),
    ] {
        let s = Session::start(args);
        let c = &s.client;
        fs::write(s.shared.join("log"), b"0123456789").unwrap();
        let e = c.lookup(ROOT, "log").unwrap();
        let flags = WRONLY | APPEND;
        let o = c.open(e.nodeid, flags).expect("OPEN");
        assert_eq!(host_fd(&s, "log"), host, "{args:?}");
        // The same dirty range written back twice, as a page cache may.
        for _ in 0..2 {
            assert_eq!(
                write_with(&s, e.nodeid, o.fh, 4, b"XXXX", FUSE_WRITE_CACHE, flags),
                4
            );
        }
        c.release(e.nodeid, o.fh, flags).unwrap();
        assert_eq!(
            fs::read(s.shared.join("log")).unwrap(),
            b"0123XXXX89",
            "{args:?}"
        );
    }
}

/// Without writeback, a write(2) to an O_APPEND file (a WRITE that is not a page writeback,
/// carrying the file's O_APPEND) goes to the host's end of file, whatever the offset the guest
/// computed from its cached size: the host (or another guest) may have appended meanwhile.
#[test]
fn o_append_writes_go_to_the_hosts_end_of_file() {
    let s = Session::start(&[]);
    let c = &s.client;
    let path = s.shared.join("log");
    fs::write(&path, b"guest\n").unwrap();
    let e = c.lookup(ROOT, "log").unwrap();
    let flags = WRONLY | APPEND;
    let o = c.open(e.nodeid, flags).expect("OPEN");
    // The host appends; the guest still thinks the file is 6 bytes long.
    fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .and_then(|mut f| std::io::Write::write_all(&mut f, b"host\n"))
        .unwrap();
    assert_eq!(write_with(&s, e.nodeid, o.fh, 6, b"again\n", 0, flags), 6);
    // A handle opened without O_APPEND writes at its offset.
    let rw = c.open(e.nodeid, RDWR).expect("OPEN");
    assert_eq!(write_with(&s, e.nodeid, rw.fh, 0, b"G", 0, RDWR), 1);
    c.release(e.nodeid, o.fh, flags).unwrap();
    c.release(e.nodeid, rw.fh, RDWR).unwrap();
    assert_eq!(fs::read(&path).unwrap(), b"Guest\nhost\nagain\n");
}

/// The host file after the requests a writeback guest sends: cache writes on any writable
/// handle of the inode, truncates that grow and shrink, and the guest's own mtime (FATTR_MTIME
/// with FATTR_CTIME, what the kernel flushes on close and fsync) set as given.
#[test]
fn host_state_follows_the_guest() {
    let s = Session::start(&["--writeback"]);
    let c = &s.client;
    let path = s.shared.join("f");
    let (e, o) = c.create(ROOT, "f", 0o644, WRONLY, 0).expect("CREATE");
    let other = c.open(e.nodeid, RDWR).expect("OPEN");
    // Pages written back through the other handle, out of order, with a hole.
    assert_eq!(
        write_with(
            &s,
            e.nodeid,
            other.fh,
            8192,
            &[b'c'; 100],
            FUSE_WRITE_CACHE,
            RDWR
        ),
        100
    );
    assert_eq!(
        write_with(
            &s,
            e.nodeid,
            o.fh,
            0,
            &[b'a'; 4096],
            FUSE_WRITE_CACHE,
            WRONLY
        ),
        4096
    );
    let mut expect = vec![b'a'; 4096];
    expect.extend_from_slice(&[0; 4096]);
    expect.extend_from_slice(&[b'c'; 100]);
    assert_eq!(fs::read(&path).unwrap(), expect);
    // Truncate down, then up (the new range reads as zeros).
    c.setattr(e.nodeid, &with_fh(set_size(1000), o.fh)).unwrap();
    let a = c.setattr(e.nodeid, &set_size(5000)).unwrap();
    assert_eq!(a.attr.size, 5000);
    expect.truncate(1000);
    expect.resize(5000, 0);
    assert_eq!(fs::read(&path).unwrap(), expect);
    // The guest's mtime, as its flush sends it (ctime cannot be set on Linux: ignored).
    let times = SetattrIn {
        valid: FATTR_MTIME | FATTR_CTIME | FATTR_FH,
        fh: o.fh,
        mtime: 1_500_000_000,
        mtimensec: 123_456_789,
        ctime: 1_500_000_000,
        ..Default::default()
    };
    let a = c.setattr(e.nodeid, &times).expect("SETATTR mtime");
    assert_eq!(
        (a.attr.mtime, a.attr.mtimensec),
        (1_500_000_000, 123_456_789)
    );
    let m = fs::metadata(&path).unwrap();
    assert_eq!(
        (m.mtime(), m.mtime_nsec(), m.len()),
        (1_500_000_000, 123_456_789, 5000)
    );
    c.release(e.nodeid, other.fh, RDWR).unwrap();
    c.release(e.nodeid, o.fh, WRONLY).unwrap();
}

/// The guest's mtime flush (explicit FATTR_MTIME | FATTR_CTIME on a writable handle) from a
/// guest user writing a file it does not own: applied under writeback (the host alone would
/// refuse an explicit time to a non-owner, and the guest's close(2) would fail), refused
/// without writeback and on a read-only handle.
#[test]
fn mtime_flush_of_a_writer_that_is_not_the_owner() {
    let flush = |fh| SetattrIn {
        valid: FATTR_MTIME | FATTR_CTIME | FATTR_FH,
        fh,
        mtime: 1_400_000_000,
        ..Default::default()
    };
    for (args, flags, expect) in [
        (&["--writeback"][..], WRONLY, Ok(1_400_000_000)),
        (&["--writeback"][..], RDONLY, Err(libc::EPERM)),
        (&[][..], WRONLY, Err(libc::EPERM)),
    ] {
        let s = Session::start(args);
        let path = s.shared.join("shared");
        fs::write(&path, b"data").unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o666)).unwrap();
        let user = s.client.with_creds(1000, 1000);
        let e = user.lookup(ROOT, "shared").unwrap();
        let o = user.open(e.nodeid, flags).unwrap();
        let got = user.setattr(e.nodeid, &flush(o.fh)).map(|a| a.attr.mtime);
        assert_eq!(got, expect, "{args:?} {flags:#o}");
        let host = fs::metadata(&path).unwrap().mtime() as u64;
        assert_eq!(host == 1_400_000_000, expect.is_ok(), "{args:?} {flags:#o}");
        // Anything beyond times stays the caller's to be allowed.
        let chmod = SetattrIn {
            mode: 0o600,
            valid: flush(o.fh).valid | FATTR_MODE,
            ..flush(o.fh)
        };
        assert_eq!(user.setattr(e.nodeid, &chmod).map(drop), Err(libc::EPERM));
        user.release(e.nodeid, o.fh, flags).unwrap();
    }
}

/// The guest's mtime survives the cache WRITEs that reach the host after the guest sent it (a
/// close does not wait for them): under writeback the host keeps the mtime the guest set last;
/// a direct WRITE (no FUSE_WRITE_CACHE) and any WRITE without writeback update it as usual.
#[test]
fn cache_writes_keep_the_guests_mtime() {
    for (args, write_flags, kept) in [
        (&["--writeback"][..], FUSE_WRITE_CACHE, true),
        (&["--writeback"][..], 0, false),
        (&[][..], FUSE_WRITE_CACHE, false),
    ] {
        let s = Session::start(args);
        let c = &s.client;
        let (e, o) = c.create(ROOT, "f", 0o644, RDWR, 0).expect("CREATE");
        assert_eq!(
            write_with(&s, e.nodeid, o.fh, 0, b"first", FUSE_WRITE_CACHE, RDWR),
            5
        );
        let times = SetattrIn {
            valid: FATTR_MTIME | FATTR_CTIME | FATTR_FH,
            fh: o.fh,
            mtime: 1_300_000_000,
            mtimensec: 42,
            ..Default::default()
        };
        c.setattr(e.nodeid, &times).expect("SETATTR mtime");
        // The page cache's late WRITE.
        assert_eq!(
            write_with(&s, e.nodeid, o.fh, 5, b" late", write_flags, RDWR),
            5
        );
        let m = fs::metadata(s.shared.join("f")).unwrap();
        assert_eq!(fs::read(s.shared.join("f")).unwrap(), b"first late");
        assert_eq!(
            (m.mtime(), m.mtime_nsec()) == (1_300_000_000, 42),
            kept,
            "{args:?} write_flags {write_flags}"
        );
        c.release(e.nodeid, o.fh, RDWR).unwrap();
    }
}

/// What a guest touch sends for an existing file under writeback: OPEN O_WRONLY, an explicit
/// SETATTR of the times through the handle, RELEASE.
fn touch(s: &Session, nodeid: u64) {
    let c = &s.client;
    let o = c.open(nodeid, WRONLY).expect("OPEN");
    let times = SetattrIn {
        valid: FATTR_ATIME | FATTR_MTIME | FATTR_CTIME | FATTR_FH,
        fh: o.fh,
        atime: 1_600_000_000,
        mtime: 1_600_000_000,
        ctime: 1_600_000_000,
        ..Default::default()
    };
    c.setattr(nodeid, &times).expect("SETATTR times");
    c.release(nodeid, o.fh, WRONLY).unwrap();
}

/// Proxmox VE's truncated files (docs/writeback.md): the guest instantiates the inode of a file
/// the host is still writing (and touches it), the host finishes it. A Linux guest takes a
/// regular file's size only when it instantiates the inode, so the daemon must make it do that
/// again: the next LOOKUP (the guest's revalidation after the entry timeout) carries a new
/// generation, which makes the kernel drop the old inode (`fuse_stale_inode()`) and take the
/// reply's size. Also after a rename in the guest. Never while the guest has the file open
/// (its dirty pages and times are its own), and never for the guest's own changes.
#[test]
fn a_file_the_host_changed_is_handed_out_afresh() {
    let s = Session::start(&["--writeback"]);
    let c = &s.client;
    let path = s.shared.join("download");
    fs::write(&path, vec![b'x'; 1 << 20]).unwrap();
    let first = c.lookup(ROOT, "download").unwrap();
    assert_eq!(first.attr.size, 1 << 20);
    touch(&s, first.nodeid);
    // The host's copy goes on: 10 MiB.
    let mut f = fs::OpenOptions::new().append(true).open(&path).unwrap();
    std::io::Write::write_all(&mut f, &vec![b'y'; 9 << 20]).unwrap();
    drop(f);
    let again = c.lookup(ROOT, "download").unwrap();
    assert_eq!(again.nodeid, first.nodeid);
    assert_ne!(
        again.generation, first.generation,
        "the guest keeps its 1 MiB inode"
    );
    assert_eq!(again.attr.size, 10 << 20);
    // Stable from then on, and a rename in the guest keeps the full file.
    assert_eq!(
        c.lookup(ROOT, "download").unwrap().generation,
        again.generation
    );
    c.rename(ROOT, "download", ROOT, "moved").unwrap();
    let moved = c.lookup(ROOT, "moved").unwrap();
    assert_eq!(
        (moved.generation, moved.attr.size),
        (again.generation, 10 << 20)
    );

    // While the guest has it open: no new generation (the open file keeps its inode) until it
    // is closed.
    let o = c.open(moved.nodeid, RDWR).unwrap();
    fs::write(s.shared.join("moved"), b"replaced in place").unwrap();
    let open = c.lookup(ROOT, "moved").unwrap();
    assert_eq!(open.generation, moved.generation);
    c.release(moved.nodeid, o.fh, RDWR).unwrap();
    let closed = c.lookup(ROOT, "moved").unwrap();
    assert_ne!(closed.generation, moved.generation);
    assert_eq!(closed.attr.size, 17);
}

/// The guest's own writes, truncates and times never look like a host change.
#[test]
fn the_guests_own_changes_keep_the_generation() {
    let s = Session::start(&["--writeback"]);
    let c = &s.client;
    let (e, o) = c.create(ROOT, "mine", 0o644, WRONLY, 0).expect("CREATE");
    assert_eq!(
        write_with(
            &s,
            e.nodeid,
            o.fh,
            0,
            &[b'a'; 10000],
            FUSE_WRITE_CACHE,
            WRONLY
        ),
        10000
    );
    c.setattr(e.nodeid, &with_fh(set_size(3000), o.fh)).unwrap();
    assert_eq!(
        write_with(&s, e.nodeid, o.fh, 6000, b"tail", FUSE_WRITE_CACHE, WRONLY),
        4
    );
    // The guest's flush of its mtime on close, then a late cache WRITE.
    let times = SetattrIn {
        valid: FATTR_MTIME | FATTR_CTIME | FATTR_FH,
        fh: o.fh,
        mtime: 1_700_000_000,
        ..Default::default()
    };
    c.setattr(e.nodeid, &times).unwrap();
    assert_eq!(
        write_with(&s, e.nodeid, o.fh, 0, b"late", FUSE_WRITE_CACHE, WRONLY),
        4
    );
    c.release(e.nodeid, o.fh, WRONLY).unwrap();
    // A truncate by path (no handle), as truncate(1) sends it.
    c.setattr(e.nodeid, &set_size(8000)).unwrap();
    touch(&s, e.nodeid);
    let again = c.lookup(ROOT, "mine").unwrap();
    assert_eq!((again.generation, again.attr.size), (e.generation, 8000));
}

/// Without writeback the guest takes every reply's size: generations never change.
#[test]
fn without_writeback_the_generation_stays() {
    let s = Session::start(&[]);
    fs::write(s.shared.join("f"), b"short").unwrap();
    let first = s.client.lookup(ROOT, "f").unwrap();
    fs::write(s.shared.join("f"), b"much longer now").unwrap();
    let again = s.client.lookup(ROOT, "f").unwrap();
    assert_eq!((again.generation, again.attr.size), (first.generation, 15));
}
