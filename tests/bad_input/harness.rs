//! The shared set-up of the bad-input tests: a share next to a canary tree, a vhostfs process
//! with stderr to a file, and the checks run after each batch.

pub use std::fs::{self, File};
pub use std::os::unix::fs::MetadataExt;
pub use std::path::{Path, PathBuf};
pub use std::process::{Command, Stdio};
pub use std::sync::Arc;
pub use std::time::Duration;

pub use vm_memory::ByteValued;

pub use super::common::fuse_abi::*;
pub use super::common::virtqueue::{VIRTQ_DESC_F_INDIRECT, VIRTQ_DESC_F_NEXT, VIRTQ_DESC_F_WRITE};
pub use super::common::{Daemon, FuseClient, GuestBuf, Next, RawDesc, TempDir, TestGuest};

pub const HDR: usize = std::mem::size_of::<OutHeader>();
pub const IN_HDR: usize = std::mem::size_of::<InHeader>();
pub const QUEUE_SIZE: u16 = 128;
pub const MEM_SIZE: usize = 32 << 20;
/// fds a request may hold transiently, and mount fds opened on first sight of a mount.
pub const FD_SLACK: usize = 16;
/// How long a raw chain may take before it counts as dropped.
pub const CHAIN_TIMEOUT: Duration = Duration::from_secs(5);
pub const FILE_DATA: &[u8] = b"shared file contents\n";
pub const CANARY_DATA: &[u8] = b"outside the share: must never change\n";

/// The body of a MKNOD of a regular file (0644), to put a name after.
pub fn mknod_in() -> MknodIn {
    MknodIn {
        mode: libc::S_IFREG | 0o644,
        ..Default::default()
    }
}

/// The body of a MKDIR (0755), to put a name after.
pub fn mkdir_in() -> MkdirIn {
    MkdirIn {
        mode: 0o755,
        umask: 0,
    }
}

/// The body of a read-write CREATE or TMPFILE of a regular file (0644), to put a name after.
pub fn create_in() -> CreateIn {
    CreateIn {
        flags: libc::O_RDWR as u32,
        mode: libc::S_IFREG | 0o644,
        ..Default::default()
    }
}

/// A parsed reply: none written (used length 0), an error, or a successful body.
#[derive(Debug, PartialEq, Eq)]
pub enum Reply {
    Empty,
    Err(i32),
    Ok(Vec<u8>),
}

/// Checks that `reply` is empty or a well-formed reply to a request whose unique is `unique`.
pub fn parse(unique: u64, reply: &[u8], what: &str) -> Reply {
    if reply.is_empty() {
        return Reply::Empty;
    }
    assert!(
        reply.len() >= HDR,
        "{what}: used length {} < 16",
        reply.len()
    );
    let out: OutHeader = super::common::fuse_client::from_bytes(reply, "out header");
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

pub fn unique_of(req: &[u8]) -> u64 {
    u64::from_le_bytes(req[8..16].try_into().unwrap())
}

pub fn cstr(s: &[u8]) -> Vec<u8> {
    let mut v = s.to_vec();
    v.push(0);
    v
}

/// A GETXATTR body asking for up to 64 bytes of the attribute `name` (NUL included).
pub fn getxattr_body(name: &[u8]) -> Vec<u8> {
    cat(&[
        GetxattrIn {
            size: 64,
            padding: 0,
        }
        .as_slice(),
        name,
    ])
}

/// A RENAME2 body into the root (no flags) followed by `names`.
pub fn rename2_body(names: &[&[u8]]) -> Vec<u8> {
    let head = Rename2In {
        newdir: ROOT,
        ..Default::default()
    };
    let mut parts: Vec<&[u8]> = vec![head.as_slice()];
    parts.extend_from_slice(names);
    cat(&parts)
}

pub fn cat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

/// A description of a path (type, mode, owner, size, times, inode, contents) that changes if
/// anything is done to it.
pub fn describe(path: &Path) -> String {
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
pub fn outside_snapshot(top: &Path) -> Vec<String> {
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
pub struct Nodes {
    pub file: u64,
    pub dir: u64,
    /// A symlink to the canary file outside the share.
    pub escape: u64,
}

pub struct Setup {
    pub daemon: Daemon,
    pub client: FuseClient,
    pub nodes: Nodes,
    pub top: TempDir,
    pub stderr_path: PathBuf,
    pub _sock_dir: TempDir,
    pub outside: Vec<String>,
    pub fd_baseline: usize,
    /// fds the guest legitimately holds (successful OPEN/OPENDIR/CREATE/TMPFILE not released).
    pub held_fds: usize,
}

impl Setup {
    /// `top/share` (shared: file.txt, dir/inner, escape -> top/canary/secret.txt) next to
    /// `top/canary` (secret.txt, sub/deeper); vhostfs with stderr to a file; INIT done.
    pub fn new() -> Setup {
        Setup::with_args(&[])
    }

    /// [`Setup::new`] with `extra` arguments for vhostfs.
    pub fn with_args(extra: &[&str]) -> Setup {
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
            .args(extra)
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

    pub fn share(&self) -> PathBuf {
        self.top.join("share")
    }

    pub fn guest(&self) -> &TestGuest {
        self.client.guest()
    }

    /// Sends `req` with `reply_len` bytes of reply space on the request queue; the daemon must
    /// complete it, with nothing or a well-formed reply.
    pub fn send(&self, req: &[u8], reply_len: usize, what: &str) -> Reply {
        let reply = self
            .guest()
            .roundtrip(0, req, reply_len)
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        parse(unique_of(req), &reply, what)
    }

    /// A well-formed request (header with the right length) with `body`.
    pub fn call(&self, opcode: u32, nodeid: u64, body: &[u8], reply_len: usize) -> Reply {
        let req = self.client.request(opcode, nodeid, body);
        let what = format!("opcode {opcode} node {nodeid:#x} body {} bytes", body.len());
        self.send(&req, reply_len, &what)
    }

    /// [`Setup::call`] that must fail with an error reply (any errno); returns the errno.
    pub fn call_err(&self, opcode: u32, nodeid: u64, body: &[u8], reply_len: usize) -> i32 {
        match self.call(opcode, nodeid, body, reply_len) {
            Reply::Err(e) => e,
            other => panic!("opcode {opcode} node {nodeid:#x}: expected an error, got {other:?}"),
        }
    }

    /// Submits a raw chain; the daemon must complete it within [`CHAIN_TIMEOUT`].
    pub fn chain(&self, descs: &[RawDesc], what: &str) -> u32 {
        self.guest()
            .raw_chain(0, descs, CHAIN_TIMEOUT)
            .unwrap_or_else(|e| panic!("{what}: {e}"))
            .unwrap_or_else(|| panic!("{what}: chain not completed within {CHAIN_TIMEOUT:?}"))
    }

    /// A guest buffer holding `data`.
    pub fn buf(&self, data: &[u8]) -> GuestBuf {
        let b = self.guest().guest_alloc(data.len()).unwrap();
        b.write(0, data);
        b
    }

    /// The daemon runs, answers GETATTR on the root and a LOOKUP, and holds no more fds than
    /// at start plus what the guest holds plus [`FD_SLACK`].
    pub fn assert_serving(&mut self, ctx: &str) {
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
    pub fn finish(mut self, ctx: &str) {
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
pub fn body_struct(opcode: u32) -> Option<usize> {
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
