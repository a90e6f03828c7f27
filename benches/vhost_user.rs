//! Test-guest benchmark: vhostfs against virtiofsd (or any two vhost-user virtio-fs daemons),
//! driven by the in-process test guest with many requests in flight, in alternation.
//!
//! `cargo bench --bench vhost_user -- [--quick] [--only W,...] [--rounds N] [--depth N]
//!  [--daemon-a CMD] [--daemon-b CMD] [--markdown FILE] [--gluster]`
//!
//! Each run starts a fresh daemon on a fresh copy of the workload's prepared share, connects,
//! sends FUSE_INIT and times the workload. Rounds run every daemon once, in alternating order;
//! the table shows the median round per daemon, and next to the ratio of medians the lowest and
//! highest ratio of single rounds. Exits 1 if any run failed (a FUSE error reply
//! where success was expected, a timeout, a daemon that did not start).

#[path = "../tests/common/mod.rs"]
mod common;
#[path = "vhost_user/gluster.rs"]
mod gluster;
#[path = "vhost_user/report.rs"]
mod report;
#[path = "vhost_user/rounds.rs"]
mod rounds;
#[path = "shared/mod.rs"]
mod shared;
#[path = "vhost_user/stats.rs"]
mod stats;
#[path = "vhost_user/workloads.rs"]
mod workloads;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use clap::Parser;
use vhost::vhost_user::message::VhostUserProtocolFeatures;
use vhost::vhost_user::VhostUserFrontend;

use common::{Daemon, FuseClient, TempDir, TestGuest};
use rounds::{alternate, Results, Row};
use shared::{fs_type, machine, today, DaemonCmd};
use stats::{fmt_latency, fmt_rate, median, Measured};
use workloads::{Ctx, Sizes, Workload};

/// Descriptors per virtqueue (QEMU's vhost-user-fs `queue-size=1024`).
const QUEUE_SIZE: u16 = 1024;
/// Guest memory per connection.
const GUEST_MEM: usize = 256 << 20;
/// Request queues (and client threads) of the multi-queue configuration.
const MQ: usize = 4;

#[derive(Parser)]
#[command(about = "vhost-user virtio-fs benchmark over the in-process test guest")]
struct Args {
    /// Small sizes and one round: a smoke run (< 60 s).
    #[arg(long)]
    quick: bool,
    /// Run only these workloads (comma-separated).
    #[arg(long, value_enum, value_delimiter = ',')]
    only: Vec<Workload>,
    /// Daemon A command (whitespace-separated; `--socket-path` and `--shared-dir` are appended).
    /// Default: this crate's vhostfs.
    #[arg(long)]
    daemon_a: Option<String>,
    /// Daemon B command. Default: `virtiofsd --sandbox=none` with `--thread-pool-size=0` and
    /// `=4`, the better one reported per row.
    #[arg(long)]
    daemon_b: Option<String>,
    /// Small requests (LOOKUP, GETATTR, CREATE, 4 KiB READ and WRITE) in flight per client
    /// thread. Default 64.
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=256))]
    depth: Option<u16>,
    /// Rounds (each daemon once per round, alternating). Default 5, 1 with --quick.
    #[arg(long)]
    rounds: Option<usize>,
    /// Where the shares are copied (a fresh copy per run). Default: /dev/shm (tmpfs, so that
    /// copying and removing 10,000-file shares stays cheap and the daemons, not the disk, are
    /// measured), else the system temp dir.
    #[arg(long)]
    scratch: Option<PathBuf>,
    /// Also write the markdown table to this file.
    #[arg(long)]
    markdown: Option<PathBuf>,
    /// The slow-backend mode instead of the workloads (`vhost_user/gluster.rs`): a share on a
    /// GlusterFS volume the bench starts; daemon B's default settings are then
    /// `--inode-file-handles=never` with `--thread-pool-size=0` and `=16`.
    #[arg(long)]
    gluster: bool,
    /// With `--gluster`: every brick operation waits this many microseconds (GlusterFS's
    /// `debug/delay-gen` above the bricks' storage), as if the bricks were on other hosts: the
    /// requests wait for a round trip instead of for this machine's CPUs.
    #[arg(long, value_name = "MICROSECONDS", requires = "gluster")]
    brick_delay: Option<u32>,
    /// Passed by `cargo bench`; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    A,
    B,
}

/// A daemon command line to benchmark.
struct DaemonSpec {
    side: Side,
    cmd: DaemonCmd,
    /// Shown next to the number when a side has several settings.
    tag: String,
    /// Request queues it serves (probed).
    max_queues: usize,
}

impl DaemonSpec {
    fn new(side: Side, cmd: &str, tag: &str) -> Result<DaemonSpec, String> {
        Ok(DaemonSpec {
            side,
            cmd: DaemonCmd::new(cmd)?,
            tag: tag.to_owned(),
            max_queues: 1,
        })
    }
}

/// How one daemon is driven in one configuration.
#[derive(Clone, Copy)]
struct Shape {
    queues: usize,
    threads: usize,
    /// Parallelism per thread (see `Ctx::mult`).
    mult: usize,
}

impl Shape {
    /// Configuration 0: 1 queue, 1 thread. Configuration 1: 4 queues × 4 threads, or, for a
    /// daemon with a single queue, 1 thread keeping as much in flight as 4 would.
    fn of(config: usize, max_queues: usize) -> Shape {
        match config {
            0 => Shape {
                queues: 1,
                threads: 1,
                mult: 1,
            },
            _ if max_queues >= MQ => Shape {
                queues: MQ,
                threads: MQ,
                mult: 1,
            },
            _ => Shape {
                queues: 1,
                threads: 1,
                mult: MQ,
            },
        }
    }

    fn label(self) -> String {
        if self.mult > 1 {
            format!(
                "{}×{} (×{} in flight)",
                self.queues, self.threads, self.mult
            )
        } else {
            format!("{}×{}", self.queues, self.threads)
        }
    }
}

/// The text of a panic payload.
pub fn panic_message(p: Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "panic".to_owned())
}

/// A fresh daemon on a fresh copy of `template`, connected with `shape`.
struct Session {
    // Field order is drop order: disconnect, then kill the daemon, then remove the files.
    clients: Vec<FuseClient>,
    guest: Arc<TestGuest>,
    daemon: Daemon,
    dir: TempDir,
}

impl Session {
    fn start(spec: &DaemonSpec, template: &Path, shape: Shape) -> Result<Session, String> {
        let dir = TempDir::new("vhostfs-bench").map_err(|e| e.to_string())?;
        let share = dir.join("share");
        let status = Command::new("cp")
            .arg("-a")
            .arg(template)
            .arg(&share)
            .status()
            .map_err(|e| format!("cp: {e}"))?;
        if !status.success() {
            return Err(format!("cp -a {} failed: {status}", template.display()));
        }
        Session::serve(spec, &share, dir, shape)
    }

    /// A fresh daemon serving `share` as it is, its socket and log in `dir`.
    fn serve(
        spec: &DaemonSpec,
        share: &Path,
        dir: TempDir,
        shape: Shape,
    ) -> Result<Session, String> {
        let socket = dir.join("vhost.sock");
        let daemon = spec.cmd.spawn(&socket, share, &dir.join("daemon.log"))?;
        let guest = TestGuest::connect(&socket, shape.queues, QUEUE_SIZE, GUEST_MEM)
            .map(Arc::new)
            .map_err(|e| format!("connect: {e}"))?;
        let c0 = FuseClient::new(Arc::clone(&guest), 0);
        let init = c0.init().map_err(|e| format!("INIT: errno {e}"))?;
        if init.max_write < 1 << 20 {
            return Err(format!("max_write {} < 1 MiB", init.max_write));
        }
        let clients = (0..shape.threads)
            .map(|t| c0.on_queue(t % shape.queues))
            .collect();
        Ok(Session {
            clients,
            guest,
            daemon,
            dir,
        })
    }

    /// The last lines the daemon logged (for error reports).
    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.dir.join("daemon.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(5)..].join("\n")
    }
}

/// Request queues `spec` serves: GET_QUEUE_NUM minus the hiprio queue (1 without MQ).
fn probe_queues(spec: &DaemonSpec, empty: &Path) -> Result<usize, String> {
    let s = Session::start(spec, empty, Shape::of(0, 1))?;
    if !s
        .guest
        .protocol_features()
        .contains(VhostUserProtocolFeatures::MQ)
    {
        return Ok(1);
    }
    let n = s
        .guest
        .frontend()
        .get_queue_num()
        .map_err(|e| format!("GET_QUEUE_NUM: {e}"))?;
    Ok((n as usize).saturating_sub(1).max(1))
}

fn run_once(
    spec: &DaemonSpec,
    template: &Path,
    shape: Shape,
    workload: Workload,
    sizes: &Sizes,
) -> Result<Vec<(&'static str, Measured)>, String> {
    let s = Session::start(spec, template, shape)?;
    s.measure(shape.mult, sizes, |ctx| workload.run(ctx))
}

impl Session {
    /// Runs `f` on this session (`mult` and `sizes` as in [`Ctx`]), a panic in it being a
    /// failure; a failure comes with the end of the daemon's log.
    fn measure<T>(
        &self,
        mult: usize,
        sizes: &Sizes,
        f: impl FnOnce(&Ctx) -> Result<T, String>,
    ) -> Result<T, String> {
        let ctx = Ctx {
            clients: &self.clients,
            mult,
            sizes,
            daemon_pid: self.daemon.pid(),
        };
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&ctx)))
            .map_err(panic_message)
            .and_then(|r| r);
        result.map_err(|e| {
            let tail = self.log_tail();
            if tail.is_empty() {
                e
            } else {
                format!("{e}\n  daemon log:\n{tail}")
            }
        })
    }
}

/// Daemon A, and daemon B once per `pools` setting of virtiofsd's `--thread-pool-size` (with
/// `b_args` too) unless `--daemon-b` names one.
fn default_daemons(args: &Args, pools: &[usize], b_args: &str) -> Result<Vec<DaemonSpec>, String> {
    let mut specs = vec![match &args.daemon_a {
        Some(cmd) => DaemonSpec::new(Side::A, cmd, "")?,
        None => DaemonSpec::new(Side::A, env!("CARGO_BIN_EXE_vhostfs"), "")?,
    }];
    match &args.daemon_b {
        Some(cmd) => specs.push(DaemonSpec::new(Side::B, cmd, "")?),
        None => {
            let bin = common::virtiofsd_path()
                .ok_or("virtiofsd not found (set $VIRTIOFSD or use --daemon-b)")?;
            for &pool in pools {
                let cmd = format!(
                    "{} --sandbox=none --log-level=error{b_args} --thread-pool-size={pool}",
                    bin.display()
                );
                specs.push(DaemonSpec::new(Side::B, &cmd, &format!("tp={pool}"))?);
            }
        }
    }
    Ok(specs)
}

fn main() {
    let args = Args::parse();
    let result = if args.gluster {
        gluster::run(&args)
    } else {
        run(&args)
    };
    match result {
        Ok(true) => {}
        Ok(false) => std::process::exit(1),
        Err(e) => {
            eprintln!("vhost_user bench: {e}");
            std::process::exit(2);
        }
    }
}

/// Runs everything; `Ok(false)` if some run failed.
fn run(args: &Args) -> Result<bool, String> {
    let started = Instant::now();
    let mut sizes = if args.quick {
        Sizes::quick()
    } else {
        Sizes::full()
    };
    if let Some(depth) = args.depth {
        sizes.small_depth = usize::from(depth);
    }
    let rounds = args.rounds.unwrap_or(if args.quick { 1 } else { 5 }).max(1);
    let workloads: Vec<Workload> = if args.only.is_empty() {
        Workload::ALL.to_vec()
    } else {
        args.only.clone()
    };
    let scratch = args.scratch.clone().unwrap_or_else(|| {
        let shm = PathBuf::from("/dev/shm");
        if shm.is_dir() {
            shm
        } else {
            std::env::temp_dir()
        }
    });
    // TempDir creates its directories under $TMPDIR; no other thread runs yet.
    std::env::set_var("TMPDIR", &scratch);
    let mut specs = default_daemons(args, &[0, 4], "")?;
    let templates = TempDir::new("vhostfs-bench-templates").map_err(|e| e.to_string())?;
    let empty = templates.join("empty");
    std::fs::create_dir(&empty).map_err(|e| e.to_string())?;
    for spec in &mut specs {
        spec.max_queues =
            probe_queues(spec, &empty).map_err(|e| format!("{}: {e}", spec.cmd.command_line()))?;
        eprintln!(
            "daemon {}: {} request queue(s)",
            spec.cmd.command_line(),
            spec.max_queues
        );
    }

    let mut results = Results::default();
    for (group, &w) in workloads.iter().enumerate() {
        let template = templates.join(&format!("{w:?}").to_lowercase());
        std::fs::create_dir(&template).map_err(|e| e.to_string())?;
        w.prepare(&template, &sizes)
            .map_err(|e| format!("preparing the {w:?} share: {e}"))?;
        let run = |spec: &DaemonSpec, _, shape| run_once(spec, &template, shape, w, &sizes);
        let what = format!("{w:?}");
        alternate(&specs, rounds, Shape::of, (group, &what), run, &mut results);
    }
    // Grouped by workload, then configuration.
    results.rows.sort_by_key(|r| (r.group, r.config));
    let Results { rows, errors } = results;

    let cmdline: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let mut report = format!(
        "Command: `cargo bench --bench vhost_user{}{}`  \n\
         Date: {}  \n\
         Machine: {}  \n\
         Shares: fresh copies in {} ({})  \n\
         Rounds: {rounds}, daemons alternating; median round per daemon; {} s in total  \n\
         In flight: {} small requests per client thread  \n",
        if cmdline.is_empty() { "" } else { " -- " },
        cmdline.join(" "),
        today(),
        machine(),
        scratch.display(),
        fs_type(&scratch),
        started.elapsed().as_secs(),
        sizes.small_depth
    );
    report.push_str(&report::daemon_lines(&specs));
    report.push('\n');
    report.push_str(&report::table(&rows, &specs, Shape::of));
    if let Some(check) = report::per_file_check(&rows, &specs) {
        report.push('\n');
        report.push_str(&check);
    }
    if !errors.is_empty() {
        writeln!(report, "\n{} run(s) failed:", errors.len()).unwrap();
        for e in &errors {
            writeln!(report, "- {e}").unwrap();
        }
    }
    println!("{report}");
    if let Some(path) = &args.markdown {
        std::fs::write(path, &report).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(errors.is_empty())
}
