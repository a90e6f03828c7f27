//! The syscalls the filesystem makes, one checked wrapper each with its SAFETY note, so that an
//! operation reads as Rust: fds are borrowed, names are `CStr`s, results are owned fds or
//! `io::Result`s. Names and paths (`*at()` calls, the `/proc/self/fd` re-open) are here; calls
//! on open files in [`fd`], extended attributes in [`xattr`], file handles in [`handle`], the
//! per-thread fsuid/fsgid in [`creds`].

pub mod creds;
pub mod fd;
pub mod handle;
pub mod xattr;

use std::ffi::CStr;
use std::ffi::CString;
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

/// `Err(last_os_error)` when `ret` is negative, else `ret` as a size.
pub(super) fn check_size(ret: isize) -> io::Result<usize> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret as usize)
    }
}

/// Re-opens what the O_PATH fd `fd` refers to with real open `flags`, through `/proc/self/fd/N`
/// (`proc_self_fd` is that directory, opened before the sandbox). The magic link is followed
/// whatever the flags say (O_NOFOLLOW would fail it with ELOOP): callers make sure `fd` is not
/// a symlink.
pub fn reopen(proc_self_fd: BorrowedFd, fd: BorrowedFd, flags: libc::c_int) -> io::Result<OwnedFd> {
    openat(proc_self_fd, &proc_name(fd), flags & !libc::O_NOFOLLOW, 0)
}

/// The name of `fd` in `/proc/self/fd`.
pub fn proc_name(fd: BorrowedFd) -> CString {
    CString::new(fd.as_raw_fd().to_string()).expect("digits have no NUL")
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

/// The `f_type` magic number of the filesystem `fd` is on (`None`: fstatfs failed).
pub fn fs_magic(fd: BorrowedFd) -> Option<u64> {
    let mut sfs = MaybeUninit::<libc::statfs>::zeroed();
    // SAFETY: valid fd and a writable statfs buffer.
    if unsafe { libc::fstatfs(fd.as_raw_fd(), sfs.as_mut_ptr()) } < 0 {
        return None;
    }
    // SAFETY: fstatfs filled it.
    Some(unsafe { sfs.assume_init() }.f_type as u64)
}

/// The filesystem type of what `fd` is on, for log lines: its name for the common ones, else
/// the `f_type` magic number.
pub fn fs_type(fd: BorrowedFd) -> String {
    let Some(magic) = fs_magic(fd) else {
        return "unknown filesystem".into();
    };
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

/// The target of the symlink `fd` (an O_PATH fd of the link itself).
pub fn readlink(fd: BorrowedFd) -> io::Result<Vec<u8>> {
    readlinkat(fd, c"")
}

/// The path the kernel has for what `fd` refers to: its link in `/proc/self/fd`
/// (`proc_self_fd`, opened before the sandbox).
pub fn fd_path(proc_self_fd: BorrowedFd, fd: BorrowedFd) -> io::Result<Vec<u8>> {
    readlinkat(proc_self_fd, &proc_name(fd))
}

fn readlinkat(dir: BorrowedFd, name: &CStr) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; libc::PATH_MAX as usize];
    // SAFETY: valid fd and C string, writable buffer of buf.len() bytes.
    let n = check_size(unsafe {
        libc::readlinkat(
            dir.as_raw_fd(),
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    })?;
    buf.truncate(n);
    Ok(buf)
}

pub fn symlinkat(target: &CStr, dir: BorrowedFd, name: &CStr) -> io::Result<()> {
    // SAFETY: valid fd and C strings.
    check(unsafe { libc::symlinkat(target.as_ptr(), dir.as_raw_fd(), name.as_ptr()) }).map(drop)
}

pub fn mknodat(dir: BorrowedFd, name: &CStr, mode: u32, rdev: u32) -> io::Result<()> {
    // SAFETY: valid fd and C string.
    check(unsafe {
        libc::mknodat(
            dir.as_raw_fd(),
            name.as_ptr(),
            mode,
            libc::dev_t::from(rdev),
        )
    })
    .map(drop)
}

pub fn mkdirat(dir: BorrowedFd, name: &CStr, mode: u32) -> io::Result<()> {
    // SAFETY: valid fd and C string.
    check(unsafe { libc::mkdirat(dir.as_raw_fd(), name.as_ptr(), mode) }).map(drop)
}

/// `flags`: 0 or `AT_REMOVEDIR`.
pub fn unlinkat(dir: BorrowedFd, name: &CStr, flags: libc::c_int) -> io::Result<()> {
    // SAFETY: valid fd and C string.
    check(unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), flags) }).map(drop)
}

pub fn renameat2(
    olddir: BorrowedFd,
    oldname: &CStr,
    newdir: BorrowedFd,
    newname: &CStr,
    flags: u32,
) -> io::Result<()> {
    // SAFETY: valid fds and C strings.
    check(unsafe {
        libc::renameat2(
            olddir.as_raw_fd(),
            oldname.as_ptr(),
            newdir.as_raw_fd(),
            newname.as_ptr(),
            flags,
        )
    })
    .map(drop)
}

/// Links the inode `fd` refers to (AT_EMPTY_PATH) as `name` in `dir`.
pub fn link_fd(fd: BorrowedFd, dir: BorrowedFd, name: &CStr) -> io::Result<()> {
    // SAFETY: valid fds and C strings.
    check(unsafe {
        libc::linkat(
            fd.as_raw_fd(),
            c"".as_ptr(),
            dir.as_raw_fd(),
            name.as_ptr(),
            libc::AT_EMPTY_PATH,
        )
    })
    .map(drop)
}

/// Links the file `fd` is open on (an O_TMPFILE file among others) as `name` in `dir`, through
/// its `/proc/self/fd` magic link (`proc_self_fd` is that directory): unlike AT_EMPTY_PATH this
/// needs no CAP_DAC_READ_SEARCH, so it works under a guest caller's fsuid, which the host then
/// checks for write access to `dir`.
pub fn link_proc(
    proc_self_fd: BorrowedFd,
    fd: BorrowedFd,
    dir: BorrowedFd,
    name: &CStr,
) -> io::Result<()> {
    let proc_name = proc_name(fd);
    // SAFETY: valid fds and C strings.
    check(unsafe {
        libc::linkat(
            proc_self_fd.as_raw_fd(),
            proc_name.as_ptr(),
            dir.as_raw_fd(),
            name.as_ptr(),
            libc::AT_SYMLINK_FOLLOW,
        )
    })
    .map(drop)
}

/// chown of what `fd` refers to, never following a symlink; `u32::MAX` leaves an id as it is.
pub fn fchown_fd(fd: BorrowedFd, uid: u32, gid: u32) -> io::Result<()> {
    // SAFETY: valid fd, empty path with AT_EMPTY_PATH.
    check(unsafe {
        libc::fchownat(
            fd.as_raw_fd(),
            c"".as_ptr(),
            uid,
            gid,
            libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW,
        )
    })
    .map(drop)
}

/// chmod of `name` in `dir` (following a final symlink, as the magic links of `/proc/self/fd`
/// need).
pub fn fchmodat(dir: BorrowedFd, name: &CStr, mode: u32) -> io::Result<()> {
    // SAFETY: valid fd and C string.
    check(unsafe { libc::fchmodat(dir.as_raw_fd(), name.as_ptr(), mode, 0) }).map(drop)
}

/// Sets the atime and mtime of `name` in `dir` (`flags`: `AT_EMPTY_PATH`,
/// `AT_SYMLINK_NOFOLLOW`).
pub fn utimensat(
    dir: BorrowedFd,
    name: &CStr,
    times: &[libc::timespec; 2],
    flags: libc::c_int,
) -> io::Result<()> {
    // SAFETY: valid fd, C string and a two-element times array.
    check(unsafe { libc::utimensat(dir.as_raw_fd(), name.as_ptr(), times.as_ptr(), flags) })
        .map(drop)
}

/// The statvfs of the filesystem `fd` (O_PATH is fine) is on.
pub fn fstatvfs(fd: BorrowedFd) -> io::Result<libc::statvfs64> {
    let mut st = MaybeUninit::<libc::statvfs64>::zeroed();
    // SAFETY: valid fd and a writable buffer.
    check(unsafe { libc::fstatvfs64(fd.as_raw_fd(), st.as_mut_ptr()) })?;
    // SAFETY: filled by the kernel.
    Ok(unsafe { st.assume_init() })
}

/// Makes the kernel's fd table of this process `n` fds large now (a duplicate at `n`, closed at
/// once). It grows by doubling as fds are opened, and in a multi-threaded process every doubling
/// waits for an RCU grace period (up to milliseconds): filling the fd cache would stall requests
/// that many times.
pub fn grow_fd_table(any: BorrowedFd, n: usize) {
    // SAFETY: F_DUPFD_CLOEXEC of a valid fd; the new fd is owned and closed at once.
    let fd = unsafe { libc::fcntl(any.as_raw_fd(), libc::F_DUPFD_CLOEXEC, n as libc::c_int) };
    if fd >= 0 {
        // SAFETY: a fresh fd nothing else owns.
        drop(unsafe { OwnedFd::from_raw_fd(fd) });
    }
}
