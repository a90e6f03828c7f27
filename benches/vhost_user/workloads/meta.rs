//! The metadata workloads: LOOKUP and GETATTR (in flight and one at a time) and FORGET,
//! READDIRPLUS listings, CREATE + WRITE + RELEASE of new files.

use super::*;

pub(super) fn lookup_req(c: &FuseClient, parent: u64, name: &str) -> (Vec<u8>, usize) {
    (c.request(FUSE_LOOKUP, parent, &cstr(name)), ENTRY)
}

pub(super) fn untimed_lookup(c: &FuseClient, parent: u64, name: &str) -> Result<u64, String> {
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
    named_lookups(ctx, dir, ctx.sizes.dir_entries, file_name, passes, depth)
}

/// LOOKUP of `name(i)` for `i` in `0..n` in `dir`, `passes` times over, in parallel, `depth` in
/// flight per thread; returns the node IDs per thread (of one pass).
fn named_lookups(
    ctx: &Ctx,
    dir: u64,
    n: usize,
    name: fn(usize) -> String,
    passes: usize,
    depth: usize,
) -> Result<(Measured, Vec<Vec<u64>>), String> {
    let threads = ctx.clients.len();
    timed(ctx, n * passes, |t, c| {
        let reqs: Vec<_> = (0..passes)
            .flat_map(|_| share_of(n, t, threads))
            .map(|i| lookup_req(c, dir, &name(i)))
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

pub(super) fn lookup(ctx: &Ctx) -> Result<Vec<(&'static str, Measured)>, String> {
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

pub(super) fn casefold(ctx: &Ctx) -> Result<Vec<(&'static str, Measured)>, String> {
    let c0 = &ctx.clients[0];
    let dir = untimed_lookup(c0, FUSE_ROOT_ID, CASE_DIR)?;
    let (n, passes, depth) = (
        ctx.sizes.casefold_entries,
        ctx.sizes.passes,
        ctx.sizes.small_depth,
    );
    // Every node held (as a guest that listed the directory), and the names read once by a
    // lookup in another case; then both kinds, warm.
    let (_, nodes) = named_lookups(ctx, dir, n, |i| cased_name(i, false), 1, depth)?;
    untimed_lookup(c0, dir, &cased_name(0, true)).map_err(|e| {
        format!("{e} (the casefold workload needs --case-insensitive on both daemons)")
    })?;
    let (exact, _) = named_lookups(ctx, dir, n, |i| cased_name(i, false), passes, depth)?;
    let (other, _) = named_lookups(ctx, dir, n, |i| cased_name(i, true), passes, depth)?;
    forget_all(c0, &nodes, 2 + 2 * passes as u64);
    Ok(vec![
        ("LOOKUP warm, exact name", exact),
        ("LOOKUP warm, name in another case", other),
    ])
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

pub(super) fn readdirplus(ctx: &Ctx) -> Result<Vec<(&'static str, Measured)>, String> {
    let dir = untimed_lookup(&ctx.clients[0], FUSE_ROOT_ID, BIG_DIR)?;
    let m = listings(
        ctx,
        dir,
        ctx.sizes.dir_entries,
        ctx.sizes.listings,
        ctx.mult,
    )?;
    Ok(vec![("READDIRPLUS whole dir (per listing)", m)])
}

/// `listings` whole listings of directory `dir` (node ID), which holds `expected` files, spread
/// over the threads, each thread keeping `at_once` of its listings going.
pub(super) fn listings(
    ctx: &Ctx,
    dir: u64,
    expected: usize,
    listings: usize,
    at_once: usize,
) -> Result<Measured, String> {
    let threads = ctx.clients.len();
    let (m, _) = timed(ctx, listings, |t, c| {
        let mine = share_of(listings, t, threads).count();
        move |lat: &mut Vec<Duration>| {
            // `at_once` listings at a time, in lockstep: one request of each per pipeline.
            let mut todo = mine;
            let mut lanes: Vec<Listing> = Vec::new();
            while todo > 0 || !lanes.is_empty() {
                while lanes.len() < at_once && todo > 0 {
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
    Ok(m)
}

pub(super) fn create(ctx: &Ctx) -> Result<Vec<(&'static str, Measured)>, String> {
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
                let parent = jobs[i / s.files_per_job];
                (
                    create_req(
                        c,
                        parent,
                        &format!("file{}", i % s.files_per_job),
                        &ext,
                        extlen,
                    ),
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
