//! The used ring ([`super::UsedRing`]) and the notification check ([`super::wants_notification`])
//! against virtio-queue's `add_used` and `needs_notification`, on the same random sequences of
//! completions, `used_event` moves, checks and used-index moves by the frontend: the same bytes
//! in guest memory, the same next used index, the same errors, and never a notification fewer.

use std::sync::atomic::Ordering;

use virtio_queue::{Queue, QueueT};
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

use super::{wants_notification, Checked, UsedRing};
use crate::test_rng::Rng;

type Mem = GuestMemoryMmap<()>;

/// Two adjacent regions: a used ring that starts in one and ends in the other is written
/// through virtio-queue.
const REGION: u64 = 0x1_0000;
const AVAIL: u64 = 0x100;

fn memory() -> Mem {
    Mem::from_ranges(&[
        (GuestAddress(0), REGION as usize),
        (GuestAddress(REGION), REGION as usize),
    ])
    .unwrap()
}

fn queue(size: u16, used: u64) -> Queue {
    let mut q = Queue::new(size).unwrap();
    q.set_size(size);
    q.try_set_avail_ring_address(GuestAddress(AVAIL)).unwrap();
    q.try_set_used_ring_address(GuestAddress(used)).unwrap();
    q.set_event_idx(true);
    q.set_ready(true);
    q
}

fn set_used_event(mem: &Mem, size: u16, event: u16) {
    let at = GuestAddress(AVAIL + 4 + 2 * u64::from(size));
    mem.store(event.to_le(), at, Ordering::Relaxed).unwrap();
}

fn used_bytes(mem: &Mem, used: u64, size: u16) -> Vec<u8> {
    let mut b = vec![0; 4 + 8 * usize::from(size)];
    mem.read_slice(&mut b, GuestAddress(used)).unwrap();
    b
}

/// One random run on a queue of `size` whose used ring is at `used`; returns (checks,
/// notifications by virtio-queue, notifications by ours).
fn run(rng: &mut Rng, size: u16, used: u64) -> (u32, u32, u32) {
    let (theirs_mem, ours_mem) = (memory(), memory());
    let (mut theirs, mut ours) = (queue(size, used), queue(size, used));
    let checked = Checked::new();
    // Ours notifies at the first check after the frontend moved the used index (and at the
    // very first): the two agree from the check after that on.
    let mut agreed = false;
    let (mut checks, mut theirs_n, mut ours_n) = (0, 0, 0);
    for _ in 0..2_000 {
        match rng.below(100) {
            0..=59 => {
                // A completion; now and then of a head outside the queue.
                let head = if rng.one_in(20) {
                    size + rng.below(4) as u16
                } else {
                    rng.below(u64::from(size)) as u16
                };
                let len = rng.next() as u32;
                let ring = UsedRing::resolve(&ours_mem, &ours);
                assert!(ring.is_of(&ours));
                let a = theirs.add_used(&theirs_mem, head, len);
                let b = ring.add(&mut ours, &ours_mem, head, len);
                assert_eq!(
                    a.is_err(),
                    b.is_err(),
                    "head {head} of {size}: {a:?} / {b:?}"
                );
            }
            60..=79 => {
                // The guest moves `used_event`, mostly near the used index.
                let near = theirs.next_used().wrapping_sub(rng.below(8) as u16);
                let event = if rng.one_in(4) {
                    rng.next() as u16
                } else {
                    near.wrapping_add(rng.below(12) as u16)
                };
                set_used_event(&theirs_mem, size, event);
                set_used_event(&ours_mem, size, event);
            }
            80..=97 => {
                checks += 1;
                let a = theirs.needs_notification(&theirs_mem).unwrap();
                let b = wants_notification(&ours, &ours_mem, &checked).unwrap();
                theirs_n += u32::from(a);
                ours_n += u32::from(b);
                if agreed {
                    assert_eq!(a, b, "check {checks} at used index {}", ours.next_used());
                } else {
                    assert!(b, "the first check after the used index moved notifies");
                    agreed = true;
                }
            }
            _ => {
                // The frontend moves the used index (SET_VRING_ADDR).
                let idx = rng.next() as u16;
                theirs.set_next_used(idx);
                ours.set_next_used(idx);
                checked.forget();
                agreed = false;
            }
        }
        assert_eq!(theirs.next_used(), ours.next_used());
        assert_eq!(
            used_bytes(&theirs_mem, used, size),
            used_bytes(&ours_mem, used, size)
        );
    }
    (checks, theirs_n, ours_n)
}

#[test]
fn the_used_ring_is_written_and_notified_as_virtio_queue_does() {
    let mut rng = Rng::new(0x05ed_717e);
    let (mut checks, mut notified, mut quiet) = (0, 0, 0);
    for round in 0..40 {
        let size = rng.pick(&[1u16, 2, 8, 64, 256]);
        // In one region, or across the boundary (virtio-queue writes that one).
        let used = if round % 4 == 3 {
            REGION - 4 - 8 * u64::from(size) / 2
        } else {
            0x1000 + 8 * rng.below(64)
        };
        let (c, theirs, ours) = run(&mut rng, size, used);
        checks += c;
        notified += theirs;
        quiet += c - ours;
    }
    // The checks went both ways, often.
    assert!(checks > 10_000, "{checks} checks");
    assert!(
        notified > 1_000,
        "{notified} notifications of {checks} checks"
    );
    assert!(quiet > 1_000, "{quiet} checks without a notification");
}

#[test]
fn a_moved_used_ring_is_told_from_the_one_resolved() {
    let mem = memory();
    let mut q = queue(16, 0x1000);
    let ring = UsedRing::resolve(&mem, &q);
    assert!(ring.is_of(&q));
    q.try_set_used_ring_address(GuestAddress(0x2000)).unwrap();
    assert!(!ring.is_of(&q));
    q.try_set_used_ring_address(GuestAddress(0x1000)).unwrap();
    q.set_size(8);
    assert!(!ring.is_of(&q));
}
