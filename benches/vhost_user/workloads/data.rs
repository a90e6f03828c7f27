//! The data workloads: 4 KiB random READs, 1 MiB sequential READs and WRITEs, and the mixed
//! readers and writers; the request builders and reply checks the per-file check shares.

use super::*;

pub(super) fn write_req(
    c: &FuseClient,
    node: u64,
    fh: u64,
    offset: u64,
    data: &[u8],
) -> (Vec<u8>, usize) {
    let body = FuseClient::write_body(fh, offset, data);
    (c.request(FUSE_WRITE, node, &body), HDR + 8)
}

pub(super) fn read_req(
    c: &FuseClient,
    node: u64,
    fh: u64,
    offset: u64,
    size: u32,
) -> (Vec<u8>, usize) {
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

pub(super) fn release_req(c: &FuseClient, node: u64, fh: u64, flags: u32) -> (Vec<u8>, usize) {
    let inp = ReleaseIn {
        fh,
        flags,
        ..Default::default()
    };
    (c.request(FUSE_RELEASE, node, inp.as_slice()), HDR)
}

pub(super) fn check_written(replies: &[Vec<u8>], size: u32) -> Result<(), String> {
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
pub(super) fn check_read(
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

pub(super) fn randread(ctx: &Ctx) -> Result<Vec<(&'static str, Measured)>, String> {
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

pub(super) fn seqread(ctx: &Ctx) -> Result<Vec<(&'static str, Measured)>, String> {
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

pub(super) fn seqwrite(ctx: &Ctx) -> Result<Vec<(&'static str, Measured)>, String> {
    // One new file per thread, written from start to end and over again: `data_file` bytes, in
    // passes, like fio's time-based write job on a fixed-size file. As fio does, the files are
    // laid out first (one untimed pass), so the timed WRITEs land in the files' page cache: the
    // host's page allocation, which on a VM can mean the hypervisor faulting in fresh memory
    // (single rounds swung 0.28-4.07 when every WRITE allocated), stays out of the measurement,
    // and 4 client threads (4 files) allocate no more during it than 1 thread (1 file) does.
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
    for (c, &(node, fh)) in ctx.clients.iter().zip(&files) {
        let layout: Vec<_> = (0..blocks)
            .map(|k| write_req(c, node, fh, k * u64::from(BIG_IO), &data))
            .collect();
        let replies = pipeline(c, &layout, BIG_DEPTH, "WRITE", &mut Vec::new())?;
        check_written(&replies, BIG_IO)?;
    }
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

pub(super) fn mixed(ctx: &Ctx) -> Result<Vec<(&'static str, Measured)>, String> {
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
