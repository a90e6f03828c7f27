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

use crate::passthrough::sys;
use crate::sync;

/// Handle bytes kept inside the handle up to this length: ext4 gives 8 bytes, xfs 8 or 12, tmpfs
/// 12; longer handles (btrfs 20, overlayfs, NFS) go to the heap.
const INLINE: usize = 13;

/// A file handle (`handle_type` and bytes of `name_to_handle_at`), 16 bytes in all: an inode
/// table slot holds one per inode, so it is kept small, and each request on the inode takes a
/// clone (inline bytes are copied; a long handle's bytes are shared, not copied). The mount it belongs to is the inode
/// key's mount ID (statx's `STATX_MNT_ID` is the mount ID `name_to_handle_at` reports).
///
/// Invariant: a handle's representation follows from its contents alone (`Inline` exactly when
/// the type fits a `u8` and the bytes fit [`INLINE`], unused inline bytes zero), so the derived
/// equality and hash compare handles by contents.
#[derive(Clone, PartialEq, Eq, Hash)]
pub enum FileHandle {
    Inline {
        handle_type: u8,
        len: u8,
        data: [u8; INLINE],
    },
    Heap(Arc<HeapHandle>),
}

/// A handle too long (or of a type too large) to be kept inline.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct HeapHandle {
    handle_type: i32,
    bytes: Box<[u8]>,
}

impl std::fmt::Debug for FileHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "FileHandle(type {}, {} bytes)",
            self.handle_type(),
            self.bytes().len()
        )
    }
}

impl FileHandle {
    pub(in crate::passthrough) fn new(handle_type: i32, bytes: &[u8]) -> FileHandle {
        match u8::try_from(handle_type) {
            Ok(t) if bytes.len() <= INLINE => {
                let mut data = [0; INLINE];
                data[..bytes.len()].copy_from_slice(bytes);
                FileHandle::Inline {
                    handle_type: t,
                    len: bytes.len() as u8,
                    data,
                }
            }
            _ => FileHandle::Heap(Arc::new(HeapHandle {
                handle_type,
                bytes: bytes.into(),
            })),
        }
    }

    pub(in crate::passthrough) fn handle_type(&self) -> i32 {
        match self {
            FileHandle::Inline { handle_type, .. } => i32::from(*handle_type),
            FileHandle::Heap(h) => h.handle_type,
        }
    }

    pub(in crate::passthrough) fn bytes(&self) -> &[u8] {
        match self {
            FileHandle::Inline { len, data, .. } => &data[..usize::from(*len)],
            FileHandle::Heap(h) => &h.bytes,
        }
    }

    /// The handle of what `fd` refers to (`name` empty) or of `name` in directory `fd`, never
    /// following a final symlink, and the mount ID it belongs to. `Ok(None)` when the
    /// filesystem cannot make handles.
    pub fn from_fd(fd: BorrowedFd, name: &CStr) -> io::Result<Option<(FileHandle, u64)>> {
        match sys::handle::name_to_handle_at(fd, name) {
            Ok(h) => Ok(Some((FileHandle::new(h.handle_type, &h.bytes), h.mnt_id))),
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
        sys::handle::open_by_handle_at(mount_fd, self.handle_type(), self.bytes(), flags).map_err(
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

/// FUSE's `f_type` (linux/magic.h).
const FUSE_SUPER_MAGIC: u64 = 0x6573_5546;

/// Whether the handles of the filesystem with `f_type` `magic` keep naming their inode: not for
/// FUSE. A FUSE filesystem's handle names the node ID its server gave; without export support
/// (GlusterFS's, and many others') `open_by_handle_at` fails with ESTALE once the host's kernel
/// forgot the inode, or, once the server reused that node ID, opens another file (issue 35).
/// The kernel does not tell whether a FUSE server has export support, so every FUSE mount is
/// served through O_PATH fds in `prefer` and refused in `mandatory`, as filesystems without
/// handles are.
pub fn handles_are_stable(magic: Option<u64>) -> bool {
    magic != Some(FUSE_SUPER_MAGIC)
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

    /// Keeps `fd`, a non-O_PATH fd of an inode on mount `mnt_id` (an in-place upgrade hands
    /// them over), unless the mount has one already.
    pub fn adopt(&self, mnt_id: u64, fd: OwnedFd) {
        sync::write(&self.fds)
            .entry(mnt_id)
            .or_insert_with(|| Arc::new(fd));
    }

    /// Opens `handle` (of an inode on mount `mnt_id`) with `flags`.
    pub fn open(
        &self,
        mnt_id: u64,
        handle: &FileHandle,
        flags: libc::c_int,
    ) -> io::Result<OwnedFd> {
        let mount = self
            .get(mnt_id)
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
        let (h, mnt_id) = FileHandle::from_fd(d.as_fd(), c"f")
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
            .ensure(mnt_id, path.as_fd(), libc::S_IFDIR, proc_self_fd.as_fd())
            .unwrap();
        let fd = mounts.open(mnt_id, &h, libc::O_RDONLY).unwrap();
        let mut s = String::new();
        std::io::Read::read_to_string(&mut std::fs::File::from(fd), &mut s).unwrap();
        assert_eq!(s, "hello");
    }

    #[test]
    fn short_handles_inline_long_ones_on_the_heap() {
        assert_eq!(std::mem::size_of::<FileHandle>(), 16);
        let short = FileHandle::new(0x97, &[7; 12]);
        assert!(matches!(short, FileHandle::Inline { len: 12, .. }));
        assert_eq!((short.handle_type(), short.bytes()), (0x97, &[7u8; 12][..]));
        assert!(matches!(
            FileHandle::new(1, &[3; INLINE]),
            FileHandle::Inline { .. }
        ));
        let long = FileHandle::new(0xf8, &[9; 40]);
        assert!(matches!(long, FileHandle::Heap(_)));
        assert_eq!((long.handle_type(), long.bytes()), (0xf8, &[9u8; 40][..]));
        let big_type = FileHandle::new(0x10001, &[1; 8]);
        assert!(matches!(big_type, FileHandle::Heap(_)));
        assert_eq!(big_type.handle_type(), 0x10001);
        assert_eq!(short, FileHandle::new(0x97, &[7; 12]));
        assert_ne!(short, FileHandle::new(0x97, &[7; 11]));
    }
}
