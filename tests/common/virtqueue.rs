//! A driver-side split virtqueue living in guest memory: descriptor table, available ring and
//! used ring; chains are added, published, kicked through an eventfd, and completions are
//! collected from the used ring, sleeping on the call eventfd. EVENT_IDX-aware.

use std::collections::HashMap;
use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::{fence, AtomicU16, Ordering};
use std::sync::Arc;
use std::thread::Thread;
use std::time::{Duration, Instant};

use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

use super::guest_memory::{GuestBuf, GuestMemory};

/// Descriptor flag: the chain continues with `next`.
pub const VIRTQ_DESC_F_NEXT: u16 = 1;
/// Descriptor flag: the buffer is device-writable.
pub const VIRTQ_DESC_F_WRITE: u16 = 2;
/// Descriptor flag: the buffer holds an indirect descriptor table.
pub const VIRTQ_DESC_F_INDIRECT: u16 = 4;
/// Used ring flag: the device does not need kicks.
const VIRTQ_USED_F_NO_NOTIFY: u16 = 1;

/// How a raw descriptor's `next` field is filled in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// The slot of the following descriptor of the same chain (0 for the last one).
    Auto,
    /// The slot of `descs[i]` of the same chain (for loops and odd orders); `i` must be in range.
    Index(usize),
    /// This exact value (for out-of-range indices).
    Raw(u16),
}

/// One descriptor of a chain submitted with [`VirtQueue::add_chain`]. `flags` is written as
/// given: the caller decides about NEXT, WRITE and INDIRECT.
#[derive(Clone, Copy, Debug)]
pub struct RawDesc {
    pub addr: u64,
    pub len: u32,
    pub flags: u16,
    pub next: Next,
}

impl RawDesc {
    /// The 16-byte in-memory form of a descriptor whose `next` is `next`, e.g. to build an
    /// indirect table in a guest buffer.
    pub fn encode(addr: u64, len: u32, flags: u16, next: u16) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[0..8].copy_from_slice(&addr.to_le_bytes());
        b[8..12].copy_from_slice(&len.to_le_bytes());
        b[12..14].copy_from_slice(&flags.to_le_bytes());
        b[14..16].copy_from_slice(&next.to_le_bytes());
        b
    }
}

/// A chain the device has returned.
pub struct Completion {
    /// Head descriptor index.
    pub head: u16,
    /// Bytes the device reports having written.
    pub len: u32,
    /// The caller's token given to [`VirtQueue::add_chain`].
    pub token: u64,
    /// Guest buffers attached to the chain (freed when dropped).
    pub bufs: Vec<GuestBuf>,
}

struct Inflight {
    slots: Vec<u16>,
    token: u64,
    bufs: Vec<GuestBuf>,
    /// The submitter gave up waiting: drop the completion when it shows up.
    abandoned: bool,
}

/// What threads sharing a queue, each waiting for its own chain, hand each other
/// (`GuestOptions::shared_waits`): completions one collected for another, who sleeps, who polls.
#[derive(Default)]
pub struct Handoff {
    /// Completions collected by one thread for another's chain, by token (heads are reused as
    /// soon as a chain is collected).
    pub done: HashMap<u64, Completion>,
    /// Threads asleep until the chain with this token completes (or they are to poll).
    pub asleep: HashMap<u64, Thread>,
    /// A thread waits on the call eventfd for everyone.
    pub polling: bool,
    /// The token of the next chain.
    pub next_token: u64,
}

/// The driver side of one split virtqueue.
pub struct VirtQueue {
    mem: Arc<GuestMemory>,
    size: u16,
    ring_mem: GuestBuf,
    desc: u64,
    avail: u64,
    used: u64,
    kick: EventFd,
    call: EventFd,
    event_idx: bool,
    /// How long to busy-poll the used ring before sleeping on the call eventfd.
    spin: Duration,
    free: Vec<u16>,
    /// Shadow of avail->idx including entries not yet published.
    avail_idx: u16,
    /// avail->idx as last published to the device.
    published_idx: u16,
    last_used: u16,
    inflight: Vec<Option<Inflight>>,
    pub handoff: Handoff,
}

fn align(x: u64, a: u64) -> u64 {
    x.div_ceil(a) * a
}

impl VirtQueue {
    /// Allocate the rings of a queue of `size` descriptors (a power of two) in guest memory.
    /// Waiting for completions busy-polls for `spin` before sleeping on the call eventfd.
    pub fn new(
        mem: &Arc<GuestMemory>,
        size: u16,
        event_idx: bool,
        spin: Duration,
    ) -> io::Result<VirtQueue> {
        if !size.is_power_of_two() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("queue size {size} is not a power of two"),
            ));
        }
        let n = u64::from(size);
        let desc_len = 16 * n;
        let avail_len = 6 + 2 * n;
        let used_off = align(desc_len + avail_len, 4096);
        let used_len = 6 + 8 * n;
        let ring_mem = mem.alloc((used_off + used_len) as usize + 4096)?;
        let desc = align(ring_mem.addr(), 4096);
        ring_mem.write(0, &vec![0; ring_mem.len()]);
        Ok(VirtQueue {
            mem: Arc::clone(mem),
            size,
            desc,
            avail: desc + desc_len,
            used: desc + used_off,
            ring_mem,
            kick: EventFd::new(EFD_NONBLOCK)?,
            call: EventFd::new(EFD_NONBLOCK)?,
            event_idx,
            spin,
            free: (0..size).rev().collect(),
            avail_idx: 0,
            published_idx: 0,
            last_used: 0,
            inflight: (0..size).map(|_| None).collect(),
            handoff: Handoff::default(),
        })
    }

    pub fn size(&self) -> u16 {
        self.size
    }
    /// Guest addresses of the descriptor table, available ring and used ring.
    pub fn addrs(&self) -> (u64, u64, u64) {
        (self.desc, self.avail, self.used)
    }
    pub fn kick_fd(&self) -> &EventFd {
        &self.kick
    }
    pub fn call_fd(&self) -> &EventFd {
        &self.call
    }
    /// Number of free descriptor slots.
    pub fn free_descs(&self) -> usize {
        self.free.len()
    }
    /// Number of chains submitted and not completed (including abandoned ones).
    pub fn in_flight(&self) -> usize {
        self.inflight.iter().filter(|i| i.is_some()).count()
    }
    /// Guest memory kept alive by this queue.
    pub fn ring_bytes(&self) -> usize {
        self.ring_mem.len()
    }

    fn u16_at(&self, gpa: u64) -> &AtomicU16 {
        // SAFETY: `gpa` lies in this queue's ring memory (2-byte aligned), which outlives `self`.
        unsafe { &*(self.mem.ptr(gpa, 2) as *const AtomicU16) }
    }

    /// Write the descriptors of a chain into free slots and queue its head for publication
    /// (see [`VirtQueue::publish`]). Returns the head slot, or `None` if not enough slots are free.
    pub fn add_chain(&mut self, descs: &[RawDesc], token: u64, bufs: Vec<GuestBuf>) -> Option<u16> {
        if descs.is_empty() || descs.len() > self.free.len() {
            return None;
        }
        let slots: Vec<u16> = (0..descs.len()).map(|_| self.free.pop().unwrap()).collect();
        for (i, d) in descs.iter().enumerate() {
            let next = match d.next {
                Next::Auto => slots.get(i + 1).copied().unwrap_or(0),
                Next::Index(j) => slots[j],
                Next::Raw(v) => v,
            };
            let entry = RawDesc::encode(d.addr, d.len, d.flags, next);
            self.mem.write(self.desc + 16 * u64::from(slots[i]), &entry);
        }
        let head = slots[0];
        let ring_slot = u64::from(self.avail_idx % self.size);
        self.u16_at(self.avail + 4 + 2 * ring_slot)
            .store(head, Ordering::Relaxed);
        self.avail_idx = self.avail_idx.wrapping_add(1);
        self.inflight[head as usize] = Some(Inflight {
            slots,
            token,
            bufs,
            abandoned: false,
        });
        Some(head)
    }

    /// Add a chain of device-readable then device-writable buffers `(guest addr, len, writable)`.
    pub fn add_buffers(
        &mut self,
        bufs: &[(u64, u32, bool)],
        token: u64,
        owned: Vec<GuestBuf>,
    ) -> Option<u16> {
        let descs: Vec<RawDesc> = bufs
            .iter()
            .enumerate()
            .map(|(i, &(addr, len, write))| RawDesc {
                addr,
                len,
                flags: if write { VIRTQ_DESC_F_WRITE } else { 0 }
                    | if i + 1 < bufs.len() {
                        VIRTQ_DESC_F_NEXT
                    } else {
                        0
                    },
                next: Next::Auto,
            })
            .collect();
        self.add_chain(&descs, token, owned)
    }

    /// Make all added chains visible to the device and kick it if it wants a notification.
    pub fn publish(&mut self) -> io::Result<()> {
        let old = self.published_idx;
        let new = self.avail_idx;
        if old == new {
            return Ok(());
        }
        self.u16_at(self.avail + 2).store(new, Ordering::Release);
        self.published_idx = new;
        fence(Ordering::SeqCst);
        let kick = if self.event_idx {
            let event = self
                .u16_at(self.used + 4 + 8 * u64::from(self.size))
                .load(Ordering::Acquire);
            new.wrapping_sub(event).wrapping_sub(1) < new.wrapping_sub(old)
        } else {
            self.u16_at(self.used).load(Ordering::Acquire) & VIRTQ_USED_F_NO_NOTIFY == 0
        };
        if kick {
            self.kick.write(1)?;
        }
        Ok(())
    }

    fn used_idx(&self) -> u16 {
        self.u16_at(self.used + 2).load(Ordering::Acquire)
    }

    /// Take the next used entry, if any. Completions of abandoned chains are skipped.
    pub fn pop_used(&mut self) -> io::Result<Option<Completion>> {
        while self.used_idx() != self.last_used {
            let elem = self.used + 4 + 8 * u64::from(self.last_used % self.size);
            let raw = self.mem.read(elem, 8);
            let id = u32::from_le_bytes(raw[0..4].try_into().unwrap());
            let len = u32::from_le_bytes(raw[4..8].try_into().unwrap());
            self.last_used = self.last_used.wrapping_add(1);
            let entry = usize::try_from(id)
                .ok()
                .and_then(|i| self.inflight.get_mut(i))
                .and_then(Option::take)
                .ok_or_else(|| {
                    io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("device returned head {id}, which is not in flight"),
                    )
                })?;
            self.free.extend(entry.slots.iter().rev());
            if !entry.abandoned {
                return Ok(Some(Completion {
                    head: id as u16,
                    len,
                    token: entry.token,
                    bufs: entry.bufs,
                }));
            }
        }
        Ok(None)
    }

    /// With EVENT_IDX, ask to be notified only when the `n`th completion from now is used.
    pub fn notify_after(&mut self, n: u16) {
        if self.event_idx {
            self.u16_at(self.avail + 4 + 2 * u64::from(self.size))
                .store(self.last_used.wrapping_add(n.max(1) - 1), Ordering::Release);
        }
    }

    /// Ask the device to notify the next completion (EVENT_IDX); true if one is already there,
    /// false if it is safe to sleep on the call eventfd.
    pub fn arm(&mut self) -> bool {
        if self.event_idx {
            self.u16_at(self.avail + 4 + 2 * u64::from(self.size))
                .store(self.last_used, Ordering::Release);
        }
        fence(Ordering::SeqCst);
        self.used_idx() != self.last_used
    }

    /// Wait for the next completion until `deadline`; `Ok(None)` on timeout.
    pub fn wait_used(&mut self, deadline: Instant) -> io::Result<Option<Completion>> {
        loop {
            if let Some(c) = self.pop_used()? {
                return Ok(Some(c));
            }
            if self.arm() {
                continue;
            }
            if !self.spin.is_zero() {
                let spin_until = Instant::now() + self.spin;
                while self.used_idx() == self.last_used && Instant::now() < spin_until {
                    std::hint::spin_loop();
                }
                if self.used_idx() != self.last_used {
                    continue;
                }
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(None);
            }
            let ms = (deadline - now)
                .as_micros()
                .div_ceil(1000)
                .min(i32::MAX as u128) as i32;
            let mut pfd = libc::pollfd {
                fd: self.call.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd for the duration of the call.
            let r = unsafe { libc::poll(&mut pfd, 1, ms) };
            if r < 0 {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            } else if r > 0 {
                // Reset the counter; a spurious empty read (EAGAIN) is harmless.
                let _ = self.call.read();
            }
        }
    }

    /// Mark the chain with `head` as abandoned: its descriptors stay reserved until the device
    /// returns it, and its completion is then dropped.
    pub fn abandon(&mut self, head: u16) {
        if let Some(Some(entry)) = self.inflight.get_mut(head as usize) {
            entry.abandoned = true;
        }
    }
}
