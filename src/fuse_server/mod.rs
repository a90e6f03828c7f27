//! The FUSE request dispatcher: parses one request from a virtio descriptor chain, calls
//! [`PassthroughFs`] and writes the reply into the chain's device-writable buffers.
//!
//! Only the ABI structs come from fuse-backend-rs; the descriptor-chain `Reader`/`Writer` are
//! ours ([`chain`]); opcodes are matched here with a checked `match` on the raw number.

pub mod abi;
mod chain;
pub mod descriptors;
mod dir;
mod ext;
mod file;
pub mod init;
mod migration;
mod ops;
mod reply;
mod stats;

use std::io::{self, Read};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use vm_memory::bitmap::BitmapSlice;
use vm_memory::{ByteValued, GuestMemory};

use abi::*;
use chain::{Reader, Writer};
use reply::{einval, errno_of};
use stats::slot_of;
pub use stats::{slot_name, OpStats, ServerMetrics, OP_SLOTS};

use crate::option_values::option_values;
use crate::passthrough::{Context, PassthroughFs};

option_values! {
    /// How hard to negotiate a FUSE feature with the guest (`--posix-acl=never|auto|always`).
    pub enum Negotiation {
        /// Do not offer it.
        Never = "never",
        /// Use it if the guest offers it, else continue without.
        Auto = "auto",
        /// Use it; a guest that does not offer it fails INIT.
        Always = "always",
    }
}

/// Settings that change what INIT negotiates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServerOptions {
    /// Offer READDIRPLUS (FUSE_DO_READDIRPLUS | FUSE_READDIRPLUS_AUTO); virtiofsd's
    /// `--no-readdirplus` (and `--cache=never`) turn it off. A READDIRPLUS the guest sends anyway
    /// is served, as virtiofsd serves it.
    pub readdirplus: bool,
    /// Negotiate FUSE_DIRECT_IO_ALLOW_MMAP, so that files opened with FOPEN_DIRECT_IO (e.g.
    /// `--cache=never`) can still be mmapped shared; virtiofsd's `--allow-mmap`.
    pub allow_direct_io_mmap: bool,
    /// `--posix-acl`: negotiate FUSE_POSIX_ACL | FUSE_DONT_MASK, so the guest kernel enforces
    /// ACLs and leaves the umask to us (see [`FuseServer::umask`]).
    pub posix_acl: Negotiation,
    /// `--security-label`: negotiate FUSE_SECURITY_CTX, so creating requests carry the security
    /// context the guest's LSM chose for the new node (see [`ext`]).
    pub security_label: Negotiation,
    /// `--writeback`: negotiate FUSE_WRITEBACK_CACHE when the guest offers it (the filesystem
    /// learns the outcome at each INIT).
    pub writeback: bool,
    /// `--killpriv-v2`: negotiate FUSE_HANDLE_KILLPRIV_V2, so the guest leaves clearing
    /// setuid/setgid and capabilities on write, truncate, chown and O_TRUNC opens to us
    /// (`passthrough/policy/killpriv.rs`).
    pub killpriv_v2: bool,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            readdirplus: true,
            allow_direct_io_mmap: false,
            posix_acl: Negotiation::Never,
            security_label: Negotiation::Never,
            writeback: false,
            killpriv_v2: false,
        }
    }
}

/// What every handler needs from the in header.
pub(crate) struct Req {
    pub unique: u64,
    pub nodeid: u64,
    pub ctx: Context,
    /// The request's extension bytes (`total_extlen`), kept only for the creating opcodes under
    /// FUSE_SECURITY_CTX; empty otherwise.
    pub ext: Vec<u8>,
}

/// A request's descriptor chain taken apart: the guest's request bytes and the room for the
/// reply, in guest memory, for [`FuseServer::serve_request`]. Their sizes are known without
/// walking the chain again.
pub struct Request<'a, S: BitmapSlice> {
    reader: Reader<'a, S>,
    writer: Writer<'a, S>,
}

impl<'a> Request<'a, ()> {
    /// The request made of `descs` (a chain's descriptors in chain order: a
    /// `virtio_queue::DescriptorChain` or a [`descriptors::Walk`]), or `None` (logged) for a
    /// chain whose buffers are not in guest memory or whose lengths overflow: it gets no reply
    /// (its used length is 0).
    pub fn of_chain<M: GuestMemory>(
        mem: &'a M,
        descs: impl IntoIterator<Item = virtio_queue::desc::split::Descriptor>,
    ) -> Option<Request<'a, vm_memory::bitmap::MS<'a, M>>> {
        match chain::split(mem, descs) {
            Ok((reader, writer)) => Some(Request { reader, writer }),
            Err(e) => {
                log::warn!("bad descriptor chain: {e}");
                None
            }
        }
    }
}

impl<S: BitmapSlice> Request<'_, S> {
    /// Bytes the guest sent (device-readable).
    pub fn request_bytes(&self) -> usize {
        self.reader.available_bytes()
    }

    /// Bytes of room for the reply (device-writable).
    pub fn reply_bytes(&self) -> usize {
        self.writer.available_bytes()
    }

    /// The directory whose lock on the host this request holds while it is served, if it
    /// changes a name in one (CREATE, MKNOD, MKDIR, SYMLINK, LINK, UNLINK, RMDIR, RENAME,
    /// RENAME2: the header's node ID; every filesystem takes that directory's lock, exclusive,
    /// around such a change). Requests on the same directory are served one after the other by
    /// the host whatever the daemon does, so another thread would only queue on the lock.
    /// Read from the header without consuming it; `None` for any other request or a header
    /// that is not in the first buffer.
    pub fn locked_dir(&self) -> Option<u64> {
        let mut h = InHeader::default();
        if !self.reader.peek(h.as_mut_slice()) {
            return None;
        }
        matches!(
            h.opcode,
            FUSE_CREATE
                | FUSE_MKNOD
                | FUSE_MKDIR
                | FUSE_SYMLINK
                | FUSE_LINK
                | FUSE_UNLINK
                | FUSE_RMDIR
                | FUSE_RENAME
                | FUSE_RENAME2
        )
        .then_some(h.nodeid)
    }
}

pub struct FuseServer {
    fs: Arc<PassthroughFs>,
    opts: ServerOptions,
    /// Between a successful INIT and DESTROY.
    initialized: AtomicBool,
    /// The last INIT negotiated FUSE_DONT_MASK: creation requests carry the umask to apply.
    dont_mask: AtomicBool,
    /// The last INIT negotiated FUSE_SECURITY_CTX: creating requests carry a security context.
    secctx: AtomicBool,
    /// Requests, errors, latency and data bytes moved (READ: file → guest, WRITE: guest →
    /// file), per opcode slot.
    metrics: ServerMetrics,
    /// The last INIT negotiated FUSE_HANDLE_KILLPRIV_V2: the kill flags of WRITE, SETATTR,
    /// OPEN and CREATE count.
    killpriv_v2: AtomicBool,
    /// The last INIT negotiated FUSE_SETXATTR_EXT: SETXATTR comes with the extended struct.
    setxattr_ext: AtomicBool,
    /// The INIT flags (flags | flags2 << 32) the session negotiated: what a migration saves;
    /// the flags above follow from it ([`FuseServer::apply`]).
    negotiated: AtomicU64,
}

/// The reply length of a request whose success makes the guest hold a node ID (entry replies)
/// or a file handle (open replies).
fn state_reply_len(opcode: u32) -> Option<usize> {
    use fuse_backend_rs::abi::fuse_abi::{EntryOut, OpenOut};
    use std::mem::size_of;
    let body = match opcode {
        FUSE_LOOKUP | FUSE_MKNOD | FUSE_MKDIR | FUSE_SYMLINK | FUSE_LINK => size_of::<EntryOut>(),
        FUSE_CREATE | FUSE_TMPFILE => size_of::<EntryOut>() + size_of::<OpenOut>(),
        FUSE_OPEN | FUSE_OPENDIR => size_of::<OpenOut>(),
        _ => return None,
    };
    Some(reply::OUT_HEADER_SIZE + body)
}

fn enosys() -> io::Error {
    io::Error::from_raw_os_error(libc::ENOSYS)
}

impl FuseServer {
    pub fn new(fs: Arc<PassthroughFs>, opts: ServerOptions) -> Self {
        FuseServer {
            fs,
            opts,
            initialized: AtomicBool::new(false),
            dont_mask: AtomicBool::new(false),
            secctx: AtomicBool::new(false),
            metrics: ServerMetrics::default(),
            killpriv_v2: AtomicBool::new(false),
            setxattr_ext: AtomicBool::new(false),
            negotiated: AtomicU64::new(0),
        }
    }

    /// Ends the FUSE session as FUSE_DESTROY does: every inode but the root forgotten, every
    /// handle closed, and every request but INIT refused until the next INIT. The daemon calls
    /// it when the connection that carried the session is gone (`--keep-listening`), so that
    /// the next one starts afresh, as after a guest reboot; node IDs are never reused, so an old
    /// one is unknown in the new session.
    pub fn end_session(&self) {
        self.initialized.store(false, Ordering::Release);
        self.fs.destroy();
    }

    /// Handles one request from a descriptor chain; returns the number of bytes written to the
    /// device-writable part (the used length to put in the used ring). Never panics, whatever
    /// the chain contains; on malformed input replies with an errno if a reply header fits,
    /// else returns 0. Requests that take no reply (FORGET, BATCH_FORGET, INTERRUPT) return 0.
    /// `descs` as [`Request::of_chain`] takes them.
    pub fn handle_chain<M: GuestMemory>(
        &self,
        mem: &M,
        descs: impl IntoIterator<Item = virtio_queue::desc::split::Descriptor>,
    ) -> u32 {
        Request::of_chain(mem, descs).map_or(0, |r| self.serve_request(r).0)
    }

    /// Handles a request taken from its chain (see [`FuseServer::handle_chain`]); returns the
    /// used length and how long the request took in nanoseconds (0 if its header could not be
    /// read), as its metrics recorded it.
    pub fn serve_request<S: BitmapSlice>(&self, request: Request<'_, S>) -> (u32, u64) {
        self.handle(request.reader, request.writer)
    }

    /// The umask the filesystem must apply for a MKNOD/MKDIR/CREATE/TMPFILE carrying `umask`:
    /// `Some` only with FUSE_DONT_MASK, where the guest kernel no longer applies it itself.
    fn umask(&self, umask: u32) -> Option<u32> {
        self.dont_mask.load(Ordering::Acquire).then_some(umask)
    }

    /// Whether a request's kill flag (`flag`: its bit, masked from the request) counts: only
    /// with FUSE_HANDLE_KILLPRIV_V2 negotiated (a guest without it clears the bits itself, and
    /// still sets FUSE_WRITE_KILL_SUIDGID on direct writes).
    fn kill_privs(&self, flag: u32) -> bool {
        flag != 0 && self.killpriv_v2.load(Ordering::Acquire)
    }

    /// Serves one request and records it (a request whose header cannot be read is not);
    /// returns the used length and the nanoseconds recorded.
    fn handle<S: BitmapSlice>(&self, r: Reader<S>, w: Writer<S>) -> (u32, u64) {
        let started = crate::metrics::clock::now();
        let (opcode, errno, used) = self.serve(r, w);
        let nanos = opcode.map_or(0, |op| self.metrics.record(slot_of(op), errno, started));
        (used, nanos)
    }

    /// Serves one request; returns its opcode (once the header was read), the errno of its
    /// error reply (0: none) and the used length.
    fn serve<S: BitmapSlice>(&self, mut r: Reader<S>, mut w: Writer<S>) -> (Option<u32>, i32, u32) {
        let readable = r.available_bytes();
        let mut h = InHeader::default();
        let head = readable.min(std::mem::size_of::<InHeader>());
        if r.read_exact(&mut h.as_mut_slice()[..head]).is_err() {
            return (None, 0, 0);
        }
        if head < std::mem::size_of::<InHeader>() {
            // Truncated header: answer EINVAL with whatever `unique` we have (0 when even it
            // is cut), so the guest is not left waiting.
            let unique = if head >= 16 { h.unique } else { 0 };
            log::warn!("request shorter than fuse_in_header ({readable} bytes)");
            return (
                None,
                libc::EINVAL,
                reply::error(&mut w, unique, libc::EINVAL),
            );
        }
        let op = Some(h.opcode);
        let fail = |w: &mut Writer<S>, errno| (op, errno, reply::error(w, h.unique, errno));
        let ext = match self.prepare(&h, readable, &mut r) {
            Ok(ext) => ext,
            Err(e) => {
                log::warn!(
                    "malformed request: opcode {} unique {} len {} extlen {} (readable {readable})",
                    h.opcode,
                    h.unique,
                    h.len,
                    h.total_extlen
                );
                return fail(&mut w, errno_of(&e));
            }
        };
        let q = Req {
            unique: h.unique,
            nodeid: h.nodeid,
            ctx: Context {
                uid: h.uid,
                gid: h.gid,
                pid: h.pid,
            },
            ext,
        };
        let initialized = self.initialized.load(Ordering::Acquire);
        // Requests that take no reply. Outside a session there is nothing to forget.
        let no_reply = match h.opcode {
            FUSE_FORGET | FUSE_BATCH_FORGET | FUSE_INTERRUPT if !initialized => Some(Ok(())),
            FUSE_FORGET => Some(self.do_forget(&q, &mut r)),
            FUSE_BATCH_FORGET => Some(self.do_batch_forget(&mut r)),
            FUSE_INTERRUPT => Some(Ok(())),
            _ => None,
        };
        if let Some(res) = no_reply {
            if let Err(e) = res {
                log::warn!("opcode {} unique {}: {e}", h.opcode, h.unique);
            }
            return (op, 0, 0);
        }
        if h.opcode != FUSE_INIT && !initialized {
            return fail(&mut w, libc::EIO);
        }
        if let Some(need) = state_reply_len(h.opcode) {
            if w.available_bytes() < need {
                // The guest would never learn the node ID or fh it holds, so could never
                // FORGET or RELEASE it: refuse before doing anything.
                log::warn!(
                    "opcode {} unique {}: {} bytes of reply space, {need} needed",
                    h.opcode,
                    h.unique,
                    w.available_bytes()
                );
                return fail(&mut w, libc::EINVAL);
            }
        }
        match self.dispatch(&q, h.opcode, &mut r, &mut w) {
            Ok(used) => (op, 0, used),
            Err(e) => {
                log::debug!("opcode {} unique {}: {e}", h.opcode, h.unique);
                fail(&mut w, errno_of(&e))
            }
        }
    }

    /// Checks the header's lengths and limits `r` to the request body (without extensions).
    /// Returns the extension bytes of a creating request under FUSE_SECURITY_CTX (see
    /// [`ext`]); other requests' extensions are skipped by their length.
    fn prepare<S: BitmapSlice>(
        &self,
        h: &InHeader,
        readable: usize,
        r: &mut Reader<S>,
    ) -> io::Result<Vec<u8>> {
        let len = h.len as usize;
        let header = std::mem::size_of::<InHeader>();
        if len < header || len > readable {
            return Err(einval());
        }
        let ext = usize::from(h.total_extlen) * 8;
        let body = (len - header).checked_sub(ext).ok_or_else(einval)?;
        if body >= r.available_bytes() {
            return Ok(Vec::new());
        }
        let mut tail = r.split_at(body).map_err(|_| einval())?;
        let creating = matches!(
            h.opcode,
            FUSE_CREATE | FUSE_MKNOD | FUSE_MKDIR | FUSE_SYMLINK | FUSE_TMPFILE
        );
        if ext == 0 || !creating || !self.secctx.load(Ordering::Acquire) {
            return Ok(Vec::new());
        }
        if ext > ext::MAX_EXT_LEN {
            return Err(einval());
        }
        let mut bytes = vec![0u8; ext];
        tail.read_exact(&mut bytes).map_err(|_| einval())?;
        Ok(bytes)
    }

    /// The security context a creating request carries (`None` without FUSE_SECURITY_CTX):
    /// from its extension, or for a 7.36/7.37 guest (no `total_extlen`) from `after_names`,
    /// the body bytes after its names. `required` for CREATE, MKNOD, MKDIR and SYMLINK.
    fn security_label(
        &self,
        q: &Req,
        after_names: &[u8],
        required: bool,
    ) -> io::Result<Option<crate::passthrough::SecurityLabel>> {
        if !self.secctx.load(Ordering::Acquire) {
            return Ok(None);
        }
        let bytes = if q.ext.is_empty() {
            after_names
        } else {
            &q.ext
        };
        ext::security_label(bytes, required)
    }

    fn dispatch<S: BitmapSlice>(
        &self,
        q: &Req,
        opcode: u32,
        r: &mut Reader<S>,
        w: &mut Writer<S>,
    ) -> io::Result<u32> {
        match opcode {
            FUSE_INIT => self.do_init(q.unique, r, w),
            FUSE_DESTROY => {
                self.end_session();
                ops::reply_empty(w, q.unique)
            }
            FUSE_LOOKUP => self.do_lookup(q, r, w),
            FUSE_GETATTR => self.do_getattr(q, r, w),
            FUSE_SETATTR => self.do_setattr(q, r, w),
            FUSE_READLINK => self.do_readlink(q, w),
            FUSE_SYMLINK => self.do_symlink(q, r, w),
            FUSE_MKNOD => self.do_mknod(q, r, w),
            FUSE_MKDIR => self.do_mkdir(q, r, w),
            FUSE_UNLINK => self.do_remove(q, false, r, w),
            FUSE_RMDIR => self.do_remove(q, true, r, w),
            FUSE_RENAME => self.do_rename(q, false, r, w),
            FUSE_RENAME2 => self.do_rename(q, true, r, w),
            FUSE_LINK => self.do_link(q, r, w),
            FUSE_OPEN => self.do_open(q, false, r, w),
            FUSE_OPENDIR => self.do_open(q, true, r, w),
            FUSE_CREATE => self.do_create(q, r, w),
            FUSE_TMPFILE => self.do_tmpfile(q, r, w),
            FUSE_READ => self.do_read(q, r, w),
            FUSE_WRITE => self.do_write(q, r, w),
            FUSE_FLUSH => self.do_flush(q, r, w),
            FUSE_RELEASE => self.do_release(q, false, r, w),
            FUSE_RELEASEDIR => self.do_release(q, true, r, w),
            FUSE_FSYNC => self.do_fsync(q, false, r, w),
            FUSE_FSYNCDIR => self.do_fsync(q, true, r, w),
            FUSE_READDIR => self.do_readdir(q, false, r, w),
            FUSE_READDIRPLUS => self.do_readdir(q, true, r, w),
            FUSE_STATFS => self.do_statfs(q, w),
            FUSE_ACCESS => self.do_access(q, r, w),
            FUSE_FALLOCATE => self.do_fallocate(q, r, w),
            FUSE_LSEEK => self.do_lseek(q, r, w),
            FUSE_COPY_FILE_RANGE => self.do_copy_file_range(q, r, w),
            FUSE_SYNCFS => self.do_syncfs(q, r, w),
            FUSE_STATX => self.do_statx(q, r, w),
            FUSE_GETXATTR => self.do_getxattr(q, false, r, w),
            FUSE_LISTXATTR => self.do_getxattr(q, true, r, w),
            FUSE_SETXATTR => self.do_setxattr(q, r, w),
            FUSE_REMOVEXATTR => self.do_removexattr(q, r, w),
            // Locks (not negotiated: the guest does them locally), BMAP, IOCTL, POLL, DAX
            // mappings, NOTIFY_REPLY (we send no notifications), gaps and unknown numbers.
            _ => Err(enosys()),
        }
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_chain;
#[cfg(test)]
mod tests_io;
#[cfg(test)]
mod tests_opcodes;
