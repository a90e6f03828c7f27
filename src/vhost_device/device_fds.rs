//! The fds of the device as the frontend set it up (each vring's kick, call and err eventfds,
//! each guest memory region's fd), duplicated for an in-place upgrade, so that the upgrade's
//! record of the set-up need not keep copies of its own while the daemon serves (issue 36).
//!
//! The vrings are known from the worker's first kick on: vhost-user-backend hands the backend
//! its vrings only with an event. The upgrade's record keeps its own copies until then, and is
//! told when it may let go of them ([`VhostFsBackend::on_vrings_known`]).

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::sync::atomic::Ordering;

use vm_memory::{GuestAddressSpace, GuestMemory as _, GuestMemoryRegion};

use super::{VhostFsBackend, Vring};

/// Duplicates of the fds the backend holds.
#[derive(Default)]
pub struct DeviceFds {
    /// Per vring index: its kick, call and err fds.
    pub vrings: Vec<[Option<OwnedFd>; 3]>,
    /// Each guest memory region's guest physical address, size and fd.
    pub regions: Vec<(u64, u64, OwnedFd)>,
}

/// Runs once the backend knows its vrings, until it returns `true`.
pub(super) type VringsKnown = Box<dyn Fn() -> bool + Send + Sync>;

impl VhostFsBackend {
    /// Runs `hook` once the backend knows its vrings (at once if it does), and again at later
    /// kicks until it returns `true` (it may find what it needs busy).
    pub fn on_vrings_known(&self, hook: impl Fn() -> bool + Send + Sync + 'static) {
        if self.inner.all_vrings.get().is_some() && hook() {
            return;
        }
        *crate::sync::lock(&self.inner.vrings_known) = Some(Box::new(hook));
        self.inner.hook_armed.store(true, Ordering::Release);
        // Known meanwhile: the worker may have missed the hook.
        if self.inner.all_vrings.get().is_some() {
            self.run_vrings_known();
        }
    }

    /// Called by the worker with every event: the vrings are known from the first on.
    pub(super) fn saw_vrings(&self, vrings: &[Vring]) {
        self.inner.all_vrings.get_or_init(|| vrings.to_vec());
        if self.inner.hook_armed.load(Ordering::Acquire) {
            self.run_vrings_known();
        }
    }

    fn run_vrings_known(&self) {
        let mut hook = crate::sync::lock(&self.inner.vrings_known);
        if hook.as_ref().is_some_and(|h| h()) {
            *hook = None;
            self.inner.hook_armed.store(false, Ordering::Release);
        }
    }

    /// Duplicates of every fd of the device; `Err` before the vrings are known, or without a
    /// memory map whose regions have fds.
    pub fn device_fds(&self) -> io::Result<DeviceFds> {
        let vrings = self
            .inner
            .all_vrings
            .get()
            .ok_or_else(|| io::Error::other("the device's vrings are not known yet"))?;
        let mut fds = DeviceFds {
            vrings: vrings.iter().map(Vring::fds).collect::<io::Result<_>>()?,
            regions: Vec::new(),
        };
        if let Some(mem) = self.memory() {
            for r in mem.memory().iter() {
                let file = r
                    .file_offset()
                    .ok_or_else(|| io::Error::other("a guest memory region without an fd"))?
                    .file();
                // SAFETY: borrowed from the region's file, which the map holds meanwhile.
                let fd =
                    unsafe { BorrowedFd::borrow_raw(file.as_raw_fd()) }.try_clone_to_owned()?;
                fds.regions.push((r.start_addr().0, r.len(), fd));
            }
        }
        Ok(fds)
    }
}
