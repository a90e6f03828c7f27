//! The passthrough filesystem object: its configuration, its state (inode table, open files,
//! fd cache, fd budget, mounts) and the helpers every operation shares (an inode's O_PATH fd,
//! the caller's ids, attribute replies). The operations are in `ops/`, each an
//! `impl PassthroughFs` block.

use std::borrow::Cow;
use std::collections::HashSet;
use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::{Arc, RwLock};

use super::config::{FsConfig, InodeFileHandles};
use super::policy::credentials::Credentials;
use super::policy::killpriv::{self, KillPrivs};
use super::policy::windows_names;
use super::policy::writeback::Writeback;
use super::request_types::{Attr, Context, FsGauges};
use super::state::dir_names::DirNames;
use super::state::fd_budget::{FdBudget, FdToken, DAEMON_RESERVE};
use super::state::fd_cache::FdCache;
use super::state::file_handle::{handles_are_stable, FileHandle, MountFds};
use super::state::handle_table::HandleTable;
use super::state::host_inode::{InodeKey, InodeSource};
use super::state::inode_table::{Inode, InodeFd, InodeTable};
use super::sys;

pub(super) const FUSE_ATTR_SUBMOUNT: u32 = 1;
/// Cached inode fds given back at once when the budget is spent (a few, so a burst of opens
/// does not shed one at a time).
pub(super) const SHED_BATCH: usize = 16;
pub(super) const FOPEN_DIRECT_IO: u32 = 1;
pub(super) const FOPEN_KEEP_CACHE: u32 = 2;

pub struct PassthroughFs {
    pub(super) cfg: FsConfig,
    /// Whether inodes are keyed by file handles (prefer/mandatory and the process can open them).
    pub(super) use_handles: bool,
    pub(super) inodes: InodeTable,
    pub(super) handles: HandleTable,
    pub(super) mounts: MountFds,
    /// O_PATH fds of handle-backed inodes, while the fd budget has room for them.
    pub(super) fd_cache: FdCache,
    pub(super) budget: Arc<FdBudget>,
    /// `/proc/self/fd`, opened before any sandboxing, to re-open O_PATH fds.
    pub(super) proc_self_fd: OwnedFd,
    /// Mount IDs below the share found to have no file handles: their new inodes get O_PATH
    /// fds without asking again; each is logged once. Written only on a lookup that meets a
    /// new one.
    pub(super) no_handles: RwLock<HashSet<u64>>,
    /// Whether the session negotiated writeback caching (see `policy/writeback.rs`).
    pub(super) writeback: Writeback,
    /// The host name `--xattrmap` gives the guest's `security.capability`, when it is another
    /// name (see `policy/killpriv.rs`).
    pub(super) mapped_capability: Option<CString>,
    /// `--case-insensitive`: the names of recently used directories by folded name.
    pub(super) dir_names: DirNames,
}

pub(super) fn err(errno: i32) -> io::Error {
    io::Error::from_raw_os_error(errno)
}

/// ENOSPC or EDQUOT.
pub fn is_nospace(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT))
}

/// Refuses names that are not a single path component.
pub(super) fn check_name(name: &CStr) -> io::Result<()> {
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
            dir_names: DirNames::default(),
        })
    }

    /// Makes and opens a handle of the shared dir, to know whether handles work at all.
    pub(super) fn probe_handles(
        root: BorrowedFd,
        mounts: &MountFds,
        proc_self_fd: BorrowedFd,
    ) -> io::Result<()> {
        if !handles_are_stable(sys::fs_magic(root)) {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!(
                    "the file handles of {} may name another file once the host forgets an \
                     inode",
                    sys::fs_type(root)
                ),
            ));
        }
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
    pub(super) fn path_fd<'a>(&self, inode: &'a Inode) -> io::Result<InodeFd<'a>> {
        match &inode.source {
            InodeSource::Fd(p) => Ok(InodeFd::Borrowed(p.fd.as_fd())),
            InodeSource::Handle(_) => {
                let room = match self.fd_cache.get_or_room(inode.nodeid) {
                    Ok(fd) => return Ok(InodeFd::Shared(fd)),
                    Err(room) => room,
                };
                let fd = inode.open_handle(&self.mounts, libc::O_PATH)?;
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
    pub(super) fn take_token(&self) -> io::Result<FdToken> {
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
    pub(super) fn retry_nospace<T>(&self, mut f: impl FnMut() -> io::Result<T>) -> io::Result<T> {
        match f() {
            Err(e) if is_nospace(&e) && self.reclaim_deleted() => f(),
            other => other,
        }
    }

    /// Keeps `fd`, an O_PATH fd on the handle-backed `inode`, for its next operations.
    pub(super) fn cache_fd(&self, inode: &Inode, fd: OwnedFd) {
        if matches!(inode.source, InodeSource::Handle(_)) {
            self.fd_cache.insert(inode.nodeid, Arc::new(fd));
        }
    }

    pub(super) fn check_writable(&self) -> io::Result<()> {
        if self.cfg.readonly {
            Err(err(libc::EROFS))
        } else {
            Ok(())
        }
    }

    /// Attributes for the guest: the owner translated to guest ids. Every attribute reply
    /// (GETATTR, STATX, SETATTR) goes through here, every entry through [`Self::entry`].
    pub(super) fn attr(&self, mut st: libc::statx) -> Attr {
        self.cfg.ids.stat_to_guest(&mut st);
        Attr {
            st,
            timeout: self.cfg.attr_timeout,
        }
    }

    /// The caller's uid and gid in host ids; a caller whose uid or gid `forbid-guest` refuses
    /// gets EPERM.
    pub(super) fn caller_ids(&self, ctx: &Context) -> io::Result<(u32, u32)> {
        Ok((
            self.cfg.ids.uid.to_host(ctx.uid)?,
            self.cfg.ids.gid.to_host(ctx.gid)?,
        ))
    }

    /// Switches this thread to the caller's credentials, translated to host ids, for the rest
    /// of the scope (EPERM as in [`Self::caller_ids`]).
    pub(super) fn as_caller(&self, ctx: &Context) -> io::Result<Credentials> {
        let (uid, gid) = self.caller_ids(ctx)?;
        Credentials::switch(uid, gid)
    }

    /// For an operation the daemon makes as root on behalf of `ctx` (WRITE, OPEN, SETATTR):
    /// `None` unless `kill`, else the caller's gid and CAP_FSETID out until dropped
    /// ([`KillPrivs`]).
    pub(super) fn kill_privs(&self, ctx: &Context, kill: bool) -> io::Result<Option<KillPrivs>> {
        if !kill {
            return Ok(None);
        }
        KillPrivs::switch(self.caller_ids(ctx).ok().map(|(_, gid)| gid)).map(Some)
    }

    /// Removes the mapped `security.capability` of the regular file open as `fd`
    /// ([`killpriv::clear_mapped_capability`]).
    pub(super) fn clear_mapped_capability(&self, fd: BorrowedFd) -> io::Result<()> {
        killpriv::clear_mapped_capability(self.mapped_capability.as_deref(), fd)
    }

    /// A name from the guest as the host has it: as it came, or mapped back under
    /// `--windows-names` (`policy/windows_names.rs`).
    pub(super) fn name_from_guest<'a>(&self, name: &'a CStr) -> Cow<'a, CStr> {
        if self.cfg.windows_names {
            windows_names::to_host(name)
        } else {
            Cow::Borrowed(name)
        }
    }

    /// A symlink target from the guest as the host has it ([`Self::name_from_guest`] of each
    /// component).
    pub(super) fn target_from_guest<'a>(&self, target: &'a CStr) -> Cow<'a, CStr> {
        if self.cfg.windows_names {
            windows_names::target_to_host(target)
        } else {
            Cow::Borrowed(target)
        }
    }

    /// A host name as the guest sees it (READDIR, READDIRPLUS).
    pub(super) fn name_to_guest<'a>(&self, name: &'a [u8]) -> Cow<'a, [u8]> {
        if self.cfg.windows_names {
            windows_names::to_guest(name)
        } else {
            Cow::Borrowed(name)
        }
    }

    /// A symlink target as the guest sees it (READLINK).
    pub(super) fn target_to_guest(&self, target: Vec<u8>) -> Vec<u8> {
        if !self.cfg.windows_names {
            return target;
        }
        match windows_names::target_to_guest(&target) {
            Cow::Borrowed(_) => target,
            Cow::Owned(t) => t,
        }
    }
}
