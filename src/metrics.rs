//! The metrics registry: counters and gauges that the request path updates and that the daemon
//! reads (for `--metrics`, `vhostfs stats` and SIGUSR1).
//!
//! The hot path stays lock-free and allocation-free: every counter a request bumps lives in a
//! per-thread stripe ([`striped`]), so serving threads never share the cache lines they write;
//! a reader sums the stripes. Gauges that several threads move (requests in flight per queue)
//! are one atomic per queue, on a cache line of its own. Nothing here takes a lock, allocates
//! or makes a syscall per request; the one clock read per side of a request is `rdtsc` or the
//! vDSO's `clock_gettime` ([`clock`]).
//!
//! This module is a leaf: it knows no FUSE, no vhost-user and no command line. `fuse_server`
//! owns the [`requests::RequestMetrics`], `vhost_device` the [`QueueGauges`], `passthrough` its
//! own state's counts; the daemon gathers them into one snapshot and formats it.

pub mod clock;
pub mod requests;
pub mod striped;

use std::sync::atomic::{AtomicU64, Ordering};

/// One queue's gauges, on cache lines of their own.
#[repr(align(128))]
#[derive(Default)]
struct QueueCell {
    /// Requests popped from the queue and not yet answered (the used entry in the ring, the
    /// guest notified): what stopping a ring waits for (`vhost_device::vring`).
    in_flight: AtomicU64,
    /// Chains the guest had made available behind the last one popped (0 once the queue was
    /// found empty).
    depth: AtomicU64,
}

/// Requests in flight and queue depth, per virtqueue.
pub struct QueueGauges {
    queues: Box<[QueueCell]>,
}

/// What [`QueueGauges::snapshot`] reports for one queue.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueSnapshot {
    pub in_flight: u64,
    pub depth: u64,
}

/// A request counted in flight on its queue until dropped.
pub struct InFlight<'a>(&'a AtomicU64);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        // Release: what the request did happens before a waiter sees it done.
        self.0.fetch_sub(1, Ordering::Release);
    }
}

impl QueueGauges {
    pub fn new(queues: usize) -> QueueGauges {
        QueueGauges {
            queues: (0..queues).map(|_| QueueCell::default()).collect(),
        }
    }

    /// Counts one request in flight on `queue` for the life of the guard.
    pub fn serving(&self, queue: usize) -> Option<InFlight<'_>> {
        let cell = self.queues.get(queue)?;
        // SeqCst (the same instruction as Relaxed on x86): the pause's flag is read after it,
        // see `vhost_device::drain`.
        cell.in_flight.fetch_add(1, Ordering::SeqCst);
        Some(InFlight(&cell.in_flight))
    }

    /// Requests in flight on `queue` (0 for a queue that does not exist).
    pub fn in_flight(&self, queue: usize) -> u64 {
        self.queues
            .get(queue)
            .map_or(0, |c| c.in_flight.load(Ordering::SeqCst))
    }

    /// Records the chains waiting on `queue` (a plain store: the popping thread knows).
    pub fn set_depth(&self, queue: usize, depth: u16) {
        if let Some(cell) = self.queues.get(queue) {
            cell.depth.store(u64::from(depth), Ordering::Relaxed);
        }
    }

    /// Every queue's gauges, in queue order.
    pub fn snapshot(&self) -> Vec<QueueSnapshot> {
        self.queues
            .iter()
            .map(|c| QueueSnapshot {
                in_flight: c.in_flight.load(Ordering::Relaxed),
                depth: c.depth.load(Ordering::Relaxed),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_gauges() {
        let g = QueueGauges::new(3);
        let a = g.serving(1);
        let b = g.serving(1);
        g.set_depth(2, 7);
        assert!(g.serving(3).is_none(), "no such queue");
        assert_eq!(
            g.snapshot(),
            [
                QueueSnapshot::default(),
                QueueSnapshot {
                    in_flight: 2,
                    depth: 0
                },
                QueueSnapshot {
                    in_flight: 0,
                    depth: 7
                }
            ]
        );
        drop((a, b));
        assert_eq!(g.snapshot()[1].in_flight, 0);
    }
}
