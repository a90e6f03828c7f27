//! A split virtqueue written by hand into guest memory, for driving `FuseServer::handle_chain`
//! directly: descriptor tables, a one-entry available ring and a fresh `Queue` over them. Shared
//! by the dispatcher unit tests (`src/fuse_server/tests.rs`) and the fuzz harness
//! (`fuzz/harness.rs`, by `#[path]`), so it uses nothing but vm-memory and virtio-queue.
#![allow(dead_code)]

use virtio_queue::{Queue, QueueT};
use vm_memory::{Bytes, GuestAddress, GuestMemory};

/// Descriptor flag: the chain continues with `next`.
pub const VRING_DESC_F_NEXT: u16 = 1;
/// Descriptor flag: the buffer is device-writable.
pub const VRING_DESC_F_WRITE: u16 = 2;
/// Descriptor flag: the buffer holds an indirect descriptor table.
pub const VRING_DESC_F_INDIRECT: u16 = 4;
pub const QUEUE_SIZE: u16 = 16;
/// Where the descriptor table, the available ring and the used ring live.
pub const DESC_TABLE: u64 = 0;
pub const AVAIL_RING: u64 = 0x1000;
pub const USED_RING: u64 = 0x2000;

/// One descriptor before it is written to a table.
#[derive(Clone, Copy, Debug)]
pub struct Desc {
    pub addr: u64,
    pub len: u32,
    /// WRITE and INDIRECT as wanted; [`write_table`] adds NEXT.
    pub flags: u16,
    /// `Some(n)`: a corrupted `next` (with NEXT set even on the last descriptor).
    pub next: Option<u16>,
    /// The chain ends here (NEXT cleared) even if more descriptors follow.
    pub stop: bool,
}

impl Desc {
    pub fn new(addr: u64, len: u32, flags: u16) -> Desc {
        Desc {
            addr,
            len,
            flags,
            next: None,
            stop: false,
        }
    }

    /// A device-readable buffer.
    pub fn readable(addr: u64, len: u32) -> Desc {
        Desc::new(addr, len, 0)
    }

    /// A device-writable buffer.
    pub fn writable(addr: u64, len: u32) -> Desc {
        Desc::new(addr, len, VRING_DESC_F_WRITE)
    }
}

/// Writes `descs` as one chain into the table at `table`, from slot 0 on: each one linked to
/// the next slot, but for the last one and [`Desc::stop`]; [`Desc::next`] overrides.
pub fn write_table<M: GuestMemory>(mem: &M, table: u64, descs: &[Desc]) {
    for (i, d) in descs.iter().enumerate() {
        let at = table + 16 * i as u64;
        let mut flags = d.flags;
        let mut next = i as u16 + 1;
        if i + 1 < descs.len() && !d.stop {
            flags |= VRING_DESC_F_NEXT;
        }
        if let Some(n) = d.next {
            flags |= VRING_DESC_F_NEXT;
            next = n;
        }
        mem.write_obj(d.addr.to_le(), GuestAddress(at)).unwrap();
        mem.write_obj(d.len.to_le(), GuestAddress(at + 8)).unwrap();
        mem.write_obj(flags.to_le(), GuestAddress(at + 12)).unwrap();
        mem.write_obj(next.to_le(), GuestAddress(at + 14)).unwrap();
    }
}

/// Makes slot 0 of the descriptor table the only available entry of a fresh, ready queue.
pub fn queue<M: GuestMemory>(mem: &M) -> Queue {
    mem.write_obj(0u16, GuestAddress(AVAIL_RING)).unwrap(); // flags
    mem.write_obj(1u16.to_le(), GuestAddress(AVAIL_RING + 2))
        .unwrap(); // idx
    mem.write_obj(0u16, GuestAddress(AVAIL_RING + 4)).unwrap(); // ring[0] = head 0
    let mut q = Queue::new(QUEUE_SIZE).unwrap();
    q.set_size(QUEUE_SIZE);
    q.try_set_desc_table_address(GuestAddress(DESC_TABLE))
        .unwrap();
    q.try_set_avail_ring_address(GuestAddress(AVAIL_RING))
        .unwrap();
    q.try_set_used_ring_address(GuestAddress(USED_RING))
        .unwrap();
    q.set_ready(true);
    q
}

/// Writes `descs` as one chain at the head of the descriptor table and makes it the only
/// available entry of a fresh queue.
pub fn publish<M: GuestMemory>(mem: &M, descs: &[Desc]) -> Queue {
    write_table(mem, DESC_TABLE, descs);
    queue(mem)
}
