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
//!   `t`, by `t + 2 × SWEEP_PERIOD`, within `IDLE_LIMIT`. The reaper runs only while the cache
//!   holds fds: an [`OnDemand`] thread, woken by the insert that fills an empty cache, that
//!   stops sweeping once the cache is empty and ends after [`REAPER_LINGER`] (issue 36: an
//!   idle daemon keeps no thread). An insert that cannot start the reaper empties the cache:
//!   nothing is cached that nothing would close in time.
//! - An inode is cached under its node ID; the fd of a dead inode is dropped when the inode
//!   leaves the table ([`FdCache::evict`]). The fd of a name the guest unlinks or renames over
//!   is dropped first, an fd found to be on a deleted inode (link count 0) by GETATTR is
//!   dropped, and when the host filesystem is full every fd on a deleted inode is dropped before
//!   the request is retried (`PassthroughFs::reclaim_deleted`).
//! - **Admission**: the first [`FIRST_USE`] fds (fewer with a smaller size or budget) are kept
//!   for any inode the guest uses; the rest of the capacity only for an inode the guest comes
//!   back to: one whose fd had to be opened by handle before and was not kept ([`Ghosts`]). A
//!   guest that uses each inode once, as a walk of a million files does (READDIRPLUS, LOOKUP,
//!   GETATTR, never again), so keeps the daemon under 1,024 fds however many inodes it holds,
//!   while one that sweeps the same 10,000 inodes again and again (`stat` or `ls -l` in a loop,
//!   a build checking its files) pays one `open_by_handle_at` + `close` per inode, not per
//!   request: a GETATTR then costs half the CPU (docs/benchmarks.md, issue 14 item 3).
//! - When a shard is full (for the inode at hand), a new fd is not kept: the entries stay until
//!   they go idle (the time bound), and the fd just opened is closed by the request that opened
//!   it. Unlike LRU (and better than random replacement), this keeps every cached entry hitting
//!   when the guest sweeps over more inodes than fit, and a miss costs no replacement: the fd
//!   closed is the one just used, not a cold one.
//! - Locks: one mutex per shard, held for a hash-map update or one shard's sweep, never across
//!   a syscall; replaced, swept and shed fds are closed after the lock is released.

use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use super::inode_index::SHARD_BITS;
use crate::metrics::striped::Striped;
use crate::on_demand::OnDemand;
use crate::passthrough::state::fd_budget::{FdBudget, FdToken};
use crate::passthrough::state::own_ids::{own_id_hash, OwnIdMap};
use crate::sync::lock;

/// Default upper bound of cached fds, whatever the budget (`--fd-cache-size`): each pins a
/// kernel `struct file`, dentry and inode (about 1 KiB), so at most ~16 MiB of kernel memory,
/// and only for inodes the guest comes back to within [`IDLE_LIMIT`] (see [`FIRST_USE`]).
pub const DEFAULT_SIZE: usize = 16_384;

/// Cached fds at most for inodes the guest has not come back to (the admission invariant):
/// with the daemon's own fds, under 1,024 fds for a guest that uses each inode once. The
/// daemon's own fds are 54-63 (listening and pid-file fds kept for an in-place upgrade, an
/// epoll set and two eventfds per queue thread, the queues' eventfds, the guest memory's fds),
/// and a walk holds its directories and, per request in flight, an open file or an fd opened by
/// handle on top: up to 122 fds beyond the cache in `benches/million_files.rs` (16 in flight),
/// 63 in `tests/inode_walk.rs` (one at a time); 832 leaves room for both (960 did for neither).
pub const FIRST_USE: usize = 832;

/// Ghost entries per shard ([`Ghosts`]): 16 × 4,096 in all, 256 KiB once every one is written,
/// about 4 times the node IDs a full default cache holds beyond [`FIRST_USE`], so that most of a
/// sweep as large as the cache finds its ghosts (a slot is overwritten by another inode of the
/// sweep with probability 1 - e^(-n/65,536): 14 % for n = 10,000).
const GHOSTS_PER_SHARD: usize = 4096;

/// How long an fd the guest does not use stays cached, at most.
pub const IDLE_LIMIT: Duration = Duration::from_secs(1);

/// How often the reaper sweeps a non-empty cache (see the time-bound invariant): two periods
/// and the reaper's wake-up latency fit in [`IDLE_LIMIT`].
pub const SWEEP_PERIOD: Duration = Duration::from_millis(IDLE_LIMIT.as_millis() as u64 * 2 / 5);

const SHARDS: usize = 16;

/// How long the reaper's thread waits for the cache to fill again before it ends (a dropped
/// cache's reaper ends at its next sweep and this).
const REAPER_LINGER: Duration = Duration::from_secs(1);

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
    index: OwnIdMap<usize>,
    slots: Vec<Cached>,
    /// xorshift state for picking a victim.
    rng: u64,
    /// The node IDs whose fd had to be opened by handle and was not kept.
    ghosts: Ghosts,
}

/// Node IDs (a 32-bit fingerprint of each) whose fd a request had to open by handle and the
/// cache did not keep, in a direct-mapped table: recording one overwrites whatever inode held its
/// slot, so it remembers recent misses, not all, in a fixed [`GHOSTS_PER_SHARD`] slots per shard
/// (allocated at the first record; nothing while the cache keeps every fd). A fingerprint that
/// matches another inode's only admits that inode's fd, which the capacity still bounds.
#[derive(Default)]
struct Ghosts(Vec<u32>);

impl Ghosts {
    fn slot(nodeid: u64) -> (usize, u32) {
        // Node IDs' own hash (its low bits carry the product's high ones), not the shard's bits.
        let i = own_id_hash(nodeid) as usize % GHOSTS_PER_SHARD;
        (i, ((nodeid ^ (nodeid >> 32)) as u32).max(1))
    }

    fn contains(&self, nodeid: u64) -> bool {
        let (i, print) = Ghosts::slot(nodeid);
        self.0.get(i) == Some(&print)
    }

    fn record(&mut self, nodeid: u64) {
        if self.0.is_empty() {
            self.0 = vec![0; GHOSTS_PER_SHARD];
        }
        let (i, print) = Ghosts::slot(nodeid);
        self.0[i] = print;
    }
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
    /// The reaper does not sweep until the next insert wakes it (no thread yet, or the cache
    /// was empty at its last sweep).
    reaper_idle: AtomicBool,
}

pub struct FdCache {
    shared: Arc<Shared>,
    /// Slots per shard, and of them those for any inode ([`FIRST_USE`]); the others are for
    /// inodes the guest comes back to.
    per_shard: usize,
    first_use_per_shard: usize,
    budget: Arc<FdBudget>,
    /// The reaper, started by an insert into an empty cache (so it runs confined like the
    /// request threads, which start after the sandbox is in force).
    reaper: Arc<OnDemand>,
    /// [`FdCache::get`]s that found an fd (slot 0) and that did not (slot 1).
    lookups: Striped<2>,
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
        let shared = Arc::new(Shared {
            shards: std::array::from_fn(|i| {
                Mutex::new(Shard {
                    rng: 0x9e37_79b9_7f4a_7c15 ^ i as u64,
                    ..Shard::default()
                })
            }),
            reaper_idle: AtomicBool::new(true),
        });
        let weak = Arc::downgrade(&shared);
        FdCache {
            reaper: OnDemand::new("fd-cache-reaper", REAPER_LINGER, move || reap(&weak)),
            shared,
            per_shard: capacity / SHARDS,
            first_use_per_shard: capacity.min(FIRST_USE) / SHARDS,
            budget,
            lookups: Striped::default(),
        }
    }

    /// [`FdCache::get`]s so far that found an fd, and that did not.
    pub fn hits_and_misses(&self) -> (u64, u64) {
        (self.lookups.get(0), self.lookups.get(1))
    }

    /// How many fds the cache may hold.
    pub fn capacity(&self) -> usize {
        self.per_shard * SHARDS
    }

    /// Whether `shard` keeps a new fd for `nodeid`: below [`FIRST_USE`] for any inode, up to
    /// the capacity for one the guest came back to.
    fn admits(&self, shard: &Shard, nodeid: u64) -> bool {
        let n = shard.slots.len();
        n < self.first_use_per_shard || (n < self.per_shard && shard.ghosts.contains(nodeid))
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
        self.find(nodeid, false).ok()
    }

    /// The cached fd of `nodeid`, or on a miss whether its shard has room for one (see
    /// [`FdCache::has_room`]), for a caller that then opens the fd by handle: it caches it only
    /// if so, and otherwise spares the insert's lock and the `Arc`. Such a miss without room is
    /// remembered ([`Ghosts`]): the inode's next one finds room if the cache has any.
    pub fn get_or_room(&self, nodeid: u64) -> Result<Arc<OwnedFd>, bool> {
        self.find(nodeid, true)
    }

    /// [`FdCache::get_or_room`]; a miss without room is remembered only if `remember`.
    fn find(&self, nodeid: u64, remember: bool) -> Result<Arc<OwnedFd>, bool> {
        let found = {
            let mut shard = lock(&self.shared.shards[shard_of(nodeid)]);
            match shard.index.get(&nodeid).copied() {
                Some(i) => {
                    let slot = &mut shard.slots[i];
                    slot.referenced = true;
                    Ok(Arc::clone(&slot.fd))
                }
                None => {
                    let room = self.admits(&shard, nodeid);
                    if !room && remember && self.per_shard > self.first_use_per_shard {
                        shard.ghosts.record(nodeid);
                    }
                    Err(room)
                }
            }
        };
        self.lookups.add(usize::from(found.is_err()), 1);
        found
    }

    /// Whether an [`FdCache::insert`] for `nodeid` would keep a new fd (its shard has room and
    /// it is not cached yet), for a caller that would open the fd only to cache it. A hint:
    /// the insert itself decides.
    pub fn has_room(&self, nodeid: u64) -> bool {
        if self.per_shard == 0 {
            return false;
        }
        let shard = lock(&self.shared.shards[shard_of(nodeid)]);
        self.admits(&shard, nodeid) && !shard.index.contains_key(&nodeid)
    }

    /// Caches `fd` for `nodeid` if its shard has room and the budget an fd for it; else (a
    /// full shard, or the budget spent on open files) `fd` is not kept.
    pub fn insert(&self, nodeid: u64, fd: Arc<OwnedFd>) {
        if self.per_shard == 0 {
            return;
        }
        let dropped = {
            let mut shard = lock(&self.shared.shards[shard_of(nodeid)]);
            if let Some(&i) = shard.index.get(&nodeid) {
                shard.slots[i].referenced = true;
                Some(std::mem::replace(&mut shard.slots[i].fd, fd))
            } else {
                let fresh = if self.admits(&shard, nodeid) {
                    self.budget.try_take()
                } else {
                    None
                };
                // Unlock first, then close.
                let Some(token) = fresh else {
                    return drop((shard, fd));
                };
                let i = shard.slots.len();
                shard.slots.push(Cached {
                    nodeid,
                    fd,
                    referenced: true,
                    _token: token,
                });
                shard.index.insert(nodeid, i);
                None
            }
        };
        drop(dropped);
        // A plain load first: the swap (a write to a line every queue thread shares) only
        // when the reaper really sleeps.
        if self.shared.reaper_idle.load(Ordering::Acquire)
            && self.shared.reaper_idle.swap(false, Ordering::AcqRel)
        {
            if let Err(e) = self.reaper.wake() {
                log::warn!("cannot start the fd cache's reaper thread ({e}): fds not cached");
                self.clear();
                self.shared.reaper_idle.store(true, Ordering::Release);
            }
        }
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
                shard.ghosts = Ghosts::default();
                std::mem::take(&mut shard.slots)
            };
            drop(old);
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

/// One run of the reaper: sweeps every [`SWEEP_PERIOD`] while the cache holds fds, returns
/// once it is empty (the next insert into the empty cache wakes it again).
fn reap(shared: &Weak<Shared>) {
    loop {
        std::thread::sleep(SWEEP_PERIOD);
        let Some(s) = shared.upgrade() else { return };
        if s.sweep() == 0 {
            // Announce the end, then look again: an insert between the sweep and the store
            // would otherwise not wake us.
            s.reaper_idle.store(true, Ordering::Release);
            if s.len() == 0 {
                return;
            }
            s.reaper_idle.store(false, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests;
