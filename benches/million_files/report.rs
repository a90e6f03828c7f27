//! The measurements of a walk and the markdown report.

use std::fmt::Write as _;
use std::time::Duration;

use crate::shared::{machine, today, DaemonCmd};
use crate::walk::Layout;
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

/// The run with the median wall time.
fn median(runs: &[Run]) -> Option<&Run> {
    let mut v: Vec<&Run> = runs.iter().collect();
    v.sort_by_key(|r| r.wall);
    v.get(v.len() / 2).copied()
}

/// `ratio (lo–hi)` of `f(a) / f(b)`: of the medians, and the range over rounds paired in order.
fn ratio(a: &[Run], b: &[Run], f: impl Fn(&Run) -> f64) -> String {
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

pub fn render(
    args: &Args,
    daemons: &[DaemonCmd; 2],
    l: Layout,
    created: Duration,
    results: &[Vec<Vec<Run>>],
    errors: &[String],
    total: Duration,
) -> String {
    let cmdline: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let (an, bn) = (daemons[0].name(), daemons[1].name());
    let mut out = format!(
        "Command: `cargo bench --bench million_files{}{}` (vhostfs {})  \n\
         Date: {}  \n\
         Machine: {}  \n\
         Share: {} files in one directory + {} directories × {} files, on {} ({}), created in \
         {:.0} s; `never` walks {} entries of each part  \n\
         Walk: READDIRPLUS (4 KiB), then per entry LOOKUP, OPEN, GETATTR (fh), READ 4 KiB, \
         RELEASE, {} in flight per step of a page; no FORGET; 1 queue  \n\
         Rounds: {}, daemons alternating; median round; {:.0} s in total  \n",
        if cmdline.is_empty() { "" } else { " -- " },
        cmdline.join(" "),
        commit(),
        today(),
        machine(),
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
    for (side, d) in ["A", "B"].iter().zip(daemons) {
        writeln!(
            out,
            "Daemon {side}: `{} --inode-file-handles=MODE`  ",
            d.command_line()
        )
        .unwrap();
    }
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
