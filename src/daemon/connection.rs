//! One vhost-user connection, from accept to the end of its FUSE session.
//!
//! Each connection gets a fresh `VhostUserDaemon` and backend: vhost-user-backend's handler
//! keeps what the frontend set up (owner, features, memory, vrings) after a disconnect, and
//! cannot be reset. The [`FuseServer`] (and the filesystem under it) lives as long as the
//! process; its session ends with the connection ([`FuseServer::end_session`]), so the next
//! connection starts as a guest after a reboot does. Nothing here opens a path: it runs
//! confined, in every sandbox mode, on the listening socket and the fds taken before.

use std::sync::Arc;

use vhost::vhost_user::Error as VhostUserError;
use vhost_user_backend::{Error as DaemonError, VhostUserDaemon};
use vm_memory::{GuestMemoryAtomic, GuestMemoryMmap};

use super::metrics::Registry;
use super::upgrade::{self, Inherited, Upgrader};
use crate::fuse_server::FuseServer;
use crate::shutdown::Signals;
use crate::systemd::Notifier;
use crate::vhost_device::VhostFsBackend;

/// What each connection is served with.
pub(super) struct Serving<'a> {
    pub server: &'a Arc<FuseServer>,
    pub registry: &'a Registry,
    pub notifier: Option<&'a Notifier>,
    /// `--tag`.
    pub tag: Option<&'a str>,
    /// `--thread-pool-size`.
    pub pool_size: usize,
    /// In-place upgrades: connections go through a relay.
    pub upgrader: &'a Upgrader,
    /// The daemon's signals, handled by this thread while it waits for a frontend and while it
    /// relays the connection's messages.
    pub signals: &'a Signals,
}

/// How a connection ended (when it did not fail the daemon).
#[derive(Debug)]
pub(super) enum Ended {
    /// The frontend closed the connection (QEMU quit, or stopped the device).
    Disconnected,
    /// The frontend sent a message the backend could not take (malformed, unexpected, with the
    /// wrong fds, or refused by the device), or the connection failed: it was dropped. Why,
    /// in one line.
    Dropped(String),
}

/// Waits for the next frontend on the upgrader's listener (the caller said so: log, readiness) and serves it
/// until the connection ends; returns once nothing of it is left (threads joined, guest memory
/// unmapped, eventfds closed, the FUSE session ended). `inherited`: the connection the process
/// this one upgrades handed over, served instead of a new one. `Err` only for what would fail
/// any connection (accept, thread creation), or a hand-over this process refused.
pub(super) fn serve_connection(
    with: &Serving<'_>,
    inherited: Option<Inherited>,
) -> Result<Ended, String> {
    let backend = VhostFsBackend::new(Arc::clone(with.server), with.tag, with.pool_size)
        .map_err(|e| e.to_string())?;
    with.registry.set_queues(backend.queue_gauges());
    let mem = GuestMemoryAtomic::new(GuestMemoryMmap::new());
    let mut daemon = VhostUserDaemon::new("vhostfs".into(), backend.clone(), mem)
        .map_err(|e| format!("vhost-user: {e}"))?;
    // One worker for every queue (`VhostFsBackend::queues_per_thread`).
    if let Some(worker) = daemon.get_epoll_handlers().first() {
        backend.watch_kicks_in(worker);
    }
    let relay = upgrade::serve(
        with.upgrader,
        &mut daemon,
        (backend.clone(), Arc::clone(with.server)),
        inherited,
        Some(with.signals),
    )?;
    if let Some(n) = with.notifier {
        n.send("STATUS=serving the guest");
    }
    // This thread relays the frontend's messages until the connection ends; then the handler
    // has ended or is ending.
    relay.serve(Some(with.signals));
    let ended = match daemon.wait() {
        // `wait` turns a broken socket (EPIPE, ECONNRESET) into `Ok`.
        Ok(())
        | Err(DaemonError::HandleRequest(
            VhostUserError::Disconnected | VhostUserError::PartialMessage,
        )) => Ended::Disconnected,
        Err(DaemonError::HandleRequest(e)) => {
            Ended::Dropped(format!("the vhost-user frontend broke the protocol ({e})"))
        }
        Err(DaemonError::WaitDaemon(_)) => {
            Ended::Dropped("the vhost-user request thread panicked".into())
        }
        Err(e) => Ended::Dropped(format!("vhost-user: {e}")),
    };
    // A message the relay refused ends the handler's stream as a disconnect would.
    let ended = match (ended, with.upgrader.broken()) {
        (Ended::Disconnected, Some(why)) => Ended::Dropped(format!(
            "the vhost-user frontend broke the protocol ({why})"
        )),
        (ended, _) => ended,
    };
    with.upgrader.serving(None);
    backend.finish(daemon);
    with.server.log_stats();
    with.server.end_session();
    Ok(ended)
}
