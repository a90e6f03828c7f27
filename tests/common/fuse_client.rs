//! `FuseClient`: typed FUSE requests and replies over a [`TestGuest`] request queue, as a
//! Linux 6.12 virtio-fs driver would send them (FORGET, BATCH_FORGET and INTERRUPT go to the
//! hiprio queue without a reply buffer, everything else to the client's request queue).
//!
//! Error replies come back as `Err(errno)` (positive). Transport failures (timeouts, malformed
//! replies: wrong length or unique) panic: they are test failures, not FUSE results.

mod dirs;
mod entries;
mod files;
mod session;
mod xattrs;

use std::ffi::CString;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use vm_memory::ByteValued;

use super::frontend::TestGuest;
use super::fuse_abi::*;
use super::guest_memory::GuestBuf;
use super::virtqueue::{Next, RawDesc, VIRTQ_DESC_F_NEXT, VIRTQ_DESC_F_WRITE};

/// Request ids, shared by all clients; step 2 as in Linux (odd ids are for interrupts).
static UNIQUE: AtomicU64 = AtomicU64::new(2);

/// Reply space for requests whose reply is a header only.
const HDR: usize = std::mem::size_of::<OutHeader>();
/// Page size of the guest, for buffers laid out as Linux lays out file data.
const PAGE: usize = 4096;

/// One directory entry of READDIR.
#[derive(Clone, Debug)]
pub struct DirEntry {
    pub ino: u64,
    pub off: u64,
    pub type_: u32,
    pub name: Vec<u8>,
}

/// One directory entry of READDIRPLUS.
#[derive(Clone, Debug)]
pub struct DirEntryPlus {
    pub entry: EntryOut,
    pub dirent: DirEntry,
}

/// Reply of GETXATTR/LISTXATTR: the size needed (request size 0) or the data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum XattrReply {
    Size(u32),
    Data(Vec<u8>),
}

/// Replies of [`FuseClient::pipeline_capped`]: `(body length, first bytes of the body)` or the
/// errno, per request; and the latencies.
pub type PipelinedReplies = (Vec<Result<(usize, Vec<u8>), i32>>, Vec<std::time::Duration>);

/// Typed FUSE client on one request queue of a [`TestGuest`]; one per thread for multi-queue use.
pub struct FuseClient {
    guest: Arc<TestGuest>,
    queue: usize,
    /// Flags accepted by the daemon in INIT (flags | flags2 << 32); 0 before `init`.
    flags: AtomicU64,
    uid: u32,
    gid: u32,
    pid: u32,
}

/// Copy a `T` out of the start of `bytes` (panics naming `what` if `bytes` is too short).
pub fn from_bytes<T: ByteValued + Default>(bytes: &[u8], what: &str) -> T {
    let n = std::mem::size_of::<T>();
    assert!(
        bytes.len() >= n,
        "{what}: reply body of {} bytes, expected at least {n}",
        bytes.len()
    );
    let mut t = T::default();
    t.as_mut_slice().copy_from_slice(&bytes[..n]);
    t
}

fn cstr(name: &str) -> Vec<u8> {
    CString::new(name)
        .expect("name contains NUL")
        .into_bytes_with_nul()
}

fn parse_dirent(buf: &[u8]) -> Option<(DirEntry, usize)> {
    let d: Dirent = from_bytes(buf.get(..24)?, "dirent");
    let name = buf.get(24..24 + d.namelen as usize)?.to_vec();
    let len = (24 + d.namelen as usize).div_ceil(8) * 8;
    Some((
        DirEntry {
            ino: d.ino,
            off: d.off,
            type_: d.type_,
            name,
        },
        len,
    ))
}

/// Parse a READDIR reply body.
pub fn parse_readdir(mut buf: &[u8]) -> Vec<DirEntry> {
    let mut out = Vec::new();
    while let Some((d, len)) = parse_dirent(buf) {
        out.push(d);
        buf = buf.get(len..).unwrap_or_default();
    }
    out
}

/// Parse a READDIRPLUS reply body.
pub fn parse_readdirplus(mut buf: &[u8]) -> Vec<DirEntryPlus> {
    let e = std::mem::size_of::<EntryOut>();
    let mut out = Vec::new();
    while buf.len() >= e {
        let entry: EntryOut = from_bytes(&buf[..e], "direntplus");
        let Some((dirent, len)) = parse_dirent(&buf[e..]) else {
            break;
        };
        out.push(DirEntryPlus { entry, dirent });
        buf = buf.get(e + len..).unwrap_or_default();
    }
    out
}

impl FuseClient {
    /// A client on request queue `queue` of `guest`, with the test process's uid/gid/pid.
    pub fn new(guest: Arc<TestGuest>, queue: usize) -> FuseClient {
        // SAFETY: getuid/getgid cannot fail.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        FuseClient {
            guest,
            queue,
            flags: AtomicU64::new(0),
            uid,
            gid,
            pid: std::process::id(),
        }
    }

    /// Another client on `queue` of the same guest, sharing the negotiated INIT flags.
    pub fn on_queue(&self, queue: usize) -> FuseClient {
        let c = FuseClient::new(Arc::clone(&self.guest), queue);
        c.flags.store(self.flags(), Ordering::Relaxed);
        c
    }

    /// Another client on the same queue whose requests carry `uid`/`gid` in the fuse_in_header
    /// (a guest process with those credentials), sharing the negotiated INIT flags.
    pub fn with_creds(&self, uid: u32, gid: u32) -> FuseClient {
        let mut c = self.on_queue(self.queue);
        c.uid = uid;
        c.gid = gid;
        c
    }

    /// A client on `queue` of `guest` whose session negotiated `flags` already (a session a
    /// migration moved there).
    pub fn resumed(guest: Arc<TestGuest>, queue: usize, flags: u64) -> FuseClient {
        let c = FuseClient::new(guest, queue);
        c.flags.store(flags, Ordering::Relaxed);
        c
    }

    pub fn guest(&self) -> &Arc<TestGuest> {
        &self.guest
    }
    pub fn queue(&self) -> usize {
        self.queue
    }
    /// INIT flags the daemon accepted (flags | flags2 << 32).
    pub fn flags(&self) -> u64 {
        self.flags.load(Ordering::Relaxed)
    }

    /// A fresh request id.
    pub fn next_unique() -> u64 {
        UNIQUE.fetch_add(2, Ordering::Relaxed)
    }

    /// Build a request (fuse_in_header + `body`) with a fresh unique; `extlen` is the size of
    /// request extensions at the end of `body` in 8-byte units (fuse_in_header.total_extlen).
    pub fn request_with_ext(&self, opcode: u32, nodeid: u64, body: &[u8], extlen: u16) -> Vec<u8> {
        self.request_with_unique(Self::next_unique(), opcode, nodeid, body, extlen)
    }

    /// Build a request (fuse_in_header + `body`) with a fresh unique.
    pub fn request(&self, opcode: u32, nodeid: u64, body: &[u8]) -> Vec<u8> {
        self.request_with_ext(opcode, nodeid, body, 0)
    }

    fn request_with_unique(
        &self,
        unique: u64,
        opcode: u32,
        nodeid: u64,
        body: &[u8],
        extlen: u16,
    ) -> Vec<u8> {
        let hdr = InHeader {
            len: (std::mem::size_of::<InHeader>() + body.len()) as u32,
            opcode,
            unique,
            nodeid,
            uid: self.uid,
            gid: self.gid,
            pid: self.pid,
            // fuse-backend-rs calls `total_extlen: u16, padding: u16` a single u32 `padding`.
            padding: u32::from(extlen),
        };
        let mut req = hdr.as_slice().to_vec();
        req.extend_from_slice(body);
        req
    }

    /// Check a reply (fuse_out_header + body) against `request` and split it.
    pub fn parse_reply(request: &[u8], reply: &[u8]) -> Result<Vec<u8>, i32> {
        Self::parse_head(request, reply, reply.len()).map(|(_, body)| body)
    }

    /// Checks the reply to `request`, of which `head` is the first bytes and `len` the used
    /// length; returns the body length and the body bytes in `head`, or the errno.
    fn parse_head(request: &[u8], head: &[u8], len: usize) -> Result<(usize, Vec<u8>), i32> {
        let unique = u64::from_le_bytes(request[8..16].try_into().unwrap());
        let out: OutHeader = from_bytes(head, "fuse_out_header");
        assert_eq!(
            out.len as usize, len,
            "fuse_out_header.len differs from the used length"
        );
        assert_eq!(
            out.unique, unique,
            "reply unique differs from the request's"
        );
        if out.error != 0 {
            assert!(out.error < 0 && len == HDR, "bad error reply {out:?}");
            return Err(-out.error);
        }
        Ok((len - HDR, head[HDR..].to_vec()))
    }

    fn call(
        &self,
        opcode: u32,
        nodeid: u64,
        body: &[u8],
        extlen: u16,
        reply_len: usize,
    ) -> Result<Vec<u8>, i32> {
        let req = self.request_with_ext(opcode, nodeid, body, extlen);
        let reply = self
            .guest
            .roundtrip(self.queue, &req, reply_len)
            .unwrap_or_else(|e| panic!("opcode {opcode} on queue {}: {e}", self.queue));
        Self::parse_reply(&req, &reply)
    }

    /// Send `opcode` with `body` to `nodeid`; returns the reply body or the error.
    pub fn raw(
        &self,
        opcode: u32,
        nodeid: u64,
        body: &[u8],
        reply_len: usize,
    ) -> Result<Vec<u8>, i32> {
        self.call(opcode, nodeid, body, 0, reply_len)
    }

    /// A request that expects no reply, on the hiprio queue (device-readable buffer only).
    fn no_reply(&self, opcode: u32, nodeid: u64, body: &[u8]) {
        let req = self.request(opcode, nodeid, body);
        let reply = self
            .guest
            .hiprio_roundtrip(&req, 0)
            .unwrap_or_else(|e| panic!("opcode {opcode} on the hiprio queue: {e}"));
        assert!(reply.is_empty(), "opcode {opcode} got a reply");
    }

    /// Many requests in flight: `requests` are `(request built with [`FuseClient::request`],
    /// reply_len)`, at most `depth` outstanding; replies parsed, in request order.
    pub fn pipeline(
        &self,
        requests: &[(Vec<u8>, usize)],
        depth: usize,
    ) -> Vec<Result<Vec<u8>, i32>> {
        self.pipeline_timed(requests, depth).0
    }

    /// [`FuseClient::pipeline`], also returning each request's latency (see
    /// [`TestGuest::pipeline_timed`]).
    pub fn pipeline_timed(
        &self,
        requests: &[(Vec<u8>, usize)],
        depth: usize,
    ) -> (Vec<Result<Vec<u8>, i32>>, Vec<std::time::Duration>) {
        let (replies, latencies) = self
            .guest
            .pipeline_timed(self.queue, requests, depth)
            .unwrap_or_else(|e| panic!("pipeline on queue {}: {e}", self.queue));
        let parsed = requests
            .iter()
            .zip(replies)
            .map(|((req, _), reply)| Self::parse_reply(req, &reply))
            .collect();
        (parsed, latencies)
    }

    /// [`FuseClient::pipeline_timed`] for replies with bulk data (READ): only the reply header and
    /// the first `keep` bytes of the body are copied out of guest memory; each reply is
    /// `(body length, first bytes of the body)`.
    pub fn pipeline_capped(
        &self,
        requests: &[(Vec<u8>, usize)],
        depth: usize,
        keep: usize,
    ) -> PipelinedReplies {
        let p = self
            .guest
            .pipeline_capped(self.queue, requests, depth, HDR.saturating_add(keep))
            .unwrap_or_else(|e| panic!("pipeline on queue {}: {e}", self.queue));
        let parsed = requests
            .iter()
            .zip(p.replies.iter().zip(&p.lens))
            .map(|((req, _), (head, &len))| Self::parse_head(req, head, len))
            .collect();
        (parsed, p.latencies)
    }

    /// The security context extension a Linux guest appends to creating requests once
    /// FUSE_SECURITY_CTX is negotiated (no LSM label: a bare header), and its length in 8-byte units.
    pub fn create_ext(&self) -> (Vec<u8>, u16) {
        if self.flags() & FUSE_SECURITY_CTX == 0 {
            return (Vec::new(), 0);
        }
        let h = SecctxHeader {
            size: std::mem::size_of::<SecctxHeader>() as u32,
            nr_secctx: 0,
        };
        (h.as_slice().to_vec(), 1)
    }

    fn create_call(
        &self,
        opcode: u32,
        nodeid: u64,
        mut body: Vec<u8>,
        reply_len: usize,
    ) -> Result<Vec<u8>, i32> {
        let (ext, extlen) = self.create_ext();
        body.extend_from_slice(&ext);
        self.call(opcode, nodeid, &body, extlen, reply_len)
    }
}
