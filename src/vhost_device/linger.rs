//! Lingering: a queue thread that has just drained a burst of requests watches its ring for a
//! few microseconds before it goes back to sleep.
//!
//! With EVENT_IDX the guest does not kick while a drain runs (the device's avail event stays
//! behind), so the chains it adds while reaping a burst's completions are found by the next pop
//! or not at all: a thread that finds the ring empty re-enables kicks and sleeps, and the
//! guest's next chain costs a kick (a VM exit in a real guest, a `write` and a cross-CPU wake-up
//! here) and the thread's wake-up from `epoll_wait`. With 16 requests in flight on one queue
//! the daemon, the quicker side, found the ring empty once per 16–18 requests (9,300 sleeps over
//! 160,000 4 KiB READs; virtiofsd, slower per request, 3,300–4,200), and on a host whose idle
//! CPUs halt, where a cross-CPU wake-up costs ~20 µs, the pipeline waited for each. Lingering
//! 20 µs took the sleeps to 100–300 and those rows' rate to 1.6–2.0× (docs/benchmarks.md,
//! fourteenth session); 10 µs caught too few refills to matter. A guest sending one request at a
//! time gains the same way when its next request follows the reply within the linger: the test
//! guest's one-at-a-time GETATTR and LOOKUP ran at 2.0–2.1× the rate. Where its wake-up is
//! slower (a 2-core AMD KVM host, whose guest's next request came 20–30 µs after the reply),
//! 35 µs ran those rows at 1.57–1.87× the rate of 20 µs for 0.88–0.95 of the CPU per request,
//! the others within the single-round ranges (docs/benchmarks.md, sixteenth session).
//!
//! Lingering costs CPU, so it is bounded: only after a drain that served at least
//! [`LINGER_AFTER`] chain, for at most [`LINGER`], by one thread at a time, only while no other thread drains
//! and only on a queue that had the last [`STREAK`] drains to itself (when several queues are
//! busy, the CPU a lingering thread would hold is theirs, or the guest's), and after a linger
//! that found nothing the next ones back off: none pass after one miss, 1 after two in a row, 3
//! after three, up to [`MAX_SKIP`].

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// How long a thread watches its ring after a drain: about what a guest takes to hear of a
/// completion and add the next chain when its CPU must wake for it.
pub(super) const LINGER: Duration = Duration::from_micros(35);

/// Chains a drain must have served for its thread to linger: one (a kick that found nothing new
/// does not make it linger). With 2 (after bursts only), the test guest's one-at-a-time rows
/// ran at half this rate, for 0.83–0.98 of its CPU per request.
pub(super) const LINGER_AFTER: u32 = 1;

/// Chances to linger passed up at most after lingers that found nothing: `2^(n-1) - 1` after `n`
/// misses in a row, so a guest that does not refill within [`LINGER`] costs a wasted linger per
/// `MAX_SKIP + 1` drains, not per drain, while one that nearly always does (93–98 % of 4 KiB
/// READ lingers found a chain, after 7–8 µs on average) loses few chances to an odd miss.
const MAX_SKIP: u32 = 15;

/// Drains in a row of one queue after which its thread may linger ([`Lingering::last`]).
const STREAK: u32 = 8;

/// Which threads of one backend drain a queue, and whether one lingers.
#[derive(Default)]
pub(super) struct Lingering {
    /// Threads (queue threads and pool threads) inside a drain right now. A thread lingers
    /// only while this is 0, and stops when it is not.
    draining: AtomicUsize,
    /// True while a thread lingers: at most one does, so lingering holds at most one CPU.
    one: AtomicBool,
    /// The queue whose drain started last, and how many drains in a row before it were of the
    /// same queue. A thread lingers only if the last [`STREAK`] drains were of its own queue:
    /// when several queues are busy, their threads sleep between drains as they did before.
    /// (Two threads starting drains at once may leave the streak a little off: it is a hint.)
    last: AtomicUsize,
    streak: AtomicU32,
    /// Lingers in a row that found nothing, and the chances to linger still to pass up after
    /// them; written only by the thread holding [`Lingering::one`].
    misses: AtomicU32,
    skip: AtomicU32,
}

/// A thread inside a drain, counted in [`Lingering::draining`] until dropped.
pub(super) struct Draining<'a>(&'a AtomicUsize);

impl Drop for Draining<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Lingering {
    /// Counts the calling thread as draining queue `queue` until the guard is dropped.
    pub(super) fn draining(&self, queue: usize) -> Draining<'_> {
        if self.last.swap(queue, Ordering::Relaxed) == queue {
            let n = self.streak.load(Ordering::Relaxed);
            self.streak.store(n.saturating_add(1), Ordering::Relaxed);
        } else {
            self.streak.store(0, Ordering::Relaxed);
        }
        self.draining.fetch_add(1, Ordering::SeqCst);
        Draining(&self.draining)
    }

    /// Threads inside a drain right now, of every queue.
    pub(super) fn threads_draining(&self) -> usize {
        self.draining.load(Ordering::SeqCst)
    }

    /// After a drain of queue `queue`, calls `look` until it answers (`Some`), for at most
    /// [`LINGER`]: `Some(true)` when a chain is waiting, `Some(false)` when the thread must not
    /// wait for one (the queue stopped, the device paused). `false` at once when another thread
    /// lingers or drains, unless the last [`STREAK`] drains were of this queue, and for the
    /// calls passed up after lingers that found nothing ([`MAX_SKIP`]); `false` when the time is
    /// up or another thread starts draining meanwhile.
    pub(super) fn linger(
        &self,
        queue: usize,
        look: impl FnMut() -> io::Result<Option<bool>>,
    ) -> io::Result<bool> {
        self.linger_for(LINGER, queue, look)
    }

    /// [`Lingering::linger`] for at most `time`.
    fn linger_for(
        &self,
        time: Duration,
        queue: usize,
        mut look: impl FnMut() -> io::Result<Option<bool>>,
    ) -> io::Result<bool> {
        if self.draining.load(Ordering::SeqCst) > 0
            || self.last.load(Ordering::Relaxed) != queue
            || self.streak.load(Ordering::Relaxed) < STREAK
            || self.one.swap(true, Ordering::Acquire)
        {
            return Ok(false);
        }
        let skip = self.skip.load(Ordering::Relaxed);
        if skip > 0 {
            self.skip.store(skip - 1, Ordering::Relaxed);
            self.one.store(false, Ordering::Release);
            return Ok(false);
        }
        let until = Instant::now() + time;
        let found = loop {
            match look() {
                Ok(Some(true)) => {
                    self.misses.store(0, Ordering::Relaxed);
                    break Ok(true);
                }
                Ok(Some(false)) => break Ok(false),
                Err(e) => break Err(e),
                Ok(None) => {}
            }
            if self.draining.load(Ordering::SeqCst) > 0 {
                break Ok(false);
            }
            if Instant::now() >= until {
                let misses = self.misses.load(Ordering::Relaxed).saturating_add(1);
                self.misses.store(misses, Ordering::Relaxed);
                let skip = (1u32 << (misses - 1).min(31)) - 1;
                self.skip.store(skip.min(MAX_SKIP), Ordering::Relaxed);
                break Ok(false);
            }
            for _ in 0..32 {
                std::hint::spin_loop();
            }
        };
        self.one.store(false, Ordering::Release);
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `Lingering` whose last drains were of queue 1, ended.
    fn after_a_drain() -> Lingering {
        let l = Lingering::default();
        for _ in 0..=STREAK {
            drop(l.draining(1));
        }
        l
    }

    #[test]
    fn a_chain_that_comes_while_lingering_is_found() {
        let l = after_a_drain();
        let mut looks = 0;
        // Time enough for three looks on any machine.
        let found = l
            .linger_for(Duration::from_secs(60), 1, || {
                looks += 1;
                Ok((looks == 3).then_some(true))
            })
            .unwrap();
        assert!(found);
        assert_eq!(looks, 3);
    }

    #[test]
    fn a_linger_that_finds_nothing_ends_in_time() {
        let l = after_a_drain();
        let start = Instant::now();
        let mut looks = 0u64;
        assert!(!l
            .linger(1, || {
                looks += 1;
                Ok(None)
            })
            .unwrap());
        assert!(start.elapsed() >= LINGER);
        assert!(looks >= 1);
    }

    #[test]
    fn misses_in_a_row_pass_up_more_and_more_chances_until_one_finds_a_chain() {
        let l = after_a_drain();
        let miss = |l: &Lingering| l.linger_for(Duration::ZERO, 1, || Ok(None)).unwrap();
        let passed_up = |l: &Lingering, n: u32| {
            for _ in 0..n {
                assert!(!l.linger(1, || panic!("looked while passing up")).unwrap());
            }
        };
        for skipped in [0, 1, 3, 7, 15, 15] {
            assert!(!miss(&l));
            passed_up(&l, skipped);
        }
        assert!(l.linger(1, || Ok(Some(true))).unwrap());
        // Found: the next miss passes up nothing again.
        assert!(!miss(&l));
        assert!(l.linger(1, || Ok(Some(true))).unwrap());
    }

    #[test]
    fn a_stopped_queue_ends_lingering_and_an_error_is_passed_on() {
        let l = after_a_drain();
        assert!(!l.linger(1, || Ok(Some(false))).unwrap());
        let e = l.linger(1, || Err(io::Error::other("ring"))).unwrap_err();
        assert_eq!(e.to_string(), "ring");
        // Neither left the one-thread flag set, nor counts as a miss.
        assert!(l.linger(1, || Ok(Some(true))).unwrap());
    }

    #[test]
    fn no_thread_lingers_while_another_drains() {
        let l = after_a_drain();
        let guard = l.draining(1);
        assert!(!l.linger(1, || panic!("looked while a drain runs")).unwrap());
        drop(guard);
        assert!(l.linger(1, || Ok(Some(true))).unwrap());
    }

    #[test]
    fn no_thread_lingers_until_its_queue_drained_the_last_streak() {
        let l = after_a_drain();
        drop(l.draining(2));
        assert!(!l
            .linger(1, || panic!("looked after queue 2 drained"))
            .unwrap());
        for _ in 0..STREAK {
            assert!(!l.linger(2, || panic!("looked before a streak")).unwrap());
            drop(l.draining(2));
        }
        assert!(l.linger(2, || Ok(Some(true))).unwrap());
    }

    #[test]
    fn a_thread_that_starts_draining_ends_the_linger() {
        let l = after_a_drain();
        let (mut guard, mut looks) = (None, 0);
        let found = l
            .linger_for(Duration::from_secs(60), 1, || {
                looks += 1;
                guard.get_or_insert_with(|| l.draining(1));
                Ok(None)
            })
            .unwrap();
        assert!(!found);
        // One look, then the drain was seen, well before the time was up: no miss.
        assert_eq!(looks, 1);
        drop(guard);
        assert!(l.linger(1, || Ok(Some(true))).unwrap());
    }

    #[test]
    fn only_one_thread_lingers_at_a_time() {
        let l = after_a_drain();
        let mut inner = None;
        let found = l
            .linger(1, || {
                inner = Some(l.linger(1, || panic!("two threads lingered")).unwrap());
                Ok(Some(true))
            })
            .unwrap();
        assert!(found);
        assert_eq!(inner, Some(false));
    }
}
