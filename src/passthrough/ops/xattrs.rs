//! Extended attributes (only with `--xattr`; ENOSYS otherwise, so the guest stops asking).
//!
//! The xattr syscalls have no *at() form that takes an O_PATH fd, so regular files and
//! directories are opened read-only for the call; other inode types (symlinks, devices, FIFOs,
//! sockets), where opening could block or have side effects, get EOPNOTSUPP.
//!
//! With `--xattrmap`, names from the guest are translated (or refused) before the call, and
//! the names LISTXATTR returns are translated (or hidden) after it; see [`super::xattr_map`].
//!
//! With `--translate-uid`/`--translate-gid`, the uids and gids inside a POSIX ACL value
//! (`system.posix_acl_access`/`_default`, by the guest's name, whatever `--xattrmap` makes of
//! it on the host) are translated too: guest → host on SETXATTR (an entry naming a forbidden id
//! is EPERM), host → guest on GETXATTR. virtiofsd refuses `--translate-*` with `--posix-acl`.

use std::borrow::Cow;
use std::ffi::CStr;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use crate::passthrough::filesystem::{err, PassthroughFs};
use crate::passthrough::policy::id_map::is_acl_name;
use crate::passthrough::policy::killpriv;
use crate::passthrough::policy::xattr_map::HostName;
use crate::passthrough::request_types::{Context, XattrReply};
use crate::passthrough::sys::xattr;

/// Largest value or list the guest can receive (XATTR_SIZE_MAX).
const XATTR_SIZE_MAX: u32 = 64 * 1024;
/// How often a mapped LISTXATTR re-reads a list that grew between its size and its read.
const LIST_TRIES: usize = 4;

impl PassthroughFs {
    fn xattr_fd(&self, nodeid: u64) -> io::Result<OwnedFd> {
        if !self.cfg.xattr {
            return Err(err(libc::ENOSYS));
        }
        let inode = self.inodes.get(nodeid)?;
        if !inode.is_dir() && inode.kind != libc::S_IFREG {
            return Err(err(libc::EOPNOTSUPP));
        }
        inode.open(
            &self.mounts,
            self.proc_self_fd.as_fd(),
            libc::O_RDONLY | libc::O_NONBLOCK,
        )
    }

    /// The host name of a guest name; `bad` is `refused` (EPERM, or ENODATA for GETXATTR as
    /// in virtiofsd), `unsupported` is EOPNOTSUPP.
    pub(in crate::passthrough) fn host_name<'a>(
        &self,
        name: &'a CStr,
        refused: i32,
    ) -> io::Result<Cow<'a, CStr>> {
        match &self.cfg.xattrmap {
            None => Ok(Cow::Borrowed(name)),
            Some(map) => match map.to_host(name) {
                HostName::Name(n) => Ok(n),
                HostName::Bad => Err(err(refused)),
                HostName::Unsupported => Err(err(libc::EOPNOTSUPP)),
            },
        }
    }

    /// The whole host list of names of `fd`.
    fn host_list(fd: BorrowedFd) -> io::Result<Vec<u8>> {
        for _ in 0..LIST_TRIES {
            let mut buf = vec![0u8; xattr::flistxattr(fd, None)?];
            match xattr::flistxattr(fd, Some(&mut buf)) {
                Ok(n) => {
                    buf.truncate(n);
                    return Ok(buf);
                }
                Err(e) if e.raw_os_error() == Some(libc::ERANGE) => continue,
                Err(e) => return Err(e),
            }
        }
        Err(err(libc::ERANGE))
    }

    /// Shared by GETXATTR and LISTXATTR: `call(buffer)` is the syscall (`None`: the size).
    fn xattr_read(
        size: u32,
        call: impl Fn(Option<&mut [u8]>) -> io::Result<usize>,
    ) -> io::Result<XattrReply> {
        if size == 0 {
            return Ok(XattrReply::Size(call(None)? as u32));
        }
        let mut buf = vec![0u8; size.min(XATTR_SIZE_MAX) as usize];
        let n = call(Some(&mut buf))?;
        buf.truncate(n);
        Ok(XattrReply::Data(buf))
    }

    pub fn getxattr(
        &self,
        _ctx: &Context,
        nodeid: u64,
        name: &CStr,
        size: u32,
    ) -> io::Result<XattrReply> {
        let acl = !self.cfg.ids.is_identity() && is_acl_name(name.to_bytes());
        let name = self.host_name(name, libc::ENODATA)?;
        let fd = self.xattr_fd(nodeid)?;
        let mut reply = Self::xattr_read(size, |buf| xattr::fgetxattr(fd.as_fd(), &name, buf))?;
        if let (true, XattrReply::Data(value)) = (acl, &mut reply) {
            self.cfg.ids.acl_to_guest(value);
        }
        Ok(reply)
    }

    pub fn listxattr(&self, _ctx: &Context, nodeid: u64, size: u32) -> io::Result<XattrReply> {
        let fd = self.xattr_fd(nodeid)?;
        let Some(map) = &self.cfg.xattrmap else {
            return Self::xattr_read(size, |buf| xattr::flistxattr(fd.as_fd(), buf));
        };
        // The guest sizes its buffer by the mapped list, so even a size query reads it all.
        let list = map.list_to_guest(&Self::host_list(fd.as_fd())?);
        if size == 0 {
            Ok(XattrReply::Size(list.len() as u32))
        } else if list.len() > size as usize {
            Err(err(libc::ERANGE))
        } else {
            Ok(XattrReply::Data(list))
        }
    }

    /// `acl_kill_sgid`: FUSE_SETXATTR_ACL_KILL_SGID, see [`killpriv::acl_kill_sgid`].
    pub fn setxattr(
        &self,
        _ctx: &Context,
        nodeid: u64,
        name: &CStr,
        value: &[u8],
        flags: u32,
        acl_kill_sgid: bool,
    ) -> io::Result<()> {
        let acl = !self.cfg.ids.is_identity() && is_acl_name(name.to_bytes());
        let name = self.host_name(name, libc::EPERM)?;
        let fd = self.xattr_fd(nodeid)?;
        self.check_writable()?;
        let value = if acl {
            let mut v = value.to_vec();
            self.cfg.ids.acl_to_host(&mut v)?;
            Cow::Owned(v)
        } else {
            Cow::Borrowed(value)
        };
        xattr::fsetxattr(fd.as_fd(), &name, &value, flags as i32)?;
        if acl_kill_sgid {
            killpriv::acl_kill_sgid(fd.as_fd(), &name)?;
        }
        Ok(())
    }

    pub fn removexattr(&self, _ctx: &Context, nodeid: u64, name: &CStr) -> io::Result<()> {
        let name = self.host_name(name, libc::EPERM)?;
        let fd = self.xattr_fd(nodeid)?;
        self.check_writable()?;
        xattr::fremovexattr(fd.as_fd(), &name)
    }
}
