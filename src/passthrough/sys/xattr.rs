//! Extended attributes of open files and directories (the xattr calls have no form that takes
//! an O_PATH fd). A `None` buffer asks for the size only.

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
