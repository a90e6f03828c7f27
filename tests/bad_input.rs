//! The guest is untrusted: malformed FUSE requests, bogus node IDs and file handles, names that
//! try to leave the shared directory, broken descriptor chains and a few thousand random
//! requests, all sent over the real vhost-user socket to a vhostfs process.
//!
//! After each batch the daemon must still be running, answer GETATTR on the root and a LOOKUP,
//! hold no more fds than the guest legitimately made it hold (plus a small transient slack),
//! never have printed "panicked", and nothing next to the shared directory (a "canary" tree)
//! may have changed.

mod common;

use std::fs::{self, File};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use vm_memory::ByteValued;

use common::fuse_abi::*;
use common::virtqueue::{VIRTQ_DESC_F_INDIRECT, VIRTQ_DESC_F_NEXT, VIRTQ_DESC_F_WRITE};
use common::{Daemon, FuseClient, GuestBuf, Next, RawDesc, TempDir, TestGuest};

const ROOT: u64 = FUSE_ROOT_ID;
const HDR: usize = std::mem::size_of::<OutHeader>();
const IN_HDR: usize = std::mem::size_of::<InHeader>();
const QUEUE_SIZE: u16 = 128;
const MEM_SIZE: usize = 32 << 20;
/// fds a request may hold transiently, and mount fds opened on first sight of a mount.
const FD_SLACK: usize = 16;
/// How long a raw chain may take before it counts as dropped.
const CHAIN_TIMEOUT: Duration = Duration::from_secs(5);
const FATTR_MODE: u32 = 1 << 0;
const FATTR_UID: u32 = 1 << 1;
const FATTR_SIZE: u32 = 1 << 3;
const FATTR_FH: u32 = 1 << 6;
const FUSE_GETATTR_FH: u32 = 1;
const FILE_DATA: &[u8] = b"shared file contents\n";
const CANARY_DATA: &[u8] = b"outside the share: must never change\n";

/// A parsed reply: none written (used length 0), an error, or a successful body.
#[derive(Debug, PartialEq, Eq)]
enum Reply {
    Empty,
    Err(i32),
    Ok(Vec<u8>),
}

/// Checks that `reply` is empty or a well-formed reply to a request whose unique is `unique`.
fn parse(unique: u64, reply: &[u8], what: &str) -> Reply {
    if reply.is_empty() {
        return Reply::Empty;
    }
    assert!(
        reply.len() >= HDR,
        "{what}: used length {} < 16",
        reply.len()
    );
    let out: OutHeader = common::fuse_client::from_bytes(reply, "out header");
    assert_eq!(out.len as usize, reply.len(), "{what}: out.len != used");
    assert_eq!(out.unique, unique, "{what}: reply to another unique");
    if out.error != 0 {
        assert!(
            (-4095..0).contains(&out.error) && reply.len() == HDR,
            "{what}: bad error reply {out:?}"
        );
        return Reply::Err(-out.error);
    }
    Reply::Ok(reply[HDR..].to_vec())
}

fn unique_of(req: &[u8]) -> u64 {
    u64::from_le_bytes(req[8..16].try_into().unwrap())
}

fn cstr(s: &[u8]) -> Vec<u8> {
    let mut v = s.to_vec();
    v.push(0);
    v
}

fn cat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

/// A description of a path (type, mode, owner, size, times, inode, contents) that changes if
/// anything is done to it.
fn describe(path: &Path) -> String {
    let m = fs::symlink_metadata(path).unwrap();
    let content = if m.file_type().is_symlink() {
        format!("-> {:?}", fs::read_link(path).unwrap())
    } else if m.is_file() {
        format!("{:?}", fs::read(path).unwrap())
    } else {
        String::new()
    };
    format!(
        "{} mode {:o} uid {} gid {} size {} nlink {} ino {} mtime {}.{} ctime {}.{} {content}",
        path.display(),
        m.mode(),
        m.uid(),
        m.gid(),
        m.size(),
        m.nlink(),
        m.ino(),
        m.mtime(),
        m.mtime_nsec(),
        m.ctime(),
        m.ctime_nsec()
    )
}

/// Everything outside the share that a confinement bug could touch: the names next to it, the
/// canary tree and the host's /etc/passwd.
fn outside_snapshot(top: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(top)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let mut out = vec![format!("{}: {names:?}", top.display())];
    let mut stack = vec![top.join("canary")];
    while let Some(p) = stack.pop() {
        out.push(describe(&p));
        if fs::symlink_metadata(&p).unwrap().is_dir() {
            let mut children: Vec<PathBuf> = fs::read_dir(&p)
                .unwrap()
                .map(|e| e.unwrap().path())
                .collect();
            children.sort();
            stack.extend(children);
        }
    }
    let passwd = fs::metadata("/etc/passwd").unwrap();
    out.push(format!(
        "/etc/passwd mode {:o} uid {} size {} mtime {}.{}",
        passwd.mode(),
        passwd.uid(),
        passwd.size(),
        passwd.mtime(),
        passwd.mtime_nsec()
    ));
    out
}

/// Node IDs of the share's fixtures, as looked up at start.
struct Nodes {
    file: u64,
    dir: u64,
    /// A symlink to the canary file outside the share.
    escape: u64,
}

struct Setup {
    daemon: Daemon,
    client: FuseClient,
    nodes: Nodes,
    top: TempDir,
    stderr_path: PathBuf,
    _sock_dir: TempDir,
    outside: Vec<String>,
    fd_baseline: usize,
    /// fds the guest legitimately holds (successful OPEN/OPENDIR/CREATE/TMPFILE not released).
    held_fds: usize,
}

impl Setup {
    /// `top/share` (shared: file.txt, dir/inner, escape -> top/canary/secret.txt) next to
    /// `top/canary` (secret.txt, sub/deeper); vhostfs with stderr to a file; INIT done.
    fn new() -> Setup {
        let top = TempDir::new("badinput").unwrap();
        let share = top.join("share");
        let canary = top.join("canary");
        fs::create_dir_all(share.join("dir")).unwrap();
        fs::write(share.join("file.txt"), FILE_DATA).unwrap();
        fs::write(share.join("dir/inner"), b"inner").unwrap();
        fs::create_dir_all(canary.join("sub")).unwrap();
        fs::write(canary.join("secret.txt"), CANARY_DATA).unwrap();
        fs::write(canary.join("sub/deeper"), CANARY_DATA).unwrap();
        std::os::unix::fs::symlink(canary.join("secret.txt"), share.join("escape")).unwrap();
        let outside = outside_snapshot(top.path());

        let sock_dir = TempDir::new("badinput-sock").unwrap();
        let socket = sock_dir.join("vhostfs.sock");
        let stderr_path = sock_dir.join("stderr.log");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_vhostfs"));
        cmd.arg(format!("--socket-path={}", socket.display()))
            .arg(format!("--shared-dir={}", share.display()))
            .stdout(Stdio::null())
            .stderr(File::create(&stderr_path).unwrap());
        let daemon = Daemon::spawn(&mut cmd, &socket).expect("start vhostfs");
        let guest = TestGuest::connect(&socket, 1, QUEUE_SIZE, MEM_SIZE).expect("connect");
        let client = FuseClient::new(Arc::new(guest), 0);
        client.init().expect("INIT");
        let nodes = Nodes {
            file: client.lookup(ROOT, "file.txt").unwrap().nodeid,
            dir: client.lookup(ROOT, "dir").unwrap().nodeid,
            escape: client.lookup(ROOT, "escape").unwrap().nodeid,
        };
        let fd_baseline = daemon.fd_count().unwrap();
        Setup {
            daemon,
            client,
            nodes,
            top,
            stderr_path,
            _sock_dir: sock_dir,
            outside,
            fd_baseline,
            held_fds: 0,
        }
    }

    fn share(&self) -> PathBuf {
        self.top.join("share")
    }

    fn guest(&self) -> &TestGuest {
        self.client.guest()
    }

    /// Sends `req` with `reply_len` bytes of reply space on the request queue; the daemon must
    /// complete it, with nothing or a well-formed reply.
    fn send(&self, req: &[u8], reply_len: usize, what: &str) -> Reply {
        let reply = self
            .guest()
            .roundtrip(0, req, reply_len)
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        parse(unique_of(req), &reply, what)
    }

    /// A well-formed request (header with the right length) with `body`.
    fn call(&self, opcode: u32, nodeid: u64, body: &[u8], reply_len: usize) -> Reply {
        let req = self.client.request(opcode, nodeid, body);
        let what = format!("opcode {opcode} node {nodeid:#x} body {} bytes", body.len());
        self.send(&req, reply_len, &what)
    }

    /// [`Setup::call`] that must fail with an error reply (any errno); returns the errno.
    fn call_err(&self, opcode: u32, nodeid: u64, body: &[u8], reply_len: usize) -> i32 {
        match self.call(opcode, nodeid, body, reply_len) {
            Reply::Err(e) => e,
            other => panic!("opcode {opcode} node {nodeid:#x}: expected an error, got {other:?}"),
        }
    }

    /// Submits a raw chain; the daemon must complete it within [`CHAIN_TIMEOUT`].
    fn chain(&self, descs: &[RawDesc], what: &str) -> u32 {
        self.guest()
            .raw_chain(0, descs, CHAIN_TIMEOUT)
            .unwrap_or_else(|e| panic!("{what}: {e}"))
            .unwrap_or_else(|| panic!("{what}: chain not completed within {CHAIN_TIMEOUT:?}"))
    }

    /// A guest buffer holding `data`.
    fn buf(&self, data: &[u8]) -> GuestBuf {
        let b = self.guest().guest_alloc(data.len()).unwrap();
        b.write(0, data);
        b
    }

    /// The daemon runs, answers GETATTR on the root and a LOOKUP, and holds no more fds than
    /// at start plus what the guest holds plus [`FD_SLACK`].
    fn assert_serving(&mut self, ctx: &str) {
        assert!(self.daemon.is_alive(), "{ctx}: vhostfs exited");
        let root = self
            .client
            .getattr(ROOT, None)
            .unwrap_or_else(|e| panic!("{ctx}: GETATTR root: errno {e}"));
        assert_eq!(root.attr.mode & libc::S_IFMT, libc::S_IFDIR, "{ctx}");
        let e = self
            .client
            .lookup(ROOT, "file.txt")
            .unwrap_or_else(|e| panic!("{ctx}: LOOKUP file.txt: errno {e}"));
        assert_eq!(e.attr.mode & libc::S_IFMT, libc::S_IFREG, "{ctx}");
        self.client.forget(e.nodeid, 1);
        let fds = self.daemon.fd_count().unwrap();
        let limit = self.fd_baseline + self.held_fds + FD_SLACK;
        assert!(
            fds <= limit,
            "{ctx}: vhostfs holds {fds} fds (baseline {}, guest holds {}, slack {FD_SLACK})",
            self.fd_baseline,
            self.held_fds
        );
    }

    /// Final checks: serving, no panic on stderr, nothing outside the share changed.
    fn finish(mut self, ctx: &str) {
        self.assert_serving(ctx);
        let stderr = fs::read_to_string(&self.stderr_path).unwrap();
        assert!(
            !stderr.contains("panicked"),
            "{ctx}: vhostfs panicked:\n{stderr}"
        );
        assert_eq!(
            outside_snapshot(self.top.path()),
            self.outside,
            "{ctx}: something outside the share changed"
        );
        assert_eq!(
            fs::read(self.top.join("canary/secret.txt")).unwrap(),
            CANARY_DATA
        );
    }
}

/// The fixed-size struct an opcode's body starts with, as zeros (its size is what matters).
fn body_struct(opcode: u32) -> Option<usize> {
    Some(match opcode {
        FUSE_GETATTR => 16,
        FUSE_SETATTR => 88,
        FUSE_MKNOD => 16,
        FUSE_MKDIR => 8,
        FUSE_RENAME => 8,
        FUSE_LINK => 8,
        FUSE_OPEN | FUSE_OPENDIR => 8,
        FUSE_READ | FUSE_READDIR | FUSE_READDIRPLUS => 40,
        FUSE_WRITE => 40,
        FUSE_RELEASE | FUSE_RELEASEDIR | FUSE_FLUSH => 24,
        FUSE_FSYNC | FUSE_FSYNCDIR => 16,
        FUSE_SETXATTR => 8,
        FUSE_GETXATTR | FUSE_LISTXATTR => 8,
        FUSE_INIT => 8,
        FUSE_ACCESS => 8,
        FUSE_CREATE | FUSE_TMPFILE => 16,
        FUSE_FALLOCATE => 32,
        FUSE_RENAME2 => 16,
        FUSE_LSEEK => 24,
        FUSE_COPY_FILE_RANGE => 56,
        FUSE_SYNCFS => 8,
        FUSE_STATX => 24,
        _ => return None,
    })
}

#[test]
fn malformed_headers_and_bodies() {
    let mut s = Setup::new();
    let good = s
        .client
        .request(FUSE_GETATTR, ROOT, GetattrIn::default().as_slice());

    // Truncated fuse_in_header: EINVAL, with the unique if it made it.
    for n in 0..IN_HDR {
        let want_unique = if n >= 16 { unique_of(&good) } else { 0 };
        let reply = s.guest().roundtrip(0, &good[..n], 256).unwrap();
        assert_eq!(
            parse(want_unique, &reply, &format!("{n}-byte header")),
            Reply::Err(libc::EINVAL),
            "{n}-byte header"
        );
    }
    s.assert_serving("truncated headers");

    // `len` not matching the data.
    let real_len = good.len() as u32;
    for len in [0, 1, 39, real_len + 1, real_len + 4096, u32::MAX] {
        let mut req = good.clone();
        req[0..4].copy_from_slice(&len.to_le_bytes());
        assert_eq!(
            s.send(&req, 256, &format!("len {len}")),
            Reply::Err(libc::EINVAL),
            "header len {len}, {real_len} bytes sent"
        );
    }
    // `len` shorter than the data but covering the header: the body is cut to `len`, and an
    // empty GETATTR body is too short.
    let mut req = good.clone();
    req[0..4].copy_from_slice(&(IN_HDR as u32).to_le_bytes());
    assert_eq!(s.send(&req, 256, "len 40"), Reply::Err(libc::EINVAL));
    // Extensions longer than the body.
    let req = s
        .client
        .request_with_ext(FUSE_GETATTR, ROOT, GetattrIn::default().as_slice(), 3);
    assert_eq!(s.send(&req, 256, "extlen 3"), Reply::Err(libc::EINVAL));
    s.assert_serving("bad lengths");

    // Unknown opcodes.
    for opcode in [0, 7, 19, 53, 9999, u32::MAX] {
        assert_eq!(
            s.call(opcode, ROOT, &[0; 64], 256),
            Reply::Err(libc::ENOSYS),
            "opcode {opcode}"
        );
    }
    s.assert_serving("unknown opcodes");

    // Bodies shorter than the opcode's struct: EINVAL.
    for opcode in 1..=FUSE_STATX {
        let Some(size) = body_struct(opcode) else {
            continue;
        };
        for len in [0, 1, size - 1] {
            let errno = s.call_err(opcode, s.nodes.file, &vec![0; len], 4096);
            assert_eq!(
                errno,
                libc::EINVAL,
                "opcode {opcode} with a {len}-byte body"
            );
        }
    }
    // No reply expected: completed with used length 0 even with reply space.
    for opcode in [FUSE_FORGET, FUSE_BATCH_FORGET, FUSE_INTERRUPT] {
        for len in [0, 7] {
            assert_eq!(
                s.call(opcode, s.nodes.file, &vec![0; len], 256),
                Reply::Empty
            );
        }
    }
    // BATCH_FORGET whose count the body cannot hold, on the hiprio queue: nothing forgotten.
    let batch = cat(&[
        BatchForgetIn {
            count: u32::MAX,
            dummy: 0,
        }
        .as_slice(),
        ForgetOne {
            nodeid: s.nodes.file,
            nlookup: 1,
        }
        .as_slice(),
    ]);
    let req = s.client.request(FUSE_BATCH_FORGET, 0, &batch);
    assert_eq!(
        s.guest().hiprio_roundtrip(&req, 0).unwrap(),
        Vec::<u8>::new()
    );
    assert!(
        s.client.getattr(s.nodes.file, None).is_ok(),
        "file forgotten"
    );
    s.assert_serving("short bodies");

    // Names without NUL, and empty names.
    let mkdir_in = MkdirIn {
        mode: 0o755,
        umask: 0,
    };
    let create_in = CreateIn {
        flags: libc::O_RDWR as u32,
        mode: libc::S_IFREG | 0o644,
        umask: 0,
        fuse_flags: 0,
    };
    for name in [&b"no-nul"[..], b"", b"\0"] {
        let cases: Vec<(u32, Vec<u8>)> = vec![
            (FUSE_LOOKUP, name.to_vec()),
            (FUSE_MKDIR, cat(&[mkdir_in.as_slice(), name])),
            (FUSE_CREATE, cat(&[create_in.as_slice(), name])),
            (FUSE_UNLINK, name.to_vec()),
            (FUSE_RMDIR, name.to_vec()),
            (FUSE_SYMLINK, cat(&[name, b"target\0"])),
            (
                FUSE_RENAME,
                cat(&[RenameIn { newdir: ROOT }.as_slice(), name, b"x\0"]),
            ),
            (
                FUSE_RENAME,
                cat(&[RenameIn { newdir: ROOT }.as_slice(), b"file.txt\0", name]),
            ),
            (
                FUSE_LINK,
                cat(&[
                    LinkIn {
                        oldnodeid: s.nodes.file,
                    }
                    .as_slice(),
                    name,
                ]),
            ),
            (
                FUSE_GETXATTR,
                cat(&[
                    GetxattrIn {
                        size: 64,
                        padding: 0,
                    }
                    .as_slice(),
                    name,
                ]),
            ),
            (FUSE_REMOVEXATTR, name.to_vec()),
        ];
        for (opcode, body) in cases {
            let errno = s.call_err(opcode, ROOT, &body, 4096);
            // Xattrs are off by default: those may say so before looking at the name.
            if !matches!(opcode, FUSE_GETXATTR | FUSE_REMOVEXATTR) {
                assert_eq!(errno, libc::EINVAL, "opcode {opcode} with name {name:?}");
            }
        }
    }
    let mut names: Vec<_> = fs::read_dir(s.share())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    names.sort();
    assert_eq!(names, ["dir", "escape", "file.txt"], "the share changed");
    s.finish("malformed requests");
}

#[test]
fn bogus_node_ids_and_file_handles() {
    let mut s = Setup::new();
    let file = s.nodes.file;
    let dir = s.nodes.dir;
    let setxattr = if s.client.flags() & FUSE_SETXATTR_EXT != 0 {
        SetxattrInExt {
            size: 1,
            ..Default::default()
        }
        .as_slice()
        .to_vec()
    } else {
        SetxattrIn { size: 1, flags: 0 }.as_slice().to_vec()
    };
    for bogus in [0, 2, 12345, u64::MAX] {
        // Node ID in the header.
        let mode = SetattrIn {
            valid: FATTR_MODE,
            mode: 0o600,
            ..Default::default()
        };
        let cases: Vec<(u32, Vec<u8>)> = vec![
            (FUSE_LOOKUP, cstr(b"file.txt")),
            (FUSE_GETATTR, GetattrIn::default().as_slice().to_vec()),
            (FUSE_SETATTR, mode.as_slice().to_vec()),
            (FUSE_READLINK, Vec::new()),
            (FUSE_SYMLINK, cat(&[b"s\0", b"target\0"])),
            (
                FUSE_MKNOD,
                cat(&[
                    MknodIn {
                        mode: libc::S_IFREG | 0o644,
                        ..Default::default()
                    }
                    .as_slice(),
                    b"n\0",
                ]),
            ),
            (
                FUSE_MKDIR,
                cat(&[
                    MkdirIn {
                        mode: 0o755,
                        umask: 0,
                    }
                    .as_slice(),
                    b"d\0",
                ]),
            ),
            (FUSE_UNLINK, cstr(b"file.txt")),
            (FUSE_RMDIR, cstr(b"dir")),
            (
                FUSE_RENAME,
                cat(&[RenameIn { newdir: ROOT }.as_slice(), b"file.txt\0x\0"]),
            ),
            (
                FUSE_RENAME2,
                cat(&[
                    Rename2In {
                        newdir: ROOT,
                        ..Default::default()
                    }
                    .as_slice(),
                    b"file.txt\0x\0",
                ]),
            ),
            (
                FUSE_LINK,
                cat(&[LinkIn { oldnodeid: file }.as_slice(), b"l\0"]),
            ),
            (
                FUSE_OPEN,
                OpenIn {
                    flags: libc::O_RDONLY as u32,
                    fuse_flags: 0,
                }
                .as_slice()
                .to_vec(),
            ),
            (FUSE_OPENDIR, OpenIn::default().as_slice().to_vec()),
            (
                FUSE_CREATE,
                cat(&[
                    CreateIn {
                        flags: libc::O_RDWR as u32,
                        mode: libc::S_IFREG | 0o644,
                        ..Default::default()
                    }
                    .as_slice(),
                    b"c\0",
                ]),
            ),
            (
                FUSE_TMPFILE,
                cat(&[
                    CreateIn {
                        flags: libc::O_RDWR as u32,
                        mode: libc::S_IFREG | 0o644,
                        ..Default::default()
                    }
                    .as_slice(),
                    b"/\0",
                ]),
            ),
            (FUSE_STATFS, Vec::new()),
            (
                FUSE_ACCESS,
                AccessIn {
                    mask: 4,
                    padding: 0,
                }
                .as_slice()
                .to_vec(),
            ),
            (
                FUSE_GETXATTR,
                cat(&[
                    GetxattrIn {
                        size: 64,
                        padding: 0,
                    }
                    .as_slice(),
                    b"user.x\0",
                ]),
            ),
            (
                FUSE_LISTXATTR,
                GetxattrIn {
                    size: 64,
                    padding: 0,
                }
                .as_slice()
                .to_vec(),
            ),
            (FUSE_SETXATTR, cat(&[&setxattr, b"user.x\0v"])),
            (FUSE_REMOVEXATTR, cstr(b"user.x")),
            (
                FUSE_STATX,
                StatxIn {
                    sx_mask: 0x7ff,
                    ..Default::default()
                }
                .as_slice()
                .to_vec(),
            ),
        ];
        for (opcode, body) in &cases {
            let errno = s.call_err(*opcode, bogus, body, 4096);
            if !matches!(
                *opcode,
                FUSE_GETXATTR | FUSE_LISTXATTR | FUSE_SETXATTR | FUSE_REMOVEXATTR
            ) {
                assert_eq!(errno, libc::EBADF, "opcode {opcode} on node {bogus:#x}");
            }
        }
        // Node IDs in the body: the second node of RENAME/LINK/COPY_FILE_RANGE.
        let in_body: Vec<(u32, u64, Vec<u8>)> = vec![
            (
                FUSE_RENAME,
                ROOT,
                cat(&[RenameIn { newdir: bogus }.as_slice(), b"file.txt\0x\0"]),
            ),
            (
                FUSE_RENAME2,
                ROOT,
                cat(&[
                    Rename2In {
                        newdir: bogus,
                        ..Default::default()
                    }
                    .as_slice(),
                    b"file.txt\0x\0",
                ]),
            ),
            (
                FUSE_LINK,
                ROOT,
                cat(&[LinkIn { oldnodeid: bogus }.as_slice(), b"l\0"]),
            ),
        ];
        for (opcode, node, body) in &in_body {
            let errno = s.call_err(*opcode, *node, body, 4096);
            assert_eq!(
                errno,
                libc::EBADF,
                "opcode {opcode} with node {bogus:#x} in the body"
            );
        }
        // FORGET of unknown nodes has no reply and no effect.
        s.client.forget(bogus, 1);
        s.client.batch_forget(&[(bogus, 1), (bogus, u64::MAX)]);
    }
    s.assert_serving("bogus node IDs");

    // Bogus file handles on a real file and a real directory, including handles of the other
    // kind (a directory's fh for READ, a file's fh for READDIR).
    let o = s.client.open(file, libc::O_RDWR as u32).expect("OPEN");
    let d = s.client.opendir(dir, 0).expect("OPENDIR");
    s.held_fds += 2;
    for (fh, for_file, for_dir) in [
        (0, true, true),
        (12345, true, true),
        (u64::MAX, true, true),
        (o.fh + 1000, true, true),
        (d.fh, true, false),
        (o.fh, false, true),
    ] {
        let mut file_cases: Vec<(u32, Vec<u8>)> = vec![
            (
                FUSE_READ,
                ReadIn {
                    fh,
                    size: 64,
                    ..Default::default()
                }
                .as_slice()
                .to_vec(),
            ),
            (
                FUSE_WRITE,
                cat(&[
                    WriteIn {
                        fh,
                        size: 1,
                        ..Default::default()
                    }
                    .as_slice(),
                    b"X",
                ]),
            ),
            (
                FUSE_FSYNC,
                FsyncIn {
                    fh,
                    ..Default::default()
                }
                .as_slice()
                .to_vec(),
            ),
            (
                FUSE_FALLOCATE,
                FallocateIn {
                    fh,
                    length: 10,
                    ..Default::default()
                }
                .as_slice()
                .to_vec(),
            ),
            (
                FUSE_LSEEK,
                LseekIn {
                    fh,
                    whence: libc::SEEK_SET as u32,
                    ..Default::default()
                }
                .as_slice()
                .to_vec(),
            ),
            (
                FUSE_COPY_FILE_RANGE,
                CopyFileRangeIn {
                    fh_in: fh,
                    nodeid_out: file,
                    fh_out: o.fh,
                    len: 4,
                    ..Default::default()
                }
                .as_slice()
                .to_vec(),
            ),
            (
                FUSE_GETATTR,
                GetattrIn {
                    flags: FUSE_GETATTR_FH,
                    dummy: 0,
                    fh,
                }
                .as_slice()
                .to_vec(),
            ),
            (
                FUSE_SETATTR,
                SetattrIn {
                    valid: FATTR_FH | FATTR_SIZE,
                    fh,
                    size: 0,
                    ..Default::default()
                }
                .as_slice()
                .to_vec(),
            ),
            (
                FUSE_STATX,
                StatxIn {
                    getattr_flags: FUSE_GETATTR_FH,
                    fh,
                    sx_mask: 0x7ff,
                    ..Default::default()
                }
                .as_slice()
                .to_vec(),
            ),
        ];
        if fh != o.fh {
            // COPY_FILE_RANGE into a bogus fh_out.
            file_cases.push((
                FUSE_COPY_FILE_RANGE,
                CopyFileRangeIn {
                    fh_in: o.fh,
                    nodeid_out: file,
                    fh_out: fh,
                    len: 4,
                    ..Default::default()
                }
                .as_slice()
                .to_vec(),
            ));
        }
        let dir_cases: Vec<(u32, Vec<u8>)> = [FUSE_READDIR, FUSE_READDIRPLUS]
            .into_iter()
            .map(|op| {
                let r = ReadIn {
                    fh,
                    size: 4096,
                    ..Default::default()
                };
                (op, r.as_slice().to_vec())
            })
            .chain([(
                FUSE_FSYNCDIR,
                FsyncIn {
                    fh,
                    ..Default::default()
                }
                .as_slice()
                .to_vec(),
            )])
            .collect();
        // Handles of the other kind: vhostfs does not check that an fh belongs to the node of
        // the request (virtiofsd answers EBADF); the fh's own file is used, and the request
        // fails or not for what that file is. Harmless (the guest holds both), but pinned here.
        let want_file = |opcode: u32| -> Option<i32> {
            if fh != d.fh {
                return Some(libc::EBADF);
            }
            match opcode {
                FUSE_READ | FUSE_WRITE | FUSE_COPY_FILE_RANGE => Some(libc::EISDIR),
                FUSE_FALLOCATE => Some(libc::EBADF),
                FUSE_SETATTR => Some(libc::EINVAL),
                _ => None,
            }
        };
        let want_dir = if fh == o.fh {
            libc::ENOTDIR
        } else {
            libc::EBADF
        };
        if for_file {
            for (opcode, body) in &file_cases {
                let r = s.call(*opcode, file, body, 8192);
                match want_file(*opcode) {
                    Some(errno) => {
                        assert_eq!(r, Reply::Err(errno), "opcode {opcode} on fh {fh:#x}")
                    }
                    None => assert!(
                        matches!(r, Reply::Ok(_)),
                        "opcode {opcode} on fh {fh:#x}: {r:?}"
                    ),
                }
                if let (FUSE_GETATTR, Reply::Ok(body)) = (*opcode, &r) {
                    let a: AttrOut = common::fuse_client::from_bytes(body, "GETATTR");
                    assert_eq!(
                        a.attr.mode & libc::S_IFMT,
                        libc::S_IFDIR,
                        "not the fh's file"
                    );
                }
            }
        }
        if for_dir {
            for (opcode, body) in &dir_cases {
                let errno = s.call_err(*opcode, dir, body, 8192);
                assert_eq!(errno, want_dir, "opcode {opcode} on fh {fh:#x}");
            }
        }
    }
    // Bogus RELEASE/RELEASEDIR/FLUSH of handles that do not exist: whatever the answer, the
    // real handles must stay open.
    for fh in [0, 12345, u64::MAX, o.fh + 1000] {
        for (opcode, node) in [
            (FUSE_RELEASE, file),
            (FUSE_RELEASEDIR, dir),
            (FUSE_FLUSH, file),
        ] {
            let body = ReleaseIn {
                fh,
                ..Default::default()
            };
            let r = s.call(opcode, node, body.as_slice(), 256);
            assert!(
                matches!(r, Reply::Err(_) | Reply::Ok(_)),
                "opcode {opcode} fh {fh:#x}: {r:?}"
            );
        }
    }
    assert_eq!(s.client.read(file, o.fh, 0, 4096).unwrap(), FILE_DATA);
    assert!(s.client.readdir(dir, d.fh, 0, 4096).unwrap().len() >= 3);
    assert_eq!(fs::read(s.share().join("file.txt")).unwrap(), FILE_DATA);
    s.client.release(file, o.fh, libc::O_RDWR as u32).unwrap();
    s.client.releasedir(dir, d.fh).unwrap();
    s.held_fds -= 2;
    s.finish("bogus node IDs and fhs");
}

#[test]
fn names_and_symlinks_stay_inside() {
    let mut s = Setup::new();
    let bad_names: [&[u8]; 7] = [b"a/b", b"..", b".", b"/", b"../canary", b"/etc", b"dir/.."];
    let mknod_in = MknodIn {
        mode: libc::S_IFREG | 0o644,
        ..Default::default()
    };
    let mkdir_in = MkdirIn {
        mode: 0o755,
        umask: 0,
    };
    let create_in = CreateIn {
        flags: libc::O_RDWR as u32,
        mode: libc::S_IFREG | 0o644,
        ..Default::default()
    };
    for name in bad_names {
        let n = cstr(name);
        let cases: Vec<(u32, Vec<u8>)> = vec![
            (FUSE_LOOKUP, n.clone()),
            (FUSE_MKDIR, cat(&[mkdir_in.as_slice(), &n])),
            (FUSE_CREATE, cat(&[create_in.as_slice(), &n])),
            (FUSE_SYMLINK, cat(&[&n, b"target\0"])),
            (FUSE_MKNOD, cat(&[mknod_in.as_slice(), &n])),
            (FUSE_UNLINK, n.clone()),
            (FUSE_RMDIR, n.clone()),
            (
                FUSE_RENAME,
                cat(&[RenameIn { newdir: ROOT }.as_slice(), &n, b"x\0"]),
            ),
            (
                FUSE_RENAME,
                cat(&[RenameIn { newdir: ROOT }.as_slice(), b"file.txt\0", &n]),
            ),
            (
                FUSE_RENAME2,
                cat(&[
                    Rename2In {
                        newdir: ROOT,
                        ..Default::default()
                    }
                    .as_slice(),
                    b"file.txt\0",
                    &n,
                ]),
            ),
            (
                FUSE_LINK,
                cat(&[
                    LinkIn {
                        oldnodeid: s.nodes.file,
                    }
                    .as_slice(),
                    &n,
                ]),
            ),
        ];
        for (opcode, body) in cases {
            for parent in [ROOT, s.nodes.dir] {
                let errno = s.call_err(opcode, parent, &body, 4096);
                assert_eq!(errno, libc::EINVAL, "opcode {opcode} with name {name:?}");
            }
        }
    }
    s.assert_serving("bad names");

    // A symlink to /etc/passwd is data: READLINK returns it, nothing follows it.
    let e = s
        .client
        .symlink(ROOT, "passwd", "/etc/passwd")
        .expect("SYMLINK");
    assert_eq!(e.attr.mode & libc::S_IFMT, libc::S_IFLNK);
    assert_eq!(s.client.readlink(e.nodeid).unwrap(), b"/etc/passwd");
    assert_eq!(
        fs::read_link(s.share().join("passwd")).unwrap(),
        Path::new("/etc/passwd")
    );
    for flags in [libc::O_RDONLY, libc::O_RDWR, libc::O_WRONLY | libc::O_TRUNC] {
        let r = s.client.open(e.nodeid, flags as u32);
        assert!(
            r.is_err(),
            "OPEN {flags:#o} of a symlink to /etc/passwd: {r:?}"
        );
    }
    assert!(
        s.client.opendir(e.nodeid, 0).is_err(),
        "OPENDIR of a symlink"
    );

    // The same through the symlink to the canary, with operations that would change its
    // target if they followed it.
    let esc = s.nodes.escape;
    for flags in [libc::O_RDONLY, libc::O_WRONLY | libc::O_TRUNC] {
        assert!(
            s.client.open(esc, flags as u32).is_err(),
            "OPEN {flags:#o} followed"
        );
    }
    for attr in [
        SetattrIn {
            valid: FATTR_SIZE,
            size: 0,
            ..Default::default()
        },
        SetattrIn {
            valid: FATTR_MODE,
            mode: 0o777,
            ..Default::default()
        },
        SetattrIn {
            valid: FATTR_UID,
            uid: 4242,
            ..Default::default()
        },
    ] {
        // Changing the link itself is fine (chown); changing the target is not.
        let _ = s.client.setattr(esc, &attr);
    }
    // A hard link of the symlink is another symlink, never a link to the canary.
    if s.client.link(esc, ROOT, "escape-link").is_ok() {
        let m = fs::symlink_metadata(s.share().join("escape-link")).unwrap();
        assert!(m.file_type().is_symlink(), "LINK followed the symlink");
    }
    // Nothing is created or looked up through a symlink used as a directory.
    let mkdir = s.client.mkdir(esc, "x", 0o755, 0);
    assert_eq!(mkdir.err(), Some(libc::ENOTDIR), "MKDIR under a symlink");
    let lookup = s.client.lookup(esc, "x");
    assert_eq!(lookup.err(), Some(libc::ENOTDIR), "LOOKUP under a symlink");
    s.finish("names and symlinks");
}

#[test]
fn broken_descriptor_chains() {
    let mut s = Setup::new();
    let mem = s.guest().memory().size();
    let req = s
        .client
        .request(FUSE_GETATTR, ROOT, GetattrIn::default().as_slice());
    let req_buf = s.buf(&req);
    let reply = s.guest().guest_alloc(4096).unwrap();
    let rd = |addr: u64, len: u32, next: bool| RawDesc {
        addr,
        len,
        flags: if next { VIRTQ_DESC_F_NEXT } else { 0 },
        next: Next::Auto,
    };
    let wr = |addr: u64, len: u32, next: bool| RawDesc {
        addr,
        len,
        flags: VIRTQ_DESC_F_WRITE | if next { VIRTQ_DESC_F_NEXT } else { 0 },
        next: Next::Auto,
    };
    let req_len = req.len() as u32;
    let read_reply = |used: u32| parse(unique_of(&req), &reply.read(0, used as usize), "reply");
    let clear = || reply.write(0, &[0; 4096]);

    // Sanity: the well-formed chain gets a GETATTR reply.
    clear();
    let used = s.chain(
        &[
            rd(req_buf.addr(), req_len, true),
            wr(reply.addr(), 4096, false),
        ],
        "good chain",
    );
    assert_eq!(used as usize, HDR + 104);
    assert!(matches!(read_reply(used), Reply::Ok(_)));

    // Buffers outside guest memory, crossing its end, or wrapping around: completed with used
    // length 0 (vhostfs does not even start the request).
    let outside: [(u64, u32); 4] = [
        (mem + 4096, 64),
        (mem - 16, 64),
        (u64::MAX - 8, 64),
        (mem, 1),
    ];
    for (addr, len) in outside {
        let used = s.chain(
            &[rd(addr, len, true), wr(reply.addr(), 4096, false)],
            "readable outside memory",
        );
        assert_eq!(used, 0, "readable {addr:#x}+{len}");
        let used = s.chain(
            &[rd(req_buf.addr(), req_len, true), wr(addr, len, false)],
            "writable outside memory",
        );
        assert_eq!(used, 0, "writable {addr:#x}+{len}");
    }
    // A descriptor spanning two memory regions cannot be built: the test guest has a single
    // memory region (guest_memory.rs), so that case is not covered here.
    s.assert_serving("buffers outside memory");

    // NEXT loops: 0 -> 1 -> 0 and 0 -> 0. virtio-queue stops after queue-size descriptors, so
    // the chain is served as the repeated buffers it describes: the request is read from the
    // first readable bytes and answered into the writable ones.
    let looped = [
        rd(req_buf.addr(), req_len, true),
        RawDesc {
            next: Next::Index(0),
            ..wr(reply.addr(), 4096, true)
        },
    ];
    clear();
    let used = s.chain(&looped, "loop 0 -> 1 -> 0");
    assert_eq!(used as usize, HDR + 104, "loop 0 -> 1 -> 0");
    assert!(matches!(read_reply(used), Reply::Ok(_)));
    let self_loop = [RawDesc {
        next: Next::Index(0),
        ..rd(req_buf.addr(), req_len, true)
    }];
    assert_eq!(s.chain(&self_loop, "loop 0 -> 0"), 0, "no writable buffer");
    // `next` out of the table: the chain ends there (no writable part).
    let out_of_table = [RawDesc {
        next: Next::Raw(QUEUE_SIZE + 5),
        ..rd(req_buf.addr(), req_len, true)
    }];
    assert_eq!(s.chain(&out_of_table, "next out of range"), 0);
    s.assert_serving("NEXT loops");

    // Indirect tables. First a good one, for reference.
    let table = |s: &Setup, entries: &[[u8; 16]]| s.buf(&entries.concat());
    let indirect = |t: &GuestBuf, len: u32| {
        [RawDesc {
            addr: t.addr(),
            len,
            flags: VIRTQ_DESC_F_INDIRECT,
            next: Next::Auto,
        }]
    };
    let good_table = table(
        &s,
        &[
            RawDesc::encode(req_buf.addr(), req_len, VIRTQ_DESC_F_NEXT, 1),
            RawDesc::encode(reply.addr(), 4096, VIRTQ_DESC_F_WRITE, 0),
        ],
    );
    clear();
    let used = s.chain(&indirect(&good_table, 32), "good indirect table");
    assert_eq!(used as usize, HDR + 104);

    // An indirect chain longer than the queue: 1-byte readable pieces of the request, then
    // 1-byte writable pieces. Served (the table's own length bounds it).
    let pieces = req.len() + 200;
    assert!(pieces > QUEUE_SIZE as usize);
    let mut entries = Vec::new();
    for i in 0..req.len() {
        entries.push(RawDesc::encode(
            req_buf.addr() + i as u64,
            1,
            VIRTQ_DESC_F_NEXT,
            (i + 1) as u16,
        ));
    }
    for i in 0..200 {
        let last = i == 199;
        entries.push(RawDesc::encode(
            reply.addr() + i as u64,
            1,
            VIRTQ_DESC_F_WRITE | if last { 0 } else { VIRTQ_DESC_F_NEXT },
            (req.len() + i + 1) as u16,
        ));
    }
    let long_table = table(&s, &entries);
    clear();
    let used = s.chain(
        &indirect(&long_table, (16 * pieces) as u32),
        "indirect chain longer than the queue",
    );
    assert_eq!(used as usize, HDR + 104);
    assert!(matches!(read_reply(used), Reply::Ok(_)));

    // Bogus indirect tables: all completed with used length 0.
    let bad_entry = table(
        &s,
        &[
            RawDesc::encode(req_buf.addr(), req_len, VIRTQ_DESC_F_NEXT, 1),
            RawDesc::encode(mem + 4096, 4096, VIRTQ_DESC_F_WRITE, 0),
        ],
    );
    let nested_target = table(
        &s,
        &[RawDesc::encode(reply.addr(), 4096, VIRTQ_DESC_F_WRITE, 0)],
    );
    let nested = table(
        &s,
        &[
            RawDesc::encode(req_buf.addr(), req_len, VIRTQ_DESC_F_NEXT, 1),
            RawDesc::encode(nested_target.addr(), 16, VIRTQ_DESC_F_INDIRECT, 0),
        ],
    );
    let next_out = table(
        &s,
        &[
            RawDesc::encode(req_buf.addr(), req_len, VIRTQ_DESC_F_NEXT, 7),
            RawDesc::encode(reply.addr(), 4096, VIRTQ_DESC_F_WRITE, 0),
        ],
    );
    let table_loop = table(
        &s,
        &[
            RawDesc::encode(req_buf.addr(), req_len, VIRTQ_DESC_F_NEXT, 1),
            RawDesc::encode(req_buf.addr(), req_len, VIRTQ_DESC_F_NEXT, 0),
        ],
    );
    let cases: Vec<(&str, [RawDesc; 1])> = vec![
        ("entry outside memory", indirect(&bad_entry, 32)),
        ("nested indirect", indirect(&nested, 32)),
        ("next outside the table", indirect(&next_out, 32)),
        ("loop inside the table", indirect(&table_loop, 32)),
        (
            "table length not a multiple of 16",
            indirect(&good_table, 20),
        ),
        ("empty table", indirect(&good_table, 0)),
        (
            "table outside memory",
            [RawDesc {
                addr: mem + 4096,
                len: 32,
                flags: VIRTQ_DESC_F_INDIRECT,
                next: Next::Auto,
            }],
        ),
        (
            "table crossing the end of memory",
            [RawDesc {
                addr: mem - 16,
                len: 32,
                flags: VIRTQ_DESC_F_INDIRECT,
                next: Next::Auto,
            }],
        ),
    ];
    for (what, descs) in cases {
        assert_eq!(s.chain(&descs, what), 0, "{what}");
    }
    s.assert_serving("indirect tables");

    // No writable descriptor: nothing can be answered.
    assert_eq!(
        s.chain(&[rd(req_buf.addr(), req_len, false)], "no writable"),
        0
    );
    // An 8-byte writable descriptor: too short for a reply header.
    assert_eq!(
        s.chain(
            &[
                rd(req_buf.addr(), req_len, true),
                wr(reply.addr(), 8, false)
            ],
            "8-byte reply buffer"
        ),
        0
    );
    // Readable after writable: served as if the readable parts came first.
    let split = 20u32;
    let tail = s.buf(&req[split as usize..]);
    clear();
    let used = s.chain(
        &[
            rd(req_buf.addr(), split, true),
            wr(reply.addr(), 4096, true),
            rd(tail.addr(), req_len - split, false),
        ],
        "readable after writable",
    );
    assert_eq!(used as usize, HDR + 104);
    assert!(matches!(read_reply(used), Reply::Ok(_)));
    s.assert_serving("odd chains");

    // State-creating requests whose reply cannot be written must not leave fds behind: OPEN
    // and OPENDIR with no or a too-short reply buffer, many times.
    let open = s.client.request(
        FUSE_OPEN,
        s.nodes.file,
        OpenIn {
            flags: libc::O_RDONLY as u32,
            fuse_flags: 0,
        }
        .as_slice(),
    );
    let opendir = s
        .client
        .request(FUSE_OPENDIR, s.nodes.dir, OpenIn::default().as_slice());
    let open_buf = s.buf(&open);
    let opendir_buf = s.buf(&opendir);
    for _ in 0..(FD_SLACK * 4) {
        for b in [&open_buf, &opendir_buf] {
            assert_eq!(
                s.chain(&[rd(b.addr(), b.len() as u32, false)], "open, no reply"),
                0
            );
            let used = s.chain(
                &[
                    rd(b.addr(), b.len() as u32, true),
                    wr(reply.addr(), HDR as u32, false),
                ],
                "open, header-sized reply",
            );
            assert!(used == 0 || used as usize == HDR, "used {used}");
        }
    }
    s.assert_serving("opens without reply space");
    s.finish("descriptor chains");
}

/// xorshift64* (Vigna): a small, seeded, reproducible PRNG.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }

    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len() as u64) as usize]
    }
}

#[test]
fn random_requests() {
    const REQUESTS: usize = 3000;
    let seed = 0x5eed_0fba_d149_u64;
    let mut rng = Rng(seed);
    let mut s = Setup::new();
    let real = [ROOT, s.nodes.file, s.nodes.dir, s.nodes.escape];
    let name_chars = b"ab./\0";
    // Replies by kind, to check that the requests reach the handlers, not only the parser.
    let (mut oks, mut errnos) = (0, std::collections::BTreeSet::new());
    for i in 0..REQUESTS {
        let opcode = match rng.below(10) {
            0 => rng.next() as u32,
            1 => rng.pick(&[0, 7, 19, 53, 9999, u32::MAX]),
            _ => 1 + rng.below(u64::from(FUSE_STATX)) as u32,
        };
        let nodeid = match rng.below(10) {
            0..=4 => rng.pick(&real),
            5 | 6 => rng.below(64),
            _ => rng.next(),
        };
        // A body: the opcode's struct (random bytes), then maybe names, or just random bytes.
        let mut body = match body_struct(opcode) {
            Some(n) if rng.chance(70) => rng.bytes(n),
            _ => {
                let n = rng.below(128) as usize;
                rng.bytes(n)
            }
        };
        for _ in 0..rng.below(3) {
            let n = rng.below(6) as usize;
            body.extend((0..n).map(|_| rng.pick(name_chars)));
            body.push(0);
        }
        let extlen = if rng.chance(90) { 0 } else { rng.next() as u16 };
        let mut req = s.client.request_with_ext(opcode, nodeid, &body, extlen);
        match rng.below(10) {
            0 => req[0..4].copy_from_slice(&(rng.next() as u32).to_le_bytes()),
            1 => {
                let len = (req.len() as u32)
                    .wrapping_add(rng.below(16) as u32)
                    .wrapping_sub(8);
                req[0..4].copy_from_slice(&len.to_le_bytes());
            }
            _ => {}
        }
        if rng.chance(20) {
            // Random credentials.
            req[24..32].copy_from_slice(&rng.bytes(8));
        }
        let reply_len = rng.pick(&[0, 8, 16, 64, 200, 4096, 70_000]);
        let what = format!("random request {i} (seed {seed:#x}): opcode {opcode} node {nodeid:#x}");
        let reply = s.send(&req, reply_len, &what);
        match &reply {
            Reply::Ok(_) => oks += 1,
            Reply::Err(e) => {
                errnos.insert(*e);
            }
            Reply::Empty => {}
        }
        if matches!(reply, Reply::Ok(_))
            && matches!(
                opcode,
                FUSE_OPEN | FUSE_OPENDIR | FUSE_CREATE | FUSE_TMPFILE
            )
        {
            s.held_fds += 1;
        }
        if matches!(opcode, FUSE_DESTROY | FUSE_INIT)
            && s.client.getattr(ROOT, None).err() == Some(libc::EIO)
        {
            // The request ended the session (its reply may not have fit): start a new one.
            // Ending a session releases every handle.
            s.held_fds = 0;
            s.client.init().expect("INIT after a random DESTROY");
        }
        if i % 500 == 499 {
            s.assert_serving(&format!("after {} random requests", i + 1));
        }
    }
    assert!(oks >= REQUESTS / 100, "only {oks} successful replies");
    for errno in [libc::EINVAL, libc::ENOSYS, libc::EBADF, libc::ENOENT] {
        assert!(errnos.contains(&errno), "no errno {errno} among {errnos:?}");
    }
    s.finish("random requests");
}
