//! Name operations: lookup and forget, attributes, and everything that creates, links, renames
//! or removes a name.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use super::file_handle::FileHandle;
use super::inode_table::{Inode, InodeFd, InodeKey, InodeSource};
use super::labels::{make_node, NewNode, SecurityLabel};
use super::sys;
use super::{
    check_name, err, Attr, Context, Entry, InodeFileHandles, PassthroughFs, FUSE_ATTR_SUBMOUNT,
};
use crate::sync::{read, write};

impl PassthroughFs {
    /// Looks `name` up in the directory `dir` (an fd on the inode `parent`) and takes one lookup
    /// of the result. Used by LOOKUP, READDIRPLUS and after most creates.
    pub(super) fn lookup_at(
        &self,
        parent: &Inode,
        dir: BorrowedFd,
        name: &CStr,
    ) -> io::Result<Entry> {
        let fd = sys::openat(dir, name, libc::O_PATH | libc::O_NOFOLLOW, 0)?;
        self.lookup_found(parent, name, Found::Path(fd))
    }

    /// The entry of the file CREATE just made (or opened) as `name` in `parent` and holds open
    /// as `file` (`O_NOFOLLOW`: not a symlink): a lookup of `name` that does not open it again
    /// by name (so it is also the very file opened, whatever the host renamed meanwhile). An
    /// O_PATH fd on it is opened only for what keeps one: the inode's source (no file handles),
    /// or an fd cache with room; with handles and a full cache, that saves the `openat` and
    /// `close` of a lookup by name.
    pub(super) fn lookup_created(
        &self,
        parent: &Inode,
        name: &CStr,
        file: BorrowedFd,
    ) -> io::Result<Entry> {
        self.lookup_found(parent, name, Found::Open(file))
    }

    fn lookup_found(&self, parent: &Inode, name: &CStr, found: Found) -> io::Result<Entry> {
        let st = sys::statx(found.fd(), c"", 0, sys::STATX_WANTED)?;
        let key = InodeKey::of(&st);
        let existing = self.inodes.ref_existing(&key);
        // A cached fd pins its inode, so no other file can have its number: the key is enough.
        let pinned = existing
            .as_ref()
            .is_some_and(|inode| self.fd_cache.get(inode.nodeid).is_some());
        let inode = match existing {
            Some(inode) if pinned => inode,
            Some(inode) if !self.is_replaced(&inode, found.fd())? => {
                self.cache_found(&inode, found);
                inode
            }
            existing => {
                // A node of a deleted inode whose number the host reused stays stale (ESTALE)
                // for the guest until it forgets it; the name gets a new node.
                if let Some(stale) = existing {
                    self.forget(stale.nodeid, 1);
                }
                let kind = st.stx_mode as u32 & libc::S_IFMT;
                let mnt_id = u64::from(key.mnt_id);
                match self.handle_source(found.fd(), kind, mnt_id, name)? {
                    Some(source) => {
                        let inode = self.inodes.insert(Inode::new(key, kind, source))?;
                        self.cache_found(&inode, found);
                        inode
                    }
                    None => {
                        let token = self.take_token()?;
                        let fd = found.into_path(self.proc_self_fd.as_fd())?;
                        let source = InodeSource::fd(fd, token);
                        self.inodes.insert(Inode::new(key, kind, source))?
                    }
                }
            }
        };
        self.check_guest_view(&inode, &st);
        let submount =
            self.cfg.announce_submounts && key.mnt_id != parent.key.mnt_id && inode.is_dir();
        Ok(self.entry(&inode, st, if submount { FUSE_ATTR_SUBMOUNT } else { 0 }))
    }

    /// Keeps an O_PATH fd of the handle-backed `inode` in the fd cache: the one a lookup by
    /// name opened, or for a file held open (CREATE) one opened through `/proc/self/fd`, only if
    /// the cache has room for it (else nothing: the cache is an optimisation, a failure to
    /// open the fd is not the request's).
    fn cache_found(&self, inode: &Inode, found: Found) {
        match found {
            Found::Path(fd) => self.cache_fd(inode, fd),
            Found::Open(file) => {
                if matches!(inode.source, InodeSource::Handle(_))
                    && self.fd_cache.has_room(inode.nodeid)
                {
                    if let Ok(fd) = found_path(self.proc_self_fd.as_fd(), file) {
                        self.cache_fd(inode, fd);
                    }
                }
            }
        }
    }

    /// Whether the handle-backed `inode` is not the file `fd` is open on any more, although
    /// their keys match (see [`Inode::replaced_by`]).
    fn is_replaced(&self, inode: &Inode, fd: BorrowedFd) -> io::Result<bool> {
        if !matches!(inode.source, InodeSource::Handle(_)) {
            return Ok(false);
        }
        Ok(match FileHandle::from_fd(fd, c"")? {
            Some((h, _)) => inode.replaced_by(&InodeSource::Handle(h)),
            None => false,
        })
    }

    /// How a newly seen inode (of type `kind`, on mount `mnt_id`, found as `name`) will be
    /// reached: its handle (and then `fd` is given back, for the fd cache), or `fd` itself (see
    /// [`PassthroughFs::handle_source`]).
    pub(super) fn source_for(
        &self,
        fd: OwnedFd,
        kind: u32,
        mnt_id: u64,
        name: &CStr,
    ) -> io::Result<(InodeSource, Option<OwnedFd>)> {
        if let Some(source) = self.handle_source(fd.as_fd(), kind, mnt_id, name)? {
            return Ok((source, Some(fd)));
        }
        let token = self.take_token()?;
        Ok((InodeSource::fd(fd, token), None))
    }

    /// The handle of a newly seen inode (of type `kind`, on mount `mnt_id`, found as `name`,
    /// open as `fd`), or `None` when it is to be reached through an O_PATH fd. A
    /// mount found to have no handles is not asked again (one failing syscall per mount, not
    /// per inode). A sub-filesystem without handles under `mandatory`: the lookup fails, the
    /// daemon goes on.
    fn handle_source(
        &self,
        fd: BorrowedFd,
        kind: u32,
        mnt_id: u64,
        name: &CStr,
    ) -> io::Result<Option<InodeSource>> {
        let mandatory = self.cfg.inode_file_handles == InodeFileHandles::Mandatory;
        if self.use_handles && !read(&self.no_handles).contains(&mnt_id) {
            match FileHandle::from_fd(fd, c"")? {
                // The inode's handles open against the mount fd of its key's mount ID.
                Some((h, handle_mnt)) if handle_mnt == mnt_id => {
                    match self
                        .mounts
                        .ensure(mnt_id, fd, kind, self.proc_self_fd.as_fd())
                    {
                        Ok(new) => {
                            if new {
                                log::debug!(
                                    "{name:?} (mount ID {mnt_id}, {}) is served through file \
                                     handles",
                                    sys::fs_type(fd)
                                );
                            }
                            return Ok(Some(InodeSource::Handle(h)));
                        }
                        Err(e) if mandatory => return Err(e),
                        // No mount fd yet and this inode cannot give one (not a directory or
                        // regular file): an O_PATH fd for this inode only.
                        Err(_) => {}
                    }
                }
                // statx and name_to_handle_at report the same mount ID for one fd; should
                // they not, the handle is not used.
                Some(_) => {}
                None => self.no_handles_seen(mnt_id, name, fd, mandatory),
            }
        }
        if self.use_handles && mandatory {
            return Err(err(libc::EOPNOTSUPP));
        }
        Ok(None)
    }

    /// Remembers a mount below the share without file handles and says once what happens to
    /// it: served through O_PATH fds (debug), or refused under `mandatory` (a warning).
    fn no_handles_seen(&self, mnt_id: u64, name: &CStr, fd: BorrowedFd, mandatory: bool) {
        if !write(&self.no_handles).insert(mnt_id) {
            return;
        }
        let fs = sys::fs_type(fd);
        if mandatory {
            log::warn!(
                "{name:?} (mount ID {mnt_id}, {fs}) has no file handles: with \
                 --inode-file-handles=mandatory lookups there fail with EOPNOTSUPP; the rest of \
                 the share is served"
            );
        } else {
            log::debug!(
                "{name:?} (mount ID {mnt_id}, {fs}) has no file handles: served through O_PATH fds"
            );
        }
    }

    /// An entry for the guest (LOOKUP, READDIRPLUS, every create): the owner translated to
    /// guest ids, as in [`PassthroughFs::attr`].
    pub(super) fn entry(&self, inode: &Inode, mut attr: libc::statx, attr_flags: u32) -> Entry {
        self.cfg.ids.stat_to_guest(&mut attr);
        Entry {
            nodeid: inode.nodeid,
            generation: if self.writeback.on() {
                self.inodes.generation(inode.nodeid)
            } else {
                0
            },
            attr,
            attr_flags,
            entry_timeout: self.cfg.entry_timeout,
            attr_timeout: self.cfg.attr_timeout,
        }
    }

    /// The directory inode `parent` and an fd on it.
    fn dir(&self, parent: u64) -> io::Result<Inode> {
        let inode = self.inodes.get(parent)?;
        if !inode.is_dir() {
            return Err(err(libc::ENOTDIR));
        }
        Ok(inode)
    }

    pub fn lookup(&self, _ctx: &Context, parent: u64, name: &CStr) -> io::Result<Entry> {
        check_name(name)?;
        let dir = self.dir(parent)?;
        let fd = self.path_fd(&dir)?;
        self.lookup_at(&dir, fd.as_fd(), name)
    }

    /// Drop `nlookup` lookups of `nodeid`; the inode dies when its count reaches zero.
    pub fn forget(&self, nodeid: u64, nlookup: u64) {
        if self.inodes.forget(nodeid, nlookup) {
            self.fd_cache.evict(nodeid);
        }
    }

    /// `fh` is `Some` when the guest sent FUSE_GETATTR_FH.
    pub fn getattr(&self, _ctx: &Context, nodeid: u64, fh: Option<u64>) -> io::Result<Attr> {
        self.statx_node(nodeid, fh, 0, sys::STATX_WANTED)
            .map(|st| self.attr(st))
    }

    /// FUSE_STATX: `flags` are `AT_*` sync flags, `mask` the `STATX_*` fields wanted.
    pub fn statx(
        &self,
        _ctx: &Context,
        nodeid: u64,
        fh: Option<u64>,
        flags: u32,
        mask: u32,
    ) -> io::Result<Attr> {
        let sync = flags as i32 & libc::AT_STATX_SYNC_TYPE;
        self.statx_node(nodeid, fh, sync, mask | sys::STATX_WANTED)
            .map(|st| self.attr(st))
    }

    fn statx_node(
        &self,
        nodeid: u64,
        fh: Option<u64>,
        flags: i32,
        mask: u32,
    ) -> io::Result<libc::statx> {
        if let Some(fh) = fh {
            let file = self.handles.get(fh)?;
            return sys::statx(file.file.as_fd(), c"", flags, mask);
        }
        let inode = self.inodes.get(nodeid)?;
        let fd = self.path_fd(&inode)?;
        let st = sys::statx(fd.as_fd(), c"", flags, mask)?;
        if st.stx_nlink == 0 && matches!(inode.source, InodeSource::Handle(_)) {
            // Deleted on the host: drop the cached fd that holds it, and answer as the handle
            // does (ESTALE, unless the inode is still open somewhere).
            if let InodeFd::Shared(fd) = fd {
                self.fd_cache.evict_fd(nodeid, &fd);
            }
            let fd = self.path_fd(&inode)?;
            return sys::statx(fd.as_fd(), c"", flags, mask);
        }
        Ok(st)
    }

    pub fn readlink(&self, _ctx: &Context, nodeid: u64) -> io::Result<Vec<u8>> {
        let inode = self.inodes.get(nodeid)?;
        if !inode.is_symlink() {
            return Err(err(libc::EINVAL));
        }
        sys::readlink(self.path_fd(&inode)?.as_fd())
    }

    /// Creates `node(mask)` (with the bits `mask` cleared from its mode) as `name` in `parent`
    /// with the caller's credentials, labelled first when the guest sent a security context
    /// (see [`super::labels`]), then looks the new name up. `umask` is the guest's, when it left
    /// it to us (see [`PassthroughFs::creation_umask`]).
    fn create_node<'t>(
        &self,
        ctx: &Context,
        parent: u64,
        name: &CStr,
        umask: Option<u32>,
        label: Option<&SecurityLabel>,
        node: impl Fn(u32) -> NewNode<'t>,
    ) -> io::Result<Entry> {
        self.check_writable()?;
        check_name(name)?;
        let dir = self.dir(parent)?;
        let fd = self.path_fd(&dir)?;
        let mask = self.creation_umask(fd.as_fd(), umask)?;
        match label {
            Some(label) => drop(self.create_labelled(ctx, fd.as_fd(), name, node(mask), label)?),
            None => {
                let _creds = self.as_caller(ctx)?;
                self.retry_nospace(|| make_node(fd.as_fd(), name, &node(mask)))?;
            }
        }
        self.lookup_at(&dir, fd.as_fd(), name)
    }

    /// `label`: the security context the guest sent, if any.
    pub fn symlink(
        &self,
        ctx: &Context,
        parent: u64,
        name: &CStr,
        target: &CStr,
        label: Option<&SecurityLabel>,
    ) -> io::Result<Entry> {
        self.create_node(ctx, parent, name, None, label, |_| NewNode::Symlink {
            target,
        })
    }

    /// `mode` includes the file type bits; `umask` is `Some` when the guest kernel left it to
    /// us (FUSE_DONT_MASK); `label` as for [`PassthroughFs::symlink`].
    #[allow(clippy::too_many_arguments)]
    pub fn mknod(
        &self,
        ctx: &Context,
        parent: u64,
        name: &CStr,
        mode: u32,
        rdev: u32,
        umask: Option<u32>,
        label: Option<&SecurityLabel>,
    ) -> io::Result<Entry> {
        self.create_node(ctx, parent, name, umask, label, |mask| NewNode::Special {
            mode: mode & !mask,
            rdev,
        })
    }

    /// `umask` as for [`PassthroughFs::mknod`], `label` as for [`PassthroughFs::symlink`].
    pub fn mkdir(
        &self,
        ctx: &Context,
        parent: u64,
        name: &CStr,
        mode: u32,
        umask: Option<u32>,
        label: Option<&SecurityLabel>,
    ) -> io::Result<Entry> {
        self.create_node(ctx, parent, name, umask, label, |mask| NewNode::Dir {
            mode: mode & !mask,
        })
    }

    fn remove(&self, parent: u64, name: &CStr, flags: i32) -> io::Result<()> {
        self.check_writable()?;
        check_name(name)?;
        let dir = self.dir(parent)?;
        let fd = self.path_fd(&dir)?;
        self.uncache_name(fd.as_fd(), name);
        sys::unlinkat(fd.as_fd(), name, flags)
    }

    /// Drops the cached fd of the inode `name` in `dir` names (about to be unlinked or renamed
    /// over), so the cache does not keep a deleted file's data alive while the guest holds its
    /// node (a guest may never forget it).
    fn uncache_name(&self, dir: BorrowedFd, name: &CStr) {
        if self.fd_cache.is_empty() {
            return;
        }
        let Ok(st) = sys::statx(dir, name, 0, libc::STATX_INO | libc::STATX_MNT_ID) else {
            return;
        };
        let key = InodeKey::of(&st);
        if let Some(id) = self.inodes.id_of(&key) {
            self.fd_cache.evict(id);
        }
    }

    pub fn unlink(&self, _ctx: &Context, parent: u64, name: &CStr) -> io::Result<()> {
        self.remove(parent, name, 0)
    }

    pub fn rmdir(&self, _ctx: &Context, parent: u64, name: &CStr) -> io::Result<()> {
        self.remove(parent, name, libc::AT_REMOVEDIR)
    }

    /// `flags`: 0 or `RENAME_NOREPLACE` / `RENAME_EXCHANGE` (FUSE_RENAME2).
    pub fn rename(
        &self,
        _ctx: &Context,
        olddir: u64,
        oldname: &CStr,
        newdir: u64,
        newname: &CStr,
        flags: u32,
    ) -> io::Result<()> {
        self.check_writable()?;
        check_name(oldname)?;
        check_name(newname)?;
        if flags & !(libc::RENAME_NOREPLACE | libc::RENAME_EXCHANGE) != 0 {
            return Err(err(libc::EINVAL));
        }
        let (old, new) = (self.dir(olddir)?, self.dir(newdir)?);
        let (oldfd, newfd) = (self.path_fd(&old)?, self.path_fd(&new)?);
        if flags & libc::RENAME_EXCHANGE == 0 {
            self.uncache_name(newfd.as_fd(), newname);
        }
        sys::renameat2(oldfd.as_fd(), oldname, newfd.as_fd(), newname, flags)
    }

    pub fn link(
        &self,
        _ctx: &Context,
        nodeid: u64,
        newparent: u64,
        newname: &CStr,
    ) -> io::Result<Entry> {
        self.check_writable()?;
        check_name(newname)?;
        let inode = self.inodes.get(nodeid)?;
        if inode.is_dir() {
            return Err(err(libc::EPERM));
        }
        let dir = self.dir(newparent)?;
        let (fd, dirfd) = (self.path_fd(&inode)?, self.path_fd(&dir)?);
        sys::link_fd(fd.as_fd(), dirfd.as_fd(), newname)?;
        self.lookup_at(&dir, dirfd.as_fd(), newname)
    }
}

/// The fd a lookup found its file by: an O_PATH fd it opened by name, or the fd CREATE opened.
enum Found<'a> {
    Path(OwnedFd),
    Open(BorrowedFd<'a>),
}

impl Found<'_> {
    fn fd(&self) -> BorrowedFd<'_> {
        match self {
            Found::Path(fd) => fd.as_fd(),
            Found::Open(fd) => *fd,
        }
    }

    /// An O_PATH fd of the file (`proc_self_fd`: the daemon's `/proc/self/fd`).
    fn into_path(self, proc_self_fd: BorrowedFd) -> io::Result<OwnedFd> {
        match self {
            Found::Path(fd) => Ok(fd),
            Found::Open(file) => found_path(proc_self_fd, file),
        }
    }
}

/// An O_PATH fd on the file `file` is open on (not a symlink: CREATE opens with `O_NOFOLLOW`).
fn found_path(proc_self_fd: BorrowedFd, file: BorrowedFd) -> io::Result<OwnedFd> {
    sys::reopen(proc_self_fd, file, libc::O_PATH)
}
