//! SETATTR: mode, owner, size and times of a node, as the caller.

use std::io;
use std::os::fd::AsFd;

use fuse_backend_rs::abi::fuse_abi::SetattrIn;

use super::killpriv::fsetid_for_truncate;
use super::sys;
use super::{err, Attr, Context, PassthroughFs};

const FATTR_MODE: u32 = 1 << 0;
const FATTR_UID: u32 = 1 << 1;
const FATTR_GID: u32 = 1 << 2;
pub(super) const FATTR_SIZE: u32 = 1 << 3;
const FATTR_ATIME: u32 = 1 << 4;
pub(super) const FATTR_MTIME: u32 = 1 << 5;
pub(super) const FATTR_FH: u32 = 1 << 6;
const FATTR_ATIME_NOW: u32 = 1 << 7;
pub(super) const FATTR_MTIME_NOW: u32 = 1 << 8;
pub(super) const FATTR_CTIME: u32 = 1 << 10;
/// The truncate clears setuid/setgid as for a caller without CAP_FSETID (see `killpriv.rs`).
const FATTR_KILL_SUIDGID: u32 = 1 << 11;

impl PassthroughFs {
    pub fn setattr(&self, ctx: &Context, nodeid: u64, attr: &SetattrIn) -> io::Result<Attr> {
        self.check_writable()?;
        let inode = self.inodes.get(nodeid)?;
        let file = if attr.valid & FATTR_FH != 0 {
            Some(self.handles.get(attr.fh)?)
        } else {
            None
        };
        // Before the switch: opening a handle takes CAP_DAC_READ_SEARCH, which a non-root fsuid
        // drops.
        let path_fd = self.path_fd(&inode)?;
        // As the caller: the host then checks ownership for chmod/chown/utimes and write
        // access for truncate (a non-root fsuid has no CAP_FOWNER/CAP_CHOWN/CAP_FSETID), so a
        // guest user cannot set the setuid bit on, or take, a file it does not own. The guest's
        // root keeps the daemon's privileges, whatever host uid `--translate-uid` gives it (it
        // may chown and chmod in the share as it may without translation); a forbidden caller
        // is EPERM.
        let creds = if ctx.uid == 0 {
            self.caller_ids(ctx)?;
            None
        } else {
            Some(self.as_caller(ctx)?)
        };
        // The fd the changes go through: the open file if given, else the inode's O_PATH fd
        // (reached through /proc/self/fd where the syscall wants a path).
        let proc_name = sys::proc_name(path_fd.as_fd());
        let valid = attr.valid;
        if valid & FATTR_MODE != 0 {
            if inode.is_symlink() {
                return Err(err(libc::EOPNOTSUPP));
            }
            match &file {
                Some(f) => sys::fd::fchmod(f.file.as_fd(), attr.mode)?,
                None => sys::fchmodat(self.proc_self_fd.as_fd(), &proc_name, attr.mode)?,
            }
        }
        if valid & (FATTR_UID | FATTR_GID) != 0 {
            // The new owner in host ids; a forbidden one is EPERM.
            let uid = if valid & FATTR_UID != 0 {
                self.cfg.ids.uid.to_host(attr.uid)?
            } else {
                u32::MAX
            };
            let gid = if valid & FATTR_GID != 0 {
                self.cfg.ids.gid.to_host(attr.gid)?
            } else {
                u32::MAX
            };
            sys::fchown_fd(path_fd.as_fd(), uid, gid)?;
        }
        if valid & FATTR_SIZE != 0 {
            let size = i64::try_from(attr.size).map_err(|_| err(libc::EFBIG))?;
            let _fsetid = fsetid_for_truncate(valid & FATTR_KILL_SUIDGID != 0)?;
            match &file {
                Some(f) => sys::fd::ftruncate(f.file.as_fd(), size)?,
                None => {
                    if inode.is_dir() {
                        return Err(err(libc::EISDIR));
                    }
                    if inode.kind != libc::S_IFREG {
                        // Opening a device or FIFO to truncate it could have side effects.
                        return Err(err(libc::EINVAL));
                    }
                    // Through /proc/self/fd, as the caller (write access checked).
                    let f = sys::reopen(
                        self.proc_self_fd.as_fd(),
                        path_fd.as_fd(),
                        libc::O_WRONLY | libc::O_NONBLOCK,
                    )?;
                    sys::fd::ftruncate(f.as_fd(), size)?
                }
            };
        }
        if valid & (FATTR_ATIME | FATTR_MTIME) != 0 {
            let time = |set: u32, now: u32, sec: u64, nsec: u32| libc::timespec {
                tv_sec: sec as i64,
                tv_nsec: if valid & set == 0 {
                    libc::UTIME_OMIT
                } else if valid & now != 0 {
                    libc::UTIME_NOW
                } else {
                    nsec as i64
                },
            };
            let times = [
                time(FATTR_ATIME, FATTR_ATIME_NOW, attr.atime, attr.atimensec),
                time(FATTR_MTIME, FATTR_MTIME_NOW, attr.mtime, attr.mtimensec),
            ];
            let set = || match &file {
                Some(f) => self.futimens_as_writer(f.file.as_fd(), &times, valid),
                // The link itself (the guest resolved any link it was asked to follow): its
                // O_PATH fd with AT_EMPTY_PATH; /proc/self/fd/N would reach its target.
                None if inode.is_symlink() => sys::utimensat(
                    path_fd.as_fd(),
                    c"",
                    &times,
                    libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW,
                ),
                None => sys::utimensat(self.proc_self_fd.as_fd(), &proc_name, &times, 0),
            };
            self.set_times_as_guest(&inode, valid, times[1], set)?;
        }
        // As root: the caller may own the file without being allowed to remove its xattrs.
        drop(creds);
        if valid & (FATTR_UID | FATTR_GID | FATTR_SIZE) != 0 {
            self.clear_mapped_capability_of(&inode)?;
        }
        let st = sys::statx(path_fd.as_fd(), c"", 0, sys::STATX_WANTED)?;
        self.after_setattr(&inode, valid, attr.size, &st);
        Ok(self.attr(st))
    }
}
