//! What a request gets of an inode from the [`InodeTable`](super::InodeTable): its identity
//! and how to reach it on the host, copied out of the table.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;

use crate::passthrough::state::file_handle::MountFds;
use crate::passthrough::state::host_inode::{replaced, InodeKey, InodeSource};
use crate::passthrough::state::inode_index::Slot;
use crate::passthrough::sys;

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

    /// Opens the inode's file handle with `flags`, and checks that what it opened is the inode
    /// the table recorded: the same inode number and type. A handle that opens another file
    /// (a filesystem that reused the number its handles name, as FUSE filesystems without export
    /// support do) or none is ESTALE, never another file's data.
    pub fn open_handle(&self, mounts: &MountFds, flags: i32) -> io::Result<OwnedFd> {
        let InodeSource::Handle(h) = &self.source else {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        };
        let fd = mounts.open(u64::from(self.key.mnt_id), h, flags)?;
        let st = sys::statx(fd.as_fd(), c"", 0, libc::STATX_INO | libc::STATX_TYPE)?;
        if st.stx_ino != self.key.ino || u32::from(st.stx_mode) & libc::S_IFMT != self.kind {
            log::debug!(
                "the handle of node {} (inode {}) opened inode {}: stale",
                self.nodeid,
                self.key.ino,
                st.stx_ino
            );
            return Err(io::Error::from_raw_os_error(libc::ESTALE));
        }
        Ok(fd)
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
            InodeSource::Handle(_) => self.open_handle(mounts, flags),
            // The inode is known not to be a symlink (checked above).
            InodeSource::Fd(p) => sys::reopen(proc_self_fd, p.fd.as_fd(), flags),
            InodeSource::Invalid => Err(io::Error::from_raw_os_error(libc::EIO)),
        }
    }
}
