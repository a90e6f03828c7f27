//! Dirty-page logging of the daemon's writes to guest memory, for live migration
//! (`VHOST_USER_PROTOCOL_F_LOG_SHMFD`).
//!
//! While a migration runs, the frontend shares a bitmap (SET_LOG_BASE: one bit per 4 KiB page of
//! guest-physical memory) and re-sends every page whose bit the backend sets. Every write the
//! daemon makes to guest memory (FUSE replies through fuse-backend-rs's `Writer`, used-ring
//! entries and the avail event through virtio-queue) goes through vm-memory, which calls the
//! region's [`Bitmap::mark_dirty`] after the write: [`DirtyLog`] is that bitmap.
//!
//! vhost-user-backend's own `BitmapMmapRegion` takes a shared `RwLock` (and clones an `Arc` for
//! every slice) on every write, logging or not. Here a write when nothing is logged costs one
//! relaxed-cost atomic load of a flag that only changes when a migration starts or ends, and a
//! slice borrows its region's log instead of cloning a handle.

use std::fmt;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use vhost_user_backend::bitmap::{AtomicBitmapMmap, BitmapReplace, MemRegionBitmap, MmapLogReg};
use vm_memory::bitmap::{Bitmap, BitmapSlice, WithBitmapSlice};
use vm_memory::mmap::NewBitmap;
use vm_memory::{Address, GuestMemoryRegion};

/// Bytes of guest memory per bit of the frontend's log (`VHOST_LOG_PAGE`).
const LOG_PAGE: usize = 4096;

/// One guest memory region's dirty-page log (the region's `Bitmap`, replaced by
/// vhost-user-backend on SET_LOG_BASE through [`BitmapReplace`]). Cheap to clone: clones share
/// the log.
#[derive(Default, Clone)]
pub struct DirtyLog {
    log: Arc<RegionLog>,
}

/// The log state a region's bitmap and all its slices share.
#[derive(Default)]
struct RegionLog {
    /// Whether `area` holds a log. Invariant: `true` only while `area` is `Some`; it is set
    /// (Release) after `area` is filled and cleared before `area` is emptied, both under the
    /// write lock, so a writer that sees it clear has nothing to log and never takes the lock.
    /// The frontend starts logging with SET_LOG_BASE, whose reply follows the store: every write
    /// the daemon makes after the frontend saw the reply sees the flag set.
    logging: AtomicBool,
    area: RwLock<Option<LogArea>>,
}

impl DirtyLog {
    /// Stops logging this region's writes (the frontend acked features without
    /// `VHOST_F_LOG_ALL`: no migration runs) and drops its mapping of the log.
    pub fn stop(&self) {
        let mut area = crate::sync::write(&self.log.area);
        self.log.logging.store(false, Ordering::Release);
        *area = None;
    }

    fn slice(&self, base: usize) -> LogSlice<'_> {
        LogSlice {
            log: &self.log,
            base,
        }
    }
}

impl fmt::Debug for DirtyLog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.slice(0).fmt(f)
    }
}

impl<'a> WithBitmapSlice<'a> for DirtyLog {
    type S = LogSlice<'a>;
}

impl Bitmap for DirtyLog {
    fn mark_dirty(&self, offset: usize, len: usize) {
        self.slice(0).mark_dirty(offset, len);
    }

    fn dirty_at(&self, offset: usize) -> bool {
        self.slice(0).dirty_at(offset)
    }

    fn slice_at(&self, offset: usize) -> LogSlice<'_> {
        self.slice(offset)
    }
}

impl NewBitmap for DirtyLog {
    fn with_len(_len: usize) -> Self {
        DirtyLog::default()
    }
}

impl BitmapReplace for DirtyLog {
    type InnerBitmap = LogArea;

    fn replace(&self, area: LogArea) {
        let mut slot = crate::sync::write(&self.log.area);
        *slot = Some(area);
        self.log.logging.store(true, Ordering::Release);
    }
}

/// A part of a region's log starting `base` bytes into the region (what vm-memory hands to a
/// `VolatileSlice`); borrows the region's log.
#[derive(Clone, Copy)]
pub struct LogSlice<'a> {
    log: &'a RegionLog,
    base: usize,
}

impl LogSlice<'_> {
    /// Runs `f` on the log area, if the region is being logged.
    fn with_area<T>(&self, f: impl FnOnce(&LogArea) -> T) -> Option<T> {
        if !self.log.logging.load(Ordering::Acquire) {
            return None;
        }
        crate::sync::read(&self.log.area).as_ref().map(f)
    }
}

impl fmt::Debug for LogSlice<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LogSlice")
            .field("logging", &self.log.logging.load(Ordering::Relaxed))
            .field("base", &self.base)
            .finish()
    }
}

impl<'a> WithBitmapSlice<'_> for LogSlice<'a> {
    type S = LogSlice<'a>;
}

impl BitmapSlice for LogSlice<'_> {}

impl Bitmap for LogSlice<'_> {
    fn mark_dirty(&self, offset: usize, len: usize) {
        if len == 0 {
            return;
        }
        let Some(start) = self.base.checked_add(offset) else {
            return;
        };
        self.with_area(|area| area.mark(start, len));
    }

    fn dirty_at(&self, offset: usize) -> bool {
        self.base
            .checked_add(offset)
            .and_then(|at| self.with_area(|area| area.dirty_at(at)))
            .unwrap_or(false)
    }

    fn slice_at(&self, offset: usize) -> Self {
        LogSlice {
            log: self.log,
            base: self.base.saturating_add(offset),
        }
    }
}

/// The frontend's log as seen from one region: the shared mapping and the region's
/// guest-physical addresses. Invariant: the bit of every page of `start ..= end` lies inside
/// `mem` (checked when made, by vhost-user-backend's own bounds check).
pub struct LogArea {
    mem: Arc<MmapLogReg>,
    /// Guest-physical address of the region's first byte.
    start: usize,
    /// Guest-physical address of its last byte.
    end: usize,
}

impl MemRegionBitmap for LogArea {
    fn new<R: GuestMemoryRegion>(region: &R, mem: Arc<MmapLogReg>) -> io::Result<Self> {
        // `AtomicBitmapMmap::new` fails unless the log covers the page of the region's last byte
        // (the mapping's length is private to vhost-user-backend): the bounds `mark` relies on.
        AtomicBitmapMmap::new(region, Arc::clone(&mem))?;
        let invalid = |e| io::Error::new(io::ErrorKind::InvalidData, e);
        let start = usize::try_from(region.start_addr().raw_value()).map_err(invalid)?;
        let len = usize::try_from(region.len()).map_err(invalid)?;
        // Not empty and not wrapping: checked by `AtomicBitmapMmap::new` too.
        let end = start
            .checked_add(len.saturating_sub(1))
            .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidData))?;
        Ok(LogArea { mem, start, end })
    }
}

impl LogArea {
    /// Sets the bits of the pages that bytes `offset .. offset + len` of the region (`len > 0`)
    /// touch; bytes past the region's end are ignored.
    fn mark(&self, offset: usize, len: usize) {
        let Some(first) = self.start.checked_add(offset).filter(|a| *a <= self.end) else {
            return;
        };
        let last = first.saturating_add(len - 1).min(self.end);
        for page in first / LOG_PAGE..=last / LOG_PAGE {
            self.mem[page / 8].fetch_or(1 << (page % 8), Ordering::Relaxed);
        }
    }

    /// Whether the page of byte `offset` of the region is marked.
    fn dirty_at(&self, offset: usize) -> bool {
        match self.start.checked_add(offset).filter(|a| *a <= self.end) {
            Some(at) => {
                let page = at / LOG_PAGE;
                self.mem[page / 8].load(Ordering::Relaxed) & (1 << (page % 8)) != 0
            }
            None => false,
        }
    }
}
