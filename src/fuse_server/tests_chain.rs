//! The descriptor-chain `Reader`/`Writer` ([`super::chain`]) on real guest memory: copies and
//! splits across buffer boundaries, chains longer than the inline slots, file I/O straight
//! to and from guest buffers, and the dirty log of every byte written into guest memory.

use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::fs::FileExt;

use virtio_queue::QueueT;
use vm_memory::bitmap::{AtomicBitmap, Bitmap};
use vm_memory::{GuestAddress, GuestMemory, GuestMemoryMmap, GuestMemoryRegion};

use super::chain::{self, INLINE};
use super::tests::{lay_out, publish, read_back, Desc, MEM_SIZE, WRITE_BASE};
use crate::temp_dir::TempDir;

type LoggedMem = GuestMemoryMmap<AtomicBitmap>;

fn memory() -> LoggedMem {
    LoggedMem::from_ranges(&[(GuestAddress(0), MEM_SIZE)]).unwrap()
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31) ^ seed).collect()
}

/// Whether the page holding guest address `addr` is marked dirty.
fn dirty(mem: &LoggedMem, addr: u64) -> bool {
    let region = mem.find_region(GuestAddress(addr)).unwrap();
    let offset = addr - region.start_addr().0;
    region.bitmap().dirty_at(offset as usize)
}

fn clean(mem: &LoggedMem) {
    for region in mem.iter() {
        // The region's own bitmap (`MmapRegion::bitmap`), not the trait's slice of it.
        std::ops::Deref::deref(region).bitmap().reset();
    }
}

#[test]
fn reads_and_splits_across_buffer_boundaries() {
    let mem = memory();
    // More readable buffers than the inline slots, and an empty one among them.
    let data = pattern(6000, 7);
    let cuts = [0usize, 13, 13, 600, 2500, 2501, 4000, 6000];
    let parts: Vec<&[u8]> = cuts.windows(2).map(|w| &data[w[0]..w[1]]).collect();
    assert!(parts.len() > INLINE);
    let mut q = publish(&mem, &lay_out(&mem, &parts, &[16]));
    let (mut r, w) = chain::split(&mem, q.pop_descriptor_chain(&mem).unwrap()).unwrap();
    assert_eq!((r.available_bytes(), w.available_bytes()), (6000, 16));
    let mut head = [0u8; 20];
    r.read_exact(&mut head).unwrap();
    assert_eq!(&head[..], &data[..20]);
    // Split inside a buffer, then exactly at a boundary, then at the very end.
    let mut tail = r.split_at(580).unwrap();
    assert_eq!((r.available_bytes(), tail.available_bytes()), (580, 5400));
    let mut tail2 = tail.split_at(1900).unwrap();
    let mut tail3 = tail2.split_at(tail2.available_bytes()).unwrap();
    assert_eq!(tail3.available_bytes(), 0);
    assert!(tail3.split_at(1).is_err(), "a split past the end");
    let mut got = Vec::new();
    r.read_to_end(&mut got).unwrap();
    tail.read_to_end(&mut got).unwrap();
    tail2.read_to_end(&mut got).unwrap();
    assert_eq!(got, &data[20..]);
    assert_eq!(r.read(&mut head).unwrap(), 0, "nothing past the end");
}

#[test]
fn writes_fill_buffers_in_order_and_mark_them_dirty() {
    let mem = memory();
    let writable = [16, 100, 4096, 3000, 7, 9000];
    let mut q = publish(&mem, &lay_out(&mem, &[&[0; 40]], &writable));
    clean(&mem);
    let (_, mut w) = chain::split(&mem, q.pop_descriptor_chain(&mem).unwrap()).unwrap();
    let total: u32 = writable.iter().sum();
    assert_eq!(w.available_bytes(), total as usize);
    let mut data = w.split_at(16).unwrap();
    w.write_all(&[0x11; 16]).unwrap();
    assert!(w.write_all(&[1]).is_err(), "the header part is full");
    let body = pattern(7203, 3);
    data.write_all(&body).unwrap();
    assert_eq!(data.available_bytes(), total as usize - 16 - 7203);
    let out = read_back(&mem, &writable);
    assert_eq!(&out[..16], &[0x11; 16]);
    assert_eq!(&out[16..16 + 7203], &body[..]);
    assert_eq!(out[16 + 7203], 0xa5, "nothing past what was written");
    // Buffers are page-aligned from WRITE_BASE, one page (or more) each.
    assert!(dirty(&mem, WRITE_BASE), "header page");
    assert!(dirty(&mem, WRITE_BASE + 0x1000), "the 100-byte buffer");
    assert!(dirty(&mem, WRITE_BASE + 0x2000), "the 4 KiB buffer");
    assert!(dirty(&mem, WRITE_BASE + 0x3000), "the 3000-byte buffer");
    assert!(
        !dirty(&mem, WRITE_BASE + 0x5000),
        "the 9000-byte buffer, not reached"
    );
}

#[test]
fn file_io_goes_straight_between_file_and_guest_buffers() {
    let dir = TempDir::new("vhostfs-chain-test").unwrap();
    let file = File::options()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(dir.join("f"))
        .unwrap();
    let mem = memory();
    // WRITE: a 40-byte prefix, then data over six buffers of odd sizes.
    let data = pattern(20000, 9);
    let cuts = [0usize, 1, 4097, 4100, 9000, 15000, 20000];
    let mut readable: Vec<&[u8]> = vec![&[0; 40]];
    readable.extend(cuts.windows(2).map(|w| &data[w[0]..w[1]]));
    let mut q = publish(&mem, &lay_out(&mem, &readable, &[16]));
    let (mut r, _) = chain::split(&mem, q.pop_descriptor_chain(&mem).unwrap()).unwrap();
    r.read_exact(&mut [0; 40]).unwrap();
    assert_eq!(r.read_to_at(&file, 20000, 100).unwrap(), 20000);
    assert_eq!(r.available_bytes(), 0);
    let mut back = vec![0; 20000];
    file.read_exact_at(&mut back, 100).unwrap();
    assert_eq!(back, data);
    // READ: into a reply of six buffers after the header; only what was read is dirty.
    let writable = [16, 3, 5000, 1, 8192, 6000];
    let mut q = publish(&mem, &lay_out(&mem, &[&[0; 40]], &writable));
    clean(&mem);
    let (_, mut w) = chain::split(&mem, q.pop_descriptor_chain(&mem).unwrap()).unwrap();
    let mut reply = w.split_at(16).unwrap();
    assert_eq!(reply.write_from_at(&file, 5004, 100).unwrap(), 5004);
    let out = read_back(&mem, &writable);
    assert!(out[..16].iter().all(|&b| b == 0xa5), "header untouched");
    assert_eq!(&out[16..16 + 5004], &data[..5004]);
    assert_eq!(out[16 + 5004], 0xa5, "nothing past the data");
    assert!(dirty(&mem, WRITE_BASE + 0x1000), "the 3-byte buffer");
    assert!(dirty(&mem, WRITE_BASE + 0x2000), "the 5000-byte buffer");
    assert!(dirty(&mem, WRITE_BASE + 0x4000), "the 1-byte buffer");
    assert!(!dirty(&mem, WRITE_BASE), "the header page, not written");
    assert!(
        !dirty(&mem, WRITE_BASE + 0x5000),
        "the 8 KiB buffer, not reached"
    );
    // At the end of the file: a short read, then 0.
    assert_eq!(reply.write_from_at(&file, 8192, 20000).unwrap(), 100);
    assert_eq!(reply.write_from_at(&file, 8192, 20100).unwrap(), 0);
    // An offset past off_t is EINVAL, and consumes nothing.
    let room = reply.available_bytes();
    let err = reply.write_from_at(&file, 10, u64::MAX).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EINVAL));
    assert_eq!(reply.available_bytes(), room);
}

#[test]
fn a_buffer_outside_guest_memory_refuses_the_chain() {
    let mem = memory();
    let descs = [
        Desc::readable(0x10_0000, 40),
        Desc::writable(MEM_SIZE as u64 - 8, 64),
    ];
    let mut q = publish(&mem, &descs);
    assert!(chain::split(&mem, q.pop_descriptor_chain(&mem).unwrap()).is_err());
    // An empty buffer outside guest memory too: it holds nothing, but names no memory.
    let descs = [
        Desc::readable(0x10_0000, 40),
        Desc::writable(MEM_SIZE as u64 + 4096, 0),
        Desc::writable(WRITE_BASE, 64),
    ];
    let mut q = publish(&mem, &descs);
    assert!(chain::split(&mem, q.pop_descriptor_chain(&mem).unwrap()).is_err());
}

/// The directory a request changes a name in, read from its header without consuming it.
#[test]
fn a_request_names_the_directory_whose_lock_it_takes() {
    use super::abi::{InHeader, FUSE_CREATE, FUSE_READ, FUSE_RENAME2};
    use super::Request;
    use vm_memory::ByteValued;

    let mem = memory();
    let header = |opcode: u32| InHeader {
        len: 64,
        opcode,
        unique: 1,
        nodeid: 42,
        ..Default::default()
    };
    let locked = |parts: &[&[u8]]| {
        let mut q = publish(&mem, &lay_out(&mem, parts, &[16]));
        let chain = q.pop_descriptor_chain(&mem).unwrap();
        let request = Request::of_chain(&mem, chain).unwrap();
        let dir = request.locked_dir();
        // Peeking consumed nothing.
        assert_eq!(
            request.request_bytes(),
            parts.iter().map(|p| p.len()).sum::<usize>()
        );
        dir
    };
    let create = header(FUSE_CREATE);
    let body = [0u8; 24];
    assert_eq!(locked(&[create.as_slice(), &body]), Some(42));
    let whole = [create.as_slice(), &body].concat();
    assert_eq!(locked(&[&whole]), Some(42), "header and body in one buffer");
    assert_eq!(locked(&[header(FUSE_RENAME2).as_slice(), &body]), Some(42));
    assert_eq!(locked(&[header(FUSE_READ).as_slice(), &body]), None);
    // A header cut across two buffers is not looked at.
    let (a, b) = create.as_slice().split_at(20);
    assert_eq!(locked(&[a, b, &body]), None);
}
