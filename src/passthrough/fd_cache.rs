//! A bounded cache of O_PATH fds of handle-backed inodes.
//!
//! With file handles an inode holds no fd, so an operation on it would open one
//! (`open_by_handle_at`) and close it again: three syscalls for a GETATTR instead of one. While
//! the guest keeps using an inode, it keeps the O_PATH fd its LOOKUP opened (or the first
//! operation opened) here instead. The cache is bounded in number and in time, so a guest that
//! holds a million inodes and never forgets any cannot make the daemon run out of fds, and an fd
//! never keeps alive a file the guest does not use (a host `rm` frees the space, an NFS share
//! gets no lingering `.nfsXXXX` file).
//!
//! Invariants:
//! - Every cached fd holds one [`FdToken`] of the guest's budget, and the cache holds at most
//!   [`FdCache::capacity`] of them: at most half the budget and at most the configured size
//!   ([`DEFAULT_SIZE`] unless `--fd-cache-size` says otherwise; 0 disables the cache), rounded
//!   down to a multiple of the shard count. So at
//!   least half the budget is always there for open files and directories, and the rest is
//!   given back on demand ([`FdCache::shed`], called when the budget runs dry).
//! - **Time bound**: an fd the guest has not used for [`IDLE_LIMIT`] is closed. Each entry has
//!   a referenced bit, set by every [`FdCache::get`] and [`FdCache::insert`]; the reaper thread
//!   sweeps every [`SWEEP_PERIOD`] (2/5 of the limit): it closes the entries whose bit is clear
//!   and clears the others. An entry last used at `t` is thus closed by the second sweep after
//!   `t`, by `t + 2 × SWEEP_PERIOD`, within `IDLE_LIMIT`. The reaper sleeps while the cache is empty (woken by the
//!   insert that fills it again) and exits with the cache.
//! - An inode is cached under its node ID; the fd of a dead inode is dropped when the inode
//!   leaves the table ([`FdCache::evict`]). The fd of a name the guest unlinks or renames over
//!   is dropped first, an fd found to be on a deleted inode (link count 0) by GETATTR is
//!   dropped, and when the host filesystem is full every fd on a deleted inode is dropped before
//!   the request is retried (`PassthroughFs::reclaim_deleted`).
//! - When a shard is full, a new fd replaces a randomly chosen one (and takes over its token):
//!   unlike LRU, random replacement keeps most hits when the guest sweeps over slightly more
//!   inodes than fit, as `ls -l` of a big directory in a loop does.
//! - Locks: one mutex per shard, held for a hash-map update or one shard's sweep, never across
//!   a syscall; replaced, swept and shed fds are closed after the lock is released.

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::thread::Thread;
use std::time::Duration;

use super::fd_budget::{FdBudget, FdToken};
use super::inode_table::SHARD_BITS;
use crate::sync::lock;

/// Default upper bound of cached fds, whatever the budget (`--fd-cache-size`): each pins a
/// kernel `struct file`, dentry and inode (about 1 KiB), and with the daemon's own fds it keeps
/// the daemon under 1,024 fds however many inodes the guest holds.
pub const DEFAULT_SIZE: usize = 960;

/// How long an fd the guest does not use stays cached, at most.
pub const IDLE_LIMIT: Duration = Duration::from_secs(1);

/// How often the reaper sweeps a non-empty cache (see the time-bound invariant): two periods
/// and the reaper's wake-up latency fit in [`IDLE_LIMIT`].
pub const SWEEP_PERIOD: Duration = Duration::from_millis(IDLE_LIMIT.as_millis() as u64 * 2 / 5);

const SHARDS: usize = 16;

struct Cached {
    nodeid: u64,
    fd: Arc<OwnedFd>,
    /// Used since the last sweep.
    referenced: bool,
    _token: FdToken,
}

#[derive(Default)]
struct Shard {
    /// Node ID → index in `slots`.
    index: HashMap<u64, usize>,
    slots: Vec<Cached>,
    /// xorshift state for picking a victim.
    rng: u64,
}

impl Shard {
    fn remove_at(&mut self, i: usize) -> Cached {
        let gone = self.slots.swap_remove(i);
        self.index.remove(&gone.nodeid);
        if let Some(moved) = self.slots.get(i) {
            self.index.insert(moved.nodeid, i);
        }
        gone
    }

    fn victim(&mut self) -> usize {
        let mut x = self.rng | 1;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng = x;
        (x % self.slots.len() as u64) as usize
    }

    /// Removes the entries not used since the last sweep into `out`, clears the others' bits.
    fn sweep(&mut self, out: &mut Vec<Cached>) {
        let mut i = 0;
        while i < self.slots.len() {
            if self.slots[i].referenced {
                self.slots[i].referenced = false;
                i += 1;
            } else {
                out.push(self.remove_at(i));
            }
        }
    }
}

/// What the cache and its reaper thread share.
struct Shared {
    shards: [Mutex<Shard>; SHARDS],
    /// The reaper is asleep until the next insert (the cache was empty at its last sweep).
    reaper_idle: AtomicBool,
}

pub struct FdCache {
    shared: Arc<Shared>,
    per_shard: usize,
    budget: Arc<FdBudget>,
    /// The reaper thread, started by the first insert (so it runs confined like the request
    /// threads, which start after the sandbox is in force).
    reaper: OnceLock<Option<Thread>>,
}

fn shard_of(nodeid: u64) -> usize {
    // Node IDs carry their inode-table shard in their low bits: mix them with the sequence.
    ((nodeid ^ (nodeid >> SHARD_BITS) ^ (nodeid >> 9)) as usize) % SHARDS
}

impl FdCache {
    /// A cache of at most `size` fds paid from `budget`, as large as the budget allows (see the
    /// module invariants).
    pub fn new(budget: Arc<FdBudget>, size: usize) -> FdCache {
        let capacity = (budget.limit() / 2).min(size);
        FdCache {
            shared: Arc::new(Shared {
                shards: std::array::from_fn(|i| {
                    Mutex::new(Shard {
                        rng: 0x9e37_79b9_7f4a_7c15 ^ i as u64,
                        ..Shard::default()
                    })
                }),
                reaper_idle: AtomicBool::new(false),
            }),
            per_shard: capacity / SHARDS,
            budget,
            reaper: OnceLock::new(),
        }
    }

    /// How many fds the cache may hold.
    pub fn capacity(&self) -> usize {
        self.per_shard * SHARDS
    }

    /// How many fds it holds.
    pub fn len(&self) -> usize {
        self.shared.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The cached fd of `nodeid`, if any.
    pub fn get(&self, nodeid: u64) -> Option<Arc<OwnedFd>> {
        let mut shard = lock(&self.shared.shards[shard_of(nodeid)]);
        let i = *shard.index.get(&nodeid)?;
        let slot = &mut shard.slots[i];
        slot.referenced = true;
        Some(Arc::clone(&slot.fd))
    }

    /// Caches `fd` for `nodeid` if there is room or budget for it, else replaces a random entry
    /// of its shard; without either (the budget is spent on open files), `fd` is not kept.
    pub fn insert(&self, nodeid: u64, fd: Arc<OwnedFd>) {
        if self.per_shard == 0 || !self.reaper_running() {
            return;
        }
        let dropped = {
            let mut shard = lock(&self.shared.shards[shard_of(nodeid)]);
            if let Some(&i) = shard.index.get(&nodeid) {
                shard.slots[i].referenced = true;
                Some(std::mem::replace(&mut shard.slots[i].fd, fd))
            } else {
                let fresh = if shard.slots.len() < self.per_shard {
                    self.budget.try_take()
                } else {
                    None
                };
                let (token, old) = match fresh {
                    Some(t) => (t, None),
                    // Unlock first, then close.
                    None if shard.slots.is_empty() => return drop((shard, fd)),
                    None => {
                        let v = shard.victim();
                        let old = shard.remove_at(v);
                        (old._token, Some(old.fd))
                    }
                };
                let i = shard.slots.len();
                shard.slots.push(Cached {
                    nodeid,
                    fd,
                    referenced: true,
                    _token: token,
                });
                shard.index.insert(nodeid, i);
                old
            }
        };
        drop(dropped);
        // A plain load first: the swap (a write to a line every queue thread shares) only
        // when the reaper really sleeps.
        if self.shared.reaper_idle.load(Ordering::Acquire)
            && self.shared.reaper_idle.swap(false, Ordering::AcqRel)
        {
            if let Some(Some(t)) = self.reaper.get() {
                t.unpark();
            }
        }
    }

    /// Starts the reaper on first use; false if it cannot run (then nothing is cached, since
    /// nothing would bound the fds in time).
    fn reaper_running(&self) -> bool {
        self.reaper
            .get_or_init(|| {
                let weak = Arc::downgrade(&self.shared);
                match std::thread::Builder::new()
                    .name("fd-cache-reaper".into())
                    .spawn(move || reap(weak))
                {
                    Ok(h) => Some(h.thread().clone()),
                    Err(e) => {
                        log::warn!("cannot start the fd cache's reaper thread ({e}): no fd cache");
                        None
                    }
                }
            })
            .is_some()
    }

    /// Forgets the fd of `nodeid` (the inode left the table, or its name is being unlinked).
    pub fn evict(&self, nodeid: u64) {
        let gone = {
            let mut shard = lock(&self.shared.shards[shard_of(nodeid)]);
            let i = shard.index.get(&nodeid).copied();
            i.map(|i| shard.remove_at(i))
        };
        drop(gone);
    }

    /// Every cached entry, for a check outside the locks ([`FdCache::evict_fd`] then).
    pub fn snapshot(&self) -> Vec<(u64, Arc<OwnedFd>)> {
        let mut all = Vec::new();
        for s in &self.shared.shards {
            let shard = lock(s);
            all.extend(shard.slots.iter().map(|c| (c.nodeid, Arc::clone(&c.fd))));
        }
        all
    }

    /// Forgets the fd of `nodeid` if it is still `fd`.
    pub fn evict_fd(&self, nodeid: u64, fd: &Arc<OwnedFd>) {
        let gone = {
            let mut shard = lock(&self.shared.shards[shard_of(nodeid)]);
            match shard.index.get(&nodeid) {
                Some(&i) if Arc::ptr_eq(&shard.slots[i].fd, fd) => Some(shard.remove_at(i)),
                _ => None,
            }
        };
        drop(gone);
    }

    /// Gives up to `n` cached fds (and their budget) back; returns how many.
    pub fn shed(&self, n: usize) -> usize {
        let mut shed = Vec::new();
        for s in &self.shared.shards {
            if shed.len() >= n {
                break;
            }
            let mut shard = lock(s);
            while shed.len() < n && !shard.slots.is_empty() {
                let v = shard.victim();
                shed.push(shard.remove_at(v));
            }
        }
        shed.len()
    }

    /// One sweep of the time bound (what the reaper does every [`SWEEP_PERIOD`]): closes the
    /// fds not used since the previous sweep; returns how many are left.
    pub fn sweep(&self) -> usize {
        self.shared.sweep()
    }

    /// Drops every cached fd.
    pub fn clear(&self) {
        for s in &self.shared.shards {
            let old = {
                let mut shard = lock(s);
                shard.index.clear();
                std::mem::take(&mut shard.slots)
            };
            drop(old);
        }
    }
}

impl Drop for FdCache {
    fn drop(&mut self) {
        if let Some(Some(t)) = self.reaper.get() {
            t.unpark();
        }
    }
}

impl Shared {
    fn len(&self) -> usize {
        self.shards.iter().map(|s| lock(s).slots.len()).sum()
    }

    fn sweep(&self) -> usize {
        let mut gone = Vec::new();
        let mut left = 0;
        for s in &self.shards {
            let mut shard = lock(s);
            shard.sweep(&mut gone);
            left += shard.slots.len();
            drop(shard);
            // Closed outside the lock.
            gone.clear();
        }
        left
    }
}

/// The reaper thread: sweeps every [`SWEEP_PERIOD`] while the cache holds fds, sleeps while it
/// is empty, ends with the cache.
fn reap(shared: Weak<Shared>) {
    loop {
        std::thread::park_timeout(SWEEP_PERIOD);
        let Some(s) = shared.upgrade() else { return };
        if s.sweep() == 0 {
            // Announce the sleep, then look again: an insert between the sweep and the store
            // would otherwise not wake us.
            s.reaper_idle.store(true, Ordering::Release);
            if s.len() == 0 {
                drop(s);
                while shared
                    .upgrade()
                    .is_some_and(|s| s.reaper_idle.load(Ordering::Acquire))
                {
                    std::thread::park();
                }
            } else {
                s.reaper_idle.store(false, Ordering::Release);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fd() -> Arc<OwnedFd> {
        Arc::new(std::fs::File::open("/").unwrap().into())
    }

    #[test]
    fn hit_evict_and_clear_give_the_budget_back() {
        let budget = FdBudget::new(1000);
        let c = FdCache::new(Arc::clone(&budget), usize::MAX);
        assert_eq!(c.capacity(), 496);
        assert!(c.get(16).is_none());
        c.insert(16, fd());
        c.insert(32, fd());
        assert!(c.get(16).is_some() && c.get(32).is_some());
        assert_eq!(budget.in_use(), 2);
        // Inserting again replaces the fd, not the token.
        c.insert(16, fd());
        assert_eq!((budget.in_use(), c.len()), (2, 2));
        c.evict(16);
        c.evict(48);
        assert!(c.get(16).is_none() && c.get(32).is_some());
        assert_eq!(budget.in_use(), 1);
        c.clear();
        assert!(c.is_empty());
        assert_eq!(budget.in_use(), 0);
    }

    #[test]
    fn never_exceeds_capacity_and_keeps_most_of_a_slightly_larger_sweep() {
        let budget = FdBudget::new(64 * SHARDS * 2);
        let c = FdCache::new(Arc::clone(&budget), usize::MAX);
        let cap = c.capacity();
        assert_eq!(cap, 64 * SHARDS);
        let ids: Vec<u64> = (1..=(cap as u64 * 11 / 10)).map(|n| n << 4).collect();
        let mut hits = 0;
        for round in 0..5 {
            for &id in &ids {
                if c.get(id).is_some() {
                    hits += usize::from(round > 0);
                } else {
                    c.insert(id, fd());
                }
            }
            assert!(c.len() <= cap);
            assert_eq!(budget.in_use(), c.len());
        }
        // LRU would hit nothing here; random replacement keeps well over half.
        assert!(hits > ids.len() * 4 / 2, "{hits} hits of {}", ids.len() * 4);
    }

    #[test]
    fn a_spent_budget_is_not_taken_and_shed_gives_it_back() {
        let budget = FdBudget::new(64);
        let c = FdCache::new(Arc::clone(&budget), usize::MAX);
        let held: Vec<_> = (0..60).map(|_| budget.take().unwrap()).collect();
        for n in 1..=20u64 {
            c.insert(n << 4, fd());
        }
        assert_eq!(budget.in_use(), 64, "only what was left is taken");
        assert_eq!(c.len(), 4);
        assert_eq!(c.shed(3), 3);
        assert_eq!(budget.in_use(), 61);
        assert_eq!(c.shed(10), 1);
        assert!(c.is_empty());
        drop(held);
        // A budget too small for a cache: nothing is cached.
        let tiny = FdCache::new(FdBudget::new(20), usize::MAX);
        tiny.insert(16, fd());
        assert!(tiny.is_empty());
    }

    #[test]
    fn an_fd_not_used_for_two_sweeps_is_closed_and_a_used_one_stays() {
        let budget = FdBudget::new(1000);
        let c = FdCache::new(Arc::clone(&budget), DEFAULT_SIZE);
        c.insert(16, fd());
        c.insert(32, fd());
        assert_eq!(c.sweep(), 2, "both were used since the last sweep");
        assert!(c.get(16).is_some());
        assert_eq!(c.sweep(), 1, "32 was not used for a whole sweep period");
        assert!(c.get(32).is_none());
        assert_eq!(c.sweep(), 0);
        assert_eq!(budget.in_use(), 0);
    }

    #[test]
    fn two_sweep_periods_fit_in_the_idle_limit() {
        // What the time bound rests on: an fd is closed by the second sweep after its last use.
        assert!(2 * SWEEP_PERIOD < IDLE_LIMIT);
    }

    #[test]
    fn the_reaper_closes_idle_fds_and_sleeps_when_empty() {
        let budget = FdBudget::new(1000);
        let c = FdCache::new(Arc::clone(&budget), DEFAULT_SIZE);
        for round in 0..2 {
            let start = std::time::Instant::now();
            c.insert(16, fd());
            while !c.is_empty() {
                // Two sweep periods fit in IDLE_LIMIT (the test above); the slack is for the
                // reaper thread's wake-up under a loaded `cargo test` (the integration tests
                // check the 1 s / 2 s bounds on a real daemon: tests/fd_time_bound.rs).
                assert!(start.elapsed() < 2 * IDLE_LIMIT, "round {round}");
                std::thread::sleep(Duration::from_millis(10));
            }
            assert_eq!(budget.in_use(), 0);
            // Asleep now: the next insert wakes it (the second round checks it does).
            std::thread::sleep(SWEEP_PERIOD * 2);
        }
    }

    #[test]
    fn the_size_caps_the_cache_and_zero_disables_it() {
        let budget = FdBudget::new(100_000);
        assert_eq!(
            FdCache::new(Arc::clone(&budget), DEFAULT_SIZE).capacity(),
            DEFAULT_SIZE
        );
        let off = FdCache::new(Arc::clone(&budget), 0);
        off.insert(16, fd());
        assert!(off.is_empty());
        assert_eq!(budget.in_use(), 0);
    }
}
