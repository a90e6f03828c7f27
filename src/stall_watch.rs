//! Notices a queue thread that has been serving one request for a long time (a blocking open, a
//! hung host filesystem, a slow fsync) and calls for rescue, so that the requests behind it on
//! its queue, and the completions it holds back for a batched notification, do not wait for it.
//!
//! Each queue thread counts the requests it serves in its [`Slot`]: odd while it is inside one.
//! A watcher thread looks at the slots every [`TICK`]; a slot that is odd and unchanged since the
//! previous look belongs to a thread that has been in the same request for at least one tick,
//! and the rescue callback runs once for that request. After [`IDLE_TICKS`] looks without any
//! request, the watcher stops looking until the next request starts, and its thread (an
//! [`OnDemand`] one) ends after [`WATCH_LINGER`] without one: an idle daemon has no timer
//! wake-ups and no watcher thread, and a busy one (even one serving a request at a time, each a
//! few hundred µs apart, as a guest's `stat` loop does) never pays for waking the watcher.
//!
//! Cost on the request path: one atomic increment before and after each request, plus a load of
//! the `parked` flag (a wake, a futex wake or a thread start, only for the first request after
//! an idle spell).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use crate::on_demand::OnDemand;

/// How often the watcher looks; a request is "stalled" after one to two ticks.
pub const TICK: Duration = Duration::from_millis(5);

/// Looks without a request (100 ms) after which the watcher stops looking.
const IDLE_TICKS: u32 = 20;

/// How long the watcher's thread waits for a request after it stopped looking, before it ends.
pub const WATCH_LINGER: Duration = Duration::from_secs(1);

/// One queue thread's request counter, on a cache line of its own (queue threads on different
/// CPUs bump theirs on every request).
#[derive(Default)]
#[repr(align(64))]
pub struct Slot {
    /// Requests started plus requests finished: odd while one is being served.
    seq: AtomicU64,
}

/// The slots, and the watcher's state.
pub struct StallWatch {
    slots: Vec<Slot>,
    /// True while the watcher does not look (or is about to stop) until a request starts: the
    /// request that swaps it to false wakes the watcher.
    parked: AtomicBool,
    watcher: OnceLock<Arc<OnDemand>>,
}

/// Marks the request in progress on a slot; ends it when dropped (also on unwinding).
pub struct Serving<'a> {
    slot: &'a Slot,
}

impl Drop for Serving<'_> {
    fn drop(&mut self) {
        self.slot.seq.fetch_add(1, Ordering::Release);
    }
}

impl StallWatch {
    /// Slots for `queues` queue threads; call [`StallWatch::start`] to begin watching.
    pub fn new(queues: usize) -> Arc<StallWatch> {
        Arc::new(StallWatch {
            slots: (0..queues).map(|_| Slot::default()).collect(),
            parked: AtomicBool::new(true),
            watcher: OnceLock::new(),
        })
    }

    /// Sets what the watcher does: `rescue(queue)` runs on its thread, once per stalled
    /// request, while that request is still being served. The thread starts with the first
    /// request and ends when idle (see the module doc) or when the watch is dropped.
    pub fn start(
        self: &Arc<StallWatch>,
        rescue: impl Fn(usize) + Send + Sync + 'static,
    ) -> std::io::Result<()> {
        let weak = Arc::downgrade(self);
        let _ = self
            .watcher
            .set(OnDemand::new("vhostfs-watch", WATCH_LINGER, move || {
                watch(&weak, &rescue)
            }));
        Ok(())
    }

    /// Called by queue thread `queue` as it starts a request; the request ends when the
    /// returned guard is dropped.
    pub fn serving(&self, queue: usize) -> Option<Serving<'_>> {
        let slot = self.slots.get(queue)?;
        // SeqCst pairs with the watcher's store of `parked` and its re-check of the slots: either
        // it sees this request, or this thread sees it parked and wakes it.
        slot.seq.fetch_add(1, Ordering::SeqCst);
        if self.parked.load(Ordering::SeqCst) && self.parked.swap(false, Ordering::SeqCst) {
            if let Some(w) = self.watcher.get() {
                if let Err(e) = w.wake() {
                    log::debug!("cannot start the stall watcher: {e}");
                }
            }
        }
        Some(Serving { slot })
    }

    fn any_busy(&self) -> bool {
        self.slots
            .iter()
            .any(|s| s.seq.load(Ordering::SeqCst) % 2 == 1)
    }
}

impl Drop for StallWatch {
    /// Ends the watcher's thread: a daemon serving one connection after another
    /// (`--keep-listening`) leaves no thread behind per connection.
    fn drop(&mut self) {
        if let Some(w) = self.watcher.get() {
            w.stop();
        }
    }
}

/// One run of the watcher: looks every [`TICK`] until [`IDLE_TICKS`] looks saw no request.
fn watch(weak: &Weak<StallWatch>, rescue: &impl Fn(usize)) {
    // Per slot: the counter seen at the last look, and the last request rescued.
    let mut seen: Vec<u64> = Vec::new();
    let mut rescued: Vec<u64> = Vec::new();
    // Looks in a row that saw no request start, run or end.
    let mut idle = 0;
    loop {
        {
            let Some(w) = weak.upgrade() else { return };
            seen.resize(w.slots.len(), 0);
            rescued.resize(w.slots.len(), 0);
            let mut active = false;
            for (q, slot) in w.slots.iter().enumerate() {
                let now = slot.seq.load(Ordering::Acquire);
                if now % 2 == 1 && now == seen[q] && rescued[q] != now {
                    rescued[q] = now;
                    rescue(q);
                }
                active |= now % 2 == 1 || now != seen[q];
                seen[q] = now;
            }
            idle = if active { 0 } else { idle + 1 };
            if idle >= IDLE_TICKS {
                w.parked.store(true, Ordering::SeqCst);
                if !w.any_busy() {
                    // The next request wakes the watcher again.
                    return;
                }
                w.parked.store(false, Ordering::SeqCst);
            }
        }
        std::thread::park_timeout(TICK);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;
    use std::time::Instant;

    /// How late a rescue may come on a loaded machine (two ticks when the watcher gets a core).
    const RESCUE_BOUND: Duration = Duration::from_millis(500);

    /// Waits until `calls` has `n` rescues, or `bound` has passed.
    fn rescued_within(calls: &Mutex<Vec<(usize, Instant)>>, n: usize, bound: Duration) {
        let deadline = Instant::now() + bound;
        while calls.lock().unwrap().len() < n && Instant::now() < deadline {
            std::thread::sleep(TICK);
        }
    }

    #[test]
    fn a_long_request_is_rescued_once_and_short_ones_never() {
        let watch = StallWatch::new(2);
        let calls = Arc::new(Mutex::new(Vec::new()));
        let c = Arc::clone(&calls);
        watch
            .start(move |q| c.lock().unwrap().push((q, Instant::now())))
            .unwrap();
        // Short requests on queue 0: never rescued.
        for _ in 0..1000 {
            let _s = watch.serving(0).unwrap();
        }
        std::thread::sleep(TICK * 3);
        assert!(calls.lock().unwrap().is_empty());
        // One long request on queue 1: rescued once while it runs, within two ticks plus
        // scheduling: on a loaded 2-core machine the watcher can wait tens of ms for a core,
        // so the request runs until it is rescued (or the bound has passed) and a while after.
        let start = Instant::now();
        {
            let _s = watch.serving(1).unwrap();
            rescued_within(&calls, 1, RESCUE_BOUND);
            std::thread::sleep(TICK * 6);
        }
        let got = calls.lock().unwrap().clone();
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got[0].0, 1);
        assert!(got[0].1 - start < RESCUE_BOUND, "{:?}", got[0].1 - start);
        // Idle, the watcher parks; it wakes for the next long request.
        std::thread::sleep(TICK * (IDLE_TICKS + 4));
        assert!(
            watch.parked.load(Ordering::SeqCst),
            "watcher parked when idle"
        );
        {
            let _s = watch.serving(0).unwrap();
            rescued_within(&calls, 2, RESCUE_BOUND);
        }
        assert_eq!(calls.lock().unwrap().len(), 2);
        assert!(watch.serving(7).is_none());
    }

    /// A watch dropped while its watcher is parked leaves no thread behind (the thread owns the
    /// rescue callback, which holds `token`: once it ends, the token is ours alone).
    #[test]
    fn the_watcher_ends_when_the_watch_is_dropped_while_parked() {
        let watch = StallWatch::new(1);
        let token = Arc::new(());
        let held = Arc::clone(&token);
        watch.start(move |_| drop(Arc::clone(&held))).unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while !watch.parked.load(Ordering::SeqCst) {
            assert!(Instant::now() < deadline, "the watcher never parked");
            std::thread::sleep(TICK);
        }
        drop(watch);
        while Arc::strong_count(&token) > 1 {
            assert!(
                Instant::now() < deadline,
                "the parked watcher outlived its watch"
            );
            std::thread::sleep(TICK);
        }
    }
}
