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
//!   using it drops its `Arc`.
//!   The entries that count: LOOKUP, CREATE, MKNOD, MKDIR, SYMLINK, LINK, TMPFILE and each
//!   READDIRPLUS entry but `.`/`..`; FORGET and BATCH_FORGET take them back.
//! - The root (node ID 1) never dies. DESTROY clears everything but the root.
//! - With file handles a dead inode costs nothing, and a re-lookup makes a new node ID. A node
//!   whose inode the host deleted is stale (`ESTALE`); when the host reuses its inode number, a
//!   lookup compares handles ([`Inode::replaced_by`]) and gives the new file a new node ID, and
//!   the key maps to it (FORGET of the stale node leaves that mapping alone).
//! - The table is split into [`SHARDS`] shards, each behind its own mutex; the shard of a node ID
//!   is in its low bits and the shard of a key is its hash, so one shard holds both indexes for an
//!   inode [`InodeTable::insert`] made. An inode [`InodeTable::restore`]d by a migration keeps
//!   the node ID the guest knows while its key is the destination host's, so its two indexes may
//!   be in two shards: a lookup count changes under the lock of the key's shard, and FORGET takes
//!   both locks (in shard order) for such an inode. No lock is held across a syscall: callers do
//!   their openat/statx/name_to_handle_at first and then call [`InodeTable::insert`], which
//!   re-checks under the lock.
//! - Memory per inode held (the million-file walk of a guest that never forgets, see
//!   docs/benchmarks.md): one `Arc<Inode>` of 72 bytes (an 80-byte malloc chunk) and two 8-byte
//!   pointers to it in the shard's sets; a handle's bytes are inline ([`FileHandle`]); what only
//!   writeback caching needs lives in the shard's `guests` side table, made on first use.

use crate::sync::lock;
use std::collections::hash_map::DefaultHasher;
use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use super::fd_budget::FdToken;
use super::file_handle::{FileHandle, MountFds};
use super::inode_index::{ById, ByKey};
use super::sys;
use super::writeback::GuestState;

/// The node ID of the shared directory itself.
pub const ROOT_ID: u64 = 1;

/// A node ID's shard is in its low `SHARD_BITS` bits (the rest is a per-shard sequence).
pub const SHARD_BITS: u32 = 4;
/// Number of independently locked parts of the table.
pub const SHARDS: usize = 1 << SHARD_BITS;

/// What identifies a host inode, in 16 bytes (one per inode held).
///
/// Invariant: `dev` is the kernel's own 32-bit encoding of the device (major << 20 | minor: a
/// major has at most 12 bits, a minor 20) and `mnt_id` the mount ID of `STATX_MNT_ID` (the
/// kernel's `int` mount ID, as `name_to_handle_at` reports it), so neither loses information.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct InodeKey {
    pub ino: u64,
    pub dev: u32,
    pub mnt_id: u32,
}

impl InodeKey {
    /// The key of the inode `st` describes (statx with `STATX_INO | STATX_MNT_ID`).
    pub fn of(st: &libc::statx) -> InodeKey {
        InodeKey {
            ino: st.stx_ino,
            dev: (st.stx_dev_major << 20) | st.stx_dev_minor,
            mnt_id: st.stx_mnt_id as u32,
        }
    }
}

/// How the daemon reaches a host inode (16 bytes: the fd variant is boxed, as it already costs
/// the host an open file per inode).
pub enum InodeSource {
    /// An O_PATH fd, holding one token of the guest's fd budget.
    Fd(Box<PathFd>),
    /// A file handle: no fd is held.
    Handle(FileHandle),
    /// Lost in a migration (`--migration-on-error=guest-error`): the node ID stays valid until
    /// the guest forgets it, and every operation on it fails with `EIO`. Never in `by_key`.
    Invalid,
}

/// An inode's own O_PATH fd and the fd-budget token it holds.
pub struct PathFd {
    pub fd: OwnedFd,
    _token: FdToken,
}

impl InodeSource {
    pub fn fd(fd: OwnedFd, token: FdToken) -> InodeSource {
        InodeSource::Fd(Box::new(PathFd { fd, _token: token }))
    }
}

/// One host inode the guest knows by a node ID.
pub struct Inode {
    pub nodeid: u64,
    pub key: InodeKey,
    /// The `S_IFMT` bits of the mode (the type never changes).
    pub kind: u32,
    pub source: InodeSource,
    /// Lookups the guest holds; changed only under the lock of its key's shard (see the module
    /// doc).
    lookups: AtomicU64,
}

/// An fd for one operation on an inode: borrowed from the table or opened for the occasion.
pub enum InodeFd<'a> {
    Borrowed(BorrowedFd<'a>),
    Shared(Arc<OwnedFd>),
}

impl AsFd for InodeFd<'_> {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match self {
            InodeFd::Borrowed(fd) => *fd,
            InodeFd::Shared(fd) => fd.as_fd(),
        }
    }
}

impl std::fmt::Debug for Inode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Inode({}, {:?})", self.nodeid, self.key)
    }
}

impl Inode {
    pub fn new(key: InodeKey, kind: u32, source: InodeSource) -> Inode {
        Inode {
            nodeid: 0,
            key,
            kind,
            source,
            lookups: AtomicU64::new(0),
        }
    }

    pub fn is_dir(&self) -> bool {
        self.kind == libc::S_IFDIR
    }

    pub fn is_symlink(&self) -> bool {
        self.kind == libc::S_IFLNK
    }

    /// Whether `other`, found under the same key, is another file: both reached by handles that
    /// differ. The host deleted this inode and reused its number (the handle's generation
    /// tells them apart); a held O_PATH fd keeps its inode, so its number cannot be reused.
    pub fn replaced_by(&self, other: &InodeSource) -> bool {
        matches!((&self.source, other), (InodeSource::Handle(a), InodeSource::Handle(b)) if a != b)
    }

    /// Opens the inode for I/O with `flags` (never following a symlink: callers refuse
    /// symlinks first). O_PATH fds are re-opened through the pre-opened `/proc/self/fd`.
    pub fn open(
        &self,
        mounts: &MountFds,
        proc_self_fd: BorrowedFd,
        flags: i32,
    ) -> io::Result<OwnedFd> {
        if self.is_symlink() {
            return Err(io::Error::from_raw_os_error(libc::ELOOP));
        }
        match &self.source {
            InodeSource::Handle(h) => mounts.open(u64::from(self.key.mnt_id), h, flags),
            // The inode is known not to be a symlink (checked above).
            InodeSource::Fd(p) => sys::reopen(proc_self_fd, p.fd.as_fd(), flags),
            InodeSource::Invalid => Err(io::Error::from_raw_os_error(libc::EIO)),
        }
    }
}

/// Invariants: every inode of `by_key` is in `by_id` or is the root, and a key is in `by_key`
/// at most once (the newest inode of that key); `guests` has entries only for node IDs of
/// `by_id` (or the root), made only under writeback caching, and loses them with the node.
#[derive(Default)]
struct Shard {
    by_id: HashSet<ById>,
    by_key: HashSet<ByKey>,
    /// The writeback state of the nodes that needed one (regular files under writeback).
    guests: HashMap<u64, Arc<GuestState>>,
    /// Next sequence number for node IDs of this shard.
    next_seq: u64,
}

/// One shard, and its count readable without its lock (for the metrics).
#[derive(Default)]
struct Slot {
    shard: Mutex<Shard>,
    /// `shard.by_id.len()`, stored under the lock by every change.
    held: AtomicUsize,
}

impl Slot {
    fn update_held(&self, shard: &Shard) {
        self.held.store(shard.by_id.len(), Ordering::Relaxed);
    }
}

/// A forgotten inode and its writeback state, dropped outside the locks.
type Removed = (Arc<Inode>, Option<Arc<GuestState>>);

pub struct InodeTable {
    root: Arc<Inode>,
    shards: Box<[Slot]>,
}

fn shard_of_key(key: &InodeKey) -> usize {
    let mut h = DefaultHasher::new();
    key.hash(&mut h);
    (h.finish() as usize) & (SHARDS - 1)
}

fn shard_of_id(nodeid: u64) -> usize {
    (nodeid as usize) & (SHARDS - 1)
}

impl InodeTable {
    /// A table holding only the shared directory's inode as [`ROOT_ID`].
    pub fn new(mut root: Inode) -> InodeTable {
        root.nodeid = ROOT_ID;
        root.lookups = AtomicU64::new(1);
        let root = Arc::new(root);
        let shards: Box<[Slot]> = (0..SHARDS).map(|_| Slot::default()).collect();
        lock(&shards[shard_of_key(&root.key)].shard)
            .by_key
            .insert(ByKey(Arc::clone(&root)));
        InodeTable { root, shards }
    }

    /// The inode of `nodeid`, or `EBADF` for a node ID the guest does not hold.
    pub fn get(&self, nodeid: u64) -> io::Result<Arc<Inode>> {
        if nodeid == ROOT_ID {
            return Ok(Arc::clone(&self.root));
        }
        lock(&self.shards[shard_of_id(nodeid)].shard)
            .by_id
            .get(&nodeid)
            .map(|i| Arc::clone(&i.0))
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EBADF))
    }

    /// The node ID of the inode with `key`, if the table has it (no lookup is taken).
    pub fn id_of(&self, key: &InodeKey) -> Option<u64> {
        lock(&self.shards[shard_of_key(key)].shard)
            .by_key
            .get(key)
            .map(|i| i.0.nodeid)
    }

    /// One more lookup of the inode with `key`, if the table has it.
    pub fn ref_existing(&self, key: &InodeKey) -> Option<Arc<Inode>> {
        let shard = lock(&self.shards[shard_of_key(key)].shard);
        Some(Self::take_ref(&shard.by_key.get(key)?.0))
    }

    /// One more lookup of `inode`, found in the table (under its shard lock).
    fn take_ref(inode: &Arc<Inode>) -> Arc<Inode> {
        if inode.nodeid != ROOT_ID {
            inode.lookups.fetch_add(1, Ordering::Relaxed);
        }
        Arc::clone(inode)
    }

    /// Adds `inode` with a lookup count of one; if another request added the same key meanwhile,
    /// takes one more lookup of that one instead (and `inode` is dropped, outside the lock).
    /// An existing inode of the same key that `inode` [replaces](Inode::replaced_by) keeps its
    /// node ID (stale, until the guest forgets it) but the key now maps to the new one.
    pub fn insert(&self, mut inode: Inode) -> Arc<Inode> {
        let s = shard_of_key(&inode.key);
        let mut shard = lock(&self.shards[s].shard);
        if let Some(old) = shard.by_key.get(&inode.key) {
            if !old.0.replaced_by(&inode.source) {
                let existing = Self::take_ref(&old.0);
                drop(shard);
                return existing;
            }
        }
        shard.next_seq += 1;
        inode.nodeid = (shard.next_seq << SHARD_BITS) | s as u64;
        inode.lookups = AtomicU64::new(1);
        let inode = Arc::new(inode);
        shard.by_key.replace(ByKey(Arc::clone(&inode)));
        shard.by_id.insert(ById(Arc::clone(&inode)));
        self.shards[s].update_held(&shard);
        inode
    }

    /// Drops `n` lookups of `nodeid`; removes the inode when none are left (and then returns
    /// `true`). Unknown node IDs are ignored (FORGET has no reply).
    pub fn forget(&self, nodeid: u64, n: u64) -> bool {
        if nodeid == ROOT_ID {
            return false;
        }
        let id_shard = shard_of_id(nodeid);
        let key_shard = {
            let shard = lock(&self.shards[id_shard].shard);
            match shard.by_id.get(&nodeid) {
                Some(inode) => shard_of_key(&inode.0.key),
                None => return false,
            }
        };
        let removed = if key_shard == id_shard {
            let mut shard = lock(&self.shards[id_shard].shard);
            self.forget_locked(&mut shard, None, id_shard, nodeid, n)
        } else {
            // A restored inode: both locks, in shard order.
            let (first, second) = (id_shard.min(key_shard), id_shard.max(key_shard));
            let mut a = lock(&self.shards[first].shard);
            let mut b = lock(&self.shards[second].shard);
            let (ids, keys) = if first == id_shard {
                (&mut *a, &mut *b)
            } else {
                (&mut *b, &mut *a)
            };
            self.forget_locked(ids, Some(keys), id_shard, nodeid, n)
        };
        // The fd (if any) closes here, outside the locks, unless a request still uses it.
        let gone = removed.is_some();
        drop(removed);
        gone
    }

    /// [`Self::forget`] under the lock of the node ID's shard `ids` (number `s`) and, when the
    /// key is in another shard, that one's (`keys`).
    fn forget_locked(
        &self,
        ids: &mut Shard,
        keys: Option<&mut Shard>,
        s: usize,
        nodeid: u64,
        n: u64,
    ) -> Option<Removed> {
        let inode = ids.by_id.get(&nodeid)?;
        let left = inode.0.lookups.load(Ordering::Relaxed).saturating_sub(n);
        inode.0.lookups.store(left, Ordering::Relaxed);
        if left > 0 {
            return None;
        }
        let ById(inode) = ids.by_id.take(&nodeid).expect("present");
        self.shards[s].update_held(ids);
        let guest = ids.guests.remove(&nodeid);
        let keys = keys.unwrap_or(ids);
        if keys
            .by_key
            .get(&inode.key)
            .is_some_and(|k| Arc::ptr_eq(&k.0, &inode))
        {
            keys.by_key.remove(&inode.key);
        }
        Some((inode, guest))
    }

    /// Every inode the guest holds but the root, with its lookup count: what a migration saves.
    /// Takes each shard's lock in turn (the frontend stopped the queues: nothing changes).
    pub fn held(&self) -> Vec<(Arc<Inode>, u64)> {
        let mut all = Vec::with_capacity(self.len());
        for s in self.shards.iter() {
            let shard = lock(&s.shard);
            all.extend(
                shard
                    .by_id
                    .iter()
                    .map(|i| (Arc::clone(&i.0), i.0.lookups.load(Ordering::Relaxed))),
            );
        }
        all
    }

    /// Puts `inode` in the table as `nodeid` with `lookups` (a migration's load, into a table
    /// that holds only the root): the node IDs the guest knows are kept. New node IDs of that
    /// shard come after it. `EEXIST` for a node ID the table has (or the root or 0); an inode
    /// whose key the table already maps (two saved inodes that are one file here) and an
    /// [`InodeSource::Invalid`] one are reached by node ID only.
    pub fn restore(&self, mut inode: Inode, nodeid: u64, lookups: u64) -> io::Result<()> {
        if nodeid == ROOT_ID || nodeid == 0 || lookups == 0 {
            return Err(io::Error::from_raw_os_error(libc::EEXIST));
        }
        inode.nodeid = nodeid;
        inode.lookups = AtomicU64::new(lookups);
        let inode = Arc::new(inode);
        let s = shard_of_id(nodeid);
        {
            let slot = &self.shards[s];
            let mut shard = lock(&slot.shard);
            if shard.by_id.contains(&nodeid) {
                return Err(io::Error::from_raw_os_error(libc::EEXIST));
            }
            shard.by_id.insert(ById(Arc::clone(&inode)));
            shard.next_seq = shard.next_seq.max(nodeid >> SHARD_BITS);
            slot.update_held(&shard);
        }
        if !matches!(inode.source, InodeSource::Invalid) {
            let mut shard = lock(&self.shards[shard_of_key(&inode.key)].shard);
            if !shard.by_key.contains(&inode.key) {
                shard.by_key.insert(ByKey(inode));
            }
        }
        Ok(())
    }

    /// Forgets every inode but the root (FUSE_DESTROY, or a new session).
    pub fn clear(&self) {
        for s in self.shards.iter() {
            let removed: Vec<ById> = {
                let mut shard = lock(&s.shard);
                shard.by_key.retain(|i| i.0.nodeid == ROOT_ID);
                shard.guests.clear();
                let removed = shard.by_id.drain().collect();
                s.update_held(&shard);
                removed
            };
            drop(removed);
        }
    }

    /// How many inodes the guest holds, the root included; takes no lock.
    pub fn len(&self) -> usize {
        1 + self
            .shards
            .iter()
            .map(|s| s.held.load(Ordering::Relaxed))
            .sum::<usize>()
    }

    /// The writeback state of `nodeid`, made on first use; `None` for a node ID the table does
    /// not hold. Only for writeback caching (see the `Shard` invariants).
    pub fn guest(&self, nodeid: u64) -> Option<Arc<GuestState>> {
        let mut shard = lock(&self.shards[shard_of_id(nodeid)].shard);
        if nodeid != ROOT_ID && !shard.by_id.contains(&nodeid) {
            return None;
        }
        Some(Arc::clone(shard.guests.entry(nodeid).or_default()))
    }

    /// The FUSE generation of `nodeid`: 0 unless writeback raised it ([`GuestState`]).
    pub fn generation(&self, nodeid: u64) -> u64 {
        lock(&self.shards[shard_of_id(nodeid)].shard)
            .guests
            .get(&nodeid)
            .map_or(0, |g| g.generation())
    }

    /// Lookups held on `nodeid` (0 if unknown).
    pub fn lookups(&self, nodeid: u64) -> u64 {
        self.get(nodeid)
            .map(|i| i.lookups.load(Ordering::Relaxed))
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests;
