//! Live migration of the filesystem's state: what the guest holds (node IDs with their lookup
//! counts, open files and directories with their fhs) saved on the source and re-opened on the
//! destination, so that the guest goes on with the same IDs and fhs. The data itself is never
//! moved: source and destination share (or copy) the directory. docs/migration.md is the user's
//! account; virtiofsd 1.14's doc/migration.md the specification followed.
//!
//! How an inode is found again ([`MigrationMode`], chosen by the source):
//! - `find-paths`: its path relative to the share, read from `/proc/self/fd` on an fd of the
//!   inode (checked by opening it again under `--migration-confirm-paths`), else found by a
//!   bounded search of the share ([`paths`]). The destination opens the path one component at a
//!   time from its own share root, never following a symlink, and under
//!   `--migration-verify-handles` compares the file handle the source sent with the one of what
//!   it opened.
//! - `file-handles`: its file handle, and for each mount the path of one inode on it, to open
//!   the handles against (mount IDs mean nothing on another host or namespace).
//!
//! Errors: what the source cannot describe (an unlinked file in `find-paths`, an inode without
//! a handle in `file-handles`) is sent as invalid with the reason; the destination decides by
//! its [`OnError`]: `abort` fails the whole load (nothing is installed, QEMU fails the
//! migration, the source goes on with everything open: saving changes nothing there);
//! `guest-error` installs such an inode as [`InodeSource::Invalid`] and its fhs as lost (`EIO`
//! to the guest), and everything else as usual.
//!
//! Invariant: a load either installs a complete state or nothing: the stream is read whole and
//! checked ([`codec`]), every inode and handle is re-opened into new objects, and only then are
//! the tables emptied and filled ([`PassthroughFs::install`]), with no request running (the
//! frontend has not started the queues yet).
//!
//! Layering: this module reads and writes only the filesystem's section of the stream; the
//! FUSE server writes the envelope and its INIT section around it (`fuse_server::migration`),
//! the vhost-user device moves the bytes. The API works on any `Write`/`Read`, so an in-place
//! upgrade can use it as well: there the fds themselves go beside the stream and the stream
//! names them by number: every open file goes by its own fd, an inode reached by a file handle
//! by its key and handle (with one fd per mount, [`Location::Keyed`]), any other inode by its
//! O_PATH fd. Nothing is looked up or re-opened, and no syscall is made per inode held by a
//! handle, on either side (the guest's queues stand still meanwhile).

pub mod codec;
mod load;
mod paths;
mod save;
#[cfg(test)]
mod tests;

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;

use super::handle_table::OpenFile;
use super::inode_table::PathFd;
use crate::option_values::option_values;

pub use codec::{read_envelope, Decoder, Encoder};
pub use load::Loaded;

option_values! {
    /// How the source describes each inode to the destination (`--migration-mode`).
    pub enum MigrationMode {
        /// By its path in the share (virtiofsd's default).
        FindPaths = "find-paths",
        /// By its file handle: same filesystem on both sides, CAP_DAC_READ_SEARCH on the
        /// destination.
        FileHandles = "file-handles",
    }
}

option_values! {
    /// What the destination does with an inode it cannot find (`--migration-on-error`).
    pub enum OnError {
        /// Fail the load, so that the migration fails and the source goes on.
        Abort = "abort",
        /// Mark only the inodes (and their fhs) concerned; the guest gets `EIO` on them.
        GuestError = "guest-error",
    }
}

/// The migration settings, from the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MigrationConfig {
    pub mode: MigrationMode,
    pub on_error: OnError,
    /// `--migration-verify-handles` (find-paths): the source sends each inode's file handle
    /// along with its path, and the destination refuses a path that opens another file.
    pub verify_handles: bool,
    /// `--migration-confirm-paths` (find-paths): the source opens every path it found again
    /// and looks for the inode in the share where that is not the same inode.
    pub confirm_paths: bool,
}

impl Default for MigrationConfig {
    fn default() -> Self {
        MigrationConfig {
            mode: MigrationMode::FindPaths,
            on_error: OnError::Abort,
            verify_handles: false,
            confirm_paths: false,
        }
    }
}

/// An fd an in-place upgrade hands over beside the stream: one the tables hold, kept open by
/// what holds it until it is sent. No duplicate is made: one per inode held by fd would be a
/// syscall each while the guest waits, and would double the fds (10,000 inodes held by fd
/// then passed RLIMIT_NOFILE).
pub struct HandedFd(Held);

enum Held {
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
const LOGGED: usize = 10;

/// The section tag of the filesystem's state.
const TAG: &[u8; 4] = b"PTFS";

/// How one inode is described in the stream.
#[derive(Debug, PartialEq, Eq)]
enum Location {
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

const LOC_INVALID: u8 = 0;
const LOC_PATH: u8 = 1;
const LOC_HANDLE: u8 = 2;
const LOC_FD: u8 = 3;
const LOC_KEYED: u8 = 4;

/// An inode as the stream carries it.
#[derive(Debug)]
struct InodeRecord {
    nodeid: u64,
    lookups: u64,
    /// `S_IFMT` bits.
    kind: u32,
    /// The FUSE generation (raised under writeback caching).
    generation: u64,
    location: Location,
    /// Under `--migration-verify-handles`: the handle the destination must find.
    check: Option<(i32, Vec<u8>)>,
}

/// An open file or directory as the stream carries it.
#[derive(Debug)]
struct HandleRecord {
    fh: u64,
    nodeid: u64,
    /// The status flags of the source's fd (F_GETFL: access mode, O_DIRECT, O_NOATIME, ...).
    flags: i32,
    dir: bool,
    /// The open fd itself, as the stream's fd number (an in-place upgrade), else re-opened.
    fd: Option<u32>,
}

/// The filesystem's section of the stream.
#[derive(Debug, Default)]
struct Section {
    /// The share root's file handle (`file-handles`, `--migration-verify-handles`): the
    /// destination refuses to open the source's inodes in a share that is not the source's.
    root: Option<(i32, Vec<u8>)>,
    /// Paths in the share of one inode per mount (`file-handles`), by [`Location::Handle`]'s
    /// `mount`.
    mounts: Vec<Vec<u8>>,
    inodes: Vec<InodeRecord>,
    /// The next fh the source would have handed out.
    next_fh: u64,
    handles: Vec<HandleRecord>,
    /// An in-place upgrade's mount fds (by [`Location::Keyed`]'s `mount`), as the stream's fd
    /// numbers. Written last and only when there are any, so that every other stream reads as
    /// before (the section is the last of the body, see `fuse_server::migration`).
    mount_fds: Vec<u32>,
}

/// Smallest encoding of an inode and a handle record (to bound counts, see [`Decoder::count`]):
/// an inode by fd ([`Location::Fd`], a 4-byte index) is the shortest.
const INODE_MIN: usize = 8 + 8 + 4 + 8 + 1 + 4 + 1;
const HANDLE_MIN: usize = 8 + 8 + 4 + 1 + 1;

fn invalid_data(what: impl Into<String>) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, what.into())
}
