//! Extended attributes (only with `--xattr`; ENOSYS otherwise, so the guest stops asking).
//!
//! The xattr syscalls have no *at() form that takes an O_PATH fd, so regular files and
//! directories are opened read-only for the call; other inode types (symlinks, devices, FIFOs,
//! sockets), where opening could block or have side effects, get EOPNOTSUPP.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsFd, OwnedFd};

use super::sys::xattr;
use super::{err, Context, PassthroughFs, XattrReply};

/// Largest value or list the guest can receive (XATTR_SIZE_MAX).
const XATTR_SIZE_MAX: u32 = 64 * 1024;

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
        let fd = self.xattr_fd(nodeid)?;
        Self::xattr_read(size, |buf| xattr::fgetxattr(fd.as_fd(), name, buf))
    }

    pub fn listxattr(&self, _ctx: &Context, nodeid: u64, size: u32) -> io::Result<XattrReply> {
        let fd = self.xattr_fd(nodeid)?;
        Self::xattr_read(size, |buf| xattr::flistxattr(fd.as_fd(), buf))
    }

    pub fn setxattr(
        &self,
        _ctx: &Context,
        nodeid: u64,
        name: &CStr,
        value: &[u8],
        flags: u32,
    ) -> io::Result<()> {
        let fd = self.xattr_fd(nodeid)?;
        self.check_writable()?;
        xattr::fsetxattr(fd.as_fd(), name, value, flags as i32)
    }

    pub fn removexattr(&self, _ctx: &Context, nodeid: u64, name: &CStr) -> io::Result<()> {
        let fd = self.xattr_fd(nodeid)?;
        self.check_writable()?;
        xattr::fremovexattr(fd.as_fd(), name)
    }
}
