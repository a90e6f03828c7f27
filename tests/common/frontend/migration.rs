//! Live migration as QEMU drives it over vhost-user: the source's rings stopped
//! (GET_VRING_BASE), its state saved through a pipe (SET_DEVICE_STATE_FD save, read to EOF,
//! CHECK_DEVICE_STATE); the destination loads it (SET_DEVICE_STATE_FD load, written and closed,
//! CHECK_DEVICE_STATE) before its rings start at the saved avail indices over the same guest
//! memory.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use vhost::vhost_user::message::{VhostTransferStateDirection, VhostTransferStatePhase};
use vhost::vhost_user::{Frontend, VhostUserFrontend};
use vhost::VhostBackend;

use super::{vhost_err, GuestMemory, TestGuest, VirtQueue};

/// What the source handed over: the device state and each ring's next avail index.
#[derive(Clone, Debug)]
pub struct SavedState {
    pub bytes: Vec<u8>,
    pub bases: Vec<u16>,
    /// From SET_DEVICE_STATE_FD to CHECK_DEVICE_STATE's answer.
    pub took: Duration,
}

/// A pipe: (read end, write end).
fn pipe() -> io::Result<(File, File)> {
    let mut fds = [0; 2];
    // SAFETY: a writable array of two fds.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: two fresh fds, owned from here on.
    Ok(unsafe { (File::from_raw_fd(fds[0]), File::from_raw_fd(fds[1])) })
}

/// Sends SET_DEVICE_STATE_FD(load), writes `bytes` into the pipe, closes it and returns what
/// CHECK_DEVICE_STATE answers.
fn load(fe: &Frontend, bytes: &[u8]) -> io::Result<()> {
    let (reader, mut writer) = pipe()?;
    fe.set_device_state_fd(
        VhostTransferStateDirection::LOAD,
        VhostTransferStatePhase::STOPPED,
        OwnedFd::from(reader),
    )
    .map_err(|e| vhost_err("SET_DEVICE_STATE_FD(load)", e))?;
    let written = writer.write_all(bytes);
    drop(writer);
    let checked = fe
        .check_device_state()
        .map_err(|e| vhost_err("CHECK_DEVICE_STATE(load)", e));
    written.and(checked)
}

/// Kicks every queue once, as QEMU's fresh host notifiers are (created signalled) when it
/// starts a vhost device: requests the guest added without kicking (it was told not to by an
/// `avail_event` the stopped device wrote last) are seen.
fn kick_all(queues: &[&VirtQueue]) -> io::Result<()> {
    for q in queues {
        q.kick_fd().write(1)?;
    }
    Ok(())
}

impl TestGuest {
    /// Stops every ring and saves the daemon's state. The daemon keeps everything open; it
    /// serves again after [`TestGuest::resume`] (a failed migration).
    pub fn save_state(&self) -> io::Result<SavedState> {
        let fe = self.frontend();
        let mut bases = Vec::with_capacity(self.queues.len());
        for i in 0..self.queues.len() {
            let base = fe
                .get_vring_base(i)
                .map_err(|e| vhost_err("GET_VRING_BASE", e))?;
            bases.push(base as u16);
        }
        let start = Instant::now();
        let (mut reader, writer) = pipe()?;
        fe.set_device_state_fd(
            VhostTransferStateDirection::SAVE,
            VhostTransferStatePhase::STOPPED,
            OwnedFd::from(writer),
        )
        .map_err(|e| vhost_err("SET_DEVICE_STATE_FD(save)", e))?;
        let mut bytes = Vec::new();
        let read = reader.read_to_end(&mut bytes);
        let checked = fe
            .check_device_state()
            .map_err(|e| vhost_err("CHECK_DEVICE_STATE(save)", e));
        read?;
        checked?;
        Ok(SavedState {
            bytes,
            bases,
            took: start.elapsed(),
        })
    }

    /// Starts the rings stopped by [`TestGuest::save_state`] again, as QEMU does when a
    /// migration fails.
    pub fn resume(&self, saved: &SavedState) -> io::Result<()> {
        let queues: Vec<_> = self.queues.iter().map(|q| q.lock().unwrap()).collect();
        let refs: Vec<&VirtQueue> = queues.iter().map(|q| &**q).collect();
        Self::start_rings_of(
            &mut self.frontend(),
            &self.mem,
            &refs,
            &saved.bases,
            self.features,
        )?;
        kick_all(&refs)
    }

    /// Moves the guest to the daemon listening at `socket` (another vhostfs on the same share):
    /// the state loaded there, then the same memory and rings, from the saved indices. On a
    /// load error the destination is dropped (QEMU aborts the migration).
    pub fn migrate(
        guest: Arc<TestGuest>,
        socket: &Path,
        saved: &SavedState,
    ) -> io::Result<TestGuest> {
        let guest = Arc::try_unwrap(guest)
            .map_err(|_| io::Error::other("the guest is still shared: drop its clients first"))?;
        let (mut fe, features, protocol_features) = Self::handshake(socket, &guest.opts)?;
        load(&fe, &saved.bytes)?;
        let queues: Vec<VirtQueue> = guest
            .queues
            .into_iter()
            .map(|q| q.into_inner().unwrap())
            .collect();
        let refs: Vec<&VirtQueue> = queues.iter().collect();
        Self::start_rings_of(&mut fe, &guest.mem, &refs, &saved.bases, features)?;
        kick_all(&refs)?;
        drop(refs);
        Ok(TestGuest {
            frontend: Mutex::new(fe),
            mem: guest.mem,
            queues: queues.into_iter().map(Mutex::new).collect(),
            features,
            protocol_features,
            opts: guest.opts,
        })
    }

    /// A fresh guest (its own memory, like [`TestGuest::connect`]) on the daemon at `socket`
    /// that was first sent `bytes` to load: what CHECK_DEVICE_STATE said, and the guest, to
    /// look at what the daemon holds after a refused load.
    pub fn connect_after_load(
        socket: &Path,
        opts: &super::GuestOptions,
        bytes: &[u8],
    ) -> io::Result<(io::Result<()>, TestGuest)> {
        let (mut fe, features, protocol_features) = Self::handshake(socket, opts)?;
        let loaded = load(&fe, bytes);
        let mem = GuestMemory::new(opts.mem_size)?;
        let event_idx = features & super::VIRTIO_RING_F_EVENT_IDX != 0;
        let mut queues = Vec::with_capacity(1 + opts.request_queues);
        for _ in 0..=opts.request_queues {
            queues.push(VirtQueue::new(&mem, opts.queue_size, event_idx, opts.spin)?);
        }
        let refs: Vec<&VirtQueue> = queues.iter().collect();
        Self::start_rings_of(&mut fe, &mem, &refs, &vec![0; queues.len()], features)?;
        drop(refs);
        Ok((
            loaded,
            TestGuest {
                frontend: Mutex::new(fe),
                mem,
                queues: queues.into_iter().map(Mutex::new).collect(),
                features,
                protocol_features,
                opts: opts.clone(),
            },
        ))
    }

    /// The options it connected with.
    pub fn options(&self) -> &super::GuestOptions {
        &self.opts
    }
}
