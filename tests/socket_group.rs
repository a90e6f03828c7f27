//! The socket vhostfs creates at `--socket-path`: mode 0700 (only its owner, and root, may
//! connect), or with `--socket-group=NAME` that group and mode 0770, so a non-root member of the
//! group connects and serves a guest while others get EACCES, as with virtiofsd 1.14. A group
//! that does not exist, or one an unprivileged daemon is not in, is a one-line error that leaves
//! no socket behind.
//!
//! The non-root "guests" run in a thread of their own that drops its credentials with the raw
//! set*id syscalls, which (unlike the libc wrappers) change that thread only.

mod common;

use std::fs;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use common::fuse_abi::*;
use common::smoke::run_to_exit;
use common::{spawn_vhostfs, Daemon, FuseClient, TempDir, TestGuest};

const NOBODY: u32 = 65534;
/// A gid no group of the test has.
const OTHER_GID: u32 = 4242;

/// The name /etc/group gives `gid` (65534 is `nogroup` on Debian, `nobody` elsewhere).
fn group_name(gid: u32) -> String {
    fs::read_to_string("/etc/group")
        .unwrap()
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.len() > 2 && f[2] == gid.to_string()).then(|| f[0].to_string())
        })
        .unwrap_or_else(|| panic!("no group with gid {gid} in /etc/group"))
}

/// A directory anyone may enter and create files in (for the socket).
fn open_dir(prefix: &str) -> TempDir {
    let dir = TempDir::new(prefix).unwrap();
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o777)).unwrap();
    dir
}

/// A socket directory anyone may enter and create files in, and a share.
fn socket_dir_and_share() -> (TempDir, TempDir) {
    (
        open_dir("sgroup-sock"),
        TempDir::new("sgroup-shared").unwrap(),
    )
}

/// Fails with the errno of a negative syscall return.
fn check(ret: libc::c_long, what: &str) {
    assert!(ret >= 0, "{what}: {}", std::io::Error::last_os_error());
}

/// Makes the calling thread (only) uid `uid`, gid `gid` with supplementary `groups`.
fn drop_thread_credentials(uid: u32, gid: u32, groups: &[libc::gid_t]) {
    // SAFETY: setgroups reads `groups.len()` gids from a valid slice; a raw syscall changes the
    // calling thread's credentials only.
    check(
        unsafe { libc::syscall(libc::SYS_setgroups, groups.len(), groups.as_ptr()) },
        "setgroups",
    );
    // SAFETY: integer arguments only; this thread only.
    check(
        unsafe { libc::syscall(libc::SYS_setresgid, gid, gid, gid) },
        "setresgid",
    );
    // SAFETY: integer arguments only; this thread only (and for good: the thread ends after).
    check(
        unsafe { libc::syscall(libc::SYS_setresuid, uid, uid, uid) },
        "setresuid",
    );
}

/// Connects a test guest to `socket` as uid `uid`, gid `gid`, supplementary `groups`.
fn guest_as(socket: &Path, uid: u32, gid: u32, groups: &[u32]) -> std::io::Result<TestGuest> {
    let (socket, groups) = (socket.to_path_buf(), groups.to_vec());
    std::thread::spawn(move || {
        drop_thread_credentials(uid, gid, &groups);
        TestGuest::connect(&socket, 1, 256, 16 << 20)
    })
    .join()
    .unwrap()
}

/// INIT, CREATE and WRITE through `guest`: the share serves it.
fn serves(guest: TestGuest, shared: &Path) {
    let c = FuseClient::new(Arc::new(guest), 0);
    c.init().expect("FUSE_INIT");
    let (e, o) = c.create(ROOT, "hello", 0o644, RDWR, 0).expect("CREATE");
    assert_eq!(c.write(e.nodeid, o.fh, 0, b"hi").expect("WRITE"), 2);
    assert_eq!(fs::read(shared.join("hello")).unwrap(), b"hi");
}

#[test]
fn socket_gets_the_group_and_its_members_connect() {
    let group = group_name(NOBODY);
    let (sock_dir, shared) = socket_dir_and_share();
    let socket = sock_dir.join("vfs.sock");
    let arg = format!("--socket-group={group}");
    let _daemon = spawn_vhostfs(&socket, shared.path(), &["--log-level=error", &arg]).unwrap();
    let m = fs::symlink_metadata(&socket).unwrap();
    assert!(m.file_type().is_socket(), "{m:?}");
    assert_eq!((m.uid(), m.gid(), m.mode() & 0o7777), (0, NOBODY, 0o770));
    // Not in the group: refused by the host before the daemon sees anything.
    let err = guest_as(&socket, NOBODY, OTHER_GID, &[])
        .err()
        .expect("refused");
    assert_eq!(err.kind(), std::io::ErrorKind::PermissionDenied, "{err}");
    // In it as a supplementary group, as a user in e.g. `kvm` is: served.
    let guest = guest_as(&socket, NOBODY, OTHER_GID, &[NOBODY]).expect("a member connects");
    serves(guest, shared.path());
}

#[test]
fn without_a_group_only_the_owner_connects() {
    let (sock_dir, shared) = socket_dir_and_share();
    let socket = sock_dir.join("vfs.sock");
    let _daemon = spawn_vhostfs(&socket, shared.path(), &["--log-level=error"]).unwrap();
    let m = fs::symlink_metadata(&socket).unwrap();
    assert_eq!((m.uid(), m.gid(), m.mode() & 0o7777), (0, 0, 0o700));
    let err = guest_as(&socket, NOBODY, NOBODY, &[NOBODY])
        .err()
        .expect("refused");
    assert_eq!(err.kind(), std::io::ErrorKind::PermissionDenied, "{err}");
    serves(
        TestGuest::connect(&socket, 1, 256, 16 << 20).unwrap(),
        shared.path(),
    );
}

/// Runs vhostfs on a fresh socket path with `args`, as `uid` (root if 0); expects exit 1 with
/// one error line, and neither socket nor pid file left. Returns the line.
fn refused(uid: u32, args: &[&str]) -> String {
    let (sock_dir, shared) = socket_dir_and_share();
    let socket = sock_dir.join("vfs.sock");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_vhostfs"));
    cmd.arg(format!("--socket-path={}", socket.display()))
        .arg(format!("--shared-dir={}", shared.path().display()))
        .arg("--log-level=error")
        .args(args);
    if uid != 0 {
        cmd.uid(uid).gid(uid);
    }
    let (status, stderr) = run_to_exit(&mut cmd, Duration::from_secs(20));
    assert_eq!(status.code(), Some(1), "{args:?}: {stderr}");
    assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
    assert!(!socket.exists(), "{args:?}: socket left behind");
    assert!(
        !sock_dir.join("vfs.sock.pid").exists(),
        "{args:?}: pid file"
    );
    stderr.trim_end().to_string()
}

#[test]
fn a_group_that_cannot_be_given_is_one_line() {
    assert_eq!(
        refused(0, &["--socket-group=no-such-group-vhostfs"]),
        "vhostfs: error: --socket-group no-such-group-vhostfs: no such group"
    );
    // A name, as virtiofsd takes it: a gid is not looked up as one.
    assert_eq!(
        refused(0, &["--socket-group=65534"]),
        "vhostfs: error: --socket-group 65534: no such group"
    );
    // An unprivileged daemon can only give a group it is in.
    let root = group_name(0);
    let line = refused(NOBODY, &[&format!("--socket-group={root}")]);
    assert!(
        line.starts_with("vhostfs: error: socket ")
            && line.ends_with(&format!(
                "cannot give it the group {root} (gid 0) of --socket-group: Operation not \
                 permitted (os error 1)"
            )),
        "{line}"
    );
}

#[test]
fn an_unprivileged_daemon_gives_its_own_group() {
    let group = group_name(NOBODY);
    let (sock_dir, shared) = socket_dir_and_share();
    std::os::unix::fs::chown(shared.path(), Some(NOBODY), Some(NOBODY)).unwrap();
    let socket = sock_dir.join("vfs.sock");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_vhostfs"));
    cmd.arg(format!("--socket-path={}", socket.display()))
        .arg(format!("--shared-dir={}", shared.path().display()))
        .arg(format!("--socket-group={group}"))
        .arg("--log-level=error")
        .uid(NOBODY)
        .gid(NOBODY);
    let _daemon = Daemon::spawn(&mut cmd, &socket).unwrap();
    let m = fs::symlink_metadata(&socket).unwrap();
    assert_eq!(
        (m.uid(), m.gid(), m.mode() & 0o7777),
        (NOBODY, NOBODY, 0o770)
    );
}

/// The events inotify reports for names created or moved into `dir` while `run` runs, as
/// (mask, name), in order.
fn dir_events(dir: &Path, run: impl FnOnce()) -> Vec<(u32, String)> {
    // SAFETY: no pointers; the flags are valid.
    let fd = unsafe { libc::inotify_init1(libc::IN_CLOEXEC | libc::IN_NONBLOCK) };
    assert!(
        fd >= 0,
        "inotify_init1: {}",
        std::io::Error::last_os_error()
    );
    // SAFETY: we own the new fd; it is closed on drop.
    let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
    let cdir = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: `cdir` is a C string that outlives the call.
    let wd = unsafe {
        libc::inotify_add_watch(
            fd.as_raw_fd(),
            cdir.as_ptr(),
            libc::IN_CREATE | libc::IN_MOVED_TO,
        )
    };
    assert!(
        wd >= 0,
        "inotify_add_watch: {}",
        std::io::Error::last_os_error()
    );
    run();
    let mut events = Vec::new();
    let mut buf = vec![0u8; 64 << 10];
    // SAFETY: `buf` is writable for its length; the fd is non-blocking.
    let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
    let header = std::mem::size_of::<libc::inotify_event>();
    let mut at = 0;
    while n > 0 && at + header <= n as usize {
        // SAFETY: the kernel wrote a whole event at `at`; read_unaligned copes with the bytes.
        let ev: libc::inotify_event =
            unsafe { std::ptr::read_unaligned(buf[at..].as_ptr().cast()) };
        let name = &buf[at + header..at + header + ev.len as usize];
        let name = name.split(|&b| b == 0).next().unwrap_or_default();
        events.push((ev.mask, String::from_utf8_lossy(name).into_owned()));
        at += header + ev.len as usize;
    }
    events
}

/// The socket appears at its path already listening: bound under a staging name and renamed into
/// place after listen(), so a frontend started the moment the file exists (a launcher that polls
/// for it, as the e2e harness does) is never refused with ECONNREFUSED. It is created, not
/// renamed, under the staging name (`PATH.PID`, beside the pid file `PATH.pid`), and nothing of
/// that name stays.
#[test]
fn the_socket_appears_at_its_path_already_listening() {
    let (sock_dir, shared) = socket_dir_and_share();
    let socket = sock_dir.join("vfs.sock");
    let mut daemon = None;
    let events = dir_events(sock_dir.path(), || {
        daemon = Some(spawn_vhostfs(&socket, shared.path(), &["--log-level=error"]).unwrap());
    });
    let at_path: Vec<u32> = events
        .iter()
        .filter(|(_, name)| name == "vfs.sock")
        .map(|(mask, _)| *mask)
        .collect();
    assert_eq!(at_path, [libc::IN_MOVED_TO], "events: {events:?}");
    let staged: Vec<&String> = events
        .iter()
        .filter(|(mask, _)| mask & libc::IN_CREATE != 0)
        .map(|(_, name)| name)
        .filter(|name| {
            name.strip_prefix("vfs.sock.")
                .is_some_and(|pid| pid.bytes().all(|b| b.is_ascii_digit()))
        })
        .collect();
    assert_eq!(staged.len(), 1, "events: {events:?}");
    assert!(
        !sock_dir.join(staged[0]).exists(),
        "{} left behind",
        staged[0]
    );
    serves(
        TestGuest::connect(&socket, 1, 256, 16 << 20).unwrap(),
        shared.path(),
    );
}

/// A socket path too long for the staging name (107 bytes, the most `sun_path` takes) is bound
/// in place, with the group all the same.
#[test]
fn a_socket_path_of_the_longest_length_works_with_a_group() {
    let group = group_name(NOBODY);
    let (sock_dir, shared) = socket_dir_and_share();
    let dir_len = sock_dir.path().as_os_str().len() + 1;
    assert!(
        dir_len < 90,
        "{}: too long for this test",
        sock_dir.path().display()
    );
    let socket = sock_dir.join(&"s".repeat(107 - dir_len));
    assert_eq!(socket.as_os_str().len(), 107);
    let arg = format!("--socket-group={group}");
    let _daemon = spawn_vhostfs(&socket, shared.path(), &["--log-level=error", &arg]).unwrap();
    let m = fs::symlink_metadata(&socket).unwrap();
    assert_eq!((m.uid(), m.gid(), m.mode() & 0o7777), (0, NOBODY, 0o770));
    serves(
        TestGuest::connect(&socket, 1, 256, 16 << 20).unwrap(),
        shared.path(),
    );
}
