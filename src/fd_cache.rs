//! A bounded cache of O_PATH fds of handle-backed inodes.
//!
//! With file handles an inode holds no fd, so an operation on it would open one
//! (`open_by_handle_at`) and close it again: three syscalls for a GETATTR instead of one. While
//! fds are plentiful, inodes keep the O_PATH fd their LOOKUP opened (or the first operation
//! opened) here instead; when they are not, the cache gives them back, so a guest that holds a
//! million inodes and never forgets any still cannot make the daemon run out.
//!
//! Invariants:
//! - Every cached fd holds one [`FdToken`] of the guest's budget, and the cache holds at most
//!   [`FdCache::capacity`] of them: at most half the budget and at most [`MAX_CACHED`]. So at
//!   least half the budget is always there for open files and directories, and the rest is
//!   given back on demand ([`FdCache::shed`], called when the budget runs dry).
//! - An inode is cached under its node ID; the fd of a dead inode is dropped when the inode
//!   leaves the table ([`FdCache::evict`]). A cached fd must not keep a deleted file's data
//!   alive: the fd of a name the guest unlinks or renames over is dropped first, an fd found
//!   to be on a deleted inode (link count 0) by GETATTR is dropped, and when the host
//!   filesystem is full every fd on a deleted inode is dropped before the request is retried
//!   (`PassthroughFs::reclaim_deleted`).
//! - When a shard is full, a new fd replaces a randomly chosen one (and takes over its token):
//!   unlike LRU, random replacement keeps most hits when the guest sweeps over slightly more
//!   inodes than fit, as `ls -l` of a big directory in a loop does.
//! - Locks: one mutex per shard, held for a hash-map update, never across a syscall; replaced
//!   and shed fds are closed after the lock is released.

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::fd_budget::{FdBudget, FdToken};

/// Upper bound of cached fds, whatever the budget: each pins a kernel `struct file`, dentry and
/// inode (about 1 KiB).
pub const MAX_CACHED: usize = 16384;

const SHARDS: usize = 16;

struct Cached {
    nodeid: u64,
    fd: Arc<OwnedFd>,
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
}

pub struct FdCache {
    shards: [Mutex<Shard>; SHARDS],
    per_shard: usize,
    budget: Arc<FdBudget>,
}

fn shard_of(nodeid: u64) -> usize {
    // Node IDs carry their inode-table shard in the low 4 bits: mix them with the sequence.
    ((nodeid ^ (nodeid >> 4) ^ (nodeid >> 9)) as usize) % SHARDS
}

impl FdCache {
    /// A cache paid from `budget`, as large as the budget allows (see the module invariants).
    pub fn new(budget: Arc<FdBudget>) -> FdCache {
        let capacity = (budget.limit() / 2).min(MAX_CACHED);
        FdCache {
            shards: std::array::from_fn(|i| {
                Mutex::new(Shard {
                    rng: 0x9e37_79b9_7f4a_7c15 ^ i as u64,
                    ..Shard::default()
                })
            }),
            per_shard: capacity / SHARDS,
            budget,
        }
    }

    /// How many fds the cache may hold.
    pub fn capacity(&self) -> usize {
        self.per_shard * SHARDS
    }

    /// How many fds it holds.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| lock(s).slots.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The cached fd of `nodeid`, if any.
    pub fn get(&self, nodeid: u64) -> Option<Arc<OwnedFd>> {
        let shard = lock(&self.shards[shard_of(nodeid)]);
        let i = *shard.index.get(&nodeid)?;
        Some(Arc::clone(&shard.slots[i].fd))
    }

    /// Caches `fd` for `nodeid` if there is room or budget for it, else replaces a random entry
    /// of its shard; without either (the budget is spent on open files), `fd` is not kept.
    pub fn insert(&self, nodeid: u64, fd: Arc<OwnedFd>) {
        if self.per_shard == 0 {
            return;
        }
        let dropped = {
            let mut shard = lock(&self.shards[shard_of(nodeid)]);
            if let Some(&i) = shard.index.get(&nodeid) {
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
                    _token: token,
                });
                shard.index.insert(nodeid, i);
                old
            }
        };
        drop(dropped);
    }

    /// Forgets the fd of `nodeid` (the inode left the table, or its name is being unlinked).
    pub fn evict(&self, nodeid: u64) {
        let gone = {
            let mut shard = lock(&self.shards[shard_of(nodeid)]);
            let i = shard.index.get(&nodeid).copied();
            i.map(|i| shard.remove_at(i))
        };
        drop(gone);
    }

    /// Every cached entry, for a check outside the locks ([`FdCache::evict_fd`] then).
    pub fn snapshot(&self) -> Vec<(u64, Arc<OwnedFd>)> {
        let mut all = Vec::new();
        for s in &self.shards {
            let shard = lock(s);
            all.extend(shard.slots.iter().map(|c| (c.nodeid, Arc::clone(&c.fd))));
        }
        all
    }

    /// Forgets the fd of `nodeid` if it is still `fd`.
    pub fn evict_fd(&self, nodeid: u64, fd: &Arc<OwnedFd>) {
        let gone = {
            let mut shard = lock(&self.shards[shard_of(nodeid)]);
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
        for s in &self.shards {
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

    /// Drops every cached fd.
    pub fn clear(&self) {
        for s in &self.shards {
            let old = std::mem::take(&mut lock(s).slots);
            lock(s).index.clear();
            drop(old);
        }
    }
}

fn lock(s: &Mutex<Shard>) -> MutexGuard<'_, Shard> {
    s.lock().unwrap_or_else(|e| e.into_inner())
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
        let c = FdCache::new(Arc::clone(&budget));
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
        let c = FdCache::new(Arc::clone(&budget));
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
        let c = FdCache::new(Arc::clone(&budget));
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
        let tiny = FdCache::new(FdBudget::new(20));
        tiny.insert(16, fd());
        assert!(tiny.is_empty());
    }
}
