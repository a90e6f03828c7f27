//! Measurements: throughput of a timed phase and the latency distribution of its requests.

use std::time::Duration;

/// One timed phase of one run.
#[derive(Clone, Copy, Debug)]
pub struct Measured {
    pub ops_per_sec: f64,
    /// Median latency of one FUSE request.
    pub p50: Duration,
    /// 99th percentile latency of one FUSE request.
    pub p99: Duration,
    /// Daemon CPU (utime + stime of its processes) per operation over the phase.
    pub cpu_per_op: Duration,
    /// The share of the host's CPU time (all CPUs, every process) busy over the phase.
    pub host_busy: f64,
}

impl Measured {
    /// `ops` operations done in `elapsed` with `cpu` of the daemon and the host's CPUs
    /// `host_busy` busy; `latencies` of every FUSE request sent meanwhile.
    pub fn new(
        ops: usize,
        elapsed: Duration,
        cpu: Duration,
        host_busy: f64,
        mut latencies: Vec<Duration>,
    ) -> Measured {
        latencies.sort_unstable();
        let pct = |p: usize| {
            latencies
                .get((latencies.len() * p / 100).min(latencies.len().saturating_sub(1)))
                .copied()
                .unwrap_or_default()
        };
        Measured {
            ops_per_sec: ops as f64 / elapsed.as_secs_f64().max(1e-9),
            p50: pct(50),
            p99: pct(99),
            cpu_per_op: cpu / ops.max(1) as u32,
            host_busy,
        }
    }
}

impl Measured {
    /// Phases of equal work run one after the other, as one: the harmonic mean of their rates
    /// (total work over total time), the mean CPU per operation and host busy share; latencies
    /// from the slowest phase's percentiles.
    pub fn combine(phases: &[Measured]) -> Measured {
        let secs_per_op: f64 = phases.iter().map(|m| 1.0 / m.ops_per_sec).sum();
        Measured {
            ops_per_sec: phases.len() as f64 / secs_per_op,
            p50: phases.iter().map(|m| m.p50).max().unwrap_or_default(),
            p99: phases.iter().map(|m| m.p99).max().unwrap_or_default(),
            cpu_per_op: phases.iter().map(|m| m.cpu_per_op).sum::<Duration>()
                / phases.len().max(1) as u32,
            host_busy: phases.iter().map(|m| m.host_busy).sum::<f64>() / phases.len().max(1) as f64,
        }
    }
}

/// The run with the median throughput (the upper one of an even count).
pub fn median(runs: &[Measured]) -> Option<Measured> {
    let mut sorted = runs.to_vec();
    sorted.sort_by(|a, b| a.ops_per_sec.total_cmp(&b.ops_per_sec));
    sorted.get(sorted.len() / 2).copied()
}

/// `12,345` (integer with thousands separators) or `12.3` below 100.
pub fn fmt_rate(x: f64) -> String {
    if x < 100.0 {
        return format!("{x:.1}");
    }
    let digits = format!("{:.0}", x);
    let mut out = String::new();
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

/// Latency in µs (ms from 10 ms on).
pub fn fmt_latency(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us >= 10_000.0 {
        format!("{:.1} ms", us / 1000.0)
    } else if us >= 100.0 {
        format!("{us:.0} µs")
    } else {
        format!("{us:.1} µs")
    }
}

/// The host's CPU time, busy and in all, from /proc/stat's first line (every CPU, clock ticks),
/// for [`HostCpu::busy_since`].
#[derive(Clone, Copy, Default)]
pub struct HostCpu {
    busy: u64,
    total: u64,
}

impl HostCpu {
    pub fn now() -> HostCpu {
        let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
        // cpu user nice system idle iowait irq softirq steal ...
        let f: Vec<u64> = stat
            .lines()
            .next()
            .unwrap_or_default()
            .split_whitespace()
            .skip(1)
            .take(8)
            .filter_map(|v| v.parse().ok())
            .collect();
        if f.len() < 8 {
            return HostCpu::default();
        }
        let idle = f[3] + f[4];
        let total: u64 = f.iter().sum();
        HostCpu {
            busy: total - idle,
            total,
        }
    }

    /// The share of the host's CPU time that was busy since `earlier` (0 to 1; 0 if unknown).
    pub fn busy_since(&self, earlier: &HostCpu) -> f64 {
        let total = self.total.saturating_sub(earlier.total);
        if total == 0 {
            return 0.0;
        }
        self.busy.saturating_sub(earlier.busy) as f64 / total as f64
    }
}
