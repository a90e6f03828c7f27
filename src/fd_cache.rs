//! A small cache of O_PATH fds of handle-backed inodes.
//!
//! With file handles an inode holds no fd, so every operation on it opens one
//! (`open_by_handle_at`) and closes it again. The inodes the guest uses over and over (the
//! directory it works in, a file it stats in a loop) keep theirs here instead.
//!
//! Invariants: at most [`SLOTS`] fds (part of the daemon's reserve, not of the guest's budget:
//! the count stays small and fixed); a slot is direct-mapped from the node ID, and a new inode
//! simply replaces the one in its slot; the fd of a dead inode is dropped when the inode leaves
//! the table ([`FdCache::evict`]) so it does not pin an unlinked file. Slot locks are held for a
//! pointer swap, never across a syscall: the evicted fd is closed after the lock is released.

use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};

/// Number of cached fds.
pub const SLOTS: usize = 8;

type Slot = Mutex<Option<(u64, Arc<OwnedFd>)>>;

pub struct FdCache {
    slots: [Slot; SLOTS],
}

impl Default for FdCache {
    fn default() -> Self {
        FdCache {
            slots: std::array::from_fn(|_| Mutex::new(None)),
        }
    }
}

fn slot_of(nodeid: u64) -> usize {
    // Node IDs carry their inode-table shard in the low 4 bits: mix them with the sequence.
    ((nodeid ^ (nodeid >> 4)) as usize) % SLOTS
}

impl FdCache {
    fn slot(&self, nodeid: u64) -> std::sync::MutexGuard<'_, Option<(u64, Arc<OwnedFd>)>> {
        self.slots[slot_of(nodeid)]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// The cached fd of `nodeid`, if any.
    pub fn get(&self, nodeid: u64) -> Option<Arc<OwnedFd>> {
        match &*self.slot(nodeid) {
            Some((id, fd)) if *id == nodeid => Some(Arc::clone(fd)),
            _ => None,
        }
    }

    /// Caches `fd` for `nodeid`, replacing whatever its slot held.
    pub fn insert(&self, nodeid: u64, fd: Arc<OwnedFd>) {
        let old = self.slot(nodeid).replace((nodeid, fd));
        drop(old);
    }

    /// Forgets the fd of `nodeid` (the inode left the table).
    pub fn evict(&self, nodeid: u64) {
        let old = {
            let mut slot = self.slot(nodeid);
            match &*slot {
                Some((id, _)) if *id == nodeid => slot.take(),
                _ => None,
            }
        };
        drop(old);
    }

    /// Drops every cached fd.
    pub fn clear(&self) {
        for s in &self.slots {
            let old = s.lock().unwrap_or_else(|e| e.into_inner()).take();
            drop(old);
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
    fn hit_replace_and_evict() {
        let c = FdCache::default();
        assert!(c.get(16).is_none());
        c.insert(16, fd());
        assert!(c.get(16).is_some());
        // Another node ID of the same slot replaces it.
        let other = (1..1000u64)
            .map(|n| n << 4)
            .find(|&n| n != 16 && slot_of(n) == slot_of(16));
        let other = other.unwrap();
        c.insert(other, fd());
        assert!(c.get(16).is_none());
        assert!(c.get(other).is_some());
        // Evicting a node ID that is not cached leaves the slot alone.
        c.evict(16);
        assert!(c.get(other).is_some());
        c.evict(other);
        assert!(c.get(other).is_none());
        c.insert(32, fd());
        c.clear();
        assert!(c.get(32).is_none());
    }
}
