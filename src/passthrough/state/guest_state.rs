//! The guest's side of a regular file under writeback caching (`policy/writeback.rs` says
//! why it exists): the size and mtime its inode holds, the mtime it set last, the node's
//! generation.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Size and mtime of a regular file as the guest's inode holds them.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct View {
    pub size: u64,
    pub mtime: (i64, u32),
}

impl View {
    pub fn of(st: &libc::statx) -> View {
        View {
            size: st.stx_size,
            mtime: (st.stx_mtime.tv_sec, st.stx_mtime.tv_nsec),
        }
    }
}

#[derive(Default)]
pub struct Guest {
    /// What the guest was given when it instantiated the inode, changed by its own requests
    /// since (WRITE, SETATTR of size and mtime); `None` until the first entry reply under
    /// writeback.
    pub view: Option<View>,
    /// The mtime the guest last set explicitly, put back after each cache WRITE.
    pub mtime: Option<libc::timespec>,
}

/// The guest's side of a regular file under writeback caching.
///
/// Invariants: the host file's mtime is changed, by SETATTR and by the restore after a cache
/// WRITE, only under this lock, and the value set last is the one held here (whatever order
/// SETATTRs and WRITEs of the page cache arrive in, the host ends with the guest's last mtime).
/// The node's generation is raised only under this lock, only when the guest holds no open file
/// of the node (so it has no dirty pages or unsent times for it: the kernel writes them back
/// before RELEASE), and only when the host's size or mtime differs from the guest's view.
/// It is kept out of the inode, in the inode table's side table (`InodeTable::guest`), made for
/// a node on first use under writeback: without writeback an inode pays nothing for it.
#[derive(Default)]
pub struct GuestState {
    pub guest: Mutex<Guest>,
    /// FUSE generation of the node ID: raised to make the guest drop its inode and take a fresh
    /// one with the host's size and data.
    generation: AtomicU64,
}

impl GuestState {
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Raises the generation, returning the new one; callers hold the `guest` lock (outside
    /// the inode table's own tests).
    pub fn raise_generation(&self) -> u64 {
        self.generation.fetch_add(1, Ordering::AcqRel) + 1
    }

    /// The generation the migration source had given the node (before any request runs).
    pub fn set_generation(&self, generation: u64) {
        self.generation.store(generation, Ordering::Release);
    }
}
