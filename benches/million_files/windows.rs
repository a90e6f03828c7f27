//! The million files of a Windows guest (issue 34 item 5), sent as the virtio-win service sends
//! them (`tests/common/windows_client.rs`): `dir /s` of a share of D directories × F files and a
//! few symlinks, then open + read 4 KiB of every file, each path walked from node 1 twice per
//! open, never a FORGET. WinFsp's dispatcher threads are `--threads` senders sharing the one
//! request queue, a request in flight each. `dir /s`: the root is listed, then each of
//! `--threads` threads lists the next directory with [`WindowsClient::dir_s`] (a guest with
//! shared waits). Open + read: `win_read`, the same requests as the client's, from one thread.
//! Every reply is checked: an error reply, a wrong listing, node, size or content fails the run.

use std::collections::HashMap;
use std::fs;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::windows_client::WindowsClient;
use crate::common::{FuseClient, GuestOptions, TempDir, TestGuest};
use crate::report::{self, by_opcode, op_name, Mode, Timed};
use crate::shared::{self, DaemonCmd};
use crate::walk::{content, dir_name, file_name, Layout};
use crate::win_read::{self, Tally, READ_SIZE};
use crate::{alternate, sample_fds, Args, Started, GUEST_MEM, IDLE, QUEUE_SIZE};

/// Symlinks at the share root: to a directory (`dir /s` reads the link and walks its target;
/// one file is read through each) and to a file (read and walked by `dir /s`).
pub const LINKS: usize = 4;

fn dir_link(k: usize) -> String {
    format!("dlink{k}")
}

fn file_link(k: usize) -> String {
    format!("flink{k}")
}

/// The directory a link points to: spread over the share.
fn link_dir(l: Layout, k: usize) -> String {
    dir_name(k * l.tree_dirs / LINKS)
}

/// Create the share under `root`: `tree_dirs` directories of `files_per_dir` files at the root
/// (two threads), and the symlinks, relative (the service walks targets from the share root).
pub fn create(root: &Path, l: Layout) -> io::Result<()> {
    for d in 0..l.tree_dirs {
        fs::create_dir(root.join(dir_name(d)))?;
    }
    for k in 0..LINKS {
        let d = link_dir(l, k);
        std::os::unix::fs::symlink(&d, root.join(dir_link(k)))?;
        let f = format!("{d}/{}", file_name(l.files_per_dir - 1));
        std::os::unix::fs::symlink(f, root.join(file_link(k)))?;
    }
    std::thread::scope(|s| {
        let jobs: Vec<_> = (0..2)
            .map(|t| {
                s.spawn(move || -> io::Result<()> {
                    for d in (t..l.tree_dirs).step_by(2) {
                        let dn = dir_name(d);
                        for i in 0..l.files_per_dir {
                            let n = file_name(i);
                            fs::write(root.join(&dn).join(&n), content(&dn, &n))?;
                        }
                    }
                    Ok(())
                })
            })
            .collect();
        jobs.into_iter()
            .try_for_each(|j| j.join().unwrap_or_else(|_| Err(io::Error::other("panic"))))
    })
}

/// One Windows walk by one daemon.
#[derive(Clone)]
pub struct WinRun {
    pub files: usize,
    /// Node IDs the client holds (never forgotten).
    pub inodes: usize,
    pub dir_s: Duration,
    pub read: Duration,
    pub cpu: Duration,
    /// The client's (this process's) CPU over the walk: its threads wait for the daemon, and
    /// the daemon for them.
    pub client_cpu: Duration,
    pub rss_growth: u64,
    pub replies: HashMap<u32, u64>,
    pub errors: HashMap<u32, u64>,
    pub fds_peak: usize,
    pub fds_idle: usize,
    /// Of `fds_idle`, those on the share's files and directories.
    pub share_fds_idle: usize,
}

impl Timed for WinRun {
    fn wall(&self) -> Duration {
        self.dir_s + self.read
    }
}

impl WinRun {
    pub fn requests(&self) -> u64 {
        self.replies.values().sum()
    }
    pub fn bytes_per_inode(&self) -> f64 {
        self.rss_growth as f64 / self.inodes.max(1) as f64
    }
}

/// User + system CPU of this process.
fn own_cpu() -> Duration {
    // SAFETY: getrusage fills the zeroed struct.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let us = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    Duration::from_micros(us(u.ru_utime) + us(u.ru_stime))
}

/// The fds of `pid` on `share` or below it.
fn share_fds(pid: u32, share: &Path) -> io::Result<usize> {
    let mut n = 0;
    for e in fs::read_dir(format!("/proc/{pid}/fd"))? {
        if fs::read_link(e?.path()).is_ok_and(|t| t.starts_with(share)) {
            n += 1;
        }
    }
    Ok(n)
}

/// Run `work(i)` for every `i < n` on `threads` threads, each taking the next `i`; the first
/// error stops them all. Returns the sum of what `work` returned.
fn spread(
    threads: usize,
    n: usize,
    work: impl Fn(usize) -> Result<usize, String> + Sync,
) -> Result<usize, String> {
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let jobs: Vec<_> = (0..threads.max(1))
            .map(|_| {
                s.spawn(|| {
                    let mut sum = 0;
                    while !stop.load(Ordering::Relaxed) {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= n {
                            break;
                        }
                        match work(i) {
                            Ok(k) => sum += k,
                            Err(e) => {
                                stop.store(true, Ordering::Relaxed);
                                return Err(e);
                            }
                        }
                    }
                    Ok(sum)
                })
            })
            .collect();
        jobs.into_iter()
            .map(|j| j.join().unwrap_or_else(|_| Err("panic in the walk".into())))
            .sum()
    })
}

fn failed(what: &str, f: crate::common::windows_client::Failed) -> String {
    format!(
        "{} {what}: {}",
        op_name(f.opcode),
        io::Error::from_raw_os_error(f.errno)
    )
}

/// `dir /s` of the share: the root, then every directory. Returns the entries listed.
fn dir_s(w: &WindowsClient, l: Layout, threads: usize) -> Result<usize, String> {
    let root = w.open("", 0).map_err(|f| failed("\\", f))?;
    let entries = w.read_directory(&root).map_err(|f| failed("\\", f))?;
    w.close(&root);
    let mut names: Vec<&str> = entries.iter().map(|(n, _)| n.as_str()).collect();
    names.sort_unstable();
    let mut want: Vec<String> = (0..l.tree_dirs).map(dir_name).collect();
    want.extend((0..LINKS).flat_map(|k| [dir_link(k), file_link(k)]));
    want.extend([".".into(), "..".into()]);
    want.sort_unstable();
    if names != want {
        return Err(format!(
            "dir /s \\: {} entries, {} expected",
            names.len(),
            want.len()
        ));
    }
    let listed = spread(threads, l.tree_dirs, |d| {
        let dn = dir_name(d);
        let all = w.dir_s(&dn).map_err(|f| failed(&dn, f))?;
        if all.len() != l.files_per_dir {
            return Err(format!(
                "dir /s {dn}: {} entries, {} expected",
                all.len(),
                l.files_per_dir
            ));
        }
        Ok(all.len())
    })?;
    Ok(entries.len() - 2 + listed)
}

/// Open, GETATTR (fh), READ 4 KiB, close `path`, whose content is `dir`/`name`'s.
fn read_one(w: &WindowsClient, path: &str, dir: &str, name: &str) -> Result<(), String> {
    let o = w
        .open(path, libc::O_RDONLY as u32)
        .map_err(|f| failed(path, f))?;
    let data = w.read(&o, 0, READ_SIZE).map_err(|f| failed(path, f));
    w.close(&o);
    let data = data?;
    let want = content(dir, name);
    if o.attr.size != want.len() as u64 || data != want {
        return Err(format!(
            "{path}: size {}, {:?}; {:?} expected",
            o.attr.size,
            String::from_utf8_lossy(&data),
            String::from_utf8_lossy(&want)
        ));
    }
    Ok(())
}

/// Open + read every file (`win_read`), and one file through each directory link (the walk
/// reads the link and walks its target).
fn read_all(
    guest: &Arc<TestGuest>,
    w: &WindowsClient,
    l: Layout,
    threads: usize,
) -> Result<Tally, String> {
    let c = FuseClient::new(Arc::clone(guest), 0);
    let mut t = win_read::read_all(guest, &c, w, l, threads)?;
    for k in 0..LINKS {
        let f = file_name(0);
        read_one(w, &format!("{}/{f}", dir_link(k)), &link_dir(l, k), &f)?;
        t.files += 1;
    }
    Ok(t)
}

/// The Windows walk against a fresh daemon on `share`.
fn run_once(
    cmd: &DaemonCmd,
    mode: Mode,
    args: &Args,
    share: &Path,
    l: Layout,
) -> Result<WinRun, String> {
    let started = Started::new(cmd, mode, share)?;
    let (daemon, tail) = (&started.daemon, || started.log_tail());
    let mut opts = GuestOptions::new(1, QUEUE_SIZE, GUEST_MEM);
    opts.shared_waits = true;
    let guest = TestGuest::connect_with(&started.socket, &opts)
        .map(Arc::new)
        .map_err(|e| format!("connect: {e}; daemon log: {}", tail()))?;
    let w = WindowsClient::mount(Arc::clone(&guest)).map_err(|f| failed("mount", f))?;
    let pid = daemon.served_pid().map_err(|e| e.to_string())?;
    let rss0 = daemon.rss_bytes().map_err(|e| e.to_string())?;
    let cpu0 = shared::CpuSample::of(daemon.pid());
    let client0 = own_cpu();
    let stop = AtomicBool::new(false);
    let peak = AtomicUsize::new(0);
    let walked = std::thread::scope(|s| {
        s.spawn(|| sample_fds(daemon, &stop, &peak));
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let t = Instant::now();
            let listed = dir_s(&w, l, args.threads)?;
            let dir_s = t.elapsed();
            let t = Instant::now();
            let files = read_all(&guest, &w, l, args.threads)?;
            Ok::<_, String>((listed, dir_s, files, t.elapsed()))
        }));
        stop.store(true, Ordering::Relaxed);
        r
    });
    let (_, dir_s, tally, read) = walked
        .map_err(|p| {
            p.downcast_ref::<String>()
                .cloned()
                .unwrap_or_else(|| "panic in the walk".into())
        })?
        .map_err(|e| {
            format!(
                "{e}; error replies of dir /s and the links {}; daemon log: {}",
                by_opcode(&w.errors()),
                tail()
            )
        })?;
    let cpu = shared::CpuSample::of(daemon.pid()).since(&cpu0);
    let client_cpu = own_cpu().saturating_sub(client0);
    let rss1 = daemon.rss_bytes().map_err(|e| e.to_string())?;
    let fds_end = daemon.fd_count().map_err(|e| e.to_string())?;
    std::thread::sleep(IDLE);
    let fds_idle = daemon.fd_count().map_err(|e| e.to_string())?;
    let share_fds_idle = share_fds(pid, share).map_err(|e| e.to_string())?;
    let merge = |mut a: HashMap<u32, u64>, b: &HashMap<u32, u64>| {
        for (op, n) in b {
            *a.entry(*op).or_default() += n;
        }
        a
    };
    Ok(WinRun {
        files: tally.files,
        inodes: w.nodes_held() + tally.new_nodes.len(),
        dir_s,
        read,
        cpu,
        client_cpu,
        rss_growth: rss1.saturating_sub(rss0),
        replies: merge(w.replies(), &tally.replies),
        errors: merge(w.errors(), &tally.errors),
        fds_peak: peak.load(Ordering::Relaxed).max(fds_end),
        fds_idle,
        share_fds_idle,
    })
}

/// The Windows walks: per `--inode-file-handles` mode but `never` (an O_PATH fd per inode:
/// it cannot hold a million), each daemon once per round, alternating. Returns the markdown
/// report and the failed runs.
pub fn run(args: &Args, daemons: &[DaemonCmd; 2]) -> Result<(String, Vec<String>), String> {
    let started = Instant::now();
    let l = Layout::new(args.files);
    let share = TempDir::new_in(&args.scratch, "vhostfs-million-win").map_err(|e| e.to_string())?;
    let t = Instant::now();
    create(&share, l).map_err(|e| format!("creating the share: {e}"))?;
    let created = t.elapsed();
    eprintln!(
        "windows share: {}×{} files + {} symlinks in {} ({}), created in {:.0} s",
        l.tree_dirs,
        l.files_per_dir,
        2 * LINKS,
        share.display(),
        shared::fs_type(&share),
        created.as_secs_f64()
    );
    let modes: Vec<Mode> = args
        .modes
        .iter()
        .copied()
        .filter(|&m| m != Mode::Never)
        .collect();
    let (results, mut errors) = alternate(args, &modes, daemons, "windows ", |d, mode, round| {
        let r = run_once(d, mode, args, &share, l)?;
        eprintln!(
            "windows {} {} round {round}: {} files, dir /s {:.1} s + read {:.1} s, CPU {:.1} s, \
             error replies {}",
            mode.name(),
            d.name(),
            r.files,
            r.dir_s.as_secs_f64(),
            r.read.as_secs_f64(),
            r.cpu.as_secs_f64(),
            by_opcode(&r.errors)
        );
        Ok(r)
    });
    for (m, &mode) in modes.iter().enumerate() {
        for (i, d) in daemons.iter().enumerate() {
            for r in results[m][i].iter().filter(|r| !r.errors.is_empty()) {
                errors.push(format!(
                    "windows {} `{}`: error replies {}",
                    mode.name(),
                    d.command_line(),
                    by_opcode(&r.errors)
                ));
            }
        }
    }
    drop(share);
    let out = report::render_windows(
        args,
        daemons,
        l,
        created,
        &modes,
        &results,
        &errors,
        started.elapsed(),
    );
    Ok((out, errors))
}
