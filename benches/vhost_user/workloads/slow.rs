//! The slow-backend workloads (`--gluster`, issue 35 item 3): requests that wait for a network
//! filesystem. Each timed phase starts right after the host dropped its caches (`sync`, then
//! `echo 3 > /proc/sys/vm/drop_caches`), so what the daemon asks of the host reaches the
//! filesystem instead of the host kernel's caches. The phases: LOOKUP and GETATTR of the files
//! of a directory, 4 KiB random READs and WRITEs spread over 64 files and WRITEs of one file,
//! CREATEs spread over 16 directories and in one, whole-directory listings; and, on 1 queue, the
//! same requests one at a time (latency). A GETATTR phase also waits out the attribute timeout
//! of the FUSE mount (the daemon holds the inodes it looked up, so dropping caches does not
//! forget their attributes).

use super::data::{check_read, check_written, read_req, release_req, write_req};
use super::meta::{listings, lookup_req, untimed_lookup};
use super::*;

/// Directory of `SlowSizes::files` one-byte files (LOOKUP, GETATTR, READDIRPLUS).
pub(super) const FILES_DIR: &str = "files";
/// Directory of the [`DATA_FILES`] data files (READ, WRITE).
pub(super) const DATA_DIR: &str = "data";
/// Data files the READs and WRITEs are spread over.
pub(super) const DATA_FILES: usize = 64;
/// Bytes of each data file.
pub(super) const DATA_LEN: u64 = 256 << 10;
/// Directory of the runs' CREATE directories.
pub(super) const RUNS_DIR: &str = "runs";
/// Directories the spread CREATEs go to.
pub(super) const CREATE_DIRS: usize = 16;

pub const LOOKUP: &str = "LOOKUP after drop_caches";
pub const GETATTR: &str = "GETATTR after drop_caches";
pub const READ: &str = "READ 4 KiB random, 64 files";
pub const WRITE: &str = "WRITE 4 KiB random, 64 files";
pub const WRITE_ONE: &str = "WRITE 4 KiB random, one file";
pub const CREATE: &str = "CREATE, 16 directories";
pub const CREATE_ONE: &str = "CREATE, one directory";
pub const LISTING: &str = "READDIRPLUS whole dir (per listing)";

/// The rows of the phases with many requests in flight, measured in this order.
const PHASES: [&str; 8] = [
    LOOKUP, GETATTR, READ, WRITE, WRITE_ONE, CREATE, CREATE_ONE, LISTING,
];

/// [`PHASES`] with their measurements.
pub(super) fn phase_rows(measured: [Measured; 8]) -> Vec<(&'static str, Measured)> {
    PHASES.into_iter().zip(measured).collect()
}

/// Sizes of the slow-backend workloads (default run or `--quick`).
pub struct SlowSizes {
    /// Files of the LOOKUP/GETATTR/READDIRPLUS directory.
    pub files: usize,
    /// READs, and WRITEs, per phase.
    pub ios: usize,
    /// CREATEs per phase.
    pub creates: usize,
    /// Whole-directory listings.
    pub listings: usize,
    /// Requests per phase one at a time.
    pub one_at_a_time: usize,
}

impl SlowSizes {
    pub fn full() -> SlowSizes {
        SlowSizes {
            files: 1_000,
            ios: 4_000,
            creates: 1_024,
            listings: 16,
            one_at_a_time: 1_000,
        }
    }

    pub fn quick() -> SlowSizes {
        SlowSizes {
            files: 200,
            ios: 400,
            creates: 128,
            listings: 4,
            one_at_a_time: 50,
        }
    }
}

/// Populates the share (once, on the network filesystem).
pub fn prepare(share: &Path, sizes: &SlowSizes) -> io::Result<()> {
    let files = share.join(FILES_DIR);
    fs::create_dir(&files)?;
    for i in 0..sizes.files {
        fs::write(files.join(file_name(i)), b"x")?;
    }
    let data = share.join(DATA_DIR);
    fs::create_dir(&data)?;
    let bytes = data_file_bytes(DATA_LEN);
    for i in 0..DATA_FILES {
        fs::write(data.join(file_name(i)), &bytes)?;
    }
    fs::create_dir(share.join(RUNS_DIR))
}

/// Fresh directories for the CREATEs of run `run` (made before its daemon starts).
pub fn prepare_run(share: &Path, run: &str) -> io::Result<()> {
    let dir = share.join(RUNS_DIR).join(run);
    fs::create_dir(&dir)?;
    for j in 0..=CREATE_DIRS {
        fs::create_dir(dir.join(file_name(j)))?;
    }
    Ok(())
}

/// Longer than the attribute and entry timeouts of a GlusterFS FUSE mount (1 s by default).
pub(super) const ATTR_TIMEOUT: Duration = Duration::from_millis(1200);

/// Writes back dirty data and drops the host's page cache, dentries and inodes.
pub(super) fn drop_caches() -> Result<(), String> {
    // SAFETY: sync(2) takes no arguments.
    unsafe { libc::sync() };
    fs::write("/proc/sys/vm/drop_caches", "3")
        .map_err(|e| format!("echo 3 > /proc/sys/vm/drop_caches: {e} (the bench needs root)"))
}

/// Runs the phases of run `run` (see the module doc), the rows one at a time too if
/// `one_at_a_time`; `ctx.sizes.small_depth` requests in flight per thread.
pub fn run(
    ctx: &Ctx,
    s: &SlowSizes,
    run: &str,
    one_at_a_time: bool,
) -> Result<Vec<(&'static str, Measured)>, String> {
    let c0 = &ctx.clients[0];
    let depth = ctx.sizes.small_depth;
    let files = untimed_lookup(c0, FUSE_ROOT_ID, FILES_DIR)?;
    drop_caches()?;
    let (lookup, nodes) = lookups(ctx, files, s.files, depth)?;
    drop_caches()?;
    std::thread::sleep(ATTR_TIMEOUT);
    let getattr = getattrs(ctx, &nodes, depth)?;

    let data = untimed_lookup(c0, FUSE_ROOT_ID, DATA_DIR)?;
    let open = (0..DATA_FILES)
        .map(|i| {
            let node = untimed_lookup(c0, data, &file_name(i))?;
            let fh = c0
                .open(node, libc::O_RDWR as u32)
                .map_err(|e| fuse_err("OPEN", e))?
                .fh;
            Ok((node, fh))
        })
        .collect::<Result<Vec<_>, String>>()?;
    drop_caches()?;
    let read = reads(ctx, &open, s.ios, depth)?;
    drop_caches()?;
    let write = writes(ctx, &open, s.ios, depth)?;
    drop_caches()?;
    let write_one = writes(ctx, &open[..1], s.ios, depth)?;

    let runs = untimed_lookup(c0, FUSE_ROOT_ID, RUNS_DIR)?;
    let this_run = untimed_lookup(c0, runs, run)?;
    let dirs = (0..=CREATE_DIRS)
        .map(|j| untimed_lookup(c0, this_run, &file_name(j)))
        .collect::<Result<Vec<_>, String>>()?;
    drop_caches()?;
    let create = creates(ctx, &dirs[..CREATE_DIRS], s.creates, depth)?;
    drop_caches()?;
    let create_one = creates(ctx, &dirs[CREATE_DIRS..], s.creates, depth)?;
    drop_caches()?;
    let listing = listings(ctx, files, s.files, s.listings, depth)?;
    let mut rows = phase_rows([
        lookup, getattr, read, write, write_one, create, create_one, listing,
    ]);
    if one_at_a_time {
        let n = s.one_at_a_time;
        drop_caches()?;
        std::thread::sleep(ATTR_TIMEOUT);
        rows.push(("LOOKUP, one at a time", lookups(ctx, files, n, 1)?.0));
        drop_caches()?;
        std::thread::sleep(ATTR_TIMEOUT);
        let some: Vec<Vec<u64>> = vec![nodes.concat().into_iter().take(n).collect()];
        rows.push(("GETATTR, one at a time", getattrs(ctx, &some, 1)?));
        drop_caches()?;
        rows.push(("READ 4 KiB, one at a time", reads(ctx, &open, n, 1)?));
        drop_caches()?;
        rows.push(("WRITE 4 KiB, one at a time", writes(ctx, &open, n, 1)?));
    }
    for (node, fh) in open {
        c0.release(node, fh, libc::O_RDWR as u32)
            .map_err(|e| fuse_err("RELEASE", e))?;
    }
    Ok(rows)
}

/// LOOKUP of the first `n` files of `dir`, spread over the threads, `depth` in flight per
/// thread; returns the node IDs per thread.
fn lookups(
    ctx: &Ctx,
    dir: u64,
    n: usize,
    depth: usize,
) -> Result<(Measured, Vec<Vec<u64>>), String> {
    let threads = ctx.clients.len();
    timed(ctx, n, |t, c| {
        let reqs: Vec<_> = share_of(n, t, threads)
            .map(|i| lookup_req(c, dir, &file_name(i)))
            .collect();
        move |lat: &mut Vec<Duration>| {
            let replies = pipeline(c, &reqs, depth, "LOOKUP", lat)?;
            Ok(replies
                .iter()
                .map(|r| from_bytes::<EntryOut>(r, "LOOKUP").nodeid)
                .collect())
        }
    })
}

/// GETATTR of each thread's `nodes`, `depth` in flight per thread.
fn getattrs(ctx: &Ctx, nodes: &[Vec<u64>], depth: usize) -> Result<Measured, String> {
    let n = nodes.iter().map(Vec::len).sum();
    let (m, _) = timed(ctx, n, |t, c| {
        let reqs: Vec<_> = nodes[t]
            .iter()
            .map(|&node| {
                let body = GetattrIn::default();
                (
                    c.request(FUSE_GETATTR, node, body.as_slice()),
                    HDR + std::mem::size_of::<AttrOut>(),
                )
            })
            .collect();
        move |lat: &mut Vec<Duration>| pipeline(c, &reqs, depth, "GETATTR", lat).map(drop)
    })?;
    Ok(m)
}

/// A random 4 KiB block of one of `files` (node ID, fh) per request: `n` requests over the
/// threads, as `(node, fh, offset)`.
fn blocks(files: &[(u64, u64)], n: usize, t: usize, threads: usize) -> Vec<(u64, u64, u64)> {
    picks(files.len(), n, t, threads)
        .into_iter()
        .map(|(i, off)| (files[i].0, files[i].1, off))
        .collect()
}

/// Thread `t`'s share of `n` random 4 KiB blocks of `files` data files, as `(file index,
/// offset)`: the same blocks whoever does the I/O (a daemon, or the host alone).
pub(super) fn picks(files: usize, n: usize, t: usize, threads: usize) -> Vec<(usize, u64)> {
    let mut rng = Rng::new(t as u64 + 7);
    let per_file = DATA_LEN / u64::from(SMALL_IO);
    share_of(n, t, threads)
        .map(|_| {
            let file = rng.below(files as u64) as usize;
            (file, rng.below(per_file) * u64::from(SMALL_IO))
        })
        .collect()
}

fn reads(ctx: &Ctx, files: &[(u64, u64)], n: usize, depth: usize) -> Result<Measured, String> {
    let threads = ctx.clients.len();
    let (m, _) = timed(ctx, n, |t, c| {
        let reqs: Vec<_> = blocks(files, n, t, threads)
            .into_iter()
            .map(|(node, fh, off)| read_req(c, node, fh, off, SMALL_IO))
            .collect();
        move |lat: &mut Vec<Duration>| {
            let replies = pipeline_data(c, &reqs, depth, "READ", lat)?;
            check_read(&reqs, &replies, SMALL_IO)
        }
    })?;
    Ok(m)
}

/// 4 KiB WRITEs of what the data files hold already (so the next run's READs check the same
/// bytes).
fn writes(ctx: &Ctx, files: &[(u64, u64)], n: usize, depth: usize) -> Result<Measured, String> {
    let threads = ctx.clients.len();
    let bytes = data_file_bytes(DATA_LEN);
    let (m, _) = timed(ctx, n, |t, c| {
        let reqs: Vec<_> = blocks(files, n, t, threads)
            .into_iter()
            .map(|(node, fh, off)| {
                let block = &bytes[off as usize..(off + u64::from(SMALL_IO)) as usize];
                write_req(c, node, fh, off, block)
            })
            .collect();
        move |lat: &mut Vec<Duration>| {
            let replies = pipeline_data(c, &reqs, depth, "WRITE", lat)?;
            let heads: Vec<Vec<u8>> = replies.into_iter().map(|(_, head)| head).collect();
            check_written(&heads, SMALL_IO)
        }
    })?;
    Ok(m)
}

/// `n` CREATEs of new files spread over `dirs` (node IDs), `depth` in flight per thread; the
/// files are released after the phase.
fn creates(ctx: &Ctx, dirs: &[u64], n: usize, depth: usize) -> Result<Measured, String> {
    let threads = ctx.clients.len();
    let (m, created) = timed(ctx, n, |t, c| {
        let (ext, extlen) = c.create_ext();
        let reqs: Vec<_> = share_of(n, t, threads)
            .map(|i| {
                let parent = dirs[i % dirs.len()];
                (
                    create_req(c, parent, &file_name(i), &ext, extlen),
                    ENTRY + 16,
                )
            })
            .collect();
        move |lat: &mut Vec<Duration>| {
            let replies = pipeline(c, &reqs, depth, "CREATE", lat)?;
            Ok(replies
                .iter()
                .map(|r| {
                    let e: EntryOut = from_bytes(r, "CREATE entry");
                    let o: OpenOut =
                        from_bytes(&r[std::mem::size_of::<EntryOut>()..], "CREATE open");
                    (e.nodeid, o.fh)
                })
                .collect::<Vec<_>>())
        }
    })?;
    for (c, files) in ctx.clients.iter().zip(created) {
        let releases: Vec<_> = files
            .iter()
            .map(|&(node, fh)| release_req(c, node, fh, libc::O_WRONLY as u32))
            .collect();
        pipeline(c, &releases, depth, "RELEASE", &mut Vec::new())?;
    }
    Ok(m)
}
