//! `--gluster`: the slow-backend mode (issue 35 item 3). The share is a directory on a GlusterFS
//! volume the bench starts itself (`tests/common/gluster.rs`: glusterd started by hand, a
//! replica-2 volume of two bricks in the system temp dir, FUSE-mounted on this machine), so every
//! request the daemon passes on waits for the GlusterFS client and its bricks over TCP. The
//! workloads are `workloads/slow.rs`; [`IN_FLIGHT`] requests in flight in all, on 1 queue and
//! on 4 queues (a quarter on each), and one at a time on 1 queue. Daemon B's default settings
//! are virtiofsd's own pool (`--thread-pool-size=0`, none) and a pool of [`B_POOL`] threads, both
//! with `--inode-file-handles=never`: with its default `prefer`, virtiofsd 1.14 answers ESTALE
//! to every LOOKUP once the host dropped its caches (a GlusterFS file handle names a FUSE node
//! ID the host kernel forgot; issue 35 item 1).
//!
//! Once a round, next to the daemons' runs, the same phases are done by the host alone
//! (`workloads/on_host.rs`: [`IN_FLIGHT`] host threads making the daemon's calls on the mount
//! themselves): the most those calls give on this machine, whoever makes them.
//!
//! `--brick-delay` makes every brick operation wait (GlusterFS's `debug/delay-gen`), as if the
//! bricks were on other hosts: the backend then waits instead of using this machine's CPUs.
//!
//! Every run starts a fresh daemon on the same share (CREATEs go to fresh directories per run).
//! Needs root (`drop_caches`) and GlusterFS (`.ci/setup`); glusterd's port is the machine's, so
//! run it under the lock other GlusterFS users of the machine take.

use std::fmt::Write as _;
use std::time::Instant;

use crate::common::gluster::Gluster;
use crate::common::TempDir;
use crate::report::round_ratios;
use crate::rounds::{alternate, Results};
use crate::shared::{machine, today};
use crate::stats::Measured;
use crate::stats::{fmt_rate, median};
use crate::workloads::on_host;
use crate::workloads::slow::{self, SlowSizes};
use crate::workloads::Sizes;
use crate::{default_daemons, probe_queues, report, Args, DaemonSpec, Session, Shape, Side, MQ};

/// The brick operations `--brick-delay` delays: every one a request of the bench makes.
const DELAYED_FOPS: &str = "lookup,stat,fstat,access,open,opendir,read,write,flush,fsync,\
     create,mknod,mkdir,unlink,rmdir,rename,truncate,ftruncate,setattr,fsetattr,readdir,\
     readdirp,statfs,getxattr,fgetxattr,setxattr,fsetxattr,inodelk,finodelk,entrylk,fentrylk,\
     xattrop,fxattrop";

/// Requests in flight in all (over the client threads), unless `--depth` says otherwise.
const IN_FLIGHT: usize = 16;
/// virtiofsd's `--thread-pool-size` other than its default 0: a thread per request in flight.
const B_POOL: usize = 16;

/// Configuration 0: 1 queue, 1 thread; configuration 1: 4 queues and threads (1 for a daemon
/// with one queue). Never more in flight than [`IN_FLIGHT`] in all.
fn shape(config: usize, max_queues: usize) -> Shape {
    let queues = if config == 0 { 1 } else { MQ.min(max_queues) };
    Shape {
        queues,
        threads: queues,
        mult: 1,
    }
}

pub fn run(args: &Args) -> Result<bool, String> {
    let started = Instant::now();
    let rounds = args.rounds.unwrap_or(if args.quick { 1 } else { 5 }).max(1);
    let in_flight = args.depth.map_or(IN_FLIGHT, usize::from);
    let slow_sizes = if args.quick {
        SlowSizes::quick()
    } else {
        SlowSizes::full()
    };
    let mut specs = default_daemons(args, &[0, B_POOL], " --inode-file-handles=never")?;
    let empty = TempDir::new("vhostfs-bench-empty").map_err(|e| e.to_string())?;
    for spec in &mut specs {
        spec.max_queues = probe_queues(spec, empty.path())
            .map_err(|e| format!("{}: {e}", spec.cmd.command_line()))?;
    }
    let delay = args.brick_delay.map(|us| us.to_string());
    let gluster = match &delay {
        None => Gluster::start(),
        Some(us) => Gluster::start_with(&[
            ("delay-gen", "posix"),
            ("delay-gen.delay-percentage", "100"),
            ("delay-gen.delay-duration", us),
            ("delay-gen.enable", DELAYED_FOPS),
        ]),
    };
    let share = gluster.mount_a.join("share");
    std::fs::create_dir(&share).map_err(|e| e.to_string())?;
    let t = Instant::now();
    slow::prepare(&share, &slow_sizes).map_err(|e| format!("preparing the share: {e}"))?;
    eprintln!("gluster: share prepared in {:.1?}", t.elapsed());

    let mut results = Results::default();
    let mut runs = 0;
    let mut host = HostAlone::default();
    let first = &specs[0];
    let one_run = |spec: &DaemonSpec, config: usize, shape: Shape| {
        runs += 1;
        let name = format!("r{runs}");
        slow::prepare_run(&share, &name).map_err(|e| format!("run directories: {e}"))?;
        if config == 0 && std::ptr::eq(spec, first) {
            // Once a round, next to the daemons' runs: the same phases by the host alone.
            let name = format!("h{runs}");
            slow::prepare_run(&share, &name).map_err(|e| format!("run directories: {e}"))?;
            let t = Instant::now();
            match on_host::run(&share, &slow_sizes, &name, in_flight) {
                Ok(rows) => host.add(rows),
                Err(e) => host.errors.push(e),
            }
            eprintln!("gluster host alone: {:.1} s", t.elapsed().as_secs_f64());
        }
        let dir = TempDir::new("vhostfs-bench").map_err(|e| e.to_string())?;
        let s = Session::serve(spec, &share, dir, shape)?;
        let sizes = Sizes {
            small_depth: (in_flight / shape.threads).max(1),
            ..Sizes::quick()
        };
        let one_at_a_time = config == 0;
        s.measure(1, &sizes, |ctx| {
            slow::run(ctx, &slow_sizes, &name, one_at_a_time)
        })
    };
    alternate(&specs, rounds, shape, (0, "gluster"), one_run, &mut results);
    let Results { rows, mut errors } = results;
    errors.append(&mut host.errors);

    let cmdline: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let mut out = format!(
        "Command: `cargo bench --bench vhost_user -- {}`  \n\
         Date: {}  \n\
         Machine: {}  \n\
         Share: a directory on a GlusterFS {} volume (replica 2, both bricks on this machine, \
         FUSE-mounted here{}); the host's caches dropped before every timed phase  \n\
         Rounds: {rounds}, daemons alternating; median round per daemon; {} s in total \
         (GlusterFS start-up {:.1} s)  \n\
         In flight: {in_flight} requests in all (a quarter per thread on 4 queues), \
         and 1 (\"one at a time\")  \n",
        cmdline.join(" "),
        today(),
        machine(),
        gluster_version(),
        delay.map_or(String::new(), |us| format!(
            "; every brick operation delayed {us} µs (`--brick-delay`)"
        )),
        started.elapsed().as_secs(),
        gluster.startup.as_secs_f64(),
    );
    out.push_str(&report::daemon_lines(&specs));
    out.push('\n');
    out.push_str(&report::table(&rows, &specs, shape));
    if specs.len() > 2 {
        out.push('\n');
        out.push_str(&each_setting(&rows, &specs));
    }
    out.push('\n');
    out.push_str(&host.table(&rows, &specs, in_flight));
    out.push('\n');
    out.push_str(&host_busy(&rows, &specs));
    if !errors.is_empty() {
        writeln!(out, "\n{} run(s) failed:", errors.len()).unwrap();
        for e in &errors {
            writeln!(out, "- {e}").unwrap();
        }
    }
    println!("{out}");
    if let Some(path) = &args.markdown {
        std::fs::write(path, &out).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(errors.is_empty())
}

/// Daemon A's median ops/s against each of B's settings, with the single-round ranges.
fn each_setting(rows: &[crate::Row], specs: &[DaemonSpec]) -> String {
    let a = specs.iter().position(|s| s.side == Side::A).unwrap();
    let bs: Vec<usize> = (0..specs.len())
        .filter(|&i| specs[i].side == Side::B)
        .collect();
    let mut out = format!("| workload | queues | {} ops/s |", specs[a].cmd.name());
    for &b in &bs {
        write!(
            out,
            " {} {} ops/s | ratio (rounds) |",
            specs[b].cmd.name(),
            specs[b].tag
        )
        .unwrap();
    }
    out.push_str(&format!("\n|---|---|---|{}\n", "---|---|".repeat(bs.len())));
    for row in rows {
        let rate = |i: usize| median(&row.runs[i]).map(|m| m.ops_per_sec);
        let Some(ra) = rate(a) else { continue };
        write!(
            out,
            "| {} | {} | {} |",
            row.label,
            shape(row.config, specs[a].max_queues).queues,
            fmt_rate(ra)
        )
        .unwrap();
        for &b in &bs {
            let Some(rb) = rate(b) else {
                out.push_str(" – | – |");
                continue;
            };
            let range = round_ratios(&row.runs[a], &row.runs[b], |m| m.ops_per_sec)
                .map_or(String::new(), |(lo, hi)| format!(" ({lo:.2}–{hi:.2})"));
            write!(out, " {} | {:.2}{range} |", fmt_rate(rb), ra / rb).unwrap();
        }
        out.push('\n');
    }
    out
}

/// How busy the host's CPUs were during each phase (all processes: the daemon, the test guest,
/// GlusterFS's client and bricks), median round of each daemon setting: a phase at ~100 % is
/// bound by the machine's CPUs, which more requests in flight cannot overlap.
fn host_busy(rows: &[crate::Row], specs: &[DaemonSpec]) -> String {
    let mut out = String::from("| workload | queues |");
    for spec in specs {
        write!(out, " host CPUs busy, {} |", named(spec)).unwrap();
    }
    out.push_str(&format!("\n|---|---|{}\n", "---|".repeat(specs.len())));
    for row in rows {
        let a = specs.iter().position(|s| s.side == Side::A).unwrap();
        write!(
            out,
            "| {} | {} |",
            row.label,
            shape(row.config, specs[a].max_queues).queues
        )
        .unwrap();
        for i in 0..specs.len() {
            match median(&row.runs[i]) {
                Some(m) => write!(out, " {:.0} % |", m.host_busy * 100.0).unwrap(),
                None => out.push_str(" – |"),
            }
        }
        out.push('\n');
    }
    out
}

/// The daemon's name and its setting's tag, if any ("vhostfs", "virtiofsd tp=16").
fn named(spec: &DaemonSpec) -> String {
    format!("{} {}", spec.cmd.name(), spec.tag)
        .trim_end()
        .to_owned()
}

/// `glusterfs --version`'s first line, e.g. "glusterfs 10.3".
fn gluster_version() -> String {
    std::process::Command::new("glusterfs")
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .map(str::to_owned)
        })
        .unwrap_or_else(|| "glusterfs".to_owned())
}

/// The phases done by the host alone (`workloads/on_host.rs`), one run per round.
#[derive(Default)]
struct HostAlone {
    /// Per phase, one measurement per successful round.
    rows: Vec<(&'static str, Vec<Measured>)>,
    errors: Vec<String>,
}

impl HostAlone {
    fn add(&mut self, measured: Vec<(&'static str, Measured)>) {
        for (label, m) in measured {
            match self.rows.iter_mut().find(|(l, _)| *l == label) {
                Some((_, runs)) => runs.push(m),
                None => self.rows.push((label, vec![m])),
            }
        }
    }

    /// Per phase: the host alone's median ops/s (and single-round range), each daemon's median
    /// on 1 queue as a share of it, and the host alone over the better of daemon B's settings:
    /// the most daemon A could reach against that daemon, had it no cost at all.
    fn table(&self, rows: &[crate::Row], specs: &[DaemonSpec], threads: usize) -> String {
        let mut out = format!("| workload | host alone, {threads} threads, ops/s (rounds) |");
        for spec in specs {
            write!(out, " {}, share |", named(spec)).unwrap();
        }
        let bs: Vec<usize> = (0..specs.len())
            .filter(|&i| specs[i].side == Side::B)
            .collect();
        out.push_str(" host alone over the better B |\n");
        out.push_str(&format!("|---|---|{}---|\n", "---|".repeat(specs.len())));
        for (label, runs) in &self.rows {
            let Some(h) = median(runs).map(|m| m.ops_per_sec) else {
                continue;
            };
            let lo = runs.iter().map(|m| m.ops_per_sec).fold(f64::MAX, f64::min);
            let hi = runs.iter().map(|m| m.ops_per_sec).fold(0.0, f64::max);
            write!(
                out,
                "| {label} | {} ({}–{}) |",
                fmt_rate(h),
                fmt_rate(lo),
                fmt_rate(hi)
            )
            .unwrap();
            let row = rows.iter().find(|r| r.label == *label && r.config == 0);
            let rate = |i: usize| row.and_then(|r| median(&r.runs[i])).map(|m| m.ops_per_sec);
            for i in 0..specs.len() {
                match rate(i) {
                    Some(r) => write!(out, " {:.2} |", r / h).unwrap(),
                    None => out.push_str(" – |"),
                }
            }
            match bs.iter().filter_map(|&b| rate(b)).reduce(f64::max) {
                Some(best) => writeln!(out, " {:.2} |", h / best).unwrap(),
                None => out.push_str(" – |\n"),
            }
        }
        out
    }
}
