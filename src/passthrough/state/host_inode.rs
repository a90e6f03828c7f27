//! A host inode's identity and how the daemon reaches it: what the inode table keys and
//! stores for every inode the guest holds.

use std::os::fd::OwnedFd;
use std::sync::Arc;

use super::fd_budget::FdToken;
use super::file_handle::FileHandle;

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

/// Whether `new`, found under the key of an inode reached by `old`, is another file: both
/// handles, and they differ (the host reused the inode number).
pub fn replaced(old: &InodeSource, new: &InodeSource) -> bool {
    matches!((old, new), (InodeSource::Handle(a), InodeSource::Handle(b)) if a != b)
}
