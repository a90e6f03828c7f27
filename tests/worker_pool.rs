//! `--thread-pool-size N`: requests of one queue are served by a pool of threads. Many requests in
//! flight on one queue must all be answered, each with its own reply, and slow requests must not
//! hold up fast ones.

mod common;

use std::sync::Arc;
use std::time::Duration;

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

/// mkfifo `path`.
fn mkfifo(path: &std::path::Path) {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid C string.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
}

/// An OPEN of `fifo` (blocks in the daemon until the host opens the FIFO for writing, which a
/// thread does after `after`), followed on the same queue by `fast` GETATTRs of the root; returns
/// the OPEN's latency and the slowest GETATTR's.
fn open_fifo_then_getattrs(
    client: &FuseClient,
    fifo: &std::path::Path,
    node: u64,
    after: Duration,
    fast: usize,
) -> (Duration, Duration) {
    let open = OpenIn {
        flags: libc::O_RDONLY as u32,
        fuse_flags: 0,
    };
    let mut reqs = vec![(client.request(FUSE_OPEN, node, open.as_slice()), 256)];
    for _ in 0..fast {
        reqs.push((
            client.request(FUSE_GETATTR, ROOT, GetattrIn::default().as_slice()),
            256,
        ));
    }
    let writer = {
        let fifo = fifo.to_path_buf();
        std::thread::spawn(move || {
            std::thread::sleep(after);
            std::fs::OpenOptions::new().write(true).open(fifo).unwrap()
        })
    };
    let (replies, latencies) = client.pipeline_timed(&reqs, reqs.len());
    drop(writer.join().unwrap());
    for (i, r) in replies.iter().enumerate() {
        assert!(r.is_ok(), "request {i}: errno {:?}", r.as_ref().err());
    }
    let o: OpenOut = common::fuse_client::from_bytes(replies[0].as_ref().unwrap(), "open_out");
    client.release(node, o.fh, libc::O_RDONLY as u32).unwrap();
    (latencies[0], latencies[1..].iter().copied().max().unwrap())
}

/// A slow request (the host filesystem blocks) does not hold up a queue of fast requests behind
/// it: a backlog of 8 (the daemon's recruit threshold) or more chains brings in pool threads.
/// (A shorter queue behind a slow request waits for it: telling slow requests from fast ones
/// before they finish was tried, by average service time, and cost more than it gave.)
#[test]
fn fast_requests_overtake_a_blocked_one() {
    let share = TempDir::new("pool-fifo").unwrap();
    mkfifo(&share.join("fifo"));
    let sock = TempDir::new("pool-sock").unwrap();
    let socket = sock.join("vhostfs.sock");
    let mut daemon = spawn_vhostfs(&socket, share.path(), &["--thread-pool-size=2"]).unwrap();
    let guest = TestGuest::connect(&socket, 1, 256, 64 << 20).unwrap();
    let client = FuseClient::new(Arc::new(guest), 0);
    client.init().unwrap();
    let node = client.lookup(ROOT, "fifo").unwrap().nodeid;
    let block = Duration::from_millis(300);
    for round in 0..2 {
        let (slow, fast) = open_fifo_then_getattrs(&client, &share.join("fifo"), node, block, 16);
        assert!(
            slow >= block,
            "round {round}: the OPEN of a FIFO blocks: {slow:?}"
        );
        assert!(
            fast < block / 2,
            "round {round}: GETATTRs queued behind a blocked OPEN took {fast:?}"
        );
    }
    assert!(daemon.is_alive());
}
