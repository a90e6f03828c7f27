//! The per-file check (a seed lesson: no per-file serialization in the daemon). 4 KiB random
//! READs with every client thread on one file, and with a file per thread; 4 KiB random WRITEs
//! with every thread on its own region of one file. The bench compares, for daemon A, "one file"
//! with "a file per thread" at 4 threads (≥ 0.90 expected) and the WRITE row at 4 threads with
//! the same row at 1 thread (no slower expected): see `per_file_checks` in `vhost_user.rs`.

use super::*;

pub const READ_ONE: &str = "READ 4 KiB random, one file for all threads";
pub const READ_OWN: &str = "READ 4 KiB random, a file per thread";
pub const WRITE_ONE: &str = "WRITE 4 KiB random, one file, a region per thread";

const ONE_FILE: &str = "one.bin";

fn own_file(t: usize) -> String {
    format!("own{t}.bin")
}

/// The shared file and one file per possible client thread, each a copy of the data file.
pub(super) fn prepare(dir: &Path, sizes: &Sizes, max_threads: usize) -> io::Result<()> {
    let data = data_file_bytes(sizes.data_file);
    fs::write(dir.join(ONE_FILE), &data)?;
    for t in 0..max_threads {
        fs::write(dir.join(own_file(t)), &data)?;
    }
    Ok(())
}

/// Opens the files `names(thread)` of each thread (untimed); returns their (node ID, fh) per
/// thread.
fn open_each(
    ctx: &Ctx,
    names: impl Fn(usize) -> Vec<String>,
    flags: i32,
) -> Result<Vec<Vec<(u64, u64)>>, String> {
    ctx.clients
        .iter()
        .enumerate()
        .map(|(t, c)| {
            names(t)
                .iter()
                .map(|name| {
                    let node = untimed_lookup(c, FUSE_ROOT_ID, name)?;
                    let fh = c
                        .open(node, flags as u32)
                        .map_err(|e| fuse_err("OPEN", e))?
                        .fh;
                    Ok((node, fh))
                })
                .collect()
        })
        .collect()
}

fn close_each(ctx: &Ctx, files: &[Vec<(u64, u64)>], flags: i32) -> Result<(), String> {
    for (c, own) in ctx.clients.iter().zip(files) {
        for &(node, fh) in own {
            c.release(node, fh, flags as u32)
                .map_err(|e| fuse_err("RELEASE", e))?;
            c.forget(node, 1);
        }
    }
    Ok(())
}

/// The shared file, once per thread.
fn one_file(_thread: usize) -> Vec<String> {
    vec![ONE_FILE.to_owned()]
}

/// `ctx.sizes.random_reads` 4 KiB random READs over the threads' `files` (a thread that has
/// several takes them in turn).
fn reads(ctx: &Ctx, files: &[Vec<(u64, u64)>]) -> Result<Measured, String> {
    let n = ctx.sizes.random_reads;
    let blocks = ctx.sizes.data_file / u64::from(SMALL_IO);
    let threads = ctx.clients.len();
    let (m, _) = timed(ctx, n, |t, c| {
        let mut rng = Rng::new(t as u64 + 1);
        let own = &files[t];
        let reqs: Vec<_> = share_of(n, t, threads)
            .enumerate()
            .map(|(i, _)| {
                let (node, fh) = own[i % own.len()];
                read_req(
                    c,
                    node,
                    fh,
                    rng.below(blocks) * u64::from(SMALL_IO),
                    SMALL_IO,
                )
            })
            .collect();
        move |lat: &mut Vec<Duration>| {
            let replies = pipeline_data(c, &reqs, ctx.sizes.small_depth * ctx.mult, "READ", lat)?;
            check_read(&reqs, &replies, SMALL_IO)
        }
    })?;
    Ok(m)
}

/// As many 4 KiB random WRITEs, each thread within its own part of the threads' shared file.
fn writes(ctx: &Ctx, files: &[Vec<(u64, u64)>]) -> Result<Measured, String> {
    let n = ctx.sizes.random_reads;
    let threads = ctx.clients.len();
    let region = ctx.sizes.data_file / u64::from(SMALL_IO) / threads as u64;
    let data = vec![0x3c; SMALL_IO as usize];
    let (m, _) = timed(ctx, n, |t, c| {
        let mut rng = Rng::new(t as u64 + 50);
        let (node, fh) = files[t][0];
        let reqs: Vec<_> = share_of(n, t, threads)
            .map(|_| {
                let block = t as u64 * region + rng.below(region);
                write_req(c, node, fh, block * u64::from(SMALL_IO), &data)
            })
            .collect();
        move |lat: &mut Vec<Duration>| {
            let replies = pipeline_data(c, &reqs, ctx.sizes.small_depth * ctx.mult, "WRITE", lat)?;
            let heads: Vec<Vec<u8>> = replies.into_iter().map(|(_, head)| head).collect();
            check_written(&heads, SMALL_IO)
        }
    })?;
    Ok(m)
}

pub(super) fn run(ctx: &Ctx) -> Result<Vec<(&'static str, Measured)>, String> {
    let one = open_each(ctx, one_file, libc::O_RDONLY)?;
    let read_one = reads(ctx, &one)?;
    close_each(ctx, &one, libc::O_RDONLY)?;
    // A thread that stands for `mult` threads (`×4 in flight`) reads their `mult` files: the
    // same 4 files, the same page cache, as 4 threads with one file each.
    let own = open_each(
        ctx,
        |t| (0..ctx.mult).map(|k| own_file(t * ctx.mult + k)).collect(),
        libc::O_RDONLY,
    )?;
    let read_own = reads(ctx, &own)?;
    close_each(ctx, &own, libc::O_RDONLY)?;
    let one = open_each(ctx, one_file, libc::O_RDWR)?;
    let write_one = writes(ctx, &one)?;
    close_each(ctx, &one, libc::O_RDWR)?;
    Ok(vec![
        (READ_ONE, read_one),
        (READ_OWN, read_own),
        (WRITE_ONE, write_one),
    ])
}
