//! `FuseClient`: typed FUSE requests and replies over a [`TestGuest`] request queue, as a
//! Linux 6.12 virtio-fs driver would send them (FORGET, BATCH_FORGET and INTERRUPT go to the
//! hiprio queue without a reply buffer, everything else to the client's request queue).
//!
//! Error replies come back as `Err(errno)` (positive). Transport failures (timeouts, malformed
//! replies: wrong length or unique) panic: they are test failures, not FUSE results.

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

    /// FUSE_INIT 7.38 with the flags of a Linux 6.12 virtio-fs driver; remembers what the daemon
    /// accepted.
    pub fn init(&self) -> Result<InitOut, i32> {
        self.init_with(LINUX_6_12_VIRTIOFS_INIT_FLAGS)
    }

    /// FUSE_INIT 7.38 with `flags` (flags | flags2 << 32).
    pub fn init_with(&self, flags: u64) -> Result<InitOut, i32> {
        let init = InitIn {
            major: FUSE_KERNEL_VERSION,
            minor: FUSE_KERNEL_MINOR_VERSION,
            max_readahead: LINUX_MAX_READAHEAD,
            flags: flags as u32,
            flags2: (flags >> 32) as u32,
            unused: [0; 11],
        };
        let body = self.raw(FUSE_INIT, 0, init.as_slice(), HDR + 64)?;
        let out: InitOut = from_bytes(&body, "INIT");
        let mut accepted = u64::from(out.flags);
        if accepted & FUSE_INIT_EXT != 0 {
            accepted |= u64::from(out.flags2) << 32;
        }
        self.flags.store(accepted, Ordering::Relaxed);
        Ok(out)
    }

    pub fn lookup(&self, parent: u64, name: &str) -> Result<EntryOut, i32> {
        let body = self.raw(FUSE_LOOKUP, parent, &cstr(name), HDR + 128)?;
        Ok(from_bytes(&body, "LOOKUP"))
    }

    /// FORGET on the hiprio queue: no reply, the chain is completed with used length 0.
    pub fn forget(&self, nodeid: u64, nlookup: u64) {
        self.no_reply(FUSE_FORGET, nodeid, ForgetIn { nlookup }.as_slice());
    }

    /// BATCH_FORGET of `(nodeid, nlookup)` pairs on the hiprio queue.
    pub fn batch_forget(&self, items: &[(u64, u64)]) {
        let head = BatchForgetIn {
            count: items.len() as u32,
            dummy: 0,
        };
        let mut body = head.as_slice().to_vec();
        for &(nodeid, nlookup) in items {
            body.extend_from_slice(ForgetOne { nodeid, nlookup }.as_slice());
        }
        self.no_reply(FUSE_BATCH_FORGET, 0, &body);
    }

    /// INTERRUPT of request `unique` on the hiprio queue (no reply expected).
    pub fn interrupt(&self, unique: u64) {
        self.no_reply(FUSE_INTERRUPT, 0, InterruptIn { unique }.as_slice());
    }

    /// GETATTR, with `fh` set (FUSE_GETATTR_FH) if given.
    pub fn getattr(&self, nodeid: u64, fh: Option<u64>) -> Result<AttrOut, i32> {
        let inp = GetattrIn {
            flags: u32::from(fh.is_some()),
            dummy: 0,
            fh: fh.unwrap_or(0),
        };
        let body = self.raw(FUSE_GETATTR, nodeid, inp.as_slice(), HDR + 104)?;
        Ok(from_bytes(&body, "GETATTR"))
    }

    pub fn setattr(&self, nodeid: u64, attr: &SetattrIn) -> Result<AttrOut, i32> {
        let body = self.raw(FUSE_SETATTR, nodeid, attr.as_slice(), HDR + 104)?;
        Ok(from_bytes(&body, "SETATTR"))
    }

    pub fn readlink(&self, nodeid: u64) -> Result<Vec<u8>, i32> {
        self.raw(FUSE_READLINK, nodeid, &[], HDR + 4096)
    }

    pub fn symlink(&self, parent: u64, name: &str, target: &str) -> Result<EntryOut, i32> {
        let mut body = cstr(name);
        body.extend_from_slice(&cstr(target));
        let body = self.create_call(FUSE_SYMLINK, parent, body, HDR + 128)?;
        Ok(from_bytes(&body, "SYMLINK"))
    }

    pub fn mknod(
        &self,
        parent: u64,
        name: &str,
        mode: u32,
        rdev: u32,
        umask: u32,
    ) -> Result<EntryOut, i32> {
        let inp = MknodIn {
            mode,
            rdev,
            umask,
            padding: 0,
        };
        let mut body = inp.as_slice().to_vec();
        body.extend_from_slice(&cstr(name));
        let body = self.create_call(FUSE_MKNOD, parent, body, HDR + 128)?;
        Ok(from_bytes(&body, "MKNOD"))
    }

    pub fn mkdir(&self, parent: u64, name: &str, mode: u32, umask: u32) -> Result<EntryOut, i32> {
        let mut body = MkdirIn { mode, umask }.as_slice().to_vec();
        body.extend_from_slice(&cstr(name));
        let body = self.create_call(FUSE_MKDIR, parent, body, HDR + 128)?;
        Ok(from_bytes(&body, "MKDIR"))
    }

    pub fn unlink(&self, parent: u64, name: &str) -> Result<(), i32> {
        self.raw(FUSE_UNLINK, parent, &cstr(name), HDR).map(drop)
    }

    pub fn rmdir(&self, parent: u64, name: &str) -> Result<(), i32> {
        self.raw(FUSE_RMDIR, parent, &cstr(name), HDR).map(drop)
    }

    pub fn rename(
        &self,
        olddir: u64,
        oldname: &str,
        newdir: u64,
        newname: &str,
    ) -> Result<(), i32> {
        let mut body = RenameIn { newdir }.as_slice().to_vec();
        body.extend_from_slice(&cstr(oldname));
        body.extend_from_slice(&cstr(newname));
        self.raw(FUSE_RENAME, olddir, &body, HDR).map(drop)
    }

    /// RENAME2 with `flags` (RENAME_NOREPLACE, RENAME_EXCHANGE, RENAME_WHITEOUT).
    pub fn rename2(
        &self,
        olddir: u64,
        oldname: &str,
        newdir: u64,
        newname: &str,
        flags: u32,
    ) -> Result<(), i32> {
        let inp = Rename2In {
            newdir,
            flags,
            padding: 0,
        };
        let mut body = inp.as_slice().to_vec();
        body.extend_from_slice(&cstr(oldname));
        body.extend_from_slice(&cstr(newname));
        self.raw(FUSE_RENAME2, olddir, &body, HDR).map(drop)
    }

    pub fn link(&self, oldnodeid: u64, newparent: u64, newname: &str) -> Result<EntryOut, i32> {
        let mut body = LinkIn { oldnodeid }.as_slice().to_vec();
        body.extend_from_slice(&cstr(newname));
        let body = self.raw(FUSE_LINK, newparent, &body, HDR + 128)?;
        Ok(from_bytes(&body, "LINK"))
    }

    pub fn open(&self, nodeid: u64, flags: u32) -> Result<OpenOut, i32> {
        let inp = OpenIn {
            flags,
            fuse_flags: 0,
        };
        let body = self.raw(FUSE_OPEN, nodeid, inp.as_slice(), HDR + 16)?;
        Ok(from_bytes(&body, "OPEN"))
    }

    fn create_like(
        &self,
        opcode: u32,
        parent: u64,
        name: &str,
        mode: u32,
        flags: u32,
        umask: u32,
    ) -> Result<(EntryOut, OpenOut), i32> {
        let inp = CreateIn {
            flags,
            mode,
            umask,
            fuse_flags: 0,
        };
        let mut body = inp.as_slice().to_vec();
        body.extend_from_slice(&cstr(name));
        let body = self.create_call(opcode, parent, body, HDR + 128 + 16)?;
        Ok((
            from_bytes(&body, "CREATE entry"),
            from_bytes(&body[128..], "CREATE open"),
        ))
    }

    pub fn create(
        &self,
        parent: u64,
        name: &str,
        mode: u32,
        flags: u32,
        umask: u32,
    ) -> Result<(EntryOut, OpenOut), i32> {
        self.create_like(FUSE_CREATE, parent, name, mode, flags, umask)
    }

    /// TMPFILE in `parent` (the name is "/", as for the dentry of a Linux O_TMPFILE open).
    pub fn tmpfile(
        &self,
        parent: u64,
        mode: u32,
        flags: u32,
        umask: u32,
    ) -> Result<(EntryOut, OpenOut), i32> {
        self.create_like(FUSE_TMPFILE, parent, "/", mode, flags, umask)
    }

    pub fn read(&self, nodeid: u64, fh: u64, offset: u64, size: u32) -> Result<Vec<u8>, i32> {
        let inp = ReadIn {
            fh,
            offset,
            size,
            ..Default::default()
        };
        self.raw(FUSE_READ, nodeid, inp.as_slice(), HDR + size as usize)
    }

    /// The body of a WRITE of `data` at `offset` of `fh`.
    pub fn write_body(fh: u64, offset: u64, data: &[u8]) -> Vec<u8> {
        let inp = WriteIn {
            fh,
            offset,
            size: data.len() as u32,
            ..Default::default()
        };
        let mut body = inp.as_slice().to_vec();
        body.extend_from_slice(data);
        body
    }

    /// WRITE; returns the number of bytes written.
    pub fn write(&self, nodeid: u64, fh: u64, offset: u64, data: &[u8]) -> Result<u32, i32> {
        let body = Self::write_body(fh, offset, data);
        let out: WriteOut = from_bytes(&self.raw(FUSE_WRITE, nodeid, &body, HDR + 8)?, "WRITE");
        Ok(out.size)
    }

    /// A guest buffer of `len` bytes at a page-aligned guest address (so page-aligned in the
    /// daemon's mapping too): the buffer holding it and that address.
    fn page_buf(&self, len: usize) -> (GuestBuf, u64) {
        let buf = self
            .guest
            .guest_alloc(len + PAGE - 1)
            .expect("guest memory");
        let addr = buf.addr().next_multiple_of(PAGE as u64);
        (buf, addr)
    }

    /// Sends the chain `descs` (device-readable `request` first, in one descriptor) and
    /// returns the used length.
    fn chain(&self, request: &GuestBuf, descs: &[(u64, usize, u16)]) -> usize {
        let mut all = vec![RawDesc {
            addr: request.addr(),
            len: request.len() as u32,
            flags: VIRTQ_DESC_F_NEXT,
            next: Next::Auto,
        }];
        for (i, &(addr, len, flags)) in descs.iter().enumerate() {
            let more = if i + 1 < descs.len() {
                VIRTQ_DESC_F_NEXT
            } else {
                0
            };
            all.push(RawDesc {
                addr,
                len: len as u32,
                flags: flags | more,
                next: Next::Auto,
            });
        }
        self.guest
            .raw_chain(self.queue, &all, Duration::from_secs(10))
            .expect("raw chain")
            .expect("no reply within 10 s") as usize
    }

    /// WRITE laid out as a Linux guest lays it out: the headers in one descriptor, the data in a
    /// page-aligned one of its own (what O_DIRECT on the host needs). Returns the bytes written.
    pub fn write_paged(&self, nodeid: u64, fh: u64, offset: u64, data: &[u8]) -> Result<u32, i32> {
        let inp = WriteIn {
            fh,
            offset,
            size: data.len() as u32,
            ..Default::default()
        };
        // The header's length counts the data, which goes in a descriptor of its own.
        let mut req = self.request(FUSE_WRITE, nodeid, &[inp.as_slice(), data].concat());
        req.truncate(req.len() - data.len());
        let req_buf = self.guest.guest_alloc(req.len()).expect("guest memory");
        req_buf.write(0, &req);
        let (_page, addr) = self.page_buf(data.len());
        self.guest.memory().write(addr, data);
        let reply = self.guest.guest_alloc(HDR + 8).expect("guest memory");
        let used = self.chain(
            &req_buf,
            &[
                (addr, data.len(), 0),
                (reply.addr(), HDR + 8, VIRTQ_DESC_F_WRITE),
            ],
        );
        let out: WriteOut = from_bytes(&Self::parse_reply(&req, &reply.read(0, used))?, "WRITE");
        Ok(out.size)
    }

    /// READ laid out as a Linux guest lays it out: the reply header in one descriptor, the data
    /// in a page-aligned one of its own.
    pub fn read_paged(&self, nodeid: u64, fh: u64, offset: u64, size: u32) -> Result<Vec<u8>, i32> {
        let inp = ReadIn {
            fh,
            offset,
            size,
            ..Default::default()
        };
        let req = self.request(FUSE_READ, nodeid, inp.as_slice());
        let req_buf = self.guest.guest_alloc(req.len()).expect("guest memory");
        req_buf.write(0, &req);
        let header = self.guest.guest_alloc(HDR).expect("guest memory");
        let (_page, addr) = self.page_buf(size as usize);
        let used = self.chain(
            &req_buf,
            &[
                (header.addr(), HDR, VIRTQ_DESC_F_WRITE),
                (addr, size as usize, VIRTQ_DESC_F_WRITE),
            ],
        );
        let mut reply = header.read(0, HDR.min(used));
        reply.extend(self.guest.memory().read(addr, used.saturating_sub(HDR)));
        Self::parse_reply(&req, &reply)
    }

    pub fn flush(&self, nodeid: u64, fh: u64, lock_owner: u64) -> Result<(), i32> {
        let inp = FlushIn {
            fh,
            lock_owner,
            ..Default::default()
        };
        self.raw(FUSE_FLUSH, nodeid, inp.as_slice(), HDR).map(drop)
    }

    /// RELEASE of `fh` opened with `flags`.
    pub fn release(&self, nodeid: u64, fh: u64, flags: u32) -> Result<(), i32> {
        let inp = ReleaseIn {
            fh,
            flags,
            ..Default::default()
        };
        self.raw(FUSE_RELEASE, nodeid, inp.as_slice(), HDR)
            .map(drop)
    }

    pub fn fsync(&self, nodeid: u64, fh: u64, datasync: bool) -> Result<(), i32> {
        let inp = FsyncIn {
            fh,
            fsync_flags: u32::from(datasync),
            padding: 0,
        };
        self.raw(FUSE_FSYNC, nodeid, inp.as_slice(), HDR).map(drop)
    }

    pub fn opendir(&self, nodeid: u64, flags: u32) -> Result<OpenOut, i32> {
        let inp = OpenIn {
            flags,
            fuse_flags: 0,
        };
        let body = self.raw(FUSE_OPENDIR, nodeid, inp.as_slice(), HDR + 16)?;
        Ok(from_bytes(&body, "OPENDIR"))
    }

    /// READDIR from `offset` with `size` bytes of reply space.
    pub fn readdir(
        &self,
        nodeid: u64,
        fh: u64,
        offset: u64,
        size: u32,
    ) -> Result<Vec<DirEntry>, i32> {
        let inp = ReadIn {
            fh,
            offset,
            size,
            ..Default::default()
        };
        let body = self.raw(FUSE_READDIR, nodeid, inp.as_slice(), HDR + size as usize)?;
        Ok(parse_readdir(&body))
    }

    /// READDIRPLUS from `offset` with `size` bytes of reply space.
    pub fn readdirplus(
        &self,
        nodeid: u64,
        fh: u64,
        offset: u64,
        size: u32,
    ) -> Result<Vec<DirEntryPlus>, i32> {
        let inp = ReadIn {
            fh,
            offset,
            size,
            ..Default::default()
        };
        let body = self.raw(
            FUSE_READDIRPLUS,
            nodeid,
            inp.as_slice(),
            HDR + size as usize,
        )?;
        Ok(parse_readdirplus(&body))
    }

    pub fn releasedir(&self, nodeid: u64, fh: u64) -> Result<(), i32> {
        let inp = ReleaseIn {
            fh,
            ..Default::default()
        };
        self.raw(FUSE_RELEASEDIR, nodeid, inp.as_slice(), HDR)
            .map(drop)
    }

    pub fn fsyncdir(&self, nodeid: u64, fh: u64, datasync: bool) -> Result<(), i32> {
        let inp = FsyncIn {
            fh,
            fsync_flags: u32::from(datasync),
            padding: 0,
        };
        self.raw(FUSE_FSYNCDIR, nodeid, inp.as_slice(), HDR)
            .map(drop)
    }

    pub fn statfs(&self, nodeid: u64) -> Result<Kstatfs, i32> {
        let body = self.raw(FUSE_STATFS, nodeid, &[], HDR + 80)?;
        Ok(from_bytes(&body, "STATFS"))
    }

    pub fn access(&self, nodeid: u64, mask: u32) -> Result<(), i32> {
        let inp = AccessIn { mask, padding: 0 };
        self.raw(FUSE_ACCESS, nodeid, inp.as_slice(), HDR).map(drop)
    }

    pub fn fallocate(
        &self,
        nodeid: u64,
        fh: u64,
        offset: u64,
        length: u64,
        mode: u32,
    ) -> Result<(), i32> {
        let inp = FallocateIn {
            fh,
            offset,
            length,
            mode,
            padding: 0,
        };
        self.raw(FUSE_FALLOCATE, nodeid, inp.as_slice(), HDR)
            .map(drop)
    }

    /// LSEEK (SEEK_DATA/SEEK_HOLE/...); returns the resulting offset.
    pub fn lseek(&self, nodeid: u64, fh: u64, offset: u64, whence: u32) -> Result<u64, i32> {
        let inp = LseekIn {
            fh,
            offset,
            whence,
            padding: 0,
        };
        let out: LseekOut = from_bytes(
            &self.raw(FUSE_LSEEK, nodeid, inp.as_slice(), HDR + 8)?,
            "LSEEK",
        );
        Ok(out.offset)
    }

    /// COPY_FILE_RANGE from `nodeid_in`; returns the number of bytes copied.
    pub fn copy_file_range(&self, nodeid_in: u64, args: &CopyFileRangeIn) -> Result<u32, i32> {
        let body = self.raw(FUSE_COPY_FILE_RANGE, nodeid_in, args.as_slice(), HDR + 8)?;
        Ok(from_bytes::<WriteOut>(&body, "COPY_FILE_RANGE").size)
    }

    /// SYNCFS (sent by Linux for the root inode).
    pub fn syncfs(&self) -> Result<(), i32> {
        self.raw(
            FUSE_SYNCFS,
            FUSE_ROOT_ID,
            SyncfsIn::default().as_slice(),
            HDR,
        )
        .map(drop)
    }

    /// STATX with `sx_flags` (AT_STATX_*) and `sx_mask` (STATX_*), `fh` if given.
    pub fn statx(
        &self,
        nodeid: u64,
        fh: Option<u64>,
        sx_flags: u32,
        sx_mask: u32,
    ) -> Result<StatxOut, i32> {
        let inp = StatxIn {
            getattr_flags: u32::from(fh.is_some()),
            reserved: 0,
            fh: fh.unwrap_or(0),
            sx_flags,
            sx_mask,
        };
        let body = self.raw(FUSE_STATX, nodeid, inp.as_slice(), HDR + 288)?;
        Ok(from_bytes(&body, "STATX"))
    }

    fn xattr_reply(body: Vec<u8>, size: u32) -> XattrReply {
        if size == 0 {
            XattrReply::Size(from_bytes::<GetxattrOut>(&body, "xattr size").size)
        } else {
            XattrReply::Data(body)
        }
    }

    /// GETXATTR; `size` 0 asks for the value's size.
    pub fn getxattr(&self, nodeid: u64, name: &str, size: u32) -> Result<XattrReply, i32> {
        let mut body = GetxattrIn { size, padding: 0 }.as_slice().to_vec();
        body.extend_from_slice(&cstr(name));
        let reply = self.raw(FUSE_GETXATTR, nodeid, &body, HDR + size.max(8) as usize)?;
        Ok(Self::xattr_reply(reply, size))
    }

    /// LISTXATTR; `size` 0 asks for the list's size.
    pub fn listxattr(&self, nodeid: u64, size: u32) -> Result<XattrReply, i32> {
        let body = GetxattrIn { size, padding: 0 };
        let reply = self.raw(
            FUSE_LISTXATTR,
            nodeid,
            body.as_slice(),
            HDR + size.max(8) as usize,
        )?;
        Ok(Self::xattr_reply(reply, size))
    }

    /// SETXATTR (extended fuse_setxattr_in if FUSE_SETXATTR_EXT was negotiated).
    pub fn setxattr(&self, nodeid: u64, name: &str, value: &[u8], flags: u32) -> Result<(), i32> {
        let size = value.len() as u32;
        let mut body = if self.flags() & FUSE_SETXATTR_EXT != 0 {
            let inp = SetxattrInExt {
                size,
                flags,
                ..Default::default()
            };
            inp.as_slice().to_vec()
        } else {
            SetxattrIn { size, flags }.as_slice().to_vec()
        };
        body.extend_from_slice(&cstr(name));
        body.extend_from_slice(value);
        self.raw(FUSE_SETXATTR, nodeid, &body, HDR).map(drop)
    }

    pub fn removexattr(&self, nodeid: u64, name: &str) -> Result<(), i32> {
        self.raw(FUSE_REMOVEXATTR, nodeid, &cstr(name), HDR)
            .map(drop)
    }

    /// DESTROY (sent by Linux on unmount, expecting a header). A completion without any reply
    /// (virtiofsd 1.14 does that) also counts as success.
    pub fn destroy(&self) -> Result<(), i32> {
        let req = self.request(FUSE_DESTROY, 0, &[]);
        let reply = self
            .guest
            .roundtrip(self.queue, &req, HDR)
            .unwrap_or_else(|e| panic!("DESTROY on queue {}: {e}", self.queue));
        if reply.is_empty() {
            return Ok(());
        }
        Self::parse_reply(&req, &reply).map(drop)
    }
}
