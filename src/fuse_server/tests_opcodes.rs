//! Every opcode through the dispatcher: the filesystem's errors reach the guest, random
//! requests never panic, a descriptor across two memory regions is dropped, the counters count.

use fuse_backend_rs::abi::fuse_abi as fa;
use virtio_queue::QueueT;
use vm_memory::{ByteValued, Bytes, GuestAddress, GuestMemoryMmap};

use super::abi::*;
use super::tests::*;

/// A well-formed request for every opcode the dispatcher passes to the filesystem.
fn valid_requests() -> Vec<(u32, Vec<u8>)> {
    let name = b"name\0".as_slice();
    let two = b"old\0new\0".as_slice();
    let fh = 0xdead;
    let getattr = fa::GetattrIn {
        flags: 1,
        dummy: 0,
        fh,
    };
    let read = fa::ReadIn {
        fh,
        size: 4096,
        ..Default::default()
    };
    let write = fa::WriteIn {
        fh,
        size: 5,
        ..Default::default()
    };
    let release = fa::ReleaseIn {
        fh,
        ..Default::default()
    };
    let fsync = fa::FsyncIn {
        fh,
        fsync_flags: 1,
        padding: 0,
    };
    let create = fa::CreateIn {
        flags: libc::O_RDWR as u32,
        mode: 0o644,
        umask: 0o022,
        fuse_flags: 0,
    };
    vec![
        (FUSE_LOOKUP, name.to_vec()),
        (FUSE_GETATTR, getattr.as_slice().to_vec()),
        (FUSE_SETATTR, fa::SetattrIn::default().as_slice().to_vec()),
        (FUSE_READLINK, vec![]),
        (FUSE_SYMLINK, b"name\0/target\0".to_vec()),
        (FUSE_MKNOD, cat(&[fa::MknodIn::default().as_slice(), name])),
        (FUSE_MKDIR, cat(&[fa::MkdirIn::default().as_slice(), name])),
        (FUSE_UNLINK, name.to_vec()),
        (FUSE_RMDIR, name.to_vec()),
        (
            FUSE_RENAME,
            cat(&[fa::RenameIn { newdir: 1 }.as_slice(), two]),
        ),
        (
            FUSE_RENAME2,
            cat(&[
                fa::Rename2In {
                    newdir: 1,
                    flags: libc::RENAME_NOREPLACE,
                    padding: 0,
                }
                .as_slice(),
                two,
            ]),
        ),
        (
            FUSE_LINK,
            cat(&[fa::LinkIn { oldnodeid: 2 }.as_slice(), name]),
        ),
        (FUSE_OPEN, fa::OpenIn::default().as_slice().to_vec()),
        (FUSE_CREATE, cat(&[create.as_slice(), name])),
        (FUSE_TMPFILE, cat(&[create.as_slice(), b"/\0"])),
        (FUSE_READ, read.as_slice().to_vec()),
        (FUSE_WRITE, cat(&[write.as_slice(), b"hello"])),
        (FUSE_FLUSH, fa::FlushIn::default().as_slice().to_vec()),
        (FUSE_RELEASE, release.as_slice().to_vec()),
        (FUSE_FSYNC, fsync.as_slice().to_vec()),
        (FUSE_OPENDIR, fa::OpenIn::default().as_slice().to_vec()),
        (FUSE_READDIR, read.as_slice().to_vec()),
        (FUSE_READDIRPLUS, read.as_slice().to_vec()),
        (FUSE_RELEASEDIR, release.as_slice().to_vec()),
        (FUSE_FSYNCDIR, fsync.as_slice().to_vec()),
        (FUSE_STATFS, vec![]),
        (FUSE_ACCESS, fa::AccessIn::default().as_slice().to_vec()),
        (
            FUSE_FALLOCATE,
            fa::FallocateIn::default().as_slice().to_vec(),
        ),
        (FUSE_LSEEK, fa::LseekIn::default().as_slice().to_vec()),
        (
            FUSE_COPY_FILE_RANGE,
            fa::CopyFileRangeIn::default().as_slice().to_vec(),
        ),
        (FUSE_SYNCFS, SyncfsIn::default().as_slice().to_vec()),
        (FUSE_STATX, StatxIn::default().as_slice().to_vec()),
        (
            FUSE_GETXATTR,
            cat(&[fa::GetxattrIn::default().as_slice(), b"user.a\0"]),
        ),
        (
            FUSE_LISTXATTR,
            fa::GetxattrIn::default().as_slice().to_vec(),
        ),
        (
            FUSE_SETXATTR,
            cat(&[
                fa::SetxattrIn { size: 3, flags: 0 }.as_slice(),
                b"user.a\0abc",
            ]),
        ),
        (FUSE_REMOVEXATTR, b"user.a\0".to_vec()),
    ]
}

/// Every operation on a node ID (and fh) the guest does not hold fails: each request must get
/// an error from the filesystem for its own `unique`, and the very same one whether the request
/// sits in one descriptor or is split over several.
#[test]
fn every_opcode_gets_the_fs_error() {
    let h = Harness::new();
    h.init();
    for (i, (op, body)) in valid_requests().into_iter().enumerate() {
        let unique = 1000 + i as u64;
        let req = request(op, unique, 0xdead_beef, &body);
        let (used, out) = h.call(&req);
        let errno = -out_header(&out).error;
        assert!(errno > 0, "opcode {op} on a bogus node ID must fail");
        assert_error((used, out), unique, errno);
        // The header cut in the middle, the body in pieces, the reply buffer in pieces.
        let (a, rest) = req.split_at(13);
        let (b, c) = rest.split_at(rest.len().min(30));
        let res = h.call_chain(&[a, b, c], &[7, 9, 4096]);
        assert_error(res, unique, errno);
    }
}

#[test]
fn descriptor_spanning_two_regions_is_dropped() {
    let regions = [
        (GuestAddress(0), MEM_SIZE),
        (GuestAddress(MEM_SIZE as u64), 0x10000),
    ];
    let mem: GuestMemoryMmap<()> = GuestMemoryMmap::from_ranges(&regions).unwrap();
    let req = request(FUSE_GETATTR, 5, 1, fa::GetattrIn::default().as_slice());
    let addr = MEM_SIZE as u64 - 8;
    let descs = [
        Desc::readable(READ_BASE, req.len() as u32),
        Desc::writable(addr, 64),
    ];
    mem.write_slice(&req, GuestAddress(READ_BASE)).unwrap();
    let mut q = publish(&mem, &descs);
    let chain = q.pop_descriptor_chain(&mem).unwrap();
    assert_eq!(server().0.handle_chain(&mem, chain), 0);
}

#[test]
fn random_requests_never_panic() {
    let h = Harness::new();
    h.init();
    // A small xorshift generator: deterministic, no dependencies.
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let valid = valid_requests();
    for round in 0..3000 {
        let (op, body) = &valid[(next() % valid.len() as u64) as usize];
        let mut req = request(*op, round, next() % 4, body);
        // Corrupt a few bytes (header fields included), or truncate, or extend.
        for _ in 0..(next() % 4) {
            let at = (next() as usize) % req.len();
            req[at] = next() as u8;
        }
        match next() % 4 {
            0 => req.truncate((next() as usize) % (req.len() + 1)),
            1 => req.extend((0..next() % 64).map(|_| next() as u8)),
            _ => {}
        }
        let reply_len = [0u32, 8, 16, 17, 100, 4096][(next() % 6) as usize];
        let (used, out) = h.call_chain(&[&req], &[reply_len]);
        if used > 0 {
            let hdr = out_header(&out);
            assert_eq!(hdr.len, used);
            assert!(hdr.error <= 0);
        }
    }
}

#[test]
fn statistics() {
    let h = Harness::new();
    h.init();
    h.call(&request(FUSE_STATFS, 2, 1, &[]));
    h.call(&request(FUSE_STATFS, 3, 1, &[]));
    h.call(&request(9999, 4, 1, &[]));
    h.call(&request(7, 5, 1, &[]));
    let stats: Vec<_> = h
        .server
        .stats()
        .iter()
        .map(|s| (s.name, s.count, s.bytes))
        .collect();
    assert_eq!(
        stats,
        vec![("STATFS", 2, 0), ("INIT", 1, 0), ("UNKNOWN", 2, 0)]
    );
}
