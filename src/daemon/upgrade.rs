//! In-place upgrade: the serving process hands its live session (the frontend's connection,
//! the device's set-up, the FUSE session) to a fresh process of the binary it was started
//! from, and exits; the guest sees a pause, never an error.
//!
//! Parts: `wire` (vhost-user messages as bytes), `setup` (the device's set-up, recorded from
//! the frontend's messages and replayed), `relay` (the frontend's connection relayed to the
//! in-process vhost-user-backend handler, which cannot adopt a connection), `handover` (what
//! moves, and how), `inherited` (the new process's side), `launcher` (the unconfined child
//! that starts the next binary and makes sockets for the confined daemon), `command`
//! (`vhostfs upgrade`).
//!
//! The steps (SIGHUP, or `vhostfs upgrade`, which sends it with a nonce through `sigqueue`):
//! 1. The launcher starts the binary and it gets the [`Process`] part (listening socket, pid
//!    file, metrics listener, notify socket; under `--sandbox=namespace` our mount namespace,
//!    which it joins) over a socket pair, fds as SCM_RIGHTS. It starts up (file handles,
//!    sandbox) while we serve on, and answers `W`.
//! 2. The relay stops between two messages, everything the handler was sent answered.
//! 3. The queues stop taking chains and finish those taken (`VhostFsBackend::pause`): each used
//!    index now equals its next available index. The guest's pause starts here.
//! 4. GET_VRING_BASE, sent to our own handler, stops each running vring and gives that index,
//!    which becomes the vring's base in the recorded set-up.
//! 5. The [`Session`] goes over: the set-up, the frontend's connection, the FUSE session with
//!    the fd of every open file and inode held by an fd, and the key and handle of every inode
//!    held by a handle (`FuseServer::save_state_with_fds`). The new process loads it, replays
//!    the set-up into its own handler (each step acknowledged), answers `R`; we tell systemd
//!    its pid (`MAINPID=`) and our sandbox supervisor that the socket and pid file are no
//!    longer ours, and exit. It then kicks every running vring (kicks we consumed while
//!    stopped are not lost), takes the socket and pid file as its own, writes its pid (the
//!    host's, its supervisor's under the namespace sandbox) into the pid file, and relays the
//!    same connection. The phases of the pause are logged at debug level ([`marks`]).
//! 6. Any failure before `R` (the binary missing or exiting, a refused state, a request still
//!    running after [`QUIESCE`], no answer in [`ANSWER`]): the new process is killed; if our
//!    queues had stopped, the vring part of the set-up is replayed into our own handler, the
//!    queues and the relay resume and are kicked. The reason is logged and told to `vhostfs
//!    upgrade`. An upgrade never takes the share down.

pub mod command;
mod handover;
mod inherited;
pub mod launcher;
mod marks;
mod relay;
mod setup;
#[cfg(test)]
mod tests;
mod wire;

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use vhost::vhost_user::Listener;
use vhost_user_backend::VhostUserDaemon;

use crate::fuse_server::FuseServer;
use crate::passthrough::migration::HandedFd;
use crate::shutdown::{wait_readable, Signals};

use crate::sync::lock;
use crate::systemd::Notifier;
use crate::vhost_device::VhostFsBackend;
pub use handover::Process;
use handover::Session;
pub use inherited::Inherited;
pub use launcher::Launcher;
use marks::{monotonic_ns, Marks};
pub use relay::Relay;
use setup::DeviceSetup;
use wire::{req, Msg};

/// How long the queues may take to finish the requests they run.
pub const QUIESCE: Duration = Duration::from_secs(2);
/// How long the new process may take to start and take over.
pub const ANSWER: Duration = Duration::from_secs(30);

/// Replays `msgs` into the handler on `sock`, checking that it offers every feature `setup`
/// had negotiated.
fn replay(sock: &UnixStream, setup: &DeviceSetup, msgs: &[Msg]) -> io::Result<()> {
    for m in msgs {
        let reply = wire::exchange(sock, m)?;
        let (wanted, what) = match m.request {
            req::GET_FEATURES => (setup.features, "virtio features"),
            req::GET_PROTOCOL_FEATURES => (setup.protocol_features, "protocol features"),
            _ => continue,
        };
        let offered = reply.and_then(|r| r.u64_at(0)).unwrap_or(0);
        let missing = wanted.unwrap_or(0) & !offered;
        if missing != 0 {
            return Err(io::Error::other(format!(
                "this binary does not offer the {what} {missing:#x} the frontend negotiated"
            )));
        }
    }
    Ok(())
}

/// The FUSE session as `FuseServer::save_state_with_fds` writes it, and the fds it names (open
/// files, mounts, inodes without a handle), held open until sent (no request runs: the queues
/// are paused).
fn save_session(server: &FuseServer) -> Result<(Vec<u8>, Vec<HandedFd>), String> {
    let (mut session, mut fds) = (Vec::new(), Vec::new());
    server
        .save_state_with_fds(&mut session, Some(&mut fds))
        .map_err(|e| format!("saving the FUSE session: {e}"))?;
    Ok((session, fds))
}

/// The connection being served, as the upgrade needs it.
#[derive(Clone)]
pub struct Connection {
    pub relay: Arc<Relay>,
    pub backend: VhostFsBackend,
    pub server: Arc<FuseServer>,
}

/// What an upgrade hands over besides the connection: fds of the daemon (duplicates).
pub struct Handed {
    pub pid_file: Option<OwnedFd>,
    pub metrics: Option<OwnedFd>,
    pub notifier: Option<Notifier>,
    /// `--sandbox=namespace`: the mount namespace we serve in (none when the launcher opens it
    /// for a launch: [`Launcher::launch`]).
    pub mount_ns: Option<OwnedFd>,
    /// Unprivileged under `--sandbox=namespace`: the user namespace we serve in.
    pub user_ns: Option<OwnedFd>,
}

/// In-place upgrades of this process.
pub struct Upgrader {
    launcher: Launcher,
    handed: Handed,
    /// The vhost-user socket's listener: connections are accepted from it ([`serve`]), and
    /// an upgrade hands a duplicate over.
    listener: Listener,
    /// Our pid as the host sees it (the sandbox supervisor's under `--sandbox=namespace`): what
    /// the pid file, systemd and `vhostfs upgrade` are told.
    host_pid: u32,
    current: Mutex<Option<Connection>>,
}

impl Upgrader {
    pub fn new(launcher: Launcher, handed: Handed, listener: Listener, host_pid: u32) -> Upgrader {
        Upgrader {
            launcher,
            handed,
            listener,
            host_pid,
            current: Mutex::new(None),
        }
    }

    /// Writes our pid into the pid file, once this process serves what it was handed.
    fn claim_pid_file(&self) {
        let Some(fd) = &self.handed.pid_file else {
            return;
        };
        let claimed = fd
            .try_clone()
            .and_then(|fd| crate::pid_file::PidFile::claim(&File::from(fd), self.host_pid));
        if let Err(e) = claimed {
            log::warn!("cannot write our pid into the pid file: {e}");
        }
    }

    /// Why the relay of the connection served refused a frontend message, if it did.
    pub fn broken(&self) -> Option<String> {
        lock(&self.current).as_ref().and_then(|c| c.relay.broken())
    }

    /// The connection now served (`None` once it ends).
    pub fn serving(&self, conn: Option<Connection>) {
        *lock(&self.current) = conn;
    }

    /// On SIGHUP: hands over to a new process and exits, or logs why not and goes on serving.
    /// `requester`: the `vhostfs upgrade` process that asked, and its nonce.
    pub fn upgrade(&self, requester: Option<(u32, u32)>) {
        log::info!("SIGHUP: handing over to a new process");
        match self.hand_over(requester) {
            Ok(pid) => {
                log::info!("pid {pid} took over: exiting");
                if let Some(n) = &self.handed.notifier {
                    n.send(&format!("MAINPID={pid}"));
                }
                crate::sandbox::handed_over();
                // Nothing is cleaned up: the socket, pid file and connection are the new
                // process's now.
                std::process::exit(0);
            }
            Err(e) => {
                log::error!("upgrade failed, serving on: {e}");
                if let Some((pid, nonce)) = requester {
                    self.launcher.report(pid, nonce, &format!("error {e}"));
                }
            }
        }
    }

    fn hand_over(&self, requester: Option<(u32, u32)>) -> Result<libc::pid_t, String> {
        let conn = lock(&self.current).clone();
        let Some(conn) = conn else {
            return Err("no frontend is connected: restart the daemon instead".into());
        };
        let (pid, sock, mount_ns) = self
            .launcher
            .launch()
            .map_err(|e| format!("cannot start the new binary: {e}"))?;
        // Once the session moves, the socket and pid file may be the new process's: our
        // launcher must not remove them when we exit (it does again if the upgrade fails).
        let moved = self.start_next(&sock, requester, mount_ns).and_then(|()| {
            self.launcher
                .cleanup(false)
                .map_err(|e| format!("the launcher: {e}"))?;
            self.move_session(&conn, &sock)
        });
        if moved.is_err() {
            self.launcher.kill(pid);
            if let Err(e) = self.launcher.cleanup(true) {
                log::warn!("the launcher: {e}: the socket and pid file may stay behind");
            }
        }
        moved.map(|()| pid)
    }

    /// Gives the new process what it starts with, and waits until it has started (we serve
    /// meanwhile: its start-up is no pause for the guest). `mount_ns`: the mount namespace we
    /// serve in, if the launcher opened it (else the one we hold, if any).
    fn start_next(
        &self,
        sock: &UnixStream,
        requester: Option<(u32, u32)>,
        mount_ns: Option<OwnedFd>,
    ) -> Result<(), String> {
        let dup = |fd: &OwnedFd| fd.try_clone().map_err(|e| format!("dup: {e}"));
        let dup_opt = |fd: &Option<OwnedFd>| fd.as_ref().map(dup).transpose();
        let h = &self.handed;
        let process = Process {
            listener: Some(
                // SAFETY: the listener's fd, valid while `self` holds the listener.
                unsafe { BorrowedFd::borrow_raw(self.listener.as_raw_fd()) }
                    .try_clone_to_owned()
                    .map_err(|e| format!("dup: {e}"))?,
            ),
            pid_file: dup_opt(&h.pid_file)?,
            metrics: dup_opt(&h.metrics)?,
            mount_ns: match mount_ns {
                Some(ns) => Some(ns),
                None => dup_opt(&h.mount_ns)?,
            },
            user_ns: dup_opt(&h.user_ns)?,
            notify: h
                .notifier
                .as_ref()
                .map(|n| n.socket().try_clone_to_owned())
                .transpose()
                .map_err(|e| format!("dup: {e}"))?,
            requester,
        };
        sock.set_read_timeout(Some(ANSWER))
            .map_err(|e| e.to_string())?;
        handover::send_process(sock, process).map_err(sent_error)?;
        handover::await_answer(sock, handover::WAITING)
    }

    /// Stops the queues, gives the new process the session and waits until it holds the
    /// device; on any failure our own handler and queues start again as they were.
    fn move_session(&self, conn: &Connection, sock: &UnixStream) -> Result<(), String> {
        let mut paused = conn
            .relay
            .pause()
            .map_err(|e| format!("the vhost-user connection: {e}"))?;
        if let Some(why) = paused.setup.unreplayable.clone() {
            paused.resume();
            return Err(format!("the device set-up cannot be replayed: {why}"));
        }
        // The record holds the device's fds again (the backend's, duplicated), to replay and
        // send; given back once the hand-over is over.
        let live = paused.setup.live;
        if live {
            let filled = conn
                .backend
                .device_fds()
                .and_then(|fds| paused.setup.fill(fds));
            if let Err(e) = filled {
                paused.resume();
                return Err(format!("the device's fds: {e}"));
            }
        }
        let mut marks = Marks::since(monotonic_ns());
        if let Err(e) = conn.backend.pause(QUIESCE) {
            conn.backend.resume();
            if live {
                paused.setup.forget_fds();
            }
            paused.resume();
            return Err(e.to_string());
        }
        marks.mark("requests finished");
        let result = self
            .stop_vrings(&mut paused)
            .and_then(|()| {
                marks.mark("vrings stopped");
                save_session(&conn.server)
            })
            .and_then(|(fuse, fuse_fds)| {
                marks.mark("session saved");
                marks.detail = format!("{} bytes and {} fds", fuse.len(), fuse_fds.len());
                let session = Session {
                    setup: paused.setup.try_clone().map_err(|e| format!("dup: {e}"))?,
                    frontend: paused
                        .frontend()
                        .try_clone_to_owned()
                        .map_err(|e| format!("dup: {e}"))?,
                    paused_at: marks.start,
                    fuse,
                    fuse_fds,
                };
                handover::send_session(sock, session).map_err(sent_error)?;
                marks.mark("session sent");
                handover::await_answer(sock, handover::READY)?;
                marks.mark("new process ready");
                Ok(())
            });
        marks.log("old process");
        if result.is_err() {
            // Our handler's vrings are stopped (or some are): start them again as they were.
            let mut msgs = Vec::new();
            let restarted = paused
                .setup
                .replay_vrings(&mut msgs)
                .and_then(|()| replay(paused.backend(), &paused.setup, &msgs));
            if let Err(e) = restarted {
                log::error!("cannot restart the vrings after a failed upgrade: {e}");
            }
            conn.backend.resume();
            paused.setup.kick();
            if live {
                paused.setup.forget_fds();
            }
            paused.resume();
        }
        result
    }

    /// GET_VRING_BASE to our handler for each running vring; the index becomes its base.
    fn stop_vrings(&self, paused: &mut relay::Paused<'_>) -> Result<(), String> {
        let started: Vec<u32> = paused.setup.started().collect();
        for i in started {
            let payload = [i.to_le_bytes(), 0u32.to_le_bytes()].concat();
            let reply = wire::exchange(
                paused.backend(),
                &Msg::new(req::GET_VRING_BASE, payload, Vec::new()),
            )
            .map_err(|e| format!("GET_VRING_BASE {i}: {e}"))?;
            let base = reply
                .and_then(|r| r.u32_at(4))
                .ok_or("a short GET_VRING_BASE")?;
            paused.setup.vrings[i as usize].base = Some(base);
        }
        Ok(())
    }
}

/// What a failed send to the new process means.
fn sent_error(e: io::Error) -> String {
    match e.kind() {
        io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset => {
            "the new process exited before taking over".to_string()
        }
        _ => format!("cannot send the state to the new process: {e}"),
    }
}

/// Serves the next connection through a relay, so that it can be handed over: the one the
/// process this one upgrades handed over (`inherited`), else the next one `up`'s listener
/// accepts.
/// Returns the connection's relay once the handler serves it: [`Relay::serve`] relays until
/// the connection ends (then `daemon.wait()` returns). `signals` are handled while no frontend
/// is connected yet.
pub fn serve(
    up: &Upgrader,
    daemon: &mut VhostUserDaemon<VhostFsBackend>,
    (backend, server): (VhostFsBackend, Arc<FuseServer>),
    inherited: Option<Inherited>,
    signals: Option<&Signals>,
) -> Result<Arc<Relay>, String> {
    // A new frontend is waited for first: the handler's connection and threads exist only
    // once there is a connection to serve.
    let frontend = match inherited {
        Some(_) => None,
        None => Some(loop {
            // The signals that come while no frontend is connected are handled here.
            wait_readable(&[up.listener.as_raw_fd()], signals, false)
                .map_err(|e| format!("waiting for the vhost-user frontend: {e}"))?;
            match up.listener.accept() {
                Ok(Some(s)) => break s,
                Ok(None) => continue,
                Err(e) => return Err(format!("vhost-user: {e}")),
            }
        }),
    };
    let (handler, mut private) = up
        .launcher
        .pair()
        .map_err(|e| format!("a connection for the vhost-user handler: {e}"))?;
    daemon
        .start(&mut private)
        .map_err(|e| format!("vhost-user: {e}"))?;
    let relay = match inherited {
        Some(inherited) => {
            let requester = inherited.process.requester;
            let mut session = inherited.session()?;
            let mut marks = Marks::since(session.paused_at);
            marks.mark("session received");
            let fuse_fds = std::mem::take(&mut session.fuse_fds);
            if let Err(e) = server.load_state_with_fds(&mut &session.fuse[..], fuse_fds) {
                return Err(inherited.refuse(&format!("the FUSE session: {e}")));
            }
            marks.mark("session loaded");
            let relay = inherited.adopt(handler, session, marks)?;
            // The socket and pid file are ours now: removed when we exit.
            crate::sandbox::took_over();
            if let Err(e) = up.launcher.cleanup(true) {
                log::warn!("the launcher: {e}: the socket and pid file may stay behind");
            }
            up.claim_pid_file();
            if let Some(n) = &up.handed.notifier {
                n.send(&format!(
                    "MAINPID={}\nREADY=1\nSTATUS=serving the guest",
                    up.host_pid
                ));
            }
            if let Some((pid, nonce)) = requester {
                up.launcher
                    .report(pid, nonce, &format!("ok {}", up.host_pid));
            }
            relay
        }
        None => {
            let frontend = frontend.ok_or("vhost-user: no frontend connection")?;
            Relay::new(frontend, handler, DeviceSetup::default())
                .map_err(|e| format!("relay: {e}"))?
        }
    };
    // Once the backend knows its vrings, the record lets go of its copies of the device's
    // fds (a hand-over fills them in again from the backend's).
    let setup = relay.setup();
    backend.on_vrings_known(move || match setup.try_lock() {
        Ok(mut s) => {
            s.forget_fds();
            true
        }
        Err(std::sync::TryLockError::Poisoned(p)) => {
            p.into_inner().forget_fds();
            true
        }
        // Paused for a hand-over (or recording a message): at a later kick.
        Err(std::sync::TryLockError::WouldBlock) => false,
    });
    up.serving(Some(Connection {
        relay: Arc::clone(&relay),
        backend,
        server,
    }));
    Ok(relay)
}
