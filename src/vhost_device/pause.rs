//! Pausing the queues for an in-place upgrade: no thread takes a chain while they are
//! paused, and [`VhostFsBackend::pause`] returns once every chain taken is served, so that
//! each vring's used index equals its next available index (what a new handler starts from).

use std::io;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::vring::wait_served;
use super::VhostFsBackend;

impl VhostFsBackend {
    /// Stops taking chains from the queues and waits (up to `timeout`) until every chain
    /// taken is served, its used entry in the ring and the guest notified: then each vring's
    /// used index equals its next available index, the state a new handler starts from. An
    /// error (a request still running at the timeout) leaves the queues paused: call
    /// [`VhostFsBackend::resume`].
    pub fn pause(&self, timeout: Duration) -> io::Result<()> {
        self.inner.paused.store(true, Ordering::SeqCst);
        wait_served(&self.inner.gauges, 0..self.inner.vrings.len(), timeout)
    }

    /// Takes chains again after [`VhostFsBackend::pause`]; chains the guest added meanwhile
    /// are served at the next kick.
    pub fn resume(&self) {
        self.inner.paused.store(false, Ordering::SeqCst);
    }
}
