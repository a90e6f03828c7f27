//! A request queue's thread takes its queue's kicks from the worker while it exists (issue 36).
//!
//! The one vhost-user-backend worker watches every queue's kick eventfd and wakes the queue's
//! thread: two wake-ups per kick (the worker's, then the thread's), which cost 8–13 % of the
//! rate of the 4-queue rows of the test-guest benchmark (docs/benchmarks.md, issue 36). So a
//! queue thread, once started, takes its kick eventfd out of the worker's epoll and waits on it
//! itself, for up to [`QUEUE_LINGER`] after its last drain; then it gives the kick back and
//! ends: one wake-up per kick while the queue is busy, no thread while it is idle.
//!
//! Invariants:
//! - A kick is always watched, by the worker or by the thread: the thread takes it out of the
//!   worker's epoll only once it holds a duplicate it polls, and puts it back before it stops
//!   polling. A kick that comes in between is counted by the eventfd, and an fd added to an
//!   epoll is reported at once if readable (level-triggered): the worker then wakes the queue's
//!   thread again.
//! - Taking and giving back run under the vring's lock, as vhost-user-backend's own
//!   (un)registrations do (SET_VRING_KICK, SET_VRING_ENABLE, GET_VRING_BASE); a kick is given
//!   back only to a ring that is ready and enabled (vhost-user-backend's condition). Its
//!   unregistration ignores a kick the thread holds (ENOENT), its registration one given back
//!   (EEXIST).
//! - A kick given back is registered under [`KICK_BASE`] + its queue (vhost-user-backend keeps
//!   the queue indices for itself): `handle_event` reads such a kick itself.
//! - Kick eventfds are non-blocking (made so when the frontend sets one, [`non_blocking`]):
//!   a read that finds the count taken by the other side returns at once, never blocks the
//!   worker.
//! - A thread consumes a kick only while its ring runs with the kick it took (checked under
//!   the vring's lock): after GET_VRING_BASE the same eventfd may be another process's (a
//!   migration's destination on this host, an upgrade's new process).

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use vhost_user_backend::{VringEpollHandler, VringT};
use virtio_queue::QueueT;
use vmm_sys_util::epoll::EventSet;

use super::{VhostFsBackend, MAX_REQUEST_QUEUES, QUEUE_LINGER};

/// The epoll data of a kick given back by a queue's thread: this plus the queue's index (above
/// the queues' own and the exit event's, which vhost-user-backend keeps).
pub(super) const KICK_BASE: u64 = 2 + MAX_REQUEST_QUEUES as u64;

/// How often a thread waiting on its kick looks whether it must end (the connection ends).
const STOP_CHECK: Duration = Duration::from_millis(50);

/// The worker's epoll, as the queue threads reach it.
pub(super) type Worker = VringEpollHandler<VhostFsBackend>;

impl VhostFsBackend {
    /// The worker whose epoll watches the kicks (once the connection's daemon exists). Held
    /// weakly: the worker holds the backend.
    pub fn watch_kicks_in(&self, worker: &Arc<Worker>) {
        let _ = self.inner.worker.set(Arc::downgrade(worker));
    }

    /// The job of request queue `queue`'s thread: serves the queue at each kick, watching the
    /// kick itself, until [`QUEUE_LINGER`] passes without one, its ring stops or the
    /// connection ends.
    pub(super) fn serve_kicked(&self, queue: usize) {
        let kick = self.take_kick(queue);
        loop {
            let _ = self.serve_queue(queue);
            let Some((k, fd)) = &kick else { break };
            if self.wait_kick(queue, k.as_fd(), *fd) {
                continue;
            }
            if self.give_kick_back(queue) || self.queue_thread_stopped(queue) {
                break;
            }
        }
    }

    /// Waits up to [`QUEUE_LINGER`] for a kick on `kick` (a duplicate of the ring's kick
    /// `fd`) and consumes it: whether one came. Not once the thread must end, the ring has
    /// stopped or has another kick: a kick then is the ring's next owner's (another process
    /// may be given the same eventfd: a migration's destination, an upgrade's new process),
    /// and is left to it.
    fn wait_kick(&self, queue: usize, kick: BorrowedFd, fd: RawFd) -> bool {
        let Some(vring) = self.inner.vrings[queue].get() else {
            return false;
        };
        let end = Instant::now() + QUEUE_LINGER;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() || self.queue_thread_stopped(queue) {
                return false;
            }
            let mut pfd = libc::pollfd {
                fd: kick.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            let ms = left.min(STOP_CHECK).as_millis().max(1) as libc::c_int;
            // SAFETY: one valid pollfd, for the duration of the call.
            if unsafe { libc::poll(&mut pfd, 1, ms) } <= 0 {
                continue;
            }
            // Under the vring's lock: stopping the ring (GET_VRING_BASE) takes it to write.
            let state = vring.get_ref();
            let ours = state.get_kick().as_ref().map(AsRawFd::as_raw_fd) == Some(fd)
                && state.get_queue().ready();
            if ours {
                consume(kick);
            }
            return ours;
        }
    }

    fn queue_thread_stopped(&self, queue: usize) -> bool {
        match self.inner.queue_threads[queue].get() {
            Some(t) => t.is_stopped(),
            None => true,
        }
    }

    /// Takes queue `queue`'s kick out of the worker's epoll: a duplicate to wait on and the
    /// kick's own fd, or `None` (no worker, no kick: the worker keeps watching it, if any).
    fn take_kick(&self, queue: usize) -> Option<(OwnedFd, RawFd)> {
        let worker = self.inner.worker.get().and_then(Weak::upgrade)?;
        let vring = self.inner.vrings[queue].get()?;
        let state = vring.get_ref();
        let fd = state.get_kick().as_ref()?.as_raw_fd();
        // SAFETY: the kick is open while the vring state holds it, and we hold its lock.
        let dup = unsafe { BorrowedFd::borrow_raw(fd) }
            .try_clone_to_owned()
            .ok()?;
        // ENOENT: not in the epoll (its ring stopped meanwhile, or a previous thread's is
        // still out); the thread watches the kick all the same.
        let _ = worker.unregister_listener(fd, EventSet::IN, KICK_BASE + queue as u64);
        Some((dup, fd))
    }

    /// Gives queue `queue`'s kick back to the worker's epoll if its ring runs; whether the
    /// thread may end (false: the kick could not be given back, the thread keeps it).
    fn give_kick_back(&self, queue: usize) -> bool {
        let Some(worker) = self.inner.worker.get().and_then(Weak::upgrade) else {
            return true;
        };
        let Some(vring) = self.inner.vrings[queue].get() else {
            return true;
        };
        let state = vring.get_ref();
        let Some(kick) = state.get_kick() else {
            return true;
        };
        if !(state.get_queue().ready() && state.is_enabled()) {
            return true;
        }
        match worker.register_listener(kick.as_raw_fd(), EventSet::IN, KICK_BASE + queue as u64) {
            Ok(()) => true,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => true,
            Err(e) => {
                log::error!("queue {queue}: cannot give its kick back to the worker ({e}): its thread keeps watching it");
                false
            }
        }
    }
}

/// Reads an eventfd's count (none if another reader took it: the fd is non-blocking).
fn consume(fd: BorrowedFd) {
    let mut count = [0u8; 8];
    // SAFETY: an 8-byte read into our buffer from an fd we borrow for the call.
    unsafe { libc::read(fd.as_raw_fd(), count.as_mut_ptr().cast(), count.len()) };
}

/// Makes the kick eventfd the frontend set non-blocking (see the module doc).
pub(super) fn non_blocking(file: &File) -> io::Result<()> {
    // SAFETY: fcntl on an fd we hold, reading its status flags.
    let flags = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GETFL) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fcntl on an fd we hold, setting its status flags.
    if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
