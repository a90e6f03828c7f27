//! Dispatcher tests on real guest memory and real descriptor chains: the memory type the
//! vhost-user device uses (`GuestMemoryAtomic<GuestMemoryMmap<()>>`, chains over
//! `GuestMemoryLoadGuard`), a hand-written descriptor table and available ring, and the stub
//! filesystem.

use std::sync::Arc;

use fuse_backend_rs::abi::fuse_abi as fa;
use virtio_queue::QueueT;
use vm_memory::{
    ByteValued, Bytes, GuestAddress, GuestAddressSpace, GuestMemoryAtomic, GuestMemoryMmap,
};

use super::abi::*;
use super::{FuseServer, ServerOptions};
use crate::passthrough::{FsConfig, PassthroughFs};
use crate::temp_dir::TempDir;

/// The hand-written queue, shared with the fuzz harness (`fuzz/harness.rs`).
mod desc_table;
pub(super) use desc_table::{publish, Desc};

/// Readable buffers are laid out from here, writable ones from `WRITE_BASE`.
pub(super) const READ_BASE: u64 = 0x10_0000;
pub(super) const WRITE_BASE: u64 = 0x80_0000;
pub(super) const MEM_SIZE: usize = 0x100_0000;

pub(super) type VhostMem = GuestMemoryMmap<()>;

/// A server over a fresh, empty share (removed when the returned directory is dropped): the
/// tests never touch anything else.
pub(super) fn server() -> (FuseServer, TempDir) {
    let dir = TempDir::new("vhostfs-fuse-server").unwrap();
    let fs = PassthroughFs::new(FsConfig::for_tests(
        dir.path(),
        crate::passthrough::InodeFileHandles::Never,
    ))
    .unwrap();
    (FuseServer::new(Arc::new(fs), ServerOptions::default()), dir)
}

/// Copies `readable` into guest memory from `READ_BASE` on and poisons writable buffers of the
/// sizes in `writable` from `WRITE_BASE` on (each buffer page-aligned); returns their
/// descriptors, in chain order.
pub(super) fn lay_out<M: vm_memory::GuestMemory>(
    mem: &M,
    readable: &[&[u8]],
    writable: &[u32],
) -> Vec<Desc> {
    let mut descs = Vec::new();
    let mut addr = READ_BASE;
    for buf in readable {
        mem.write_slice(buf, GuestAddress(addr)).unwrap();
        descs.push(Desc::readable(addr, buf.len() as u32));
        addr += (buf.len() as u64 + 4095) & !4095;
    }
    let mut addr = WRITE_BASE;
    for &len in writable {
        // Poison, to check that nothing past the used length is claimed as written.
        mem.write_slice(&vec![0xa5; len as usize], GuestAddress(addr))
            .unwrap();
        descs.push(Desc::writable(addr, len));
        addr += (u64::from(len) + 4095) & !4095;
    }
    descs
}

/// The writable buffers laid out by [`lay_out`], concatenated.
pub(super) fn read_back<M: vm_memory::GuestMemory>(mem: &M, writable: &[u32]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut addr = WRITE_BASE;
    for &len in writable {
        let mut buf = vec![0; len as usize];
        mem.read_slice(&mut buf, GuestAddress(addr)).unwrap();
        out.extend_from_slice(&buf);
        addr += (u64::from(len) + 4095) & !4095;
    }
    out
}

/// Real guest memory of the vhost-user device's type, and a server.
pub(super) struct Harness {
    mem: GuestMemoryAtomic<VhostMem>,
    pub(super) server: FuseServer,
    _share: TempDir,
}

impl Harness {
    pub(super) fn new() -> Self {
        let mmap = VhostMem::from_ranges(&[(GuestAddress(0), MEM_SIZE)]).unwrap();
        let (server, share) = server();
        Harness {
            mem: GuestMemoryAtomic::new(mmap),
            server,
            _share: share,
        }
    }

    /// Sends a chain made of `readable` buffers (one descriptor each) and writable buffers of
    /// the sizes in `writable`; returns the used length and the bytes the server wrote.
    pub(super) fn call_chain(&self, readable: &[&[u8]], writable: &[u32]) -> (u32, Vec<u8>) {
        let guard = self.mem.memory();
        let mut q = publish(&*guard, &lay_out(&*guard, readable, writable));
        let chain = q.pop_descriptor_chain(guard.clone()).unwrap();
        let used = self.server.handle_chain(&*guard, chain);
        let total: u32 = writable.iter().sum();
        assert!(used <= total, "used {used} > writable {total}");
        let mut out = read_back(&*guard, writable);
        out.truncate(used as usize);
        (used, out)
    }

    /// One request in one readable descriptor, a 64 KiB reply buffer.
    pub(super) fn call(&self, req: &[u8]) -> (u32, Vec<u8>) {
        self.call_chain(&[req], &[0x10000])
    }

    pub(super) fn init(&self) -> InitOut {
        let init = InitIn {
            major: 7,
            minor: 41,
            max_readahead: 0x20000,
            flags: 0xffff_ffff,
            flags2: 0x1ff,
            ..Default::default()
        };
        let (used, out) = self.call(&request(FUSE_INIT, 1, 0, init.as_slice()));
        assert_eq!(used, 16 + 64);
        let h = out_header(&out);
        assert_eq!((h.error, h.unique, h.len), (0, 1, 80));
        *InitOut::from_slice(&out[16..80]).unwrap()
    }
}

/// A request: in header (len = 40 + body) and body.
pub(super) fn request(opcode: u32, unique: u64, nodeid: u64, body: &[u8]) -> Vec<u8> {
    let h = InHeader {
        len: (40 + body.len()) as u32,
        opcode,
        unique,
        nodeid,
        uid: 1000,
        gid: 1000,
        pid: 42,
        total_extlen: 0,
        padding: 0,
    };
    let mut v = h.as_slice().to_vec();
    v.extend_from_slice(body);
    v
}

pub(super) fn out_header(out: &[u8]) -> fa::OutHeader {
    *fa::OutHeader::from_slice(&out[..16]).unwrap()
}

/// Asserts a header-only error reply `-errno` for `unique`.
pub(super) fn assert_error(res: (u32, Vec<u8>), unique: u64, errno: i32) {
    let (used, out) = res;
    assert_eq!(used, 16, "expected a bare error reply");
    let h = out_header(&out);
    assert_eq!((h.len, h.error, h.unique), (16, -errno, unique));
}

/// Asserts a successful reply for `unique` (header plus whatever body).
pub(super) fn assert_ok(res: (u32, Vec<u8>), unique: u64) {
    let (used, out) = res;
    let h = out_header(&out);
    assert_eq!((h.error, h.unique), (0, unique));
    assert_eq!(h.len, used);
}

pub(super) fn cat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

#[test]
fn init_over_vhost_user_memory() {
    let h = Harness::new();
    let out = h.init();
    assert_eq!((out.major, out.minor), (7, 38));
    assert_eq!((out.max_write, out.max_pages), (1 << 20, 256));
    assert_eq!(out.max_readahead, 0x20000);
    let flags = u64::from(out.flags) | (u64::from(out.flags2) << 32);
    assert_ne!(flags & FUSE_MAX_PAGES, 0);
    assert_ne!(flags & FUSE_INIT_EXT, 0);
    assert_eq!(
        flags & (FUSE_WRITEBACK_CACHE | FUSE_DONT_MASK | FUSE_SECURITY_CTX),
        0
    );
}

#[test]
fn plain_guest_memory_and_reference_chains() {
    // The other common instantiation: `DescriptorChain<&GuestMemoryMmap>`.
    let mem: GuestMemoryMmap<()> =
        GuestMemoryMmap::from_ranges(&[(GuestAddress(0), MEM_SIZE)]).unwrap();
    let req = request(FUSE_GETATTR, 5, 1, fa::GetattrIn::default().as_slice());
    mem.write_slice(&req, GuestAddress(READ_BASE)).unwrap();
    let descs = [
        Desc::readable(READ_BASE, req.len() as u32),
        Desc::writable(WRITE_BASE, 4096),
    ];
    let mut q = publish(&mem, &descs);
    let chain = q.pop_descriptor_chain(&mem).unwrap();
    let (s, _share) = server();
    assert_eq!(s.handle_chain(&mem, chain), 16);
    let mut out = [0u8; 16];
    mem.read_slice(&mut out, GuestAddress(WRITE_BASE)).unwrap();
    let h = out_header(&out);
    // Before INIT: EIO.
    assert_eq!((h.len, h.error, h.unique), (16, -libc::EIO, 5));
}

#[test]
fn requests_before_init_and_after_destroy_get_eio() {
    let h = Harness::new();
    assert_error(h.call(&request(FUSE_STATFS, 9, 1, &[])), 9, libc::EIO);
    h.init();
    assert_ok(h.call(&request(FUSE_STATFS, 10, 1, &[])), 10);
    let (used, out) = h.call(&request(FUSE_DESTROY, 11, 0, &[]));
    assert_eq!(used, 16);
    assert_eq!(out_header(&out).error, 0);
    assert_error(h.call(&request(FUSE_STATFS, 12, 1, &[])), 12, libc::EIO);
    // Remount: a new INIT starts a new session.
    h.init();
    assert_ok(h.call(&request(FUSE_STATFS, 13, 1, &[])), 13);
    // INIT on an established session (guest reboot) is a reset, not an error.
    h.init();
}

#[test]
fn bad_init_versions() {
    let h = Harness::new();
    let mut init = InitIn {
        major: 6,
        minor: 99,
        ..Default::default()
    };
    assert_error(
        h.call(&request(FUSE_INIT, 2, 0, init.as_slice())),
        2,
        libc::EPROTO,
    );
    init.major = 8;
    let (used, out) = h.call(&request(FUSE_INIT, 3, 0, init.as_slice()));
    assert_eq!(used, 80);
    let o = InitOut::from_slice(&out[16..]).unwrap();
    assert_eq!((o.major, o.minor, o.flags), (7, 38, 0));
    // Still not initialized after a major-only answer.
    assert_error(h.call(&request(FUSE_STATFS, 4, 1, &[])), 4, libc::EIO);
    // A pre-7.36 guest sends a 16-byte fuse_init_in.
    init.major = 7;
    init.minor = 31;
    init.flags = FUSE_ASYNC_READ as u32;
    let (used, out) = h.call(&request(FUSE_INIT, 5, 0, &init.as_slice()[..16]));
    assert_eq!(used, 80);
    let o = InitOut::from_slice(&out[16..]).unwrap();
    assert_eq!((o.minor, o.flags), (31, FUSE_ASYNC_READ as u32));
    // Shorter than that: EINVAL.
    assert_error(h.call(&request(FUSE_INIT, 6, 0, &[0; 12])), 6, libc::EINVAL);
}

#[test]
fn truncated_headers() {
    let h = Harness::new();
    // Nothing readable at all: a reply header still fits, with unique 0.
    assert_error(h.call_chain(&[], &[64]), 0, libc::EINVAL);
    // Less than `unique`: unique 0.
    let req = request(FUSE_GETATTR, 77, 1, &[]);
    assert_error(h.call(&req[..12]), 0, libc::EINVAL);
    // `unique` readable: it is echoed.
    assert_error(h.call(&req[..20]), 77, libc::EINVAL);
    // No room for a reply header: used length 0.
    assert_eq!(h.call_chain(&[&req[..20]], &[15]).0, 0);
    assert_eq!(h.call_chain(&[&req], &[]).0, 0);
}

#[test]
fn length_mismatches() {
    let h = Harness::new();
    h.init();
    let body = fa::GetattrIn::default();
    let mut req = request(FUSE_GETATTR, 20, 1, body.as_slice());
    // len larger than what is readable.
    req[0..4].copy_from_slice(&1000u32.to_ne_bytes());
    assert_error(h.call(&req), 20, libc::EINVAL);
    // len smaller than the header.
    req[0..4].copy_from_slice(&39u32.to_ne_bytes());
    assert_error(h.call(&req), 20, libc::EINVAL);
    // len = header only: the body is short for fuse_getattr_in.
    req[0..4].copy_from_slice(&40u32.to_ne_bytes());
    assert_error(h.call(&req), 20, libc::EINVAL);
    // Trailing readable bytes past `len` are ignored.
    let mut req = request(FUSE_GETATTR, 21, 1, body.as_slice());
    req.extend_from_slice(&[0xff; 100]);
    assert_ok(h.call(&req), 21);
    // Extensions longer than the body.
    let mut req = request(FUSE_GETATTR, 22, 1, body.as_slice());
    req[36..38].copy_from_slice(&3u16.to_ne_bytes());
    assert_error(h.call(&req), 22, libc::EINVAL);
    // Extensions within the body are skipped: LOOKUP "a" followed by 8 bytes of extension,
    // whose missing NUL would otherwise not matter either way.
    let mut req = request(FUSE_LOOKUP, 23, 1, b"a\0\0\0\0\0\0\0\0\0");
    req[36..38].copy_from_slice(&1u16.to_ne_bytes());
    assert_error(h.call(&req), 23, libc::ENOENT);
    // ... and cutting them off can leave a name without its NUL.
    let mut req = request(FUSE_LOOKUP, 24, 1, b"abcdefgh\0");
    req[36..38].copy_from_slice(&1u16.to_ne_bytes());
    assert_error(h.call(&req), 24, libc::EINVAL);
}

#[test]
fn malformed_bodies() {
    let h = Harness::new();
    h.init();
    // Missing NULs.
    assert_error(
        h.call(&request(FUSE_LOOKUP, 30, 1, b"abc")),
        30,
        libc::EINVAL,
    );
    assert_error(
        h.call(&request(FUSE_SYMLINK, 31, 1, b"name\0target")),
        31,
        libc::EINVAL,
    );
    let rename = cat(&[fa::RenameIn { newdir: 1 }.as_slice(), b"old\0new"]);
    assert_error(
        h.call(&request(FUSE_RENAME, 32, 1, &rename)),
        32,
        libc::EINVAL,
    );
    // Short structs.
    assert_error(
        h.call(&request(FUSE_MKNOD, 33, 1, &[0; 8])),
        33,
        libc::EINVAL,
    );
    assert_error(
        h.call(&request(FUSE_READ, 34, 1, &[0; 39])),
        34,
        libc::EINVAL,
    );
    assert_error(
        h.call(&request(FUSE_STATX, 35, 1, &[0; 16])),
        35,
        libc::EINVAL,
    );
    // WRITE whose size is larger than the data that came with it.
    let wi = fa::WriteIn {
        size: 4096,
        ..Default::default()
    };
    let req = request(FUSE_WRITE, 36, 1, &cat(&[wi.as_slice(), &[1; 100]]));
    assert_error(h.call(&req), 36, libc::EINVAL);
    let wi = fa::WriteIn {
        size: u32::MAX,
        ..Default::default()
    };
    assert_error(
        h.call(&request(FUSE_WRITE, 37, 1, wi.as_slice())),
        37,
        libc::EINVAL,
    );
    // SETXATTR whose value is shorter than its size.
    let si = fa::SetxattrIn { size: 10, flags: 0 };
    let req = request(FUSE_SETXATTR, 38, 1, &cat(&[si.as_slice(), b"user.x\0abc"]));
    assert_error(h.call(&req), 38, libc::EINVAL);
    // READ asking for 4 GiB with a small buffer is clamped, not refused (the fs then answers
    // EBADF for the unknown fh).
    let ri = fa::ReadIn {
        size: u32::MAX,
        ..Default::default()
    };
    let req = request(FUSE_READ, 39, 1, ri.as_slice());
    assert_error(h.call_chain(&[&req], &[100]), 39, libc::EBADF);
    // READ/READDIR with no room for the header.
    assert_eq!(h.call_chain(&[&req], &[8]).0, 0);
}

#[test]
fn unknown_and_unsupported_opcodes() {
    let h = Harness::new();
    h.init();
    for (i, op) in [
        7,
        19,
        0,
        FUSE_GETLK,
        FUSE_SETLK,
        FUSE_SETLKW,
        FUSE_BMAP,
        FUSE_IOCTL,
        FUSE_POLL,
        FUSE_NOTIFY_REPLY,
        FUSE_SETUPMAPPING,
        FUSE_REMOVEMAPPING,
        53,
        4096,
        9999,
        u32::MAX,
    ]
    .into_iter()
    .enumerate()
    {
        let unique = 100 + i as u64;
        assert_error(
            h.call(&request(op, unique, 1, &[0; 64])),
            unique,
            libc::ENOSYS,
        );
    }
}

#[test]
fn no_reply_requests() {
    let h = Harness::new();
    h.init();
    let forget = fa::ForgetIn { nlookup: 1 };
    assert_eq!(h.call(&request(FUSE_FORGET, 1, 5, forget.as_slice())).0, 0);
    assert_eq!(
        h.call(&request(FUSE_INTERRUPT, 2, 0, &7u64.to_ne_bytes()))
            .0,
        0
    );
    let batch = fa::BatchForgetIn { count: 2, dummy: 0 };
    let one = fa::ForgetOne {
        nodeid: 5,
        nlookup: 1,
    };
    let body = cat(&[batch.as_slice(), one.as_slice(), one.as_slice()]);
    assert_eq!(h.call(&request(FUSE_BATCH_FORGET, 3, 0, &body)).0, 0);
    // Count larger than the body (even one that overflows a multiplication): dropped.
    for count in [3, u32::MAX] {
        let batch = fa::BatchForgetIn { count, dummy: 0 };
        let body = cat(&[batch.as_slice(), one.as_slice()]);
        assert_eq!(h.call(&request(FUSE_BATCH_FORGET, 4, 0, &body)).0, 0);
    }
    // Hiprio-queue style: no writable descriptor at all.
    assert_eq!(
        h.call_chain(&[&request(FUSE_FORGET, 5, 5, forget.as_slice())], &[])
            .0,
        0
    );
}
