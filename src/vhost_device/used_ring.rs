//! Putting used entries in a split ring, with the used ring resolved in guest memory once per
//! drain, instead of through virtio-queue's `add_used`, which writes each 8-byte entry and the
//! index through vm-memory's generic region walk (an iterator over slices and a `memcpy`); and
//! the EVENT_IDX check of whether the guest wants to hear of them, which virtio-queue can only
//! make for entries its own `add_used` counted.
//!
//! Invariants:
//! - An entry lands as virtio-queue 0.17's `add_used` puts it: the element (head, length,
//!   little-endian) at 4 + 8 × (next used mod size), then the used index, one more, stored with
//!   Release ordering after it; both are marked dirty in the migration log (the slice's bitmap).
//!   A head outside the queue is refused, as there. The queue's `next_used` moves with the
//!   index, so GET_VRING_BASE, SET_VRING_ADDR and the in-place upgrade see what the guest sees.
//! - A used ring that does not lie in one region of guest memory is written by virtio-queue's
//!   `add_used`, as before.
//! - [`wants_notification`] covers every entry added since the last check on the queue, by any
//!   thread: the vring's [`Checked`] holds the next used index of that check, read and written
//!   under the vring lock. Forgotten whenever the frontend moves the used index (`Vring`'s
//!   setters, under the same lock), the first check after that notifies: the range checked is
//!   never shorter than the entries added since the last notification, so none is missed
//!   (a spurious notification is harmless).

use std::num::Wrapping;
use std::sync::atomic::{fence, AtomicU32, Ordering};

use virtio_queue::{Error, Queue, QueueT};
use vm_memory::bitmap::MS;
use vm_memory::{
    Address, Bytes, GuestAddress, GuestMemory, GuestMemoryError, VolatileMemory, VolatileSlice,
};

/// Bytes before the used ring's elements: flags and index.
const HEADER: usize = 4;

/// Bytes of one used element: the chain's head and the bytes written, as two little-endian u32s.
const ELEM: usize = 8;

/// Bytes before the avail ring's entries: flags and index.
const AVAIL_HEADER: u64 = 4;

/// The next used index of a queue's last notification check, or [`Checked::NONE`] since the
/// frontend last moved the used index (the next check then notifies). Accessed under the
/// vring lock only.
#[derive(Debug)]
pub struct Checked(AtomicU32);

impl Checked {
    const NONE: u32 = u32::MAX;

    pub(super) fn new() -> Checked {
        Checked(AtomicU32::new(Checked::NONE))
    }

    /// The frontend moved the used index: the next check notifies.
    pub(super) fn forget(&self) {
        self.0.store(Checked::NONE, Ordering::Relaxed);
    }
}

/// The used ring of a queue of `size` entries at `addr`: mapped once (`mapped`), or written
/// through virtio-queue where it does not lie in one region.
pub(super) struct UsedRing<'a, M: GuestMemory + 'a> {
    addr: u64,
    size: u16,
    mapped: Option<VolatileSlice<'a, MS<'a, M>>>,
}

impl<'a, M: GuestMemory> UsedRing<'a, M> {
    /// The used ring `q` has now, in `mem`.
    pub(super) fn resolve(mem: &'a M, q: &Queue) -> Self {
        let (addr, size) = (q.used_ring(), q.size());
        let mapped = mem
            .get_slice(GuestAddress(addr), HEADER + ELEM * usize::from(size))
            .ok();
        UsedRing { addr, size, mapped }
    }

    /// Whether this is still `q`'s used ring (the frontend may move or resize it).
    pub(super) fn is_of(&self, q: &Queue) -> bool {
        (self.addr, self.size) == (q.used_ring(), q.size())
    }

    /// Puts `head`'s chain, `len` bytes written, in the used ring of `q` (the ring this was
    /// resolved for, see [`UsedRing::is_of`]).
    pub(super) fn add(&self, q: &mut Queue, mem: &M, head: u16, len: u32) -> Result<(), Error> {
        let Some(slice) = &self.mapped else {
            return q.add_used(mem, head, len);
        };
        if head >= self.size {
            return Err(Error::InvalidDescriptorIndex);
        }
        let next = Wrapping(q.next_used());
        let at = HEADER + ELEM * usize::from(next.0 % self.size);
        let elem = (u64::from(len) << 32 | u64::from(head)).to_le();
        slice.get_ref::<u64>(at).map_err(memory_error)?.store(elem);
        let next = next + Wrapping(1);
        q.set_next_used(next.0);
        slice
            .store(next.0.to_le(), 2, Ordering::Release)
            .map_err(memory_error)
    }
}

/// A slice access that failed, as virtio-queue reports a guest memory error.
fn memory_error(e: vm_memory::VolatileMemoryError) -> Error {
    Error::GuestMemory(GuestMemoryError::from(e))
}

/// With EVENT_IDX: whether the guest asked to hear of one of the entries put in `q`'s used ring
/// since the last check (its `used_event` among them), as virtio-queue's `needs_notification`
/// decides for the entries its `add_used` counted. Call under the vring lock.
pub(super) fn wants_notification<M: GuestMemory>(
    q: &Queue,
    mem: &M,
    checked: &Checked,
) -> Result<bool, Error> {
    let used = Wrapping(q.next_used());
    // The used entries and index are written before `used_event` is read.
    fence(Ordering::SeqCst);
    let at = GuestAddress(q.avail_ring())
        .checked_add(AVAIL_HEADER + 2 * u64::from(q.size()))
        .ok_or(Error::AddressOverflow)?;
    let used_event = Wrapping(u16::from_le(
        mem.load(at, Ordering::Relaxed)
            .map_err(Error::GuestMemory)?,
    ));
    let last = checked.0.swap(u32::from(used.0), Ordering::Relaxed);
    if last == Checked::NONE {
        return Ok(true);
    }
    let old = Wrapping(last as u16);
    Ok(used - used_event - Wrapping(1) < used - old)
}

#[cfg(test)]
#[path = "tests_used_ring.rs"]
mod tests;
