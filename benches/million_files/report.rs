//! The measurements of a walk and the markdown reports.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::Duration;

use crate::common::fuse_abi::*;
use crate::shared::{machine, today, DaemonCmd};
use crate::walk::Layout;
use crate::windows::{WinRun, LINKS};
use crate::Args;

/// `--inode-file-handles` modes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    Prefer,
    Mandatory,
    Never,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Prefer => "prefer",
            Mode::Mandatory => "mandatory",
            Mode::Never => "never",
        }
    }
}

/// One walk by one daemon.
#[derive(Clone)]
pub struct Run {
    pub files: usize,
    /// Distinct node IDs handed out (never forgotten).
    pub inodes: usize,
    pub wall: Duration,
    /// Daemon utime + stime over the walk.
    pub cpu: Duration,
    /// VmRSS after the walk minus after INIT.
    pub rss_growth: u64,
    pub fds_peak: usize,
    pub fds_idle: usize,
}

impl Run {
    fn bytes_per_inode(&self) -> f64 {
        self.rss_growth as f64 / self.inodes.max(1) as f64
    }
    fn cpu_us_per_file(&self) -> f64 {
        self.cpu.as_secs_f64() * 1e6 / self.files.max(1) as f64
    }
}

/// A run with a wall time.
pub trait Timed {
    fn wall(&self) -> Duration;
}

impl Timed for Run {
    fn wall(&self) -> Duration {
        self.wall
    }
}

/// The run with the median wall time.
pub fn median<T: Timed>(runs: &[T]) -> Option<&T> {
    let mut v: Vec<&T> = runs.iter().collect();
    v.sort_by_key(|r| r.wall());
    v.get(v.len() / 2).copied()
}

/// `ratio (lo–hi)` of `f(a) / f(b)`: of the medians, and the range over rounds paired in order.
pub fn ratio<T: Timed>(a: &[T], b: &[T], f: impl Fn(&T) -> f64) -> String {
    let (Some(ma), Some(mb)) = (median(a), median(b)) else {
        return "–".into();
    };
    let r = f(ma) / f(mb);
    let singles: Vec<f64> = a.iter().zip(b).map(|(x, y)| f(x) / f(y)).collect();
    if singles.len() < 2 {
        return format!("{r:.2}");
    }
    let lo = singles.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = singles.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    format!("{r:.2} ({lo:.2}–{hi:.2})")
}

fn commit() -> String {
    std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_else(|| "unknown".into())
}

/// Command, date, machine and the daemons' command lines.
pub fn preamble(daemons: &[DaemonCmd; 2]) -> String {
    let cmdline: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let mut out = format!(
        "Command: `cargo bench --bench million_files{}{}` (vhostfs {})  \n\
         Date: {}  \n\
         Machine: {}  \n",
        if cmdline.is_empty() { "" } else { " -- " },
        cmdline.join(" "),
        commit(),
        today(),
        machine(),
    );
    for (side, d) in ["A", "B"].iter().zip(daemons) {
        writeln!(
            out,
            "Daemon {side}: `{} --inode-file-handles=MODE`  ",
            d.command_line()
        )
        .unwrap();
    }
    out
}

/// The plain walk's report.
pub fn render(
    args: &Args,
    daemons: &[DaemonCmd; 2],
    l: Layout,
    created: Duration,
    results: &[[Vec<Run>; 2]],
    errors: &[String],
    total: Duration,
) -> String {
    let (an, bn) = (daemons[0].name(), daemons[1].name());
    let mut out = format!(
        "Share: {} files in one directory + {} directories × {} files, on {} ({}), created in \
         {:.0} s; `never` walks {} entries of each part  \n\
         Walk: READDIRPLUS (4 KiB), then per entry LOOKUP, OPEN, GETATTR (fh), READ 4 KiB, \
         RELEASE, {} in flight per step of a page; no FORGET; 1 queue  \n\
         Rounds: {}, daemons alternating; median round; {:.0} s in total  \n",
        l.flat_files,
        l.tree_dirs,
        l.files_per_dir,
        args.scratch.display(),
        crate::shared::fs_type(&args.scratch),
        created.as_secs_f64(),
        args.never_files,
        args.depth,
        args.rounds.max(1),
        total.as_secs_f64()
    );
    out.push_str(
        "\n| mode | daemon | files | inodes held | wall | daemon CPU | CPU µs / file | RSS growth \
         | B / inode | fds peak | fds after 2 s idle |\n|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for (m, mode) in args.modes.iter().enumerate() {
        for (i, d) in daemons.iter().enumerate() {
            let Some(r) = median(&results[m][i]) else {
                writeln!(
                    out,
                    "| {} | {} | failed | | | | | | | | |",
                    mode.name(),
                    d.name()
                )
                .unwrap();
                continue;
            };
            writeln!(
                out,
                "| {} | {} | {} | {} | {:.1} s | {:.1} s | {:.1} | {:.1} MiB | {:.0} | {} | {} |",
                mode.name(),
                d.name(),
                r.files,
                r.inodes,
                r.wall.as_secs_f64(),
                r.cpu.as_secs_f64(),
                r.cpu_us_per_file(),
                r.rss_growth as f64 / (1 << 20) as f64,
                r.bytes_per_inode(),
                r.fds_peak,
                r.fds_idle
            )
            .unwrap();
        }
        let (a, b) = (&results[m][0], &results[m][1]);
        writeln!(
            out,
            "| {} | **{an} / {bn}** | | | {} | {} | | | {} | | |",
            mode.name(),
            ratio(a, b, |r| r.wall.as_secs_f64()),
            ratio(a, b, |r| r.cpu.as_secs_f64()),
            ratio(a, b, Run::bytes_per_inode),
        )
        .unwrap();
    }
    out.push_str("\nRatios: lower is better (time, CPU, bytes).\n");
    if !errors.is_empty() {
        writeln!(out, "\n{} run(s) failed:", errors.len()).unwrap();
        for e in errors {
            writeln!(out, "- {e}").unwrap();
        }
    }
    out
}

pub fn op_name(op: u32) -> String {
    match op {
        FUSE_LOOKUP => "LOOKUP".into(),
        FUSE_GETATTR => "GETATTR".into(),
        FUSE_READLINK => "READLINK".into(),
        FUSE_OPEN => "OPEN".into(),
        FUSE_READ => "READ".into(),
        FUSE_RELEASE => "RELEASE".into(),
        FUSE_OPENDIR => "OPENDIR".into(),
        FUSE_RELEASEDIR => "RELEASEDIR".into(),
        FUSE_READDIRPLUS => "READDIRPLUS".into(),
        op => format!("opcode {op}"),
    }
}

/// `LOOKUP 3, READ 1`, by opcode; `0` if empty.
pub fn by_opcode(counts: &HashMap<u32, u64>) -> String {
    let mut v: Vec<(&u32, &u64)> = counts.iter().collect();
    v.sort();
    let s: Vec<String> = v
        .iter()
        .map(|(op, n)| format!("{} {n}", op_name(**op)))
        .collect();
    if s.is_empty() {
        "0".into()
    } else {
        s.join(", ")
    }
}

#[allow(clippy::too_many_arguments)]
pub fn render_windows(
    args: &Args,
    daemons: &[DaemonCmd; 2],
    l: Layout,
    created: Duration,
    modes: &[Mode],
    results: &[[Vec<WinRun>; 2]],
    errors: &[String],
    total: Duration,
) -> String {
    let mut out = format!(
        "Windows walk: `dir /s` then open + READ 4 KiB of every file as the virtio-win service \
         sends them (two walks from node 1 per open, no FORGET), {} dispatchers with a request in \
         flight each on 1 queue (`dir /s`: threads; open + read: driven from one thread)  \n\
         Share: {} directories × {} files + {} symlinks, on {} ({}), created in {:.0} s  \n\
         Rounds: {}, daemons alternating; median round; {:.0} s in total  \n\
         \n| mode | daemon | files | inodes held | dir /s | read | wall | requests / s | daemon CPU \
         | CPU µs / request | client CPU | B / inode | fds peak | fds after 2 s idle | on share files | error \
         replies |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
        args.threads,
        l.tree_dirs,
        l.files_per_dir,
        2 * LINKS,
        args.scratch.display(),
        crate::shared::fs_type(&args.scratch),
        created.as_secs_f64(),
        args.rounds.max(1),
        total.as_secs_f64()
    );
    for (m, mode) in modes.iter().enumerate() {
        for (i, d) in daemons.iter().enumerate() {
            let Some(r) = median(&results[m][i]) else {
                writeln!(
                    out,
                    "| {} | {} | failed |{}",
                    mode.name(),
                    d.name(),
                    " |".repeat(13)
                )
                .unwrap();
                continue;
            };
            let wall = r.wall().as_secs_f64();
            writeln!(
                out,
                "| {} | {} | {} | {} | {:.1} s | {:.1} s | {:.1} s | {:.0} | {:.1} s | {:.1} | {:.1} s \
                 | {:.0} | {} | {} | {} | {} |",
                mode.name(),
                d.name(),
                r.files,
                r.inodes,
                r.dir_s.as_secs_f64(),
                r.read.as_secs_f64(),
                wall,
                r.requests() as f64 / wall,
                r.cpu.as_secs_f64(),
                r.cpu.as_secs_f64() * 1e6 / r.requests().max(1) as f64,
                r.client_cpu.as_secs_f64(),
                r.bytes_per_inode(),
                r.fds_peak,
                r.fds_idle,
                r.share_fds_idle,
                by_opcode(&r.errors)
            )
            .unwrap();
        }
        let (a, b) = (&results[m][0], &results[m][1]);
        writeln!(
            out,
            "| {} | **{} / {}** | | | | | {} | | {} | | | {} | | | | |",
            mode.name(),
            daemons[0].name(),
            daemons[1].name(),
            ratio(a, b, |r| r.wall().as_secs_f64()),
            ratio(a, b, |r| r.cpu.as_secs_f64()),
            ratio(a, b, WinRun::bytes_per_inode),
        )
        .unwrap();
    }
    if let Some(r) = results.iter().flatten().flatten().next() {
        writeln!(
            out,
            "\nRequests of a run, by opcode: {}.",
            by_opcode(&r.replies)
        )
        .unwrap();
    }
    if !errors.is_empty() {
        writeln!(out, "\n{} Windows run(s) failed:", errors.len()).unwrap();
        for e in errors {
            writeln!(out, "- {e}").unwrap();
        }
    }
    out
}
