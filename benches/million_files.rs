//! The million-file walks, against vhostfs and virtiofsd in each `--inode-file-handles` mode,
//! alternating:
//! - `plain` (issue 14 item 1): a test guest that does what a Windows guest does to a share —
//!   READDIRPLUS, then per entry LOOKUP, OPEN, GETATTR (fh), READ 4 KiB, RELEASE, never FORGET —
//!   over one directory of N files and a tree of √N directories × √N files;
//! - `windows` (issue 34 item 5, `million_files/windows.rs`): the virtio-win service's own
//!   requests (`tests/common/windows_client.rs`), `dir /s` then open + read of every file of
//!   √N directories × √N files, from `--threads` threads on one queue; not in `never` mode.
//!
//! `cargo bench --bench million_files -- [--files N | --quick] [--walks plain,windows]
//!  [--never-files K] [--rounds R] [--modes prefer,mandatory,never] [--threads T]
//!  [--scratch DIR] [--daemon-a CMD] [--daemon-b CMD] [--markdown FILE]`
//!
//! Each walk's share is created once on the host disk and reused by its runs (walks only read).
//! Per run: wall time, daemon CPU (utime + stime of the daemon's processes and their threads,
//! /proc/PID/stat), RSS growth per inode held, peak fd count (sampled) and fd count after 2 s
//! idle. `never` mode holds an O_PATH fd per inode, so it walks only the first K entries of each
//! part (RLIMIT_NOFILE). Exits 1 if any run failed (an error reply, a short read, wrong data, a
//! daemon that did not start).

#[path = "../tests/common/mod.rs"]
mod common;
#[path = "million_files/report.rs"]
mod report;
#[path = "shared/mod.rs"]
mod shared;
#[path = "million_files/walk.rs"]
mod walk;
#[path = "million_files/win_read.rs"]
mod win_read;
#[path = "million_files/windows.rs"]
mod windows;

use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;

use common::{FuseClient, TempDir, TestGuest};
use report::{Mode, Run};
use shared::DaemonCmd;
use walk::Layout;

/// Descriptors per virtqueue (QEMU's vhost-user-fs `queue-size=1024`).
pub const QUEUE_SIZE: u16 = 1024;
/// Guest memory.
pub const GUEST_MEM: usize = 64 << 20;
/// How long the daemon idles before the second fd count.
pub const IDLE: Duration = Duration::from_secs(2);
/// Between fd-count samples during the walk.
pub const SAMPLE: Duration = Duration::from_millis(500);

/// The walks.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Walk {
    Plain,
    Windows,
}

#[derive(Parser)]
#[command(about = "the million-file walk of a Windows guest, over the in-process test guest")]
pub struct Args {
    /// Files in the flat directory, and about as many in the tree (and the windows share).
    #[arg(long, default_value_t = 1_000_000)]
    files: usize,
    /// CI size: --files 100000.
    #[arg(long)]
    quick: bool,
    /// Walks to run.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "plain,windows"
    )]
    walks: Vec<Walk>,
    /// Entries walked per part in `never` mode (an O_PATH fd each; RLIMIT_NOFILE bounds it).
    #[arg(long, default_value_t = 5_000)]
    never_files: usize,
    /// Modes to run.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "prefer,mandatory,never"
    )]
    modes: Vec<Mode>,
    /// Rounds (each daemon once per round and mode, alternating).
    #[arg(long, default_value_t = 1)]
    rounds: usize,
    /// Requests in flight per step of a READDIRPLUS page (plain walk).
    #[arg(long, default_value_t = 16)]
    depth: usize,
    /// WinFsp dispatcher threads, a request in flight each (windows walk; the service runs 4–16).
    #[arg(long, default_value_t = 16)]
    threads: usize,
    /// Where the share is created (a host disk: a million files do not belong in RAM).
    #[arg(long, default_value = "/var/tmp")]
    scratch: PathBuf,
    /// Daemon A command (`--inode-file-handles`, `--socket-path`, `--shared-dir` are appended).
    #[arg(long)]
    daemon_a: Option<String>,
    /// Daemon B command. Default: `virtiofsd --sandbox=none --log-level=error`.
    #[arg(long)]
    daemon_b: Option<String>,
    /// Also write the markdown report to this file.
    #[arg(long)]
    markdown: Option<PathBuf>,
    /// Passed by `cargo bench`; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

/// One walk against a fresh daemon on `share`.
fn run_once(
    cmd: &DaemonCmd,
    mode: Mode,
    args: &Args,
    share: &std::path::Path,
    l: Layout,
) -> Result<Run, String> {
    let started = Started::new(cmd, mode, share)?;
    let (daemon, tail) = (&started.daemon, || started.log_tail());
    let guest = TestGuest::connect(&started.socket, 1, QUEUE_SIZE, GUEST_MEM)
        .map(Arc::new)
        .map_err(|e| format!("connect: {e}; daemon log: {}", tail()))?;
    let c = FuseClient::new(Arc::clone(&guest), 0);
    c.init().map_err(|e| format!("INIT: errno {e}"))?;
    let rss0 = daemon.rss_bytes().map_err(|e| e.to_string())?;
    let cpu0 = shared::CpuSample::of(daemon.pid());
    let limit = if mode == Mode::Never {
        args.never_files
    } else {
        usize::MAX
    };
    let stop = AtomicBool::new(false);
    let peak = AtomicUsize::new(0);
    let t = Instant::now();
    let walked = std::thread::scope(|s| {
        s.spawn(|| sample_fds(daemon, &stop, &peak));
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            walk::walk(&c, l, limit, args.depth)
        }));
        let wall = t.elapsed();
        stop.store(true, Ordering::Relaxed);
        (r, wall)
    });
    let (walked, wall) = walked;
    let walked = walked
        .map_err(|p| {
            p.downcast_ref::<String>()
                .cloned()
                .unwrap_or_else(|| "panic in the walk".into())
        })?
        .map_err(|e| format!("{e}; daemon log: {}", tail()))?;
    let cpu = shared::CpuSample::of(daemon.pid()).since(&cpu0);
    let rss1 = daemon.rss_bytes().map_err(|e| e.to_string())?;
    let fds_end = daemon.fd_count().map_err(|e| e.to_string())?;
    std::thread::sleep(IDLE);
    let fds_idle = daemon.fd_count().map_err(|e| e.to_string())?;
    Ok(Run {
        files: walked.files,
        inodes: walked.inodes.len(),
        wall,
        cpu,
        rss_growth: rss1.saturating_sub(rss0),
        fds_peak: peak.load(Ordering::Relaxed).max(fds_end),
        fds_idle,
    })
}

fn main() {
    let mut args = Args::parse();
    if args.quick {
        args.files = 100_000;
    }
    match run(&args) {
        Ok(true) => {}
        Ok(false) => std::process::exit(1),
        Err(e) => {
            eprintln!("million_files bench: {e}");
            std::process::exit(2);
        }
    }
}

fn run(args: &Args) -> Result<bool, String> {
    let started = Instant::now();
    let a = DaemonCmd::new(
        args.daemon_a
            .as_deref()
            .unwrap_or(&format!("{} --sandbox=none", env!("CARGO_BIN_EXE_vhostfs"))),
    )?;
    let b = match &args.daemon_b {
        Some(cmd) => DaemonCmd::new(cmd)?,
        None => {
            let bin = common::virtiofsd_path()
                .ok_or("virtiofsd not found (set $VIRTIOFSD or use --daemon-b)")?;
            DaemonCmd::new(&format!(
                "{} --sandbox=none --log-level=error",
                bin.display()
            ))?
        }
    };
    let daemons = [a, b];
    let mut out = report::preamble(&daemons);
    let mut failed = false;
    if args.walks.contains(&Walk::Plain) {
        let (report, errors) = plain(args, &daemons)?;
        out.push('\n');
        out.push_str(&report);
        failed |= !errors.is_empty();
    }
    if args.walks.contains(&Walk::Windows) {
        let (report, errors) = windows::run(args, &daemons)?;
        out.push('\n');
        out.push_str(&report);
        failed |= !errors.is_empty();
    }
    writeln!(out, "\nIn total {:.0} s.", started.elapsed().as_secs_f64()).unwrap();
    println!("{out}");
    if let Some(path) = &args.markdown {
        std::fs::write(path, &out).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(!failed)
}

/// Per mode of `modes`, `--rounds` rounds of `run` on each daemon, which one goes first
/// alternating by round: the runs per mode and daemon, and the failed runs (printed, labelled
/// `label` and the daemon's command line). `run` gets the round, from 1.
fn alternate<R>(
    args: &Args,
    modes: &[Mode],
    daemons: &[DaemonCmd; 2],
    label: &str,
    mut run: impl FnMut(&DaemonCmd, Mode, usize) -> Result<R, String>,
) -> (Vec<[Vec<R>; 2]>, Vec<String>) {
    let mut results: Vec<[Vec<R>; 2]> = modes.iter().map(|_| [Vec::new(), Vec::new()]).collect();
    let mut errors = Vec::new();
    for (m, &mode) in modes.iter().enumerate() {
        for round in 0..args.rounds.max(1) {
            let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
            for i in order {
                let d = &daemons[i];
                match run(d, mode, round + 1) {
                    Ok(r) => results[m][i].push(r),
                    Err(e) => {
                        let msg = format!(
                            "{label}{} round {} `{}`: {e}",
                            mode.name(),
                            round + 1,
                            d.command_line()
                        );
                        eprintln!("ERROR {msg}");
                        errors.push(msg);
                    }
                }
            }
        }
    }
    (results, errors)
}

/// A daemon of `cmd` started in `mode` on `share`, its socket and log in a temp dir of its own.
pub struct Started {
    pub daemon: common::Daemon,
    pub socket: PathBuf,
    log: PathBuf,
    _dir: TempDir,
}

impl Started {
    pub fn new(cmd: &DaemonCmd, mode: Mode, share: &std::path::Path) -> Result<Started, String> {
        let dir = TempDir::new("vhostfs-million").map_err(|e| e.to_string())?;
        let (socket, log) = (dir.join("vhost.sock"), dir.join("daemon.log"));
        let mut cmd = DaemonCmd {
            program: cmd.program.clone(),
            args: cmd.args.clone(),
        };
        cmd.args
            .push(format!("--inode-file-handles={}", mode.name()));
        let daemon = cmd.spawn(&socket, share, &log)?;
        Ok(Started {
            daemon,
            socket,
            log,
            _dir: dir,
        })
    }

    /// The daemon log's last 3 lines, for an error message.
    pub fn log_tail(&self) -> String {
        let s = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = s.lines().collect();
        lines[lines.len().saturating_sub(3)..].join(" / ")
    }
}

/// Samples `daemon`'s fd count every [`SAMPLE`] into `peak` until `stop`.
pub fn sample_fds(daemon: &common::Daemon, stop: &AtomicBool, peak: &AtomicUsize) {
    while !stop.load(Ordering::Relaxed) {
        if let Ok(n) = daemon.fd_count() {
            peak.fetch_max(n, Ordering::Relaxed);
        }
        std::thread::sleep(SAMPLE);
    }
}

/// The plain walks: the markdown report and the failed runs.
fn plain(args: &Args, daemons: &[DaemonCmd; 2]) -> Result<(String, Vec<String>), String> {
    let started = Instant::now();
    let l = Layout::new(args.files);
    let share =
        TempDir::new_in(&args.scratch, "vhostfs-million-share").map_err(|e| e.to_string())?;
    let t = Instant::now();
    walk::create(&share, l).map_err(|e| format!("creating the share: {e}"))?;
    let created = t.elapsed();
    eprintln!(
        "share: {} + {}×{} files in {} ({}), created in {:.0} s",
        l.flat_files,
        l.tree_dirs,
        l.files_per_dir,
        share.display(),
        shared::fs_type(&share),
        created.as_secs_f64()
    );
    let (results, errors) = alternate(args, &args.modes, daemons, "", |d, mode, round| {
        let r = run_once(d, mode, args, &share, l)?;
        eprintln!(
            "{} {} round {round}: {} files, {:.1} s, CPU {:.1} s",
            mode.name(),
            d.name(),
            r.files,
            r.wall.as_secs_f64(),
            r.cpu.as_secs_f64()
        );
        Ok(r)
    });
    drop(share);
    let out = report::render(
        args,
        daemons,
        l,
        created,
        &results,
        &errors,
        started.elapsed(),
    );
    Ok((out, errors))
}
