//! The FUSE session as a live migration (or an in-place upgrade) moves it: the negotiated INIT
//! parameters, then the filesystem's state, in one checked stream
//! (`passthrough::migration::codec`). The caller makes sure no request runs: the frontend
//! stopped the queues (source) or has not started them (destination).

use std::io::{self, Read, Write};
use std::os::fd::OwnedFd;
use std::sync::atomic::Ordering;
use std::time::Instant;

use super::FuseServer;
use crate::passthrough::migration::{read_envelope, Decoder, Encoder, HandedFd};

/// The section tag of the INIT parameters.
const TAG: &[u8; 4] = b"FUSE";

impl FuseServer {
    /// Writes the session's state to `w`; returns its size in bytes. The session goes on
    /// unchanged (a failed migration resumes here).
    pub fn save_state(&self, w: &mut dyn Write) -> io::Result<usize> {
        self.save_state_with_fds(w, None)
    }

    /// [`Self::save_state`] for an in-place upgrade: with `fds`, every inode and open file is
    /// handed over as an fd pushed there, which the stream names by number (the new process
    /// gets them with it: nothing is looked up again).
    pub fn save_state_with_fds(
        &self,
        w: &mut dyn Write,
        fds: Option<&mut Vec<HandedFd>>,
    ) -> io::Result<usize> {
        let start = Instant::now();
        let mut enc = Encoder::default();
        enc.tag(TAG);
        enc.u8(u8::from(self.initialized.load(Ordering::Acquire)));
        enc.u64(self.negotiated.load(Ordering::Acquire));
        let saved = self.fs.save_state(&mut enc, fds)?;
        let n = enc.finish(w)?;
        log::info!(
            "migration: saved {} inodes ({} without a location) and {} open files, {n} bytes, \
             in {:?}",
            saved.inodes,
            saved.invalid,
            saved.handles,
            start.elapsed()
        );
        Ok(n)
    }

    /// Reads a state that [`Self::save_state`] wrote from `r` (to EOF) and installs it, in
    /// place of whatever this session held; on any error nothing changes.
    pub fn load_state(&self, r: &mut dyn Read) -> io::Result<()> {
        self.load_state_with_fds(r, Vec::new())
    }

    /// [`Self::load_state`] of a stream [`Self::save_state_with_fds`] wrote, with its `fds` in
    /// order (those the state does not take are closed).
    pub fn load_state_with_fds(&self, r: &mut dyn Read, fds: Vec<OwnedFd>) -> io::Result<()> {
        let start = Instant::now();
        let body = read_envelope(r)?;
        let mut dec = Decoder::new(&body);
        dec.tag(TAG)?;
        let initialized = match dec.u8()? {
            0 => false,
            1 => true,
            v => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("bad session flag {v}"),
                ))
            }
        };
        let flags = dec.u64()?;
        let loaded = self.fs.prepare_load(&mut dec, fds)?;
        dec.end()?;
        let (lost_inodes, lost_handles) = (loaded.lost_inodes, loaded.lost_handles);
        self.initialized.store(false, Ordering::Release);
        self.fs.install(loaded);
        self.apply(flags);
        self.initialized.store(initialized, Ordering::Release);
        log::info!(
            "migration: loaded {} inodes and {} open files ({lost_inodes} inodes and \
             {lost_handles} open files lost) in {:?}",
            self.fs.inode_count().saturating_sub(1),
            self.fs.open_handle_count(),
            start.elapsed()
        );
        Ok(())
    }
}
