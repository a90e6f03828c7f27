//! systemd integration: socket activation (`LISTEN_PID`/`LISTEN_FDS`/`LISTEN_FDNAMES`) and
//! `Type=notify` readiness (`NOTIFY_SOCKET`).
//!
//! Both protocols are a few environment variables and one datagram, documented in
//! sd_listen_fds(3) and sd_notify(3); they are written out here rather than taken from a crate so
//! that the environment is read (and cleared) exactly once, at start-up, before any thread exists.

use std::env;
use std::io;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};

/// The first fd passed by socket activation (`SD_LISTEN_FDS_START`).
const LISTEN_FDS_START: i32 = 3;

/// A socket passed by systemd socket activation.
#[derive(Debug)]
pub struct ActivationSocket {
    /// The listening socket (fd 3), close-on-exec.
    pub fd: OwnedFd,
    /// Its name from `LISTEN_FDNAMES` (`FileDescriptorName=` of the socket unit), if any.
    pub name: Option<String>,
}

/// Takes the socket that systemd passed to this process, and clears the activation variables
/// (so that no child inherits them).
///
/// Returns `Ok(None)` when there is none: `LISTEN_PID` unset or naming another process (the
/// variables were meant for a parent), or `LISTEN_FDS=0`. vhostfs serves one socket, so more than
/// one is an error.
pub fn take_activation_socket() -> Result<Option<ActivationSocket>, String> {
    let pid = env::var("LISTEN_PID").ok();
    let fds = env::var("LISTEN_FDS").ok();
    let names = env::var("LISTEN_FDNAMES").ok();
    for var in ["LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"] {
        env::remove_var(var);
    }
    let Some(pid) = pid else {
        return Ok(None);
    };
    if pid.trim().parse::<u32>().ok() != Some(std::process::id()) {
        return Ok(None);
    }
    let count: u32 = fds
        .as_deref()
        .unwrap_or("0")
        .trim()
        .parse()
        .map_err(|_| format!("socket activation: invalid LISTEN_FDS={fds:?}"))?;
    match count {
        0 => return Ok(None),
        1 => {}
        n => {
            return Err(format!(
                "socket activation: systemd passed {n} sockets (LISTEN_FDS={n}); vhostfs serves \
                 one: give the .socket unit a single ListenStream="
            ))
        }
    }
    // SAFETY: fcntl on an integer fd; an fd that is not open yields EBADF.
    if unsafe { libc::fcntl(LISTEN_FDS_START, libc::F_SETFD, libc::FD_CLOEXEC) } < 0 {
        return Err(format!(
            "socket activation: fd {LISTEN_FDS_START} (LISTEN_FDS=1): {}",
            io::Error::last_os_error()
        ));
    }
    // SAFETY: fd 3 is open (F_SETFD succeeded) and was handed to us by systemd: we own it now.
    let fd = unsafe { OwnedFd::from_raw_fd(LISTEN_FDS_START) };
    let name = names
        .and_then(|n| n.split(':').next().map(str::to_string))
        .filter(|n| !n.is_empty());
    Ok(Some(ActivationSocket { fd, name }))
}

/// Where to send `sd_notify` messages: the `NOTIFY_SOCKET` of a `Type=notify` service.
///
/// The datagram socket is connected once, at start-up: sending on it later needs no path
/// lookup, so it keeps working inside the sandbox (another mount and network namespace, a
/// different root). In `--sandbox=namespace` the messages come from the serving child, not from
/// the main pid: the unit needs `NotifyAccess=all`.
#[derive(Clone, Debug)]
pub struct Notifier {
    sock: std::sync::Arc<UnixDatagram>,
}

impl Notifier {
    /// Reads and clears `NOTIFY_SOCKET`. `Ok(None)` when it is unset; an error for an address
    /// that is neither a path nor an abstract (`@`) name.
    pub fn from_env() -> Result<Option<Notifier>, String> {
        let Some(value) = env::var_os("NOTIFY_SOCKET") else {
            return Ok(None);
        };
        env::remove_var("NOTIFY_SOCKET");
        let bytes = value.as_encoded_bytes();
        let addr = match bytes.first() {
            Some(b'/') => SocketAddr::from_pathname(&value),
            Some(b'@') => SocketAddr::from_abstract_name(&bytes[1..]),
            _ => {
                return Err(format!(
                    "NOTIFY_SOCKET={value:?}: only path and abstract (@) sockets are supported"
                ))
            }
        }
        .map_err(|e| format!("NOTIFY_SOCKET={value:?}: {e}"))?;
        let sock = UnixDatagram::unbound()
            .and_then(|s| s.connect_addr(&addr).map(|()| s))
            .map_err(|e| format!("NOTIFY_SOCKET={value:?}: {e}"))?;
        Ok(Some(Notifier {
            sock: std::sync::Arc::new(sock),
        }))
    }

    /// The connected socket (handed to the next process by an in-place upgrade).
    pub fn socket(&self) -> std::os::fd::BorrowedFd<'_> {
        std::os::fd::AsFd::as_fd(&*self.sock)
    }

    /// The notifier of a connected datagram socket another process handed over.
    pub fn from_socket(fd: std::os::fd::OwnedFd) -> Notifier {
        Notifier {
            sock: std::sync::Arc::new(UnixDatagram::from(fd)),
        }
    }

    /// Sends one notification (newline-separated `KEY=VALUE` assignments, e.g. `READY=1`).
    pub fn notify(&self, state: &str) -> io::Result<()> {
        self.sock.send(state.as_bytes()).map(drop)
    }

    /// [`Notifier::notify`], with a failure logged rather than returned: systemd going away
    /// must not stop the device.
    pub fn send(&self, state: &str) {
        if let Err(e) = self.notify(state) {
            log::warn!("sd_notify {state:?}: {e}");
        }
    }
}
