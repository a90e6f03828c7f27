//! Thin checked wrappers around the *at() syscalls the passthrough uses.

use std::ffi::CStr;
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// `Err(last_os_error)` when `ret` is -1.
pub fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

pub fn openat(dir: BorrowedFd, name: &CStr, flags: libc::c_int, mode: u32) -> io::Result<OwnedFd> {
    // SAFETY: valid fd and C string; the result is checked and owned.
    let fd = check(unsafe {
        libc::openat(
            dir.as_raw_fd(),
            name.as_ptr(),
            flags | libc::O_CLOEXEC,
            mode,
        )
    })?;
    // SAFETY: a fresh fd.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// statx of what `fd` refers to (`name` empty) or of `name` in `fd`, never following symlinks.
pub fn statx(
    fd: BorrowedFd,
    name: &CStr,
    flags: libc::c_int,
    mask: u32,
) -> io::Result<libc::statx> {
    let mut st = MaybeUninit::<libc::statx>::zeroed();
    let flags = flags
        | libc::AT_SYMLINK_NOFOLLOW
        | if name.is_empty() {
            libc::AT_EMPTY_PATH
        } else {
            0
        };
    // SAFETY: `st` is a writable statx buffer.
    check(unsafe { libc::statx(fd.as_raw_fd(), name.as_ptr(), flags, mask, st.as_mut_ptr()) })?;
    // SAFETY: statx filled it (and it was zeroed before).
    Ok(unsafe { st.assume_init() })
}

/// The fields LOOKUP/GETATTR need, plus the mount ID for inode identity.
pub const STATX_WANTED: u32 = libc::STATX_BASIC_STATS | libc::STATX_MNT_ID;

pub fn dev_of(st: &libc::statx) -> u64 {
    libc::makedev(st.stx_dev_major, st.stx_dev_minor)
}

/// fsync or fdatasync.
pub fn sync_fd(fd: BorrowedFd, datasync: bool) -> io::Result<()> {
    let fd = fd.as_raw_fd();
    // SAFETY: valid fd.
    check(unsafe {
        if datasync {
            libc::fdatasync(fd)
        } else {
            libc::fsync(fd)
        }
    })
    .map(drop)
}
