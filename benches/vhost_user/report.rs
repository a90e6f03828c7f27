//! The report: the table of the daemons' median rounds with their ratios and single-round
//! ranges, and the per-file check.

use super::*;

/// The report's `Daemon A: `CMD` (N request queue(s))` lines, one per daemon.
pub fn daemon_lines(specs: &[DaemonSpec]) -> String {
    specs
        .iter()
        .map(|spec| {
            format!(
                "Daemon {}: `{}` ({} request queue(s))  \n",
                if spec.side == Side::A { "A" } else { "B" },
                spec.cmd.command_line(),
                spec.max_queues
            )
        })
        .collect()
}

/// The table; `shape(config, max_queues)` is how a daemon was driven in a configuration.
pub(super) fn table(
    rows: &[Row],
    specs: &[DaemonSpec],
    shape: impl Fn(usize, usize) -> Shape,
) -> String {
    let a = specs.iter().position(|s| s.side == Side::A).unwrap();
    let bs: Vec<usize> = (0..specs.len())
        .filter(|&i| specs[i].side == Side::B)
        .collect();
    let (an, bn) = (specs[a].cmd.name(), specs[bs[0]].cmd.name());
    let mut out = format!(
        "| workload | queues×threads ({an} / {bn}) | {an} ops/s | {bn} ops/s | ratio (rounds) | \
         {an} p50 / p99 | {bn} p50 / p99 | {an} / {bn} daemon CPU µs per op | CPU ratio (rounds) \
         |\n|---|---|---|---|---|---|---|---|---|\n"
    );
    let na = "–".to_owned();
    for row in rows {
        let ma = median(&row.runs[a]);
        // B: its best setting for this row.
        let mb = bs
            .iter()
            .filter_map(|&i| median(&row.runs[i]).map(|m| (i, m)))
            .max_by(|x, y| x.1.ops_per_sec.total_cmp(&y.1.ops_per_sec));
        let shape = format!(
            "{} / {}",
            shape(row.config, specs[a].max_queues).label(),
            shape(row.config, specs[bs[0]].max_queues).label()
        );
        let rate_a = ma.map_or(na.clone(), |m| fmt_rate(m.ops_per_sec));
        let rate_b = mb.map_or(na.clone(), |(i, m)| {
            let tag = &specs[i].tag;
            if tag.is_empty() {
                fmt_rate(m.ops_per_sec)
            } else {
                format!("{} ({tag})", fmt_rate(m.ops_per_sec))
            }
        });
        let ratio = match (ma, mb) {
            (Some(x), Some((i, y))) => {
                let r = format!("{:.2}", x.ops_per_sec / y.ops_per_sec);
                match round_ratios(&row.runs[a], &row.runs[i], |m| m.ops_per_sec) {
                    Some((lo, hi)) => format!("{r} ({lo:.2}–{hi:.2})"),
                    None => r,
                }
            }
            _ => na.clone(),
        };
        let cpu = match (ma, mb) {
            // 0 ticks of B's CPU (a phase shorter than a clock tick): no ratio.
            (Some(x), Some((i, y))) if !y.cpu_per_op.is_zero() => {
                let us = |m: Measured| m.cpu_per_op.as_secs_f64() * 1e6;
                let r = format!("{:.2}", us(x) / us(y).max(1e-9));
                let range =
                    round_ratios(&row.runs[a], &row.runs[i], |m| m.cpu_per_op.as_secs_f64())
                        .map_or(String::new(), |(lo, hi)| format!(" ({lo:.2}–{hi:.2})"));
                (
                    format!("{:.2} / {:.2}", us(x), us(y)),
                    format!("{r}{range}"),
                )
            }
            _ => (na.clone(), na.clone()),
        };
        let lat = |m: Option<Measured>| {
            m.map_or(na.clone(), |m| {
                format!("{} / {}", fmt_latency(m.p50), fmt_latency(m.p99))
            })
        };
        writeln!(
            out,
            "| {} | {shape} | {rate_a} | {rate_b} | {ratio} | {} | {} | {} | {} |",
            row.label,
            lat(ma),
            lat(mb.map(|(_, m)| m)),
            cpu.0,
            cpu.1
        )
        .unwrap();
    }
    out
}

/// The lowest and highest ratio of `f` of A's to B's runs over the rounds (runs paired in round
/// order), if there were two rounds or more: how far apart single rounds land on this machine.
pub(super) fn round_ratios(
    a: &[Measured],
    b: &[Measured],
    f: impl Fn(&Measured) -> f64,
) -> Option<(f64, f64)> {
    let ratios: Vec<f64> = a
        .iter()
        .zip(b)
        .map(|(x, y)| f(x) / f(y).max(1e-12))
        .collect();
    if ratios.len() < 2 {
        return None;
    }
    let lo = ratios.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = ratios.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    Some((lo, hi))
}

/// The per-file check of daemon A, if the `perfile` rows are there (see
/// `workloads/perfile.rs`): random READs of one file by all threads against a file per thread,
/// and WRITEs to one file by all threads against one thread.
pub(super) fn per_file_check(rows: &[Row], specs: &[DaemonSpec]) -> Option<String> {
    use workloads::perfile::{READ_ONE, READ_OWN, WRITE_ONE};
    let a = specs.iter().position(|s| s.side == Side::A)?;
    let rate = |label: &str, config: usize| {
        let row = rows
            .iter()
            .find(|r| r.label == label && r.config == config)?;
        median(&row.runs[a]).map(|m| m.ops_per_sec)
    };
    let reads = rate(READ_ONE, 1)? / rate(READ_OWN, 1)?;
    let writes = rate(WRITE_ONE, 1)? / rate(WRITE_ONE, 0)?;
    let verdict = |ok: bool| if ok { "PASS" } else { "FAIL" };
    let threads = Shape::of(1, specs[a].max_queues).label();
    Some(format!(
        "Per-file check ({}): with {threads}, 4 KiB random READs of one file reach {reads:.2} of \
         the rate with a file per thread (≥ 0.90: {}); WRITEs of one file, a region per thread, \
         reach {writes:.2} of the rate of one thread on 1 queue (≥ 1.00: {}).\n",
        specs[a].cmd.name(),
        verdict(reads >= 0.90),
        verdict(writes >= 1.0)
    ))
}
