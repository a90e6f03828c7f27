//! The relay between the frontend's connection and the in-process vhost-user-backend handler.
//!
//! vhost-user-backend 0.22 learns memory, vrings and features only from messages on its own
//! endpoint and cannot adopt a connection another process set up. So the handler is given one
//! end of a private connection, and this relay forwards every message between the frontend's
//! connection and the other end, recording in a [`DeviceSetup`] what each frontend message
//! sets. The data path (guest memory, kick and call eventfds) never passes here: only the
//! control messages of set-up, VM stop/start and reset, each forwarded as it came, with its fds.
//!
//! The relay runs on the thread that serves the connection ([`Relay::serve`]: the main thread,
//! which also takes the daemon's signals meanwhile), not a thread of its own.
//!
//! Invariants:
//! - One thread forwards both ways and handles one message at a time, so the model and the
//!   handler see the frontend's messages in the same order.
//! - [`Relay::pause`] returns only between messages, once the handler answered everything it
//!   was sent (a GET_FEATURES probe, whose reply comes after all earlier ones, is its marker):
//!   while paused the frontend's connection is not read, the handler's end belongs to the
//!   caller, and the model does not change.
//! - The frontend closing its connection (or its writing side) shuts down the writing side of
//!   the handler's peer: the handler answers what it was sent, then meets the end of its
//!   stream and ends as on a direct disconnect (or drops a bad message, as it would); the
//!   handler closing its end closes the frontend's.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex, MutexGuard};

use super::setup::DeviceSetup;
use super::wire::{self, req, Msg};
use crate::shutdown::{thread_id, wait_readable, wake, Signals};
use crate::sync::lock;

/// What the controller asks of a paused relay.
enum Command {
    Resume,
}

/// What the relaying thread takes: the commands it gets, the acknowledgements it sends.
type RelayingEnd = (Receiver<Command>, Sender<io::Result<()>>);

/// The relay of one connection.
pub struct Relay {
    setup: Arc<Mutex<DeviceSetup>>,
    frontend: Arc<UnixStream>,
    backend: Arc<UnixStream>,
    /// The thread that relays (the one that made the relay): [`Relay::pause`] wakes it.
    thread: libc::pid_t,
    /// Set by [`Relay::pause`] before it wakes the relaying thread: a SIGUSR2 from elsewhere
    /// pauses nothing.
    pause_asked: AtomicBool,
    requests: Mutex<(Sender<Command>, Receiver<io::Result<()>>)>,
    /// The relaying side of `requests`, taken by [`Relay::serve`].
    relaying: Mutex<Option<RelayingEnd>>,
    /// Why the relay refused a frontend message it could not read (too many fds, too large):
    /// the handler only sees the end of its stream, but the connection was dropped for it.
    broken: Mutex<Option<String>>,
}

/// A paused relay: the handler's end and the model are the caller's until [`Paused::resume`]
/// (or the process exits).
pub struct Paused<'a> {
    relay: &'a Relay,
    pub setup: MutexGuard<'a, DeviceSetup>,
}

impl Paused<'_> {
    /// The frontend's connection, to hand over.
    pub fn frontend(&self) -> BorrowedFd<'_> {
        self.relay.frontend.as_fd()
    }

    /// The handler's end, to send it messages while paused.
    pub fn backend(&self) -> &UnixStream {
        &self.relay.backend
    }

    /// Lets the relay forward again.
    pub fn resume(self) {
        let Paused { relay, setup } = self;
        drop(setup);
        let _ = lock(&relay.requests).0.send(Command::Resume);
    }
}

impl Relay {
    /// A relay between `frontend` and `backend` (the end whose peer the handler serves),
    /// recording into `setup` (empty for a new connection, replayed for an adopted one); it
    /// relays once [`Relay::serve`] runs.
    pub fn new(
        frontend: UnixStream,
        backend: UnixStream,
        setup: DeviceSetup,
    ) -> io::Result<Arc<Relay>> {
        let (cmd_tx, cmd_rx) = channel();
        let (ack_tx, ack_rx) = channel();
        Ok(Arc::new(Relay {
            setup: Arc::new(Mutex::new(setup)),
            frontend: Arc::new(frontend),
            backend: Arc::new(backend),
            thread: thread_id(),
            pause_asked: AtomicBool::new(false),
            requests: Mutex::new((cmd_tx, ack_rx)),
            relaying: Mutex::new(Some((cmd_rx, ack_tx))),
            broken: Mutex::new(None),
        }))
    }

    /// Relays on this thread until either side closes its end (then the other is closed too),
    /// handling `signals` meanwhile. Once only.
    pub fn serve(&self, signals: Option<&Signals>) {
        let Some((commands, acks)) = lock(&self.relaying).take() else {
            return;
        };
        if let Err(e) = self.run(&commands, &acks, signals) {
            log::debug!("vhost-user relay: {e}");
        }
        // Either side gone: the other goes too.
        let _ = self.frontend.shutdown(std::net::Shutdown::Both);
        let _ = self.backend.shutdown(std::net::Shutdown::Both);
        let _ = acks.send(Err(io::Error::other("the connection is closed")));
    }

    /// The record of the device's set-up.
    pub fn setup(&self) -> Arc<Mutex<DeviceSetup>> {
        Arc::clone(&self.setup)
    }

    /// Why the relay refused a message of the frontend (the connection then ended), if it did.
    pub fn broken(&self) -> Option<String> {
        lock(&self.broken).clone()
    }

    /// Stops forwarding between two messages, with everything sent to the handler answered.
    pub fn pause(&self) -> io::Result<Paused<'_>> {
        let requests = lock(&self.requests);
        self.pause_asked.store(true, Ordering::SeqCst);
        wake(self.thread)?;
        requests.1.recv().map_err(io::Error::other)??;
        drop(requests);
        Ok(Paused {
            relay: self,
            setup: lock(&self.setup),
        })
    }

    fn run(
        &self,
        commands: &Receiver<Command>,
        acks: &Sender<io::Result<()>>,
        signals: Option<&Signals>,
    ) -> io::Result<()> {
        let mut fds = [self.frontend.as_raw_fd(), self.backend.as_raw_fd()];
        // GET_FEATURES the frontend sent and the handler has not answered yet.
        let mut queries = 0u32;
        loop {
            let ready = wait_readable(&fds, signals, true)?;
            if ready[0] {
                let received = wire::recv(&self.frontend).inspect_err(|e| {
                    // A frontend gone mid-message is a disconnect, as for the handler.
                    if !matches!(
                        e.kind(),
                        io::ErrorKind::UnexpectedEof
                            | io::ErrorKind::ConnectionReset
                            | io::ErrorKind::BrokenPipe
                    ) {
                        *lock(&self.broken) = Some(e.to_string());
                    }
                })?;
                let Some(msg) = received else {
                    // The frontend is done sending (closed, or shut down its writing side): so
                    // is the handler's peer, which still answers what it was sent (and the
                    // frontend may still read). Ends when the handler closes its end.
                    self.backend.shutdown(std::net::Shutdown::Write)?;
                    fds[0] = -1;
                    continue;
                };
                lock(&self.setup).apply(&msg)?;
                queries += u32::from(msg.request == req::GET_FEATURES);
                wire::send(&self.backend, &msg)?;
            }
            if ready[1] {
                let Some(msg) = wire::recv(&self.backend)? else {
                    return Ok(());
                };
                if msg.request == req::GET_FEATURES {
                    queries = queries.saturating_sub(1);
                }
                wire::send(&self.frontend, &msg)?;
            }
            let woken = signals.is_some_and(Signals::take_wake);
            if woken && self.pause_asked.swap(false, Ordering::SeqCst) {
                self.drain_backend(&mut queries)?;
                let _ = acks.send(Ok(()));
                match commands.recv() {
                    Ok(Command::Resume) => {}
                    Err(_) => return Ok(()),
                }
            }
        }
    }

    /// Sends the handler a GET_FEATURES probe and forwards its messages to the frontend until
    /// the probe's reply, which comes after every reply to what it was sent before.
    fn drain_backend(&self, queries: &mut u32) -> io::Result<()> {
        wire::send(
            &self.backend,
            &Msg::new(req::GET_FEATURES, Vec::new(), Vec::new()),
        )?;
        loop {
            let Some(msg) = wire::recv(&self.backend)? else {
                return Err(io::Error::other("the vhost-user handler closed its end"));
            };
            if msg.request == req::GET_FEATURES {
                if *queries == 0 {
                    return Ok(());
                }
                *queries -= 1;
            }
            wire::send(&self.frontend, &msg)?;
        }
    }
}
