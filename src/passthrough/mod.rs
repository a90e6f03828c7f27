//! The passthrough filesystem: serves FUSE operations from a host directory.
//!
//! Every method takes the caller's [`Context`] and node IDs as the guest sent them; it validates
//! them (unknown node ID → `EBADF`/`ENOENT`, bad name → `EINVAL`) and returns `io::Result`. The
//! FUSE dispatcher (`fuse_server`) turns the results into replies; nothing here knows the wire
//! format beyond the ABI structs.

use std::ffi::CStr;
use std::fs::File;
use std::io;
use std::time::Duration;

use fuse_backend_rs::abi::fuse_abi::SetattrIn;

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

/// Settings of the filesystem, from the command line.
#[derive(Clone, Debug)]
pub struct FsConfig {
    pub shared_dir: std::path::PathBuf,
    pub inode_file_handles: crate::cli::InodeFileHandles,
    pub entry_timeout: Duration,
    pub attr_timeout: Duration,
    /// `--cache=never`: open files with `FOPEN_DIRECT_IO`.
    pub direct_io: bool,
    pub readonly: bool,
    pub xattr: bool,
    pub announce_submounts: bool,
    /// How many fds the guest may make us hold (opened files, dirs, O_PATH inodes).
    pub fd_budget: usize,
}

pub struct PassthroughFs {
    _cfg: FsConfig,
}

fn nosys<T>() -> io::Result<T> {
    Err(io::Error::from_raw_os_error(libc::ENOSYS))
}

#[allow(unused_variables)]
impl PassthroughFs {
    pub fn new(cfg: FsConfig) -> io::Result<PassthroughFs> {
        Ok(PassthroughFs { _cfg: cfg })
    }
    /// FUSE_DESTROY (and a new FUSE_INIT): forget every inode but the root, close every handle.
    pub fn destroy(&self) {}
    pub fn lookup(&self, ctx: &Context, parent: u64, name: &CStr) -> io::Result<Entry> {
        nosys()
    }
    /// Drop `nlookup` lookups of `nodeid`; the inode dies when its count reaches zero.
    pub fn forget(&self, nodeid: u64, nlookup: u64) {}
    /// `fh` is `Some` when the guest sent FUSE_GETATTR_FH.
    pub fn getattr(&self, ctx: &Context, nodeid: u64, fh: Option<u64>) -> io::Result<Attr> {
        nosys()
    }
    pub fn setattr(&self, ctx: &Context, nodeid: u64, attr: &SetattrIn) -> io::Result<Attr> {
        nosys()
    }
    pub fn readlink(&self, ctx: &Context, nodeid: u64) -> io::Result<Vec<u8>> {
        nosys()
    }
    pub fn symlink(
        &self,
        ctx: &Context,
        parent: u64,
        name: &CStr,
        target: &CStr,
    ) -> io::Result<Entry> {
        nosys()
    }
    /// `mode` includes the file type bits; the guest kernel already applied the umask.
    pub fn mknod(
        &self,
        ctx: &Context,
        parent: u64,
        name: &CStr,
        mode: u32,
        rdev: u32,
    ) -> io::Result<Entry> {
        nosys()
    }
    pub fn mkdir(&self, ctx: &Context, parent: u64, name: &CStr, mode: u32) -> io::Result<Entry> {
        nosys()
    }
    pub fn unlink(&self, ctx: &Context, parent: u64, name: &CStr) -> io::Result<()> {
        nosys()
    }
    pub fn rmdir(&self, ctx: &Context, parent: u64, name: &CStr) -> io::Result<()> {
        nosys()
    }
    /// `flags`: 0 or `RENAME_NOREPLACE` / `RENAME_EXCHANGE` (FUSE_RENAME2).
    #[allow(clippy::too_many_arguments)]
    pub fn rename(
        &self,
        ctx: &Context,
        olddir: u64,
        oldname: &CStr,
        newdir: u64,
        newname: &CStr,
        flags: u32,
    ) -> io::Result<()> {
        nosys()
    }
    pub fn link(
        &self,
        ctx: &Context,
        nodeid: u64,
        newparent: u64,
        newname: &CStr,
    ) -> io::Result<Entry> {
        nosys()
    }
    /// `flags`: the guest's open(2) flags.
    pub fn open(&self, ctx: &Context, nodeid: u64, flags: u32) -> io::Result<Opened> {
        nosys()
    }
    pub fn create(
        &self,
        ctx: &Context,
        parent: u64,
        name: &CStr,
        mode: u32,
        flags: u32,
    ) -> io::Result<(Entry, Opened)> {
        nosys()
    }
    /// O_TMPFILE in directory `parent`.
    pub fn tmpfile(
        &self,
        ctx: &Context,
        parent: u64,
        mode: u32,
        flags: u32,
    ) -> io::Result<(Entry, Opened)> {
        nosys()
    }
    /// Runs `f` on the open file `fh` (READ/WRITE do their preadv/pwritev into guest memory in
    /// `f`). No lock is held while `f` runs.
    pub fn with_file<R>(
        &self,
        fh: u64,
        f: impl FnOnce(&mut File) -> io::Result<R>,
    ) -> io::Result<R> {
        nosys()
    }
    pub fn flush(&self, ctx: &Context, nodeid: u64, fh: u64, lock_owner: u64) -> io::Result<()> {
        nosys()
    }
    pub fn release(&self, ctx: &Context, nodeid: u64, fh: u64) -> io::Result<()> {
        nosys()
    }
    pub fn fsync(&self, ctx: &Context, nodeid: u64, fh: u64, datasync: bool) -> io::Result<()> {
        nosys()
    }
    pub fn opendir(&self, ctx: &Context, nodeid: u64, flags: u32) -> io::Result<Opened> {
        nosys()
    }
    /// Hands entries from `offset` on to `add` until it returns `false` (the reply buffer is
    /// full) or the directory ends. With `plus`, each entry but `.` and `..` comes with a looked-up
    /// [`Entry`] (its lookup count incremented); when `add` returns `false` for an entry, that
    /// lookup is undone here.
    pub fn readdir(
        &self,
        ctx: &Context,
        nodeid: u64,
        fh: u64,
        offset: u64,
        plus: bool,
        add: &mut dyn FnMut(&DirEntry, Option<&Entry>) -> bool,
    ) -> io::Result<()> {
        nosys()
    }
    pub fn releasedir(&self, ctx: &Context, nodeid: u64, fh: u64) -> io::Result<()> {
        nosys()
    }
    pub fn fsyncdir(&self, ctx: &Context, nodeid: u64, fh: u64, datasync: bool) -> io::Result<()> {
        nosys()
    }
    pub fn statfs(&self, ctx: &Context, nodeid: u64) -> io::Result<libc::statvfs64> {
        nosys()
    }
    pub fn access(&self, ctx: &Context, nodeid: u64, mask: u32) -> io::Result<()> {
        nosys()
    }
    pub fn fallocate(
        &self,
        ctx: &Context,
        nodeid: u64,
        fh: u64,
        mode: u32,
        offset: u64,
        length: u64,
    ) -> io::Result<()> {
        nosys()
    }
    pub fn lseek(
        &self,
        ctx: &Context,
        nodeid: u64,
        fh: u64,
        offset: u64,
        whence: u32,
    ) -> io::Result<u64> {
        nosys()
    }
    #[allow(clippy::too_many_arguments)]
    pub fn copy_file_range(
        &self,
        ctx: &Context,
        nodeid_in: u64,
        fh_in: u64,
        off_in: u64,
        nodeid_out: u64,
        fh_out: u64,
        off_out: u64,
        len: u64,
        flags: u64,
    ) -> io::Result<usize> {
        nosys()
    }
    pub fn syncfs(&self, ctx: &Context, nodeid: u64) -> io::Result<()> {
        nosys()
    }
    /// FUSE_STATX: `flags` are `AT_*` sync flags, `mask` the `STATX_*` fields wanted.
    pub fn statx(
        &self,
        ctx: &Context,
        nodeid: u64,
        fh: Option<u64>,
        flags: u32,
        mask: u32,
    ) -> io::Result<Attr> {
        nosys()
    }
    /// Errors with `ENOSYS` unless `--xattr`.
    pub fn getxattr(
        &self,
        ctx: &Context,
        nodeid: u64,
        name: &CStr,
        size: u32,
    ) -> io::Result<XattrReply> {
        nosys()
    }
    pub fn listxattr(&self, ctx: &Context, nodeid: u64, size: u32) -> io::Result<XattrReply> {
        nosys()
    }
    pub fn setxattr(
        &self,
        ctx: &Context,
        nodeid: u64,
        name: &CStr,
        value: &[u8],
        flags: u32,
    ) -> io::Result<()> {
        nosys()
    }
    pub fn removexattr(&self, ctx: &Context, nodeid: u64, name: &CStr) -> io::Result<()> {
        nosys()
    }
}
