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

use std::io;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use super::handle_table::OpenFile;
use super::inode_table::Inode;
use super::setattr::{FATTR_CTIME, FATTR_FH, FATTR_MTIME, FATTR_MTIME_NOW, FATTR_SIZE};
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

    /// The read-write form of `flags` when the guest's page cache will read through a handle
    /// opened write-only, else `None`.
    pub fn widened(&self, flags: i32) -> Option<i32> {
        (self.on() && flags & libc::O_ACCMODE == libc::O_WRONLY)
            .then_some((flags & !libc::O_ACCMODE) | libc::O_RDWR)
    }
}

/// Size and mtime of a regular file as the guest's inode holds them.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct View {
    size: u64,
    mtime: (i64, u32),
}

impl View {
    fn of(st: &libc::statx) -> View {
        View {
            size: st.stx_size,
            mtime: (st.stx_mtime.tv_sec, st.stx_mtime.tv_nsec),
        }
    }
}

#[derive(Default)]
struct Guest {
    /// What the guest was given when it instantiated the inode, changed by its own requests
    /// since (WRITE, SETATTR of size and mtime); `None` until the first entry reply under
    /// writeback.
    view: Option<View>,
    /// The mtime the guest last set explicitly, put back after each cache WRITE.
    mtime: Option<libc::timespec>,
}

/// The guest's side of a regular file under writeback caching.
///
/// Invariants: the host file's mtime is changed, by SETATTR and by the restore after a cache
/// WRITE, only under this lock, and the value set last is the one held here (whatever order
/// SETATTRs and WRITEs of the page cache arrive in, the host ends with the guest's last mtime).
/// The node's generation is raised only under this lock, only when the guest holds no open file
/// of the node (so it has no dirty pages or unsent times for it: the kernel writes them back
/// before RELEASE), and only when the host's size or mtime differs from the guest's view.
/// It is kept out of the inode, in the inode table's side table (`InodeTable::guest`), made for
/// a node on first use under writeback: without writeback an inode pays nothing for it.
#[derive(Default)]
pub struct GuestState {
    guest: Mutex<Guest>,
    /// FUSE generation of the node ID: raised to make the guest drop its inode and take a fresh
    /// one with the host's size and data.
    generation: AtomicU64,
}

impl GuestState {
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Raises the generation, returning the new one; callers hold the `guest` lock (outside
    /// the inode table's own tests).
    pub(super) fn raise_generation(&self) -> u64 {
        self.generation.fetch_add(1, Ordering::AcqRel) + 1
    }

    /// The generation the migration source had given the node (before any request runs).
    pub(super) fn set_generation(&self, generation: u64) {
        self.generation.store(generation, Ordering::Release);
    }
}

impl PassthroughFs {
    /// At every entry reply (LOOKUP, READDIRPLUS, creates) for `inode`, with the host's `st`:
    /// when the host changed the file behind the guest's back (the Proxmox VE case in
    /// docs/writeback.md) and the guest has it closed, the node gets a new generation. The guest
    /// kernel then sees a stale inode (`fuse_stale_inode()`): it drops its dentry and inode and
    /// instantiates the node afresh, with the host's size and no cached pages.
    pub(super) fn check_guest_view(&self, inode: &Inode, st: &libc::statx) {
        if !self.writeback.on() || inode.kind != libc::S_IFREG {
            return;
        }
        let host = View::of(st);
        let Some(state) = self.inodes.guest(inode.nodeid) else {
            return;
        };
        let mut guest = lock(&state.guest);
        match guest.view {
            Some(view) if view != host => {
                if self.handles.any_of(inode.nodeid) {
                    return;
                }
                let generation = state.raise_generation();
                log::debug!(
                    "node {}: changed on the host behind the guest's cache ({view:?} -> \
                     {host:?}): generation {generation}",
                    inode.nodeid
                );
                guest.view = Some(host);
                guest.mtime = None;
            }
            Some(_) => {}
            None => guest.view = Some(host),
        }
    }

    /// After SETATTR: the `size` it set (FATTR_SIZE in `valid`) is the guest's, and so is an
    /// mtime set to the host's clock (FATTR_MTIME_NOW; `st`: the host file after the change).
    /// An explicit mtime went through [`PassthroughFs::set_times_as_guest`].
    pub(super) fn after_setattr(&self, inode: &Inode, valid: u32, size: u64, st: &libc::statx) {
        if !self.writeback.on() || inode.kind != libc::S_IFREG {
            return;
        }
        let Some(state) = self.inodes.guest(inode.nodeid) else {
            return;
        };
        let mut guest = lock(&state.guest);
        if let Some(view) = guest.view.as_mut() {
            if valid & FATTR_SIZE != 0 {
                view.size = size;
            }
            if valid & FATTR_MTIME_NOW != 0 {
                view.mtime = (st.stx_mtime.tv_sec, st.stx_mtime.tv_nsec);
            }
        }
    }

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
        let Some(state) = self.inodes.guest(inode.nodeid) else {
            return set();
        };
        let mut guest = lock(&state.guest);
        set()?;
        guest.mtime = Some(mtime);
        if let Some(view) = guest.view.as_mut() {
            view.mtime = (mtime.tv_sec, mtime.tv_nsec as u32);
        }
        Ok(())
    }

    /// After a WRITE through `fh` that ended at offset `end`: the guest's view grows with it,
    /// and after a WRITE of its page cache (`cache`: FUSE_WRITE_CACHE) the host file gets back
    /// the mtime the guest set last, if it set one.
    pub fn after_write(&self, fh: u64, end: u64, cache: bool) -> io::Result<()> {
        if !self.writeback.on() {
            return Ok(());
        }
        let open = self.handles.get(fh)?;
        let Some(state) = self.inodes.guest(open.nodeid) else {
            return Ok(());
        };
        let mut guest = lock(&state.guest);
        if let Some(view) = guest.view.as_mut() {
            view.size = view.size.max(end);
        }
        match guest.mtime {
            Some(mtime) if cache => {
                let omit = libc::timespec {
                    tv_sec: 0,
                    tv_nsec: libc::UTIME_OMIT,
                };
                sys::fd::futimens(open.file.as_fd(), &[omit, mtime])
            }
            _ => Ok(()),
        }
    }

    /// Whether a guest user who does not own a file may still set its explicit mtime: under
    /// writeback the guest keeps mtime itself and flushes it on close and fsync as an explicit
    /// FATTR_MTIME | FATTR_CTIME through a writable handle; Linux lets only the owner set an
    /// explicit time, so for a guest user writing a file it does not own the flush (and its
    /// close(2) or fsync(2)) would fail with EPERM. Such a time-only change through a handle
    /// opened for writing is allowed: the caller may write the file (the guest checked the
    /// open), and a local file system updates mtime on every write too.
    pub(super) fn writer_may_flush_mtime(
        &self,
        file: Option<&OpenFile>,
        valid: u32,
    ) -> io::Result<bool> {
        let flush = valid & !(FATTR_MTIME | FATTR_CTIME | FATTR_FH) == 0;
        match file {
            Some(f) if flush && self.writeback.on() => {
                Ok(sys::fd::status_flags(f.file.as_fd())? & libc::O_ACCMODE != libc::O_RDONLY)
            }
            _ => Ok(false),
        }
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
