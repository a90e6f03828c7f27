//! vhostfs under systemd: socket activation (`LISTEN_PID`/`LISTEN_FDS`/`LISTEN_FDNAMES` with the
//! socket on fd 3), `Type=notify` readiness on `NOTIFY_SOCKET` (path and abstract), and a clean
//! exit 0 on SIGTERM. The harness does what systemd does: the listening socket is dup2-ed to fd 3
//! and `LISTEN_PID` is the pid of the daemon itself (set by a `sh` that then `exec`s it).

mod common;

use std::os::fd::AsRawFd;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram, UnixListener, UnixStream};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::smoke::{inherit_fd, run_to_exit, serve_one_guest};
use common::{Daemon, TempDir};

const TIMEOUT: Duration = Duration::from_secs(20);

/// `vhostfs ARGS` started as systemd starts a socket-activated service: `sock_fd` on fd 3,
/// `LISTEN_FDS=1`, `LISTEN_FDNAMES`, and `LISTEN_PID` equal to the daemon's pid.
fn activated(sock_fd: i32, listen_pid: Option<&str>, args: &[&str]) -> Command {
    let script = match listen_pid {
        None => "export LISTEN_PID=$$; exec \"$0\" \"$@\"".to_string(),
        Some(pid) => format!("export LISTEN_PID={pid}; exec \"$0\" \"$@\""),
    };
    let mut cmd = Command::new("/bin/sh");
    cmd.arg("-c")
        .arg(script)
        .arg(env!("CARGO_BIN_EXE_vhostfs"))
        .args(args)
        .env("LISTEN_FDS", "1")
        .env("LISTEN_FDNAMES", "vhostfs-test")
        .env_remove("NOTIFY_SOCKET");
    inherit_fd(&mut cmd, sock_fd, 3);
    cmd
}

/// Receives one sd_notify datagram (panics after [`TIMEOUT`]).
fn recv_notify(sock: &UnixDatagram) -> String {
    sock.set_read_timeout(Some(TIMEOUT)).unwrap();
    let mut buf = [0u8; 4096];
    let n = sock
        .recv(&mut buf)
        .unwrap_or_else(|e| panic!("no sd_notify message within {TIMEOUT:?}: {e}"));
    String::from_utf8(buf[..n].to_vec()).unwrap()
}

fn sigterm(daemon: &mut Daemon) -> std::process::ExitStatus {
    // SAFETY: kill(2) on our own child's pid.
    assert_eq!(unsafe { libc::kill(daemon.pid() as i32, libc::SIGTERM) }, 0);
    daemon
        .wait_exit(TIMEOUT)
        .unwrap()
        .expect("still running after SIGTERM")
}

#[test]
fn socket_activation_ready_serve_sigterm() {
    let shared = TempDir::new("sd-shared").unwrap();
    let dir = TempDir::new("sd-sock").unwrap();
    let socket = dir.join("vhostfs.sock");
    let listener = UnixListener::bind(&socket).unwrap();
    let notify = UnixDatagram::bind(dir.join("notify")).unwrap();
    let shared_arg = format!("--shared-dir={}", shared.path().display());
    let mut cmd = activated(listener.as_raw_fd(), None, &[&shared_arg]);
    cmd.env("NOTIFY_SOCKET", dir.join("notify"));
    let mut daemon = Daemon::spawn(&mut cmd, &socket).unwrap();

    // READY=1 comes first; only then does the guest connect.
    let ready = recv_notify(&notify);
    assert!(ready.lines().any(|l| l == "READY=1"), "{ready:?}");
    assert!(ready.lines().any(|l| l.starts_with("STATUS=")), "{ready:?}");
    let client = serve_one_guest(&socket, shared.path());
    assert_eq!(recv_notify(&notify), "STATUS=serving the guest");

    // The inherited socket must not leak into anything the daemon might exec: close-on-exec
    // in the serving process, which holds it, and in its supervisor (which launches an
    // upgrade's binary) closed or close-on-exec too.
    let fd3_flags = |pid: u32| {
        let fdinfo = std::fs::read_to_string(format!("/proc/{pid}/fdinfo/3")).ok()?;
        fdinfo
            .lines()
            .find_map(|l| l.strip_prefix("flags:"))
            .map(|f| u32::from_str_radix(f.trim(), 8).unwrap())
    };
    let served = daemon.served_pid().unwrap();
    let flags = fd3_flags(served).expect("the serving process holds the socket as fd 3");
    assert_ne!(
        flags & libc::O_CLOEXEC as u32,
        0,
        "fd 3 is not close-on-exec"
    );
    if let Some(flags) = fd3_flags(daemon.pid()) {
        assert_ne!(
            flags & libc::O_CLOEXEC as u32,
            0,
            "the supervisor's fd 3 is not close-on-exec"
        );
    }

    // SIGTERM while the guest is connected: exit 0, STOPPING=1.
    let status = sigterm(&mut daemon);
    assert_eq!(status.code(), Some(0), "{status}");
    assert_eq!(recv_notify(&notify), "STOPPING=1");
    drop(client);
}

#[test]
fn abstract_notify_socket_and_sigterm_while_waiting() {
    let shared = TempDir::new("sd-shared").unwrap();
    let dir = TempDir::new("sd-sock").unwrap();
    let socket = dir.join("vhostfs.sock");
    let listener = UnixListener::bind(&socket).unwrap();
    let name = format!("vhostfs-test-notify-{}", std::process::id());
    let notify =
        UnixDatagram::bind_addr(&SocketAddr::from_abstract_name(name.as_bytes()).unwrap()).unwrap();
    let shared_arg = format!("--shared-dir={}", shared.path().display());
    let mut cmd = activated(listener.as_raw_fd(), None, &[&shared_arg]);
    cmd.env("NOTIFY_SOCKET", format!("@{name}"));
    let mut daemon = Daemon::spawn(&mut cmd, &socket).unwrap();
    let ready = recv_notify(&notify);
    assert!(ready.starts_with("READY=1\n"), "{ready:?}");
    // Nobody connected: the daemon is blocked in accept().
    let status = sigterm(&mut daemon);
    assert_eq!(status.code(), Some(0), "{status}");
    assert_eq!(recv_notify(&notify), "STOPPING=1");
    // The socket belongs to the socket unit: the daemon leaves it in place.
    assert!(socket.exists());
}

/// `--keep-listening` on systemd's socket: three guests one after another on the inherited
/// socket (as QEMU restarts would), the status following each, and the socket left in place
/// at the end (it belongs to the socket unit).
#[test]
fn socket_activation_keep_listening_serves_guest_after_guest() {
    let shared = TempDir::new("sd-shared").unwrap();
    let dir = TempDir::new("sd-sock").unwrap();
    let socket = dir.join("vhostfs.sock");
    let listener = UnixListener::bind(&socket).unwrap();
    let notify = UnixDatagram::bind(dir.join("notify")).unwrap();
    let shared_arg = format!("--shared-dir={}", shared.path().display());
    let mut cmd = activated(
        listener.as_raw_fd(),
        None,
        &[&shared_arg, "--keep-listening", "--log-level=warn"],
    );
    cmd.env("NOTIFY_SOCKET", dir.join("notify"));
    let mut daemon = Daemon::spawn(&mut cmd, &socket).unwrap();
    drop(listener);
    assert!(recv_notify(&notify).starts_with("READY=1\n"));
    for n in 0..3 {
        let client = serve_one_guest(&socket, shared.path());
        assert_eq!(
            recv_notify(&notify),
            "STATUS=serving the guest",
            "guest {n}"
        );
        drop(client);
        assert_eq!(
            recv_notify(&notify),
            "STATUS=waiting for the vhost-user frontend",
            "after guest {n}"
        );
        assert!(daemon.is_alive(), "exited after guest {n}");
    }
    let status = sigterm(&mut daemon);
    assert_eq!(status.code(), Some(0), "{status}");
    assert_eq!(recv_notify(&notify), "STOPPING=1");
    assert!(socket.exists());
}

#[test]
fn listen_pid_of_another_process_is_not_ours() {
    let dir = TempDir::new("sd-sock").unwrap();
    let listener = UnixListener::bind(dir.join("vhostfs.sock")).unwrap();
    let mut cmd = activated(listener.as_raw_fd(), Some("1"), &["--shared-dir=/"]);
    let (status, stderr) = run_to_exit(&mut cmd, TIMEOUT);
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("missing \"--socket-path\" or \"--fd\" option")
            && stderr.contains("LISTEN_FDS"),
        "{stderr}"
    );
}

#[test]
fn activation_socket_must_be_listening() {
    let (a, _b) = UnixStream::pair().unwrap();
    let mut cmd = activated(a.as_raw_fd(), None, &["--shared-dir=/"]);
    let (status, stderr) = run_to_exit(&mut cmd, TIMEOUT);
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("the socket from systemd (vhostfs-test): the socket is not listening"),
        "{stderr}"
    );
}

#[test]
fn two_activation_sockets_refused() {
    let dir = TempDir::new("sd-sock").unwrap();
    let listener = UnixListener::bind(dir.join("vhostfs.sock")).unwrap();
    let mut cmd = activated(listener.as_raw_fd(), None, &["--shared-dir=/"]);
    cmd.env("LISTEN_FDS", "2");
    let (status, stderr) = run_to_exit(&mut cmd, TIMEOUT);
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("systemd passed 2 sockets"), "{stderr}");
}

/// `Type=notify` without socket activation (`--socket-path`): READY=1 once the socket listens,
/// and SIGTERM removes the socket and its pid file.
#[test]
fn notify_with_socket_path_and_sigterm_cleans_up() {
    let shared = TempDir::new("sd-shared").unwrap();
    let dir = TempDir::new("sd-sock").unwrap();
    let socket = dir.join("vhostfs.sock");
    let notify = UnixDatagram::bind(dir.join("notify")).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_vhostfs"));
    cmd.arg(format!("--socket-path={}", socket.display()))
        .arg(format!("--shared-dir={}", shared.path().display()))
        .env("NOTIFY_SOCKET", dir.join("notify"))
        .env_remove("LISTEN_PID");
    let mut daemon = Daemon::spawn(&mut cmd, &socket).unwrap();
    let ready = recv_notify(&notify);
    assert!(ready.starts_with("READY=1\n"), "{ready:?}");
    let client = serve_one_guest(&socket, shared.path());
    let status = sigterm(&mut daemon);
    assert_eq!(status.code(), Some(0), "{status}");
    assert!(!socket.exists(), "socket left behind");
    assert!(!Path::new(&format!("{}.pid", socket.display())).exists());
    drop(client);
}

/// The value of the first `Key=` line of a unit file.
fn unit_value<'a>(unit: &'a str, key: &str) -> &'a str {
    unit.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
        .unwrap_or_else(|| panic!("no {key}= in the unit"))
}

/// contrib/systemd/vhostfs@.{socket,service}: the socket path, the capabilities, and the
/// ExecStart line, expanded as systemd expands it from an example /etc/vhostfs/%i.conf, run under
/// socket activation and serving the test guest.
#[test]
fn template_units_exec_start_serves() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("contrib/systemd");
    let socket_unit = std::fs::read_to_string(root.join("vhostfs@.socket")).unwrap();
    let service = std::fs::read_to_string(root.join("vhostfs@.service")).unwrap();
    assert_eq!(
        unit_value(&socket_unit, "ListenStream"),
        "/run/vhostfs/%i.sock"
    );
    assert_eq!(unit_value(&service, "Type"), "notify");
    assert_eq!(
        unit_value(&service, "EnvironmentFile"),
        "/etc/vhostfs/%i.conf"
    );
    let caps: Vec<&str> = unit_value(&service, "CapabilityBoundingSet")
        .split_whitespace()
        .collect();
    for cap in [
        "CAP_DAC_READ_SEARCH",
        "CAP_CHOWN",
        "CAP_DAC_OVERRIDE",
        "CAP_FOWNER",
        "CAP_FSETID",
        "CAP_SETGID",
        "CAP_SETUID",
        "CAP_MKNOD",
        "CAP_SETFCAP",
    ] {
        assert!(
            caps.contains(&cap),
            "{cap} missing from CapabilityBoundingSet"
        );
    }

    let shared = TempDir::new("sd-shared").unwrap();
    let dir = TempDir::new("sd-sock").unwrap();
    let conf = format!(
        "SHARED_DIR={}\nVHOSTFS_ARGS=--cache=auto --inode-file-handles=prefer --xattr\n",
        shared.path().display()
    );
    let env: Vec<(&str, &str)> = conf.lines().filter_map(|l| l.split_once('=')).collect();
    let var = |name: &str| env.iter().find(|(k, _)| *k == name).unwrap().1;
    // systemd: ${VAR} is one word, $VAR is split on whitespace.
    let mut argv: Vec<String> = Vec::new();
    for word in unit_value(&service, "ExecStart").split_whitespace() {
        if word == "$VHOSTFS_ARGS" {
            argv.extend(var("VHOSTFS_ARGS").split_whitespace().map(String::from));
        } else {
            argv.push(word.replace("${SHARED_DIR}", var("SHARED_DIR")));
        }
    }
    assert_eq!(argv[0], "/usr/bin/vhostfs");
    let socket = dir.join("share.sock");
    let listener = UnixListener::bind(&socket).unwrap();
    let notify = UnixDatagram::bind(dir.join("notify")).unwrap();
    let args: Vec<&str> = argv[1..].iter().map(String::as_str).collect();
    let mut cmd = activated(listener.as_raw_fd(), None, &args);
    cmd.env("NOTIFY_SOCKET", dir.join("notify"));
    let mut daemon = Daemon::spawn(&mut cmd, &socket).unwrap();
    assert!(recv_notify(&notify).starts_with("READY=1\n"));
    let client = serve_one_guest(&socket, shared.path());
    drop(client);
    // The guest went away: the service ends by itself, with success.
    let status = daemon.wait_exit(TIMEOUT).unwrap().expect("still running");
    assert_eq!(status.code(), Some(0));
}
