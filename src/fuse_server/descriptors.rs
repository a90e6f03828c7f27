//! Walking a chain's descriptors with the queue's descriptor table resolved in guest memory once
//! per drain, instead of with virtio-queue's `DescriptorChain` iterator, which looks every
//! 16-byte descriptor up through vm-memory's generic region walk (an iterator over slices and a
//! `memcpy` per descriptor).
//!
//! The walk yields what virtio-queue 0.17's iterator yields for the same chain, descriptor for
//! descriptor (`tests`): it follows NEXT at most the table's size times (a loop ends the walk),
//! switches once into an indirect table (whose length must be a multiple of 16, and which may
//! not point to another), and stops at an index outside the table, at a descriptor it cannot
//! read and where the chain's length would pass 2^32 bytes. What a walk that stops early leaves
//! (a short request) is for the FUSE layer to refuse, as before.

use virtio_queue::desc::split::Descriptor;
use vm_memory::bitmap::MS;
use vm_memory::{Address, Bytes, GuestAddress, GuestMemory, VolatileMemory, VolatileSlice};

/// Bytes of one split-ring descriptor.
const DESC: u64 = std::mem::size_of::<Descriptor>() as u64;

/// A descriptor table of `len` descriptors at `addr`: mapped once (`mapped`) or, when it does
/// not lie in one region of guest memory, read through the memory map descriptor by
/// descriptor, as virtio-queue reads it.
pub struct Table<'a, M: GuestMemory + 'a> {
    addr: GuestAddress,
    len: u16,
    mapped: Option<VolatileSlice<'a, MS<'a, M>>>,
}

impl<M: GuestMemory> Clone for Table<'_, M> {
    fn clone(&self) -> Self {
        Table {
            addr: self.addr,
            len: self.len,
            mapped: self.mapped.clone(),
        }
    }
}

impl<'a, M: GuestMemory> Table<'a, M> {
    /// The table of `len` descriptors at `addr` of `mem`.
    pub fn resolve(mem: &'a M, addr: GuestAddress, len: u16) -> Self {
        let mapped = mem.get_slice(addr, (u64::from(len) * DESC) as usize).ok();
        Table { addr, len, mapped }
    }

    /// Whether this is the table of `len` descriptors at `addr`.
    pub fn is(&self, addr: GuestAddress, len: u16) -> bool {
        (self.addr, self.len) == (addr, len)
    }

    /// Descriptor `index` (below `len`), or `None` if it cannot be read.
    fn read(&self, mem: &M, index: u16) -> Option<Descriptor> {
        let offset = u64::from(index) * DESC;
        match &self.mapped {
            Some(slice) => slice
                .get_ref::<Descriptor>(offset as usize)
                .ok()
                .map(|d| d.load()),
            None => mem.read_obj(self.addr.checked_add(offset)?).ok(),
        }
    }
}

/// The descriptors of the chain whose head is `head` in `table`, in chain order.
pub struct Walk<'a, M: GuestMemory + 'a> {
    mem: &'a M,
    table: Table<'a, M>,
    next: u16,
    /// Descriptors the walk may still follow in the current table (its size at the start).
    ttl: u16,
    /// In an indirect table (which may not lead to another).
    indirect: bool,
    /// Bytes of the descriptors yielded so far.
    bytes: u32,
}

impl<M: GuestMemory> Clone for Walk<'_, M> {
    fn clone(&self) -> Self {
        Walk {
            table: self.table.clone(),
            ..*self
        }
    }
}

impl<'a, M: GuestMemory> Walk<'a, M> {
    pub fn new(mem: &'a M, table: Table<'a, M>, head: u16) -> Self {
        let ttl = table.len;
        Walk {
            mem,
            table,
            next: head,
            ttl,
            indirect: false,
            bytes: 0,
        }
    }

    /// Continues in the indirect table `desc` points to; `None` if it may not.
    fn enter_indirect(&mut self, desc: &Descriptor) -> Option<()> {
        if self.indirect || desc.len() % DESC as u32 != 0 {
            return None;
        }
        let len = u16::try_from(desc.len() / DESC as u32).ok()?;
        self.table = Table::resolve(self.mem, desc.addr(), len);
        self.next = 0;
        self.ttl = len;
        self.indirect = true;
        Some(())
    }
}

impl<M: GuestMemory> Iterator for Walk<'_, M> {
    type Item = Descriptor;

    fn next(&mut self) -> Option<Descriptor> {
        loop {
            if self.ttl == 0 || self.next >= self.table.len {
                return None;
            }
            let desc = self.table.read(self.mem, self.next)?;
            if desc.refers_to_indirect_table() {
                self.enter_indirect(&desc)?;
                continue;
            }
            self.bytes = self.bytes.checked_add(desc.len())?;
            if desc.has_next() {
                self.next = desc.next();
                self.ttl -= 1;
            } else {
                self.ttl = 0;
            }
            return Some(desc);
        }
    }
}

#[cfg(test)]
#[path = "tests_descriptors.rs"]
mod tests;
