//! The umask of creating operations under `--posix-acl`.
//!
//! With FUSE_DONT_MASK negotiated the guest kernel sends the mode unmasked, with the caller's
//! umask alongside, and leaves the choice to us, as a local filesystem with ACLs makes it: a
//! new node in a directory with a default ACL takes the mode as given and inherits the ACL
//! (the host kernel does that); anywhere else the umask applies. The daemon's own umask is 0,
//! so applying it means creating with `mode & !umask`. The check and the creation are two
//! steps: a default ACL set or removed in between decides by its state at the check.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};

use super::sys;
use super::PassthroughFs;

impl PassthroughFs {
    /// The bits to clear from the mode of a node created in directory `dir` (any fd on it):
    /// none without a guest `umask` (the guest kernel masked the mode already) or when `dir`
    /// has a default ACL, else `umask`.
    pub(super) fn creation_umask(&self, dir: BorrowedFd, umask: Option<u32>) -> io::Result<u32> {
        let Some(umask) = umask else {
            return Ok(0);
        };
        // The xattr calls take no O_PATH fd: open the directory itself.
        let name = std::ffi::CString::new(dir.as_raw_fd().to_string()).expect("digits");
        let dir = sys::openat(
            self.proc_self_fd.as_fd(),
            &name,
            libc::O_RDONLY | libc::O_DIRECTORY,
            0,
        )?;
        // SAFETY: valid fd and C string; a null buffer of length 0 asks for the size only.
        let n = unsafe {
            libc::fgetxattr(
                dir.as_raw_fd(),
                c"system.posix_acl_default".as_ptr(),
                std::ptr::null_mut(),
                0,
            )
        };
        if n >= 0 {
            return Ok(0);
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            // No default ACL, or a filesystem without ACLs.
            Some(libc::ENODATA | libc::EOPNOTSUPP) => Ok(umask & 0o777),
            _ => Err(e),
        }
    }
}
