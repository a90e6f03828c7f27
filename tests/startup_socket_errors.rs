//! Socket set-up mistakes users make get one clear error line and exit 1 (or, for a stale socket
//! file, a daemon that just works).

mod common;

use std::os::fd::AsRawFd;
use std::os::unix::net::{UnixDatagram, UnixListener, UnixStream};
use std::process::Command;
use std::time::Duration;

use common::smoke::{inherit_fd, run_to_exit, serve_one_guest};
use common::{spawn_vhostfs, TempDir};

const TIMEOUT: Duration = Duration::from_secs(20);

fn refused(args: &[String], inherit: Option<i32>) -> String {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_vhostfs"));
    cmd.args(args);
    if let Some(fd) = inherit {
        inherit_fd(&mut cmd, fd, fd);
    }
    let (status, stderr) = run_to_exit(&mut cmd, TIMEOUT);
    assert_eq!(status.code(), Some(1), "{args:?}: {stderr}");
    // Info lines may come first; the error is one line, the last.
    assert_eq!(stderr.matches("vhostfs: error:").count(), 1, "{stderr}");
    stderr.lines().last().unwrap_or("").to_string()
}

/// [`refused`] of `--socket-path=SOCKET --shared-dir=/`.
fn refused_socket_path(socket: &std::path::Path) -> String {
    refused(
        &[
            format!("--socket-path={}", socket.display()),
            "--shared-dir=/".into(),
        ],
        None,
    )
}

#[test]
fn fd_not_listening() {
    let (a, _b) = UnixStream::pair().unwrap();
    let fd = a.as_raw_fd();
    assert_eq!(
        refused(&[format!("--fd={fd}"), "--shared-dir=/".into()], Some(fd)),
        format!(
            "vhostfs: error: --fd {fd}: the socket is not listening (the caller must bind() and \
             listen() before passing it)"
        )
    );
}

#[test]
fn fd_not_a_stream_socket() {
    let d = UnixDatagram::unbound().unwrap();
    let fd = d.as_raw_fd();
    assert_eq!(
        refused(&[format!("--fd={fd}"), "--shared-dir=/".into()], Some(fd)),
        format!(
            "vhostfs: error: --fd {fd}: not a UNIX stream socket (vhost-user needs AF_UNIX, \
             SOCK_STREAM)"
        )
    );
}

/// The error for a socket path some live process listens on.
fn in_use(socket: &std::path::Path) -> String {
    format!(
        "vhostfs: error: socket {}: in use, a live process is listening on it (another vhostfs \
         or virtiofsd?)",
        socket.display()
    )
}

#[test]
fn socket_path_with_a_live_listener() {
    let dir = TempDir::new("start-err").unwrap();
    let socket = dir.join("vm.sock");
    let _listener = UnixListener::bind(&socket).unwrap();
    let message = refused_socket_path(&socket);
    assert_eq!(message, in_use(&socket));
}

#[test]
fn socket_path_of_a_running_vhostfs() {
    let shared = TempDir::new("start-err-shared").unwrap();
    let dir = TempDir::new("start-err").unwrap();
    let socket = dir.join("vm.sock");
    let first = spawn_vhostfs(&socket, shared.path(), &[]).unwrap();
    let message = refused(
        &[
            format!("--socket-path={}", socket.display()),
            format!("--shared-dir={}", shared.path().display()),
        ],
        None,
    );
    assert_eq!(
        message,
        format!(
            "vhostfs: error: another instance is running (pid {}, {}.pid)",
            first.pid(),
            socket.display()
        )
    );
}

/// A running vhostfs whose pid file someone removed still keeps its socket: its listener is
/// found under the name it was bound at (`PATH.PID`, renamed to `PATH` once listening).
#[test]
fn socket_path_of_a_running_vhostfs_without_its_pid_file() {
    let shared = TempDir::new("start-err-shared").unwrap();
    let dir = TempDir::new("start-err").unwrap();
    let socket = dir.join("vm.sock");
    let _first = spawn_vhostfs(&socket, shared.path(), &[]).unwrap();
    std::fs::remove_file(dir.join("vm.sock.pid")).unwrap();
    let message = refused_socket_path(&socket);
    assert_eq!(message, in_use(&socket));
}

#[test]
fn socket_path_is_a_regular_file() {
    let dir = TempDir::new("start-err").unwrap();
    let socket = dir.join("vm.sock");
    std::fs::write(&socket, b"not a socket").unwrap();
    let message = refused_socket_path(&socket);
    assert_eq!(
        message,
        format!(
            "vhostfs: error: socket {}: the path exists and is not a socket; refusing to \
             replace it",
            socket.display()
        )
    );
    assert_eq!(std::fs::read(&socket).unwrap(), b"not a socket");
}

#[test]
fn stale_socket_file_is_replaced() {
    let shared = TempDir::new("start-err-shared").unwrap();
    let dir = TempDir::new("start-err").unwrap();
    let socket = dir.join("vm.sock");
    // A socket file whose listener is gone, as a killed daemon leaves it.
    drop(UnixListener::bind(&socket).unwrap());
    assert!(socket.exists());
    let _daemon = spawn_vhostfs(&socket, shared.path(), &[]).unwrap();
    drop(serve_one_guest(&socket, shared.path()));
}

#[test]
fn rlimit_too_low() {
    let dir = TempDir::new("start-err").unwrap();
    assert_eq!(
        refused(
            &[
                format!("--socket-path={}", dir.join("vm.sock").display()),
                "--shared-dir=/".into(),
                "--rlimit-nofile=100".into(),
            ],
            None,
        ),
        "vhostfs: error: the open-file limit is 100: too low to be useful (vhostfs keeps 256 fds \
         for itself; use --rlimit-nofile of at least 512, or raise LimitNOFILE=/ulimit -n)"
    );
}
