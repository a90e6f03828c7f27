//! The descriptor walk ([`super::Walk`]) against virtio-queue's `DescriptorChain` on the same
//! chains: random tables (loops, indirect tables, nested ones, lengths that are no multiple of
//! 16 or overflow 2^32, indices and addresses out of range, tables across a region boundary),
//! descriptor for descriptor.

use virtio_queue::desc::split::Descriptor;
use virtio_queue::{Queue, QueueT};
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

use super::{Table, Walk};
use crate::test_rng::Rng;

type Mem = GuestMemoryMmap<()>;

/// Two adjacent regions: a table that starts in one and ends in the other is read through the
/// memory map, one descriptor at a time.
const REGION: u64 = 0x1_0000;
const QUEUE_SIZE: u16 = 16;
const AVAIL: u64 = 0x8000;
const USED: u64 = 0x9000;

fn memory() -> Mem {
    Mem::from_ranges(&[
        (GuestAddress(0), REGION as usize),
        (GuestAddress(REGION), REGION as usize),
    ])
    .unwrap()
}

fn write_desc(mem: &Mem, at: u64, addr: u64, len: u32, flags: u16, next: u16) {
    mem.write_obj(addr.to_le(), GuestAddress(at)).unwrap();
    mem.write_obj(len.to_le(), GuestAddress(at + 8)).unwrap();
    mem.write_obj(flags.to_le(), GuestAddress(at + 12)).unwrap();
    mem.write_obj(next.to_le(), GuestAddress(at + 14)).unwrap();
}

/// A ready queue whose descriptor table is at `table`, with `head` its only available entry.
fn queue(mem: &Mem, table: u64, head: u16) -> Queue {
    mem.write_obj(0u16, GuestAddress(AVAIL)).unwrap();
    mem.write_obj(1u16.to_le(), GuestAddress(AVAIL + 2))
        .unwrap();
    mem.write_obj(head.to_le(), GuestAddress(AVAIL + 4))
        .unwrap();
    let mut q = Queue::new(QUEUE_SIZE).unwrap();
    q.set_size(QUEUE_SIZE);
    q.try_set_desc_table_address(GuestAddress(table)).unwrap();
    q.try_set_avail_ring_address(GuestAddress(AVAIL)).unwrap();
    q.try_set_used_ring_address(GuestAddress(USED)).unwrap();
    q.set_ready(true);
    q
}

fn fields(d: &Descriptor) -> (u64, u32, u16, u16) {
    (d.addr().0, d.len(), d.flags(), d.next())
}

/// What virtio-queue's iterator and the walk yield for the chain at `head` of the table at
/// `table`: both, as (addr, len, flags, next).
type Yielded = Vec<(u64, u32, u16, u16)>;

fn both(mem: &Mem, table: u64, head: u16) -> (Yielded, Yielded) {
    let mut q = queue(mem, table, head);
    let theirs = q.pop_descriptor_chain(mem).unwrap().map(|d| fields(&d));
    let t = Table::resolve(mem, GuestAddress(table), QUEUE_SIZE);
    let ours = Walk::new(mem, t, head).map(|d| fields(&d));
    (theirs.collect(), ours.collect())
}

/// A random descriptor at `at`: flags from NEXT, WRITE and INDIRECT; `next` mostly in the table;
/// lengths mostly small, some multiples of 16 (indirect tables), some near 2^32.
fn random_desc(rng: &mut Rng, mem: &Mem, at: u64, indirect_tables: &[u64]) {
    // NEXT three times in four: long chains, and loops.
    let flags = rng.below(8) as u16 | u16::from(rng.below(4) != 0);
    let next = rng.below(u64::from(QUEUE_SIZE) + 3) as u16;
    let (addr, len) = if flags & 4 != 0 {
        let table = indirect_tables[rng.below(indirect_tables.len() as u64) as usize];
        let len = match rng.below(4) {
            0 => 16 * rng.below(20) as u32 + rng.below(16) as u32,
            _ => 16 * (1 + rng.below(8) as u32),
        };
        (table, len)
    } else {
        let len = match rng.below(6) {
            0 => u32::MAX - rng.below(100) as u32,
            _ => rng.below(5000) as u32,
        };
        (rng.below(3 * REGION), len)
    };
    write_desc(mem, at, addr, len, flags, next);
}

#[test]
fn a_walk_yields_what_virtio_queue_yields_for_random_chains() {
    let mem = memory();
    let mut rng = Rng(0x5eed_1234_abcd_0001);
    // Queue tables: inside region 0, and across the boundary of the two regions.
    let tables = [0x0u64, REGION - 8 * 16];
    // Indirect tables: in region 0, across the boundary, in region 1, outside guest memory.
    let indirect = [
        0x4000u64,
        REGION - 3 * 16,
        REGION + 0x100,
        2 * REGION + 0x40,
    ];
    let (mut compared, mut long, mut through_indirect) = (0, 0, 0);
    for _ in 0..4000 {
        let table = tables[rng.below(2) as usize];
        for i in 0..u64::from(QUEUE_SIZE) {
            random_desc(&mut rng, &mem, table + 16 * i, &indirect);
        }
        for &t in &indirect[..3] {
            for i in 0..8 {
                random_desc(&mut rng, &mem, t + 16 * i, &indirect);
            }
        }
        let head = rng.below(u64::from(QUEUE_SIZE)) as u16;
        let (theirs, ours) = both(&mem, table, head);
        assert_eq!(ours, theirs, "table {table:#x} head {head}");
        compared += 1;
        long += usize::from(ours.len() >= 8);
        // The head is an indirect descriptor and the walk yielded something: it went through.
        let head_desc = mem.read_obj::<u16>(GuestAddress(table + 16 * u64::from(head) + 12));
        through_indirect += usize::from(head_desc.unwrap() & 4 != 0 && !ours.is_empty());
    }
    // The random tables make long chains (and loops) and chains through indirect tables.
    assert_eq!(compared, 4000);
    assert!(long > 100, "{long} chains of 8 descriptors or more");
    assert!(
        through_indirect > 100,
        "{through_indirect} chains through an indirect table"
    );
}

#[test]
fn a_loop_ends_after_the_tables_size_and_a_nested_indirect_table_ends_the_walk() {
    let mem = memory();
    // Descriptor 0 points at itself: the walk follows it QUEUE_SIZE times, then ends.
    write_desc(&mem, 0, 0x100, 10, 1, 0);
    let (theirs, ours) = both(&mem, 0, 0);
    assert_eq!(ours.len(), usize::from(QUEUE_SIZE));
    assert_eq!(ours, theirs);

    // 0 -> indirect table at 0x4000 (2 entries): its first points to another table.
    write_desc(&mem, 0, 0x4000, 32, 4, 0);
    write_desc(&mem, 0x4000, 0x100, 8, 1, 1);
    write_desc(&mem, 0x4010, 0x4000, 32, 4, 0);
    let (theirs, ours) = both(&mem, 0, 0);
    assert_eq!(ours, vec![(0x100, 8, 1, 1)]);
    assert_eq!(ours, theirs);

    // An indirect table whose length is no multiple of 16 yields nothing.
    write_desc(&mem, 0, 0x4000, 33, 4, 0);
    let (theirs, ours) = both(&mem, 0, 0);
    assert!(ours.is_empty());
    assert_eq!(ours, theirs);
}

#[test]
fn a_moved_table_is_told_from_the_one_resolved() {
    let mem = memory();
    let t = Table::resolve(&mem, GuestAddress(0), QUEUE_SIZE);
    assert!(t.is(GuestAddress(0), QUEUE_SIZE));
    assert!(!t.is(GuestAddress(0x1000), QUEUE_SIZE));
    assert!(!t.is(GuestAddress(0), QUEUE_SIZE / 2));
}
