//! The slow-backend phases with no daemon and no guest (`--gluster`'s "host alone" column): host
//! threads make on the mount, themselves, the calls a passthrough daemon makes on the host per
//! request, as many threads as the guest keeps requests in flight. What they reach is the most
//! the filesystem and the host's CPUs give for those calls, whoever makes them: a daemon adds its
//! own work (the guest's requests, the virtqueues, its threads) on the same CPUs, so it can only
//! come below. Per request:
//! - LOOKUP: `openat(O_PATH)` of the name, `fstat` of the new fd (kept: the daemon keeps its
//!   inodes); GETATTR: `fstat` of that fd;
//! - READ and WRITE: `pread`/`pwrite` of 4 KiB on a file opened read-write before the phase,
//!   the same blocks as the daemon runs ([`super::slow::picks`]);
//! - CREATE: `openat(O_CREAT | O_EXCL)`, `fstat`; closed after the phase (RELEASE);
//! - READDIRPLUS listing: `getdents64` of the directory and `fstatat` of every entry.

use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::FileExt;

use super::slow::*;
use super::*;

/// `openat(dir, name, flags, 0o644)` with `O_CLOEXEC`.
fn open_at(dir: &File, name: &str, flags: i32) -> io::Result<OwnedFd> {
    let name = std::ffi::CString::new(name).map_err(|_| io::ErrorKind::InvalidInput)?;
    // SAFETY: `dir` is an open directory and `name` a NUL-terminated string; the returned fd,
    // if any, is new and owned by nobody else.
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            name.as_ptr(),
            flags | libc::O_CLOEXEC,
            0o644,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just opened and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `fstat(fd)` (an `O_PATH` fd too).
fn stat_fd(fd: &impl AsRawFd) -> io::Result<()> {
    // SAFETY: `st` is plain data written by the kernel; `fd` is open.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn err(what: &str) -> impl Fn(io::Error) -> String + '_ {
    move |e| format!("host alone, {what}: {e}")
}

/// One timed phase on `threads` threads: thread `t` runs `job(t)` (its latencies, one per
/// request, go in the vector it is given); the phase lasts until the last thread ends.
fn timed_on_host<T: Send>(
    threads: usize,
    ops: usize,
    job: impl Fn(usize, &mut Vec<Duration>) -> Result<T, String> + Sync,
) -> Result<(Measured, Vec<T>), String> {
    let barrier = Barrier::new(threads + 1);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (job, barrier) = (&job, &barrier);
                s.spawn(move || {
                    let mut lat = Vec::new();
                    barrier.wait();
                    job(t, &mut lat).map(|out| (lat, out))
                })
            })
            .collect();
        let host0 = crate::stats::HostCpu::now();
        barrier.wait();
        let start = Instant::now();
        let results: Vec<_> = handles.into_iter().map(|h| h.join()).collect();
        let elapsed = start.elapsed();
        let host_busy = crate::stats::HostCpu::now().busy_since(&host0);
        let (latencies, outputs) = gather(results)?;
        let m = Measured::new(ops, elapsed, Duration::ZERO, host_busy, latencies);
        Ok((m, outputs))
    })
}

/// Times `call` into `lat`.
fn time<T>(lat: &mut Vec<Duration>, call: impl FnOnce() -> io::Result<T>) -> io::Result<T> {
    let t = Instant::now();
    let out = call();
    lat.push(t.elapsed());
    out
}

/// The phases of `super::slow::run` on 1 queue (not those one at a time), on `share` directly
/// with `threads` threads; CREATEs go to the directories of run `run` (`prepare_run`).
pub fn run(
    share: &Path,
    s: &SlowSizes,
    run: &str,
    threads: usize,
) -> Result<Vec<(&'static str, Measured)>, String> {
    let files_dir = File::open(share.join(FILES_DIR)).map_err(err(FILES_DIR))?;
    drop_caches()?;
    let (lookup, fds) = timed_on_host(threads, s.files, |t, lat| {
        share_of(s.files, t, threads)
            .map(|i| {
                time(lat, || {
                    let fd = open_at(&files_dir, &file_name(i), libc::O_PATH | libc::O_NOFOLLOW)?;
                    stat_fd(&fd)?;
                    Ok(fd)
                })
                .map_err(err("LOOKUP"))
            })
            .collect::<Result<Vec<_>, _>>()
    })?;
    drop_caches()?;
    std::thread::sleep(ATTR_TIMEOUT);
    let (getattr, _) = timed_on_host(threads, s.files, |t, lat| {
        fds[t]
            .iter()
            .try_for_each(|fd| time(lat, || stat_fd(fd)).map_err(err("GETATTR")))
    })?;
    drop(fds);

    let data_dir = share.join(DATA_DIR);
    let data = (0..DATA_FILES)
        .map(|i| {
            let path = data_dir.join(file_name(i));
            File::options().read(true).write(true).open(&path)
        })
        .collect::<io::Result<Vec<File>>>()
        .map_err(err(DATA_DIR))?;
    let bytes = data_file_bytes(DATA_LEN);
    let io_phase = |files: &[File], write: bool| {
        drop_caches()?;
        timed_on_host(threads, s.ios, |t, lat| {
            let mut buf = vec![0u8; SMALL_IO as usize];
            for (i, off) in picks(files.len(), s.ios, t, threads) {
                let block = &bytes[off as usize..off as usize + buf.len()];
                let f = &files[i];
                if write {
                    time(lat, || f.write_all_at(block, off)).map_err(err("WRITE"))?;
                } else {
                    time(lat, || f.read_exact_at(&mut buf, off)).map_err(err("READ"))?;
                    if buf != block {
                        return Err(format!("host alone, READ at {off}: wrong bytes"));
                    }
                }
            }
            Ok(())
        })
        .map(|(m, _)| m)
    };
    let read = io_phase(&data, false)?;
    let write = io_phase(&data, true)?;
    let write_one = io_phase(&data[..1], true)?;
    drop(data);

    let this_run = share.join(RUNS_DIR).join(run);
    let dirs = (0..=CREATE_DIRS)
        .map(|j| File::open(this_run.join(file_name(j))))
        .collect::<io::Result<Vec<File>>>()
        .map_err(err(RUNS_DIR))?;
    let create_phase = |dirs: &[File]| {
        drop_caches()?;
        let (m, created) = timed_on_host(threads, s.creates, |t, lat| {
            share_of(s.creates, t, threads)
                .map(|i| {
                    time(lat, || {
                        let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL;
                        let fd = open_at(&dirs[i % dirs.len()], &file_name(i), flags)?;
                        stat_fd(&fd)?;
                        Ok(fd)
                    })
                    .map_err(err("CREATE"))
                })
                .collect::<Result<Vec<_>, _>>()
        })?;
        drop(created);
        Ok::<_, String>(m)
    };
    let create = create_phase(&dirs[..CREATE_DIRS])?;
    let create_one = create_phase(&dirs[CREATE_DIRS..])?;

    drop_caches()?;
    let files_path = share.join(FILES_DIR);
    let (listing, _) = timed_on_host(threads, s.listings, |t, lat| {
        for _ in share_of(s.listings, t, threads) {
            let t0 = Instant::now();
            let mut entries = 0;
            for entry in fs::read_dir(&files_path).map_err(err("OPENDIR"))? {
                let entry = entry.map_err(err("READDIR"))?;
                // `DirEntry::metadata` is `fstatat(dir, name, AT_SYMLINK_NOFOLLOW)`.
                entry.metadata().map_err(err("fstatat"))?;
                entries += 1;
            }
            lat.push(t0.elapsed());
            if entries != s.files {
                return Err(format!("host alone: {entries} entries, not {}", s.files));
            }
        }
        Ok(())
    })?;
    Ok(phase_rows([
        lookup, getattr, read, write, write_one, create, create_one, listing,
    ]))
}
