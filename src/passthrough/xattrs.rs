//! Extended attributes (only with `--xattr`; ENOSYS otherwise, so the guest stops asking).
//!
//! The xattr syscalls have no *at() form that takes an O_PATH fd, so regular files and
//! directories are opened read-only for the call; other inode types (symlinks, devices, FIFOs,
//! sockets), where opening could block or have side effects, get EOPNOTSUPP.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use super::sys::check;
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

    /// Shared by GETXATTR and LISTXATTR: `call(buf_ptr, len)` is the syscall.
    fn xattr_read(
        size: u32,
        call: impl Fn(*mut libc::c_void, usize) -> isize,
    ) -> io::Result<XattrReply> {
        if size == 0 {
            let n = call(std::ptr::null_mut(), 0);
            if n < 0 {
                return Err(io::Error::last_os_error());
            }
            return Ok(XattrReply::Size(n as u32));
        }
        let mut buf = vec![0u8; size.min(XATTR_SIZE_MAX) as usize];
        let n = call(buf.as_mut_ptr().cast(), buf.len());
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        buf.truncate(n as usize);
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
        // SAFETY: valid fd and C string; `p`/`len` describe a writable buffer (or null/0).
        Self::xattr_read(size, |p, len| unsafe {
            libc::fgetxattr(fd.as_raw_fd(), name.as_ptr(), p, len)
        })
    }

    pub fn listxattr(&self, _ctx: &Context, nodeid: u64, size: u32) -> io::Result<XattrReply> {
        let fd = self.xattr_fd(nodeid)?;
        // SAFETY: as above.
        Self::xattr_read(size, |p, len| unsafe {
            libc::flistxattr(fd.as_raw_fd(), p.cast(), len)
        })
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
        // SAFETY: valid fd, C string and value buffer.
        check(unsafe {
            libc::fsetxattr(
                fd.as_fd().as_raw_fd(),
                name.as_ptr(),
                value.as_ptr().cast(),
                value.len(),
                flags as i32,
            )
        })
        .map(drop)
    }

    pub fn removexattr(&self, _ctx: &Context, nodeid: u64, name: &CStr) -> io::Result<()> {
        let fd = self.xattr_fd(nodeid)?;
        self.check_writable()?;
        // SAFETY: valid fd and C string.
        check(unsafe { libc::fremovexattr(fd.as_raw_fd(), name.as_ptr()) }).map(drop)
    }
}
