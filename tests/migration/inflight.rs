//! A request still running when the frontend stops its ring (GET_VRING_BASE, as QEMU does when
//! it stops the VM for the switch-over) is answered before GET_VRING_BASE is: its used entry in
//! the ring, the guest notified, and the base (what the destination starts from) equal to the
//! used index. Before, the answer came at once and the reply was dropped: the guest process
//! waiting for it hung forever on the destination.

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use vhost::VhostBackend;
use vm_memory::ByteValued;

use super::common::fuse_abi::{OpenIn, OpenOut, FUSE_OPEN, ROOT};
use super::common::virtqueue::{VIRTQ_DESC_F_NEXT, VIRTQ_DESC_F_WRITE};
use super::common::{Next, RawDesc, TempDir, TestGuest};
use super::start_on;

/// When the host opens each FIFO for writing (what the daemon's OPEN of it waits for).
const OPENED_AFTER: [Duration; 2] = [Duration::from_millis(600), Duration::from_millis(900)];

fn mkfifo(path: &std::path::Path) {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid C string.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
}

/// `fifos` OPENs of FIFOs (O_RDONLY: each blocks in the daemon until the host opens that FIFO
/// for writing) published at once on request queue 0; GET_VRING_BASE of its vring while they
/// run; the host opens the FIFOs only later. With a pool, the second OPEN runs on a pool thread
/// the stall watcher sends for the chain waiting behind the first.
fn answered_before_get_vring_base(pool: &str, fifos: usize) {
    let shared = TempDir::new("mig-inflight").unwrap();
    let names: Vec<String> = (0..fifos).map(|i| format!("fifo-{i}")).collect();
    for n in &names {
        mkfifo(&shared.join(n));
    }
    let paths: Vec<_> = names.iter().map(|n| shared.join(n)).collect();
    let mut p = start_on(shared, &[pool], None, &[pool]);
    let (nodes, fhs, writers) = {
        let c = p.c();
        let nodes: Vec<u64> = names
            .iter()
            .map(|n| c.lookup(ROOT, n).unwrap().nodeid)
            .collect();
        let guest = Arc::clone(c.guest());
        let (_, _, used_ring) = guest.ring_addrs(0).unwrap();
        let used_idx = |g: &TestGuest| {
            let b = g.memory().read(used_ring + 2, 2);
            u16::from_le_bytes([b[0], b[1]])
        };
        let used_before = used_idx(&guest);
        let open = OpenIn {
            flags: libc::O_RDONLY as u32,
            fuse_flags: 0,
        };
        let reqs: Vec<_> = nodes
            .iter()
            .map(|&n| (c.request(FUSE_OPEN, n, open.as_slice()), 256))
            .collect();
        let start = Instant::now();
        let opener = {
            let client = c.on_queue(0);
            thread::spawn(move || {
                let replies = client.pipeline(&reqs, reqs.len());
                (replies, Instant::now())
            })
        };
        let writers: Vec<_> = paths
            .into_iter()
            .zip(OPENED_AFTER)
            .map(|(path, after)| {
                thread::spawn(move || {
                    thread::sleep(after.saturating_sub(start.elapsed()));
                    // The daemon's OPEN cannot complete before this.
                    let opening = Instant::now();
                    let file = std::fs::OpenOptions::new().write(true).open(path).unwrap();
                    (file, opening)
                })
            })
            .collect::<Vec<_>>();
        // Every OPEN taken by now (the second by a pool thread a tick or two after the first).
        thread::sleep(Duration::from_millis(300));
        let base = guest.frontend().get_vring_base(1).unwrap() as u16;
        let answered = Instant::now();
        let used_at_answer = used_idx(&guest);
        let writers: Vec<_> = writers.into_iter().map(|w| w.join().unwrap()).collect();
        let last_opened = writers.iter().map(|w| w.1).max().unwrap();
        assert!(
            answered >= last_opened,
            "GET_VRING_BASE answered {:?} before the last request in flight could complete",
            last_opened - answered
        );
        let (replies, replied) = opener.join().expect("the OPENs were answered");
        assert_eq!(
            base, used_at_answer,
            "the base GET_VRING_BASE gave is the used index then"
        );
        assert_eq!(
            usize::from(used_at_answer.wrapping_sub(used_before)),
            fifos,
            "every request in flight has its used entry in the ring"
        );
        // Notified: collected well before the test guest's 10 s wait for a notification ran out.
        assert!(
            replied - last_opened < Duration::from_secs(3),
            "the guest was not notified of the replies ({:?} after the last)",
            replied - last_opened
        );
        let fhs: Vec<u64> = replies
            .iter()
            .map(|r| {
                let o: OpenOut =
                    super::common::fuse_client::from_bytes(r.as_ref().unwrap(), "open_out");
                o.fh
            })
            .collect();
        (nodes, fhs, writers)
    };
    // The destination starts from that base and serves on, with the fhs the OPENs returned
    // (the host still holds the FIFOs open for writing: reopening them there does not block).
    p.migrate();
    for (&node, &fh) in nodes.iter().zip(&fhs) {
        p.c().getattr(node, Some(fh)).unwrap();
        p.c().release(node, fh, libc::O_RDONLY as u32).unwrap();
    }
    drop(writers);
}

/// The request runs on the queue's own thread.
#[test]
fn a_request_in_flight_is_answered_before_get_vring_base() {
    answered_before_get_vring_base("--thread-pool-size=0", 1);
}

/// Two requests: one on the queue's thread, one on a pool thread.
#[test]
fn requests_in_flight_on_pool_threads_are_answered_before_get_vring_base() {
    answered_before_get_vring_base("--thread-pool-size=2", 2);
}

/// A request that never completes does not hang the stop: GET_VRING_BASE answers after the
/// daemon's bounded wait (5 s) all the same, and the reply of that request, when it comes, is
/// not written into the stopped ring.
#[test]
fn get_vring_base_waits_for_a_stuck_request_only_so_long() {
    let shared = TempDir::new("mig-stuck").unwrap();
    mkfifo(&shared.join("fifo"));
    let fifo = shared.join("fifo");
    let p = start_on(shared, &[], None, &[]);
    let c = p.c();
    let node = c.lookup(ROOT, "fifo").unwrap().nodeid;
    let guest = Arc::clone(c.guest());
    let (_, _, used_ring) = guest.ring_addrs(0).unwrap();
    let used_idx = || {
        let b = guest.memory().read(used_ring + 2, 2);
        u16::from_le_bytes([b[0], b[1]])
    };
    let used_before = used_idx();
    let open = OpenIn {
        flags: libc::O_RDONLY as u32,
        fuse_flags: 0,
    };
    let req = c.request(FUSE_OPEN, node, open.as_slice());
    let bufs = [
        guest.guest_alloc(req.len()).unwrap(),
        guest.guest_alloc(256).unwrap(),
    ];
    bufs[0].write(0, &req);
    let descs = [
        RawDesc {
            addr: bufs[0].addr(),
            len: req.len() as u32,
            flags: VIRTQ_DESC_F_NEXT,
            next: Next::Auto,
        },
        RawDesc {
            addr: bufs[1].addr(),
            len: 256,
            flags: VIRTQ_DESC_F_WRITE,
            next: Next::Auto,
        },
    ];
    let opener = {
        let guest = Arc::clone(&guest);
        thread::spawn(move || guest.raw_chain(0, &descs, Duration::from_secs(6)).unwrap())
    };
    thread::sleep(Duration::from_millis(200));
    let asked = Instant::now();
    let base = guest.frontend().get_vring_base(1).unwrap() as u16;
    let took = asked.elapsed();
    assert!(
        (Duration::from_secs(5)..Duration::from_secs(7)).contains(&took),
        "GET_VRING_BASE with a request stuck in flight answered after {took:?}"
    );
    assert_eq!(
        base,
        used_before.wrapping_add(1),
        "the base counts the stuck chain as taken"
    );
    // The request completes now, after the stop: its reply is dropped, the ring left alone.
    let writer = std::fs::OpenOptions::new().write(true).open(&fifo).unwrap();
    assert_eq!(opener.join().unwrap(), None, "no reply after the stop");
    thread::sleep(Duration::from_millis(300));
    assert_eq!(
        used_idx(),
        used_before,
        "nothing written into the stopped ring"
    );
    drop(writer);
}
