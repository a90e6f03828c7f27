//! The inode table: node IDs the guest holds, mapped to host inodes.
//!
//! A host inode is identified by [`InodeKey`] (inode number, device, mount ID), so hard links and
//! repeated lookups of one file map to one node ID. It is reached through an [`InodeSource`]:
//! a file handle (no fd held) or an O_PATH fd (one fd held, paid from the [`FdBudget`]).
//!
//! Invariants:
//! - An inode lives while its lookup count is above zero; the count goes up by one for every
//!   entry the guest is given (LOOKUP, CREATE, MKDIR, READDIRPLUS, ...) and down by FORGET. When
//!   it reaches zero the inode leaves the table, and its fd (if any) closes once the last request
//!   using it drops its copy of the [`Inode`] (the fd is shared by an `Arc`).
//!   The entries that count: LOOKUP, CREATE, MKNOD, MKDIR, SYMLINK, LINK, TMPFILE and each
//!   READDIRPLUS entry but `.`/`..`; FORGET and BATCH_FORGET take them back.
//! - The root (node ID 1) never dies and is in no shard. DESTROY clears everything but the root.
//! - A node ID is never handed out twice in a table's life: it names a slot of a shard's slab and
//!   that slot's epoch, raised each time the slot is vacated (`inode_index.rs`). A node ID the
//!   guest no longer holds gets `EBADF`, even once its slot holds another inode.
//! - With file handles a dead inode costs nothing, and a re-lookup makes a new node ID. A node
//!   whose inode the host deleted is stale (`ESTALE`); when the host reuses its inode number, a
//!   lookup compares handles ([`Inode::replaced_by`]) and gives the new file a new node ID, and
//!   the key maps to it (FORGET of the stale node leaves that mapping alone).
//! - The table is split into [`SHARDS`] shards, each behind its own mutex; the shard of a node ID
//!   is in its low bits and the shard of a key is in its hash, and an inode's node ID is made in
//!   its key's shard, so one shard holds both indexes for an inode it made. An inode
//!   [`InodeTable::restore`]d by a migration keeps the node ID the guest knows while its key is
//!   the destination host's: when the two shards differ, the key's shard holds an alias (key →
//!   node ID) and the node's shard the slot. No two shard locks are ever held at once (a lookup
//!   through an alias locks the key's shard, then the node's). No lock is held across a
//!   syscall: callers do their openat/statx/name_to_handle_at first and then call
//!   [`InodeTable::insert`], which re-checks under the lock. A request takes a copy of the
//!   inode's identity ([`Inode`], 48 bytes, no allocation) and drops the lock.
//! - Memory per inode held (the million-file walk of a guest that never forgets, see
//!   docs/benchmarks.md): one 48-byte slab slot (key, source with the handle inline, lookup
//!   count, epoch, type; no allocation of its own) and one 4-byte entry plus a control byte in
//!   the shard's key index (a hash table at 44-88 % load: 6-11 bytes a slot held). What only
//!   writeback caching needs lives in the shard's `guests` side table, made on first use.

use crate::sync::lock;
use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use super::host_inode::{replaced, InodeKey, InodeSource};
use crate::passthrough::state::guest_state::GuestState;
use crate::passthrough::state::inode_index::{
    hash_key, shard_of_hash, NodeId, Slot, Slots, SHARD_BITS,
};
pub use inode::{Inode, InodeFd};

/// The node ID of the shared directory itself.
pub const ROOT_ID: u64 = 1;

/// Number of independently locked parts of the table.
pub const SHARDS: usize = 1 << SHARD_BITS;

/// Invariants: `slots` holds the inodes whose node IDs carry this shard's number (see
/// `inode_index.rs` for its own); `guests` has entries only for live node IDs of `slots` (or
/// the root), made only under writeback caching, and loses them with the node; `aliases` maps a
/// key of this shard to a restored inode of another shard with that key (at most one per key,
/// removed when that inode dies), and is empty unless a migration's load put inodes back.
#[derive(Default)]
struct Shard {
    slots: Slots,
    aliases: HashMap<InodeKey, u64>,
    /// The writeback state of the nodes that needed one (regular files under writeback).
    guests: HashMap<u64, Arc<GuestState>>,
}

/// One shard, and its count readable without its lock (for the metrics).
#[derive(Default)]
struct Part {
    shard: Mutex<Shard>,
    /// `shard.slots.live()`, stored under the lock by every change.
    held: AtomicUsize,
}

impl Part {
    fn update_held(&self, shard: &Shard) {
        self.held.store(shard.slots.live(), Ordering::Relaxed);
    }
}

pub struct InodeTable {
    root: Inode,
    parts: Box<[Part]>,
}

/// The shard whose `guests` hold `nodeid`'s (the root's too: `ROOT_ID` is in no slab).
fn shard_of_id(nodeid: u64) -> usize {
    (nodeid as usize) & (SHARDS - 1)
}

fn ebadf() -> io::Error {
    io::Error::from_raw_os_error(libc::EBADF)
}

impl InodeTable {
    /// A table holding only the shared directory's inode as [`ROOT_ID`].
    pub fn new(mut root: Inode) -> InodeTable {
        root.nodeid = ROOT_ID;
        InodeTable {
            root,
            parts: (0..SHARDS).map(|_| Part::default()).collect(),
        }
    }

    /// The inode of `nodeid`, or `EBADF` for a node ID the guest does not hold.
    pub fn get(&self, nodeid: u64) -> io::Result<Inode> {
        if nodeid == ROOT_ID {
            return Ok(self.root.clone());
        }
        let id = NodeId::decode(nodeid).ok_or_else(ebadf)?;
        let shard = lock(&self.parts[id.shard].shard);
        shard
            .slots
            .by_id(id)
            .and_then(|s| Inode::of_slot(nodeid, s))
            .ok_or_else(ebadf)
    }

    /// The node ID of the inode with `key`, if the table has it (no lookup is taken).
    pub fn id_of(&self, key: &InodeKey) -> Option<u64> {
        if *key == self.root.key {
            return Some(ROOT_ID);
        }
        let hash = hash_key(key);
        let s = shard_of_hash(hash);
        let alias = {
            let shard = lock(&self.parts[s].shard);
            if let Some(slot) = shard.slots.find(hash, key) {
                return Some(Self::node_id(s, slot, shard.slots.get(slot)?));
            }
            *shard.aliases.get(key)?
        };
        self.aliased(alias, key, None, false).map(|i| i.nodeid)
    }

    /// The restored inode `nodeid` that an alias of `key` names, with one more lookup if
    /// `take`; `None` if it died meanwhile or `new` (the source of a fresh lookup of the key)
    /// [replaces](Inode::replaced_by) it. Called with no lock held.
    fn aliased(
        &self,
        nodeid: u64,
        key: &InodeKey,
        new: Option<&InodeSource>,
        take: bool,
    ) -> Option<Inode> {
        let id = NodeId::decode(nodeid)?;
        let mut shard = lock(&self.parts[id.shard].shard);
        let live = shard.slots.by_id_mut(id).filter(|s| s.key == *key)?;
        let old = live.source.as_ref()?;
        if new.is_some_and(|n| replaced(old, n)) {
            return None;
        }
        live.lookups += u64::from(take);
        Inode::of_slot(nodeid, live)
    }

    fn node_id(shard: usize, slot: u32, s: &Slot) -> u64 {
        NodeId {
            shard,
            slot,
            epoch: s.epoch,
        }
        .encode()
    }

    /// One more lookup of the inode with `key`, if the table has it.
    pub fn ref_existing(&self, key: &InodeKey) -> Option<Inode> {
        if *key == self.root.key {
            return Some(self.root.clone());
        }
        let hash = hash_key(key);
        let s = shard_of_hash(hash);
        let alias = {
            let mut shard = lock(&self.parts[s].shard);
            if let Some(slot) = shard.slots.find(hash, key) {
                return Self::take_ref(&mut shard, s, slot);
            }
            *shard.aliases.get(key)?
        };
        self.aliased(alias, key, None, true)
    }

    /// One more lookup of live slot `slot` of shard `s` (under its lock), and its inode.
    fn take_ref(shard: &mut Shard, s: usize, slot: u32) -> Option<Inode> {
        let live = shard.slots.get_mut(slot)?;
        live.lookups += 1;
        Inode::of_slot(Self::node_id(s, slot, live), live)
    }

    /// Adds `inode` with a lookup count of one; if another request added the same key meanwhile,
    /// takes one more lookup of that one instead (and `inode` is dropped, outside the lock).
    /// An existing inode of the same key that `inode` [replaces](Inode::replaced_by) keeps its
    /// node ID (stale, until the guest forgets it) but the key now maps to the new one.
    /// `ENFILE` when its shard has no slot left (2^28 - 1 inodes held in one shard).
    pub fn insert(&self, inode: Inode) -> io::Result<Inode> {
        if inode.key == self.root.key {
            return Ok(self.root.clone());
        }
        let hash = hash_key(&inode.key);
        let s = shard_of_hash(hash);
        let mut shard = lock(&self.parts[s].shard);
        if let Some(existing) = Self::same_local(&mut shard, s, hash, &inode) {
            return Ok(existing);
        }
        if let Some(&alias) = shard.aliases.get(&inode.key) {
            drop(shard);
            if let Some(existing) = self.aliased(alias, &inode.key, Some(&inode.source), true) {
                return Ok(existing);
            }
            shard = lock(&self.parts[s].shard);
            if let Some(existing) = Self::same_local(&mut shard, s, hash, &inode) {
                return Ok(existing);
            }
        }
        let Inode {
            key, kind, source, ..
        } = inode;
        let (slot, epoch) = shard
            .slots
            .fill(None, true, hash, key, kind, source.clone(), 1)
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ENFILE))?;
        self.parts[s].update_held(&shard);
        drop(shard);
        Ok(Inode {
            nodeid: NodeId {
                shard: s,
                slot,
                epoch,
            }
            .encode(),
            key,
            kind,
            source,
        })
    }

    /// One more lookup of the inode shard `s` maps `inode`'s key to, unless `inode` replaces it.
    fn same_local(shard: &mut Shard, s: usize, hash: u64, inode: &Inode) -> Option<Inode> {
        let old = shard.slots.find(hash, &inode.key)?;
        let same = shard
            .slots
            .get(old)
            .and_then(|o| o.source.as_ref())
            .is_some_and(|o| !replaced(o, &inode.source));
        if same {
            Self::take_ref(shard, s, old)
        } else {
            None
        }
    }

    /// Drops `n` lookups of `nodeid`; removes the inode when none are left (and then returns
    /// `true`). Unknown node IDs are ignored (FORGET has no reply).
    pub fn forget(&self, nodeid: u64, n: u64) -> bool {
        // `ROOT_ID` decodes to no slot.
        let Some(id) = NodeId::decode(nodeid) else {
            return false;
        };
        let removed = {
            let part = &self.parts[id.shard];
            let mut shard = lock(&part.shard);
            let Some(live) = shard.slots.by_id_mut(id) else {
                return false;
            };
            live.lookups = live.lookups.saturating_sub(n);
            if live.lookups > 0 {
                return false;
            }
            let key = live.key;
            let source = shard.slots.vacate(id.slot);
            part.update_held(&shard);
            (source, shard.guests.remove(&nodeid), key)
        };
        // A restored inode of another shard's key: its alias goes too.
        let key = removed.2;
        let k = shard_of_hash(hash_key(&key));
        if k != id.shard {
            let mut shard = lock(&self.parts[k].shard);
            if shard.aliases.get(&key) == Some(&nodeid) {
                shard.aliases.remove(&key);
            }
        }
        // The fd (if any) closes here, outside the lock, unless a request still uses it.
        drop(removed);
        true
    }

    /// Every inode the guest holds but the root, with its lookup count: what a migration saves.
    /// Takes each shard's lock in turn (the frontend stopped the queues: nothing changes).
    pub fn held(&self) -> Vec<(Inode, u64)> {
        let mut all = Vec::with_capacity(self.len());
        for (s, part) in self.parts.iter().enumerate() {
            let shard = lock(&part.shard);
            all.extend(shard.slots.iter().filter_map(|(i, slot)| {
                Some((
                    Inode::of_slot(Self::node_id(s, i, slot), slot)?,
                    slot.lookups,
                ))
            }));
        }
        all
    }

    /// Puts `inode` in the table as `nodeid` with `lookups` (a migration's load, into a table
    /// that holds only the root): the node IDs the guest knows are kept, and new ones never
    /// take a slot below the highest restored one of their shard. `EEXIST` for a node ID the
    /// table has (or the root, 0, or one no shard can hold) or no lookups; an inode whose key
    /// the table already maps (two saved inodes that are one file here) and an
    /// [`InodeSource::Invalid`] one are reached by node ID only.
    pub fn restore(&self, inode: Inode, nodeid: u64, lookups: u64) -> io::Result<()> {
        let eexist = || io::Error::from_raw_os_error(libc::EEXIST);
        let id = NodeId::decode(nodeid)
            .filter(|_| lookups > 0)
            .ok_or_else(eexist)?;
        let Inode {
            key, kind, source, ..
        } = inode;
        let keyed = !matches!(source, InodeSource::Invalid) && key != self.root.key;
        let hash = hash_key(&key);
        let k = shard_of_hash(hash);
        {
            let part = &self.parts[id.shard];
            let mut shard = lock(&part.shard);
            let indexed = keyed && k == id.shard && shard.slots.find(hash, &key).is_none();
            shard
                .slots
                .fill(Some(id), indexed, hash, key, kind, source, lookups)
                .ok_or_else(eexist)?;
            part.update_held(&shard);
        }
        if keyed && k != id.shard {
            let mut shard = lock(&self.parts[k].shard);
            if shard.slots.find(hash, &key).is_none() {
                shard.aliases.entry(key).or_insert(nodeid);
            }
        }
        Ok(())
    }

    /// Forgets every inode but the root (FUSE_DESTROY, or a new session).
    pub fn clear(&self) {
        for part in self.parts.iter() {
            let removed = {
                let mut shard = lock(&part.shard);
                let guests = std::mem::take(&mut shard.guests);
                shard.aliases = HashMap::new();
                let pages = shard.slots.take_all();
                part.update_held(&shard);
                (pages, guests)
            };
            drop(removed);
        }
    }

    /// How many inodes the guest holds, the root included; takes no lock.
    pub fn len(&self) -> usize {
        1 + self
            .parts
            .iter()
            .map(|s| s.held.load(Ordering::Relaxed))
            .sum::<usize>()
    }

    /// The writeback state of `nodeid`, made on first use; `None` for a node ID the table does
    /// not hold. Only for writeback caching (see the `Shard` invariants).
    pub fn guest(&self, nodeid: u64) -> Option<Arc<GuestState>> {
        let mut shard = lock(&self.parts[shard_of_id(nodeid)].shard);
        if nodeid != ROOT_ID && shard.slots.by_id(NodeId::decode(nodeid)?).is_none() {
            return None;
        }
        Some(Arc::clone(shard.guests.entry(nodeid).or_default()))
    }

    /// The FUSE generation of `nodeid`: 0 unless writeback raised it ([`GuestState`]).
    pub fn generation(&self, nodeid: u64) -> u64 {
        lock(&self.parts[shard_of_id(nodeid)].shard)
            .guests
            .get(&nodeid)
            .map_or(0, |g| g.generation())
    }

    /// Lookups held on `nodeid` (0 if unknown; the root holds one for ever).
    pub fn lookups(&self, nodeid: u64) -> u64 {
        if nodeid == ROOT_ID {
            return 1;
        }
        let Some(id) = NodeId::decode(nodeid) else {
            return 0;
        };
        let shard = lock(&self.parts[id.shard].shard);
        shard.slots.by_id(id).map_or(0, |s| s.lookups)
    }
}

mod inode;
#[cfg(test)]
mod tests;
