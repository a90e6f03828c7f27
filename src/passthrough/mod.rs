//! The passthrough filesystem: serves FUSE operations from a host directory.
//!
//! Every method takes the caller's [`Context`] and node IDs as the guest sent them; it validates
//! them (unknown node ID or fh → `EBADF`, bad name → `EINVAL`) and returns `io::Result`. The
//! FUSE dispatcher (`fuse_server`) turns results into replies.
//!
//! Confinement: everything is resolved relative to fds the daemon holds (the shared dir, inode
//! fds or handles, the pre-opened `/proc/self/fd`), one name component at a time, with
//! `O_NOFOLLOW`: a name the guest sends is never a path, and no symlink is ever followed on the
//! host. So nothing here depends on host absolute paths, and a later pivot_root into the shared
//! dir changes nothing.
//!
//! Split: `entries` (names: lookup, create, link, rename, attributes), `files` (open files and
//! data), `dirs` (directory handles), `xattrs`, `acl` (the umask under `--posix-acl`), `labels`
//! (creation with a security context, `--security-label`), `killpriv` (setuid/setgid and
//! capabilities cleared where the guest leaves it to us).

mod acl;
mod credentials;
mod dirs;
mod entries;
pub mod fd_budget;
pub mod fd_cache;
mod file_handle;
mod files;
mod handle_table;
pub mod id_map;
mod inode_index;
mod inode_table;
mod killpriv;
mod labels;
mod lookups;
pub mod migration;
mod own_ids;
mod setattr;
pub(crate) mod sys;
mod writeback;
pub mod xattr_map;
mod xattrs;

use std::collections::HashSet;
use std::ffi::CStr;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use self::credentials::Credentials;
use self::fd_budget::{FdBudget, FdToken, DAEMON_RESERVE};
use self::fd_cache::FdCache;
use self::file_handle::{FileHandle, MountFds};
use self::handle_table::HandleTable;
use self::inode_table::{Inode, InodeFd, InodeKey, InodeSource, InodeTable};
pub use self::labels::SecurityLabel;
use self::writeback::Writeback;
use crate::option_values::option_values;

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

option_values! {
    /// When to reference inodes by file handle rather than by an `O_PATH` file descriptor
    /// (`--inode-file-handles=never|prefer|mandatory`; `fallback` is a deprecated alias of
    /// `prefer`).
    pub enum InodeFileHandles {
        /// Always use `O_PATH` file descriptors.
        Never = "never",
        /// Use file handles where the filesystem supports them, else `O_PATH` descriptors.
        Prefer = "prefer" | "fallback",
        /// Always use file handles; fail where they are not supported.
        Mandatory = "mandatory",
    }
}

/// Settings of the filesystem, from the command line.
#[derive(Clone, Debug)]
pub struct FsConfig {
    pub shared_dir: std::path::PathBuf,
    pub inode_file_handles: InodeFileHandles,
    pub entry_timeout: Duration,
    pub attr_timeout: Duration,
    /// `--cache=never`: open files with `FOPEN_DIRECT_IO`.
    pub direct_io: bool,
    /// `--allow-direct-io`: keep the guest's O_DIRECT when opening files.
    pub allow_direct_io: bool,
    /// `--preserve-noatime`: keep the guest's O_NOATIME when opening files and directories.
    /// Else it is cleared, as virtiofsd clears it: the host allows O_NOATIME only to the file's
    /// owner or with CAP_FOWNER, which the daemon may lack (an unprivileged run, `--modcaps`, an
    /// owner outside its user namespace, CREATE under the caller's fsuid), and the open would
    /// fail with EPERM where the guest's own check passed.
    pub preserve_noatime: bool,
    /// `--cache=always`: let the guest keep its page cache across opens.
    pub keep_cache: bool,
    pub readonly: bool,
    pub xattr: bool,
    /// `--xattrmap`: how xattr names are translated between guest and host.
    pub xattrmap: Option<xattr_map::XattrMap>,
    /// `--translate-uid` / `--translate-gid`: how uids and gids are translated between guest
    /// and host (the identity by default).
    pub ids: id_map::IdMaps,
    pub announce_submounts: bool,
    /// How many fds the guest may make us hold (opened files, dirs, O_PATH inodes).
    pub fd_budget: usize,
    /// How many O_PATH fds of handle-backed inodes the fd cache may hold (0: no cache).
    pub fd_cache_size: usize,
    /// `--migration-*`: how the state is saved for, and loaded from, a live migration.
    pub migration: migration::MigrationConfig,
}

#[cfg(test)]
impl FsConfig {
    /// The unit tests' share: `dir` with the given inode mode, 1 s timeouts, a budget of 1,000
    /// fds and every option at its default.
    pub(crate) fn for_tests(dir: &std::path::Path, inode_file_handles: InodeFileHandles) -> Self {
        FsConfig {
            shared_dir: dir.to_path_buf(),
            inode_file_handles,
            entry_timeout: Duration::from_secs(1),
            attr_timeout: Duration::from_secs(1),
            direct_io: false,
            allow_direct_io: false,
            preserve_noatime: false,
            keep_cache: false,
            readonly: false,
            xattr: false,
            xattrmap: None,
            ids: Default::default(),
            announce_submounts: false,
            fd_budget: 1000,
            fd_cache_size: fd_cache::DEFAULT_SIZE,
            migration: Default::default(),
        }
    }
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

const FUSE_ATTR_SUBMOUNT: u32 = 1;
/// Cached inode fds given back at once when the budget is spent (a few, so a burst of opens
/// does not shed one at a time).
const SHED_BATCH: usize = 16;
const FOPEN_DIRECT_IO: u32 = 1;
const FOPEN_KEEP_CACHE: u32 = 2;

pub struct PassthroughFs {
    cfg: FsConfig,
    /// Whether inodes are keyed by file handles (prefer/mandatory and the process can open them).
    use_handles: bool,
    inodes: InodeTable,
    handles: HandleTable,
    mounts: MountFds,
    /// O_PATH fds of handle-backed inodes, while the fd budget has room for them.
    fd_cache: FdCache,
    budget: Arc<FdBudget>,
    /// `/proc/self/fd`, opened before any sandboxing, to re-open O_PATH fds.
    proc_self_fd: OwnedFd,
    /// Mount IDs below the share found to have no file handles: their new inodes get O_PATH
    /// fds without asking again; each is logged once. Written only on a lookup that meets a
    /// new one.
    no_handles: RwLock<HashSet<u64>>,
    /// Whether the session negotiated writeback caching (see [`writeback`]).
    writeback: Writeback,
    /// The host name `--xattrmap` gives the guest's `security.capability`, when it is another
    /// name (see [`killpriv`]).
    mapped_capability: Option<std::ffi::CString>,
}

fn err(errno: i32) -> io::Error {
    io::Error::from_raw_os_error(errno)
}

/// ENOSPC or EDQUOT.
pub fn is_nospace(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT))
}

/// Refuses names that are not a single path component.
fn check_name(name: &CStr) -> io::Result<()> {
    let b = name.to_bytes();
    if b.is_empty() || b == b"." || b == b".." || b.contains(&b'/') {
        return Err(err(libc::EINVAL));
    }
    Ok(())
}

impl PassthroughFs {
    pub fn new(cfg: FsConfig) -> io::Result<PassthroughFs> {
        let proc_self_fd = sys::openat(
            std::fs::File::open("/")?.as_fd(),
            c"proc/self/fd",
            libc::O_PATH | libc::O_DIRECTORY,
            0,
        )
        .map_err(|e| io::Error::new(e.kind(), format!("cannot open /proc/self/fd: {e}")))?;
        PassthroughFs::with_proc_self_fd(cfg, proc_self_fd)
    }

    /// [`PassthroughFs::new`] with `/proc/self/fd` opened by the caller (an O_PATH directory
    /// fd; the sandbox's, when the root it serves in has no `/proc`).
    pub fn with_proc_self_fd(cfg: FsConfig, proc_self_fd: OwnedFd) -> io::Result<PassthroughFs> {
        let budget = FdBudget::new(cfg.fd_budget);
        let path = std::ffi::CString::new(cfg.shared_dir.as_os_str().as_encoded_bytes())
            .map_err(|_| err(libc::EINVAL))?;
        let root_fd = sys::openat(
            std::fs::File::open("/")?.as_fd(),
            &path,
            libc::O_PATH | libc::O_DIRECTORY,
            0,
        )
        .map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("shared directory {}: {e}", cfg.shared_dir.display()),
            )
        })?;
        let st = sys::statx(root_fd.as_fd(), c"", 0, sys::STATX_WANTED)?;
        let mounts = MountFds::default();
        let use_handles = match cfg.inode_file_handles {
            InodeFileHandles::Never => false,
            mode => match Self::probe_handles(root_fd.as_fd(), &mounts, proc_self_fd.as_fd()) {
                Ok(()) => true,
                Err(e) if mode == InodeFileHandles::Prefer => {
                    log::warn!(
                        "file handles do not work here ({e}); --inode-file-handles=prefer falls \
                         back to one O_PATH fd per inode"
                    );
                    false
                }
                Err(e) => {
                    return Err(io::Error::new(
                        e.kind(),
                        format!(
                            "--inode-file-handles=mandatory: cannot use file handles on {} ({e}); \
                             they need CAP_DAC_READ_SEARCH and a filesystem that supports them",
                            cfg.shared_dir.display()
                        ),
                    ))
                }
            },
        };
        let key = InodeKey::of(&st);
        let token = budget.take()?;
        let root = Inode::new(key, libc::S_IFDIR, InodeSource::fd(root_fd, token));
        let fd_cache = FdCache::new(Arc::clone(&budget), cfg.fd_cache_size);
        if use_handles {
            sys::grow_fd_table(proc_self_fd.as_fd(), fd_cache.capacity() + DAEMON_RESERVE);
        }
        let mapped_capability = killpriv::mapped_capability(cfg.xattrmap.as_ref());
        Ok(PassthroughFs {
            cfg,
            use_handles,
            inodes: InodeTable::new(root),
            handles: HandleTable::default(),
            mounts,
            fd_cache,
            budget,
            proc_self_fd,
            no_handles: RwLock::default(),
            writeback: Writeback::default(),
            mapped_capability,
        })
    }

    /// Makes and opens a handle of the shared dir, to know whether handles work at all.
    fn probe_handles(
        root: BorrowedFd,
        mounts: &MountFds,
        proc_self_fd: BorrowedFd,
    ) -> io::Result<()> {
        let (h, mnt_id) = FileHandle::from_fd(root, c"")?.ok_or_else(|| err(libc::EOPNOTSUPP))?;
        mounts.ensure(mnt_id, root, libc::S_IFDIR, proc_self_fd)?;
        mounts.open(mnt_id, &h, libc::O_PATH).map(drop)?;
        log::debug!(
            "the shared dir (mount ID {}, {}) is served through file handles",
            mnt_id,
            sys::fs_type(root)
        );
        Ok(())
    }

    /// Whether inodes are keyed by file handles.
    pub fn uses_file_handles(&self) -> bool {
        self.use_handles
    }

    /// Inodes the guest holds (the root included).
    pub fn inode_count(&self) -> usize {
        self.inodes.len()
    }

    /// Open files and directories the guest holds.
    pub fn open_handle_count(&self) -> usize {
        self.handles.len()
    }

    /// Lookups the guest holds on `nodeid`.
    pub fn lookup_count(&self, nodeid: u64) -> u64 {
        self.inodes.lookups(nodeid)
    }

    /// fds of the guest's budget in use.
    pub fn fds_in_use(&self) -> usize {
        self.budget.in_use()
    }

    /// What FUSE_INIT answered about FUSE_WRITEBACK_CACHE, before the session serves opens.
    pub fn set_writeback(&self, on: bool) {
        self.writeback.set(on);
    }

    /// The state's counts, for the metrics; reads atomics only (no lock a request takes).
    pub fn gauges(&self) -> FsGauges {
        let (fd_cache_hits, fd_cache_misses) = self.fd_cache.hits_and_misses();
        FsGauges {
            inodes: self.inodes.len(),
            open_handles: self.handles.len(),
            fds_in_use: self.budget.in_use(),
            fd_budget: self.budget.limit(),
            fd_cache_hits,
            fd_cache_misses,
            enfile_refusals: self.budget.refusals(),
        }
    }

    /// FUSE_DESTROY (and a new FUSE_INIT): forget every inode but the root, close every handle.
    pub fn destroy(&self) {
        self.fd_cache.clear();
        self.handles.clear();
        self.inodes.clear();
    }

    /// An O_PATH fd for `inode`, for this request: its own (an fd-backed inode), else the
    /// cached one, else one opened from its handle (and cached for the next request).
    fn path_fd<'a>(&self, inode: &'a Inode) -> io::Result<InodeFd<'a>> {
        match &inode.source {
            InodeSource::Fd(p) => Ok(InodeFd::Borrowed(p.fd.as_fd())),
            InodeSource::Handle(h) => {
                let room = match self.fd_cache.get_or_room(inode.nodeid) {
                    Ok(fd) => return Ok(InodeFd::Shared(fd)),
                    Err(room) => room,
                };
                let fd = self
                    .mounts
                    .open(u64::from(inode.key.mnt_id), h, libc::O_PATH)?;
                if !room {
                    // A full shard would not keep it (see the fd cache's invariants).
                    return Ok(InodeFd::Owned(fd));
                }
                let fd = Arc::new(fd);
                self.fd_cache.insert(inode.nodeid, Arc::clone(&fd));
                Ok(InodeFd::Shared(fd))
            }
            InodeSource::Invalid => Err(err(libc::EIO)),
        }
    }

    /// One fd of the guest's budget for a file, directory or inode fd the guest will hold; when
    /// the budget is spent, cached inode fds are given back first.
    fn take_token(&self) -> io::Result<FdToken> {
        if let Some(t) = self.budget.try_take() {
            return Ok(t);
        }
        self.fd_cache.shed(SHED_BATCH);
        self.budget.take()
    }

    /// Drops the cached fds of inodes deleted meanwhile (by the host: the guest's own unlinks
    /// drop them at once), which hold their data; returns whether there were any. Called when
    /// the host filesystem is full.
    pub fn reclaim_deleted(&self) -> bool {
        let mut any = false;
        for (nodeid, fd) in self.fd_cache.snapshot() {
            if sys::statx(fd.as_fd(), c"", 0, libc::STATX_NLINK).is_ok_and(|st| st.stx_nlink == 0) {
                self.fd_cache.evict_fd(nodeid, &fd);
                any = true;
            }
        }
        any
    }

    /// Runs `f` and, if it fails for lack of space while the fd cache held deleted files, once
    /// more after dropping them.
    fn retry_nospace<T>(&self, mut f: impl FnMut() -> io::Result<T>) -> io::Result<T> {
        match f() {
            Err(e) if is_nospace(&e) && self.reclaim_deleted() => f(),
            other => other,
        }
    }

    /// Keeps `fd`, an O_PATH fd on the handle-backed `inode`, for its next operations.
    fn cache_fd(&self, inode: &Inode, fd: OwnedFd) {
        if matches!(inode.source, InodeSource::Handle(_)) {
            self.fd_cache.insert(inode.nodeid, Arc::new(fd));
        }
    }

    fn check_writable(&self) -> io::Result<()> {
        if self.cfg.readonly {
            Err(err(libc::EROFS))
        } else {
            Ok(())
        }
    }

    /// Attributes for the guest: the owner translated to guest ids. Every attribute reply
    /// (GETATTR, STATX, SETATTR) goes through here, every entry through [`Self::entry`].
    fn attr(&self, mut st: libc::statx) -> Attr {
        self.cfg.ids.stat_to_guest(&mut st);
        Attr {
            st,
            timeout: self.cfg.attr_timeout,
        }
    }

    /// The caller's uid and gid in host ids; a caller whose uid or gid `forbid-guest` refuses
    /// gets EPERM.
    fn caller_ids(&self, ctx: &Context) -> io::Result<(u32, u32)> {
        Ok((
            self.cfg.ids.uid.to_host(ctx.uid)?,
            self.cfg.ids.gid.to_host(ctx.gid)?,
        ))
    }

    /// Switches this thread to the caller's credentials, translated to host ids, for the rest
    /// of the scope (EPERM as in [`Self::caller_ids`]).
    fn as_caller(&self, ctx: &Context) -> io::Result<Credentials> {
        let (uid, gid) = self.caller_ids(ctx)?;
        Credentials::switch(uid, gid)
    }
}
