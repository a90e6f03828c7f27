//! Serving a queue: a queue thread (or a pool thread it recruited) pops chains, hands each to
//! the [`FuseServer`](crate::fuse_server::FuseServer), puts the reply length in the used ring and
//! notifies the guest, in batches; pool threads join a queue with a backlog; the stall watcher's
//! rescue of a queue thread stuck in one request.

use std::io;
use std::sync::atomic::Ordering;
use std::sync::OnceLock;

use vhost_user_backend::VringT;
use virtio_queue::QueueT;
use vm_memory::{GuestAddress, GuestAddressSpace, GuestMemoryAtomic};

use super::linger::LINGER_AFTER;
use super::ring::{add_used, notify, waiting};
use super::{GuestMemory, VhostFsBackend, Vring};
use crate::fuse_server::descriptors::{Table, Walk};
use crate::fuse_server::Request;
use crate::stall_watch::TICK;

/// Chains waiting behind the one just popped that make a queue thread ask a pool thread for
/// help. A helper costs CPU: a futex wake-up on both sides, and while two threads drain one ring,
/// contention on its lock, on the file's inode lock and on the kernel's fd table. A guest's
/// 1 MiB I/O (4 or so in flight) and 16 small requests in flight (a guest's usual depth) are
/// served by one thread for 10–30 % less CPU per request and as fast (docs/benchmarks.md, issue
/// 14); a deep queue of small requests (64 in flight) is served faster in parallel.
const RECRUIT_BACKLOG: u16 = 32;

/// Bytes that make a chain bulk I/O. Reply buffers (device-writable) that large make a bulk READ:
/// copying that much from a file into guest memory is worth a second CPU even when only a few
/// such requests wait (reads do not contend for the file's lock the way writes do). Request
/// buffers (device-readable) that large make a bulk WRITE, whose completion is notified at once:
/// the guest has the next buffers to fill, and holding completions back starves its pipeline.
const BULK: u64 = 64 << 10;

/// A request that took longer than this, plus [`LONG_NS_PER_KIB`] per KiB of its buffers, took
/// long: it waited, for its host filesystem (a network filesystem's round trip, a disk) or for a
/// CPU. On a filesystem in memory a small request takes 2–50 µs and a 1 MiB one 0.1–0.3 ms; on
/// GlusterFS (both bricks on the same host) a 4 KiB READ or WRITE takes 0.15–0.3 ms and a LOOKUP
/// of a name the host forgot 0.5 ms or more (docs/benchmarks.md, issue 35 item 3).
const LONG_NS: u64 = 100_000;

/// What a KiB of a request's buffers adds to [`LONG_NS`] (copying it takes well under that).
const LONG_NS_PER_KIB: u64 = 1_000;

/// Whether a request with `bytes` of buffers that took `nanos` took long (see [`LONG_NS`]).
fn took_long(nanos: u64, bytes: u64) -> bool {
    nanos > LONG_NS + (bytes >> 10) * LONG_NS_PER_KIB
}

/// Voluntary context switches of the calling thread so far (0 if they cannot be read). A
/// request that took long while they grew blocked (it slept: for I/O, or a lock); one that took
/// long without them was preempted (it waited for a CPU: more threads would not help). Read
/// only around a request that follows one that took long: two syscalls, ~1 µs.
fn voluntary_switches() -> i64 {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes a `rusage` to the pointer it is given, which points to one.
    if unsafe { libc::getrusage(libc::RUSAGE_THREAD, usage.as_mut_ptr()) } != 0 {
        return 0;
    }
    // SAFETY: zeroed, then written by getrusage.
    unsafe { usage.assume_init() }.ru_nvcsw
}

/// Why a queue gets another thread ([`VhostFsBackend::recruit_helper`]).
#[derive(Clone, Copy)]
enum Help {
    /// A backlog of requests that keep a thread on a CPU: at most one pool thread per CPU
    /// ([`crate::worker_pool::WorkerPool::cpu_bound`]) helps, more would only contend; and
    /// none while as many threads drain (queue threads of busy queues included), or as many
    /// queues are busy ([`super::busy_queues`]), as there are CPUs.
    Busy,
    /// Requests that wait, blocked (for the host filesystem, or stuck): up to the whole pool, one
    /// thread per waiting request, since a blocked thread uses no CPU.
    Waiting,
}

/// Threads at most that drain a queue whose requests wait changing names in one directory
/// ([`crate::fuse_server::Request::locked_dir`]): the host serves those one at a time, under
/// the directory's lock, so more threads only queue on it; a second one does a request's part
/// outside the lock (the reply, the new name's lookup) while the first holds it. CREATE in one
/// directory on GlusterFS with every brick operation delayed 500 µs, 16 in flight on 1 queue:
/// 0.91 (0.90–0.96) of virtiofsd without a pool (the better setting) with a helper per waiting
/// request, 1.05 (0.98–1.05) with this; with one thread only, 0.83 (0.72–0.96) of virtiofsd's
/// 16 threads on GlusterFS without the delay (docs/benchmarks.md, issue 35).
const ON_ONE_DIR: u32 = 2;

/// Used entries at most put in the ring before the guest is notified, while more chains wait
/// ([`notify_batch`]).
const NOTIFY_BATCH: u16 = 16;

/// Used entries at least put in the ring before the guest is notified, while more chains wait.
const NOTIFY_BATCH_MIN: u16 = 8;

/// How many used entries make a notification while `backlog` chains wait behind the one just
/// popped: half of them, at least [`NOTIFY_BATCH_MIN`] and at most [`NOTIFY_BATCH`]. A guest
/// with 16 requests in flight hears of the first 8 completions while the other 8 are still
/// waiting, so it refills its ring before the ring runs dry: with a fixed 16 and 16 in flight,
/// all 16 were answered before the first notification, the guest idle meanwhile and the daemon
/// idle while it refilled (1 queue, 16 in flight: 1.56–1.69× the READ and WRITE 4 KiB rate
/// at 0.91–1.01 of the CPU per request, GETATTR 1.15–1.42×; docs/benchmarks.md). Each
/// notification wakes the guest's waiting thread (an `eventfd` write whose wake-up is most of
/// a queue thread's kernel time on a small request): a quarter, at least 4, took one per 4
/// completions at 16 in flight, and 8 is 0.76–0.96 of its CPU per 4 KiB READ at 1 queue
/// (docs/benchmarks.md, tenth session). A deep backlog still takes one interrupt per 16
/// completions; a backlog shorter than the batch is notified when it is served. The first
/// completion of a drain does not wait for a batch (see [`VhostFsBackend::drain`]).
fn notify_batch(backlog: u16) -> u16 {
    (backlog / 2).clamp(NOTIFY_BATCH_MIN, NOTIFY_BATCH)
}

impl VhostFsBackend {
    /// Serves every chain available on `vring`, queue `queue` (called on the queue's own thread
    /// when the guest kicks).
    pub(super) fn process_queue(&self, queue: usize, vring: &Vring) -> io::Result<()> {
        let Some(atomic) = self.memory() else {
            return Err(io::Error::other("request before the memory table"));
        };
        let event_idx = self.inner.event_idx.load(Ordering::Relaxed);
        loop {
            if event_idx {
                let mem = atomic.memory();
                let mut state = vring.get_mut();
                let q = state.get_queue_mut();
                q.disable_notification(&*mem).map_err(io::Error::other)?;
            }
            let served = self.drain(vring, &atomic, event_idx, queue, true)?;
            if self.inner.paused.load(Ordering::SeqCst) || !event_idx {
                return Ok(());
            }
            // Before re-enabling kicks, watch the ring a little: the guest is reaping what was
            // served and adding the next chains (`linger`).
            if served >= LINGER_AFTER && self.linger(queue, vring, &atomic)? {
                continue;
            }
            // With EVENT_IDX, re-enable notifications and look again: the guest may have added
            // chains after the last pop and before it saw notifications enabled. Not once the
            // frontend stopped the queue (GET_VRING_BASE): the ring is not ours to write (a
            // migration's destination may serve it) and pops nothing ("look again" would spin).
            // What counts is what the drain counts ([`waiting`]).
            let mem = atomic.memory();
            let mut state = vring.get_mut();
            let q = state.get_queue_mut();
            if !q.ready() {
                return Ok(());
            }
            q.enable_notification(&*mem).map_err(io::Error::other)?;
            if waiting(q, &*mem)? == 0 {
                return Ok(());
            }
        }
    }

    /// Pops and serves chains until `vring` (queue `queue`) is empty, and says how many it
    /// served. The thread that pops a chain serves it: no hand-over, so one request in flight
    /// costs no thread switch. On the queue's own thread (`own`), when at least
    /// [`RECRUIT_BACKLOG`] chains are still waiting after a pop, an idle pool thread (if any) is
    /// asked to drain the queue alongside, so a backlog is served in parallel; and each request
    /// is shown to the stall watcher, which sends help when one runs long. On any thread, when
    /// the request served last [`took_long`] and blocked (after one that took long too), and
    /// chains wait behind the one just popped, one more pool thread is asked: a queue whose
    /// requests wait for a slow filesystem keeps about as many of them going as it has in
    /// flight (GlusterFS, issue 35 item 3), while on a local filesystem, where a request that
    /// takes long was preempted, nothing changes.
    ///
    /// The guest is notified of completions in batches: while more chains wait behind the one
    /// just popped, up to [`notify_batch`] used entries are put in the ring before one
    /// notification covers them all (a guest that keeps many requests in flight takes one
    /// interrupt per batch instead of one per request). The last chain of a backlog is never
    /// served with completions held back, and a bulk WRITE's completion is notified at once.
    /// So is the drain's first completion: the guest, asleep since it kicked, takes a while to
    /// wake (on a host whose idle CPUs halt, a cross-CPU wake-up took 50 µs, a dozen requests'
    /// service), and hearing of the first completion it wakes while the rest are served and
    /// refills the ring before it runs dry. With EVENT_IDX the batch's notification is then
    /// often not asked for yet (the guest is still reaping): 9 % more notifications over the
    /// 4 KiB READ and WRITE benchmarks, whose 1-queue rows, 16 in flight, ran 1.4–2.3× as fast
    /// on such a host (docs/benchmarks.md, twelfth session).
    fn drain(
        &self,
        vring: &Vring,
        atomic: &GuestMemoryAtomic<GuestMemory>,
        event_idx: bool,
        queue: usize,
        own: bool,
    ) -> io::Result<u32> {
        let _draining = self.inner.lingering.draining(queue);
        let _serving = self.inner.busy_queues.serving(queue);
        let mut count = 0;
        let gauges = &self.inner.gauges;
        // One snapshot of the memory map per drain: a chain popped under it is served under it,
        // and a new map (memory hot-plug) is picked up at the next kick.
        let mem = atomic.memory();
        // The last request served, whether it was bulk I/O, and its count in flight: its used
        // entry goes in with the next pop, under one lock.
        let mut served = None;
        // Whether the last request served took long ([`took_long`]): the next one is then
        // watched for blocking ([`voluntary_switches`]). And whether it took long and blocked.
        let mut last_long = false;
        let mut last_waited = false;
        // The directory the request served last changed a name in ([`Request::locked_dir`]).
        let mut last_dir = None;
        // Used entries added since the last notification. None once a lock section ends with
        // no chain popped (the queue was found empty, paused or stopped): a stop that sees no
        // chain in flight sees every used entry notified.
        let mut unsignalled = 0u16;
        // Whether this drain has notified the guest yet (its first completion is, at once).
        let mut notified = false;
        // The queue's descriptor table, resolved in `mem` at the first pop and again only if
        // the frontend has moved or resized it since (SET_VRING_ADDR, SET_VRING_NUM).
        let mut table: Option<Table<GuestMemory>> = None;
        // The queue's used ring, resolved in `mem` at the first completion, likewise.
        let mut used_ring = None;
        loop {
            let popped = {
                let mut state = vring.get_mut();
                // The chain served last counts as in flight until its used entry is in and the
                // guest notified (what a stop waits for, `vring::wait_served`): its count goes
                // at the end of this block, before the lock (declared after it).
                let mut _served = None;
                let mut urgent = false;
                if let Some((head, used, bulk, in_flight)) = served.take() {
                    _served = in_flight;
                    if add_used(vring, &mut state, &mem, &mut used_ring, head, used)? {
                        unsignalled += 1;
                        urgent = bulk;
                    }
                }
                let q = state.get_queue_mut();
                let queued = waiting(q, &*mem)?;
                // Counted before the lock goes, so a stopped queue has nothing popped uncounted;
                // and before `paused` is read (both SeqCst): `pause` either sees this chain
                // counted or this thread sees `paused`.
                let in_flight = (queued > 0).then(|| gauges.serving(queue)).flatten();
                if queued > 0 && self.inner.paused.load(Ordering::SeqCst) {
                    drop(in_flight);
                    if unsignalled > 0 {
                        notify(vring, &mut state, &mem, event_idx)?;
                    }
                    return Ok(count);
                }
                let head = match queued {
                    0 => None,
                    _ => Some(
                        q.pop_descriptor_chain(&*mem)
                            .ok_or_else(|| {
                                io::Error::other("the guest's available ring cannot be read")
                            })?
                            .head_index(),
                    ),
                };
                let (at, size) = (GuestAddress(q.desc_table()), q.size());
                if head.is_some() && !table.as_ref().is_some_and(|t| t.is(at, size)) {
                    table = Some(Table::resolve(&*mem, at, size));
                }
                // The chains behind the one popped, from the avail index `waiting` just read.
                let backlog = queued.saturating_sub(1);
                gauges.set_depth(queue, backlog);
                if unsignalled > 0
                    && (urgent || backlog == 0 || !notified || unsignalled >= notify_batch(backlog))
                {
                    notify(vring, &mut state, &mem, event_idx)?;
                    unsignalled = 0;
                    notified = true;
                }
                (head, backlog, in_flight)
            };
            let (head, backlog, in_flight) = popped;
            let (Some(head), Some(table)) = (head, &table) else {
                return Ok(count);
            };
            count += 1;
            // A chain that is no request is answered with nothing (used length 0).
            let Some(request) = Request::of_chain(&*mem, Walk::new(&*mem, table.clone(), head))
            else {
                served = Some((head, 0, false, in_flight));
                continue;
            };
            // The sizes from the request's buffers, not another walk of the chain.
            let (bytes, reply) = (request.request_bytes() as u64, request.reply_bytes() as u64);
            // The high-priority queue (0: FORGET, INTERRUPT) recruits no helper (only the stall
            // watcher's rescue of a stuck one does): FORGETs in parallel only contend for the
            // inode table, and the last FORGET of an unlinked
            // file closes it, which can sleep in the host filesystem (ext4 frees the inode):
            // recruiting for it brought pool threads up and down through a guest's `rm` of
            // 10,000 files, 0.70-0.76 of a3da8eb's rate in the in-guest table (1.03 with no
            // pool; docs/benchmarks.md, issue 36).
            // A request that waited gets a helper for the ones behind it, unless this one
            // changes a name in the same directory and [`ON_ONE_DIR`] threads drain already.
            let dir = request.locked_dir();
            let queues_on_lock = last_waited
                && dir.is_some()
                && dir == last_dir
                && self.inner.busy_queues.draining(queue) >= ON_ONE_DIR;
            let help = if backlog == 0 || queue == 0 || queues_on_lock {
                None
            } else if last_waited {
                Some(Help::Waiting)
            } else if own && (backlog >= RECRUIT_BACKLOG || reply >= BULK) {
                Some(Help::Busy)
            } else {
                None
            };
            if let Some(help) = help {
                self.recruit_helper(help, queue, vring, atomic, event_idx);
            }
            let bulk = bytes >= BULK;
            let _watched = own.then(|| self.inner.watch.serving(queue)).flatten();
            let switches = last_long.then(voluntary_switches);
            let (used, nanos) = self.inner.server.serve_request(request);
            last_long = took_long(nanos, bytes + reply);
            last_waited = last_long && switches.is_some_and(|n| voluntary_switches() > n);
            last_dir = dir;
            served = Some((head, used, bulk, in_flight));
        }
    }

    /// Watches `vring` for a chain for a little while after a drain (kicks still off), unless
    /// another thread lingers or drains ([`super::linger`]): `true` if one came.
    fn linger(
        &self,
        queue: usize,
        vring: &Vring,
        atomic: &GuestMemoryAtomic<GuestMemory>,
    ) -> io::Result<bool> {
        let mem = atomic.memory();
        self.inner.lingering.linger(queue, || {
            if self.inner.paused.load(Ordering::SeqCst) {
                return Ok(Some(false));
            }
            let mut state = vring.get_mut();
            let q = state.get_queue_mut();
            // A stopped queue (GET_VRING_BASE) pops nothing: not worth waiting for.
            if !q.ready() {
                return Ok(Some(false));
            }
            Ok((waiting(q, &*mem)? > 0).then_some(true))
        })
    }

    /// Starts one more pool thread draining `vring` (queue `queue`), unless as many pool
    /// threads as `help` allows drain already.
    fn recruit_helper(
        &self,
        help: Help,
        queue: usize,
        vring: &Vring,
        atomic: &GuestMemoryAtomic<GuestMemory>,
        event_idx: bool,
    ) {
        let Some(pool) = &self.inner.pool else { return };
        let most = match help {
            // As many threads drain on CPUs as there are CPUs (several queues busy at once):
            // one more would only take CPU time from them.
            Help::Busy
                if self.inner.lingering.threads_draining() >= pool.cpu_bound()
                    || self.inner.busy_queues.busy() >= pool.cpu_bound() =>
            {
                return
            }
            Help::Busy => pool.cpu_bound(),
            Help::Waiting => pool.size(),
        };
        if self.inner.helpers.fetch_add(1, Ordering::AcqRel) >= most {
            self.inner.helpers.fetch_sub(1, Ordering::AcqRel);
            return;
        }
        let (this, vring, atomic) = (self.clone(), vring.clone(), atomic.clone());
        pool.execute(move || {
            if let Err(e) = this.drain(&vring, &atomic, event_idx, queue, false) {
                log::error!("cannot serve a request queue: {e}");
            }
            this.inner.helpers.fetch_sub(1, Ordering::AcqRel);
        });
    }
    /// Called by the stall watcher while queue `queue`'s thread has been serving one request
    /// for over a [`TICK`]: the completions that thread holds back for a batched notification
    /// are notified now, and if chains wait behind the stuck request, a pool thread (if one is
    /// idle) is recruited to serve them.
    pub(super) fn rescue(&self, queue: usize) {
        let Some(vring) = self.inner.vrings.get(queue).and_then(OnceLock::get) else {
            return;
        };
        let Some(atomic) = self.memory() else {
            return;
        };
        let event_idx = self.inner.event_idx.load(Ordering::Relaxed);
        let backlog = {
            let mut state = vring.get_mut();
            if !state.get_queue().ready() {
                return;
            }
            let mem = atomic.memory();
            if let Err(e) = notify(vring, &mut state, &mem, event_idx) {
                log::debug!("queue {queue}: cannot notify the guest: {e}");
            }
            let q = state.get_queue();
            q.avail_idx(&*mem, Ordering::Acquire)
                .map_or(0, |avail| avail.0.wrapping_sub(q.next_avail()))
        };
        log::debug!("queue {queue}: a request has run for over {TICK:?}; {backlog} waiting");
        if backlog > 0 {
            self.recruit_helper(Help::Waiting, queue, vring, &atomic, event_idx);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_took_long_only_past_what_its_bytes_take() {
        // A 4 KiB READ: 20 µs on a local filesystem, 200 µs over GlusterFS.
        assert!(!took_long(20_000, 4096 + 80));
        assert!(took_long(200_000, 4096 + 80));
        // A 1 MiB WRITE: 300 µs copying it, 3 ms waiting for a network filesystem.
        assert!(!took_long(300_000, 1 << 20));
        assert!(took_long(3_000_000, 1 << 20));
    }

    /// A thread that sleeps switches voluntarily; one that computes does not.
    #[test]
    fn voluntary_switches_count_sleeps() {
        let before = voluntary_switches();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let slept = voluntary_switches();
        assert!(slept > before, "{before} -> {slept}");
        let t = std::time::Instant::now();
        while t.elapsed() < std::time::Duration::from_micros(200) {
            std::hint::spin_loop();
        }
        // Computing, at most preempted (involuntary switches are not counted).
        assert_eq!(voluntary_switches(), slept);
    }
}
