//! The device as the frontend set it up, kept from the messages it sent, so that a fresh
//! vhost-user-backend handler (in this process after a failed hand-over, or in the next
//! binary) can be brought to the same state by replaying them.
//!
//! Invariants:
//! - [`DeviceSetup::apply`] sees every frontend message, in order, before the backend does;
//!   what it keeps is exactly what replaying needs: the owner, the features, the memory
//!   regions (with their fds) and each vring's size, addresses, base, kick/call/err eventfds
//!   and enable state. Queries change nothing and are not kept.
//! - A message that changes state this model does not keep (dirty logging, a backend request
//!   channel, inflight tracking, resets) makes the set-up unreplayable, with the reason: an
//!   upgrade is then refused and the daemon goes on serving.
//! - The fds kept are the model's own duplicates: the backend's copies are the backend's. Once
//!   the backend knows its vrings (its first kick), the model lets go of them
//!   ([`DeviceSetup::forget_fds`]): it records that an fd was set, and a hand-over fills in
//!   duplicates of the backend's own fds ([`DeviceSetup::fill`]) before it replays or sends
//!   anything (issue 36: an idle daemon holds each fd of the device once, not twice).

use std::io::{self, Write};
use std::os::fd::OwnedFd;

use super::wire::{req, Msg, NEED_REPLY};
use crate::vhost_device::DeviceFds;

/// `VHOST_USER_VRING_NOFD_MASK`: a SET_VRING_KICK/CALL/ERR without an fd.
const NOFD: u64 = 0x100;
/// `VHOST_USER_F_PROTOCOL_FEATURES`, bit 30 of the virtio features.
const PROTOCOL_FEATURES: u64 = 1 << 30;
/// `VHOST_USER_PROTOCOL_F_REPLY_ACK`.
const REPLY_ACK: u64 = 1 << 3;
/// `VHOST_USER_PROTOCOL_F_CONFIGURE_MEM_SLOTS`.
const CONFIGURE_MEM_SLOTS: u64 = 1 << 15;
/// Vrings the model keeps (vhostfs has 9; a frontend's larger index is refused by the handler).
const MAX_VRINGS: usize = 64;
/// Regions one SET_MEM_TABLE carries.
const MEM_TABLE_REGIONS: usize = 8;

/// One guest memory region: `VhostUserMemoryRegion` and its fd.
pub struct Region {
    /// guest_phys_addr, memory_size, userspace_addr, mmap_offset.
    pub layout: [u64; 4],
    pub fd: OwnedFd,
}

/// What the frontend set for one vring.
#[derive(Default)]
pub struct Vring {
    pub num: Option<u32>,
    /// The `VhostUserVringAddr` payload (40 bytes).
    pub addr: Option<Vec<u8>>,
    pub base: Option<u32>,
    /// `Some(None)`: set without an fd.
    pub kick: Option<Option<OwnedFd>>,
    pub call: Option<Option<OwnedFd>>,
    pub err: Option<Option<OwnedFd>>,
    pub enabled: Option<bool>,
    /// Started by a kick fd and not stopped by GET_VRING_BASE since.
    pub started: bool,
    /// Set with an fd that the model does not hold ([`LIVE_KICK`], [`LIVE_CALL`],
    /// [`LIVE_ERR`]): the backend's, filled in by [`DeviceSetup::fill`].
    pub live: u8,
}

/// [`Vring::live`]: the kick fd is the backend's.
pub const LIVE_KICK: u8 = 1;
/// [`Vring::live`]: the call fd is the backend's.
pub const LIVE_CALL: u8 = 2;
/// [`Vring::live`]: the err fd is the backend's.
pub const LIVE_ERR: u8 = 4;

/// The device's set-up, from the frontend's messages.
#[derive(Default)]
pub struct DeviceSetup {
    pub owner: bool,
    pub features: Option<u64>,
    pub protocol_features: Option<u64>,
    pub regions: Vec<Region>,
    pub vrings: Vec<Vring>,
    /// Why the set-up cannot be replayed, if it cannot.
    pub unreplayable: Option<String>,
    /// The fds are the backend's ([`DeviceSetup::forget_fds`]): the memory regions' layouts
    /// are in `live_regions`, and each vring's `live` says which of its fds were set.
    pub live: bool,
    /// In live mode: the memory regions' layouts (their fds are the backend's).
    pub live_regions: Vec<[u64; 4]>,
}

fn dup_all(fds: &[OwnedFd]) -> io::Result<Vec<OwnedFd>> {
    fds.iter().map(OwnedFd::try_clone).collect()
}

fn region_at(payload: &[u8], at: usize) -> Option<[u64; 4]> {
    let mut r = [0u64; 4];
    for (i, v) in r.iter_mut().enumerate() {
        let b = payload.get(at + 8 * i..at + 8 * i + 8)?;
        *v = u64::from_le_bytes(b.try_into().ok()?);
    }
    Some(r)
}

fn dup_event(e: &Option<Option<OwnedFd>>) -> io::Result<Option<Option<OwnedFd>>> {
    e.as_ref()
        .map(|fd| fd.as_ref().map(OwnedFd::try_clone).transpose())
        .transpose()
}

impl DeviceSetup {
    /// Lets go of the fds: from now on the backend's are the only ones, and what was set is
    /// recorded without them (see the module invariants).
    pub fn forget_fds(&mut self) {
        if self.live {
            return;
        }
        self.live = true;
        self.live_regions = self.regions.drain(..).map(|r| r.layout).collect();
        for v in &mut self.vrings {
            let live = &mut v.live;
            for (bit, e) in [
                (LIVE_KICK, &mut v.kick),
                (LIVE_CALL, &mut v.call),
                (LIVE_ERR, &mut v.err),
            ] {
                if let Some(Some(_)) = e {
                    *e = None;
                    *live |= bit;
                }
            }
        }
    }

    /// Fills in duplicates of the backend's fds (`fds`) where the model recorded that one was
    /// set: the model holds its own fds again, to replay or send. All or nothing: on `Err`
    /// the model is as it was.
    pub fn fill(&mut self, mut fds: DeviceFds) -> io::Result<()> {
        if !self.live {
            return Ok(());
        }
        let mut regions = Vec::new();
        for layout in &self.live_regions {
            let i = fds
                .regions
                .iter()
                .position(|(gpa, size, _)| *gpa == layout[0] && *size == layout[1])
                .ok_or_else(|| io::Error::other("a memory region the backend does not map"))?;
            regions.push(Region {
                layout: *layout,
                fd: fds.regions.swap_remove(i).2,
            });
        }
        let bits = [LIVE_KICK, LIVE_CALL, LIVE_ERR];
        let mut events = Vec::new();
        for (i, v) in self.vrings.iter().enumerate() {
            for (n, bit) in bits.into_iter().enumerate() {
                if v.live & bit != 0 {
                    let fd = fds.vrings.get_mut(i).and_then(|f| f[n].take());
                    let fd = fd.ok_or_else(|| {
                        io::Error::other(format!("vring {i}: an fd the backend does not hold"))
                    })?;
                    events.push((i, n, fd));
                }
            }
        }
        for (i, n, fd) in events {
            let v = &mut self.vrings[i];
            *[&mut v.kick, &mut v.call, &mut v.err][n] = Some(Some(fd));
        }
        self.vrings.iter_mut().for_each(|v| v.live = 0);
        self.regions = regions;
        self.live_regions.clear();
        self.live = false;
        Ok(())
    }

    /// `Err` while the fds are the backend's ([`DeviceSetup::forget_fds`]).
    fn holds_fds(&self) -> io::Result<()> {
        match self.live {
            true => Err(io::Error::other(
                "the device set-up's fds were not filled in",
            )),
            false => Ok(()),
        }
    }

    /// Kicks every running vring once: chains the guest added while no process watched the kick
    /// eventfds are served.
    pub fn kick(&self) {
        for v in self.vrings.iter().filter(|v| v.started) {
            if let Some(Some(fd)) = &v.kick {
                if let Ok(fd) = fd.try_clone() {
                    let _ = std::fs::File::from(fd).write_all(&1u64.to_ne_bytes());
                }
            }
        }
    }

    /// A copy with duplicates of every fd (for the state sent to the next process); the
    /// model must hold its fds ([`DeviceSetup::fill`]).
    pub fn try_clone(&self) -> io::Result<DeviceSetup> {
        self.holds_fds()?;
        let regions = self
            .regions
            .iter()
            .map(|r| {
                Ok(Region {
                    layout: r.layout,
                    fd: r.fd.try_clone()?,
                })
            })
            .collect::<io::Result<_>>()?;
        let vrings = self
            .vrings
            .iter()
            .map(|v| {
                Ok(Vring {
                    num: v.num,
                    addr: v.addr.clone(),
                    base: v.base,
                    kick: dup_event(&v.kick)?,
                    call: dup_event(&v.call)?,
                    err: dup_event(&v.err)?,
                    enabled: v.enabled,
                    started: v.started,
                    live: 0,
                })
            })
            .collect::<io::Result<_>>()?;
        Ok(DeviceSetup {
            owner: self.owner,
            features: self.features,
            protocol_features: self.protocol_features,
            regions,
            vrings,
            unreplayable: self.unreplayable.clone(),
            live: false,
            live_regions: Vec::new(),
        })
    }

    /// The record of vring `index`; `None` past [`MAX_VRINGS`] (the handler refuses such an
    /// index, and the model must not grow with what the frontend claims).
    fn vring(&mut self, index: u32) -> Option<&mut Vring> {
        let i = index as usize;
        if i >= MAX_VRINGS {
            return None;
        }
        if self.vrings.len() <= i {
            self.vrings.resize_with(i + 1, Vring::default);
        }
        self.vrings.get_mut(i)
    }

    fn refuse(&mut self, why: &str) {
        if self.unreplayable.is_none() {
            self.unreplayable = Some(why.to_string());
        }
    }

    /// Records what `msg` (from the frontend, about to be forwarded) sets. A malformed message
    /// is left to the backend to refuse; the model only notes it cannot follow.
    pub fn apply(&mut self, msg: &Msg) -> io::Result<()> {
        let p = &msg.payload;
        match msg.request {
            req::SET_OWNER => self.owner = true,
            req::SET_FEATURES => self.features = msg.u64_at(0),
            req::SET_PROTOCOL_FEATURES => self.protocol_features = msg.u64_at(0),
            req::SET_MEM_TABLE => {
                let n = msg.u32_at(0).unwrap_or(0) as usize;
                if msg.fds.len() != n {
                    self.refuse("a memory table whose fds do not match its regions");
                    return Ok(());
                }
                if self.live {
                    self.live_regions = (0..n).filter_map(|i| region_at(p, 8 + 32 * i)).collect();
                    if self.live_regions.len() != n {
                        self.refuse("a short memory table");
                    }
                    return Ok(());
                }
                let fds = dup_all(&msg.fds)?;
                self.regions.clear();
                for (i, fd) in fds.into_iter().enumerate() {
                    match region_at(p, 8 + 32 * i) {
                        Some(layout) => self.regions.push(Region { layout, fd }),
                        None => self.refuse("a short memory table"),
                    }
                }
            }
            req::ADD_MEM_REG => match (region_at(p, 8), msg.fds.first()) {
                (Some(layout), Some(_)) if self.live => self.live_regions.push(layout),
                (Some(layout), Some(fd)) => self.regions.push(Region {
                    layout,
                    fd: fd.try_clone()?,
                }),
                _ => self.refuse("a memory region without its fd"),
            },
            req::REM_MEM_REG => {
                if let Some(layout) = region_at(p, 8) {
                    self.regions.retain(|r| r.layout[..3] != layout[..3]);
                    self.live_regions.retain(|r| r[..3] != layout[..3]);
                }
            }
            req::SET_VRING_NUM | req::SET_VRING_BASE | req::SET_VRING_ENABLE => {
                let (Some(index), Some(num)) = (msg.u32_at(0), msg.u32_at(4)) else {
                    return Ok(());
                };
                let Some(v) = self.vring(index) else {
                    return Ok(());
                };
                match msg.request {
                    req::SET_VRING_NUM => v.num = Some(num),
                    req::SET_VRING_BASE => v.base = Some(num),
                    _ => v.enabled = Some(num != 0),
                }
            }
            req::SET_VRING_ADDR => {
                if let Some(v) = msg.u32_at(0).and_then(|i| self.vring(i)) {
                    v.addr = Some(p.clone());
                }
            }
            req::GET_VRING_BASE => {
                if let Some(v) = msg.u32_at(0).and_then(|i| self.vring(i)) {
                    v.started = false;
                    v.kick = None;
                    v.call = None;
                    v.live &= !(LIVE_KICK | LIVE_CALL);
                }
            }
            req::SET_VRING_KICK | req::SET_VRING_CALL | req::SET_VRING_ERR => {
                let Some(word) = msg.u64_at(0) else {
                    return Ok(());
                };
                let has_fd = word & NOFD == 0 && !msg.fds.is_empty();
                // Live: the backend's copy is the one kept (filled in at a hand-over).
                let fd = match (has_fd, self.live, msg.fds.first()) {
                    (true, false, Some(fd)) => Some(fd.try_clone()?),
                    _ => None,
                };
                let live = self.live && has_fd;
                let Some(v) = self.vring((word & 0xff) as u32) else {
                    return Ok(());
                };
                let bit = match msg.request {
                    req::SET_VRING_KICK => LIVE_KICK,
                    req::SET_VRING_CALL => LIVE_CALL,
                    _ => LIVE_ERR,
                };
                v.live = if live { v.live | bit } else { v.live & !bit };
                let event = if live { None } else { Some(fd) };
                match msg.request {
                    req::SET_VRING_KICK => {
                        v.started = has_fd;
                        v.kick = event;
                    }
                    req::SET_VRING_CALL => v.call = event,
                    _ => v.err = event,
                }
            }
            req::SET_LOG_BASE | req::SET_LOG_FD => {
                self.refuse("dirty-page logging was set up (a live migration)")
            }
            req::SET_BACKEND_REQ_FD => self.refuse("a backend request channel"),
            req::SET_INFLIGHT_FD => self.refuse("inflight I/O tracking"),
            req::RESET_OWNER | req::RESET_DEVICE => self.refuse("a device reset"),
            req::SET_CONFIG => self.refuse("a device configuration write"),
            req::SET_STATUS => self.refuse("a device status write"),
            // Queries, and the one-shot device state transfer of a migration.
            req::GET_FEATURES
            | req::GET_PROTOCOL_FEATURES
            | req::GET_QUEUE_NUM
            | req::GET_CONFIG
            | req::GET_MAX_MEM_SLOTS
            | req::GET_INFLIGHT_FD
            | req::GET_STATUS
            | req::SET_DEVICE_STATE_FD
            | req::CHECK_DEVICE_STATE => {}
            other => self.refuse(&format!("vhost-user request {other}")),
        }
        Ok(())
    }

    /// Whether the backend acknowledges set-up messages (REPLY_ACK negotiated).
    fn acks(&self) -> bool {
        self.features.unwrap_or(0) & PROTOCOL_FEATURES != 0
            && self.protocol_features.unwrap_or(0) & REPLY_ACK != 0
    }

    /// The messages that bring a fresh handler to this set-up: owner, features, memory, then
    /// every vring (`started` ones with their kick fd, so they run). Each one flagged
    /// NEED_REPLY is acknowledged by the backend; the caller checks the acknowledgement.
    pub fn replay(&self) -> io::Result<Vec<Msg>> {
        self.holds_fds()?;
        let mut out = Vec::new();
        if self.owner {
            out.push(Msg::new(req::SET_OWNER, Vec::new(), Vec::new()));
        }
        // The handler derives REPLY_ACK from the features it offered (GET_FEATURES) and those
        // acked: both queries come first, as a frontend sends them.
        out.push(Msg::new(req::GET_FEATURES, Vec::new(), Vec::new()));
        if let Some(p) = self.protocol_features {
            out.push(Msg::new(req::GET_PROTOCOL_FEATURES, Vec::new(), Vec::new()));
            out.push(Msg::new(
                req::SET_PROTOCOL_FEATURES,
                p.to_le_bytes().to_vec(),
                Vec::new(),
            ));
        }
        if let Some(f) = self.features {
            out.push(Msg::new(
                req::SET_FEATURES,
                f.to_le_bytes().to_vec(),
                Vec::new(),
            ));
        }
        let mut acked = Vec::new();
        self.replay_memory(&mut acked)?;
        self.replay_vrings(&mut acked)?;
        if self.acks() {
            for m in &mut acked {
                m.flags |= NEED_REPLY;
            }
        }
        out.extend(acked);
        Ok(out)
    }

    fn replay_memory(&self, out: &mut Vec<Msg>) -> io::Result<()> {
        if self.regions.is_empty() {
            return Ok(());
        }
        let slots = self.protocol_features.unwrap_or(0) & CONFIGURE_MEM_SLOTS != 0;
        if self.regions.len() > MEM_TABLE_REGIONS && !slots {
            return Err(io::Error::other(
                "more memory regions than a memory table holds",
            ));
        }
        if slots && self.regions.len() > MEM_TABLE_REGIONS {
            for r in &self.regions {
                let mut p = vec![0u8; 8];
                r.layout
                    .iter()
                    .for_each(|v| p.extend_from_slice(&v.to_le_bytes()));
                out.push(Msg::new(req::ADD_MEM_REG, p, vec![r.fd.try_clone()?]));
            }
            return Ok(());
        }
        let mut p = (self.regions.len() as u64).to_le_bytes().to_vec();
        for r in &self.regions {
            r.layout
                .iter()
                .for_each(|v| p.extend_from_slice(&v.to_le_bytes()));
        }
        let fds = self
            .regions
            .iter()
            .map(|r| r.fd.try_clone())
            .collect::<io::Result<_>>()?;
        out.push(Msg::new(req::SET_MEM_TABLE, p, fds));
        Ok(())
    }

    /// The vring part of [`DeviceSetup::replay`] alone: what restarts this process's own
    /// handler after a hand-over that did not happen (GET_VRING_BASE stopped its vrings).
    pub fn replay_vrings(&self, out: &mut Vec<Msg>) -> io::Result<()> {
        self.holds_fds()?;
        for (i, v) in self.vrings.iter().enumerate() {
            let i = i as u32;
            let state = |n: u32| [i.to_le_bytes(), n.to_le_bytes()].concat();
            if let Some(n) = v.num {
                out.push(Msg::new(req::SET_VRING_NUM, state(n), Vec::new()));
            }
            if let Some(b) = v.base {
                out.push(Msg::new(req::SET_VRING_BASE, state(b), Vec::new()));
            }
            if let Some(a) = &v.addr {
                if !self.regions.is_empty() {
                    out.push(Msg::new(req::SET_VRING_ADDR, a.clone(), Vec::new()));
                }
            }
            for (request, fd) in [(req::SET_VRING_CALL, &v.call), (req::SET_VRING_ERR, &v.err)] {
                if let Some(fd) = fd {
                    out.push(fd_msg(request, i, fd.as_ref())?);
                }
            }
            if v.started {
                if let Some(Some(kick)) = &v.kick {
                    out.push(fd_msg(req::SET_VRING_KICK, i, Some(kick))?);
                }
            }
            if let Some(e) = v.enabled {
                out.push(Msg::new(req::SET_VRING_ENABLE, state(e as u32), Vec::new()));
            }
        }
        Ok(())
    }

    /// Indexes of the vrings that run (a kick fd, not stopped).
    pub fn started(&self) -> impl Iterator<Item = u32> + '_ {
        self.vrings
            .iter()
            .enumerate()
            .filter(|(_, v)| v.started)
            .map(|(i, _)| i as u32)
    }
}

/// SET_VRING_KICK/CALL/ERR for vring `index`, with a duplicate of `fd` or the no-fd flag.
fn fd_msg(request: u32, index: u32, fd: Option<&OwnedFd>) -> io::Result<Msg> {
    let word = u64::from(index) | if fd.is_none() { NOFD } else { 0 };
    let fds = match fd {
        Some(fd) => vec![fd.try_clone()?],
        None => Vec::new(),
    };
    Ok(Msg::new(request, word.to_le_bytes().to_vec(), fds))
}
