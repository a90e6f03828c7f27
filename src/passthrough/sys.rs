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

/// The filesystem type of what `fd` is on, for log lines: its name for the common ones, else
/// the `f_type` magic number.
pub fn fs_type(fd: BorrowedFd) -> String {
    let mut sfs = MaybeUninit::<libc::statfs>::zeroed();
    // SAFETY: valid fd and a writable statfs buffer.
    if unsafe { libc::fstatfs(fd.as_raw_fd(), sfs.as_mut_ptr()) } < 0 {
        return "unknown filesystem".into();
    }
    // SAFETY: fstatfs filled it.
    let magic = unsafe { sfs.assume_init() }.f_type as u64;
    let name = match magic {
        0xef53 => "ext4",
        0x5846_5342 => "xfs",
        0x9123_683e => "btrfs",
        0x0102_1994 => "tmpfs",
        0x794c_7630 => "overlayfs",
        0x6969 => "nfs",
        0x2fc1_2fc1 => "zfs",
        0x6573_5546 => "fuse",
        0xff53_4d42 => "cifs",
        0x00c3_6400 => "ceph",
        _ => return format!("filesystem type {magic:#x}"),
    };
    name.into()
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
