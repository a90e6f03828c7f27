//! One short session of the test guest against a running daemon, and inherited sockets for
//! launcher-style tests (`--fd=N`, systemd's fd 3).

use std::fs;
use std::os::fd::RawFd;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::time::Duration;

use super::daemon::{run_with_timeout, Daemon};
use super::fuse_abi::{FUSE_KERNEL_VERSION, FUSE_ROOT_ID};
use super::{FuseClient, TestGuest};

const MIB: usize = 1 << 20;

/// Connects the test guest to `socket` and runs INIT, LOOKUP of a file put in `shared`
/// beforehand, then CREATE + WRITE + READ of a new file, checking each result and the host file.
/// Returns the client: the connection stays up until it is dropped.
pub fn serve_one_guest(socket: &Path, shared: &Path) -> FuseClient {
    fs::write(shared.join("hello.txt"), b"hello from the host\n").unwrap();
    let guest = TestGuest::connect(socket, 1, 256, 16 * MIB).expect("vhost-user set-up");
    let c = FuseClient::new(Arc::new(guest), 0);
    let init = c.init().expect("FUSE_INIT");
    assert_eq!(init.major, FUSE_KERNEL_VERSION);

    let e = c.lookup(FUSE_ROOT_ID, "hello.txt").expect("LOOKUP");
    assert_eq!(e.attr.size, 20);
    assert_eq!(c.lookup(FUSE_ROOT_ID, "missing").err(), Some(libc::ENOENT));

    let (f, o) = c
        .create(
            FUSE_ROOT_ID,
            "from-guest.txt",
            libc::S_IFREG | 0o644,
            libc::O_RDWR as u32,
            0o022,
        )
        .expect("CREATE");
    assert_eq!(
        c.write(f.nodeid, o.fh, 0, b"written by the guest").unwrap(),
        20
    );
    assert_eq!(
        c.read(f.nodeid, o.fh, 0, 4096).expect("READ"),
        b"written by the guest"
    );
    c.release(f.nodeid, o.fh, libc::O_RDWR as u32)
        .expect("RELEASE");
    assert_eq!(
        fs::read(shared.join("from-guest.txt")).unwrap(),
        b"written by the guest"
    );
    c
}

/// Starts the daemon `cmd` (which creates or listens on `socket`), serves one test-guest session
/// ([`serve_one_guest`]), runs `check` on the client, and asserts that the daemon exits 0 within
/// 20 s once the guest disconnects.
pub fn serve_until_exit(
    cmd: &mut Command,
    socket: &Path,
    shared: &Path,
    check: impl FnOnce(&FuseClient),
) {
    let mut daemon = Daemon::spawn(cmd, socket).unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    let client = serve_one_guest(socket, shared);
    check(&client);
    assert!(daemon.is_alive(), "{cmd:?} exited while serving");
    drop(client);
    let status = daemon
        .wait_exit(Duration::from_secs(20))
        .unwrap()
        .expect("still running");
    assert_eq!(status.code(), Some(0), "{cmd:?}: {status}");
}

/// Runs `cmd` with stdin and stdout on /dev/null to its exit (killing it and panicking after
/// `timeout`); returns its status and standard error.
pub fn run_to_exit(cmd: &mut Command, timeout: Duration) -> (ExitStatus, String) {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let out = run_with_timeout(cmd, timeout)
        .unwrap_or_else(|| panic!("{cmd:?} still running after {timeout:?}"));
    (out.status, out.stderr)
}

/// Makes `cmd` inherit `fd` (without close-on-exec) as fd `target` in the child.
pub fn inherit_fd(cmd: &mut Command, fd: RawFd, target: RawFd) {
    // SAFETY: dup2 and fcntl are async-signal-safe; they only touch the child's fd table.
    unsafe {
        cmd.pre_exec(move || {
            if fd != target && libc::dup2(fd, target) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::fcntl(target, libc::F_SETFD, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}
