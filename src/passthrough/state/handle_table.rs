//! Open files and directories the guest holds, by the `fh` it was given.
//!
//! Invariant: every [`OpenFile`] holds exactly one fd and one [`FdToken`] of the guest's budget;
//! both are released when the guest sends RELEASE/RELEASEDIR (or DESTROY) *and* no request is
//! still using the file (requests hold an `Arc`). The table is sharded by `fh` like the inode
//! table; the shard lock covers only map operations, never I/O.
//!
//! A migration's load puts the source's handles back under the fhs the guest holds
//! ([`HandleTable::restore`]); an fh it could not re-open (`--migration-on-error=guest-error`) is
//! *lost*: every request on it fails with `EIO` until the guest releases it.

use crate::sync::lock;
use std::collections::HashSet;
use std::fs::File;
use std::io;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::passthrough::state::fd_budget::FdToken;
use crate::passthrough::state::own_ids::OwnIdMap;

const SHARDS: usize = 16;

/// State of an open directory between READDIR calls.
#[derive(Default)]
pub struct DirState {
    /// getdents64 buffer, reused across calls.
    pub buf: Vec<u8>,
    /// Bytes of `buf` filled by the last getdents64.
    pub len: usize,
    /// Where in `buf` the next entry to hand out starts.
    pub pos: usize,
    /// The directory offset of that entry: a READDIR continuing from here is served from `buf`
    /// without a syscall (the guest's reply buffer holds far fewer entries than `buf`).
    pub offset: u64,
}

pub struct OpenFile {
    pub nodeid: u64,
    pub file: File,
    /// `Some` for directories: READDIR on one handle is serialised by this lock (it seeks the
    /// shared fd); files have no lock at all.
    pub dir: Option<Mutex<DirState>>,
    _token: FdToken,
}

impl OpenFile {
    pub fn new(nodeid: u64, file: File, is_dir: bool, token: FdToken) -> OpenFile {
        OpenFile {
            nodeid,
            file,
            dir: is_dir.then(|| Mutex::new(DirState::default())),
            _token: token,
        }
    }
}

/// One shard, and its count readable without its lock (for the metrics).
#[derive(Default)]
struct Shard {
    map: Mutex<OwnIdMap<Arc<OpenFile>>>,
    /// `map.len()`, stored under the lock by every change.
    held: AtomicUsize,
}

/// The fh no open file ever has: numbers start at 1. A request naming it names no handle (the
/// Windows guest service sends GETATTR with FUSE_GETATTR_FH and RELEASE with fh 0 for a node it
/// never opened, a symlink).
pub const NO_FH: u64 = 0;

pub struct HandleTable {
    shards: Box<[Shard]>,
    next: AtomicU64,
    /// fhs a migration could not re-open; looked at only when an fh is not in the table.
    lost: Mutex<HashSet<u64>>,
}

impl Default for HandleTable {
    fn default() -> Self {
        HandleTable {
            shards: (0..SHARDS).map(|_| Shard::default()).collect(),
            next: AtomicU64::new(1),
            lost: Mutex::default(),
        }
    }
}

impl HandleTable {
    fn shard(&self, fh: u64) -> &Shard {
        &self.shards[(fh as usize) % SHARDS]
    }

    /// Stores `file` and returns its new handle number.
    pub fn insert(&self, file: OpenFile) -> u64 {
        let fh = self.next.fetch_add(1, Ordering::Relaxed);
        let shard = self.shard(fh);
        let mut map = lock(&shard.map);
        map.insert(fh, Arc::new(file));
        shard.held.store(map.len(), Ordering::Relaxed);
        fh
    }

    /// The open file `fh`, or `EBADF` (`EIO` for a lost one).
    pub fn get(&self, fh: u64) -> io::Result<Arc<OpenFile>> {
        let found = lock(&self.shard(fh).map).get(&fh).cloned();
        found.ok_or_else(|| self.missing(fh))
    }

    fn missing(&self, fh: u64) -> io::Error {
        let errno = if lock(&self.lost).contains(&fh) {
            libc::EIO
        } else {
            libc::EBADF
        };
        io::Error::from_raw_os_error(errno)
    }

    /// Every open file with its fh: what a migration saves, and the next fh to hand out.
    pub fn held(&self) -> (Vec<(u64, Arc<OpenFile>)>, u64) {
        let mut all = Vec::with_capacity(self.len());
        for s in self.shards.iter() {
            all.extend(lock(&s.map).iter().map(|(fh, f)| (*fh, Arc::clone(f))));
        }
        (all, self.next.load(Ordering::Relaxed))
    }

    /// Puts `file` back as `fh` (a migration's load, into an empty table); `None` marks `fh`
    /// lost. New fhs start at `next` or after `fh`, whichever is later. `EEXIST` if `fh` is
    /// taken (or 0).
    pub fn restore(&self, fh: u64, file: Option<OpenFile>, next: u64) -> io::Result<()> {
        let taken = fh == 0 || lock(&self.shard(fh).map).contains_key(&fh);
        if taken || lock(&self.lost).contains(&fh) {
            return Err(io::Error::from_raw_os_error(libc::EEXIST));
        }
        self.next
            .fetch_max(next.max(fh.saturating_add(1)), Ordering::Relaxed);
        let Some(file) = file else {
            lock(&self.lost).insert(fh);
            return Ok(());
        };
        let shard = self.shard(fh);
        let mut map = lock(&shard.map);
        map.insert(fh, Arc::new(file));
        shard.held.store(map.len(), Ordering::Relaxed);
        Ok(())
    }

    /// Removes `fh`; its fd closes when the last user drops it (outside any lock).
    pub fn remove(&self, fh: u64) -> io::Result<()> {
        let shard = self.shard(fh);
        let f = {
            let mut map = lock(&shard.map);
            let f = map.remove(&fh);
            shard.held.store(map.len(), Ordering::Relaxed);
            f
        };
        match f {
            Some(f) => {
                drop(f);
                Ok(())
            }
            None if lock(&self.lost).remove(&fh) => Ok(()),
            None => Err(io::Error::from_raw_os_error(libc::EBADF)),
        }
    }

    pub fn clear(&self) {
        lock(&self.lost).clear();
        for s in self.shards.iter() {
            let all: Vec<_> = {
                let mut map = lock(&s.map);
                let all = map.drain().collect();
                s.held.store(0, Ordering::Relaxed);
                all
            };
            drop(all);
        }
    }

    /// Whether the guest holds an open file or directory of node `nodeid` (a scan of the
    /// table: for the rare caller, see `writeback`).
    pub fn any_of(&self, nodeid: u64) -> bool {
        self.shards
            .iter()
            .any(|s| lock(&s.map).values().any(|f| f.nodeid == nodeid))
    }

    /// How many files and directories are open; takes no lock.
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.held.load(Ordering::Relaxed))
            .sum()
    }
}
