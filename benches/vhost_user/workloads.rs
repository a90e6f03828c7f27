//! The workloads: each one drives a connected test guest (one `FuseClient` per thread, each on its
//! own request queue or all on one) and returns one measured row per timed phase.

use std::fs;
use std::io;
use std::path::Path;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use vm_memory::ByteValued;

use crate::common::fuse_abi::*;
use crate::common::fuse_client::{from_bytes, parse_readdirplus};
use crate::common::FuseClient;
use crate::stats::Measured;

#[path = "workloads/perfile.rs"]
pub mod perfile;

const MIB: u64 = 1 << 20;
/// Reply header size.
const HDR: usize = std::mem::size_of::<OutHeader>();
/// Reply space of LOOKUP and CREATE's entry part.
const ENTRY: usize = HDR + std::mem::size_of::<EntryOut>();
/// `fuse_in_header`.
const HDR_IN: usize = std::mem::size_of::<InHeader>();
/// Requests in flight per thread for small operations (times `Ctx::mult`), unless `--depth`
/// says otherwise.
const SMALL_DEPTH: usize = 64;
/// 1 MiB requests in flight per thread (times `Ctx::mult`).
const BIG_DEPTH: usize = 4;
/// 4 KiB requests in flight per reader/writer stream of the mixed workload.
const STREAM_DEPTH: usize = 8;
/// READDIRPLUS reply buffer: one page, as a Linux 6.12 guest asks for.
const READDIR_BUF: u32 = 4096;
/// Small I/O size.
const SMALL_IO: u32 = 4096;
/// Large I/O size.
const BIG_IO: u32 = 1 << 20;
/// Name of the directory of `dir_entries` files (lookup, readdirplus).
const BIG_DIR: &str = "dir";
/// Name of the data file (randread, seqread, mixed).
const DATA_FILE: &str = "data.bin";

/// Sizes of the workloads (default run or `--quick`).
#[derive(Clone, Debug)]
pub struct Sizes {
    /// Small requests in flight per thread (times `Ctx::mult`).
    pub small_depth: usize,
    pub dir_entries: usize,
    /// Passes over the directory's files for GETATTR, LOOKUP warm and LOOKUP after FORGET (a
    /// pass over 10,000 files takes well under 0.1 s: too short to time alone).
    pub passes: usize,
    pub listings: usize,
    pub create_jobs: usize,
    pub files_per_job: usize,
    pub data_file: u64,
    pub random_reads: usize,
    pub seq_read_bytes: u64,
    pub seq_write_bytes: u64,
    pub mixed_ops: usize,
}

impl Sizes {
    pub fn full() -> Sizes {
        Sizes {
            small_depth: SMALL_DEPTH,
            dir_entries: 10_000,
            passes: 5,
            listings: 24,
            create_jobs: 10,
            files_per_job: 2_500,
            data_file: 64 * MIB,
            random_reads: 160_000,
            seq_read_bytes: 2048 * MIB,
            seq_write_bytes: 1024 * MIB,
            mixed_ops: 160_000,
        }
    }

    pub fn quick() -> Sizes {
        Sizes {
            small_depth: SMALL_DEPTH,
            dir_entries: 1_000,
            passes: 2,
            listings: 4,
            create_jobs: 2,
            files_per_job: 100,
            data_file: 8 * MIB,
            random_reads: 4_000,
            seq_read_bytes: 16 * MIB,
            seq_write_bytes: 16 * MIB,
            mixed_ops: 4_000,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Workload {
    /// LOOKUP (cold, warm, after FORGET) and GETATTR of the files of a directory.
    Lookup,
    /// Whole-directory listings (OPENDIR, READDIRPLUS until empty, RELEASEDIR).
    Readdirplus,
    /// CREATE + WRITE 4 KiB + RELEASE of new files, jobs × files like fio.
    Create,
    /// 4 KiB random READ of the data file.
    Randread,
    /// 1 MiB sequential READ of the data file.
    Seqread,
    /// 1 MiB sequential WRITE of new files, in passes over their first `data_file` bytes.
    Seqwrite,
    /// 4 readers and 4 writers, 4 KiB random, on disjoint regions of the data file.
    Mixed,
    /// The per-file check: random READs of one file vs a file per thread; WRITEs of one file.
    Perfile,
}

impl Workload {
    pub const ALL: [Workload; 8] = [
        Workload::Lookup,
        Workload::Readdirplus,
        Workload::Create,
        Workload::Randread,
        Workload::Seqread,
        Workload::Seqwrite,
        Workload::Mixed,
        Workload::Perfile,
    ];

    /// Populate `dir` with what this workload needs (the template copied for every run).
    pub fn prepare(self, dir: &Path, sizes: &Sizes) -> io::Result<()> {
        match self {
            Workload::Lookup | Workload::Readdirplus => {
                let d = dir.join(BIG_DIR);
                fs::create_dir(&d)?;
                for i in 0..sizes.dir_entries {
                    fs::write(d.join(file_name(i)), b"x")?;
                }
            }
            Workload::Create => {
                for j in 0..sizes.create_jobs {
                    fs::create_dir(dir.join(format!("job{j}")))?;
                }
            }
            Workload::Randread | Workload::Seqread | Workload::Mixed => {
                fs::write(dir.join(DATA_FILE), data_file_bytes(sizes.data_file))?;
            }
            Workload::Perfile => perfile::prepare(dir, sizes, crate::MQ)?,
            Workload::Seqwrite => {}
        }
        Ok(())
    }

    /// Run the workload; returns `(row label, measurement)` per timed phase.
    pub fn run(self, ctx: &Ctx) -> Result<Vec<(&'static str, Measured)>, String> {
        match self {
            Workload::Lookup => lookup(ctx),
            Workload::Readdirplus => readdirplus(ctx),
            Workload::Create => create(ctx),
            Workload::Randread => randread(ctx),
            Workload::Seqread => seqread(ctx),
            Workload::Seqwrite => seqwrite(ctx),
            Workload::Mixed => mixed(ctx),
            Workload::Perfile => perfile::run(ctx),
        }
    }
}

/// A connected guest, ready for a workload.
pub struct Ctx<'a> {
    /// One client per thread (thread `i` uses `clients[i]`); `clients[0]` also does the untimed
    /// set-up.
    pub clients: &'a [FuseClient],
    /// Parallelism per thread: requests in flight (or directory listings) are multiplied by this,
    /// so that one thread on one queue can keep as much in flight as several threads on several.
    pub mult: usize,
    pub sizes: &'a Sizes,
    /// The daemon (its CPU time is measured per phase).
    pub daemon_pid: u32,
}

/// The content of a data file of `len` bytes.
fn data_file_bytes(len: u64) -> Vec<u8> {
    (0..len).map(data_byte).collect()
}

/// The byte at `offset` of the data file.
fn data_byte(offset: u64) -> u8 {
    let i = offset % MIB;
    (i * 7 + i / 4096) as u8
}

fn file_name(i: usize) -> String {
    format!("f{i:05}")
}

fn cstr(name: &str) -> Vec<u8> {
    let mut v = name.as_bytes().to_vec();
    v.push(0);
    v
}

fn fuse_err(what: &str, errno: i32) -> String {
    format!("{what}: {}", io::Error::from_raw_os_error(errno))
}

/// Items `0..n` that thread `t` of `threads` handles.
fn share_of(n: usize, t: usize, threads: usize) -> impl Iterator<Item = usize> {
    (t..n).step_by(threads)
}

/// A small deterministic PRNG (xorshift64*), for random offsets.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }
}

/// Bytes of each READ reply the client looks at (the rest stays in guest memory, as in a guest's
/// page cache): enough to check a few bytes of data, or a `fuse_write_out`.
const KEEP: usize = 16;

/// [`pipeline`] for READ and WRITE requests: returns `(body length, first KEEP bytes of the
/// body)` per request.
fn pipeline_data(
    c: &FuseClient,
    reqs: &[(Vec<u8>, usize)],
    depth: usize,
    what: &str,
    lat: &mut Vec<Duration>,
) -> Result<Vec<(usize, Vec<u8>)>, String> {
    let (replies, l) = c.pipeline_capped(reqs, depth, KEEP);
    lat.extend(l);
    all_ok(replies, what)
}

/// Run `reqs` with `depth` in flight; appends the latencies and fails on any error reply.
fn pipeline(
    c: &FuseClient,
    reqs: &[(Vec<u8>, usize)],
    depth: usize,
    what: &str,
    lat: &mut Vec<Duration>,
) -> Result<Vec<Vec<u8>>, String> {
    let (replies, l) = c.pipeline_timed(reqs, depth);
    lat.extend(l);
    all_ok(replies, what)
}

/// The replies' bodies, or the first errno as a failure of `what`.
fn all_ok<T>(replies: Vec<Result<T, i32>>, what: &str) -> Result<Vec<T>, String> {
    replies
        .into_iter()
        .map(|r| r.map_err(|e| fuse_err(what, e)))
        .collect()
}

/// One timed phase on all threads: each thread builds its job with `prepare(thread, client)`
/// (untimed, must not fail), then all start together; the phase lasts until the last one ends.
fn timed<'c, T, J, P>(ctx: &Ctx<'c>, ops: usize, prepare: P) -> Result<(Measured, Vec<T>), String>
where
    T: Send,
    J: FnOnce(&mut Vec<Duration>) -> Result<T, String>,
    P: Fn(usize, &'c FuseClient) -> J + Sync,
{
    let barrier = Barrier::new(ctx.clients.len() + 1);
    std::thread::scope(|s| {
        let handles: Vec<_> = ctx
            .clients
            .iter()
            .enumerate()
            .map(|(t, c)| {
                let (prepare, barrier) = (&prepare, &barrier);
                s.spawn(move || {
                    let job = prepare(t, c);
                    let mut lat = Vec::new();
                    barrier.wait();
                    job(&mut lat).map(|out| (lat, out))
                })
            })
            .collect();
        let cpu0 = crate::shared::CpuSample::of(ctx.daemon_pid);
        barrier.wait();
        let start = Instant::now();
        let results: Vec<_> = handles.into_iter().map(|h| h.join()).collect();
        let elapsed = start.elapsed();
        let cpu = crate::shared::CpuSample::of(ctx.daemon_pid).since(&cpu0);
        let mut latencies = Vec::new();
        let mut outputs = Vec::new();
        for r in results {
            let (lat, out) = r.map_err(crate::panic_message)??;
            latencies.extend(lat);
            outputs.push(out);
        }
        Ok((Measured::new(ops, elapsed, cpu, latencies), outputs))
    })
}

fn lookup_req(c: &FuseClient, parent: u64, name: &str) -> (Vec<u8>, usize) {
    (c.request(FUSE_LOOKUP, parent, &cstr(name)), ENTRY)
}

fn untimed_lookup(c: &FuseClient, parent: u64, name: &str) -> Result<u64, String> {
    c.lookup(parent, name)
        .map(|e| e.nodeid)
        .map_err(|e| fuse_err(&format!("LOOKUP {name}"), e))
}

/// LOOKUP of every file of the directory, `passes` times over, in parallel, `depth` in flight
/// per thread; returns the node IDs per thread (of one pass).
fn lookup_phase(
    ctx: &Ctx,
    dir: u64,
    passes: usize,
    depth: usize,
) -> Result<(Measured, Vec<Vec<u64>>), String> {
    let n = ctx.sizes.dir_entries;
    let threads = ctx.clients.len();
    timed(ctx, n * passes, |t, c| {
        let reqs: Vec<_> = (0..passes)
            .flat_map(|_| share_of(n, t, threads))
            .map(|i| lookup_req(c, dir, &file_name(i)))
            .collect();
        let mine = reqs.len() / passes;
        move |lat: &mut Vec<Duration>| {
            let replies = pipeline(c, &reqs, depth * ctx.mult, "LOOKUP", lat)?;
            Ok(replies[..mine]
                .iter()
                .map(|r| from_bytes::<EntryOut>(r, "LOOKUP").nodeid)
                .collect())
        }
    })
}

/// GETATTR of `nodes` (per thread), `passes` times over, `depth` in flight per thread.
fn getattr_phase(
    ctx: &Ctx,
    nodes: &[Vec<u64>],
    passes: usize,
    depth: usize,
) -> Result<Measured, String> {
    let n: usize = nodes.iter().map(Vec::len).sum();
    let (m, _) = timed(ctx, n * passes, |t, c| {
        let reqs: Vec<_> = (0..passes)
            .flat_map(|_| nodes[t].iter())
            .map(|&node| {
                let body = GetattrIn::default();
                (
                    c.request(FUSE_GETATTR, node, body.as_slice()),
                    HDR + std::mem::size_of::<AttrOut>(),
                )
            })
            .collect();
        move |lat: &mut Vec<Duration>| {
            pipeline(c, &reqs, depth * ctx.mult, "GETATTR", lat).map(drop)
        }
    })?;
    Ok(m)
}

/// Gives back `lookups` lookups of every node, as a guest dropping its dentries would.
fn forget_all(c: &FuseClient, nodes: &[Vec<u64>], lookups: u64) {
    let forgets: Vec<(u64, u64)> = nodes.iter().flatten().map(|&n| (n, lookups)).collect();
    for chunk in forgets.chunks(256) {
        c.batch_forget(chunk);
    }
}

fn lookup(ctx: &Ctx) -> Result<Vec<(&'static str, Measured)>, String> {
    let c0 = &ctx.clients[0];
    let dir = untimed_lookup(c0, FUSE_ROOT_ID, BIG_DIR)?;
    let passes = ctx.sizes.passes;
    let depth = ctx.sizes.small_depth;
    let (cold, nodes) = lookup_phase(ctx, dir, 1, depth)?;
    let getattr = getattr_phase(ctx, &nodes, passes, depth)?;
    // A guest's `stat` loop: one request in flight (a GETATTR, and the LOOKUP that revalidates
    // a name whose entry timed out, as `stat` of names the guest holds sends). Only in the
    // 1 queue × 1 thread shape: with one request per thread, the 4 × 4 shape measures 8 threads
    // handing requests back and forth on however many cores the machine has (on 2 cores: 0.68
    // of virtiofsd's single thread with 4 in flight), not the daemon.
    let one_at_a_time = (ctx.clients.len(), ctx.mult) == (1, 1);
    let getattr_one = if one_at_a_time {
        Some(getattr_phase(ctx, &nodes, passes, 1)?)
    } else {
        None
    };
    let (warm, _) = lookup_phase(ctx, dir, passes, depth)?;
    let warm_one = if one_at_a_time {
        Some(lookup_phase(ctx, dir, passes, 1)?.0)
    } else {
        None
    };
    // Each pass looked every node up once more.
    let warm_passes = passes * (1 + usize::from(warm_one.is_some()));
    forget_all(c0, &nodes, 1 + warm_passes as u64);
    // Every pass after a FORGET of everything: its own timed phase, summed up.
    let mut forgotten = Vec::new();
    for _ in 0..passes {
        let (m, nodes) = lookup_phase(ctx, dir, 1, depth)?;
        forget_all(c0, &nodes, 1);
        forgotten.push(m);
    }
    let mut rows = vec![("LOOKUP cold (fresh daemon)", cold), ("GETATTR", getattr)];
    rows.extend(getattr_one.map(|m| ("GETATTR, one at a time", m)));
    rows.push(("LOOKUP warm", warm));
    rows.extend(warm_one.map(|m| ("LOOKUP warm, one at a time", m)));
    rows.push(("LOOKUP after FORGET", Measured::combine(&forgotten)));
    Ok(rows)
}

/// One directory listing in progress.
enum Listing {
    Open,
    Read {
        fh: u64,
        offset: u64,
        entries: usize,
    },
    Release {
        fh: u64,
    },
}

fn readdirplus(ctx: &Ctx) -> Result<Vec<(&'static str, Measured)>, String> {
    let dir = untimed_lookup(&ctx.clients[0], FUSE_ROOT_ID, BIG_DIR)?;
    let listings = ctx.sizes.listings;
    let expected = ctx.sizes.dir_entries;
    let threads = ctx.clients.len();
    let (m, _) = timed(ctx, listings, |t, c| {
        let mine = share_of(listings, t, threads).count();
        move |lat: &mut Vec<Duration>| {
            // `mult` listings at a time, in lockstep: one request of each per pipeline.
            let mut todo = mine;
            let mut lanes: Vec<Listing> = Vec::new();
            while todo > 0 || !lanes.is_empty() {
                while lanes.len() < ctx.mult && todo > 0 {
                    lanes.push(Listing::Open);
                    todo -= 1;
                }
                let reqs: Vec<_> = lanes
                    .iter()
                    .map(|l| match *l {
                        Listing::Open => {
                            let body = OpenIn::default();
                            (c.request(FUSE_OPENDIR, dir, body.as_slice()), HDR + 16)
                        }
                        Listing::Read { fh, offset, .. } => {
                            let body = ReadIn {
                                fh,
                                offset,
                                size: READDIR_BUF,
                                ..Default::default()
                            };
                            (
                                c.request(FUSE_READDIRPLUS, dir, body.as_slice()),
                                HDR + READDIR_BUF as usize,
                            )
                        }
                        Listing::Release { fh } => {
                            let body = ReleaseIn {
                                fh,
                                ..Default::default()
                            };
                            (c.request(FUSE_RELEASEDIR, dir, body.as_slice()), HDR)
                        }
                    })
                    .collect();
                let replies = pipeline(c, &reqs, reqs.len(), "OPENDIR/READDIRPLUS", lat)?;
                let mut next = Vec::with_capacity(lanes.len());
                for (lane, reply) in lanes.into_iter().zip(replies) {
                    match lane {
                        Listing::Open => {
                            let fh = from_bytes::<OpenOut>(&reply, "OPENDIR").fh;
                            next.push(Listing::Read {
                                fh,
                                offset: 0,
                                entries: 0,
                            });
                        }
                        Listing::Read { fh, entries, .. } => {
                            let page = parse_readdirplus(&reply);
                            match page.last() {
                                None if entries == expected => next.push(Listing::Release { fh }),
                                None => {
                                    return Err(format!(
                                        "READDIRPLUS listed {entries} of {expected} files"
                                    ))
                                }
                                Some(last) => {
                                    let files = page
                                        .iter()
                                        .filter(|e| e.dirent.name != b"." && e.dirent.name != b"..")
                                        .count();
                                    next.push(Listing::Read {
                                        fh,
                                        offset: last.dirent.off,
                                        entries: entries + files,
                                    });
                                }
                            }
                        }
                        Listing::Release { .. } => {}
                    }
                }
                lanes = next;
            }
            Ok(())
        }
    })?;
    Ok(vec![("READDIRPLUS whole dir (per listing)", m)])
}

fn create(ctx: &Ctx) -> Result<Vec<(&'static str, Measured)>, String> {
    let c0 = &ctx.clients[0];
    let s = ctx.sizes;
    let jobs = (0..s.create_jobs)
        .map(|j| untimed_lookup(c0, FUSE_ROOT_ID, &format!("job{j}")))
        .collect::<Result<Vec<_>, _>>()?;
    let n = s.create_jobs * s.files_per_job;
    let threads = ctx.clients.len();
    let data = vec![0x5a; SMALL_IO as usize];
    let (m, _) = timed(ctx, n, |t, c| {
        let (ext, extlen) = c.create_ext();
        let creates: Vec<_> = share_of(n, t, threads)
            .map(|i| {
                let inp = CreateIn {
                    flags: (libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL) as u32,
                    mode: libc::S_IFREG | 0o644,
                    umask: 0o022,
                    fuse_flags: 0,
                };
                let mut body = inp.as_slice().to_vec();
                body.extend_from_slice(&cstr(&format!("file{}", i % s.files_per_job)));
                body.extend_from_slice(&ext);
                let parent = jobs[i / s.files_per_job];
                (
                    c.request_with_ext(FUSE_CREATE, parent, &body, extlen),
                    ENTRY + 16,
                )
            })
            .collect();
        let data = &data;
        move |lat: &mut Vec<Duration>| {
            for batch in creates.chunks(s.small_depth * ctx.mult) {
                let created = pipeline(c, batch, batch.len(), "CREATE", lat)?;
                let files: Vec<(u64, u64)> = created
                    .iter()
                    .map(|r| {
                        let e: EntryOut = from_bytes(r, "CREATE entry");
                        let o: OpenOut = from_bytes(&r[128..], "CREATE open");
                        (e.nodeid, o.fh)
                    })
                    .collect();
                let writes: Vec<_> = files
                    .iter()
                    .map(|&(node, fh)| write_req(c, node, fh, 0, data))
                    .collect();
                let written = pipeline(c, &writes, writes.len(), "WRITE", lat)?;
                check_written(&written, SMALL_IO)?;
                let releases: Vec<_> = files
                    .iter()
                    .map(|&(node, fh)| release_req(c, node, fh, libc::O_WRONLY as u32))
                    .collect();
                pipeline(c, &releases, releases.len(), "RELEASE", lat)?;
            }
            Ok(())
        }
    })?;
    Ok(vec![("CREATE+WRITE 4 KiB+RELEASE (per file)", m)])
}

fn write_req(c: &FuseClient, node: u64, fh: u64, offset: u64, data: &[u8]) -> (Vec<u8>, usize) {
    let body = FuseClient::write_body(fh, offset, data);
    (c.request(FUSE_WRITE, node, &body), HDR + 8)
}

fn read_req(c: &FuseClient, node: u64, fh: u64, offset: u64, size: u32) -> (Vec<u8>, usize) {
    let inp = ReadIn {
        fh,
        offset,
        size,
        ..Default::default()
    };
    (
        c.request(FUSE_READ, node, inp.as_slice()),
        HDR + size as usize,
    )
}

fn release_req(c: &FuseClient, node: u64, fh: u64, flags: u32) -> (Vec<u8>, usize) {
    let inp = ReleaseIn {
        fh,
        flags,
        ..Default::default()
    };
    (c.request(FUSE_RELEASE, node, inp.as_slice()), HDR)
}

fn check_written(replies: &[Vec<u8>], size: u32) -> Result<(), String> {
    match replies
        .iter()
        .map(|r| from_bytes::<WriteOut>(r, "WRITE").size)
        .find(|&n| n != size)
    {
        Some(n) => Err(format!("WRITE wrote {n} of {size} bytes")),
        None => Ok(()),
    }
}

/// `replies` from [`pipeline_data`]: every READ returned `size` bytes, starting with what the
/// data file holds at that offset.
fn check_read(
    reqs: &[(Vec<u8>, usize)],
    replies: &[(usize, Vec<u8>)],
    size: u32,
) -> Result<(), String> {
    for (req, (len, head)) in reqs.iter().zip(replies) {
        if *len != size as usize {
            return Err(format!("READ returned {len} of {size} bytes"));
        }
        let off = from_bytes::<ReadIn>(&req.0[HDR_IN..], "READ").offset;
        if head
            .iter()
            .enumerate()
            .any(|(i, &b)| b != data_byte(off + i as u64))
        {
            return Err(format!("READ at {off}: wrong data"));
        }
    }
    Ok(())
}

/// Open the data file once per thread (untimed); returns its node ID and one fh per thread.
fn open_data(ctx: &Ctx, flags: i32) -> Result<(u64, Vec<u64>), String> {
    let node = untimed_lookup(&ctx.clients[0], FUSE_ROOT_ID, DATA_FILE)?;
    let fhs = ctx
        .clients
        .iter()
        .map(|c| {
            c.open(node, flags as u32)
                .map(|o| o.fh)
                .map_err(|e| fuse_err("OPEN", e))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok((node, fhs))
}

fn close_data(ctx: &Ctx, node: u64, fhs: &[u64], flags: i32) -> Result<(), String> {
    for (c, &fh) in ctx.clients.iter().zip(fhs) {
        c.release(node, fh, flags as u32)
            .map_err(|e| fuse_err("RELEASE", e))?;
    }
    Ok(())
}

fn randread(ctx: &Ctx) -> Result<Vec<(&'static str, Measured)>, String> {
    let (node, fhs) = open_data(ctx, libc::O_RDONLY)?;
    let n = ctx.sizes.random_reads;
    let blocks = ctx.sizes.data_file / u64::from(SMALL_IO);
    let threads = ctx.clients.len();
    let (m, _) = timed(ctx, n, |t, c| {
        let mut rng = Rng::new(t as u64 + 1);
        let reqs: Vec<_> = share_of(n, t, threads)
            .map(|_| {
                let off = rng.below(blocks) * u64::from(SMALL_IO);
                read_req(c, node, fhs[t], off, SMALL_IO)
            })
            .collect();
        move |lat: &mut Vec<Duration>| {
            let replies = pipeline_data(c, &reqs, ctx.sizes.small_depth * ctx.mult, "READ", lat)?;
            check_read(&reqs, &replies, SMALL_IO)
        }
    })?;
    close_data(ctx, node, &fhs, libc::O_RDONLY)?;
    Ok(vec![("READ 4 KiB random", m)])
}

fn seqread(ctx: &Ctx) -> Result<Vec<(&'static str, Measured)>, String> {
    let (node, fhs) = open_data(ctx, libc::O_RDONLY)?;
    let chunks = ctx.sizes.data_file / u64::from(BIG_IO);
    let n = (ctx.sizes.seq_read_bytes / u64::from(BIG_IO)) as usize;
    let threads = ctx.clients.len() as u64;
    let (m, _) = timed(ctx, n, |t, c| {
        // Thread t reads its own region of the file, from start to end, again and again.
        let t = t as u64;
        let region = (chunks * t / threads)..(chunks * (t + 1) / threads);
        let reqs: Vec<_> = region
            .clone()
            .cycle()
            .take(share_of(n, t as usize, threads as usize).count())
            .map(|chunk| read_req(c, node, fhs[t as usize], chunk * u64::from(BIG_IO), BIG_IO))
            .collect();
        move |lat: &mut Vec<Duration>| {
            let replies = pipeline_data(c, &reqs, BIG_DEPTH * ctx.mult, "READ", lat)?;
            check_read(&reqs, &replies, BIG_IO)
        }
    })?;
    close_data(ctx, node, &fhs, libc::O_RDONLY)?;
    Ok(vec![("READ 1 MiB sequential", m)])
}

fn seqwrite(ctx: &Ctx) -> Result<Vec<(&'static str, Measured)>, String> {
    // One new file per thread, written from start to end and over again: `data_file` bytes, in
    // passes, like fio's time-based write job on a fixed-size file. After the first pass the
    // WRITEs land in the file's page cache: the host's page allocation, which on a VM can mean
    // the hypervisor faulting in fresh memory (single rounds swung 0.28-4.07 when every WRITE
    // allocated), stays mostly out of the measurement.
    let mut files = Vec::new();
    for (t, c) in ctx.clients.iter().enumerate() {
        let (e, o) = c
            .create(
                FUSE_ROOT_ID,
                &format!("seq{t}"),
                libc::S_IFREG | 0o644,
                libc::O_WRONLY as u32,
                0o022,
            )
            .map_err(|e| fuse_err("CREATE", e))?;
        files.push((e.nodeid, o.fh));
    }
    let n = (ctx.sizes.seq_write_bytes / u64::from(BIG_IO)) as usize;
    let blocks = (ctx.sizes.data_file / u64::from(BIG_IO)).max(1);
    let threads = ctx.clients.len();
    let data: Vec<u8> = (0..BIG_IO).map(|i| (i % 251) as u8).collect();
    let (m, _) = timed(ctx, n, |t, c| {
        let (node, fh) = files[t];
        let reqs: Vec<_> = (0..share_of(n, t, threads).count() as u64)
            .map(|k| write_req(c, node, fh, k % blocks * u64::from(BIG_IO), &data))
            .collect();
        move |lat: &mut Vec<Duration>| {
            let replies = pipeline(c, &reqs, BIG_DEPTH * ctx.mult, "WRITE", lat)?;
            check_written(&replies, BIG_IO)
        }
    })?;
    for (c, &(node, fh)) in ctx.clients.iter().zip(&files) {
        c.release(node, fh, libc::O_WRONLY as u32)
            .map_err(|e| fuse_err("RELEASE", e))?;
    }
    Ok(vec![("WRITE 1 MiB sequential", m)])
}

fn mixed(ctx: &Ctx) -> Result<Vec<(&'static str, Measured)>, String> {
    const STREAMS: usize = 8;
    let (node, fhs) = open_data(ctx, libc::O_RDWR)?;
    let n = ctx.sizes.mixed_ops / STREAMS * STREAMS;
    let region_blocks = ctx.sizes.data_file / u64::from(SMALL_IO) / STREAMS as u64;
    let threads = ctx.clients.len();
    let data = vec![0xa5; SMALL_IO as usize];
    let (m, _) = timed(ctx, n, |t, c| {
        // Streams 0..4 read regions 0..4, streams 4..8 write regions 4..8; thread t runs the
        // streams s with s % threads == t, their requests interleaved.
        let streams: Vec<usize> = share_of(STREAMS, t, threads).collect();
        let mut rngs: Vec<Rng> = streams.iter().map(|&s| Rng::new(s as u64 + 100)).collect();
        let per_stream = n / STREAMS;
        let mut reqs = Vec::with_capacity(per_stream * streams.len());
        for _ in 0..per_stream {
            for (k, &s) in streams.iter().enumerate() {
                let block = s as u64 * region_blocks + rngs[k].below(region_blocks);
                let off = block * u64::from(SMALL_IO);
                reqs.push(if s < STREAMS / 2 {
                    read_req(c, node, fhs[t], off, SMALL_IO)
                } else {
                    write_req(c, node, fhs[t], off, &data)
                });
            }
        }
        let depth = STREAM_DEPTH * streams.len();
        move |lat: &mut Vec<Duration>| {
            let replies = pipeline_data(c, &reqs, depth, "READ/WRITE", lat)?;
            for (req, reply) in reqs.iter().zip(replies) {
                let opcode = u32::from_le_bytes(req.0[4..8].try_into().unwrap());
                if opcode == FUSE_READ {
                    check_read(std::slice::from_ref(req), &[reply], SMALL_IO)?;
                } else {
                    check_written(&[reply.1], SMALL_IO)?;
                }
            }
            Ok(())
        }
    })?;
    close_data(ctx, node, &fhs, libc::O_RDWR)?;
    Ok(vec![("4 readers + 4 writers, one file, 4 KiB", m)])
}
