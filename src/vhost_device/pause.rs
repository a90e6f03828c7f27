//! Pausing the queues for an in-place upgrade: no thread takes a chain while they are
//! paused, and [`VhostFsBackend::pause`] returns once every chain taken is served, so that
//! each vring's used index equals its next available index (what a new handler starts from).

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use super::VhostFsBackend;

/// Counts a thread out of [`VhostFsBackend::drain`] on every way out.
pub(super) struct Draining<'a>(pub(super) &'a AtomicUsize);

impl Drop for Draining<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl VhostFsBackend {
    /// Stops taking chains from the queues and waits (up to `timeout`) until every chain
    /// taken is served, its used entry in the ring and the guest notified: then each vring's
    /// used index equals its next available index, the state a new handler starts from. An
    /// error (a request still running at the timeout) leaves the queues paused: call
    /// [`VhostFsBackend::resume`].
    pub fn pause(&self, timeout: Duration) -> io::Result<()> {
        self.inner.paused.store(true, Ordering::SeqCst);
        let deadline = Instant::now() + timeout;
        while self.inner.draining.load(Ordering::SeqCst) > 0 {
            if Instant::now() > deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("a request still runs after {timeout:?}"),
                ));
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        Ok(())
    }

    /// Takes chains again after [`VhostFsBackend::pause`]; chains the guest added meanwhile
    /// are served at the next kick.
    pub fn resume(&self) {
        self.inner.paused.store(false, Ordering::SeqCst);
    }
}
