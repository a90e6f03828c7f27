//! Guest memory for the test guest: one memfd-backed region mapped at guest physical address 0
//! (shared with the daemon through SET_MEM_TABLE), and a first-fit allocator of guest buffers.

use std::fs::File;
use std::io;
use std::os::fd::FromRawFd;
use std::sync::{Arc, Mutex};

use vm_memory::{FileOffset, GuestAddress, GuestRegionMmap, MmapRegion};

/// Allocation granularity and alignment of guest buffers.
const ALIGN: u64 = 64;

/// The memfd-backed guest memory and its allocator.
pub struct GuestMemory {
    region: GuestRegionMmap,
    base: *mut u8,
    size: u64,
    /// Free ranges `(start, len)`, sorted by start, never adjacent (coalesced on free).
    free: Mutex<Vec<(u64, u64)>>,
}

// SAFETY: `base` points into the mapping owned by `region`, which lives as long as `self`; all
// accesses through it go through the bounds-checked methods below.
unsafe impl Send for GuestMemory {}
// SAFETY: see above; concurrent users only touch buffers they allocated (or ring fields, which
// are accessed atomically by the virtqueue code).
unsafe impl Sync for GuestMemory {}

impl GuestMemory {
    /// Create `size` bytes (rounded up to 4 KiB) of memfd-backed memory at guest address 0.
    pub fn new(size: usize) -> io::Result<Arc<GuestMemory>> {
        let size = (size as u64).div_ceil(4096) * 4096;
        // SAFETY: the name is a valid NUL-terminated string; the returned fd is checked.
        let fd = unsafe { libc::memfd_create(c"vhostfs-test-guest".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a freshly created descriptor that nothing else owns.
        let file = unsafe { File::from_raw_fd(fd) };
        file.set_len(size)?;
        let mapping = MmapRegion::from_file(FileOffset::new(file, 0), size as usize)
            .map_err(|e| io::Error::other(format!("mmap guest memory: {e}")))?;
        let region = GuestRegionMmap::new(mapping, GuestAddress(0))
            .ok_or_else(|| io::Error::other("guest memory region overflows"))?;
        let base = region.as_ptr();
        Ok(Arc::new(GuestMemory {
            region,
            base,
            size,
            free: Mutex::new(vec![(0, size)]),
        }))
    }

    /// The mapped region (for `VhostUserMemoryRegionInfo::from_guest_region`).
    pub fn region(&self) -> &GuestRegionMmap {
        &self.region
    }

    /// Size of guest memory in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Host virtual address of guest address `gpa` (what SET_VRING_ADDR expects).
    pub fn host_addr(&self, gpa: u64) -> u64 {
        self.base as u64 + gpa
    }

    /// Host pointer to `len` bytes at `gpa`; panics if the range is outside guest memory.
    pub fn ptr(&self, gpa: u64, len: usize) -> *mut u8 {
        assert!(
            gpa.checked_add(len as u64)
                .is_some_and(|end| end <= self.size),
            "guest range {gpa:#x}+{len:#x} outside guest memory"
        );
        // SAFETY: in bounds of the mapping, checked above.
        unsafe { self.base.add(gpa as usize) }
    }

    /// Copy `data` into guest memory at `gpa`.
    pub fn write(&self, gpa: u64, data: &[u8]) {
        let dst = self.ptr(gpa, data.len());
        // SAFETY: `dst` is valid for `data.len()` bytes; guest memory never overlaps `data`.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), dst, data.len()) }
    }

    /// Copy `len` bytes out of guest memory at `gpa`.
    pub fn read(&self, gpa: u64, len: usize) -> Vec<u8> {
        let src = self.ptr(gpa, len);
        let mut out = vec![0u8; len];
        // SAFETY: `src` is valid for `len` bytes and does not overlap `out`.
        unsafe { std::ptr::copy_nonoverlapping(src, out.as_mut_ptr(), len) }
        out
    }

    /// Allocate `len` bytes (at least 1, 64-byte aligned) of guest memory; `None` when full.
    pub fn alloc_raw(&self, len: usize) -> Option<u64> {
        let len = (len.max(1) as u64).div_ceil(ALIGN) * ALIGN;
        let mut free = self.free.lock().unwrap();
        let i = free.iter().position(|&(_, l)| l >= len)?;
        let (start, l) = free[i];
        if l == len {
            free.remove(i);
        } else {
            free[i] = (start + len, l - len);
        }
        Some(start)
    }

    /// Return a range obtained from [`GuestMemory::alloc_raw`] with the same `len`.
    pub fn free_raw(&self, start: u64, len: usize) {
        let len = (len.max(1) as u64).div_ceil(ALIGN) * ALIGN;
        let mut free = self.free.lock().unwrap();
        let i = free.partition_point(|&(s, _)| s < start);
        free.insert(i, (start, len));
        if i + 1 < free.len() && free[i].0 + free[i].1 == free[i + 1].0 {
            free[i].1 += free[i + 1].1;
            free.remove(i + 1);
        }
        if i > 0 && free[i - 1].0 + free[i - 1].1 == free[i].0 {
            free[i - 1].1 += free[i].1;
            free.remove(i);
        }
    }

    /// Allocate a guest buffer that is freed when dropped.
    pub fn alloc(self: &Arc<Self>, len: usize) -> io::Result<GuestBuf> {
        let addr = self.alloc_raw(len).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::OutOfMemory,
                format!("guest memory exhausted allocating {len} bytes"),
            )
        })?;
        Ok(GuestBuf {
            mem: Arc::clone(self),
            addr,
            len,
        })
    }
}

/// A buffer in guest memory, returned to the allocator on drop.
pub struct GuestBuf {
    mem: Arc<GuestMemory>,
    addr: u64,
    len: usize,
}

impl GuestBuf {
    /// Guest physical address of the buffer.
    pub fn addr(&self) -> u64 {
        self.addr
    }

    /// Length requested at allocation.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer is zero-length.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Write `data` at `offset` within the buffer (panics if it does not fit).
    pub fn write(&self, offset: usize, data: &[u8]) {
        assert!(
            offset + data.len() <= self.len,
            "write past end of GuestBuf"
        );
        self.mem.write(self.addr + offset as u64, data);
    }

    /// Read `len` bytes at `offset` within the buffer (panics if out of range).
    pub fn read(&self, offset: usize, len: usize) -> Vec<u8> {
        assert!(offset + len <= self.len, "read past end of GuestBuf");
        self.mem.read(self.addr + offset as u64, len)
    }
}

impl Drop for GuestBuf {
    fn drop(&mut self) {
        self.mem.free_raw(self.addr, self.len);
    }
}
