//! Open files: OPEN/CREATE/TMPFILE, data access, sync, space and whole-filesystem operations.

use std::ffi::CStr;
use std::fs::File;
use std::io;
use std::mem::ManuallyDrop;
use std::os::fd::{AsFd, AsRawFd, FromRawFd};

use crate::passthrough::filesystem::{
    check_name, err, PassthroughFs, FOPEN_DIRECT_IO, FOPEN_KEEP_CACHE,
};
use crate::passthrough::ops::labels::{NewNode, SecurityLabel};
use crate::passthrough::policy::acl;
use crate::passthrough::policy::killpriv::fsetid_for_truncate;
use crate::passthrough::request_types::{Context, Entry, Opened};
use crate::passthrough::state::handle_table::{OpenFile, NO_FH};
use crate::passthrough::state::host_inode::{InodeKey, InodeSource};
use crate::passthrough::state::inode_table::Inode;
use crate::passthrough::sys;

/// Open flags the guest may not pass through: creation is done by CREATE (which puts O_CREAT
/// back, and keeps the guest's O_EXCL), O_NOCTTY is the daemon's business. O_DIRECT too, unless
/// `--allow-direct-io`, and O_NOATIME unless `--preserve-noatime` (see [`super::FsConfig`]).
///
/// O_APPEND never reaches the host fd: the guest's page cache writes dirty pages back (WRITE
/// with FUSE_WRITE_CACHE, the shared mmap stores of any guest, with or without writeback
/// caching) through whichever writable handle of the inode it picks, at the pages' offsets,
/// and an O_APPEND host fd would put them at the end of the file instead. A WRITE from an
/// O_APPEND file that is not a page writeback is appended by [`Self::append`] (RWF_APPEND), as
/// virtiofsd does.
const STRIPPED_FLAGS: i32 = libc::O_CREAT | libc::O_EXCL | libc::O_NOCTTY | libc::O_APPEND;

/// A widened open the host refused (the daemon may not read the file): the guest's own flags
/// are used instead.
fn is_denied(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EACCES | libc::EPERM))
}

impl PassthroughFs {
    /// The flags we open with for guest open(2) `flags`, refusing writes on a read-only share.
    fn open_flags(&self, flags: u32) -> io::Result<i32> {
        let mut stripped = STRIPPED_FLAGS;
        if !self.cfg.allow_direct_io {
            stripped |= libc::O_DIRECT;
        }
        if !self.cfg.preserve_noatime {
            stripped |= libc::O_NOATIME;
        }
        let flags = (flags as i32 & !stripped) | libc::O_NOFOLLOW;
        if self.cfg.readonly
            && (flags & libc::O_ACCMODE != libc::O_RDONLY || flags & libc::O_TRUNC != 0)
        {
            return Err(err(libc::EROFS));
        }
        Ok(flags)
    }

    fn fopen_flags(&self) -> u32 {
        let mut f = 0;
        if self.cfg.direct_io {
            f |= FOPEN_DIRECT_IO;
        }
        if self.cfg.keep_cache {
            f |= FOPEN_KEEP_CACHE;
        }
        f
    }

    /// `flags`: the guest's open(2) flags; `kill`: an O_TRUNC clears setuid/setgid as for a
    /// caller without CAP_FSETID (FUSE_OPEN_KILL_SUIDGID, see [`super::killpriv`]).
    pub fn open(&self, ctx: &Context, nodeid: u64, flags: u32, kill: bool) -> io::Result<Opened> {
        let flags = self.open_flags(flags)?;
        let inode = self.inodes.get(nodeid)?;
        if inode.is_dir() && flags & libc::O_ACCMODE != libc::O_RDONLY {
            return Err(err(libc::EISDIR));
        }
        let token = self.take_token()?;
        let trunc = flags & libc::O_TRUNC != 0;
        let open = |flags| inode.open(&self.mounts, self.proc_self_fd.as_fd(), flags);
        let widened = self.writeback.widened(flags);
        let fd = {
            let _privs = self.kill_privs(ctx, kill && trunc)?;
            match widened.filter(|_| inode.kind == libc::S_IFREG).map(open) {
                Some(Err(e)) if is_denied(&e) => open(flags)?,
                Some(widened) => widened?,
                None => open(flags)?,
            }
        };
        if trunc {
            self.clear_mapped_capability(fd.as_fd())?;
        }
        let fh = self
            .handles
            .insert(OpenFile::new(nodeid, File::from(fd), false, token));
        Ok(Opened {
            fh,
            open_flags: self.fopen_flags(),
        })
    }

    /// `umask` as for [`PassthroughFs::mknod`], `label` as for [`PassthroughFs::symlink`];
    /// `kill` as for [`PassthroughFs::open`] (the name may exist on the host, and O_TRUNC then
    /// truncates it).
    #[allow(clippy::too_many_arguments)]
    pub fn create(
        &self,
        ctx: &Context,
        parent: u64,
        name: &CStr,
        mode: u32,
        flags: u32,
        umask: Option<u32>,
        label: Option<&SecurityLabel>,
        kill: bool,
    ) -> io::Result<(Entry, Opened)> {
        self.check_writable()?;
        let name = &*self.name_from_guest(name);
        check_name(name)?;
        // O_EXCL stays: the name may exist on the host although the guest thought it free, and
        // an exclusive create must then fail with EEXIST rather than open the existing file.
        let excl = flags as i32 & libc::O_EXCL;
        let flags = self.open_flags(flags)? | libc::O_CREAT | excl;
        let trunc = flags & libc::O_TRUNC != 0;
        let dir = self.inodes.get(parent)?;
        if !dir.is_dir() {
            return Err(err(libc::ENOTDIR));
        }
        let dirfd = self.path_fd(&dir)?;
        let mask = acl::creation_umask(self.proc_self_fd.as_fd(), dirfd.as_fd(), umask)?;
        let token = self.take_token()?;
        let mode = mode & 0o7777 & !mask;
        // Under --case-insensitive a CREATE without O_EXCL of a name another name folds alike
        // to opens that file (`ops/case_names.rs`).
        let (fd, alike) = self.case_create(&dir, dirfd.as_fd(), name, excl == 0, |name| {
            let fd = match label {
                Some(label) => {
                    let node = NewNode::File { flags, mode };
                    let fd = self.create_labelled(ctx, dirfd.as_fd(), name, node, label)?;
                    fd.ok_or_else(|| err(libc::EIO))?
                }
                None => {
                    let _creds = self.as_caller(ctx)?;
                    // After the switch, which drops CAP_FSETID for a non-root fsuid.
                    let _fsetid = if trunc {
                        fsetid_for_truncate(kill)?
                    } else {
                        None
                    };
                    self.retry_nospace(|| sys::openat(dirfd.as_fd(), name, flags, mode))?
                }
            };
            Ok(fd)
        })?;
        let name = alike.as_deref().unwrap_or(name);
        if trunc {
            self.clear_mapped_capability(fd.as_fd())?;
        }
        let entry = self.lookup_created(&dir, name, fd.as_fd())?;
        // The host checked the guest's own access mode as the caller; the read side for the
        // guest's page cache is added by the daemon (see `writeback`).
        let regular = entry.attr.stx_mode as u32 & libc::S_IFMT == libc::S_IFREG;
        let fd = match self.writeback.widened(flags).filter(|_| regular) {
            Some(rw) => {
                let rw = rw & !(libc::O_CREAT | libc::O_EXCL | libc::O_TRUNC);
                match sys::reopen(self.proc_self_fd.as_fd(), fd.as_fd(), rw) {
                    Err(e) if is_denied(&e) => fd,
                    widened => widened?,
                }
            }
            None => fd,
        };
        let fh = self
            .handles
            .insert(OpenFile::new(entry.nodeid, File::from(fd), false, token));
        Ok((
            entry,
            Opened {
                fh,
                open_flags: self.fopen_flags(),
            },
        ))
    }

    /// O_TMPFILE in directory `parent`. The unnamed inode is held by an O_PATH fd (a handle of
    /// an unlinked inode cannot be opened again), so LINK can give it a name later. `umask` as
    /// for CREATE; `label`, if any, is set before the reply (the file has no name meanwhile).
    pub fn tmpfile(
        &self,
        ctx: &Context,
        parent: u64,
        mode: u32,
        flags: u32,
        umask: Option<u32>,
        label: Option<&SecurityLabel>,
    ) -> io::Result<(Entry, Opened)> {
        self.check_writable()?;
        let mut flags = self.open_flags(flags)? & !libc::O_TRUNC;
        // A new inode: read-write for the page cache (see `writeback`) costs no permission.
        if flags & libc::O_ACCMODE == libc::O_RDONLY || self.writeback.widened(flags).is_some() {
            flags = (flags & !libc::O_ACCMODE) | libc::O_RDWR;
        }
        let dir = self.inodes.get(parent)?;
        if !dir.is_dir() {
            return Err(err(libc::ENOTDIR));
        }
        let dirfd = self.path_fd(&dir)?;
        let mask = acl::creation_umask(self.proc_self_fd.as_fd(), dirfd.as_fd(), umask)?;
        let (file_token, path_token) = (self.take_token()?, self.take_token()?);
        let fd = {
            let _creds = self.as_caller(ctx)?;
            let mode = mode & 0o7777 & !mask;
            sys::openat(dirfd.as_fd(), c".", flags | libc::O_TMPFILE, mode)?
        };
        if let Some(label) = label {
            self.label_fd(fd.as_fd(), label)?;
        }
        let path_fd = sys::reopen(self.proc_self_fd.as_fd(), fd.as_fd(), libc::O_PATH)?;
        let st = sys::statx(path_fd.as_fd(), c"", 0, sys::STATX_WANTED)?;
        let key = InodeKey::of(&st);
        let source = InodeSource::fd(path_fd, path_token);
        let inode = self.inodes.insert(Inode::new(key, libc::S_IFREG, source))?;
        let fh = self.handles.insert(OpenFile::new(
            inode.nodeid,
            File::from(fd),
            false,
            file_token,
        ));
        let entry = self.entry(&inode, st, 0);
        Ok((
            entry,
            Opened {
                fh,
                open_flags: self.fopen_flags(),
            },
        ))
    }

    /// Runs `f` on the open file `fh` (READ/WRITE do their preadv/pwritev into guest memory in
    /// `f`). No lock is held while `f` runs.
    pub fn with_file<R>(
        &self,
        fh: u64,
        f: impl FnOnce(&mut File) -> io::Result<R>,
    ) -> io::Result<R> {
        let open = self.handles.get(fh)?;
        if open.dir.is_some() {
            return Err(err(libc::EISDIR));
        }
        // A second `File` on the same fd, never closed: `open` keeps the fd alive meanwhile.
        // SAFETY: the fd is valid while `open` lives, and ManuallyDrop never closes it.
        let mut file = ManuallyDrop::new(unsafe { File::from_raw_fd(open.file.as_raw_fd()) });
        f(&mut file)
    }

    /// [`Self::with_file`] for a WRITE by `ctx`: `kill` clears setuid/setgid as for a caller
    /// without CAP_FSETID (FUSE_WRITE_KILL_SUIDGID), and a mapped `security.capability` goes
    /// first, as the host kernel removes its own (see [`super::killpriv`]).
    pub fn with_file_to_write<R>(
        &self,
        ctx: &Context,
        fh: u64,
        kill: bool,
        f: impl FnOnce(&mut File) -> io::Result<R>,
    ) -> io::Result<R> {
        self.with_file(fh, |file| {
            let _privs = self.kill_privs(ctx, kill && has_suid_sgid(file.as_fd())?)?;
            self.clear_mapped_capability(file.as_fd())?;
            f(file)
        })
    }

    /// Whether a WRITE with the guest file's `flags` (`fuse_write_in.flags`) that is not a page
    /// writeback (`cache`) goes to the end of the host file: an O_APPEND file, unless the guest
    /// computes the offsets itself (writeback caching, see [`super::writeback`]).
    pub fn appends(&self, flags: u32, cache: bool) -> bool {
        flags as i32 & libc::O_APPEND != 0 && !cache && !self.writeback.on()
    }

    /// Appends `data` to the open file `f` at the host's end of file, atomically (RWF_APPEND).
    pub fn append(f: &File, data: &[u8]) -> io::Result<usize> {
        sys::fd::pwrite_append(f.as_fd(), data)
    }

    /// Nothing to do: the daemon holds no POSIX locks and no write-back state for an open file,
    /// so a close in the guest changes nothing on the host before RELEASE.
    pub fn flush(&self, _ctx: &Context, _nodeid: u64, fh: u64, _lock_owner: u64) -> io::Result<()> {
        self.handles.get(fh).map(drop)
    }

    pub fn release(&self, _ctx: &Context, _nodeid: u64, fh: u64) -> io::Result<()> {
        if fh == NO_FH {
            return Ok(());
        }
        self.handles.remove(fh)
    }

    pub fn fsync(&self, _ctx: &Context, _nodeid: u64, fh: u64, datasync: bool) -> io::Result<()> {
        sys::fd::sync(self.handles.get(fh)?.file.as_fd(), datasync)
    }

    pub fn fallocate(
        &self,
        _ctx: &Context,
        _nodeid: u64,
        fh: u64,
        mode: u32,
        offset: u64,
        length: u64,
    ) -> io::Result<()> {
        self.check_writable()?;
        let f = self.handles.get(fh)?;
        let off = i64::try_from(offset).map_err(|_| err(libc::EINVAL))?;
        let len = i64::try_from(length).map_err(|_| err(libc::EINVAL))?;
        self.retry_nospace(|| sys::fd::fallocate(f.file.as_fd(), mode as i32, off, len))
    }

    pub fn lseek(
        &self,
        _ctx: &Context,
        _nodeid: u64,
        fh: u64,
        offset: u64,
        whence: u32,
    ) -> io::Result<u64> {
        let f = self.handles.get(fh)?;
        // The guest's loff_t, sent as u64: a negative offset is the host's to judge (SEEK_DATA
        // and SEEK_HOLE give ENXIO, as on a local file system).
        let off = offset as i64;
        // The shared file offset is not used by I/O (which is positional).
        sys::fd::lseek(f.file.as_fd(), off, whence as i32)
    }

    #[allow(clippy::too_many_arguments)]
    pub fn copy_file_range(
        &self,
        _ctx: &Context,
        _nodeid_in: u64,
        fh_in: u64,
        off_in: u64,
        _nodeid_out: u64,
        fh_out: u64,
        off_out: u64,
        len: u64,
        flags: u64,
    ) -> io::Result<usize> {
        self.check_writable()?;
        let (fin, fout) = (self.handles.get(fh_in)?, self.handles.get(fh_out)?);
        let oin = i64::try_from(off_in).map_err(|_| err(libc::EINVAL))?;
        let oout = i64::try_from(off_out).map_err(|_| err(libc::EINVAL))?;
        let flags = u32::try_from(flags).map_err(|_| err(libc::EINVAL))?;
        sys::fd::copy_file_range(
            fin.file.as_fd(),
            oin,
            fout.file.as_fd(),
            oout,
            len as usize,
            flags,
        )
    }

    pub fn statfs(&self, _ctx: &Context, nodeid: u64) -> io::Result<libc::statvfs64> {
        let inode = self.inodes.get(nodeid)?;
        let fd = self.path_fd(&inode)?;
        sys::fstatvfs(fd.as_fd())
    }

    pub fn syncfs(&self, _ctx: &Context, nodeid: u64) -> io::Result<()> {
        let inode = self.inodes.get(nodeid)?;
        // syncfs() refuses O_PATH fds: open the inode for real (read-only, without side effects
        // for the directories and regular files it is sent for).
        if !inode.is_dir() && inode.kind != libc::S_IFREG {
            return Err(err(libc::EINVAL));
        }
        let fd = inode.open(
            &self.mounts,
            self.proc_self_fd.as_fd(),
            libc::O_RDONLY | libc::O_NONBLOCK,
        )?;
        sys::fd::syncfs(fd.as_fd())
    }

    /// ACCESS: checks `mask` (R_OK/W_OK/X_OK) against the inode's mode for the caller, as the
    /// kernel's generic permission check does (root may read and write anything, and execute what
    /// anyone may execute).
    pub fn access(&self, ctx: &Context, nodeid: u64, mask: u32) -> io::Result<()> {
        // The owner as the guest sees it, to compare with the caller's guest ids.
        let mut st = self.statx_of(nodeid)?;
        self.cfg.ids.stat_to_guest(&mut st);
        let mode = st.stx_mode as u32;
        if mask == libc::F_OK as u32 {
            return Ok(());
        }
        if mask & libc::W_OK as u32 != 0 && self.cfg.readonly {
            return Err(err(libc::EROFS));
        }
        let granted = if ctx.uid == 0 {
            let any_x = mode & 0o111 != 0 || mode & libc::S_IFMT == libc::S_IFDIR;
            0o6 | if any_x { 0o1 } else { 0 }
        } else if st.stx_uid == ctx.uid {
            (mode >> 6) & 0o7
        } else if st.stx_gid == ctx.gid {
            (mode >> 3) & 0o7
        } else {
            mode & 0o7
        };
        if mask & 0o7 & !granted != 0 {
            return Err(err(libc::EACCES));
        }
        Ok(())
    }

    fn statx_of(&self, nodeid: u64) -> io::Result<libc::statx> {
        let inode = self.inodes.get(nodeid)?;
        let fd = self.path_fd(&inode)?;
        sys::statx(fd.as_fd(), c"", 0, libc::STATX_BASIC_STATS)
    }
}

/// Whether the file open as `fd` has the setuid or setgid bit: a flagged WRITE needs its
/// credentials changed only then (every write of a guest user is flagged; the change costs
/// several syscalls, the check one). A bit set between the check and the write is as if set
/// right after the write.
fn has_suid_sgid(fd: std::os::fd::BorrowedFd) -> io::Result<bool> {
    let st = sys::statx(fd, c"", 0, libc::STATX_MODE)?;
    Ok(u32::from(st.stx_mode) & (libc::S_ISUID | libc::S_ISGID) != 0)
}
