//! Requests and data bytes per opcode slot, striped by thread.
//!
//! Every request bumps a counter, from whichever queue or pool thread serves it. One shared
//! array would move its cache lines between CPUs on every request (READ and WRITE counters share
//! a line); instead each thread adds to its own stripe (threads are given stripes round-robin,
//! so with up to [`STRIPES`] threads none share one), and a report sums the stripes.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

const STRIPES: usize = 16;

/// One thread's counters, on cache lines of their own.
#[repr(align(128))]
struct Stripe<const N: usize> {
    count: [AtomicU64; N],
    bytes: [AtomicU64; N],
}

pub struct Counters<const N: usize> {
    stripes: Box<[Stripe<N>]>,
}

/// This thread's stripe.
fn stripe() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static STRIPE: usize = NEXT.fetch_add(1, Ordering::Relaxed) % STRIPES;
    }
    STRIPE.with(|s| *s)
}

impl<const N: usize> Default for Counters<N> {
    fn default() -> Self {
        Counters {
            stripes: (0..STRIPES)
                .map(|_| Stripe {
                    count: std::array::from_fn(|_| AtomicU64::new(0)),
                    bytes: std::array::from_fn(|_| AtomicU64::new(0)),
                })
                .collect(),
        }
    }
}

impl<const N: usize> Counters<N> {
    /// One more request in `slot`.
    pub fn count(&self, slot: usize) {
        self.stripes[stripe()].count[slot].fetch_add(1, Ordering::Relaxed);
    }

    /// `n` more data bytes in `slot`.
    pub fn add_bytes(&self, slot: usize, n: u64) {
        self.stripes[stripe()].bytes[slot].fetch_add(n, Ordering::Relaxed);
    }

    /// (requests, bytes) of `slot`, summed over all threads.
    pub fn get(&self, slot: usize) -> (u64, u64) {
        self.stripes.iter().fold((0, 0), |(c, b), s| {
            (
                c + s.count[slot].load(Ordering::Relaxed),
                b + s.bytes[slot].load(Ordering::Relaxed),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_over_threads() {
        let c = Counters::<4>::default();
        std::thread::scope(|s| {
            for _ in 0..20 {
                s.spawn(|| {
                    for _ in 0..100 {
                        c.count(2);
                        c.add_bytes(2, 10);
                    }
                });
            }
        });
        assert_eq!(c.get(2), (2000, 20_000));
        assert_eq!(c.get(1), (0, 0));
    }
}
