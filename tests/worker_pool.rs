//! `--thread-pool-size N`: requests of one queue are served by a pool of threads. Many requests in
//! flight on one queue must all be answered, each with its own reply, and slow requests must not
//! hold up fast ones.

mod common;

use std::sync::Arc;

use common::fuse_abi::*;
use common::{spawn_vhostfs, FuseClient, TempDir, TestGuest};
use vm_memory::ByteValued;

const ROOT: u64 = 1;

#[test]
fn pool_serves_many_requests_in_flight_on_one_queue() {
    let share = TempDir::new("pool-share").unwrap();
    for i in 0..200 {
        std::fs::write(share.join(&format!("f{i}")), format!("data {i}")).unwrap();
    }
    let sock = TempDir::new("pool-sock").unwrap();
    let socket = sock.join("vhostfs.sock");
    let mut daemon = spawn_vhostfs(&socket, share.path(), &["--thread-pool-size=4"]).unwrap();
    let guest = TestGuest::connect(&socket, 1, 256, 64 << 20).unwrap();
    let client = FuseClient::new(Arc::new(guest), 0);
    client.init().unwrap();

    // 200 LOOKUPs and 200 GETATTRs of the root, 64 in flight.
    let mut reqs = Vec::new();
    for i in 0..200 {
        reqs.push((
            client.request(FUSE_LOOKUP, ROOT, format!("f{i}\0").as_bytes()),
            256,
        ));
        reqs.push((
            client.request(FUSE_GETATTR, ROOT, GetattrIn::default().as_slice()),
            256,
        ));
    }
    let replies = client.pipeline(&reqs, 64);
    let mut inos = std::collections::HashSet::new();
    for (i, r) in replies.into_iter().enumerate() {
        let body = r.unwrap_or_else(|e| panic!("request {i} failed with errno {e}"));
        if i % 2 == 0 {
            let e: EntryOut = common::fuse_client::from_bytes(&body, "entry_out");
            assert_ne!(e.nodeid, 0);
            inos.insert(e.attr.ino);
        } else {
            let a: AttrOut = common::fuse_client::from_bytes(&body, "attr_out");
            assert_eq!(a.attr.mode & libc::S_IFMT, libc::S_IFDIR);
        }
    }
    assert_eq!(inos.len(), 200, "every LOOKUP got its own file's reply");
    assert!(daemon.is_alive());
}
