//! Smoke tests of the test guest against the reference virtiofsd 1.14: vhost-user set-up, INIT
//! and a few FUSE operations with real assertions. Fails (never skips) without virtiofsd.

mod common;
#[path = "test_guest_smoke/raw_chains.rs"]
mod raw_chains;

use std::fs;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::daemon::spawn_virtiofsd;
use common::fuse_abi::*;
use common::fuse_client::from_bytes;
use common::{Daemon, FuseClient, GuestOptions, TempDir, TestGuest};

const MIB: usize = 1 << 20;

/// virtiofsd sharing a fresh temp dir, and a client that completed INIT.
struct Setup {
    client: FuseClient,
    daemon: Daemon,
    shared: TempDir,
    _sock_dir: TempDir,
}

fn setup() -> Setup {
    setup_with(&[])
}

fn setup_with(extra: &[&str]) -> Setup {
    let shared = TempDir::new("guest-smoke-shared").unwrap();
    let sock_dir = TempDir::new("guest-smoke-sock").unwrap();
    let socket = sock_dir.join("vfs.sock");
    let daemon = spawn_virtiofsd(&socket, shared.path(), extra)
        .unwrap_or_else(|e| panic!("cannot start the reference virtiofsd: {e}"));
    let guest = TestGuest::connect(&socket, 1, 256, 64 * MIB).expect("vhost-user set-up");
    let client = FuseClient::new(Arc::new(guest), 0);
    let init = client.init().expect("FUSE_INIT");
    assert_eq!(init.major, FUSE_KERNEL_VERSION);
    assert!(init.minor >= 31, "virtiofsd speaks 7.{}", init.minor);
    Setup {
        client,
        daemon,
        shared,
        _sock_dir: sock_dir,
    }
}

#[test]
fn handshake_and_init() {
    let s = setup();
    let guest = s.client.guest();
    assert_eq!(guest.request_queues(), 1);
    let f = guest.features();
    assert_ne!(f & common::frontend::VIRTIO_F_VERSION_1, 0);
    assert_ne!(f & common::frontend::VHOST_USER_F_PROTOCOL_FEATURES, 0);
    let flags = s.client.flags();
    assert_ne!(flags & FUSE_INIT_EXT, 0, "virtiofsd accepts FUSE_INIT_EXT");
    assert_ne!(flags & FUSE_DO_READDIRPLUS, 0);
    let mut daemon = s.daemon;
    assert!(daemon.is_alive());
    assert!(daemon.fd_count().unwrap() > 3);
    assert!(daemon.rss_bytes().unwrap() > 0);
}

#[test]
fn too_many_queues_rejected() {
    let extra = &[];
    let shared = TempDir::new("guest-smoke-shared").unwrap();
    let sock_dir = TempDir::new("guest-smoke-sock").unwrap();
    let socket = sock_dir.join("vfs.sock");
    let _daemon = spawn_virtiofsd(&socket, shared.path(), extra)
        .unwrap_or_else(|e| panic!("cannot start the reference virtiofsd: {e}"));
    // virtiofsd 1.14 serves exactly one request queue.
    let err = TestGuest::connect(&socket, 2, 128, 8 * MIB)
        .err()
        .expect("two request queues accepted");
    assert!(err.to_string().contains("supports 2 queues"), "{err}");
}

#[test]
fn lookup_getattr_forget() {
    let s = setup();
    fs::write(s.shared.join("hello.txt"), b"hello, world\n").unwrap();
    let c = &s.client;

    let e = c.lookup(FUSE_ROOT_ID, "hello.txt").expect("LOOKUP");
    assert_ne!(e.nodeid, 0);
    assert_ne!(e.nodeid, FUSE_ROOT_ID);
    assert_eq!(e.attr.size, 13);
    assert_eq!(e.attr.mode & libc::S_IFMT, libc::S_IFREG);

    assert_eq!(c.lookup(FUSE_ROOT_ID, "missing").err(), Some(libc::ENOENT));

    let a = c.getattr(e.nodeid, None).expect("GETATTR");
    assert_eq!(a.attr.ino, e.attr.ino);
    assert_eq!(a.attr.size, 13);
    let root = c.getattr(FUSE_ROOT_ID, None).expect("GETATTR root");
    assert_eq!(root.attr.mode & libc::S_IFMT, libc::S_IFDIR);

    // FORGET has no reply: the hiprio chain comes back with used length 0.
    c.forget(e.nodeid, 1);
    // The daemon keeps serving; a second LOOKUP gets a valid node again.
    let again = c
        .lookup(FUSE_ROOT_ID, "hello.txt")
        .expect("LOOKUP after FORGET");
    assert_eq!(again.attr.ino, e.attr.ino);
    c.batch_forget(&[(again.nodeid, 1)]);
    c.getattr(FUSE_ROOT_ID, None)
        .expect("GETATTR after BATCH_FORGET");
}

#[test]
fn create_write_read() {
    let s = setup();
    let c = &s.client;
    let (e, o) = c
        .create(
            FUSE_ROOT_ID,
            "new.bin",
            0o644 | libc::S_IFREG,
            libc::O_RDWR as u32,
            0o022,
        )
        .expect("CREATE");
    assert_eq!(e.attr.mode & libc::S_IFMT, libc::S_IFREG);

    let data: Vec<u8> = (0..200_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
    let written = c.write(e.nodeid, o.fh, 0, &data).expect("WRITE");
    assert_eq!(written as usize, data.len());
    let back = c.read(e.nodeid, o.fh, 0, data.len() as u32).expect("READ");
    assert_eq!(back, data);
    // Reading past the end returns the tail only.
    let tail = c.read(e.nodeid, o.fh, 199_990, 4096).expect("READ tail");
    assert_eq!(tail, &data[199_990..]);
    c.flush(e.nodeid, o.fh, 0).expect("FLUSH");
    c.release(e.nodeid, o.fh, libc::O_RDWR as u32)
        .expect("RELEASE");

    assert_eq!(fs::read(s.shared.join("new.bin")).unwrap(), data);
    assert_eq!(
        c.getattr(e.nodeid, None).unwrap().attr.size,
        data.len() as u64
    );
}

#[test]
fn readdirplus_small_dir() {
    let s = setup();
    let dir = s.shared.join("d");
    fs::create_dir(&dir).unwrap();
    for name in ["a", "bb", "ccc"] {
        fs::write(dir.join(name), name).unwrap();
    }
    fs::create_dir(dir.join("sub")).unwrap();
    let c = &s.client;

    let d = c.lookup(FUSE_ROOT_ID, "d").expect("LOOKUP dir");
    let o = c.opendir(d.nodeid, libc::O_RDONLY as u32).expect("OPENDIR");
    let entries = c
        .readdirplus(d.nodeid, o.fh, 0, 64 * 1024)
        .expect("READDIRPLUS");
    let mut names: Vec<String> = entries
        .iter()
        .map(|e| String::from_utf8(e.dirent.name.clone()).unwrap())
        .collect();
    names.sort();
    assert_eq!(names, [".", "..", "a", "bb", "ccc", "sub"]);
    for e in &entries {
        match e.dirent.name.as_slice() {
            b"." | b".." => assert_eq!(e.entry.nodeid, 0, "no entry for . and .."),
            b"sub" => {
                assert_ne!(e.entry.nodeid, 0);
                assert_eq!(e.entry.attr.mode & libc::S_IFMT, libc::S_IFDIR);
                assert_eq!(e.dirent.type_, libc::DT_DIR as u32);
            }
            name => {
                assert_ne!(e.entry.nodeid, 0);
                assert_eq!(e.entry.attr.size, name.len() as u64);
                assert_eq!(e.dirent.type_, libc::DT_REG as u32);
            }
        }
    }
    // Continuing after the last offset gives nothing.
    let last = entries.last().unwrap().dirent.off;
    assert!(c
        .readdirplus(d.nodeid, o.fh, last, 64 * 1024)
        .unwrap()
        .is_empty());
    c.releasedir(d.nodeid, o.fh).expect("RELEASEDIR");
}

fn measure_getattr(client: &FuseClient) -> Duration {
    for _ in 0..1000 {
        client.getattr(FUSE_ROOT_ID, None).unwrap();
    }
    let n = 20_000;
    let start = Instant::now();
    for _ in 0..n {
        client.getattr(FUSE_ROOT_ID, None).unwrap();
    }
    start.elapsed() / n
}

/// Prints the GETATTR round-trip time (one request in flight), interrupt-driven and with 50 µs of
/// busy polling; meaningful in release builds (`cargo test --release -- --nocapture`).
#[test]
fn getattr_latency() {
    let build = if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    };
    let s = setup();
    let per = measure_getattr(&s.client);
    println!(
        "GETATTR round trip against virtiofsd: {:.2} µs ({build} build, eventfd wait)",
        per.as_secs_f64() * 1e6
    );
    assert!(per < Duration::from_millis(10));

    let shared = TempDir::new("guest-smoke-shared").unwrap();
    let sock_dir = TempDir::new("guest-smoke-sock").unwrap();
    let socket = sock_dir.join("vfs.sock");
    let _daemon = spawn_virtiofsd(&socket, shared.path(), &[]).unwrap();
    let mut opts = GuestOptions::new(1, 256, 16 * MIB);
    opts.spin = Duration::from_micros(50);
    let guest = TestGuest::connect_with(&socket, &opts).unwrap();
    let client = FuseClient::new(Arc::new(guest), 0);
    client.init().unwrap();
    let per = measure_getattr(&client);
    println!(
        "GETATTR round trip against virtiofsd: {:.2} µs ({build} build, 50 µs spin)",
        per.as_secs_f64() * 1e6
    );
}

#[test]
fn pipeline_many_in_flight() {
    let s = setup();
    for i in 0..50 {
        fs::write(s.shared.join(&format!("f{i}")), vec![b'x'; i]).unwrap();
    }
    let c = &s.client;
    let lookup_len = 16 + std::mem::size_of::<EntryOut>();
    let requests: Vec<(Vec<u8>, usize)> = (0..500)
        .map(|i| {
            let name = format!("f{}\0", i % 50);
            (
                c.request(FUSE_LOOKUP, FUSE_ROOT_ID, name.as_bytes()),
                lookup_len,
            )
        })
        .collect();
    let replies = c.pipeline(&requests, 100);
    assert_eq!(replies.len(), 500);
    for (i, r) in replies.iter().enumerate() {
        let body = r.as_ref().expect("LOOKUP in pipeline");
        let e: EntryOut = from_bytes(body, "LOOKUP");
        assert_eq!(e.attr.size, (i % 50) as u64);
    }
    // All descriptors came back.
    assert_eq!(
        c.getattr(FUSE_ROOT_ID, None).unwrap().attr.mode & libc::S_IFMT,
        libc::S_IFDIR
    );
}

#[test]
fn namespace_and_metadata_ops() {
    let s = setup_with(&["--xattr"]);
    let c = &s.client;
    let root = FUSE_ROOT_ID;

    let d = c.mkdir(root, "dir", 0o755, 0o022).expect("MKDIR");
    assert_eq!(d.attr.mode & libc::S_IFMT, libc::S_IFDIR);
    assert_eq!(c.mkdir(root, "dir", 0o755, 0).err(), Some(libc::EEXIST));
    let l = c.symlink(d.nodeid, "link", "target/path").expect("SYMLINK");
    assert_eq!(c.readlink(l.nodeid).expect("READLINK"), b"target/path");
    let n = c
        .mknod(d.nodeid, "fifo", libc::S_IFIFO | 0o600, 0, 0)
        .expect("MKNOD");
    assert_eq!(n.attr.mode & libc::S_IFMT, libc::S_IFIFO);

    let (f, o) = c
        .create(
            d.nodeid,
            "file",
            libc::S_IFREG | 0o600,
            libc::O_RDWR as u32,
            0,
        )
        .expect("CREATE");
    assert_eq!(c.write(f.nodeid, o.fh, 0, b"0123456789").unwrap(), 10);
    c.fsync(f.nodeid, o.fh, true).expect("FSYNC");
    c.fallocate(f.nodeid, o.fh, 0, 1 << 20, 0)
        .expect("FALLOCATE");
    assert_eq!(c.getattr(f.nodeid, Some(o.fh)).unwrap().attr.size, 1 << 20);
    assert_eq!(c.lseek(f.nodeid, o.fh, 0, libc::SEEK_DATA as u32), Ok(0));
    let set = SetattrIn {
        valid: FATTR_SIZE | FATTR_MODE,
        size: 4,
        mode: 0o640,
        ..Default::default()
    };
    let a = c.setattr(f.nodeid, &set).expect("SETATTR");
    assert_eq!(a.attr.size, 4);
    assert_eq!(a.attr.mode & 0o7777, 0o640);

    let copy = CopyFileRangeIn {
        fh_in: o.fh,
        offset_in: 0,
        nodeid_out: f.nodeid,
        fh_out: o.fh,
        offset_out: 4,
        len: 4,
        flags: 0,
    };
    assert_eq!(c.copy_file_range(f.nodeid, &copy), Ok(4));
    assert_eq!(c.read(f.nodeid, o.fh, 0, 100).unwrap(), b"01230123");

    c.setxattr(f.nodeid, "user.test", b"value", 0)
        .expect("SETXATTR");
    assert_eq!(
        c.getxattr(f.nodeid, "user.test", 0),
        Ok(common::fuse_client::XattrReply::Size(5))
    );
    assert_eq!(
        c.getxattr(f.nodeid, "user.test", 64),
        Ok(common::fuse_client::XattrReply::Data(b"value".to_vec()))
    );
    match c.listxattr(f.nodeid, 4096).expect("LISTXATTR") {
        common::fuse_client::XattrReply::Data(list) => {
            assert!(list.split(|&b| b == 0).any(|n| n == b"user.test"))
        }
        other => panic!("{other:?}"),
    }
    c.removexattr(f.nodeid, "user.test").expect("REMOVEXATTR");
    assert_eq!(
        c.getxattr(f.nodeid, "user.test", 64).err(),
        Some(libc::ENODATA)
    );
    c.flush(f.nodeid, o.fh, 0).unwrap();
    c.release(f.nodeid, o.fh, libc::O_RDWR as u32).unwrap();

    let h = c.link(f.nodeid, root, "hard").expect("LINK");
    assert_eq!(h.attr.nlink, 2);
    c.rename(root, "hard", d.nodeid, "hard2").expect("RENAME");
    assert_eq!(
        c.rename2(d.nodeid, "hard2", d.nodeid, "file", libc::RENAME_NOREPLACE),
        Err(libc::EEXIST)
    );
    c.rename2(d.nodeid, "hard2", d.nodeid, "file", libc::RENAME_EXCHANGE)
        .expect("RENAME2 exchange");
    c.access(f.nodeid, libc::R_OK as u32).expect("ACCESS");
    assert!(c.statfs(root).expect("STATFS").bsize > 0);

    let od = c.opendir(d.nodeid, 0).unwrap();
    let mut names: Vec<Vec<u8>> = c
        .readdir(d.nodeid, od.fh, 0, 4096)
        .expect("READDIR")
        .into_iter()
        .map(|e| e.name)
        .collect();
    names.sort();
    assert_eq!(
        names,
        [&b"."[..], b"..", b"fifo", b"file", b"hard2", b"link"]
    );
    c.fsyncdir(d.nodeid, od.fh, false).expect("FSYNCDIR");
    c.releasedir(d.nodeid, od.fh).unwrap();

    for name in ["fifo", "file", "hard2", "link"] {
        c.unlink(d.nodeid, name)
            .unwrap_or_else(|e| panic!("UNLINK {name}: {e}"));
    }
    c.rmdir(root, "dir").expect("RMDIR");
    assert!(fs::read_dir(s.shared.path()).unwrap().next().is_none());

    // Operations newer than the reference's FUSE 7.33 server still get a (valid) reply.
    let st = c.statx(root, None, 0, libc::STATX_BASIC_STATS);
    assert!(
        matches!(st, Ok(_) | Err(libc::ENOSYS)),
        "STATX {:?}",
        st.err()
    );
    let tmp = c.tmpfile(root, libc::S_IFREG | 0o600, libc::O_RDWR as u32, 0);
    assert!(
        matches!(tmp, Ok(_) | Err(libc::ENOSYS)),
        "TMPFILE {:?}",
        tmp.err()
    );
    c.syncfs().expect("SYNCFS");
    c.destroy().expect("DESTROY");
}

#[test]
fn threads_share_a_queue() {
    let s = setup();
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let c = s.client.on_queue(0);
            std::thread::spawn(move || {
                for _ in 0..500 {
                    c.getattr(FUSE_ROOT_ID, None).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

/// `Daemon::spawn` returns only once the socket listens: a daemon that binds, waits half a
/// second and then listens (as virtiofsd does for a moment) is connectable when it returns.
#[test]
fn spawn_waits_until_the_socket_listens() {
    let dir = TempDir::new("guest-smoke-listen").unwrap();
    let socket = dir.join("late.sock");
    let script = "import socket, sys, time\n\
                  s = socket.socket(socket.AF_UNIX)\n\
                  s.bind(sys.argv[1])\n\
                  time.sleep(0.5)\n\
                  s.listen(1)\n\
                  time.sleep(30)\n";
    let mut cmd = std::process::Command::new("python3");
    cmd.arg("-c").arg(script).arg(&socket);
    let _daemon = Daemon::spawn(&mut cmd, &socket).expect("spawn");
    std::os::unix::net::UnixStream::connect(&socket).expect("connect once spawn returned");
}
