//! Counters striped by thread.
//!
//! Every request bumps counters, from whichever queue or pool thread serves it. One shared
//! array would move its cache lines between CPUs on every request; instead each thread adds to
//! its own stripe (threads are given stripes round-robin, so with up to [`STRIPES`] threads none
//! share one), and a reader sums the stripes. A counter is only ever added to, so a sum read
//! while requests run is a value the counter had at some moment of the read (never torn).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

pub(super) const STRIPES: usize = 16;

/// This thread's stripe, in `0..STRIPES` (a thread-local read after the first call).
pub(super) fn stripe() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static STRIPE: usize = NEXT.fetch_add(1, Ordering::Relaxed) % STRIPES;
    }
    STRIPE.with(|s| *s)
}

/// One thread's `N` counters, on cache lines of their own.
#[repr(align(128))]
struct Stripe<const N: usize>([AtomicU64; N]);

/// `N` counters, striped by thread.
pub struct Striped<const N: usize> {
    stripes: Box<[Stripe<N>]>,
}

impl<const N: usize> Default for Striped<N> {
    fn default() -> Self {
        Striped {
            stripes: (0..STRIPES)
                .map(|_| Stripe(std::array::from_fn(|_| AtomicU64::new(0))))
                .collect(),
        }
    }
}

impl<const N: usize> Striped<N> {
    /// Adds `n` to counter `slot` (< `N`).
    pub fn add(&self, slot: usize, n: u64) {
        self.stripes[stripe()].0[slot].fetch_add(n, Ordering::Relaxed);
    }

    /// Counter `slot`, summed over all threads.
    pub fn get(&self, slot: usize) -> u64 {
        self.stripes
            .iter()
            .map(|s| s.0[slot].load(Ordering::Relaxed))
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_over_threads() {
        let c = Striped::<4>::default();
        std::thread::scope(|s| {
            for _ in 0..20 {
                s.spawn(|| {
                    for _ in 0..100 {
                        c.add(2, 1);
                        c.add(3, 10);
                    }
                });
            }
        });
        assert_eq!((c.get(2), c.get(3)), (2000, 20_000));
        assert_eq!(c.get(1), 0);
    }
}
