//! File handles (`name_to_handle_at`/`open_by_handle_at`) and the mount fds they open against.
//!
//! A handle names an inode without holding it open, so an inode table keyed by handles holds no
//! fd per inode. Opening one needs CAP_DAC_READ_SEARCH and an fd on the same mount: [`MountFds`]
//! keeps one O_PATH fd per mount ID seen in the share (a handful; they are part of the daemon's
//! fd reserve, not of the guest's budget). `MountFds` is an `RwLock`, written once per new mount.

use std::collections::HashMap;
use std::ffi::CStr;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::{Arc, RwLock};

use super::sys;
use crate::sync;

/// A file handle and the mount it belongs to.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct FileHandle {
    pub mnt_id: u64,
    handle_type: i32,
    bytes: Box<[u8]>,
}

impl std::fmt::Debug for FileHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "FileHandle(mnt {}, type {}, {} bytes)",
            self.mnt_id,
            self.handle_type,
            self.bytes.len()
        )
    }
}

impl FileHandle {
    /// The handle of what `fd` refers to (`name` empty) or of `name` in directory `fd`, never
    /// following a final symlink. `Ok(None)` when the filesystem cannot make handles.
    pub fn from_fd(fd: BorrowedFd, name: &CStr) -> io::Result<Option<FileHandle>> {
        match sys::handle::name_to_handle_at(fd, name) {
            Ok(h) => Ok(Some(FileHandle {
                mnt_id: h.mnt_id,
                handle_type: h.handle_type,
                bytes: h.bytes.into(),
            })),
            Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Opens the inode with `flags` (O_PATH for a reference, or real open flags).
    ///
    /// A directory the host is removing at that moment makes `open_by_handle_at` fail with
    /// ENOMEM on ext4 (kernel 6.18: a handle opened in a loop while another thread runs
    /// mkdir/rmdir got ENOMEM 0.49 M times against 0.27 M opens and 41.9 M ESTALE in 120 s,
    /// and a retry mostly ENOMEM again), not with ESTALE as once it is gone. Small kernel
    /// allocations do not fail with ENOMEM in practice, so it is reported as what it is: a
    /// stale handle (the guest then looks the name up again).
    pub fn open(&self, mount_fd: BorrowedFd, flags: libc::c_int) -> io::Result<OwnedFd> {
        sys::handle::open_by_handle_at(mount_fd, self.handle_type, &self.bytes, flags).map_err(
            |e| {
                if e.raw_os_error() == Some(libc::ENOMEM) {
                    io::Error::from_raw_os_error(libc::ESTALE)
                } else {
                    e
                }
            },
        )
    }
}

/// One O_PATH fd per mount ID, to open handles against.
///
/// Invariant: an fd stored under a mount ID refers to an inode on that mount and is never closed
/// while the table lives (the mount may be unmounted by the host; opens then fail with ESTALE).
#[derive(Default)]
pub struct MountFds {
    fds: RwLock<HashMap<u64, Arc<OwnedFd>>>,
}

impl MountFds {
    pub fn get(&self, mnt_id: u64) -> Option<Arc<OwnedFd>> {
        sync::read(&self.fds).get(&mnt_id).cloned()
    }

    /// Makes sure there is a mount fd for `mnt_id`, opening one from `fd` (an O_PATH fd of an
    /// inode of type `kind` on that mount) if needed. `open_by_handle_at` refuses O_PATH mount
    /// fds, so this re-opens the inode read-only through `/proc/self/fd`; only directories and
    /// regular files are opened (opening a device or FIFO could have side effects): for other
    /// types it fails with `EOPNOTSUPP`. Returns whether the mount was new.
    pub fn ensure(
        &self,
        mnt_id: u64,
        fd: BorrowedFd,
        kind: u32,
        proc_self_fd: BorrowedFd,
    ) -> io::Result<bool> {
        if self.get(mnt_id).is_some() {
            return Ok(false);
        }
        if kind != libc::S_IFDIR && kind != libc::S_IFREG {
            return Err(io::Error::from_raw_os_error(libc::EOPNOTSUPP));
        }
        let mount = sys::reopen(
            proc_self_fd,
            fd,
            libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY,
        )?;
        sync::write(&self.fds)
            .entry(mnt_id)
            .or_insert_with(|| Arc::new(mount));
        Ok(true)
    }

    /// Opens `handle` with `flags`.
    pub fn open(&self, handle: &FileHandle, flags: libc::c_int) -> io::Result<OwnedFd> {
        let mount = self
            .get(handle.mnt_id)
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ESTALE))?;
        handle.open(mount.as_fd(), flags)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;
    use std::os::unix::fs::OpenOptionsExt;

    #[test]
    fn handle_roundtrip() {
        let dir = crate::temp_dir::TempDir::new("vhostfs-fh").unwrap();
        std::fs::write(dir.join("f"), b"hello").unwrap();
        let d = std::fs::File::open(dir.path()).unwrap();
        let h = FileHandle::from_fd(d.as_fd(), c"f")
            .unwrap()
            .expect("tmp supports handles");
        let mounts = MountFds::default();
        let proc_self_fd = std::fs::File::open("/proc/self/fd").unwrap();
        let path = std::fs::File::options()
            .read(true)
            .custom_flags(libc::O_PATH)
            .open(dir.path())
            .unwrap();
        mounts
            .ensure(h.mnt_id, path.as_fd(), libc::S_IFDIR, proc_self_fd.as_fd())
            .unwrap();
        let fd = mounts.open(&h, libc::O_RDONLY).unwrap();
        let mut s = String::new();
        std::io::Read::read_to_string(&mut std::fs::File::from(fd), &mut s).unwrap();
        assert_eq!(s, "hello");
    }
}
