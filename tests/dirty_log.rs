//! Dirty-page logging for live migration (VHOST_USER_PROTOCOL_F_LOG_SHMFD): while the frontend
//! has set a log (SET_LOG_BASE + VHOST_F_LOG_ALL), every guest page the daemon writes (READ data,
//! small replies, the used ring) is marked dirty, and nothing else is; once the frontend acks
//! features without LOG_ALL (a cancelled migration), nothing is marked any more.

mod common;

use std::collections::BTreeSet;
use std::fs;
use std::time::Duration;

use common::dirty_log::{FrontendLog, LOG_PAGE};
use common::fuse_abi::*;
use common::fuse_client::from_bytes;
use common::virtqueue::{VIRTQ_DESC_F_NEXT, VIRTQ_DESC_F_WRITE};
use common::{FuseClient, GuestBuf, Next, RawDesc, Session};
use vm_memory::ByteValued;

const DATA: usize = 8192;

/// Guest pages, each one on its own: `pages` page-aligned pages from one allocation.
struct Pages {
    buf: GuestBuf,
    first: u64,
}

impl Pages {
    fn new(s: &Session, pages: u64) -> Pages {
        let buf = s
            .client
            .guest()
            .guest_alloc(((pages + 1) * LOG_PAGE) as usize)
            .unwrap();
        let first = buf.addr().div_ceil(LOG_PAGE) * LOG_PAGE;
        Pages { buf, first }
    }
    /// Guest address of page `i`.
    fn at(&self, i: u64) -> u64 {
        self.first + i * LOG_PAGE
    }
    fn write(&self, i: u64, data: &[u8]) {
        self.buf
            .write((self.at(i) - self.buf.addr()) as usize, data);
    }
    fn read(&self, i: u64, len: usize) -> Vec<u8> {
        self.buf.read((self.at(i) - self.buf.addr()) as usize, len)
    }
}

/// Sends `req` (from page 0 of `pages`) with a reply buffer of `reply_len` bytes from page 1;
/// returns the reply bytes.
fn send(s: &Session, pages: &Pages, req: &[u8], reply_len: usize) -> Vec<u8> {
    pages.write(0, req);
    let descs = [
        RawDesc {
            addr: pages.at(0),
            len: req.len() as u32,
            flags: VIRTQ_DESC_F_NEXT,
            next: Next::Auto,
        },
        RawDesc {
            addr: pages.at(1),
            len: reply_len as u32,
            flags: VIRTQ_DESC_F_WRITE,
            next: Next::Auto,
        },
    ];
    let used = s
        .client
        .guest()
        .raw_chain(0, &descs, Duration::from_secs(10))
        .unwrap()
        .expect("a reply");
    let reply = pages.read(1, used as usize);
    assert_eq!(
        FuseClient::parse_reply(req, &reply).map(|b| b.len()),
        Ok(used as usize - 16),
        "reply"
    );
    reply
}

/// The guest pages of `len` bytes from `addr`.
fn pages_of(addr: u64, len: u64) -> BTreeSet<u64> {
    (addr / LOG_PAGE..=(addr + len - 1) / LOG_PAGE).collect()
}

fn read_request(s: &Session, nodeid: u64, fh: u64) -> Vec<u8> {
    let body = ReadIn {
        fh,
        offset: 0,
        size: DATA as u32,
        ..Default::default()
    };
    s.client.request(FUSE_READ, nodeid, body.as_slice())
}

#[test]
fn every_page_the_daemon_writes_is_logged_while_logging() {
    let s = Session::start(&[]);
    let data: Vec<u8> = (0..DATA).map(|i| (i * 7 + 3) as u8).collect();
    fs::write(s.shared.join("data"), &data).unwrap();
    let entry = s.client.lookup(FUSE_ROOT_ID, "data").unwrap();
    let fh = s
        .client
        .open(entry.nodeid, libc::O_RDONLY as u32)
        .unwrap()
        .fh;

    let guest = s.client.guest();
    let log = FrontendLog::start(guest).expect("the daemon accepts a dirty-page log");
    let (_, _, used) = guest.ring_addrs(0).unwrap();
    // The used ring: flags, idx, 256 elements, avail_event.
    let used_pages = pages_of(used, 6 + 8 * 256);
    // Page 0: the request; pages 1-3: the reply (16 + 8192 bytes); page 5 is never used.
    let pages = Pages::new(&s, 6);
    log.clear().unwrap();

    // READ: the data lands in guest memory through the file read (fuse-backend-rs's Writer).
    let reply = send(&s, &pages, &read_request(&s, entry.nodeid, fh), 16 + DATA);
    assert_eq!(&reply[16..], &data[..], "READ data");
    let dirty: BTreeSet<u64> = log.dirty_pages().unwrap().into_iter().collect();
    let reply_pages = pages_of(pages.at(1), 16 + DATA as u64);
    assert!(
        reply_pages.is_subset(&dirty),
        "READ reply pages {reply_pages:?} not all dirty: {dirty:?}"
    );
    assert!(
        dirty.iter().any(|p| used_pages.contains(p)),
        "used ring {used_pages:?} not dirty: {dirty:?}"
    );
    let allowed: BTreeSet<u64> = reply_pages.union(&used_pages).copied().collect();
    assert!(
        dirty.is_subset(&allowed),
        "pages the daemon did not write marked dirty: {:?} (request page {}, spare page {})",
        dirty.difference(&allowed).collect::<Vec<_>>(),
        pages.at(0) / LOG_PAGE,
        pages.at(5) / LOG_PAGE
    );
    assert!(!log.dirty(pages.at(0)).unwrap(), "the request page");
    assert!(!log.dirty(pages.at(5)).unwrap(), "an untouched page");

    // GETATTR: a small reply written from memory.
    log.clear().unwrap();
    let body = GetattrIn::default();
    let req = s
        .client
        .request(FUSE_GETATTR, entry.nodeid, body.as_slice());
    let reply = send(&s, &pages, &req, 16 + std::mem::size_of::<AttrOut>());
    let attr: AttrOut = from_bytes(&reply[16..], "GETATTR");
    assert_eq!(attr.attr.size, DATA as u64);
    let dirty: BTreeSet<u64> = log.dirty_pages().unwrap().into_iter().collect();
    assert!(
        dirty.contains(&(pages.at(1) / LOG_PAGE)),
        "GETATTR reply page: {dirty:?}"
    );
    assert!(
        dirty.iter().any(|p| used_pages.contains(p)),
        "used ring {used_pages:?} not dirty after GETATTR: {dirty:?}"
    );
    assert!(
        !log.dirty(pages.at(2)).unwrap(),
        "a page past the GETATTR reply"
    );

    // Logging ends when the frontend acks features without VHOST_F_LOG_ALL.
    log.stop(guest).unwrap();
    log.clear().unwrap();
    let reply = send(&s, &pages, &read_request(&s, entry.nodeid, fh), 16 + DATA);
    assert_eq!(&reply[16..], &data[..], "READ data after logging ended");
    assert_eq!(
        log.dirty_pages().unwrap(),
        Vec::<u64>::new(),
        "logged after LOG_ALL was cleared"
    );
}

/// A log that does not cover guest memory is refused (SET_LOG_BASE fails) rather than written
/// out of bounds, and the connection is dropped (docs/qemu.md: a bad frontend message).
#[test]
fn a_log_too_small_for_guest_memory_is_refused() {
    let mut s = Session::start(&[]);
    let guest = s.client.guest();
    assert!(
        common::dirty_log::FrontendLog::start_sized(guest, 8).is_err(),
        "SET_LOG_BASE with 8 bytes of log for 64 MiB of guest memory"
    );
    // The daemon could not mark the pages it writes: it drops the connection, as for any
    // message it refuses, and without --keep-listening exits 1 (not 0, not a panic, and not
    // serving on unlogged).
    let status = s.daemon.wait_exit(Duration::from_secs(10)).unwrap();
    assert_eq!(
        status.and_then(|st| st.code()),
        Some(1),
        "the daemon after the refused log: {status:?}"
    );
}
