//! Name operations: attributes, and everything that creates, links, renames or removes a name
//! (looking names up and forgetting them: `lookups.rs`).

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};

use crate::passthrough::filesystem::{check_name, err, PassthroughFs};
use crate::passthrough::ops::labels::{make_node, NewNode, SecurityLabel};
use crate::passthrough::policy::acl;
use crate::passthrough::request_types::{Attr, Context, Entry};
use crate::passthrough::state::handle_table::NO_FH;
use crate::passthrough::state::host_inode::{InodeKey, InodeSource};
use crate::passthrough::state::inode_table::InodeFd;
use crate::passthrough::sys;

impl PassthroughFs {
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
        if let Some(fh) = fh.filter(|&fh| fh != NO_FH) {
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
        let target = sys::readlink(self.path_fd(&inode)?.as_fd())?;
        Ok(self.target_to_guest(target))
    }

    /// Creates `node(mask)` (with the bits `mask` cleared from its mode) as `name` in `parent`
    /// with the caller's credentials, labelled first when the guest sent a security context
    /// (see [`super::labels`]), then looks the new name up. `umask` is the guest's, when it left
    /// it to us (see [`acl::creation_umask`]).
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
        let name = &*self.name_from_guest(name);
        check_name(name)?;
        let dir = self.dir(parent)?;
        let fd = self.path_fd(&dir)?;
        let mask = acl::creation_umask(self.proc_self_fd.as_fd(), fd.as_fd(), umask)?;
        self.case_create(&dir, fd.as_fd(), name, false, |name| {
            match label {
                Some(label) => {
                    drop(self.create_labelled(ctx, fd.as_fd(), name, node(mask), label)?)
                }
                None => {
                    let _creds = self.as_caller(ctx)?;
                    self.retry_nospace(|| make_node(fd.as_fd(), name, &node(mask)))?;
                }
            }
            Ok(())
        })?;
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
        let target = &*self.target_from_guest(target);
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
        let name = &*self.name_from_guest(name);
        check_name(name)?;
        let dir = self.dir(parent)?;
        let fd = self.path_fd(&dir)?;
        self.case_remove(&dir, fd.as_fd(), name, |name| {
            self.uncache_name(fd.as_fd(), name);
            sys::unlinkat(fd.as_fd(), name, flags)
        })
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
        let (oldname, newname) = (self.name_from_guest(oldname), self.name_from_guest(newname));
        let (oldname, newname) = (&*oldname, &*newname);
        check_name(oldname)?;
        check_name(newname)?;
        if flags & !(libc::RENAME_NOREPLACE | libc::RENAME_EXCHANGE) != 0 {
            return Err(err(libc::EINVAL));
        }
        let (old, new) = (self.dir(olddir)?, self.dir(newdir)?);
        let (oldfd, newfd) = (self.path_fd(&old)?, self.path_fd(&new)?);
        let rename = |oldname: &CStr, newname: &CStr, flags: u32| {
            if flags & libc::RENAME_EXCHANGE == 0 {
                self.uncache_name(newfd.as_fd(), newname);
            }
            sys::renameat2(oldfd.as_fd(), oldname, newfd.as_fd(), newname, flags)
        };
        if !self.cfg.case_insensitive {
            return rename(oldname, newname, flags);
        }
        let (oldfd_b, newfd_b) = (oldfd.as_fd(), newfd.as_fd());
        self.case_rename(
            &old, oldfd_b, oldname, &new, newfd_b, newname, flags, rename,
        )
    }

    pub fn link(
        &self,
        _ctx: &Context,
        nodeid: u64,
        newparent: u64,
        newname: &CStr,
    ) -> io::Result<Entry> {
        self.check_writable()?;
        let newname = &*self.name_from_guest(newname);
        check_name(newname)?;
        let inode = self.inodes.get(nodeid)?;
        if inode.is_dir() {
            return Err(err(libc::EPERM));
        }
        let dir = self.dir(newparent)?;
        let (fd, dirfd) = (self.path_fd(&inode)?, self.path_fd(&dir)?);
        self.case_create(&dir, dirfd.as_fd(), newname, false, |newname| {
            sys::link_fd(fd.as_fd(), dirfd.as_fd(), newname)
        })?;
        self.lookup_at(&dir, dirfd.as_fd(), newname)
    }
}
