//! Per-request metrics: requests, errors and data bytes per opcode slot, errors by errno, and a
//! latency histogram per opcode slot, all striped by thread.
//!
//! Latency is the service time of one request: from the moment its serving thread starts on it
//! to the moment its reply is written (one clock read on each side). The histogram has log
//! buckets, bounded by 1 µs · 2^k for k in `0..BUCKETS`, and one for everything longer; the
//! request count of a slot is the sum of its buckets, so a snapshot's count always equals its
//! histogram's.

use super::clock::{ns_since, Stamp};
use super::striped::{stripe, STRIPES};
use std::sync::atomic::{AtomicU64, Ordering};

/// Finite latency buckets: the last is bounded by 2^23 µs (8.4 s).
pub const BUCKETS: usize = 24;
/// errno slots: 1..=133 (EHWPOISON, the largest Linux errno) by number, 0 for anything else.
pub const ERRNO_SLOTS: usize = 134;

/// The upper bound of latency bucket `k` (< [`BUCKETS`]), in seconds.
pub fn bucket_bound_seconds(k: usize) -> f64 {
    1e-6 * (1u64 << k) as f64
}

/// The bucket of a request that took `ns` nanoseconds: the smallest `k` with
/// `ns <= 1000 · 2^k`, or [`BUCKETS`] (no bound).
fn bucket_of(ns: u64) -> usize {
    let micros = ns.saturating_sub(1) / 1000;
    ((u64::BITS - micros.leading_zeros()) as usize).min(BUCKETS)
}

/// One opcode slot's counters in one stripe.
struct OpCells {
    bytes: AtomicU64,
    errors: AtomicU64,
    nanos: AtomicU64,
    /// Requests by latency bucket (the last: longer than every bound).
    buckets: [AtomicU64; BUCKETS + 1],
}

impl Default for OpCells {
    fn default() -> Self {
        OpCells {
            bytes: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            nanos: AtomicU64::new(0),
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

/// One thread's counters, on cache lines of their own.
#[repr(align(128))]
struct Stripe<const OPS: usize> {
    ops: [OpCells; OPS],
    errno: [AtomicU64; ERRNO_SLOTS],
}

/// Request metrics for `OPS` opcode slots.
///
/// A stripe (~13 KiB with every opcode) is allocated by the first request a thread of its
/// stripe records: an idle daemon whose few threads served a few requests holds those, not all
/// [`STRIPES`] (issue 36: 210 KiB resident from the start before).
pub struct RequestMetrics<const OPS: usize> {
    stripes: [std::sync::OnceLock<Box<Stripe<OPS>>>; STRIPES],
}

/// One opcode slot, summed over all threads.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OpSnapshot {
    /// Requests answered (the sum of `buckets`).
    pub count: u64,
    /// Of those, answered with an errno.
    pub errors: u64,
    /// Data bytes moved (READ: file → guest, WRITE: guest → file).
    pub bytes: u64,
    /// Total service time, in nanoseconds.
    pub nanos: u64,
    /// Requests by latency bucket, not cumulative; the last is unbounded.
    pub buckets: [u64; BUCKETS + 1],
}

impl OpSnapshot {
    /// An upper bound of the `q` quantile (0 < q ≤ 1) of the latency, in seconds: the bound of
    /// the first bucket that reaches it (`None` without requests, infinite past the last bound).
    pub fn quantile_bound(&self, q: f64) -> Option<f64> {
        if self.count == 0 {
            return None;
        }
        let want = (q * self.count as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (k, n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= want {
                return Some(if k < BUCKETS {
                    bucket_bound_seconds(k)
                } else {
                    f64::INFINITY
                });
            }
        }
        Some(f64::INFINITY)
    }
}

/// Every opcode slot and errno, summed over all threads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestSnapshot {
    /// By opcode slot.
    pub ops: Vec<OpSnapshot>,
    /// Error replies by errno (index; 0: out of range).
    pub errno: Vec<u64>,
}

impl<const OPS: usize> Default for RequestMetrics<OPS> {
    fn default() -> Self {
        RequestMetrics {
            stripes: std::array::from_fn(|_| std::sync::OnceLock::new()),
        }
    }
}

impl<const OPS: usize> RequestMetrics<OPS> {
    /// The calling thread's stripe, allocated by its first use.
    fn stripe(&self) -> &Stripe<OPS> {
        self.stripes[stripe()].get_or_init(|| {
            Box::new(Stripe {
                ops: std::array::from_fn(|_| OpCells::default()),
                errno: std::array::from_fn(|_| AtomicU64::new(0)),
            })
        })
    }

    /// Records one answered request of opcode slot `slot` (< `OPS`), started at `started`, with
    /// `errno` (0: success). Takes the request's second clock read; returns the nanoseconds
    /// recorded.
    pub fn record(&self, slot: usize, errno: i32, started: Stamp) -> u64 {
        let ns = ns_since(started);
        let s = self.stripe();
        let op = &s.ops[slot];
        op.buckets[bucket_of(ns)].fetch_add(1, Ordering::Relaxed);
        op.nanos.fetch_add(ns, Ordering::Relaxed);
        if errno != 0 {
            op.errors.fetch_add(1, Ordering::Relaxed);
            let e = usize::try_from(errno)
                .ok()
                .filter(|&e| e < ERRNO_SLOTS)
                .unwrap_or(0);
            s.errno[e].fetch_add(1, Ordering::Relaxed);
        }
        ns
    }

    /// `n` more data bytes in `slot`.
    pub fn add_bytes(&self, slot: usize, n: u64) {
        self.stripe().ops[slot]
            .bytes
            .fetch_add(n, Ordering::Relaxed);
    }

    /// Every slot and errno, summed over the stripes.
    pub fn snapshot(&self) -> RequestSnapshot {
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let mut ops = vec![OpSnapshot::default(); OPS];
        let mut errno = vec![0; ERRNO_SLOTS];
        for s in self.stripes.iter().filter_map(std::sync::OnceLock::get) {
            for (sum, cells) in ops.iter_mut().zip(&s.ops) {
                sum.errors += load(&cells.errors);
                sum.bytes += load(&cells.bytes);
                sum.nanos += load(&cells.nanos);
                for (b, c) in sum.buckets.iter_mut().zip(&cells.buckets) {
                    *b += load(c);
                }
            }
            for (sum, c) in errno.iter_mut().zip(&s.errno) {
                *sum += load(c);
            }
        }
        for op in &mut ops {
            op.count = op.buckets.iter().sum();
        }
        RequestSnapshot { ops, errno }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::clock::now;
    use std::time::{Duration, Instant};

    #[test]
    fn buckets_are_bounded_by_powers_of_two_microseconds() {
        assert_eq!(bucket_of(0), 0);
        assert_eq!(bucket_of(1000), 0);
        assert_eq!(bucket_of(1001), 1);
        assert_eq!(bucket_of(2000), 1);
        assert_eq!(bucket_of(2001), 2);
        assert_eq!(bucket_of(4000), 2);
        assert_eq!(bucket_of(4001), 3);
        for k in 1..BUCKETS {
            let bound = (bucket_bound_seconds(k) * 1e9).round() as u64;
            assert_eq!(bucket_of(bound), k, "{bound} ns");
            assert_eq!(bucket_of(bound + 1), k + 1, "{bound} ns + 1");
        }
        assert_eq!(bucket_of(u64::MAX), BUCKETS);
    }

    #[test]
    fn records_sum_over_threads() {
        let m = RequestMetrics::<4>::default();
        std::thread::scope(|s| {
            for _ in 0..20 {
                s.spawn(|| {
                    for i in 0..100 {
                        let started = now();
                        m.record(1, if i % 10 == 0 { libc::ENOENT } else { 0 }, started);
                        m.add_bytes(1, 3);
                    }
                });
            }
        });
        m.record(
            2,
            9999,
            Stamp::Instant(Instant::now() - Duration::from_secs(100)),
        );
        let snap = m.snapshot();
        let op = &snap.ops[1];
        assert_eq!((op.count, op.errors, op.bytes), (2000, 200, 6000));
        assert_eq!(snap.errno[libc::ENOENT as usize], 200);
        assert_eq!(snap.errno[0], 1, "out-of-range errno");
        assert_eq!(snap.ops[2].buckets[BUCKETS], 1, "past the last bound");
        assert_eq!(snap.ops[2].quantile_bound(0.5), Some(f64::INFINITY));
        assert_eq!(snap.ops[0].quantile_bound(0.5), None);
        assert!(op.quantile_bound(0.99).unwrap() < 1.0);
    }
}
