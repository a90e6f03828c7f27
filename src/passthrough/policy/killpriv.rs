//! Clearing setuid/setgid and file capabilities where the guest leaves it to us
//! (FUSE_HANDLE_KILLPRIV_V2, virtiofsd's `--killpriv-v2`), and the mapped capability xattr.
//!
//! Invariants:
//! - With KILLPRIV_V2 negotiated the guest kernel no longer clears the bits itself; it flags a
//!   WRITE (FUSE_WRITE_KILL_SUIDGID), a truncating SETATTR (FATTR_KILL_SUIDGID) and an OPEN or
//!   CREATE with O_TRUNC (FUSE_OPEN_KILL_SUIDGID) when its caller lacks CAP_FSETID, and every
//!   chown of a non-directory. A flagged operation runs on its thread with CAP_FSETID out of the
//!   effective set and the caller's gid as fsgid, so the host kernel clears what it clears for
//!   such a caller: setuid always, setgid when the file is group-executable or the caller is
//!   not in its group (the caller's primary gid: the guest does not send its supplementary
//!   groups). An unflagged write or truncate keeps CAP_FSETID, also where it runs as a non-root
//!   caller (CREATE with O_TRUNC), whose fsuid would otherwise have dropped it: the bits then
//!   stay, as the guest asked (without KILLPRIV_V2 the guest puts the cleared mode in the same
//!   SETATTR). chown: the host kernel clears the bits on every chown of a non-directory; a
//!   guest user's chgrp runs with these credentials too, so the host clears them as for that
//!   user (see `setattr.rs`). All of it per thread, undone before the thread serves anything else; an
//!   unflagged WRITE or OPEN costs no syscall, and a flagged WRITE (every write of a guest user)
//!   to a file without setuid/setgid one statx (the change itself costs ~5 µs of syscalls). The dispatcher passes the flags on only when
//!   KILLPRIV_V2 was negotiated.
//! - `security.capability` is removed by the host kernel on write, truncate and chown whatever
//!   the capabilities. When `--xattrmap` stores the guest's `security.capability` under another
//!   host name, the host kernel knows nothing of it: we remove that name on the same
//!   operations (every WRITE, a truncating SETATTR or O_TRUNC open, a chown), as virtiofsd
//!   does, so a written file does not keep its capabilities.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::BorrowedFd;

use crate::passthrough::policy::credentials::{Credentials, Fsetid};
use crate::passthrough::policy::xattr_map::{HostName, XattrMap};
use crate::passthrough::sys;

const CAPABILITY_XATTR: &CStr = c"security.capability";

/// The host name `map` gives the guest's `security.capability`, when it is another name.
pub fn mapped_capability(map: Option<&XattrMap>) -> Option<CString> {
    match map?.to_host(CAPABILITY_XATTR) {
        HostName::Name(n) if *n != *CAPABILITY_XATTR => Some(n.into_owned()),
        // The host name itself (the host kernel clears it), or a name the guest cannot set.
        _ => None,
    }
}

/// A flagged operation's credentials, until dropped: fsgid = the caller's gid (fsuid stays
/// 0), CAP_FSETID out of the effective set.
pub struct KillPrivs {
    // Dropped in this order: the capability back first, then the fsgid.
    _fsetid: Option<Fsetid>,
    _creds: Option<Credentials>,
}

/// CAP_FSETID as a truncate running as the caller (fsuid) needs it: out when `kill`, else in
/// (a non-root fsuid dropped it; `--translate-uid` may give guest root a non-root one too);
/// `None` when nothing changes.
pub fn fsetid_for_truncate(kill: bool) -> io::Result<Option<Fsetid>> {
    Fsetid::set(!kill)
}

impl KillPrivs {
    /// For an operation the daemon makes as root on behalf of a caller (WRITE, OPEN, SETATTR):
    /// fsgid = `gid`, the caller's in host ids (`None`: a caller whose gid the daemon may not
    /// take, unmapped in an unprivileged daemon's user namespace or forbidden by
    /// `--translate-gid`, leaves the daemon's own: setuid is cleared all the same, setgid then
    /// as for a caller outside the group), and CAP_FSETID out of the effective set.
    pub fn switch(gid: Option<u32>) -> io::Result<KillPrivs> {
        let creds = gid.and_then(|gid| Credentials::switch(0, gid).ok());
        Ok(KillPrivs {
            _fsetid: Fsetid::set(false)?,
            _creds: creds,
        })
    }
}

/// Removes the mapped `security.capability` (`name`, from [`mapped_capability`]) of the
/// regular file open as `fd` (any open fd, not O_PATH). Nothing to do without such a mapping,
/// or when the file has none.
pub fn clear_mapped_capability(name: Option<&CStr>, fd: BorrowedFd) -> io::Result<()> {
    let Some(name) = name else {
        return Ok(());
    };
    match sys::xattr::fremovexattr(fd, name) {
        Err(e) if !matches!(e.raw_os_error(), Some(libc::ENODATA | libc::EOPNOTSUPP)) => Err(e),
        _ => Ok(()),
    }
}

/// After a successful SETXATTR of `system.posix_acl_access` flagged
/// FUSE_SETXATTR_ACL_KILL_SGID (the guest's caller is not in the file's group and lacks
/// CAP_FSETID): clears the setgid bit, which the host kernel, asked by root, kept.
pub fn acl_kill_sgid(fd: BorrowedFd, host_name: &CStr) -> io::Result<()> {
    if host_name != c"system.posix_acl_access" {
        return Ok(());
    }
    let st = sys::statx(fd, c"", 0, libc::STATX_MODE)?;
    let mode = u32::from(st.stx_mode);
    if mode & libc::S_ISGID == 0 {
        return Ok(());
    }
    sys::fd::fchmod(fd, mode & 0o7777 & !libc::S_ISGID)
}
