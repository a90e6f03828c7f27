//! The backend's vring: vhost-user-backend's `VringRwLock`, whose stop waits for the chains
//! taken from it.
//!
//! vhost-user-backend 0.22 answers GET_VRING_BASE with the next available index read right
//! after `set_queue_ready(false)`, and does not wait for requests in flight (0.24 adds
//! `stop_vring`). A chain popped before and completed after would have its used entry dropped
//! while the base the frontend takes to a migration's destination already counts it consumed:
//! the guest would wait for that request forever. [`Vring`]'s `set_queue_ready(false)` returns
//! only once every chain taken from the ring is served, its used entry in the ring and the guest
//! notified, or after [`STOP_TIMEOUT`] (logged): the base read after it is then right.
//!
//! In flight means taken and not yet completed: a chain counts in its queue's
//! `QueueGauges::serving` from under the vring lock it is popped under until its used entry is in
//! and the guest notified, under the next acquisition of that lock (`drain`). [`wait_served`]
//! waits for that count to reach 0: it is the one wait of a GET_VRING_BASE (one queue),
//! `VhostFsBackend::pause` (every queue, in-place upgrade) and a DEVICE_STATE save (every queue).
//!
//! The vring also keeps the used index of the queue's last EVENT_IDX check ([`Checked`], see
//! `used_ring`), forgotten, under the vring lock, by every setter that moves the used index.

use std::fs::File;
use std::io;
use std::ops::Range;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, Instant};

use vhost_user_backend::{VringRwLock, VringStateGuard, VringStateMutGuard, VringT};
use virtio_queue::{Error as VirtQueError, QueueT};
use vm_memory::GuestMemoryAtomic;

use super::used_ring::Checked;
use super::{GuestMemory, VringState};
use crate::metrics::QueueGauges;

type Mem = GuestMemoryAtomic<GuestMemory>;

/// How long GET_VRING_BASE waits for the requests still running on its queue. QEMU's main loop
/// waits for the answer: a request that blocks for good (a FIFO no one opens) must not hang
/// the VM stop; its reply is then lost, and logged.
pub(super) const STOP_TIMEOUT: Duration = Duration::from_secs(5);

/// How often [`wait_served`] looks.
const POLL: Duration = Duration::from_micros(100);

/// A vring: vhost-user-backend's, and what its stop needs (cheap to clone, like it).
#[derive(Clone)]
pub struct Vring {
    ring: VringRwLock<Mem>,
    stop: Arc<Stop>,
    checked: Arc<Checked>,
    /// The error eventfd the frontend set (SET_VRING_ERR), kept here: vhost-user-backend
    /// never uses it and has no getter, and an upgrade hands it over ([`Vring::fds`]).
    err: Arc<std::sync::Mutex<Option<File>>>,
}

#[derive(Default)]
struct Stop {
    /// Set while `set_queue_ready(false)` waits (set and cleared under the vring lock): the
    /// queue is no longer ready, so nothing is popped, but the chains taken before still put
    /// their used entries in the ring ([`Vring::takes_completions`]).
    stopping: AtomicBool,
    /// This vring's queue and the gauges that count its chains in flight, set when a queue
    /// thread first sees it ([`Vring::attach`]), before it pops anything: a vring without it has
    /// had no chain taken.
    queue: OnceLock<(Arc<QueueGauges>, usize)>,
}

impl Vring {
    /// Tells the vring it is queue `queue`, whose chains in flight `gauges` counts; once (by
    /// the queue's thread, before its first pop).
    pub(super) fn attach(&self, gauges: &Arc<QueueGauges>, queue: usize) {
        // Already attached: the same queue and gauges (one backend, one handler per connection).
        let _ = self.stop.queue.set((Arc::clone(gauges), queue));
    }

    /// Duplicates of the kick, call and err eventfds the frontend set (for an upgrade).
    pub(super) fn fds(&self) -> io::Result<[Option<OwnedFd>; 3]> {
        // SAFETY: each fd is borrowed from its owner (the vring state, under its lock, or our
        // err file, under its lock) only for the duplication, while that owner holds it.
        let dup = |fd: Option<RawFd>| {
            fd.map(|fd| unsafe { BorrowedFd::borrow_raw(fd) }.try_clone_to_owned())
                .transpose()
        };
        let state = self.ring.get_ref();
        let err = crate::sync::lock(&self.err);
        Ok([
            dup(state.get_kick().as_ref().map(AsRawFd::as_raw_fd))?,
            dup(state.get_call().as_ref().map(AsRawFd::as_raw_fd))?,
            dup(err.as_ref().map(AsRawFd::as_raw_fd))?,
        ])
    }

    /// The used index of the queue's last notification check (under the vring lock).
    pub(super) fn checked(&self) -> &Checked {
        &self.checked
    }

    /// Whether a chain served now may put its used entry in the ring (call under the vring
    /// lock): while the queue is ready, or while a stop waits for it. A chain completed after
    /// the stop (one that ran past [`STOP_TIMEOUT`]) is dropped: the ring may already be
    /// someone else's memory.
    pub(super) fn takes_completions(&self, state: &VringState) -> bool {
        state.get_queue().ready() || self.stop.stopping.load(Ordering::Relaxed)
    }

    /// `set_queue_ready(false)`: GET_VRING_BASE (or the upgrade's own stop).
    fn stop(&self) {
        let was_ready = {
            let mut state = self.ring.get_mut();
            let ready = state.get_queue().ready();
            state.get_queue_mut().set_ready(false);
            self.stop.stopping.store(true, Ordering::Relaxed);
            ready
        };
        if let Some((gauges, queue)) = self.stop.queue.get() {
            if let Err(e) = wait_served(gauges, *queue..*queue + 1, STOP_TIMEOUT) {
                log::error!("queue {queue} stopped (GET_VRING_BASE) with {e}: replies lost");
            }
        }
        let state = self.ring.get_mut();
        self.stop.stopping.store(false, Ordering::Relaxed);
        // Completions a stuck request's thread held back for a batched notification are
        // notified with the others (a spurious interrupt is harmless).
        if was_ready {
            if let Err(e) = state.signal_used_queue() {
                log::debug!("cannot notify the guest at GET_VRING_BASE: {e}");
            }
        }
    }
}

/// Waits until no chain taken from the queues in `queues` is in flight (served, its used entry
/// in the ring, the guest notified), up to `timeout`.
pub(super) fn wait_served(
    gauges: &QueueGauges,
    queues: Range<usize>,
    timeout: Duration,
) -> io::Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        let running: u64 = queues.clone().map(|q| gauges.in_flight(q)).sum();
        if running == 0 {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("{running} request(s) still running after {timeout:?}"),
            ));
        }
        std::thread::sleep(POLL);
    }
}

impl<'a> VringStateGuard<'a, Mem> for Vring {
    type G = RwLockReadGuard<'a, VringState>;
}

impl<'a> VringStateMutGuard<'a, Mem> for Vring {
    type G = RwLockWriteGuard<'a, VringState>;
}

/// Everything but `set_queue_ready(false)` and the setters that move the used index is
/// vhost-user-backend's own.
impl VringT<Mem> for Vring {
    fn new(mem: Mem, max_queue_size: u16) -> Result<Self, VirtQueError> {
        Ok(Vring {
            ring: VringRwLock::new(mem, max_queue_size)?,
            stop: Arc::default(),
            checked: Arc::new(Checked::new()),
            err: Arc::default(),
        })
    }

    fn get_ref(&self) -> RwLockReadGuard<'_, VringState> {
        self.ring.get_ref()
    }

    fn get_mut(&self) -> RwLockWriteGuard<'_, VringState> {
        self.ring.get_mut()
    }

    fn add_used(&self, desc_index: u16, len: u32) -> Result<(), VirtQueError> {
        self.ring.add_used(desc_index, len)
    }

    fn signal_used_queue(&self) -> io::Result<()> {
        self.ring.signal_used_queue()
    }

    fn enable_notification(&self) -> Result<bool, VirtQueError> {
        self.ring.enable_notification()
    }

    fn disable_notification(&self) -> Result<(), VirtQueError> {
        self.ring.disable_notification()
    }

    fn needs_notification(&self) -> Result<bool, VirtQueError> {
        self.ring.needs_notification()
    }

    fn set_enabled(&self, enabled: bool) {
        self.ring.set_enabled(enabled)
    }

    fn set_queue_info(&self, desc: u64, avail: u64, used: u64) -> Result<(), VirtQueError> {
        self.ring.set_queue_info(desc, avail, used)
    }

    fn queue_next_avail(&self) -> u16 {
        self.ring.queue_next_avail()
    }

    fn set_queue_next_avail(&self, base: u16) {
        self.ring.set_queue_next_avail(base)
    }

    /// SET_VRING_ADDR sets the used index from the ring: the last notification check is
    /// forgotten with it, under the same lock.
    fn set_queue_next_used(&self, idx: u16) {
        let mut state = self.ring.get_mut();
        state.get_queue_mut().set_next_used(idx);
        self.checked.forget();
    }

    fn queue_used_idx(&self) -> Result<u16, VirtQueError> {
        self.ring.queue_used_idx()
    }

    fn set_queue_size(&self, num: u16) {
        self.ring.set_queue_size(num)
    }

    fn set_queue_event_idx(&self, enabled: bool) {
        self.ring.set_queue_event_idx(enabled)
    }

    /// Stopping waits for the chains taken (see the module doc).
    fn set_queue_ready(&self, ready: bool) {
        if ready {
            self.ring.set_queue_ready(true);
        } else {
            self.stop();
        }
    }

    /// The kick is made non-blocking: the worker and the queue's thread may both read it
    /// (`kick`).
    fn set_kick(&self, file: Option<File>) {
        if let Some(Err(e)) = file.as_ref().map(super::kick::non_blocking) {
            log::warn!("a kick eventfd stays blocking: {e}");
        }
        self.ring.set_kick(file)
    }

    /// A kick whose count another reader took (the queue's thread) reads as a kick.
    fn read_kick(&self) -> io::Result<bool> {
        match self.ring.read_kick() {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(self.ring.get_ref().is_enabled()),
            done => done,
        }
    }

    fn set_call(&self, file: Option<File>) {
        self.ring.set_call(file)
    }

    fn set_err(&self, file: Option<File>) {
        *crate::sync::lock(&self.err) = file;
    }
}
