//! `TestGuest`: the vhost-user frontend (QEMU's role) plus the driver side of the virtqueues
//! (the guest kernel's role). Queue 0 is the hiprio queue, queues 1..=N the request queues.

use std::io;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use vhost::vhost_user::message::{VhostUserHeaderFlag, VhostUserProtocolFeatures};
use vhost::vhost_user::{Frontend, VhostUserFrontend};
use vhost::{VhostBackend, VhostUserMemoryRegionInfo, VringConfigData};

use super::guest_memory::{GuestBuf, GuestMemory};
use super::virtqueue::{Completion, RawDesc, VirtQueue};

mod migration;
mod pipelines;
mod shared_waits;
pub use migration::SavedState;
pub use pipelines::Pipelined;

/// VIRTIO_F_VERSION_1.
pub const VIRTIO_F_VERSION_1: u64 = 1 << 32;
/// VIRTIO_RING_F_INDIRECT_DESC.
pub const VIRTIO_RING_F_INDIRECT_DESC: u64 = 1 << 28;
/// VIRTIO_RING_F_EVENT_IDX.
pub const VIRTIO_RING_F_EVENT_IDX: u64 = 1 << 29;
/// VHOST_USER_F_PROTOCOL_FEATURES.
pub const VHOST_USER_F_PROTOCOL_FEATURES: u64 = 1 << 30;

/// A chain's buffers as `(guest addr, len, device-writable)`.
type Chain = Vec<(u64, u32, bool)>;

/// How long [`TestGuest::roundtrip`] waits for a reply.
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(10);

/// Connection parameters; [`GuestOptions::new`] gives the defaults used by [`TestGuest::connect`].
#[derive(Clone, Debug)]
pub struct GuestOptions {
    pub request_queues: usize,
    pub queue_size: u16,
    pub mem_size: usize,
    /// Negotiate VIRTIO_RING_F_EVENT_IDX if the daemon offers it (a Linux guest does).
    pub event_idx: bool,
    /// Negotiate VIRTIO_RING_F_INDIRECT_DESC if the daemon offers it (a Linux guest does).
    pub indirect_desc: bool,
    /// Busy-poll the used ring this long before sleeping on the call eventfd (default 0: purely
    /// interrupt-driven like a Linux guest; some 50 µs cuts the client's wake-up latency).
    pub spin: Duration,
    /// How long to retry connecting while the socket does not exist or refuses connections.
    pub connect_timeout: Duration,
    /// Threads sharing a request queue each keep a request in flight: [`TestGuest::roundtrip`]
    /// holds the queue's lock only to add a chain and to collect completions, not while it
    /// waits (as WinFsp's dispatcher threads do on the Windows service's one queue). Default
    /// false: threads sharing a queue take turns, one request at a time.
    pub shared_waits: bool,
}

impl GuestOptions {
    pub fn new(request_queues: usize, queue_size: u16, mem_size: usize) -> GuestOptions {
        GuestOptions {
            request_queues,
            queue_size,
            mem_size,
            event_idx: true,
            indirect_desc: true,
            spin: Duration::ZERO,
            connect_timeout: Duration::from_secs(5),
            shared_waits: false,
        }
    }
}

/// One vhost-user connection to a daemon, with guest memory and virtqueues set up.
///
/// Every method takes `&self`; each queue has its own lock, held for a whole
/// [`roundtrip`](TestGuest::roundtrip) or [`pipeline`](TestGuest::pipeline), so threads using
/// different queues run in parallel and threads sharing a queue take turns (unless
/// [`GuestOptions::shared_waits`]).
pub struct TestGuest {
    frontend: Mutex<Frontend>,
    mem: Arc<GuestMemory>,
    queues: Vec<Mutex<VirtQueue>>,
    features: u64,
    protocol_features: VhostUserProtocolFeatures,
    /// What it connected with (a migration connects the destination alike).
    opts: GuestOptions,
}

fn vhost_err(what: &str, e: vhost::Error) -> io::Error {
    io::Error::other(format!("vhost-user {what}: {e}"))
}

fn connect_socket(socket: &Path, timeout: Duration) -> io::Result<UnixStream> {
    let deadline = Instant::now() + timeout;
    loop {
        match UnixStream::connect(socket) {
            Ok(s) => return Ok(s),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused
                ) && Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => {
                return Err(io::Error::new(
                    e.kind(),
                    format!("connect to {}: {e}", socket.display()),
                ))
            }
        }
    }
}

impl TestGuest {
    /// Connect to the vhost-user socket at `socket` (retrying ~5 s while it does not exist yet)
    /// with `request_queues` request queues of `queue_size` descriptors and `mem_size` bytes of
    /// memfd guest memory.
    pub fn connect(
        socket: &Path,
        request_queues: usize,
        queue_size: u16,
        mem_size: usize,
    ) -> io::Result<TestGuest> {
        Self::connect_with(
            socket,
            &GuestOptions::new(request_queues, queue_size, mem_size),
        )
    }

    /// [`TestGuest::connect`] with all options.
    pub fn connect_with(socket: &Path, opts: &GuestOptions) -> io::Result<TestGuest> {
        let (mut fe, features, protocol_features) = Self::handshake(socket, opts)?;
        let mem = GuestMemory::new(opts.mem_size)?;
        let event_idx = features & VIRTIO_RING_F_EVENT_IDX != 0;
        let mut queues = Vec::with_capacity(1 + opts.request_queues);
        for _ in 0..=opts.request_queues {
            queues.push(VirtQueue::new(&mem, opts.queue_size, event_idx, opts.spin)?);
        }
        let bases = vec![0; queues.len()];
        let refs: Vec<&VirtQueue> = queues.iter().collect();
        Self::start_rings_of(&mut fe, &mem, &refs, &bases, features)?;
        drop(refs);
        Ok(TestGuest {
            frontend: Mutex::new(fe),
            mem,
            queues: queues.into_iter().map(Mutex::new).collect(),
            features,
            protocol_features,
            opts: opts.clone(),
        })
    }

    /// Connects and negotiates features (QEMU at start-up): everything before the memory
    /// table. DEVICE_STATE is acked when offered (a migration's state moves before the rings
    /// start).
    fn handshake(
        socket: &Path,
        opts: &GuestOptions,
    ) -> io::Result<(Frontend, u64, VhostUserProtocolFeatures)> {
        if opts.request_queues == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "at least one request queue is needed",
            ));
        }
        let nqueues = 1 + opts.request_queues;
        let stream = connect_socket(socket, opts.connect_timeout)?;
        let mut fe = Frontend::from_stream(stream, nqueues as u64);

        fe.set_owner().map_err(|e| vhost_err("SET_OWNER", e))?;
        let offered = fe
            .get_features()
            .map_err(|e| vhost_err("GET_FEATURES", e))?;
        if offered & VIRTIO_F_VERSION_1 == 0 {
            return Err(io::Error::other(format!(
                "daemon does not offer VIRTIO_F_VERSION_1 (features {offered:#x})"
            )));
        }
        let mut wanted = VIRTIO_F_VERSION_1 | VHOST_USER_F_PROTOCOL_FEATURES;
        if opts.event_idx {
            wanted |= VIRTIO_RING_F_EVENT_IDX;
        }
        if opts.indirect_desc {
            wanted |= VIRTIO_RING_F_INDIRECT_DESC;
        }
        let features = offered & wanted;

        let mut protocol_features = VhostUserProtocolFeatures::empty();
        if features & VHOST_USER_F_PROTOCOL_FEATURES != 0 {
            let pf = fe
                .get_protocol_features()
                .map_err(|e| vhost_err("GET_PROTOCOL_FEATURES", e))?;
            protocol_features = pf
                & (VhostUserProtocolFeatures::MQ
                    | VhostUserProtocolFeatures::REPLY_ACK
                    | VhostUserProtocolFeatures::DEVICE_STATE);
            fe.set_protocol_features(protocol_features)
                .map_err(|e| vhost_err("SET_PROTOCOL_FEATURES", e))?;
        }
        let max_queues = if protocol_features.contains(VhostUserProtocolFeatures::MQ) {
            fe.get_queue_num()
                .map_err(|e| vhost_err("GET_QUEUE_NUM", e))? as usize
        } else {
            2
        };
        if nqueues > max_queues {
            return Err(io::Error::other(format!(
                "daemon supports {max_queues} queues, {nqueues} requested (1 hiprio + {})",
                opts.request_queues
            )));
        }
        if protocol_features.contains(VhostUserProtocolFeatures::REPLY_ACK) {
            // Every message that has no reply of its own is acknowledged: the daemon has
            // applied the whole set-up before the first request is kicked.
            fe.set_hdr_flags(VhostUserHeaderFlag::NEED_REPLY);
        }
        fe.set_features(features)
            .map_err(|e| vhost_err("SET_FEATURES", e))?;
        Ok((fe, features, protocol_features))
    }

    /// The memory table and the rings of `queues` from avail index `bases[i]`, kicked and
    /// enabled (QEMU's vhost start).
    fn start_rings_of(
        fe: &mut Frontend,
        mem: &GuestMemory,
        queues: &[&VirtQueue],
        bases: &[u16],
        features: u64,
    ) -> io::Result<()> {
        let region = VhostUserMemoryRegionInfo::from_guest_region(mem.region())
            .map_err(|e| vhost_err("memory region", e))?;
        fe.set_mem_table(&[region])
            .map_err(|e| vhost_err("SET_MEM_TABLE", e))?;
        for (i, vq) in queues.iter().enumerate() {
            let (desc, avail, used) = vq.addrs();
            let config = VringConfigData {
                queue_max_size: vq.size(),
                queue_size: vq.size(),
                flags: 0,
                desc_table_addr: mem.host_addr(desc),
                used_ring_addr: mem.host_addr(used),
                avail_ring_addr: mem.host_addr(avail),
                log_addr: None,
            };
            fe.set_vring_num(i, vq.size())
                .map_err(|e| vhost_err("SET_VRING_NUM", e))?;
            fe.set_vring_base(i, bases[i])
                .map_err(|e| vhost_err("SET_VRING_BASE", e))?;
            fe.set_vring_addr(i, &config)
                .map_err(|e| vhost_err("SET_VRING_ADDR", e))?;
            fe.set_vring_call(i, vq.call_fd())
                .map_err(|e| vhost_err("SET_VRING_CALL", e))?;
            fe.set_vring_kick(i, vq.kick_fd())
                .map_err(|e| vhost_err("SET_VRING_KICK", e))?;
        }
        if features & VHOST_USER_F_PROTOCOL_FEATURES != 0 {
            for i in 0..queues.len() {
                fe.set_vring_enable(i, true)
                    .map_err(|e| vhost_err("SET_VRING_ENABLE", e))?;
            }
        }
        Ok(())
    }

    /// Number of request queues (the hiprio queue not counted).
    pub fn request_queues(&self) -> usize {
        self.queues.len() - 1
    }
    /// Negotiated virtio feature bits.
    pub fn features(&self) -> u64 {
        self.features
    }
    /// Negotiated vhost-user protocol features.
    pub fn protocol_features(&self) -> VhostUserProtocolFeatures {
        self.protocol_features
    }
    /// The vhost-user connection, for tests sending further control messages.
    pub fn frontend(&self) -> MutexGuard<'_, Frontend> {
        self.frontend.lock().unwrap()
    }
    /// The shared guest memory.
    pub fn memory(&self) -> &Arc<GuestMemory> {
        &self.mem
    }

    fn request_queue(&self, q: usize) -> io::Result<MutexGuard<'_, VirtQueue>> {
        self.queues
            .get(q + 1)
            .map(|m| m.lock().unwrap())
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("request queue {q} does not exist"),
                )
            })
    }

    fn hiprio_queue(&self) -> MutexGuard<'_, VirtQueue> {
        self.queues[0].lock().unwrap()
    }

    /// Allocate a buffer in guest memory (freed on drop), e.g. to place data for raw chains.
    pub fn guest_alloc(&self, len: usize) -> io::Result<GuestBuf> {
        self.mem.alloc(len)
    }

    /// Submit one chain (readable `request`, then `reply_len` writable bytes if non-zero) on
    /// `vq` and wait for it; returns the reply bytes (the used length).
    fn submit_and_wait(
        &self,
        mut vq: MutexGuard<'_, VirtQueue>,
        request: &[u8],
        reply_len: usize,
    ) -> io::Result<Vec<u8>> {
        let (chain, bufs) = self.request_buffers(request, reply_len)?;
        let head = vq.add_buffers(&chain, 0, bufs).ok_or_else(|| {
            io::Error::new(io::ErrorKind::WouldBlock, "no free descriptors in queue")
        })?;
        vq.publish()?;
        let deadline = Instant::now() + REPLY_TIMEOUT;
        match vq.wait_used(deadline)? {
            Some(c) if c.head == head => reply_bytes(&c, reply_len, usize::MAX),
            Some(c) => Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("expected head {head}, device returned {}", c.head),
            )),
            None => {
                vq.abandon(head);
                Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("no reply within {REPLY_TIMEOUT:?}"),
                ))
            }
        }
    }

    fn request_buffers(
        &self,
        request: &[u8],
        reply_len: usize,
    ) -> io::Result<(Chain, Vec<GuestBuf>)> {
        let req = self.mem.alloc(request.len())?;
        req.write(0, request);
        let mut chain = vec![(req.addr(), request.len() as u32, false)];
        let mut bufs = vec![req];
        if reply_len > 0 {
            let reply = self.mem.alloc(reply_len)?;
            chain.push((reply.addr(), reply_len as u32, true));
            bufs.push(reply);
        }
        Ok((chain, bufs))
    }

    /// One request on request queue `q` (0-based; the hiprio queue is separate): `request` is
    /// device-readable (fuse_in_header + body), `reply_len` the device-writable space (0: none).
    /// Returns the bytes the device wrote (the used length); times out after ~10 s.
    pub fn roundtrip(&self, q: usize, request: &[u8], reply_len: usize) -> io::Result<Vec<u8>> {
        if self.opts.shared_waits {
            return self.shared_roundtrip(q, request, reply_len);
        }
        let vq = self.request_queue(q)?;
        self.submit_and_wait(vq, request, reply_len)
    }

    /// [`TestGuest::roundtrip`] on the hiprio queue (where Linux sends FORGET and INTERRUPT).
    pub fn hiprio_roundtrip(&self, request: &[u8], reply_len: usize) -> io::Result<Vec<u8>> {
        let vq = self.hiprio_queue();
        self.submit_and_wait(vq, request, reply_len)
    }

    /// Guest addresses of request queue `q`'s descriptor table, available ring and used ring.
    pub fn ring_addrs(&self, q: usize) -> io::Result<(u64, u64, u64)> {
        Ok(self.request_queue(q)?.addrs())
    }
}

fn reply_bytes(c: &Completion, reply_len: usize, keep: usize) -> io::Result<Vec<u8>> {
    let len = c.len as usize;
    if len > reply_len {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("device reports {len} bytes written into a {reply_len}-byte buffer"),
        ));
    }
    Ok(match c.bufs.get(1) {
        Some(reply) => reply.read(0, len.min(keep)),
        None => Vec::new(),
    })
}
