//! What a request gets of an inode from the [`InodeTable`](super::InodeTable): its identity
//! and how to reach it on the host, copied out of the table.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;

use super::super::fd_budget::FdToken;
use super::super::file_handle::{FileHandle, MountFds};
use super::super::inode_index::Slot;
use super::super::sys;

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

/// How the daemon reaches a host inode (16 bytes; cloning one copies a handle or shares the fd).
#[derive(Clone)]
pub enum InodeSource {
    /// An O_PATH fd, holding one token of the guest's fd budget.
    Fd(Arc<PathFd>),
    /// A file handle: no fd is held.
    Handle(FileHandle),
    /// Lost in a migration (`--migration-on-error=guest-error`): the node ID stays valid until
    /// the guest forgets it, and every operation on it fails with `EIO`. Never found by key.
    Invalid,
}

/// An inode's own O_PATH fd and the fd-budget token it holds.
pub struct PathFd {
    pub fd: OwnedFd,
    _token: FdToken,
}

impl InodeSource {
    pub fn fd(fd: OwnedFd, token: FdToken) -> InodeSource {
        InodeSource::Fd(Arc::new(PathFd { fd, _token: token }))
    }
}

/// One host inode the guest knows by a node ID: what a request needs of it, copied out of the
/// table (its lookup count stays in the table).
#[derive(Clone)]
pub struct Inode {
    pub nodeid: u64,
    pub key: InodeKey,
    /// The `S_IFMT` bits of the mode (the type never changes).
    pub kind: u32,
    pub source: InodeSource,
}

/// An fd for one operation on an inode: borrowed from the table, shared with the fd cache, or
/// opened for the occasion and closed after it.
pub enum InodeFd<'a> {
    Borrowed(BorrowedFd<'a>),
    Shared(Arc<OwnedFd>),
    Owned(OwnedFd),
}

impl AsFd for InodeFd<'_> {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match self {
            InodeFd::Borrowed(fd) => *fd,
            InodeFd::Shared(fd) => fd.as_fd(),
            InodeFd::Owned(fd) => fd.as_fd(),
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
        }
    }

    /// The inode in live slot `s`, as node ID `nodeid`.
    pub(super) fn of_slot(nodeid: u64, s: &Slot) -> Option<Inode> {
        Some(Inode {
            nodeid,
            key: s.key,
            kind: s.kind,
            source: s.source.clone()?,
        })
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
        replaced(&self.source, other)
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

pub(super) fn replaced(old: &InodeSource, new: &InodeSource) -> bool {
    matches!((old, new), (InodeSource::Handle(a), InodeSource::Handle(b)) if a != b)
}
