//! The vhost-user device: virtio-fs queues served by vhost-user-backend.
//!
//! Queue 0 is the high-priority queue (FORGET, INTERRUPT), queues 1..=N are request queues; the
//! frontend picks how many it uses (up to [`MAX_REQUEST_QUEUES`]) with the MQ protocol feature.
//! Threads (issue 36: a queue the guest does not use costs no thread and no fd): one
//! vhost-user-backend worker thread (its epoll loop) watches the kicks of every queue and serves
//! the high-priority queue itself (FORGET and INTERRUPT, short). A kick of request queue `q`
//! wakes `q`'s own queue thread, an [`OnDemand`] thread started by the queue's first kick and
//! ended after [`QUEUE_LINGER`] without one; that thread pops a chain, hands it to the
//! [`FuseServer`], puts the reply length in the used ring and notifies the guest (with
//! EVENT_IDX, only when the guest asked to be notified), until the ring is empty. While it
//! exists, the thread takes its queue's kick out of the worker's epoll and waits on it itself
//! ([`kick`]): one wake-up per kick, as with a worker of its own. With `--thread-pool-size N`,
//! pool threads join a queue thread whose queue has a backlog and drain it alongside: one per
//! CPU at most, or up to N while its requests wait for the host filesystem (`drain`).
//!
//! Locks: the vring's own lock is taken only to add the last request's used entry and pop the
//! next chain (both under one acquisition), never while a request runs, so the frontend thread
//! is never blocked by I/O. A popped chain counts as in flight (`QueueGauges::serving`) from
//! under that lock until its used entry is in and the guest notified, under the next; stopping a
//! ring (GET_VRING_BASE), pausing the queues and saving the state wait for that count ([`vring`]).
//!
//! Migration (VHOST_USER_PROTOCOL_F_DEVICE_STATE): SET_DEVICE_STATE_FD starts a thread that
//! saves the FUSE session into the pipe QEMU gave (once no request is in flight: the queues are
//! stopped by then) or loads it from the pipe to EOF; CHECK_DEVICE_STATE waits for that thread
//! and reports its result. This module only moves the bytes (`fuse_server::migration`).

use std::fs::File;
use std::io;
use std::os::fd::{FromRawFd, IntoRawFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::thread::JoinHandle;

use vhost::vhost_user::message::{
    VhostTransferStateDirection, VhostTransferStatePhase, VhostUserProtocolFeatures,
    VhostUserVirtioFeatures,
};
use vhost_user_backend::{VhostUserBackend, VhostUserDaemon};
use virtio_bindings::virtio_config::VIRTIO_F_VERSION_1;
use virtio_bindings::virtio_ring::{VIRTIO_RING_F_EVENT_IDX, VIRTIO_RING_F_INDIRECT_DESC};
use vm_memory::GuestMemory as _;
use vm_memory::{ByteValued, GuestAddressSpace, GuestMemoryAtomic, GuestMemoryMmap, MmapRegion};
use vmm_sys_util::epoll::EventSet;
use vmm_sys_util::event::{EventConsumer, EventNotifier};
use vmm_sys_util::eventfd::EventFd;

use crate::fuse_server::FuseServer;
use crate::metrics::QueueGauges;
use crate::on_demand::OnDemand;
use crate::stall_watch::StallWatch;
use crate::worker_pool::WorkerPool;

mod busy_queues;
mod device_fds;
mod device_state;
mod dirty_log;
mod drain;
mod kick;
mod linger;
mod memory;
mod pause;
mod ring;
mod used_ring;
mod vring;

use vring::Vring;

pub use device_fds::DeviceFds;

use dirty_log::DirtyLog;

/// Guest memory as the backend maps it: every write to it is logged while the frontend has set a
/// dirty-page log (live migration; see [`dirty_log`]).
pub type GuestMemory = GuestMemoryMmap<DirtyLog>;
type VringState = vhost_user_backend::VringState<GuestMemoryAtomic<GuestMemory>>;

/// Request queues offered to the frontend (plus the high-priority queue).
pub const MAX_REQUEST_QUEUES: usize = 8;
/// Largest queue the frontend may configure.
pub const MAX_QUEUE_SIZE: usize = 1024;

/// How long a request queue's thread waits for the next kick before it ends (the next kick
/// then starts a new one): long enough that a guest's bursts seconds apart keep their thread,
/// short enough that an idle daemon holds none a few seconds after its last request.
pub const QUEUE_LINGER: std::time::Duration = std::time::Duration::from_secs(1);

/// `struct virtio_fs_config` (virtio spec 5.11.4).
#[repr(C, packed)]
#[derive(Clone, Copy)]
struct VirtioFsConfig {
    tag: [u8; 36],
    num_request_queues: u32,
}
// SAFETY: plain bytes, no padding (packed).
unsafe impl ByteValued for VirtioFsConfig {}

/// The virtio-fs backend; cheap to clone (vhost-user-backend wants `Clone`).
#[derive(Clone)]
pub struct VhostFsBackend {
    inner: Arc<Inner>,
}

struct Inner {
    server: Arc<FuseServer>,
    /// `Some` with `--thread-pool-size N > 0`: its threads help drain queues with a backlog.
    pool: Option<WorkerPool>,
    /// Pool threads draining a queue right now (at most the pool's size; at most one per CPU
    /// recruited for work on a CPU).
    helpers: AtomicUsize,
    /// The guest memory map the queue threads use: the last one the frontend sent that passed
    /// the checks (see `update_memory`). Every guest memory access of a queue thread goes
    /// through it, never through the vring's own view of the memory.
    mem: RwLock<Option<GuestMemoryAtomic<GuestMemory>>>,
    event_idx: AtomicBool,
    tag: Option<[u8; 36]>,
    /// Each queue's vring, as the worker first saw it kicked (for the queue threads and the
    /// stall watcher's rescues).
    vrings: Vec<OnceLock<Vring>>,
    /// Each request queue's thread, created at its first kick (index 0, the high-priority
    /// queue, is served by the worker itself and has none).
    queue_threads: Vec<OnceLock<Arc<OnDemand>>>,
    /// Every vring, from the worker's first event on ([`device_fds`]).
    all_vrings: OnceLock<Vec<Vring>>,
    /// What runs once the vrings are known (an upgrade record letting go of its fds), and
    /// whether it is still to run.
    vrings_known: Mutex<Option<device_fds::VringsKnown>>,
    hook_armed: AtomicBool,
    /// Queue threads stuck in one request get help (see [`VhostFsBackend::rescue`]).
    watch: Arc<StallWatch>,
    /// Requests in flight and chains waiting, per queue (for the metrics, and to know when a
    /// state can be saved).
    gauges: Arc<QueueGauges>,
    /// Per queue: its last kick failed (a broken ring, no memory table), which was logged.
    broken: Vec<AtomicBool>,
    /// The state transfer SET_DEVICE_STATE_FD started, until CHECK_DEVICE_STATE collects it.
    transfer: Mutex<Option<JoinHandle<io::Result<()>>>>,
    /// Set by [`VhostFsBackend::pause`]: no thread pops a chain while it is.
    paused: AtomicBool,
    /// Which threads drain a queue, and whether one lingers after its drain.
    lingering: linger::Lingering,
    /// Which queues are busy (a backlog's helper on the CPUs comes only while fewer are).
    busy_queues: busy_queues::BusyQueues,
    /// The worker whose epoll watches the kicks no queue thread holds ([`kick`]).
    worker: OnceLock<std::sync::Weak<kick::Worker>>,
}

impl VhostFsBackend {
    /// `tag`: the mount tag to expose in the device config (`--tag`), at most 36 bytes;
    /// `pool_size`: threads of the worker pool (0: each queue thread serves its own requests).
    pub fn new(
        server: Arc<FuseServer>,
        tag: Option<&str>,
        pool_size: usize,
    ) -> io::Result<VhostFsBackend> {
        let tag = match tag {
            None => None,
            Some(t) if t.is_empty() || t.len() > 36 => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("--tag must be 1 to 36 bytes long, not {}", t.len()),
                ))
            }
            Some(t) => {
                let mut b = [0u8; 36];
                b[..t.len()].copy_from_slice(t.as_bytes());
                Some(b)
            }
        };
        let queues = 1 + MAX_REQUEST_QUEUES;
        let inner = Arc::new(Inner {
            server,
            pool: if pool_size > 0 {
                Some(WorkerPool::new(pool_size)?)
            } else {
                None
            },
            helpers: AtomicUsize::new(0),
            mem: RwLock::new(None),
            event_idx: AtomicBool::new(false),
            tag,
            vrings: (0..queues).map(|_| OnceLock::new()).collect(),
            queue_threads: (0..queues).map(|_| OnceLock::new()).collect(),
            all_vrings: OnceLock::new(),
            vrings_known: Mutex::new(None),
            hook_armed: AtomicBool::new(false),
            watch: StallWatch::new(queues),
            gauges: Arc::new(QueueGauges::new(queues)),
            broken: (0..queues).map(|_| AtomicBool::new(false)).collect(),
            transfer: Mutex::new(None),
            paused: AtomicBool::new(false),
            lingering: linger::Lingering::default(),
            busy_queues: busy_queues::BusyQueues::new(queues),
            worker: OnceLock::new(),
        });
        let weak = Arc::downgrade(&inner);
        inner.watch.start(move |queue| {
            if let Some(inner) = weak.upgrade() {
                VhostFsBackend { inner }.rescue(queue);
            }
        })?;
        Ok(VhostFsBackend { inner })
    }

    /// Ends the connection this backend served, once `daemon.wait()` has returned: drops the
    /// daemon (which joins its worker), stops the queue threads and waits for the pool threads
    /// still draining its queues. When this returns no
    /// request of the connection runs any more (the FUSE session may end), and none of its
    /// threads or fds is left.
    pub fn finish(self, daemon: VhostUserDaemon<VhostFsBackend>) {
        drop(daemon);
        // The queue threads end after their current drain (no kick can wake them any more).
        for t in self.inner.queue_threads.iter().filter_map(OnceLock::get) {
            t.stop();
        }
        // What still refers to the backend: pool jobs finishing their drain (the handler, its
        // worker and its epoll are gone with the daemon).
        while Arc::strong_count(&self.inner) > 1 {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    /// Requests in flight and queue depth, per queue (0: high priority, 1..: requests).
    pub fn queue_gauges(&self) -> Arc<QueueGauges> {
        Arc::clone(&self.inner.gauges)
    }

    /// The guest memory map, once the frontend sent it.
    fn memory(&self) -> Option<GuestMemoryAtomic<GuestMemory>> {
        crate::sync::read(&self.inner.mem).clone()
    }

    /// Request queue `queue`'s thread: a wake drains the queue, and the thread goes on serving
    /// at each kick, which it watches itself ([`kick`]), until [`QUEUE_LINGER`] without one.
    /// It holds the backend only while it runs, so a finished connection's backend is not kept
    /// alive by it.
    fn queue_thread(&self, queue: usize) -> Arc<OnDemand> {
        let weak = Arc::downgrade(&self.inner);
        OnDemand::with_end(
            format!("vhostfs-queue-{queue}"),
            // The job lingers on the kick itself.
            std::time::Duration::ZERO,
            move || {
                if let Some(inner) = weak.upgrade() {
                    VhostFsBackend { inner }.serve_kicked(queue);
                }
            },
            give_back_free_memory,
        )
    }

    /// Serves every chain available on queue `queue` (kicked at least once: its vring is
    /// known). A failed kick must not end the queue's thread or the worker (see
    /// `ring::report`).
    fn serve_queue(&self, queue: usize) -> io::Result<()> {
        let Some(vring) = self.inner.vrings[queue].get() else {
            return Ok(());
        };
        let served = self.process_queue(queue, vring);
        ring::report(&self.inner.broken[queue], queue, served)
    }
}

impl VhostUserBackend for VhostFsBackend {
    type Bitmap = DirtyLog;
    type Vring = Vring;

    fn num_queues(&self) -> usize {
        1 + MAX_REQUEST_QUEUES
    }

    fn max_queue_size(&self) -> usize {
        MAX_QUEUE_SIZE
    }

    fn features(&self) -> u64 {
        1 << VIRTIO_F_VERSION_1
            | 1 << VIRTIO_RING_F_INDIRECT_DESC
            | 1 << VIRTIO_RING_F_EVENT_IDX
            | VhostUserVirtioFeatures::PROTOCOL_FEATURES.bits()
            | VhostUserVirtioFeatures::LOG_ALL.bits()
    }

    /// Without `VHOST_F_LOG_ALL` no migration runs (any more): stop logging writes into a
    /// dirty-page log the frontend has given up.
    fn acked_features(&self, features: u64) {
        if features & VhostUserVirtioFeatures::LOG_ALL.bits() == 0 {
            if let Some(mem) = self.memory() {
                mem.memory()
                    .iter()
                    .for_each(|r| MmapRegion::bitmap(r).stop());
            }
        }
    }

    /// No BACKEND_REQ: vhostfs sends the frontend no requests (no DAX window), and offering it
    /// without keeping the channel QEMU hands over (SET_BACKEND_REQ_FD) closes that channel at
    /// once, which QEMU reports as "Unexpected end-of-file before all data were read" in every
    /// domain log (tests/e2e/libvirt.sh checks there is none).
    /// LOG_SHMFD: dirty-page logging for live migration.
    fn protocol_features(&self) -> VhostUserProtocolFeatures {
        let mut f = VhostUserProtocolFeatures::MQ
            | VhostUserProtocolFeatures::REPLY_ACK
            | VhostUserProtocolFeatures::CONFIGURE_MEM_SLOTS
            | VhostUserProtocolFeatures::LOG_SHMFD
            | VhostUserProtocolFeatures::DEVICE_STATE;
        if self.inner.tag.is_some() {
            f |= VhostUserProtocolFeatures::CONFIG;
        }
        f
    }

    /// Starts saving or loading the FUSE session through `file` on a thread (QEMU reads or
    /// writes the pipe while this returns); CHECK_DEVICE_STATE collects the result.
    fn set_device_state_fd(
        &self,
        direction: VhostTransferStateDirection,
        phase: VhostTransferStatePhase,
        file: File,
    ) -> io::Result<Option<File>> {
        self.start_transfer(direction, phase, file).map(|()| None)
    }

    fn check_device_state(&self) -> io::Result<()> {
        self.transfer_result()
    }

    fn set_event_idx(&self, enabled: bool) {
        self.inner.event_idx.store(enabled, Ordering::Relaxed);
    }

    fn get_config(&self, offset: u32, size: u32) -> Vec<u8> {
        let Some(tag) = self.inner.tag else {
            return Vec::new();
        };
        let cfg = VirtioFsConfig {
            tag,
            num_request_queues: (MAX_REQUEST_QUEUES as u32).to_le(),
        };
        let bytes = cfg.as_slice();
        let start = (offset as usize).min(bytes.len());
        let end = start.saturating_add(size as usize).min(bytes.len());
        bytes[start..end].to_vec()
    }

    /// The queue threads see a map only once it is checked (see [`memory`]): they read guest
    /// memory through the backend's own atomic, never the handler's, which already holds the
    /// new map when this is called. A refused map is also taken back out of the handler's.
    fn update_memory(&self, mem: GuestMemoryAtomic<GuestMemory>) -> io::Result<()> {
        let checked = memory::checked(&mem);
        *crate::sync::write(&self.inner.mem) = checked.as_ref().ok().cloned();
        checked.map(drop)
    }

    /// One worker thread for every queue: it serves the high-priority queue and wakes the
    /// request queues' own threads (see the module doc).
    fn queues_per_thread(&self) -> Vec<u64> {
        vec![(1u64 << self.num_queues()) - 1]
    }

    /// One eventfd for both sides: vhost-user-backend 0.22 registers the consumer with the
    /// worker's epoll through `into_raw_fd` and never closes it, and closes the notifier when
    /// the worker's handler is dropped (with the daemon, after the worker ended): one fd, closed
    /// once, instead of a pair of which one leaked.
    fn exit_event(&self, _thread_index: usize) -> Option<(EventConsumer, EventNotifier)> {
        let fd = EventFd::new(libc::EFD_NONBLOCK | libc::EFD_CLOEXEC)
            .ok()?
            .into_raw_fd();
        // SAFETY: `fd` is a new eventfd owned by nothing else. The consumer only lends it to
        // vhost-user-backend, which takes it out with `into_raw_fd` (it never closes or uses it
        // but in its epoll, which goes with the handler); the notifier alone closes it.
        let consumer = unsafe { EventConsumer::from_raw_fd(fd) };
        // SAFETY: as above: the one owner that closes `fd`.
        let notifier = unsafe { EventNotifier::from_raw_fd(fd) };
        Some((consumer, notifier))
    }

    fn handle_event(
        &self,
        device_event: u16,
        evset: EventSet,
        vrings: &[Vring],
        thread: usize,
    ) -> io::Result<()> {
        if evset != EventSet::IN {
            return Err(io::Error::other(format!("unexpected event set {evset:?}")));
        }
        // The one worker has every queue: the event is the queue's index, or a kick a queue
        // thread gave back ([`kick`]), which vhost-user-backend has not read.
        let given_back = u64::from(device_event) >= kick::KICK_BASE;
        let queue = match given_back {
            true => (u64::from(device_event) - kick::KICK_BASE) as usize,
            false => device_event as usize,
        };
        let (Some(vring), 0) = (vrings.get(queue), thread) else {
            return Err(io::Error::other(format!(
                "unexpected queue event {device_event} on worker {thread}"
            )));
        };
        if given_back && !vhost_user_backend::VringT::read_kick(vring)? {
            return Ok(());
        }
        self.saw_vrings(vrings);
        self.inner.vrings[queue].get_or_init(|| {
            vring.attach(&self.inner.gauges, queue);
            vring.clone()
        });
        if queue == 0 {
            return self.serve_queue(queue);
        }
        let woke = self.inner.queue_threads[queue]
            .get_or_init(|| self.queue_thread(queue))
            .wake();
        match woke {
            Ok(_) => Ok(()),
            Err(e) => {
                // No thread for the queue (the host's thread limit): served here, this once.
                log::warn!("queue {queue}: cannot start its thread ({e}): served by the worker");
                self.serve_queue(queue)
            }
        }
    }
}

/// Gives the allocator's free memory back to the host (every arena's), as a queue goes idle:
/// what the requests of a busy spell left free (a thread's arena, freed buffers) is no part of
/// an idle daemon's footprint (issue 36).
fn give_back_free_memory() {
    // SAFETY: malloc_trim takes an integer and only releases free memory of the allocator.
    unsafe { libc::malloc_trim(0) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_layout() {
        assert_eq!(std::mem::size_of::<VirtioFsConfig>(), 40);
    }
}
