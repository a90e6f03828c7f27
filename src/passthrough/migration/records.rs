//! The filesystem's section of a migration stream: its records (an inode and where to find it
//! again, an open file), and the fds an in-place upgrade hands over beside it.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;

use crate::passthrough::state::handle_table::OpenFile;
use crate::passthrough::state::host_inode::PathFd;

/// An fd an in-place upgrade hands over beside the stream: one the tables hold, kept open by
/// what holds it until it is sent. No duplicate is made: one per inode held by fd would be a
/// syscall each while the guest waits, and would double the fds (10,000 inodes held by fd
/// then passed RLIMIT_NOFILE).
pub struct HandedFd(pub(super) Held);

pub(super) enum Held {
    /// An inode's own O_PATH fd.
    Path(Arc<PathFd>),
    /// An open file's fd.
    File(Arc<OpenFile>),
    /// A mount fd, or an fd of the fd cache or opened for the save.
    Shared(Arc<OwnedFd>),
}

impl AsFd for HandedFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match &self.0 {
            Held::Path(p) => p.fd.as_fd(),
            Held::File(f) => f.file.as_fd(),
            Held::Shared(fd) => fd.as_fd(),
        }
    }
}

/// Inodes (and fhs) without a location, or lost, logged one by one at most; the rest are
/// counted in the summary line.
pub(super) const LOGGED: usize = 10;

/// The section tag of the filesystem's state.
pub(super) const TAG: &[u8; 4] = b"PTFS";

/// How one inode is described in the stream.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Location {
    /// The source could not describe it: why.
    Invalid(String),
    /// Its path relative to the share (no leading `/`).
    Path(Vec<u8>),
    /// Its file handle, on the source's mount `mount` (an index into the stream's mount list).
    Handle {
        mount: u32,
        handle_type: i32,
        bytes: Vec<u8>,
    },
    /// An O_PATH fd of it, the stream's fd number `n` (an in-place upgrade hands the fds over
    /// beside the stream).
    Fd(u32),
    /// An in-place upgrade's inode reached by a file handle: its key and handle, on the mount
    /// whose fd is [`Section::mount_fds`]`[mount]`. Nothing is opened to save or load it.
    Keyed {
        mount: u32,
        ino: u64,
        dev: u32,
        handle_type: i32,
        bytes: Vec<u8>,
    },
}

pub(super) const LOC_INVALID: u8 = 0;
pub(super) const LOC_PATH: u8 = 1;
pub(super) const LOC_HANDLE: u8 = 2;
pub(super) const LOC_FD: u8 = 3;
pub(super) const LOC_KEYED: u8 = 4;

/// An inode as the stream carries it.
#[derive(Debug)]
pub(super) struct InodeRecord {
    pub(super) nodeid: u64,
    pub(super) lookups: u64,
    /// `S_IFMT` bits.
    pub(super) kind: u32,
    /// The FUSE generation (raised under writeback caching).
    pub(super) generation: u64,
    pub(super) location: Location,
    /// Under `--migration-verify-handles`: the handle the destination must find.
    pub(super) check: Option<(i32, Vec<u8>)>,
}

/// An open file or directory as the stream carries it.
#[derive(Debug)]
pub(super) struct HandleRecord {
    pub(super) fh: u64,
    pub(super) nodeid: u64,
    /// The status flags of the source's fd (F_GETFL: access mode, O_DIRECT, O_NOATIME, ...).
    pub(super) flags: i32,
    pub(super) dir: bool,
    /// The open fd itself, as the stream's fd number (an in-place upgrade), else re-opened.
    pub(super) fd: Option<u32>,
}

/// The filesystem's section of the stream.
#[derive(Debug, Default)]
pub(super) struct Section {
    /// The share root's file handle (`file-handles`, `--migration-verify-handles`): the
    /// destination refuses to open the source's inodes in a share that is not the source's.
    pub(super) root: Option<(i32, Vec<u8>)>,
    /// Paths in the share of one inode per mount (`file-handles`), by [`Location::Handle`]'s
    /// `mount`.
    pub(super) mounts: Vec<Vec<u8>>,
    pub(super) inodes: Vec<InodeRecord>,
    /// The next fh the source would have handed out.
    pub(super) next_fh: u64,
    pub(super) handles: Vec<HandleRecord>,
    /// An in-place upgrade's mount fds (by [`Location::Keyed`]'s `mount`), as the stream's fd
    /// numbers. Written last and only when there are any, so that every other stream reads as
    /// before (the section is the last of the body, see `fuse_server::migration`).
    pub(super) mount_fds: Vec<u32>,
}

/// Smallest encoding of an inode and a handle record (to bound counts, see [`Decoder::count`]):
/// an inode by fd ([`Location::Fd`], a 4-byte index) is the shortest.
pub(super) const INODE_MIN: usize = 8 + 8 + 4 + 8 + 1 + 4 + 1;
pub(super) const HANDLE_MIN: usize = 8 + 8 + 4 + 1 + 1;

pub(super) fn invalid_data(what: impl Into<String>) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, what.into())
}
