//! A request's descriptor chain as the handlers see it: its device-readable buffers (the guest's
//! request) as a [`Reader`], its device-writable ones (room for the reply) as a [`Writer`], both
//! slices of guest memory resolved in one walk of the chain.
//!
//! Ours rather than fuse-backend-rs's `Reader`/`VirtioFsWriter` (which walk the chain twice and
//! allocate a 64-slot `VecDeque` each, 2,560 bytes, per request): a small request costs no
//! allocation here, and READ/WRITE build their `iovec`s on the stack.
//!
//! Invariants (of [`Buffers`], both sides):
//! - `slices[first..]` are the unconsumed buffers, in chain order, none empty; each lies in one
//!   guest-memory region (a chain with a descriptor across regions is refused). Consuming
//!   bytes only shortens the front; `avail` is always the sum of their lengths.
//! - The first [`INLINE`] slices live inline: a request of a few descriptors (everything but
//!   bulk I/O) is taken apart without touching the heap.
//! - Every write into guest memory marks its bytes dirty in its slice's bitmap (the migration
//!   dirty log): `VolatileSlice::copy_from` does it for copies, [`Writer::write_from_at`] after
//!   its `preadv`.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};

use smallvec::SmallVec;
use virtio_queue::desc::split::Descriptor;
use vm_memory::bitmap::{BitmapSlice, MS};
use vm_memory::volatile_memory::PtrGuardMut;
use vm_memory::{GuestAddress, GuestMemory, VolatileSlice};

use super::reply::einval;

/// Slices per side kept inline. The Linux driver sends a small request as two readable
/// buffers (header, arguments) and two writable ones (header, reply); a 4 KiB READ or WRITE
/// adds one page.
pub const INLINE: usize = 4;

/// `iovec`s per `preadv`/`pwritev` kept on the stack (a 1 MiB transfer of 4 KiB pages takes
/// the heap).
const INLINE_IOV: usize = 8;

/// Most `iovec`s one call takes (`IOV_MAX`); a longer transfer is short and goes on.
const IOV_MAX: usize = 1024;

/// One side of a chain: its buffers in guest memory and how far they are consumed.
struct Buffers<'a, B> {
    slices: SmallVec<[VolatileSlice<'a, B>; INLINE]>,
    first: usize,
    avail: usize,
}

impl<'a, B: BitmapSlice> Buffers<'a, B> {
    fn new() -> Self {
        Buffers {
            slices: SmallVec::new(),
            first: 0,
            avail: 0,
        }
    }

    fn unconsumed(&self) -> &[VolatileSlice<'a, B>] {
        &self.slices[self.first..]
    }

    /// Marks `n` bytes consumed (at most `avail`).
    fn consume(&mut self, mut n: usize) {
        debug_assert!(n <= self.avail);
        self.avail -= n;
        while n > 0 {
            let s = &mut self.slices[self.first];
            if n < s.len() {
                if let Ok(rest) = s.offset(n) {
                    *s = rest;
                }
                return;
            }
            n -= s.len();
            self.first += 1;
        }
    }

    /// Copies `len` bytes (at most `avail`) slice by slice with `f(slice, done so far) -> bytes
    /// copied`; consumes them.
    fn copy(
        &mut self,
        len: usize,
        mut f: impl FnMut(&VolatileSlice<'a, B>, usize) -> usize,
    ) -> usize {
        let mut done = 0;
        for s in self.unconsumed() {
            if done == len {
                break;
            }
            done += f(s, done);
        }
        self.consume(done);
        done
    }

    /// Splits off everything after the first `offset` bytes, which stay.
    fn split_at(&mut self, offset: usize) -> io::Result<Self> {
        if offset > self.avail {
            return Err(einval());
        }
        let mut tail = Buffers::new();
        tail.avail = self.avail - offset;
        let mut keep = offset;
        let mut cut = self.slices.len();
        for (i, s) in self.slices.iter().enumerate().skip(self.first) {
            if keep >= s.len() {
                keep -= s.len();
                continue;
            }
            if keep > 0 {
                let (head, rest) = s.split_at(keep).map_err(io::Error::other)?;
                tail.slices.push(rest);
                self.slices[i] = head;
                cut = i + 1;
            } else {
                cut = i;
            }
            break;
        }
        tail.slices.extend(self.slices.drain(cut..));
        self.avail = offset;
        Ok(tail)
    }

    /// Runs `io` on `iovec`s of up to `count` unconsumed bytes; consumes what it moved.
    fn transfer(
        &mut self,
        count: usize,
        io: impl FnOnce(&[libc::iovec]) -> io::Result<usize>,
    ) -> io::Result<usize> {
        let mut guards: SmallVec<[PtrGuardMut; INLINE_IOV]> = SmallVec::new();
        let mut iov: SmallVec<[libc::iovec; INLINE_IOV]> = SmallVec::new();
        let mut left = count;
        for s in self.unconsumed().iter().take(IOV_MAX) {
            if left == 0 {
                break;
            }
            let len = s.len().min(left);
            let guard = s.ptr_guard_mut();
            iov.push(libc::iovec {
                iov_base: guard.as_ptr().cast(),
                iov_len: len,
            });
            guards.push(guard);
            left -= len;
        }
        if iov.is_empty() {
            return Ok(0);
        }
        let n = io(&iov)?.min(count - left);
        drop(guards);
        Ok(n)
    }
}

/// Adds the `len` bytes at `addr` of `mem` to `bufs`. A buffer outside guest memory (even an
/// empty one) or across a region boundary is an error (as in fuse-backend-rs and virtiofsd:
/// the chain is dropped).
fn add<'a, M: GuestMemory>(
    bufs: &mut Buffers<'a, MS<'a, M>>,
    mem: &'a M,
    addr: GuestAddress,
    len: usize,
) -> io::Result<()> {
    if len == 0 {
        // Nothing to keep, but its address must still be guest memory (as fuse-backend-rs's
        // region lookup had it, and the fuzz corpus checks).
        return match mem.address_in_range(addr) {
            true => Ok(()),
            false => Err(io::Error::other(format!(
                "empty buffer at {:#x}, outside guest memory",
                addr.0
            ))),
        };
    }
    bufs.avail = bufs
        .avail
        .checked_add(len)
        .ok_or_else(|| io::Error::other("descriptor lengths overflow"))?;
    bufs.slices
        .push(mem.get_slice(addr, len).map_err(io::Error::other)?);
    Ok(())
}

/// The device-readable part of a chain: the request.
pub struct Reader<'a, B> {
    bufs: Buffers<'a, B>,
}

/// The device-writable part of a chain: room for the reply.
pub struct Writer<'a, B> {
    bufs: Buffers<'a, B>,
}

/// A chain's two sides.
pub type Sides<'a, B> = (Reader<'a, B>, Writer<'a, B>);

/// Takes a chain apart in one walk of its descriptors (`descs`, in chain order): its readable
/// and its writable buffers, resolved in `mem`. Fails for a buffer outside guest memory.
pub fn split<'a, M: GuestMemory>(
    mem: &'a M,
    descs: impl IntoIterator<Item = Descriptor>,
) -> io::Result<Sides<'a, MS<'a, M>>> {
    let (mut r, mut w) = (Buffers::new(), Buffers::new());
    for desc in descs {
        let side = if desc.is_write_only() { &mut w } else { &mut r };
        add(side, mem, desc.addr(), desc.len() as usize)?;
    }
    Ok((Reader { bufs: r }, Writer { bufs: w }))
}

impl<'a, B: BitmapSlice> Reader<'a, B> {
    /// Request bytes not read yet.
    pub fn available_bytes(&self) -> usize {
        self.bufs.avail
    }

    /// Splits the reader in two: this one keeps the next `offset` bytes, the one returned has
    /// the rest. `EINVAL` when fewer than `offset` are left.
    pub fn split_at(&mut self, offset: usize) -> io::Result<Self> {
        self.bufs.split_at(offset).map(|bufs| Reader { bufs })
    }

    /// Writes up to `count` request bytes to `f` at `off` (one `pwritev`, straight from guest
    /// memory); consumes and returns how many the file took. Nothing is consumed on error.
    pub fn read_to_at(&mut self, f: &File, count: usize, off: u64) -> io::Result<usize> {
        let fd = f.as_fd();
        let n = self.bufs.transfer(count, |iov| pwritev(fd, iov, off))?;
        self.bufs.consume(n);
        Ok(n)
    }
}

impl<B: BitmapSlice> Reader<'_, B> {
    /// Copies the next `buf.len()` request bytes into `buf` without consuming them, if the
    /// first buffer holds them all (a guest puts a request's header in a buffer of its own, or
    /// at the start of a larger one); `false` otherwise.
    pub fn peek(&self, buf: &mut [u8]) -> bool {
        match self.bufs.unconsumed().first() {
            Some(s) if s.len() >= buf.len() => s.copy_to(buf) == buf.len(),
            _ => false,
        }
    }
}

impl<B: BitmapSlice> io::Read for Reader<'_, B> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let len = buf.len().min(self.bufs.avail);
        Ok(self
            .bufs
            .copy(len, |s, done| s.copy_to(&mut buf[done..len])))
    }
}

impl<'a, B: BitmapSlice> Writer<'a, B> {
    /// Reply bytes that still fit.
    pub fn available_bytes(&self) -> usize {
        self.bufs.avail
    }

    /// Splits the writer in two: this one keeps room for the next `offset` bytes, the one
    /// returned has the rest. `EINVAL` when less than `offset` is left.
    pub fn split_at(&mut self, offset: usize) -> io::Result<Self> {
        self.bufs.split_at(offset).map(|bufs| Writer { bufs })
    }

    /// Reads up to `count` bytes of `f` at `off` into the reply buffers (one `preadv`, straight
    /// into guest memory, whose bytes it marks dirty); consumes and returns how many it read.
    /// Nothing is consumed on error.
    pub fn write_from_at(&mut self, f: &File, count: usize, off: u64) -> io::Result<usize> {
        let fd = f.as_fd();
        let n = self.bufs.transfer(count, |iov| preadv(fd, iov, off))?;
        let mut left = n;
        for s in self.bufs.unconsumed() {
            if left == 0 {
                break;
            }
            let len = s.len().min(left);
            s.bitmap().mark_dirty(0, len);
            left -= len;
        }
        self.bufs.consume(n);
        Ok(n)
    }
}

impl<B: BitmapSlice> io::Write for Writer<'_, B> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let len = buf.len().min(self.bufs.avail);
        Ok(self.bufs.copy(len, |s, done| {
            let part = &buf[done..len];
            s.copy_from(part);
            part.len().min(s.len())
        }))
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// `preadv(2)`: reads `fd` at `off` into `iov`. Made with `syscall(2)`, not glibc's `preadv`:
/// that one is a thread-cancellation point, and its cancellation bookkeeping (two atomic
/// operations on the thread's state around the call) cost 2.4 % of a queue thread's CPU in
/// 4 KiB READs (docs/benchmarks.md, ninth session); no thread of ours is ever cancelled.
fn preadv(fd: BorrowedFd, iov: &[libc::iovec], off: u64) -> io::Result<usize> {
    // SAFETY: each iovec points at `iov_len` bytes of mapped guest memory, kept mapped (and its
    // pointer guard held) by the caller for the call; the kernel writes only within them.
    unsafe { vectored(libc::SYS_preadv, fd, iov, off) }
}

/// `pwritev(2)`: writes `iov` to `fd` at `off`, with `syscall(2)` as [`preadv`].
fn pwritev(fd: BorrowedFd, iov: &[libc::iovec], off: u64) -> io::Result<usize> {
    // SAFETY: each iovec points at `iov_len` readable bytes of mapped guest memory, kept mapped
    // by the caller for the call; the kernel only reads them.
    unsafe { vectored(libc::SYS_pwritev, fd, iov, off) }
}

/// The `preadv`/`pwritev` system call `nr` on `fd`, `iov`, `off`. Every argument goes as a
/// `c_long`: the kernel reads all of them as `unsigned long`, and a 32-bit argument to the
/// variadic `syscall(2)` would leave the upper half of its register unspecified. On a 64-bit
/// kernel the offset is the fourth argument whole (`pos_l`); the fifth (`pos_h`) is shifted out.
///
/// # Safety
/// Every iovec must point at `iov_len` bytes that stay mapped for the call, writable for
/// `SYS_preadv`, readable for `SYS_pwritev`.
unsafe fn vectored(
    nr: libc::c_long,
    fd: BorrowedFd,
    iov: &[libc::iovec],
    off: u64,
) -> io::Result<usize> {
    let off = libc::c_long::try_from(off).map_err(|_| einval())?;
    // SAFETY: the caller vouches for the buffers; `fd` is open for the call and `iov` is a
    // live slice of `iov.len()` iovecs (at most IOV_MAX: the kernel refuses more with EINVAL).
    let n = unsafe {
        libc::syscall(
            nr,
            libc::c_long::from(fd.as_raw_fd()),
            iov.as_ptr() as libc::c_long,
            iov.len() as libc::c_long,
            off,
            0 as libc::c_long,
        )
    };
    usize::try_from(n).map_err(|_| io::Error::last_os_error())
}
