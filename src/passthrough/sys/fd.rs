//! Calls on open files and directories.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

use super::{check, check_size};

/// fsync or fdatasync.
pub fn sync(fd: BorrowedFd, datasync: bool) -> io::Result<()> {
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

/// syncfs of the filesystem `fd` (not O_PATH) is on.
pub fn syncfs(fd: BorrowedFd) -> io::Result<()> {
    // SAFETY: valid fd.
    check(unsafe { libc::syncfs(fd.as_raw_fd()) }).map(drop)
}

pub fn ftruncate(fd: BorrowedFd, size: i64) -> io::Result<()> {
    // SAFETY: valid fd.
    check(unsafe { libc::ftruncate(fd.as_raw_fd(), size) }).map(drop)
}

pub fn fchmod(fd: BorrowedFd, mode: u32) -> io::Result<()> {
    // SAFETY: valid fd.
    check(unsafe { libc::fchmod(fd.as_raw_fd(), mode) }).map(drop)
}

pub fn futimens(fd: BorrowedFd, times: &[libc::timespec; 2]) -> io::Result<()> {
    // SAFETY: valid fd and a two-element times array.
    check(unsafe { libc::futimens(fd.as_raw_fd(), times.as_ptr()) }).map(drop)
}

/// Writes `data` at the end of the file (pwritev2 with RWF_APPEND: the offset is ignored, the
/// append is atomic as on an O_APPEND fd); the bytes written.
pub fn pwrite_append(fd: BorrowedFd, data: &[u8]) -> io::Result<usize> {
    let iov = libc::iovec {
        iov_base: data.as_ptr() as *mut libc::c_void,
        iov_len: data.len(),
    };
    // SAFETY: valid fd; one iovec over `data`, which the kernel only reads.
    let n = unsafe { libc::pwritev2(fd.as_raw_fd(), &iov, 1, 0, libc::RWF_APPEND) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

/// The file status flags (access mode, O_APPEND, ...) `fd` was opened with.
pub fn status_flags(fd: BorrowedFd) -> io::Result<i32> {
    // SAFETY: valid fd; F_GETFL takes no argument.
    check(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) })
}

pub fn fallocate(fd: BorrowedFd, mode: i32, offset: i64, len: i64) -> io::Result<()> {
    // SAFETY: valid fd.
    check(unsafe { libc::fallocate64(fd.as_raw_fd(), mode, offset, len) }).map(drop)
}

/// lseek; the new offset.
pub fn lseek(fd: BorrowedFd, offset: i64, whence: i32) -> io::Result<u64> {
    // SAFETY: valid fd.
    let ret = unsafe { libc::lseek64(fd.as_raw_fd(), offset, whence) };
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(ret as u64)
}

/// copy_file_range between explicit offsets; the bytes copied.
pub fn copy_file_range(
    fd_in: BorrowedFd,
    mut off_in: i64,
    fd_out: BorrowedFd,
    mut off_out: i64,
    len: usize,
    flags: u32,
) -> io::Result<usize> {
    // SAFETY: valid fds and offset pointers to locals.
    check_size(unsafe {
        libc::copy_file_range(
            fd_in.as_raw_fd(),
            &mut off_in,
            fd_out.as_raw_fd(),
            &mut off_out,
            len,
            flags,
        )
    })
}

/// The inode flags of `fd` (`FS_IOC_GETFLAGS`: `FS_*_FL`); not an O_PATH fd.
pub fn inode_flags(fd: BorrowedFd) -> io::Result<u32> {
    let mut flags: libc::c_int = 0;
    // SAFETY: valid fd; FS_IOC_GETFLAGS writes one int into `flags` (the kernel's ioctl takes
    // an int, whatever the `long` in its definition says).
    check(unsafe { libc::ioctl(fd.as_raw_fd(), libc::FS_IOC_GETFLAGS, &mut flags) })?;
    Ok(flags as u32)
}

/// Every name of the directory open as `dir` (not O_PATH), `.` and `..` left out, read from
/// its start.
pub fn read_names(dir: BorrowedFd) -> io::Result<Vec<Box<[u8]>>> {
    lseek(dir, 0, libc::SEEK_SET)?;
    let mut buf = vec![0u8; 64 * 1024];
    let mut names = Vec::new();
    loop {
        let n = getdents64(dir, &mut buf)?;
        if n == 0 {
            return Ok(names);
        }
        let mut pos = 0;
        while pos + 19 <= n {
            let reclen = usize::from(u16::from_ne_bytes([buf[pos + 16], buf[pos + 17]]));
            if reclen < 19 || pos + reclen > n {
                return Err(io::Error::from_raw_os_error(libc::EIO));
            }
            let field = &buf[pos + 19..pos + reclen];
            let name = &field[..field.iter().position(|&b| b == 0).unwrap_or(field.len())];
            if name != b"." && name != b".." {
                names.push(name.into());
            }
            pos += reclen;
        }
    }
}

/// getdents64 into `buf`; the bytes filled (0 at the end of the directory).
pub fn getdents64(dir: BorrowedFd, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: valid fd and a writable buffer of buf.len() bytes.
    let n = unsafe {
        libc::syscall(
            libc::SYS_getdents64,
            dir.as_raw_fd(),
            buf.as_mut_ptr(),
            buf.len(),
        )
    };
    check_size(n as isize)
}
