//! The dispatcher fuzz harness, shared by the libFuzzer target (`fuzz/fuzz_targets/dispatcher.rs`)
//! and the corpus replay test (`tests/fuzz_corpus.rs`), so both run the same code path.
//!
//! An input is a list of chains; each one is published on a fresh split queue in real guest
//! memory (`GuestMemoryMmap<()>`, as the device uses), walked as the device walks it
//! (`fuse_server::descriptors::Walk`, checked against virtio-queue's iterator) and served by
//! `FuseServer::handle_chain` over a `PassthroughFs` of a scratch share. Format of one chain:
//!
//! ```text
//! ctl:u8        low 4 bits: n descriptor records (0: one readable descriptor with the whole
//!               request, then one 128 KiB writable one); high 4 bits: n patches
//! patch*        off:u8 src:u8: write a remembered node ID (src bit 7 clear) or fh (set), the
//!               (src & 63)-th most recent, as a u64 at byte `off` of the request
//! record*       kind:u8 a:u8 b:u16le (see `Harness::build`)
//! len:u16le, request bytes (the FUSE request(s), placed by the readable records)
//! ```
//!
//! Each input starts with a standard INIT on a freshly populated share and ends with DESTROY;
//! after it the fd budget is back to the root's share and the process holds no more fds on
//! the share than before (both catch leaks), and every `check_every` inputs nothing next to
//! the share (a canary file, the base directory) has changed.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use vhostfs::fuse_server::abi::*;
use vhostfs::fuse_server::descriptors::{Table, Walk};
use vhostfs::fuse_server::{FuseServer, ServerOptions};
use vhostfs::passthrough::InodeFileHandles;
use vhostfs::passthrough::{FsConfig, PassthroughFs};
use virtio_queue::QueueT;
use vm_memory::{
    ByteValued, Bytes, GuestAddress, GuestAddressSpace, GuestMemoryAtomic, GuestMemoryMmap,
};

/// The hand-written queue of the dispatcher unit tests.
#[path = "../src/fuse_server/tests/desc_table.rs"]
mod desc_table;
use desc_table::{write_table, Desc, DESC_TABLE, VRING_DESC_F_INDIRECT, VRING_DESC_F_WRITE};

#[path = "harness/share.rs"]
mod share;
use share::{fds_under, populate, snapshot, Outside};

#[path = "../tests/common/temp_dir.rs"]
mod temp_dir;
pub use temp_dir::TempDir;

type Mem = GuestMemoryMmap<()>;

const MEM_SIZE: u64 = 0x10_0000;
const INDIRECT_TABLE: u64 = 0x3000;
const READ_BASE: u64 = 0x1_0000;
const WRITE_BASE: u64 = 0x4_0000;
const DEFAULT_WRITABLE: u32 = 0x2_0000;
const MAX_CHAINS: usize = 16;
const MAX_RECORDS: usize = 15;
/// How many fds the guest may make the filesystem hold: small, so that leaks show quickly.
const FD_BUDGET: usize = 16;
const OUT_HEADER: usize = 16;
const ENTRY_OUT: usize = 128;

/// A cursor over the input bytes; reads past the end yield zeros.
struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn u8(&mut self) -> u8 {
        let (&b, rest) = self.0.split_first().unwrap_or((&0, &[]));
        self.0 = rest;
        b
    }
    fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }
    fn bytes(&mut self, n: usize) -> &[u8] {
        let (a, b) = self.0.split_at(n.min(self.0.len()));
        self.0 = b;
        a
    }
}

pub struct Harness {
    mem: GuestMemoryAtomic<Mem>,
    server: FuseServer,
    fs: Arc<PassthroughFs>,
    base: TempDir,
    share: PathBuf,
    outside: Outside,
    /// fds on the share between sessions (the root's), once measured.
    fds: Option<usize>,
    /// fds of the guest's budget in use between sessions (the root's).
    budget: usize,
    runs: u64,
    check_every: u64,
    nodes: Vec<u64>,
    fhs: Vec<u64>,
}

/// A request with a standard header (uid/gid 0) and `body`.
pub fn request(opcode: u32, unique: u64, nodeid: u64, body: &[u8]) -> Vec<u8> {
    let h = InHeader {
        len: (std::mem::size_of::<InHeader>() + body.len()) as u32,
        opcode,
        unique,
        nodeid,
        ..Default::default()
    };
    [h.as_slice(), body].concat()
}

/// One chain of the default shape: the request in one readable descriptor, 128 KiB writable.
fn simple_chain(req: &[u8]) -> Vec<u8> {
    let mut v = vec![0u8];
    v.extend_from_slice(&(req.len() as u16).to_le_bytes());
    v.extend_from_slice(req);
    v
}

fn valid(d: &virtio_queue::desc::split::Descriptor) -> bool {
    let end = d.addr().0.checked_add(u64::from(d.len()));
    d.addr().0 < MEM_SIZE && end.is_some_and(|e| e <= MEM_SIZE)
}

/// The first `n` bytes of the concatenation of `descs` (fewer if they are shorter).
fn gather(mem: &Mem, descs: &[virtio_queue::desc::split::Descriptor], n: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for d in descs {
        let take = (n - out.len()).min(d.len() as usize);
        let mut buf = vec![0u8; take];
        mem.read_slice(&mut buf, d.addr()).unwrap();
        out.extend_from_slice(&buf);
        if out.len() == n {
            break;
        }
    }
    out
}

fn overlapping(descs: &[virtio_queue::desc::split::Descriptor]) -> bool {
    descs.iter().enumerate().any(|(i, a)| {
        descs[i + 1..].iter().any(|b| {
            let (a0, a1) = (a.addr().0, a.addr().0 + u64::from(a.len()));
            let (b0, b1) = (b.addr().0, b.addr().0 + u64::from(b.len()));
            a0 < b1 && b0 < a1
        })
    })
}

fn u64_at(v: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(v[off..off + 8].try_into().unwrap())
}

impl Harness {
    /// A harness whose share and canary live in `base` (empty; removed with the harness).
    pub fn new(base: TempDir, check_every: u64) -> Harness {
        let share = base.join("share");
        std::fs::create_dir_all(&share).unwrap();
        std::fs::write(base.join("canary"), "outside the share\n").unwrap();
        populate(&share);
        let fs = PassthroughFs::new(FsConfig {
            shared_dir: share.clone(),
            inode_file_handles: InodeFileHandles::Never,
            entry_timeout: Duration::from_secs(1),
            attr_timeout: Duration::from_secs(1),
            direct_io: false,
            allow_direct_io: false,
            preserve_noatime: false,
            keep_cache: false,
            readonly: false,
            xattr: true,
            announce_submounts: false,
            // Every name the fuzzer sends also goes through the Windows name mapping and the
            // case-insensitive name checks.
            windows_names: true,
            case_insensitive: true,
            fd_budget: FD_BUDGET,
            xattrmap: None,
            ids: Default::default(),
            fd_cache_size: vhostfs::passthrough::fd_cache::DEFAULT_SIZE,
            migration: Default::default(),
        })
        .unwrap();
        let fs = Arc::new(fs);
        let mmap = Mem::from_ranges(&[(GuestAddress(0), MEM_SIZE as usize)]).unwrap();
        let mut h = Harness {
            mem: GuestMemoryAtomic::new(mmap),
            server: FuseServer::new(Arc::clone(&fs), ServerOptions::default()),
            budget: fs.fds_in_use(),
            fs,
            outside: snapshot(&base),
            base,
            share,
            fds: None,
            runs: 0,
            check_every: check_every.max(1),
            nodes: Vec::new(),
            fhs: Vec::new(),
        };
        // One empty session first, so that whatever is opened once (lazily) is in the baseline.
        h.run(&[]);
        h.fds = Some(fds_under(&h.base).len());
        h
    }

    /// Runs one input: INIT, its chains, DESTROY; panics on a broken invariant.
    pub fn run(&mut self, data: &[u8]) {
        let zero = vec![0u8; MEM_SIZE as usize];
        self.mem
            .memory()
            .write_slice(&zero, GuestAddress(0))
            .unwrap();
        self.nodes.clear();
        self.fhs.clear();
        let init = InitIn {
            major: KERNEL_VERSION,
            minor: 41,
            max_readahead: 0x20000,
            flags: 0xffff_ffff,
            flags2: 0x1ff,
            ..Default::default()
        };
        let out = self.chain(&simple_chain(&request(FUSE_INIT, 1, 0, init.as_slice())));
        assert_eq!(out.map(|(_, error)| error), Some(0), "standard INIT failed");
        let mut input = Input(data);
        for _ in 0..MAX_CHAINS {
            if input.0.is_empty() {
                break;
            }
            let (chain, rest) = self.split_chain(input.0);
            input.0 = rest;
            self.chain(chain);
        }
        self.chain(&simple_chain(&request(FUSE_DESTROY, 2, 0, &[])));
        let budget = self.fs.fds_in_use();
        assert_eq!(budget, self.budget, "budget fds in use after DESTROY");
        if let Some(n) = self.fds {
            let held = fds_under(&self.base);
            assert_eq!(held.len(), n, "fds held after DESTROY: {held:?}");
        }
        self.runs += 1;
        if self.runs % self.check_every == 0 {
            assert_eq!(
                snapshot(&self.base),
                self.outside,
                "something outside the share changed"
            );
        }
        populate(&self.share);
    }

    /// Splits one chain's bytes off the front of `data`.
    fn split_chain<'a>(&self, data: &'a [u8]) -> (&'a [u8], &'a [u8]) {
        let mut i = Input(data);
        let ctl = i.u8();
        i.bytes(usize::from(ctl >> 4) * 2 + usize::from(ctl & 15).min(MAX_RECORDS) * 4);
        let len = usize::from(i.u16());
        i.bytes(len);
        let used = data.len() - i.0.len();
        data.split_at(used)
    }

    /// Lays out the descriptors a chain's records describe and writes its request bytes.
    fn build(&self, mem: &Mem, data: &[u8]) -> (Vec<Desc>, Vec<Desc>) {
        let mut i = Input(data);
        let ctl = i.u8();
        let patches: Vec<(u8, u8)> = (0..ctl >> 4).map(|_| (i.u8(), i.u8())).collect();
        let records: Vec<(u8, u8, u16)> = (0..usize::from(ctl & 15).min(MAX_RECORDS))
            .map(|_| (i.u8(), i.u8(), i.u16()))
            .collect();
        let len = usize::from(i.u16());
        let mut req = i.bytes(len).to_vec();
        for (off, src) in patches {
            let list = if src & 0x80 != 0 {
                &self.fhs
            } else {
                &self.nodes
            };
            let k = usize::from(src & 63);
            let off = usize::from(off);
            if let (Some(v), true) = (list.iter().rev().nth(k), off + 8 <= req.len()) {
                req[off..off + 8].copy_from_slice(&v.to_le_bytes());
            }
        }
        let desc = Desc::new;
        if records.is_empty() {
            mem.write_slice(&req, GuestAddress(READ_BASE)).unwrap();
            let r = desc(READ_BASE, req.len() as u32, 0);
            return (
                vec![r, desc(WRITE_BASE, DEFAULT_WRITABLE, VRING_DESC_F_WRITE)],
                Vec::new(),
            );
        }
        let (mut direct, mut indirect) = (Vec::new(), Vec::new());
        let mut in_table = false;
        let (mut rpos, mut wpos, mut consumed) = (READ_BASE, WRITE_BASE, 0usize);
        for (kind, a, b) in records {
            let mut d = match kind & 3 {
                0 => {
                    // Readable: the next `b` request bytes, after a gap of `a`.
                    rpos += u64::from(a);
                    let n = usize::from(b).min(req.len() - consumed);
                    let chunk = &req[consumed..consumed + n];
                    mem.write_slice(chunk, GuestAddress(rpos)).unwrap();
                    consumed += n;
                    let d = desc(rpos, n as u32, 0);
                    rpos += n as u64;
                    d
                }
                1 => {
                    // Writable, `b` bytes after a gap of `a`.
                    wpos += u64::from(a);
                    let d = desc(wpos, u32::from(b), VRING_DESC_F_WRITE);
                    wpos += u64::from(b);
                    d
                }
                2 => {
                    // Anywhere: inside or across the end of memory, over the rings, aliasing
                    // the request or the reply, with odd lengths.
                    let b64 = u64::from(b);
                    let addr = match a & 7 {
                        0 => MEM_SIZE.wrapping_sub(b64),
                        1 => MEM_SIZE + b64,
                        2 => u64::MAX - b64,
                        3 => DESC_TABLE + b64,
                        4 => READ_BASE + b64,
                        5 => WRITE_BASE + b64,
                        6 => b64 << 16,
                        _ => 0,
                    };
                    let len = match (a >> 3) & 3 {
                        0 => u32::from(b),
                        1 => u32::from(b) << 8,
                        2 => u32::MAX - u32::from(b),
                        _ => 0,
                    };
                    desc(
                        addr,
                        len,
                        if kind & 4 != 0 { VRING_DESC_F_WRITE } else { 0 },
                    )
                }
                _ => {
                    // The rest of the records go to an indirect table (length fixed below).
                    let d = desc(INDIRECT_TABLE, u32::from(a & 15), VRING_DESC_F_INDIRECT);
                    if !in_table {
                        in_table = true;
                        direct.push(d);
                        continue;
                    }
                    d
                }
            };
            if kind & 8 != 0 {
                d.next = Some(u16::from(a & 31));
            }
            d.stop = kind & 16 != 0;
            if in_table { &mut indirect } else { &mut direct }.push(d);
        }
        if let Some(d) = direct
            .iter_mut()
            .find(|d| d.flags & VRING_DESC_F_INDIRECT != 0)
        {
            // 16 bytes per entry, plus the misalignment the record asked for.
            d.len = d.len.wrapping_add(16 * indirect.len() as u32);
        }
        (direct, indirect)
    }

    /// Publishes and serves one chain, checks the reply; returns the reply's (opcode, error)
    /// when a well-formed reply was written.
    fn chain(&mut self, data: &[u8]) -> Option<(u32, i32)> {
        let guard = self.mem.memory();
        let mem: &Mem = &guard;
        let (direct, indirect) = self.build(mem, data);
        write_table(mem, DESC_TABLE, &direct);
        write_table(mem, INDIRECT_TABLE, &indirect);
        let mut q = desc_table::queue(mem);
        let chain = q.pop_descriptor_chain(guard.clone())?;
        // The device walks chains with its own descriptor walk: it must see what virtio-queue's
        // iterator sees, on every chain the fuzzer makes.
        let table = Table::resolve(mem, GuestAddress(DESC_TABLE), desc_table::QUEUE_SIZE);
        let walk = Walk::new(mem, table, chain.head_index());
        let walked: Vec<_> = walk
            .clone()
            .map(|d| (d.addr(), d.len(), d.flags(), d.next()))
            .collect();
        let iterated: Vec<_> = chain
            .clone()
            .map(|d| (d.addr(), d.len(), d.flags(), d.next()))
            .collect();
        assert_eq!(
            walked, iterated,
            "the descriptor walk differs from virtio-queue's"
        );

        let readable: Vec<_> = chain.clone().readable().collect();
        let writable: Vec<_> = chain.clone().writable().collect();
        let ok = readable.iter().chain(&writable).all(valid);
        let head = if ok {
            gather(mem, &readable, 40)
        } else {
            Vec::new()
        };

        let used = self.server.handle_chain(mem, walk);

        if !ok {
            assert_eq!(used, 0, "a chain outside guest memory was answered");
            return None;
        }
        let room: u64 = writable.iter().map(|d| u64::from(d.len())).sum();
        assert!(u64::from(used) <= room, "used {used} > writable {room}");
        assert!(
            used == 0 || used as usize >= OUT_HEADER,
            "used {used}: a partial header"
        );
        let opcode = (head.len() >= 40).then(|| u32::from_le_bytes(head[4..8].try_into().unwrap()));
        let silent = matches!(
            opcode,
            Some(FUSE_FORGET | FUSE_BATCH_FORGET | FUSE_INTERRUPT)
        );
        assert!(
            used > 0 || room < OUT_HEADER as u64 || silent,
            "no reply to opcode {opcode:?} with {room} bytes of room"
        );
        if used == 0 || overlapping(&writable) {
            return None;
        }
        let unique = if head.len() >= 16 {
            u64_at(&head, 8)
        } else {
            0
        };
        let out = gather(mem, &writable, OUT_HEADER + ENTRY_OUT + 16);
        let len = u32::from_le_bytes(out[0..4].try_into().unwrap());
        let error = i32::from_le_bytes(out[4..8].try_into().unwrap());
        assert_eq!(u64_at(&out, 8), unique, "reply unique");
        assert_eq!(len, used, "reply len");
        assert!((-4095..=0).contains(&error), "reply error {error}");
        assert!(
            error == 0 || used as usize == OUT_HEADER,
            "error reply with a body"
        );
        let opcode = opcode?;
        if error == 0 {
            self.remember(opcode, &out);
        }
        Some((opcode, error))
    }

    /// Keeps the node IDs and fhs a successful reply hands out, for later patches.
    fn remember(&mut self, opcode: u32, out: &[u8]) {
        let (node, fh) = match opcode {
            FUSE_LOOKUP | FUSE_MKNOD | FUSE_MKDIR | FUSE_SYMLINK | FUSE_LINK => (true, None),
            FUSE_CREATE | FUSE_TMPFILE => (true, Some(OUT_HEADER + ENTRY_OUT)),
            FUSE_OPEN | FUSE_OPENDIR => (false, Some(OUT_HEADER)),
            _ => return,
        };
        if node && out.len() >= OUT_HEADER + 8 {
            self.nodes.push(u64_at(out, OUT_HEADER));
        }
        if let Some(off) = fh.filter(|off| out.len() >= off + 8) {
            self.fhs.push(u64_at(out, off));
        }
    }
}
