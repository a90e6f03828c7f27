//! SETATTR: mode, owner, size and times of a node.
//!
//! Who may change what (invariants):
//! - Every change is made as the daemon. The guest's kernel has checked the caller's right to
//!   it before sending the request (virtio-fs always mounts with `default_permissions`),
//!   knowing what the daemon is not told: the caller's supplementary groups (FUSE sends one uid
//!   and one gid), its capabilities. A change made as the caller (fsuid/fsgid) would be judged
//!   by the host without them: a chgrp to a supplementary group, the kernel's clearing of
//!   setuid/setgid after a non-owner's write, a truncate allowed through a group would fail.
//! - What the daemon can see, it checks again, so that no request gives a guest user more than
//!   its kernel would have allowed: the ownership a change needs. For a caller other than
//!   guest root (whose ids are translated like any other, `--translate-uid`):
//!   - a mode change needs the caller to own the file, unless it only removes setuid/setgid
//!     (what the guest's kernel sends after a write, truncate or chown by a caller without
//!     CAP_FSETID: it never allows more than the file allowed before);
//!   - a new owner needs guest root; a new group needs the caller to own the file (membership
//!     in the group is the guest's check). The chown runs with the caller's gid and without
//!     CAP_FSETID ([`PassthroughFs::kill_privs`]), so the host clears setuid/setgid as Linux
//!     does for such a caller;
//!   - explicit times need the caller to own the file (or, under writeback, to flush the
//!     mtime through a handle it writes: see `writeback.rs`); times set to now, and the size,
//!     need write access, which only the guest can judge (its groups, ACLs), as for OPEN.
//! - Any caller whose uid or gid `--translate-uid/gid` forbids gets EPERM, whatever it asks.
//! - A truncate flagged FATTR_KILL_SUIDGID (KILLPRIV_V2) runs with the caller's gid and without
//!   CAP_FSETID, so the host clears the bits as for the caller; an unflagged one keeps them
//!   (see `killpriv.rs`).

use std::io;
use std::os::fd::{AsFd, BorrowedFd};

use fuse_backend_rs::abi::fuse_abi::SetattrIn;

use crate::passthrough::filesystem::{err, PassthroughFs};
use crate::passthrough::request_types::{Attr, Context};
use crate::passthrough::state::handle_table::OpenFile;
use crate::passthrough::state::inode_table::Inode;
use crate::passthrough::sys;

const FATTR_MODE: u32 = 1 << 0;
const FATTR_UID: u32 = 1 << 1;
const FATTR_GID: u32 = 1 << 2;
pub(in crate::passthrough) const FATTR_SIZE: u32 = 1 << 3;
const FATTR_ATIME: u32 = 1 << 4;
pub(in crate::passthrough) const FATTR_MTIME: u32 = 1 << 5;
pub(in crate::passthrough) const FATTR_FH: u32 = 1 << 6;
const FATTR_ATIME_NOW: u32 = 1 << 7;
pub(in crate::passthrough) const FATTR_MTIME_NOW: u32 = 1 << 8;
pub(in crate::passthrough) const FATTR_CTIME: u32 = 1 << 10;
/// The truncate clears setuid/setgid as for a caller without CAP_FSETID (see `killpriv.rs`).
const FATTR_KILL_SUIDGID: u32 = 1 << 11;

/// The caller of a SETATTR as the ownership checks see it.
#[derive(Clone, Copy)]
enum Caller {
    /// Guest root: the daemon's privileges.
    Root,
    /// Anyone else, by host uid.
    User(u32),
}

/// `new` allows nothing `cur` did not: the same bits, at most without setuid and setgid.
fn only_clears_setid(cur: u32, new: u32) -> bool {
    let (cur, new) = (cur & 0o7777, new & 0o7777);
    new & !cur == 0 && (cur & !new) & !(libc::S_ISUID | libc::S_ISGID) == 0
}

impl PassthroughFs {
    pub fn setattr(&self, ctx: &Context, nodeid: u64, attr: &SetattrIn) -> io::Result<Attr> {
        self.check_writable()?;
        let inode = self.inodes.get(nodeid)?;
        let file = if attr.valid & FATTR_FH != 0 {
            Some(self.handles.get(attr.fh)?)
        } else {
            None
        };
        let path_fd = self.path_fd(&inode)?;
        let (uid, _) = self.caller_ids(ctx)?;
        let caller = if ctx.uid == 0 {
            Caller::Root
        } else {
            Caller::User(uid)
        };
        let owner = |fd: BorrowedFd| -> io::Result<(u32, u32)> {
            let st = sys::statx(fd, c"", 0, libc::STATX_UID | libc::STATX_MODE)?;
            Ok((st.stx_uid, u32::from(st.stx_mode)))
        };
        // The fd the changes go through: the open file if given, else the inode's O_PATH fd
        // (reached through /proc/self/fd where the syscall wants a path).
        let proc_name = sys::proc_name(path_fd.as_fd());
        let valid = attr.valid;
        if valid & FATTR_MODE != 0 {
            if inode.is_symlink() {
                return Err(err(libc::EOPNOTSUPP));
            }
            if let Caller::User(uid) = caller {
                let (file_uid, mode) = owner(path_fd.as_fd())?;
                if file_uid != uid && !only_clears_setid(mode, attr.mode) {
                    return Err(err(libc::EPERM));
                }
            }
            match &file {
                Some(f) => sys::fd::fchmod(f.file.as_fd(), attr.mode)?,
                None => sys::fchmodat(self.proc_self_fd.as_fd(), &proc_name, attr.mode)?,
            }
        }
        if valid & (FATTR_UID | FATTR_GID) != 0 {
            // The new owner in host ids; a forbidden one is EPERM.
            let new_uid = if valid & FATTR_UID != 0 {
                self.cfg.ids.uid.to_host(attr.uid)?
            } else {
                u32::MAX
            };
            let new_gid = if valid & FATTR_GID != 0 {
                self.cfg.ids.gid.to_host(attr.gid)?
            } else {
                u32::MAX
            };
            let _kill = match caller {
                Caller::Root => None,
                Caller::User(uid) => {
                    let (file_uid, _) = owner(path_fd.as_fd())?;
                    if file_uid != uid || (new_uid != u32::MAX && new_uid != uid) {
                        return Err(err(libc::EPERM));
                    }
                    self.kill_privs(ctx, true)?
                }
            };
            sys::fchown_fd(path_fd.as_fd(), new_uid, new_gid)?;
        }
        if valid & FATTR_SIZE != 0 {
            let size = i64::try_from(attr.size).map_err(|_| err(libc::EFBIG))?;
            let _kill = self.kill_privs(ctx, valid & FATTR_KILL_SUIDGID != 0)?;
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
            self.set_times(
                &inode,
                path_fd.as_fd(),
                &proc_name,
                file.as_deref(),
                caller,
                attr,
            )?;
        }
        if valid & (FATTR_UID | FATTR_GID | FATTR_SIZE) != 0 {
            self.clear_mapped_capability_of(&inode)?;
        }
        let st = sys::statx(path_fd.as_fd(), c"", 0, sys::STATX_WANTED)?;
        self.after_setattr(&inode, valid, attr.size, &st);
        Ok(self.attr(st))
    }

    /// SETATTR's atime and mtime: through `file` if given, else the inode (`path_fd`, its
    /// `proc_name` in /proc/self/fd).
    fn set_times(
        &self,
        inode: &Inode,
        path_fd: BorrowedFd,
        proc_name: &std::ffi::CStr,
        file: Option<&OpenFile>,
        caller: Caller,
        attr: &SetattrIn,
    ) -> io::Result<()> {
        let valid = attr.valid;
        let explicit = |set: u32, now: u32| valid & set != 0 && valid & now == 0;
        if explicit(FATTR_ATIME, FATTR_ATIME_NOW) || explicit(FATTR_MTIME, FATTR_MTIME_NOW) {
            if let Caller::User(uid) = caller {
                let st = sys::statx(path_fd, c"", 0, libc::STATX_UID)?;
                if st.stx_uid != uid && !self.writer_may_flush_mtime(file, valid)? {
                    return Err(err(libc::EPERM));
                }
            }
        }
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
        let set = || match file {
            Some(f) => sys::fd::futimens(f.file.as_fd(), &times),
            // The link itself (the guest resolved any link it was asked to follow): its O_PATH
            // fd with AT_EMPTY_PATH; /proc/self/fd/N would reach its target.
            None if inode.is_symlink() => sys::utimensat(
                path_fd,
                c"",
                &times,
                libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW,
            ),
            None => sys::utimensat(self.proc_self_fd.as_fd(), proc_name, &times, 0),
        };
        self.set_times_as_guest(inode, valid, times[1], set)
    }

    /// The mapped `security.capability` of `inode` removed after a chown or truncate (see
    /// `policy/killpriv.rs`): opens it if it is a regular file and there is a mapping.
    fn clear_mapped_capability_of(&self, inode: &Inode) -> io::Result<()> {
        if self.mapped_capability.is_none() || inode.kind != libc::S_IFREG {
            return Ok(());
        }
        let fd = inode.open(
            &self.mounts,
            self.proc_self_fd.as_fd(),
            libc::O_RDONLY | libc::O_NONBLOCK,
        )?;
        self.clear_mapped_capability(fd.as_fd())
    }
}

#[cfg(test)]
mod tests {
    use super::only_clears_setid;

    #[test]
    fn clearing_setid_bits_and_nothing_else() {
        for (cur, new, ok) in [
            (0o104777, 0o100777, true),
            (0o2777, 0o777, true),
            (0o6777, 0o777, true),
            (0o6777, 0o2777, true),
            (0o6755, 0o6755, true),
            // Adds a bit, changes permissions, or removes the sticky bit: the owner's change.
            (0o777, 0o4777, false),
            (0o4777, 0o755, false),
            (0o4755, 0o777, false),
            (0o1777, 0o777, false),
        ] {
            assert_eq!(only_clears_setid(cur, new), ok, "{cur:o} -> {new:o}");
        }
    }
}
