//! Extended attributes of open files and directories (the xattr calls have no form that takes
//! an O_PATH fd), and `setxattrat` for a name in a directory (any inode type, Linux 6.13+). A
//! `None` buffer asks for the size only.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

use super::{check, check_size};

fn buf_parts(buf: Option<&mut [u8]>) -> (*mut libc::c_void, usize) {
    match buf {
        Some(b) => (b.as_mut_ptr().cast(), b.len()),
        None => (std::ptr::null_mut(), 0),
    }
}

/// The value of `name` (or its size); the bytes it has.
pub fn fgetxattr(fd: BorrowedFd, name: &CStr, buf: Option<&mut [u8]>) -> io::Result<usize> {
    let (p, len) = buf_parts(buf);
    // SAFETY: valid fd and C string; `p` is null with length 0 or a writable buffer of `len`.
    check_size(unsafe { libc::fgetxattr(fd.as_raw_fd(), name.as_ptr(), p, len) })
}

/// The NUL-separated list of names (or its size); the bytes it has.
pub fn flistxattr(fd: BorrowedFd, buf: Option<&mut [u8]>) -> io::Result<usize> {
    let (p, len) = buf_parts(buf);
    // SAFETY: valid fd; `p` is null with length 0 or a writable buffer of `len`.
    check_size(unsafe { libc::flistxattr(fd.as_raw_fd(), p.cast(), len) })
}

pub fn fsetxattr(fd: BorrowedFd, name: &CStr, value: &[u8], flags: i32) -> io::Result<()> {
    // SAFETY: valid fd and C string; `value` is readable for its length.
    check(unsafe {
        libc::fsetxattr(
            fd.as_raw_fd(),
            name.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            flags,
        )
    })
    .map(drop)
}

pub fn fremovexattr(fd: BorrowedFd, name: &CStr) -> io::Result<()> {
    // SAFETY: valid fd and C string.
    check(unsafe { libc::fremovexattr(fd.as_raw_fd(), name.as_ptr()) }).map(drop)
}

/// `setxattrat(2)`'s number (Linux 6.13; the same on every architecture, it is newer than the
/// unified syscall table). Not in the libc crate yet.
pub const SYS_SETXATTRAT: libc::c_long = 463;

/// `struct xattr_args` of `setxattrat(2)`.
#[repr(C)]
struct XattrArgs {
    value: u64,
    size: u32,
    flags: u32,
}

/// Sets `xname` on `name` in `dir` itself, never following a symlink: the one way to set an
/// xattr on a symlink, device node, FIFO or socket without a path from the daemon's root.
/// ENOSYS before Linux 6.13.
pub fn setxattrat_nofollow(
    dir: BorrowedFd,
    name: &CStr,
    xname: &CStr,
    value: &[u8],
) -> io::Result<()> {
    let args = XattrArgs {
        value: value.as_ptr() as u64,
        size: u32::try_from(value.len()).map_err(|_| io::Error::from_raw_os_error(libc::E2BIG))?,
        flags: 0,
    };
    // SAFETY: valid fd and C strings; `args` points at `value`, readable for its length, and
    // both outlive the call; the size passed is that of `args`.
    let ret = unsafe {
        libc::syscall(
            SYS_SETXATTRAT,
            dir.as_raw_fd(),
            name.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
            xname.as_ptr(),
            &args as *const XattrArgs,
            std::mem::size_of::<XattrArgs>(),
        )
    };
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}
