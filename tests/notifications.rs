//! Used-ring notifications: the daemon notifies the guest of completions in batches while more
//! requests wait, never loses the notification a guest asked for, and answers every request.

mod common;

use std::sync::Arc;

use common::fuse_abi::*;
use common::{spawn_vhostfs, FuseClient, GuestOptions, TempDir, TestGuest};
use vm_memory::ByteValued;

const BURST: usize = 64;

/// Sends one burst of `n` GETATTRs of the root to a fresh daemon started with `extra`;
/// returns how many notifications the guest got for it.
fn getattr_burst(extra: &[&str], event_idx: bool, n: usize) -> u64 {
    burst(extra, event_idx, |client| {
        (0..n)
            .map(|_| {
                let body = GetattrIn::default();
                (client.request(FUSE_GETATTR, ROOT, body.as_slice()), 256)
            })
            .collect()
    })
}

/// [`getattr_burst`] of `BURST` requests.
fn burst_notifications(extra: &[&str], event_idx: bool) -> u64 {
    getattr_burst(extra, event_idx, BURST)
}

/// Connects a guest to a fresh daemon started with `extra`, sends the requests `make` builds in
/// one burst and checks that each succeeded; returns how many notifications the guest got.
fn burst(
    extra: &[&str],
    event_idx: bool,
    make: impl Fn(&FuseClient) -> Vec<(Vec<u8>, usize)>,
) -> u64 {
    let share = TempDir::new("notify-share").unwrap();
    let sock = TempDir::new("notify-sock").unwrap();
    let socket = sock.join("vhostfs.sock");
    let mut daemon = spawn_vhostfs(&socket, share.path(), extra).unwrap();
    let mut opts = GuestOptions::new(1, 256, 64 << 20);
    opts.event_idx = event_idx;
    let guest = Arc::new(TestGuest::connect_with(&socket, &opts).unwrap());
    let client = FuseClient::new(guest.clone(), 0);
    client.init().unwrap();

    let reqs = make(&client);
    let (replies, notifications) = guest.burst(0, &reqs).unwrap();
    for (req, reply) in reqs.iter().zip(&replies) {
        FuseClient::parse_reply(&req.0, reply).expect("request failed");
    }
    assert!(daemon.is_alive(), "daemon died");
    notifications
}

#[test]
fn a_burst_of_requests_is_answered_with_a_few_notifications() {
    // Without EVENT_IDX every notification the daemon sends reaches the guest: one per request
    // would be 64.
    for extra in [&[][..], &["--thread-pool-size=0"][..]] {
        let n = burst_notifications(extra, false);
        assert!(
            (1..=BURST as u64 / 4).contains(&n),
            "{extra:?}: {n} notifications for {BURST} requests"
        );
    }
}

#[test]
fn a_guest_with_sixteen_in_flight_hears_of_completions_early() {
    // A guest's usual depth: it must learn of the first completions while half its requests
    // still wait, to refill its ring before it runs dry (one batch of 16 left it idle until
    // all 16 were answered: 2 notifications). The first completion of a drain is notified at
    // once, so the guest's wake-up overlaps with the rest of the drain; then half of what
    // waits makes a batch, at least 8 entries: notified at 1, at 9, at the last pop (15) and
    // at 16, at least 4 notifications.
    for extra in [&[][..], &["--thread-pool-size=0"][..]] {
        let n = getattr_burst(extra, false, 16);
        assert!(
            (4..=16).contains(&n),
            "{extra:?}: {n} notifications for 16 requests"
        );
    }
}

#[test]
fn the_notification_the_guest_asked_for_arrives() {
    // With EVENT_IDX the guest asks for a notification at the last completion only: exactly
    // one must come, whatever batching the daemon does.
    for extra in [&[][..], &["--thread-pool-size=0"][..]] {
        assert_eq!(burst_notifications(extra, true), 1, "{extra:?}");
    }
}

#[test]
fn bulk_writes_are_notified_one_by_one() {
    // The guest has to fill the next buffers of a stream of large WRITEs: each completion is
    // notified at once, not held for a batch.
    const WRITES: usize = 8;
    let n = burst(&[], false, |client| {
        let (e, o) = client
            .create(ROOT, "big", libc::S_IFREG | 0o644, libc::O_WRONLY as u32, 0)
            .unwrap();
        let data = vec![7u8; 128 << 10];
        (0..WRITES as u64)
            .map(|k| {
                let body = FuseClient::write_body(o.fh, k * data.len() as u64, &data);
                (client.request(FUSE_WRITE, e.nodeid, &body), 256)
            })
            .collect()
    });
    assert_eq!(
        n, WRITES as u64,
        "notifications for {WRITES} WRITEs of 128 KiB"
    );
}
