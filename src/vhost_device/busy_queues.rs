//! Which queues are busy: served now, or within the last [`RECENT`].
//!
//! A backlog that keeps a thread on a CPU gets a pool thread ([`super::drain`], `Help::Busy`)
//! only while fewer queues are busy than there are CPUs. Threads draining right now are not
//! enough to tell: with four busy queues on two CPUs, a queue thread sleeps between its guest's
//! kicks (a few per millisecond), so a backlog often found one thread draining and recruited a
//! helper that then took CPU from the other three queues and contended with them for the
//! file's lock (WRITE 4 KiB to one file, 4 queues: 0.91 of a3da8eb's rate over 20 rounds, at par
//! with no pool at all; docs/benchmarks.md, issue 36).
//!
//! Invariant: `draining` counts the threads inside a drain of the queue ([`Serving`] guards);
//! `last` is the time (ns from `epoch`, 0: never) a drain of it last started or ended. Written by the
//! queue's own threads only; read by any, as a hint (a stale read recruits one helper more or
//! less, never loses a request).

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How long a queue counts as busy after its last drain: longer than a busy guest's gap
/// between kicks (the test guest's 4 queues with 64 requests each in flight: under 1 ms).
pub(super) const RECENT: Duration = Duration::from_millis(2);

/// One queue's activity, on a cache line of its own (each is written by its queue's threads).
#[derive(Default)]
#[repr(align(64))]
struct Activity {
    draining: AtomicU32,
    last: AtomicU64,
}

pub(super) struct BusyQueues {
    epoch: Instant,
    queues: Box<[Activity]>,
}

/// A thread inside a drain of a queue, counted until dropped.
pub(super) struct Serving<'a> {
    queues: &'a BusyQueues,
    activity: &'a Activity,
}

impl Drop for Serving<'_> {
    fn drop(&mut self) {
        self.activity
            .last
            .store(self.queues.now(), Ordering::Relaxed);
        self.activity.draining.fetch_sub(1, Ordering::Relaxed);
    }
}

impl BusyQueues {
    pub(super) fn new(queues: usize) -> BusyQueues {
        BusyQueues {
            epoch: Instant::now(),
            queues: (0..queues).map(|_| Activity::default()).collect(),
        }
    }

    /// Nanoseconds since `epoch`, at least 1 (`last` 0: never served).
    fn now(&self) -> u64 {
        (self.epoch.elapsed().as_nanos() as u64).max(1)
    }

    /// Counts the calling thread as draining `queue` until the guard is dropped.
    pub(super) fn serving(&self, queue: usize) -> Serving<'_> {
        let activity = &self.queues[queue];
        activity.draining.fetch_add(1, Ordering::Relaxed);
        activity.last.store(self.now(), Ordering::Relaxed);
        Serving {
            queues: self,
            activity,
        }
    }

    /// Threads draining `queue` now.
    pub(super) fn draining(&self, queue: usize) -> u32 {
        self.queues[queue].draining.load(Ordering::Relaxed)
    }

    /// Queues drained now or within [`RECENT`].
    pub(super) fn busy(&self) -> usize {
        let now = self.now();
        let recent = RECENT.as_nanos() as u64;
        self.queues
            .iter()
            .filter(|a| {
                let last = a.last.load(Ordering::Relaxed);
                a.draining.load(Ordering::Relaxed) > 0
                    || (last != 0 && now.saturating_sub(last) < recent)
            })
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_queue_is_busy_while_served_and_for_a_while_after() {
        let q = BusyQueues::new(3);
        assert_eq!(q.busy(), 0);
        let a = q.serving(1);
        let b = q.serving(2);
        assert_eq!(q.busy(), 2);
        drop(a);
        assert_eq!(q.busy(), 2, "just served");
        std::thread::sleep(RECENT * 2);
        assert_eq!(q.busy(), 1, "queue 2 is still served");
        drop(b);
        std::thread::sleep(RECENT * 2);
        assert_eq!(q.busy(), 0);
    }
}
