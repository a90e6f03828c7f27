//! The values a request hands the filesystem and gets back: the caller, entries, attributes,
//! open files, directory entries, xattr replies, and the state's counts for the metrics.

use std::time::Duration;

/// The caller of one request, from `fuse_in_header`.
#[derive(Clone, Copy, Debug)]
pub struct Context {
    pub uid: u32,
    pub gid: u32,
    pub pid: u32,
}

/// What LOOKUP and the create-type operations return. The node's lookup count was incremented by
/// one: the guest now owes a FORGET for it.
#[derive(Clone, Copy)]
pub struct Entry {
    pub nodeid: u64,
    pub generation: u64,
    pub attr: libc::statx,
    /// `FUSE_ATTR_SUBMOUNT` when the entry is the root of a different host mount (and
    /// `--announce-submounts` is on), else 0.
    pub attr_flags: u32,
    pub entry_timeout: Duration,
    pub attr_timeout: Duration,
}

/// Attributes and how long the guest may cache them.
#[derive(Clone, Copy)]
pub struct Attr {
    pub st: libc::statx,
    pub timeout: Duration,
}

/// An opened file or directory.
#[derive(Clone, Copy, Debug)]
pub struct Opened {
    pub fh: u64,
    /// `FOPEN_*` flags for `fuse_open_out`.
    pub open_flags: u32,
}

/// One directory entry, as READDIR hands it out.
pub struct DirEntry<'a> {
    pub ino: u64,
    /// Offset of the *next* entry (what the guest sends back to continue).
    pub off: u64,
    /// `DT_*` type.
    pub kind: u32,
    pub name: &'a [u8],
}

/// The answer to GETXATTR/LISTXATTR: the size when the guest asked with size 0, else the data.
pub enum XattrReply {
    Size(u32),
    Data(Vec<u8>),
}

/// What [`PassthroughFs::gauges`] reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FsGauges {
    /// Inodes the guest holds (the root included).
    pub inodes: usize,
    /// Open files and directories the guest holds.
    pub open_handles: usize,
    /// fds of the guest's budget in use (open files and directories, O_PATH inode fds, the fd
    /// cache's).
    pub fds_in_use: usize,
    /// The guest's fd budget (RLIMIT_NOFILE minus the daemon's reserve).
    pub fd_budget: usize,
    /// Lookups in the fd cache that found an fd, and that did not.
    pub fd_cache_hits: u64,
    pub fd_cache_misses: u64,
    /// Operations refused with ENFILE because the budget was spent.
    pub enfile_refusals: u64,
}
