//! Extended attributes of open files and directories (the f* calls take no O_PATH fd), and of
//! any inode through its O_PATH fd's `/proc/self/fd` link. A `None` buffer asks for the size
//! only.

use std::cell::Cell;
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

thread_local! {
    /// This thread has its own cwd (`unshare(CLONE_FS)` done): [`setxattr_o_path`] may move it.
    static OWN_CWD: Cell<bool> = const { Cell::new(false) };
}

/// Sets `xname` on what the O_PATH fd `fd` refers to, whatever its type (a symlink itself, a
/// device node without opening it), as virtiofsd does: `setxattr` of its name in
/// `/proc/self/fd` (`proc_self_fd`, opened before the sandbox) from that directory. The xattr
/// calls have no other form for such inodes before Linux 6.13 (`setxattrat`). The calling
/// thread first gets a cwd of its own (`unshare(CLONE_FS)`, once), so moving it to
/// `/proc/self/fd` touches no other thread; nothing in the daemon resolves relative to the cwd.
pub fn setxattr_o_path(
    proc_self_fd: BorrowedFd,
    fd: BorrowedFd,
    xname: &CStr,
    value: &[u8],
) -> io::Result<()> {
    if !OWN_CWD.get() {
        // SAFETY: plain syscall; CLONE_FS only unshares this thread's root, cwd and umask.
        check(unsafe { libc::unshare(libc::CLONE_FS) })?;
        OWN_CWD.set(true);
    }
    // SAFETY: valid fd.
    check(unsafe { libc::fchdir(proc_self_fd.as_raw_fd()) })?;
    let name = super::proc_name(fd);
    // SAFETY: valid C strings (relative to the cwd just set); `value` is readable for its length.
    check(unsafe {
        libc::setxattr(
            name.as_ptr(),
            xname.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    })
    .map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CString;
    use std::os::fd::AsFd;
    use std::os::unix::ffi::OsStrExt;

    #[test]
    fn o_path_xattr_reaches_a_symlink_and_a_fifo_themselves_and_leaves_other_cwds_alone() {
        let dir = std::env::temp_dir().join(format!("vhostfs-xattr-{}", std::process::id()));
        std::fs::create_dir(&dir).unwrap();
        let link = dir.join("link");
        std::os::unix::fs::symlink("target", &link).unwrap();
        let fifo = CString::new(dir.join("fifo").as_os_str().as_bytes()).unwrap();
        // SAFETY: valid C string.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        let cwd = std::env::current_dir().unwrap();
        let proc = std::fs::File::open("/proc/self/fd").unwrap();
        for node in [&link, &dir.join("fifo")] {
            let path = CString::new(node.as_os_str().as_bytes()).unwrap();
            let root = std::fs::File::open("/").unwrap();
            let fd = super::super::openat(root.as_fd(), &path, libc::O_PATH | libc::O_NOFOLLOW, 0)
                .unwrap();
            let (proc, fd) = (proc.as_fd(), fd.as_fd());
            // From another thread: this one's cwd must not move.
            std::thread::scope(|s| {
                s.spawn(|| setxattr_o_path(proc, fd, c"security.t", b"v").unwrap());
            });
            let mut buf = [0u8; 8];
            // SAFETY: valid C strings; `buf` is writable for its length.
            let n = unsafe {
                libc::lgetxattr(
                    path.as_ptr(),
                    c"security.t".as_ptr(),
                    buf.as_mut_ptr().cast(),
                    8,
                )
            };
            assert_eq!(n, 1, "{}", node.display());
        }
        assert_eq!(std::env::current_dir().unwrap(), cwd);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
