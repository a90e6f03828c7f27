//! The umask of creating operations under `--posix-acl`.
//!
//! With FUSE_DONT_MASK negotiated the guest kernel sends the mode unmasked, with the caller's
//! umask alongside, and leaves the choice to us, as a local filesystem with ACLs makes it: a
//! new node in a directory with a default ACL takes the mode as given and inherits the ACL
//! (the host kernel does that); anywhere else the umask applies. The daemon's own umask is 0,
//! so applying it means creating with `mode & !umask`. The check and the creation are two
//! steps: a default ACL set or removed in between decides by its state at the check.

use std::io;
use std::os::fd::{AsFd, BorrowedFd};

use crate::passthrough::sys;

/// The bits to clear from the mode of a node created in directory `dir` (any fd on it): none
/// without a guest `umask` (the guest kernel masked the mode already) or when `dir` has a
/// default ACL, else `umask`. `proc_self_fd`: the daemon's `/proc/self/fd`.
pub fn creation_umask(
    proc_self_fd: BorrowedFd,
    dir: BorrowedFd,
    umask: Option<u32>,
) -> io::Result<u32> {
    let Some(umask) = umask else {
        return Ok(0);
    };
    // The xattr calls take no O_PATH fd: open the directory itself.
    let dir = sys::reopen(proc_self_fd, dir, libc::O_RDONLY | libc::O_DIRECTORY)?;
    match sys::xattr::fgetxattr(dir.as_fd(), c"system.posix_acl_default", None) {
        Ok(_) => Ok(0),
        // No default ACL, or a filesystem without ACLs.
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENODATA | libc::EOPNOTSUPP)) => {
            Ok(umask & 0o777)
        }
        Err(e) => Err(e),
    }
}
