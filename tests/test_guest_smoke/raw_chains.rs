//! Chains the test guest lays out descriptor by descriptor: a request split over two readable
//! descriptors, an indirect table, and a buffer outside guest memory.

use std::time::Duration;

use super::common::fuse_abi::*;
use super::common::FuseClient;
use super::setup;

#[test]
fn raw_chains_direct_and_indirect() {
    use super::common::frontend::VIRTIO_RING_F_INDIRECT_DESC;
    use super::common::virtqueue::{VIRTQ_DESC_F_INDIRECT, VIRTQ_DESC_F_NEXT, VIRTQ_DESC_F_WRITE};
    use super::common::{Next, RawDesc};

    let s = setup();
    let c = &s.client;
    let guest = c.guest();
    let body = GetattrIn::default();
    let req = c.request(
        FUSE_GETATTR,
        FUSE_ROOT_ID,
        vm_memory::ByteValued::as_slice(&body),
    );
    let reply_len = 16 + std::mem::size_of::<AttrOut>();
    let req_buf = guest.guest_alloc(req.len()).unwrap();
    req_buf.write(0, &req);
    let reply_buf = guest.guest_alloc(reply_len).unwrap();

    // The request split over two readable descriptors, then the writable reply.
    let descs = [
        RawDesc {
            addr: req_buf.addr(),
            len: 40,
            flags: VIRTQ_DESC_F_NEXT,
            next: Next::Auto,
        },
        RawDesc {
            addr: req_buf.addr() + 40,
            len: (req.len() - 40) as u32,
            flags: VIRTQ_DESC_F_NEXT,
            next: Next::Auto,
        },
        RawDesc {
            addr: reply_buf.addr(),
            len: reply_len as u32,
            flags: VIRTQ_DESC_F_WRITE,
            next: Next::Auto,
        },
    ];
    let used = guest.raw_chain(0, &descs, Duration::from_secs(5)).unwrap();
    assert_eq!(used, Some(reply_len as u32));
    let reply = reply_buf.read(0, reply_len);
    let attr = FuseClient::parse_reply(&req, &reply).unwrap();
    assert_eq!(attr.len(), std::mem::size_of::<AttrOut>());

    // The same through an indirect table (virtiofsd offers VIRTIO_RING_F_INDIRECT_DESC).
    assert_ne!(guest.features() & VIRTIO_RING_F_INDIRECT_DESC, 0);
    let req = c.request(
        FUSE_GETATTR,
        FUSE_ROOT_ID,
        vm_memory::ByteValued::as_slice(&body),
    );
    req_buf.write(0, &req);
    let table = guest.guest_alloc(32).unwrap();
    let d0 = RawDesc::encode(req_buf.addr(), req.len() as u32, VIRTQ_DESC_F_NEXT, 1);
    let d1 = RawDesc::encode(reply_buf.addr(), reply_len as u32, VIRTQ_DESC_F_WRITE, 0);
    table.write(0, &d0);
    table.write(16, &d1);
    let indirect = [RawDesc {
        addr: table.addr(),
        len: 32,
        flags: VIRTQ_DESC_F_INDIRECT,
        next: Next::Auto,
    }];
    let used = guest
        .raw_chain(0, &indirect, Duration::from_secs(5))
        .unwrap();
    assert_eq!(used, Some(reply_len as u32));
    let reply = reply_buf.read(0, reply_len);
    FuseClient::parse_reply(&req, &reply).unwrap();
}

#[test]
fn raw_chain_outside_guest_memory() {
    use super::common::virtqueue::VIRTQ_DESC_F_WRITE;
    use super::common::{Next, RawDesc};

    let s = setup();
    let guest = s.client.guest();
    let descs = [RawDesc {
        addr: guest.memory().size() + (1 << 30),
        len: 4096,
        flags: VIRTQ_DESC_F_WRITE,
        next: Next::Auto,
    }];
    // The reference daemon neither completes the chain nor survives it ("no memory region for
    // this address range", then exit); the raw path reports the timeout as `None`.
    let used = guest.raw_chain(0, &descs, Duration::from_secs(2)).unwrap();
    assert_eq!(used, None);
    let mut daemon = s.daemon;
    assert!(
        daemon.wait_exit(Duration::from_secs(5)).unwrap().is_some(),
        "virtiofsd survived a descriptor outside guest memory"
    );
}
