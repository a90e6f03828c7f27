//! Writeback caching (`--writeback`, FUSE_WRITEBACK_CACHE): what the host side does
//! differently once the guest keeps dirty pages and owns the sizes and times of regular files.
//!
//! With writeback caching the guest kernel (fs/fuse) writes into its page cache and sends the
//! dirty pages later (WRITE with FUSE_WRITE_CACHE, through any writable handle of the inode); to
//! write part of a page that is not cached it first READs the page, through the handle it was
//! given, even one opened O_WRONLY. It computes O_APPEND offsets itself from its own i_size. So
//! on the host, while writeback is negotiated:
//! - an O_WRONLY open becomes O_RDWR (as virtiofsd 1.14 does for OPEN; for CREATE too, which
//!   virtiofsd leaves O_WRONLY), else those READs fail with EBADF and the guest's write with EIO;
//! - O_APPEND is dropped: the WRITEs carry the guest's offsets, and an O_APPEND host fd would put
//!   every one of them at the host's end of file (pwritev appends on such an fd), so a page
//!   written back twice would be appended twice.
//!
//! The guest also owns the mtime of a regular file: it sets it at each write(2) and mmap store and
//! sends it later as an explicit FATTR_MTIME (on close, fsync, inode writeback), while its dirty
//! pages reach us as WRITEs with FUSE_WRITE_CACHE, possibly after that SETATTR (on close the
//! kernel does not wait for its writeback WRITEs before sending the times). Each such WRITE would
//! set the host's mtime to the time it arrived, later than what the guest shows, and a guest that
//! drops its cache then sees the file change its mtime. So under writeback the mtime the guest set
//! last is kept with the inode ([`GuestMtime`]) and put back after every cache WRITE.
//!
//! Who may read through a widened handle: only the guest kernel, to fill pages for writes the
//! guest user was allowed. The guest checks every open against the attributes
//! (virtio-fs mounts always use `default_permissions`): a read(2) on the user's O_WRONLY file
//! fails with EBADF in the guest and a PROT_READ mmap of it with EACCES before any request is
//! sent, and another open for reading is checked like any open. On the host, OPEN is opened by
//! the daemon as before; CREATE first opens as the caller with the guest's own access mode (so
//! the host checks exactly what the guest asked for) and only then re-opens that file read-write
//! as the daemon. Where the daemon itself may not read the file (an unprivileged daemon, a
//! `--modcaps` without DAC_OVERRIDE), the guest's own flags are used: the open works as without
//! writeback, and only a partial-page write that needs a READ fails.

use std::io;
use std::os::fd::AsFd;
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use super::credentials::Credentials;
use super::entries::{FATTR_CTIME, FATTR_FH, FATTR_MTIME, FATTR_MTIME_NOW};
use super::inode_table::Inode;
use super::{sys, PassthroughFs};
use crate::sync::lock;

/// Whether the current FUSE session negotiated FUSE_WRITEBACK_CACHE.
///
/// Invariant: set by every FUSE_INIT (from the answer sent) before any OPEN/CREATE of that
/// session is served; a handle keeps the flags it was opened with.
#[derive(Default)]
pub struct Writeback(AtomicBool);

impl Writeback {
    pub fn set(&self, on: bool) {
        self.0.store(on, Ordering::Release);
    }

    pub fn on(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }

    /// The guest's open flags as the host file is opened with them: without O_APPEND under
    /// writeback caching.
    pub fn host_flags(&self, flags: i32) -> i32 {
        if self.on() {
            flags & !libc::O_APPEND
        } else {
            flags
        }
    }

    /// The read-write form of `flags` when the guest's page cache will read through a handle
    /// opened write-only, else `None`.
    pub fn widened(&self, flags: i32) -> Option<i32> {
        (self.on() && flags & libc::O_ACCMODE == libc::O_WRONLY)
            .then_some((flags & !libc::O_ACCMODE) | libc::O_RDWR)
    }
}

/// The mtime the guest last set explicitly on a regular file while writeback was on.
///
/// Invariant: the host file's mtime is changed, by SETATTR and by the restore after a cache WRITE,
/// only under this lock, and the value set last is the one held here: whatever order SETATTRs and
/// WRITEs of the page cache arrive in, the host ends with the guest's last mtime.
#[derive(Default)]
pub struct GuestMtime(Mutex<Option<libc::timespec>>);

impl PassthroughFs {
    /// SETATTR's change of times through `set`: under writeback, an explicit mtime on a regular
    /// file is the guest's own; it is recorded for the restores after cache WRITEs.
    pub(super) fn set_times_as_guest(
        &self,
        inode: &Inode,
        valid: u32,
        mtime: libc::timespec,
        set: impl FnOnce() -> io::Result<()>,
    ) -> io::Result<()> {
        let explicit = valid & FATTR_MTIME != 0 && valid & FATTR_MTIME_NOW == 0;
        if !(self.writeback.on() && explicit && inode.kind == libc::S_IFREG) {
            return set();
        }
        let mut guest = lock(&inode.guest_mtime.0);
        set()?;
        *guest = Some(mtime);
        Ok(())
    }

    /// After a WRITE of the guest's page cache (FUSE_WRITE_CACHE) through `fh`: the host file
    /// gets back the mtime the guest set last, if it set one (see [`GuestMtime`]).
    pub fn after_cache_write(&self, fh: u64) -> io::Result<()> {
        if !self.writeback.on() {
            return Ok(());
        }
        let open = self.handles.get(fh)?;
        let inode = self.inodes.get(open.nodeid)?;
        let guest = lock(&inode.guest_mtime.0);
        match *guest {
            Some(mtime) => {
                let omit = libc::timespec {
                    tv_sec: 0,
                    tv_nsec: libc::UTIME_OMIT,
                };
                sys::fd::futimens(open.file.as_fd(), &[omit, mtime])
            }
            None => Ok(()),
        }
    }

    /// SETATTR's futimens through the open file `fd`, run as the caller. Under writeback the
    /// guest keeps mtime itself and flushes it on close and fsync as an explicit
    /// FATTR_MTIME | FATTR_CTIME through a writable handle; the host lets only the owner set an
    /// explicit time, so for a guest user writing a file it does not own the flush (and its
    /// close(2) or fsync(2)) would fail with EPERM. Such a time-only change through a handle
    /// opened for writing is made as the daemon: the caller may write the file (the guest
    /// checked the open), and a local file system updates mtime on every write too.
    pub(super) fn futimens_as_writer(
        &self,
        fd: BorrowedFd,
        times: &[libc::timespec; 2],
        valid: u32,
    ) -> io::Result<()> {
        match sys::fd::futimens(fd, times) {
            Err(e) if e.raw_os_error() == Some(libc::EPERM) && self.writeback.on() => {
                let flush = valid & !(FATTR_MTIME | FATTR_CTIME | FATTR_FH) == 0;
                if !flush || sys::fd::status_flags(fd)? & libc::O_ACCMODE == libc::O_RDONLY {
                    return Err(e);
                }
                let _daemon = Credentials::switch(0, 0)?;
                sys::fd::futimens(fd, times)
            }
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_under_writeback() {
        let wb = Writeback::default();
        let wronly_append = libc::O_WRONLY | libc::O_APPEND;
        assert_eq!(wb.host_flags(wronly_append), wronly_append);
        assert_eq!(wb.widened(libc::O_WRONLY), None);
        wb.set(true);
        assert_eq!(wb.host_flags(wronly_append), libc::O_WRONLY);
        assert_eq!(
            wb.widened(libc::O_WRONLY | libc::O_SYNC),
            Some(libc::O_RDWR | libc::O_SYNC)
        );
        assert_eq!(wb.widened(libc::O_RDWR), None);
        assert_eq!(wb.widened(libc::O_RDONLY), None);
        wb.set(false);
        assert_eq!(wb.widened(libc::O_WRONLY), None);
    }
}
