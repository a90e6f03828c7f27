//! `--metrics`: the registry's snapshot, served in the Prometheus text format over HTTP on a
//! UNIX socket or a loopback TCP port, printed as a table by `vhostfs stats` and logged on
//! SIGUSR1.
//!
//! The listener is bound on the host before the sandbox is entered (a UNIX socket's path is
//! then out of reach, a TCP socket keeps the host's network namespace); its thread starts after
//! the sandbox is in force, like every other thread. It only reads atomics
//! ([`Registry::snapshot`]), never a lock a request takes, and answers one connection at a
//! time with 1 s timeouts: a slow or stuck scraper delays other scrapers, never a request.
//! The counters and the filesystem's gauges span the daemon's life (with `--keep-listening`
//! the FUSE session of each connection starts from the same, emptied, tables); the queue
//! gauges are those of the connection being served.

mod client;
mod http;
mod prometheus;
mod table;

use std::io;
use std::net::TcpListener;
use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use crate::cli::MetricsAddr;
use crate::fuse_server::FuseServer;
use crate::metrics::requests::RequestSnapshot;
use crate::metrics::{QueueGauges, QueueSnapshot};
use crate::passthrough::{FsGauges, PassthroughFs};

pub use client::run as stats_command;
pub use table::table;

use super::socket::{bind_socket, check_socket_path, SocketGroup};

/// Everything the metrics read, from the layers that update it.
pub struct Registry {
    started: Instant,
    /// The pid the host knows the daemon by (the supervisor's under `--sandbox=namespace`).
    pid: u32,
    server: Arc<FuseServer>,
    fs: Arc<PassthroughFs>,
    /// The queue gauges of the connection being served (each has a backend of its own); the
    /// lock is taken by the readers and once per connection, never by a request.
    queues: RwLock<Arc<QueueGauges>>,
}

/// The registry at one moment.
#[derive(Clone, Debug)]
pub struct Snapshot {
    pub uptime: Duration,
    pub pid: u32,
    pub requests: RequestSnapshot,
    /// By queue index (0: high priority).
    pub queues: Vec<QueueSnapshot>,
    pub fs: FsGauges,
}

impl Registry {
    pub fn new(
        pid: u32,
        server: Arc<FuseServer>,
        fs: Arc<PassthroughFs>,
        queues: Arc<QueueGauges>,
    ) -> Self {
        Registry {
            started: Instant::now(),
            pid,
            server,
            fs,
            queues: RwLock::new(queues),
        }
    }

    /// From now on the queue gauges are those of a new connection's backend.
    pub fn set_queues(&self, queues: Arc<QueueGauges>) {
        *crate::sync::write(&self.queues) = queues;
    }

    /// Reads every counter and gauge (atomics only: no lock a request takes).
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            uptime: self.started.elapsed(),
            pid: self.pid,
            requests: self.server.metrics().snapshot(),
            queues: crate::sync::read(&self.queues).snapshot(),
            fs: self.fs.gauges(),
        }
    }
}

/// A bound metrics listener.
pub enum Listener {
    Unix(UnixListener),
    Tcp(TcpListener),
}

impl Listener {
    /// The listening socket (handed to the next process by an in-place upgrade).
    pub fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        match self {
            Listener::Unix(l) => std::os::fd::AsFd::as_fd(l),
            Listener::Tcp(l) => std::os::fd::AsFd::as_fd(l),
        }
    }

    /// The listener for `addr` that the process this one upgrades handed over.
    pub fn adopt(addr: &MetricsAddr, fd: std::os::fd::OwnedFd) -> Listener {
        match addr {
            MetricsAddr::Unix(_) => Listener::Unix(UnixListener::from(fd)),
            MetricsAddr::Tcp(_) => Listener::Tcp(TcpListener::from(fd)),
        }
    }
}

/// Binds `addr` (on the host, before the sandbox). A UNIX socket is created as the vhost-user
/// socket is (mode 0700, or 0770 and `group`; a stale socket file is replaced, a live one or
/// another file is not); returns its path, for removal at exit.
pub fn bind(
    addr: &MetricsAddr,
    group: Option<&SocketGroup>,
) -> Result<(Listener, Option<PathBuf>), String> {
    let what = format!("--metrics {addr}");
    match addr {
        MetricsAddr::Unix(path) => {
            check_socket_path(path).map_err(|e| format!("--metrics: {e}"))?;
            let _ = std::fs::remove_file(path);
            let l = bind_socket(path, group).map_err(|e| format!("--metrics: {e}"))?;
            Ok((Listener::Unix(l), Some(path.clone())))
        }
        MetricsAddr::Tcp(a) => {
            let l = TcpListener::bind(a).map_err(|e| format!("{what}: {e}"))?;
            Ok((Listener::Tcp(l), None))
        }
    }
}

/// Starts the thread that serves `listener` from `registry`.
pub fn serve(listener: Listener, registry: Arc<Registry>) -> io::Result<()> {
    std::thread::Builder::new()
        .name("metrics".into())
        .spawn(move || loop {
            let answered = match &listener {
                Listener::Unix(l) => l.accept().map(|(s, _)| http::answer(s, &registry)),
                Listener::Tcp(l) => l.accept().map(|(s, _)| http::answer(s, &registry)),
            };
            match answered {
                Ok(Ok(())) => {}
                Ok(Err(e)) => log::debug!("metrics: a scraper: {e}"),
                Err(e) => {
                    // Out of fds, or the like: try again later rather than spin.
                    log::warn!("metrics: accept: {e}");
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        })?;
    Ok(())
}
