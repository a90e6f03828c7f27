//! A host's worth of daemons (issue 36 item 4): N daemons (200 by default) of one kind started
//! one after the other on N sockets, a test-guest session connected to each, a little work done
//! on each (LOOKUP, OPEN, a 4 KiB READ, CREATE and a 4 KiB WRITE of a file of its own), then
//! idling; then every session sends a burst at once. The same for daemon B (virtiofsd with its
//! default sandbox) after daemon A (vhostfs) is gone.
//!
//! `cargo bench --bench many_daemons -- [--daemons N] [--idle SECS] [--daemon-a CMD]
//!  [--daemon-b CMD] [--markdown FILE]`
//!
//! Reported per kind: start-up time to a listening socket (p50/p99, polled every millisecond),
//! all daemons' processes, threads, fds and PSS while idle (after 3 s of settling), their context
//! switches during the idle time (0 expected), and a burst's time to the last reply (each
//! session: GETATTR, LOOKUP, OPEN, READ 4 KiB, RELEASE, one at a time), five bursts 3 s apart
//! (each finds the daemons idle). The client needs more
//! fds than the default soft limit (about 8 per session): it raises its own to the hard limit,
//! and runs fewer daemons, saying so, if that is not enough. Exits 1 if a daemon did not start
//! or a request failed.

#[path = "../tests/common/mod.rs"]
mod common;
// The benches' shared module: this one uses its daemon command lines and report header only.
#[allow(dead_code)]
#[path = "shared/mod.rs"]
mod shared;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use clap::Parser;

use common::footprint::{context_switches, footprint, Footprint};
use common::{Daemon, FuseClient, TempDir, TestGuest};
use shared::DaemonCmd;

/// Descriptors per virtqueue of each session.
const QUEUE_SIZE: u16 = 64;
/// Guest memory of each session.
const GUEST_MEM: usize = 8 << 20;
/// Idling before the footprint is taken (past every daemon's lingering helpers).
const SETTLE: Duration = Duration::from_secs(3);
/// What a session holds open in this process (socket, memory, two eventfds per queue, spares).
const FDS_PER_SESSION: u64 = 10;
/// Bursts, each after the daemons idled [`SETTLE`].
const BURSTS: usize = 5;
/// How often a starting daemon's socket is looked for.
const POLL: Duration = Duration::from_millis(1);

#[derive(Parser)]
#[command(about = "many idle daemons on one host, then a burst to all of them")]
struct Args {
    /// Daemons of each kind.
    #[arg(long, default_value_t = 200)]
    daemons: usize,
    /// Seconds of idling over which context switches are counted.
    #[arg(long, default_value_t = 10)]
    idle: u64,
    /// Daemon A command (`--socket-path` and `--shared-dir` are appended). Default: this
    /// crate's vhostfs (its default sandbox, `namespace`).
    #[arg(long)]
    daemon_a: Option<String>,
    /// Daemon B command. Default: virtiofsd with its default sandbox (`namespace`).
    #[arg(long)]
    daemon_b: Option<String>,
    /// Also write the table to this file.
    #[arg(long)]
    markdown: Option<PathBuf>,
    /// Passed by `cargo bench`; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

/// What one kind of daemon cost.
struct Measured {
    name: String,
    command: String,
    daemons: usize,
    start_p50: Duration,
    start_p99: Duration,
    idle: Footprint,
    switches: u64,
    /// Each burst's time to its last reply, sorted.
    bursts: Vec<Duration>,
}

/// Raises this process's soft fd limit to its hard limit: the limit.
fn raise_fd_limit() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit fills the struct we pass.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return 1024;
    }
    lim.rlim_cur = lim.rlim_max;
    // SAFETY: setrlimit reads the struct we pass; raising the soft limit to the hard one is
    // always allowed.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) } != 0 {
        // SAFETY: as above.
        unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) };
    }
    lim.rlim_cur
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted.get(i).copied().unwrap_or_default()
}

/// One session's work after connecting: INIT, then read the shared file and write one of its
/// own (`w<i>`).
fn work(client: &FuseClient, i: usize) -> Result<(), String> {
    let e = |what: &'static str| move |errno: i32| format!("session {i}: {what}: errno {errno}");
    client.init().map_err(e("INIT"))?;
    let data = client.lookup(1, "data").map_err(e("LOOKUP"))?;
    let fh = client
        .open(data.nodeid, libc::O_RDONLY as u32)
        .map_err(e("OPEN"))?
        .fh;
    let read = client.read(data.nodeid, fh, 0, 4096).map_err(e("READ"))?;
    if read != [7u8; 4096] {
        return Err(format!("session {i}: READ returned other data"));
    }
    client
        .release(data.nodeid, fh, libc::O_RDONLY as u32)
        .map_err(e("RELEASE"))?;
    let (entry, open) = client
        .create(1, &format!("w{i}"), 0o644, libc::O_RDWR as u32, 0)
        .map_err(e("CREATE"))?;
    let n = client
        .write(entry.nodeid, open.fh, 0, &[i as u8; 4096])
        .map_err(e("WRITE"))?;
    if n != 4096 {
        return Err(format!("session {i}: WRITE wrote {n} bytes"));
    }
    client
        .release(entry.nodeid, open.fh, libc::O_RDWR as u32)
        .map_err(e("RELEASE"))
}

/// The burst's requests of one session.
fn burst(client: &FuseClient, i: usize) -> Result<(), String> {
    let e = |what: &'static str| move |errno: i32| format!("burst {i}: {what}: errno {errno}");
    client.getattr(1, None).map_err(e("GETATTR"))?;
    let data = client.lookup(1, "data").map_err(e("LOOKUP"))?;
    let fh = client
        .open(data.nodeid, libc::O_RDONLY as u32)
        .map_err(e("OPEN"))?
        .fh;
    client.read(data.nodeid, fh, 0, 4096).map_err(e("READ"))?;
    client
        .release(data.nodeid, fh, libc::O_RDONLY as u32)
        .map_err(e("RELEASE"))
}

/// Every session sends [`burst`] at once: the time to the last reply.
fn burst_all(clients: &[FuseClient]) -> Result<Duration, String> {
    let go = Barrier::new(clients.len() + 1);
    std::thread::scope(|s| {
        let threads: Vec<_> = clients
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let go = &go;
                s.spawn(move || {
                    go.wait();
                    burst(c, i)
                })
            })
            .collect();
        go.wait();
        let t = Instant::now();
        for th in threads {
            th.join()
                .map_err(|_| "a burst thread panicked".to_owned())??;
        }
        Ok(t.elapsed())
    })
}

/// Starts `n` daemons of `cmd` on `share`, one after the other: the daemons and each one's time
/// to a listening socket.
fn start_all(
    cmd: &DaemonCmd,
    n: usize,
    share: &Path,
    sockets: &Path,
) -> Result<(Vec<Daemon>, Vec<Duration>), String> {
    let mut daemons = Vec::with_capacity(n);
    let mut times = Vec::with_capacity(n);
    for i in 0..n {
        let socket = sockets.join(format!("d{i}.sock"));
        let log = sockets.join(format!("d{i}.log"));
        let t = Instant::now();
        let d = cmd
            .spawn_polling(&socket, share, &log, POLL)
            .map_err(|e| format!("{} #{i}: {e}", cmd.name()))?;
        times.push(t.elapsed());
        daemons.push(d);
    }
    Ok((daemons, times))
}

fn measure(cmd: &DaemonCmd, n: usize, idle: Duration) -> Result<Measured, String> {
    let share = TempDir::new("many-share").map_err(|e| e.to_string())?;
    std::fs::write(share.join("data"), [7u8; 4096]).map_err(|e| e.to_string())?;
    let sockets = TempDir::new("many-sock").map_err(|e| e.to_string())?;
    eprintln!("{}: starting {n} daemons", cmd.name());
    let (daemons, mut times) = start_all(cmd, n, share.path(), sockets.path())?;
    times.sort();
    eprintln!("{}: connecting {n} sessions", cmd.name());
    let mut clients = Vec::with_capacity(n);
    for (i, _) in daemons.iter().enumerate() {
        let socket = sockets.join(&format!("d{i}.sock"));
        let guest = TestGuest::connect(&socket, 1, QUEUE_SIZE, GUEST_MEM)
            .map_err(|e| format!("session {i}: {e}"))?;
        let client = FuseClient::new(Arc::new(guest), 0);
        work(&client, i)?;
        clients.push(client);
    }
    std::thread::sleep(SETTLE);
    let mut total = Footprint::default();
    for d in &daemons {
        total = total + footprint(d.pid()).map_err(|e| format!("footprint: {e}"))?;
    }
    let switches = |daemons: &[Daemon]| daemons.iter().map(|d| context_switches(d.pid())).sum();
    eprintln!("{}: idle {idle:?}", cmd.name());
    let before: u64 = switches(&daemons);
    std::thread::sleep(idle);
    let after: u64 = switches(&daemons);
    let mut bursts = Vec::with_capacity(BURSTS);
    for _ in 0..BURSTS {
        bursts.push(burst_all(&clients)?);
        // Past the queue threads' linger: each burst finds the daemons idle.
        std::thread::sleep(SETTLE);
    }
    bursts.sort();
    drop(clients);
    drop(daemons);
    Ok(Measured {
        name: cmd.name(),
        command: cmd.command_line(),
        daemons: n,
        start_p50: percentile(&times, 0.5),
        start_p99: percentile(&times, 0.99),
        idle: total,
        switches: after.saturating_sub(before),
        bursts,
    })
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

fn table(rows: &[Measured], idle: u64) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| daemon | daemons | start-up p50 / p99 | processes | threads | fds | PSS (all) | \
         context switches in {idle} s idle | burst: last reply, median ({BURSTS}: min–max) |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|---|---|");
    for r in rows {
        let _ = writeln!(
            out,
            "| {} | {} | {} / {} | {} | {} | {} | {:.1} MiB | {} | {} ({}–{}) |",
            r.name,
            r.daemons,
            ms(r.start_p50),
            ms(r.start_p99),
            r.idle.processes,
            r.idle.threads,
            r.idle.fds,
            r.idle.pss as f64 / (1 << 20) as f64,
            r.switches,
            ms(percentile(&r.bursts, 0.5)),
            ms(r.bursts[0]),
            ms(r.bursts[r.bursts.len() - 1]),
        );
    }
    let _ = writeln!(out);
    for r in rows {
        let _ = writeln!(out, "- {}: `{}`", r.name, r.command);
    }
    out
}

fn run(args: &Args) -> Result<String, String> {
    let limit = raise_fd_limit();
    let fits = ((limit.saturating_sub(64)) / FDS_PER_SESSION) as usize;
    let n = args.daemons.min(fits);
    if n < args.daemons {
        eprintln!(
            "the fd limit ({limit}) allows {n} sessions, not {}: running {n} daemons of each kind",
            args.daemons
        );
    }
    let a = match &args.daemon_a {
        Some(c) => DaemonCmd::new(c)?,
        None => DaemonCmd::new(&format!(
            "{} --log-level=error",
            env!("CARGO_BIN_EXE_vhostfs")
        ))?,
    };
    let b = match &args.daemon_b {
        Some(c) => DaemonCmd::new(c)?,
        None => {
            let bin = common::virtiofsd_path()
                .ok_or("virtiofsd not found (set $VIRTIOFSD or use --daemon-b)")?;
            DaemonCmd::new(&format!("{} --log-level=error", bin.display()))?
        }
    };
    let idle = Duration::from_secs(args.idle);
    let rows = vec![measure(&a, n, idle)?, measure(&b, n, idle)?];
    let mut out = format!(
        "{n} daemons of each kind, one session each (1 request queue, {} MiB of guest memory); \
         {}; {}; client fd limit {limit}\n\n",
        GUEST_MEM >> 20,
        shared::machine(),
        shared::today(),
    );
    out.push_str(&table(&rows, args.idle));
    Ok(out)
}

fn main() {
    let args = Args::parse();
    match run(&args) {
        Ok(report) => {
            println!("{report}");
            if let Some(path) = &args.markdown {
                if let Err(e) = std::fs::write(path, &report) {
                    eprintln!("{}: {e}", path.display());
                    std::process::exit(1);
                }
            }
        }
        Err(e) => {
            eprintln!("many_daemons: {e}");
            std::process::exit(1);
        }
    }
}
