//! Keeping the writeback guest's view (`policy/writeback.rs`, `state/guest_state.rs`) in step:
//! entry replies, SETATTR and WRITE of regular files while FUSE_WRITEBACK_CACHE is negotiated.

use std::io;
use std::os::fd::AsFd;

use crate::passthrough::filesystem::PassthroughFs;
use crate::passthrough::ops::setattr::{
    FATTR_CTIME, FATTR_FH, FATTR_MTIME, FATTR_MTIME_NOW, FATTR_SIZE,
};
use crate::passthrough::state::guest_state::View;
use crate::passthrough::state::handle_table::OpenFile;
use crate::passthrough::state::inode_table::Inode;
use crate::passthrough::sys;
use crate::sync::lock;

impl PassthroughFs {
    /// At every entry reply (LOOKUP, READDIRPLUS, creates) for `inode`, with the host's `st`:
    /// when the host changed the file behind the guest's back (the Proxmox VE case in
    /// docs/writeback.md) and the guest has it closed, the node gets a new generation. The guest
    /// kernel then sees a stale inode (`fuse_stale_inode()`): it drops its dentry and inode and
    /// instantiates the node afresh, with the host's size and no cached pages.
    pub(in crate::passthrough) fn check_guest_view(&self, inode: &Inode, st: &libc::statx) {
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
    pub(in crate::passthrough) fn after_setattr(
        &self,
        inode: &Inode,
        valid: u32,
        size: u64,
        st: &libc::statx,
    ) {
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
    pub(in crate::passthrough) fn set_times_as_guest(
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
    pub(in crate::passthrough) fn writer_may_flush_mtime(
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
