//! DEVICE_STATE: the FUSE session saved into, or loaded from, the pipe QEMU hands over (see
//! the module doc of `vhost_device`).

use std::fs::File;
use std::io;
use std::thread::JoinHandle;
use std::time::Duration;

use vhost::vhost_user::message::{VhostTransferStateDirection, VhostTransferStatePhase};

use super::vring::wait_served;
use super::VhostFsBackend;

/// How long a save waits for the requests still running when the queues stopped.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

impl VhostFsBackend {
    /// The transfer thread's work: save into `file` (closed at the end: EOF for QEMU) or load
    /// from it to EOF.
    fn transfer(&self, direction: VhostTransferStateDirection, mut file: File) -> io::Result<()> {
        match direction {
            VhostTransferStateDirection::SAVE => {
                // GET_VRING_BASE waited for each queue's requests already; one that ran past
                // that wait must not change the session while it is saved.
                wait_served(
                    &self.inner.gauges,
                    0..self.inner.vrings.len(),
                    DRAIN_TIMEOUT,
                )?;
                self.inner.server.save_state(&mut file).map(drop)
            }
            VhostTransferStateDirection::LOAD => self.inner.server.load_state(&mut file),
        }
    }

    /// SET_DEVICE_STATE_FD: starts saving or loading the FUSE session through `file` on a
    /// thread (QEMU reads or writes the pipe while the message is answered).
    pub(super) fn start_transfer(
        &self,
        direction: VhostTransferStateDirection,
        phase: VhostTransferStatePhase,
        file: File,
    ) -> io::Result<()> {
        if phase != VhostTransferStatePhase::STOPPED {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "state transfer in a phase other than STOPPED",
            ));
        }
        let mut slot = crate::sync::lock(&self.inner.transfer);
        if slot.as_ref().is_some_and(|t| !t.is_finished()) {
            return Err(io::Error::other("a state transfer is already running"));
        }
        let this = self.clone();
        let thread = std::thread::Builder::new()
            .name("vhostfs-state".into())
            .spawn(move || this.transfer(direction, file))?;
        *slot = Some(thread);
        Ok(())
    }

    /// CHECK_DEVICE_STATE: waits for the transfer thread and returns its result (also logged:
    /// QEMU learns only that it failed).
    pub(super) fn transfer_result(&self) -> io::Result<()> {
        let thread = crate::sync::lock(&self.inner.transfer).take();
        let result = match thread.map(JoinHandle::join) {
            None => Err(io::Error::other("no state transfer was started")),
            Some(Ok(result)) => result,
            Some(Err(_)) => Err(io::Error::other("the state transfer thread panicked")),
        };
        if let Err(e) = &result {
            log::error!("migration: state transfer failed: {e}");
        }
        result
    }
}
