//! What a queue thread does to a ring, under the vring's lock, always through the backend's
//! checked memory map (never the vring's own view of the memory, see `Inner::mem`); what a
//! failed kick leaves; the exit events vhost-user-backend leaks.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};

use virtio_queue::QueueT;

use super::used_ring::{wants_notification, UsedRing};
use super::{GuestMemory, Vring, VringState};

/// Chains the guest made available and the device has not popped yet (none while the queue is
/// not ready, as virtio-queue's pop sees it). A ring that cannot be
/// read, or an avail index more than the queue's size ahead, is an error: virtio-queue's pop then
/// returns `None` without moving on, while the index still says chains wait, and a drain that
/// took that for an empty queue would spin on it forever.
pub(super) fn waiting<M: vm_memory::GuestMemory>(
    q: &virtio_queue::Queue,
    mem: &M,
) -> io::Result<u16> {
    // A stopped queue (GET_VRING_BASE) is served again once restarted: nothing waits meanwhile.
    if !q.ready() || q.avail_ring() == 0 {
        return Ok(0);
    }
    let avail = q
        .avail_idx(mem, Ordering::Acquire)
        .map_err(|e| io::Error::other(format!("the guest's avail index cannot be read: {e}")))?;
    let n = avail.0.wrapping_sub(q.next_avail());
    if n > q.size() {
        return Err(io::Error::other(format!(
            "the guest's avail index {} is {n} entries ahead of the device's {}, in a queue of {}",
            avail.0,
            q.next_avail(),
            q.size()
        )));
    }
    Ok(n)
}

/// Puts a served chain in the used ring, `ring` (resolved again here if the frontend has
/// moved or resized it since); `false` if it was dropped. GET_VRING_BASE (device reset, VM
/// stop) waits for the requests in flight ([`Vring`]); one that completes after it gave up
/// waiting is dropped: the ring may already be someone else's memory.
pub(super) fn add_used<'m>(
    vring: &Vring,
    state: &mut VringState,
    mem: &'m GuestMemory,
    ring: &mut Option<UsedRing<'m, GuestMemory>>,
    head: u16,
    used: u32,
) -> io::Result<bool> {
    if !vring.takes_completions(state) {
        log::error!("request completed after its queue was stopped: reply dropped");
        return Ok(false);
    }
    let q = state.get_queue_mut();
    let ring = match ring {
        Some(r) if r.is_of(q) => r,
        _ => ring.insert(UsedRing::resolve(mem, q)),
    };
    ring.add(q, mem, head, used).map_err(io::Error::other)?;
    Ok(true)
}

/// Notifies the guest of the used entries added since the last notification, if it wants to be
/// (with EVENT_IDX, only when its `used_event` lies among them).
pub(super) fn notify(
    vring: &Vring,
    state: &mut VringState,
    mem: &GuestMemory,
    event_idx: bool,
) -> io::Result<()> {
    if !event_idx
        || wants_notification(state.get_queue(), mem, vring.checked()).map_err(io::Error::other)?
    {
        state.signal_used_queue()?;
    }
    Ok(())
}

/// After a kick: an error (a broken ring, no memory table) is logged once until the queue works
/// again, and `Ok`: an `Err` would end the queue's thread, silently, and the queue with it,
/// even after the guest resets it; the next kick tries again.
pub(super) fn report(broken: &AtomicBool, queue: usize, served: io::Result<()>) -> io::Result<()> {
    match served {
        Ok(()) if broken.load(Ordering::Relaxed) => broken.store(false, Ordering::Relaxed),
        Ok(()) => {}
        Err(e) if !broken.swap(true, Ordering::Relaxed) => {
            log::error!("queue {queue}: {e}: not served until the guest fixes or resets it");
        }
        Err(_) => {}
    }
    Ok(())
}
