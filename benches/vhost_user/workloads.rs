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

#[path = "workloads/data.rs"]
mod data;
#[path = "workloads/meta.rs"]
mod meta;
#[path = "workloads/on_host.rs"]
pub mod on_host;
#[path = "workloads/perfile.rs"]
pub mod perfile;
#[path = "workloads/slow.rs"]
pub mod slow;

use data::{
    check_read, check_written, mixed, randread, read_req, release_req, seqread, seqwrite, write_req,
};
use meta::{casefold, create, lookup, readdirplus, untimed_lookup};

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
/// Name of the directory of `casefold_entries` files (casefold).
const CASE_DIR: &str = "cased";
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
    /// Files of the casefold directory.
    pub casefold_entries: usize,
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
            casefold_entries: 100_000,
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
            casefold_entries: 2_000,
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
    /// 1 MiB sequential WRITE of new files, laid out first (untimed), then in passes over their
    /// first `data_file` bytes.
    Seqwrite,
    /// 4 readers and 4 writers, 4 KiB random, on disjoint regions of the data file.
    Mixed,
    /// The per-file check: random READs of one file vs a file per thread; WRITEs of one file.
    Perfile,
    /// `--case-insensitive` (both daemons need it; not in the default run): warm LOOKUPs of the
    /// files of a directory of `casefold_entries` by their exact names and by the names in
    /// another case, after one lookup in another case read the directory's names.
    Casefold,
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
            Workload::Casefold => {
                let d = dir.join(CASE_DIR);
                fs::create_dir(&d)?;
                for i in 0..sizes.casefold_entries {
                    fs::write(d.join(cased_name(i, false)), b"x")?;
                }
            }
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
            Workload::Casefold => casefold(ctx),
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

/// The name of file `i` of the casefold directory, as on the host or (`other`) in another case.
fn cased_name(i: usize, other: bool) -> String {
    if other {
        format!("FILE{i:06}.TXT")
    } else {
        format!("File{i:06}.txt")
    }
}

fn file_name(i: usize) -> String {
    format!("f{i:05}")
}

/// A CREATE of `name` in `parent` (O_WRONLY|O_CREAT|O_EXCL, 0644) with the client's
/// extensions `ext` (`extlen` bytes of them).
fn create_req(c: &FuseClient, parent: u64, name: &str, ext: &[u8], extlen: u16) -> Vec<u8> {
    let inp = CreateIn {
        flags: (libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL) as u32,
        mode: libc::S_IFREG | 0o644,
        umask: 0o022,
        fuse_flags: 0,
    };
    let mut body = inp.as_slice().to_vec();
    body.extend_from_slice(&cstr(name));
    body.extend_from_slice(ext);
    c.request_with_ext(FUSE_CREATE, parent, &body, extlen)
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
        let host0 = crate::stats::HostCpu::now();
        barrier.wait();
        let start = Instant::now();
        let results: Vec<_> = handles.into_iter().map(|h| h.join()).collect();
        let elapsed = start.elapsed();
        let cpu = crate::shared::CpuSample::of(ctx.daemon_pid).since(&cpu0);
        let host_busy = crate::stats::HostCpu::now().busy_since(&host0);
        let (latencies, outputs) = gather(results)?;
        Ok((
            Measured::new(ops, elapsed, cpu, host_busy, latencies),
            outputs,
        ))
    })
}

/// What one thread of a timed phase ended with: its latencies and output, or why it failed.
type Joined<T> = std::thread::Result<Result<(Vec<Duration>, T), String>>;

/// The threads' latencies together and their outputs in thread order, or the first failure.
fn gather<T>(results: Vec<Joined<T>>) -> Result<(Vec<Duration>, Vec<T>), String> {
    let mut latencies = Vec::new();
    let mut outputs = Vec::new();
    for r in results {
        let (lat, out) = r.map_err(crate::panic_message)??;
        latencies.extend(lat);
        outputs.push(out);
    }
    Ok((latencies, outputs))
}
