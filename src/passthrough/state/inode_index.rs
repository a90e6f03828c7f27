//! One inode table shard's storage: a paged slab of inode slots, indexed by the node ID's bits,
//! and an index from [`InodeKey`] to slot (4 bytes an entry).
//!
//! A node ID is `epoch << 32 | (slot + 1) << SHARD_BITS | shard` (see [`NodeId`]): its slot is
//! found without a hash table, and a slot taken again after its inode died gets a higher epoch,
//! so no node ID is ever handed out twice (a FUSE node ID names one inode for the session; the
//! guest may still send a forgotten one, which then finds the slot's epoch changed).
//!
//! Invariants:
//! - Slots below `len` are live (`source` is `Some`), vacant, or in a page never allocated (the
//!   gaps a migration's load leaves: only the pages of restored slots are made). `vacant` lists
//!   the slots that were vacated and may be taken again, and may also list live ones (a slot
//!   restored at its node ID after it was listed): taking a slot skips those. Gap slots are
//!   never taken: the source may have handed out their node IDs. A slot whose epoch is at its
//!   maximum is never listed again (retired), so its node IDs stay unique.
//! - `by_key` holds, for a key, at most one slot: the newest live slot of that key. An older
//!   live slot of the same key (a deleted inode whose number the host reused) is reached only by
//!   its node ID. The hash stored with an entry is [`hash_key`] of its slot's key, which never
//!   changes while the slot is live.
//! - Every slot's epoch is at least `base`, which a clear (DESTROY, a new session) raises above
//!   every epoch handed out, so a node ID of an earlier session is not handed out again either.
//! - Pages are allocated whole ([`PAGE`] slots) and kept until the table is cleared: the slab
//!   stays at the peak number of slots ever live, 48 bytes each (a page never made costs the
//!   8 bytes of its `None`).

use hashbrown::HashTable;
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

use crate::passthrough::state::host_inode::{InodeKey, InodeSource};

/// Slots per slab page (12 KiB: 16 shards' first pages cost 192 KiB).
const PAGE: usize = 256;

/// Bits of a node ID above its shard bits that hold its slot + 1.
/// A node ID's shard is in its low `SHARD_BITS` bits (see [`NodeId`]).
pub const SHARD_BITS: u32 = 4;
const SLOT_BITS: u32 = 32 - SHARD_BITS;

/// The most slots a shard has (the slot field holds slot + 1, and 0 is no slot).
const MAX_SLOTS: u32 = (1 << SLOT_BITS) - 1;

/// The parts of a node ID.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::passthrough) struct NodeId {
    pub shard: usize,
    pub slot: u32,
    pub epoch: u32,
}

impl NodeId {
    /// The parts of `nodeid`, or `None` for a value no shard hands out (slot field 0).
    pub fn decode(nodeid: u64) -> Option<NodeId> {
        let slot = ((nodeid >> SHARD_BITS) as u32) & ((1 << SLOT_BITS) - 1);
        Some(NodeId {
            shard: (nodeid as usize) & ((1 << SHARD_BITS) - 1),
            slot: slot.checked_sub(1)?,
            epoch: (nodeid >> 32) as u32,
        })
    }

    pub fn encode(self) -> u64 {
        (u64::from(self.epoch) << 32) | (u64::from(self.slot + 1) << SHARD_BITS) | self.shard as u64
    }
}

/// The hash of a key: its shard is in bits 32.. (see [`shard_of_hash`]), the slot index uses
/// the low bits and the top seven.
pub(in crate::passthrough) fn hash_key(key: &InodeKey) -> u64 {
    let mut h = DefaultHasher::new();
    key.hash(&mut h);
    h.finish()
}

/// The shard of a key hash, from bits the shard's index does not use for its own slots.
pub(in crate::passthrough) fn shard_of_hash(hash: u64) -> usize {
    ((hash >> 32) as usize) & ((1 << SHARD_BITS) - 1)
}

/// Slot `slot` of `pages`, live or vacant, if its page was made.
fn slot_in(pages: &[Option<Box<[Slot]>>], slot: u32) -> Option<&Slot> {
    pages
        .get(slot as usize / PAGE)?
        .as_ref()?
        .get(slot as usize % PAGE)
}

/// One inode's slot, 48 bytes (a slab entry; no allocation of its own).
pub(in crate::passthrough) struct Slot {
    pub key: InodeKey,
    /// `None` while the slot is vacant.
    pub source: Option<InodeSource>,
    /// Lookups the guest holds (0 while vacant).
    pub lookups: u64,
    /// The high half of the slot's node ID: raised each time the slot becomes vacant.
    pub epoch: u32,
    /// The `S_IFMT` bits of the mode.
    pub kind: u32,
}

impl Slot {
    fn vacant(epoch: u32) -> Slot {
        Slot {
            key: InodeKey {
                ino: 0,
                dev: 0,
                mnt_id: 0,
            },
            source: None,
            lookups: 0,
            epoch,
            kind: 0,
        }
    }
}

/// The slab and key index of one shard (the invariants are in the module doc).
#[derive(Default)]
pub(in crate::passthrough) struct Slots {
    pages: Vec<Option<Box<[Slot]>>>,
    /// Slots ever used; those at or above it are fresh.
    len: u32,
    vacant: Vec<u32>,
    by_key: HashTable<u32>,
    /// Live slots.
    live: usize,
    /// The epoch of fresh slots: above every epoch handed out before the last clear.
    base: u32,
    /// The highest epoch handed out.
    top: u32,
}

impl Slots {
    pub fn live(&self) -> usize {
        self.live
    }

    /// The live slot `slot`.
    pub fn get(&self, slot: u32) -> Option<&Slot> {
        slot_in(&self.pages, slot).filter(|s| s.source.is_some())
    }

    /// Every live slot with its number.
    pub fn iter(&self) -> impl Iterator<Item = (u32, &Slot)> {
        self.pages
            .iter()
            .enumerate()
            .filter_map(|(p, page)| Some((p, page.as_ref()?)))
            .flat_map(|(p, page)| {
                page.iter()
                    .enumerate()
                    .map(move |(i, s)| ((p * PAGE + i) as u32, s))
            })
            .filter(|(_, s)| s.source.is_some())
    }

    /// The live slot of node ID `id` (its epoch checked).
    pub fn by_id(&self, id: NodeId) -> Option<&Slot> {
        self.get(id.slot).filter(|s| s.epoch == id.epoch)
    }

    pub fn get_mut(&mut self, slot: u32) -> Option<&mut Slot> {
        self.slot_mut(slot).filter(|s| s.source.is_some())
    }

    pub fn by_id_mut(&mut self, id: NodeId) -> Option<&mut Slot> {
        self.get_mut(id.slot).filter(|s| s.epoch == id.epoch)
    }

    fn slot_mut(&mut self, slot: u32) -> Option<&mut Slot> {
        self.pages
            .get_mut(slot as usize / PAGE)?
            .as_mut()?
            .get_mut(slot as usize % PAGE)
    }

    /// The slot `by_key` maps `key` (of hash `hash`) to.
    pub fn find(&self, hash: u64, key: &InodeKey) -> Option<u32> {
        let pages = &self.pages;
        self.by_key
            .find(hash, |&i| slot_in(pages, i).is_some_and(|s| s.key == *key))
            .copied()
    }

    /// Makes the page of `slot` (and `len` past it); `None` past [`MAX_SLOTS`].
    fn make(&mut self, slot: u32) -> Option<&mut Slot> {
        if slot >= MAX_SLOTS {
            return None;
        }
        let p = slot as usize / PAGE;
        if self.pages.len() <= p {
            self.pages.resize_with(p + 1, || None);
        }
        let base = self.base;
        self.pages[p].get_or_insert_with(|| (0..PAGE).map(|_| Slot::vacant(base)).collect());
        self.len = self.len.max(slot + 1);
        self.slot_mut(slot)
    }

    /// A vacant slot to fill, or `None` when the shard has [`MAX_SLOTS`] taken.
    fn take_vacant(&mut self) -> Option<u32> {
        while let Some(i) = self.vacant.pop() {
            if self.slot_mut(i).is_some_and(|s| s.source.is_none()) {
                return Some(i);
            }
        }
        let i = self.len;
        self.make(i).map(|_| i)
    }

    /// Fills a vacant slot (`at`, or any) with an inode of `hash`/`key` holding `lookups`, and,
    /// if `indexed`, makes it the key's slot in `by_key` (replacing an older one). Returns its
    /// node ID parts but the shard, or `None` when the shard is full (or `at` is taken or out of
    /// range).
    #[allow(clippy::too_many_arguments)]
    pub fn fill(
        &mut self,
        at: Option<NodeId>,
        indexed: bool,
        hash: u64,
        key: InodeKey,
        kind: u32,
        source: InodeSource,
        lookups: u64,
    ) -> Option<(u32, u32)> {
        let slot = match at {
            Some(id) => {
                let s = self.make(id.slot).filter(|s| s.source.is_none())?;
                s.epoch = id.epoch;
                id.slot
            }
            None => self.take_vacant()?,
        };
        let s = self.slot_mut(slot)?;
        *s = Slot {
            key,
            source: Some(source),
            lookups,
            epoch: s.epoch,
            kind,
        };
        let epoch = s.epoch;
        self.top = self.top.max(epoch);
        self.live += 1;
        if !indexed {
            return Some((slot, epoch));
        }
        let pages = &self.pages;
        let at_key = |&i: &u32| slot_in(pages, i).is_some_and(|s| s.key == key);
        let rehash = |&i: &u32| slot_in(pages, i).map_or(0, |s| hash_key(&s.key));
        match self.by_key.find_mut(hash, at_key) {
            Some(old) => *old = slot,
            None => {
                self.by_key.insert_unique(hash, slot, rehash);
            }
        }
        Some((slot, epoch))
    }

    /// Empties live slot `slot` (its key leaves `by_key` if it maps there) and returns its
    /// source, to be dropped outside the lock.
    pub fn vacate(&mut self, slot: u32) -> Option<InodeSource> {
        let s = self.slot_mut(slot)?;
        let source = s.source.take()?;
        s.lookups = 0;
        let (key, retired) = (s.key, s.epoch == u32::MAX);
        if !retired {
            s.epoch += 1;
        }
        self.live -= 1;
        if !retired {
            self.vacant.push(slot);
        }
        if let Ok(e) = self.by_key.find_entry(hash_key(&key), |&i| i == slot) {
            e.remove();
        }
        Some(source)
    }

    /// Empties the shard; returns its pages, to be dropped outside the lock.
    /// Node IDs handed out before stay unused: fresh slots start at the next epoch.
    pub fn take_all(&mut self) -> Vec<Option<Box<[Slot]>>> {
        self.base = self.top.saturating_add(1);
        self.by_key.clear();
        self.vacant = Vec::new();
        self.len = 0;
        self.live = 0;
        std::mem::take(&mut self.pages)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::passthrough::state::file_handle::FileHandle;

    fn key(ino: u64) -> InodeKey {
        InodeKey {
            ino,
            dev: 1,
            mnt_id: 2,
        }
    }

    fn handle(b: u8) -> InodeSource {
        InodeSource::Handle(FileHandle::new(1, &[b; 8]))
    }

    #[test]
    fn node_ids_round_trip_and_zero_slot_is_none() {
        let id = NodeId {
            shard: 5,
            slot: 1234,
            epoch: 7,
        };
        assert_eq!(NodeId::decode(id.encode()), Some(id));
        assert_eq!(NodeId::decode(0), None);
        assert_eq!(NodeId::decode(1), None);
        assert_eq!(NodeId::decode(u64::MAX).unwrap().slot, MAX_SLOTS - 1);
    }

    #[test]
    fn a_slot_is_48_bytes() {
        assert_eq!(std::mem::size_of::<Slot>(), 48);
    }

    #[test]
    fn vacated_slots_come_back_with_a_new_epoch_and_the_key_index_follows() {
        let mut s = Slots::default();
        let h = hash_key(&key(1));
        let (a, ea) = s
            .fill(None, true, h, key(1), libc::S_IFREG, handle(1), 1)
            .unwrap();
        assert_eq!(s.find(h, &key(1)), Some(a));
        // the same key again (a reused inode number): the key moves to the new slot
        let (b, _) = s
            .fill(None, true, h, key(1), libc::S_IFREG, handle(2), 1)
            .unwrap();
        assert_ne!(a, b);
        assert_eq!(s.find(h, &key(1)), Some(b));
        // vacating the old slot leaves the key's mapping alone
        assert!(s.vacate(a).is_some());
        assert_eq!(s.find(h, &key(1)), Some(b));
        assert!(s.vacate(a).is_none());
        let (c, ec) = s
            .fill(None, true, h, key(3), libc::S_IFREG, handle(3), 1)
            .unwrap();
        assert_eq!((c, ec), (a, ea + 1));
        assert!(s
            .by_id(NodeId {
                shard: 0,
                slot: a,
                epoch: ea
            })
            .is_none());
        s.vacate(b);
        assert_eq!(s.find(h, &key(1)), None);
        assert_eq!(s.live(), 1);
    }

    #[test]
    fn restore_at_a_node_id_makes_only_its_page_and_new_slots_come_after_it() {
        let mut s = Slots::default();
        let at = NodeId {
            shard: 3,
            slot: 5_000_000,
            epoch: 9,
        };
        let h = hash_key(&key(7));
        assert_eq!(
            s.fill(Some(at), true, h, key(7), libc::S_IFDIR, handle(7), 4),
            Some((5_000_000, 9))
        );
        assert_eq!(s.by_id(at).unwrap().lookups, 4);
        assert_eq!(s.pages.iter().filter(|p| p.is_some()).count(), 1);
        // the slot is taken: a second restore there fails
        assert_eq!(s.fill(Some(at), true, h, key(8), 0, handle(8), 1), None);
        // a slot below it, unindexed
        let below = NodeId { slot: 3, ..at };
        let k9 = key(9);
        s.fill(Some(below), false, hash_key(&k9), k9, 0, handle(9), 1)
            .unwrap();
        assert_eq!(s.find(hash_key(&k9), &k9), None);
        for i in 0..300 {
            let k = key(100 + i);
            let (slot, _) = s
                .fill(None, true, hash_key(&k), k, 0, handle(0), 1)
                .unwrap();
            assert!(slot > 5_000_000, "gap slot {slot} taken");
        }
        assert_eq!(s.live(), 302);
        assert_eq!(s.iter().count(), 302);
        assert_eq!(s.find(h, &key(7)), Some(5_000_000));
    }

    #[test]
    fn a_retired_slot_is_not_taken_again() {
        let mut s = Slots::default();
        let at = NodeId {
            shard: 0,
            slot: 0,
            epoch: u32::MAX,
        };
        s.fill(Some(at), true, hash_key(&key(1)), key(1), 0, handle(1), 1);
        s.vacate(0);
        let (slot, _) = s
            .fill(None, true, hash_key(&key(2)), key(2), 0, handle(2), 1)
            .unwrap();
        assert_ne!(slot, 0);
    }
}
