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
//! - O_APPEND is left to the guest: every WRITE carries the guest's offset (the host fd never has
//!   O_APPEND, see `STRIPPED_FLAGS` in files.rs, and no WRITE is made RWF_APPEND under
//!   writeback), so a page written back twice lands twice at its offset.
//!
//! The guest also owns the mtime of a regular file: it sets it at each write(2) and mmap store and
//! sends it later as an explicit FATTR_MTIME (on close, fsync, inode writeback), while its dirty
//! pages reach us as WRITEs with FUSE_WRITE_CACHE, possibly after that SETATTR (on close the
//! kernel does not wait for its writeback WRITEs before sending the times). Each such WRITE would
//! set the host's mtime to the time it arrived, later than what the guest shows, and a guest that
//! drops its cache then sees the file change its mtime. So under writeback the mtime the guest set
//! last is kept with the inode ([`GuestState`]) and put back after every cache WRITE.
//!
//! And the guest takes a regular file's size from us only when it instantiates the inode: a
//! file the host changes while the guest holds its inode stays, in the guest, at the size and
//! content it had then, however often the guest looks it up (Proxmox VE's truncated files, see
//! docs/writeback.md). So the guest's view (size and mtime) is kept with the inode too, and an
//! entry reply for a node whose host file no longer matches it, while the guest has the node
//! closed, carries a new generation: the guest replaces its inode ([`GuestState`]).
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

use std::sync::atomic::{AtomicBool, Ordering};

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

    /// The read-write form of `flags` when the guest's page cache will read through a handle
    /// opened write-only, else `None`.
    pub fn widened(&self, flags: i32) -> Option<i32> {
        (self.on() && flags & libc::O_ACCMODE == libc::O_WRONLY)
            .then_some((flags & !libc::O_ACCMODE) | libc::O_RDWR)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_under_writeback() {
        let wb = Writeback::default();
        assert_eq!(wb.widened(libc::O_WRONLY), None);
        wb.set(true);
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
