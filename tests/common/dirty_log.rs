//! The frontend's side of dirty-page logging (what QEMU does while a live migration runs): a
//! memfd log of one bit per 4 KiB guest page handed over with SET_LOG_BASE, read back to see
//! which pages the daemon wrote.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::fs::FileExt;

use vhost::vhost_user::message::{VhostUserProtocolFeatures, VhostUserVirtioFeatures};
use vhost::vhost_user::VhostUserFrontend;
use vhost::{VhostBackend, VhostUserDirtyLogRegion};

use super::frontend::TestGuest;

/// Guest bytes per bit of the log (`VHOST_LOG_PAGE`).
pub const LOG_PAGE: u64 = 4096;

/// A dirty-page log the daemon writes into.
pub struct FrontendLog {
    file: File,
    len: u64,
}

fn vhost_err(what: &str, e: vhost::Error) -> io::Error {
    io::Error::other(format!("vhost-user {what}: {e}"))
}

impl FrontendLog {
    /// Starts logging the way QEMU does when a migration starts: LOG_SHMFD added to the acked
    /// protocol features (QEMU acks it at connection time; this is the same message again),
    /// SET_LOG_BASE with a fresh memfd covering all of guest memory, then SET_FEATURES with
    /// VHOST_F_LOG_ALL. Fails if the daemon does not offer LOG_SHMFD or LOG_ALL.
    pub fn start(guest: &TestGuest) -> io::Result<FrontendLog> {
        let pages = guest.memory().size().div_ceil(LOG_PAGE);
        FrontendLog::start_sized(guest, pages.div_ceil(64) * 8)
    }

    /// [`FrontendLog::start`] with a log of `len` bytes (too small a one must be refused).
    pub fn start_sized(guest: &TestGuest, len: u64) -> io::Result<FrontendLog> {
        let mut fe = guest.frontend();
        let offered = fe
            .get_protocol_features()
            .map_err(|e| vhost_err("GET_PROTOCOL_FEATURES", e))?;
        if !offered.contains(VhostUserProtocolFeatures::LOG_SHMFD) {
            return Err(io::Error::other(format!(
                "the daemon does not offer LOG_SHMFD ({offered:?})"
            )));
        }
        fe.set_protocol_features(guest.protocol_features() | VhostUserProtocolFeatures::LOG_SHMFD)
            .map_err(|e| vhost_err("SET_PROTOCOL_FEATURES", e))?;
        // SAFETY: the name is a valid NUL-terminated string; the returned fd is checked.
        let fd = unsafe { libc::memfd_create(c"vhostfs-test-log".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a freshly created descriptor that nothing else owns.
        let file = unsafe { File::from_raw_fd(fd) };
        file.set_len(len)?;
        let region = VhostUserDirtyLogRegion {
            mmap_size: len,
            mmap_offset: 0,
            mmap_handle: file.as_raw_fd(),
        };
        fe.set_log_base(0, Some(region))
            .map_err(|e| vhost_err("SET_LOG_BASE", e))?;
        let features = fe
            .get_features()
            .map_err(|e| vhost_err("GET_FEATURES", e))?;
        let log_all = VhostUserVirtioFeatures::LOG_ALL.bits();
        if features & log_all == 0 {
            return Err(io::Error::other(
                "the daemon does not offer VHOST_F_LOG_ALL",
            ));
        }
        fe.set_features(guest.features() | log_all)
            .map_err(|e| vhost_err("SET_FEATURES", e))?;
        Ok(FrontendLog { file, len })
    }

    /// Ends logging the way QEMU does when a migration is cancelled: SET_FEATURES without
    /// VHOST_F_LOG_ALL.
    pub fn stop(&self, guest: &TestGuest) -> io::Result<()> {
        guest
            .frontend()
            .set_features(guest.features())
            .map_err(|e| vhost_err("SET_FEATURES", e))
    }

    /// Whether the page holding guest address `gpa` is marked dirty.
    pub fn dirty(&self, gpa: u64) -> io::Result<bool> {
        let page = gpa / LOG_PAGE;
        let mut byte = [0u8];
        self.file.read_exact_at(&mut byte, page / 8)?;
        Ok(byte[0] & (1 << (page % 8)) != 0)
    }

    /// The guest page numbers marked dirty.
    pub fn dirty_pages(&self) -> io::Result<Vec<u64>> {
        let mut bytes = vec![0u8; self.len as usize];
        self.file.read_exact_at(&mut bytes, 0)?;
        Ok((0..self.len * 8)
            .filter(|p| bytes[(p / 8) as usize] & (1 << (p % 8)) != 0)
            .collect())
    }

    /// Clears every bit (QEMU does so as it syncs the log).
    pub fn clear(&self) -> io::Result<()> {
        self.file.write_all_at(&vec![0; self.len as usize], 0)
    }
}
