//! Looking names up: LOOKUP (by the name's handle when the guest holds its inode, else by an
//! O_PATH fd opened by name), the lookup of a name just created, FORGET, and how a newly seen
//! inode is reached (its file handle or its fd).

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use super::case_names::HostName;
use super::streaks::{KNOWN_INODE, OTHER_CASE_NAME};
use crate::passthrough::config::InodeFileHandles;
use crate::passthrough::filesystem::{check_name, err, PassthroughFs, FUSE_ATTR_SUBMOUNT};
use crate::passthrough::request_types::{Context, Entry};
use crate::passthrough::state::file_handle::{handles_are_stable, FileHandle};
use crate::passthrough::state::host_inode::{InodeKey, InodeSource};
use crate::passthrough::state::inode_table::{Inode, ROOT_ID};
use crate::passthrough::sys;
use crate::sync::{read, write};

impl PassthroughFs {
    /// Looks `name` up in the directory `dir` (an fd on the inode `parent`) and takes one lookup
    /// of the result. Used by LOOKUP, READDIRPLUS and after most creates.
    pub(in crate::passthrough) fn lookup_at(
        &self,
        parent: &Inode,
        dir: BorrowedFd,
        name: &CStr,
    ) -> io::Result<Entry> {
        self.lookup_by_fd(parent, dir, name).map(|(e, _)| e)
    }

    /// [`PassthroughFs::lookup_at`], and whether the guest held the inode already.
    fn lookup_by_fd(
        &self,
        parent: &Inode,
        dir: BorrowedFd,
        name: &CStr,
    ) -> io::Result<(Entry, bool)> {
        let fd = sys::openat(dir, name, libc::O_PATH | libc::O_NOFOLLOW, 0)?;
        self.lookup_found(parent, name, Found::Path(fd))
    }

    /// The entry of the file CREATE just made (or opened) as `name` in `parent` and holds open
    /// as `file` (`O_NOFOLLOW`: not a symlink): a lookup of `name` that does not open it again
    /// by name (so it is also the very file opened, whatever the host renamed meanwhile). An
    /// O_PATH fd on it is opened only for what keeps one: the inode's source (no file handles),
    /// or an fd cache with room; with handles and a full cache, that saves the `openat` and
    /// `close` of a lookup by name.
    pub(in crate::passthrough) fn lookup_created(
        &self,
        parent: &Inode,
        name: &CStr,
        file: BorrowedFd,
    ) -> io::Result<Entry> {
        self.lookup_found(parent, name, Found::Open(file))
            .map(|(e, _)| e)
    }

    /// The entry of what `found` holds open as `name` in `parent`, and whether the guest held
    /// that inode already.
    fn lookup_found(&self, parent: &Inode, name: &CStr, found: Found) -> io::Result<(Entry, bool)> {
        let st = sys::statx(found.fd(), c"", 0, sys::STATX_WANTED)?;
        let key = InodeKey::of(&st);
        let existing = self.inodes.ref_existing(&key);
        // A cached fd pins its inode, so no other file can have its number: the key is enough.
        let pinned = existing
            .as_ref()
            .is_some_and(|inode| self.fd_cache.get(inode.nodeid).is_some());
        let mut held = true;
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
                held = false;
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
        Ok((self.found_entry(parent, &inode, key, st), held))
    }

    /// The entry of `inode`, found in `parent` with attributes `st`.
    fn found_entry(&self, parent: &Inode, inode: &Inode, key: InodeKey, st: libc::statx) -> Entry {
        self.check_guest_view(inode, &st);
        let submount =
            self.cfg.announce_submounts && key.mnt_id != parent.key.mnt_id && inode.is_dir();
        self.entry(inode, st, if submount { FUSE_ATTR_SUBMOUNT } else { 0 })
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
    pub(in crate::passthrough) fn source_for(
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
        if self.use_handles
            && self.mounts.get(mnt_id).is_none()
            && !read(&self.no_handles).contains(&mnt_id)
            && !handles_are_stable(sys::fs_magic(fd))
        {
            // The first inode of a mount whose handles may name another file (FUSE).
            self.no_handles_seen(mnt_id, name, fd, mandatory);
        }
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
                "{name:?} (mount ID {mnt_id}, {fs}) has no file handles that always name their \
                 inode: with --inode-file-handles=mandatory lookups there fail with EOPNOTSUPP; \
                 the rest of the share is served"
            );
        } else {
            log::debug!(
                "{name:?} (mount ID {mnt_id}, {fs}) has no file handles: served through O_PATH fds"
            );
        }
    }

    /// An entry for the guest (LOOKUP, READDIRPLUS, every create): the owner translated to
    /// guest ids, as in [`PassthroughFs::attr`].
    pub(in crate::passthrough) fn entry(
        &self,
        inode: &Inode,
        mut attr: libc::statx,
        attr_flags: u32,
    ) -> Entry {
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
    pub(in crate::passthrough) fn dir(&self, parent: u64) -> io::Result<Inode> {
        let inode = self.inodes.get(parent)?;
        if !inode.is_dir() {
            return Err(err(libc::ENOTDIR));
        }
        Ok(inode)
    }

    /// `""` and `"."` name the directory itself, `".."` its parent, except at the share root,
    /// whose parent is itself: the Windows guest service opens the share with LOOKUP(1, "."),
    /// and walks symlink targets from the share root (`/abs` starts with LOOKUP(1, ""), `../x`
    /// with LOOKUP(1, "..")). Each adds a lookup the guest owes a FORGET for, as any LOOKUP.
    pub fn lookup(&self, _ctx: &Context, parent: u64, name: &CStr) -> io::Result<Entry> {
        let name = &*self.name_from_guest(name);
        let dir = self.dir(parent)?;
        let fd = self.path_fd(&dir)?;
        let at_root = dir.nodeid == ROOT_ID;
        match name.to_bytes() {
            b"" | b"." => return Ok(self.lookup_by_fd(&dir, fd.as_fd(), c".")?.0),
            b".." if at_root => return Ok(self.lookup_by_fd(&dir, fd.as_fd(), c".")?.0),
            b".." => return Ok(self.lookup_by_fd(&dir, fd.as_fd(), c"..")?.0),
            _ => check_name(name)?,
        }
        if !self.cfg.case_insensitive {
            return self.lookup_name(&dir, fd.as_fd(), name);
        }
        // A thread whose last lookups were by another case reads the kept names first (the
        // exact name wins there too); else the exact name first, as without the option.
        let listed_first = OTHER_CASE_NAME.likely();
        if listed_first {
            if let HostName::Alike(host) = self.case_alike(&dir, fd.as_fd(), name, false)? {
                OTHER_CASE_NAME.saw(true);
                return self.lookup_name(&dir, fd.as_fd(), &host);
            }
        }
        match self.lookup_name(&dir, fd.as_fd(), name) {
            // The kept names, current a moment ago, had no other case of it either.
            Err(e) if listed_first => Err(e),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                match self.case_alike(&dir, fd.as_fd(), name, true)? {
                    HostName::Alike(host) => {
                        OTHER_CASE_NAME.saw(true);
                        self.lookup_name(&dir, fd.as_fd(), &host)
                    }
                    HostName::AsGiven => Err(e),
                }
            }
            r => {
                OTHER_CASE_NAME.saw(false);
                r
            }
        }
    }

    /// LOOKUP of `name` as it is on the host in `dir` (open as `fd`).
    fn lookup_name(&self, dir: &Inode, fd: BorrowedFd, name: &CStr) -> io::Result<Entry> {
        if self.cfg.inode_file_handles != InodeFileHandles::Never && KNOWN_INODE.likely() {
            let st = sys::statx(fd, name, 0, sys::STATX_WANTED)?;
            if let Some(e) = self.lookup_known(dir, fd, name, st)? {
                KNOWN_INODE.saw(true);
                return Ok(e);
            }
        }
        let (e, held) = self.lookup_by_fd(dir, fd, name)?;
        KNOWN_INODE.saw(held);
        Ok(e)
    }

    /// The lookup READDIRPLUS makes of the entry `name`, inode number `ino` (from getdents), in
    /// `parent` (open as `dir`): by [`PassthroughFs::lookup_known`] when the guest holds an inode
    /// of that number on the directory's device and mount (a listing of names already looked
    /// up, `ls -l` again), else by fd. The number only picks the path; the answer's identity
    /// comes from the name as for LOOKUP.
    pub(in crate::passthrough) fn lookup_listed(
        &self,
        parent: &Inode,
        dir: BorrowedFd,
        name: &CStr,
        ino: u64,
    ) -> io::Result<Entry> {
        let guess = InodeKey { ino, ..parent.key };
        if self.cfg.inode_file_handles != InodeFileHandles::Never
            && self.inodes.id_of(&guess).is_some()
        {
            let st = sys::statx(dir, name, 0, sys::STATX_WANTED)?;
            if let Some(e) = self.lookup_known(parent, dir, name, st)? {
                return Ok(e);
            }
        }
        self.lookup_at(parent, dir, name)
    }

    /// A LOOKUP of a name whose inode the guest already holds by file handle, answered without
    /// opening the name (`statx` and `name_to_handle_at` of it, where a lookup by an opened fd
    /// makes four syscalls; tried when [`KNOWN_INODE`] expects such a name, since for a new
    /// inode the `statx` is one syscall more): `st`, the name's `statx`, finds the inode by its key, and the
    /// name's handle, equal to the inode's, shows that the name is that very file, not another
    /// with the number of a deleted one (handles carry a generation). `None` when the name is
    /// no such inode (the caller then looks it up by an fd): none held, one held by fd, or a
    /// handle that differs (a replaced file, or the name changed between the two calls).
    fn lookup_known(
        &self,
        parent: &Inode,
        dir: BorrowedFd,
        name: &CStr,
        st: libc::statx,
    ) -> io::Result<Option<Entry>> {
        let key = InodeKey::of(&st);
        let Some(inode) = self.inodes.ref_existing(&key) else {
            return Ok(None);
        };
        let same = matches!(inode.source, InodeSource::Handle(_))
            && match FileHandle::from_fd(dir, name) {
                Ok(Some((h, mnt_id))) => {
                    mnt_id == u64::from(key.mnt_id) && !inode.replaced_by(&InodeSource::Handle(h))
                }
                _ => false,
            };
        if !same {
            // Give back the lookup just taken; the lookup by fd takes its own.
            self.forget(inode.nodeid, 1);
            return Ok(None);
        }
        Ok(Some(self.found_entry(parent, &inode, key, st)))
    }

    /// Drop `nlookup` lookups of `nodeid`; the inode dies when its count reaches zero.
    pub fn forget(&self, nodeid: u64, nlookup: u64) {
        if self.inodes.forget(nodeid, nlookup) {
            self.fd_cache.evict(nodeid);
        }
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
