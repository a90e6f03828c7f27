//! The Prometheus text format (version 0.0.4) of a [`Snapshot`], encoded by prometheus-client
//! (the Prometheus project's own Rust client: names, label escaping, `_total`/unit suffixes and
//! histogram series are its business, not ours). Our counters live in the lock-free registry;
//! the client only sees them at scrape time, through a [`Collector`].

use std::fmt::{self, Write};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, NoLabelSet};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};

use super::table::errno_name;
use super::Snapshot;
use crate::fuse_server::slot_name;
use crate::metrics::requests::{bucket_bound_seconds, BUCKETS};

pub(super) use prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

#[derive(Debug)]
struct Collect(Snapshot);

/// A family of counters, one per label value.
fn counters(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    label: &str,
    values: impl IntoIterator<Item = (String, u64)>,
) -> fmt::Result {
    let mut m = enc.encode_descriptor(name, help, unit, MetricType::Counter)?;
    for (value, n) in values {
        let labels = [(label, value.as_str())];
        ConstCounter::new(n).encode(m.encode_family(&labels)?)?;
    }
    Ok(())
}

/// One gauge without labels.
fn gauge(enc: &mut DescriptorEncoder, name: &str, help: &str, v: u64) -> fmt::Result {
    let m = enc.encode_descriptor(name, help, None, MetricType::Gauge)?;
    ConstGauge::new(v).encode(m)
}

/// One counter without labels.
fn counter(enc: &mut DescriptorEncoder, name: &str, help: &str, v: u64) -> fmt::Result {
    let mut m = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
    m.encode_counter::<NoLabelSet, u64, f64>(&v, None)
}

impl Collector for Collect {
    fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
        let s = &self.0;
        // Every opcode we know (a series that appears late loses its first increase in rate()),
        // lower-case as the kernel's names; UNKNOWN only once seen.
        let ops: Vec<_> = s
            .requests
            .ops
            .iter()
            .enumerate()
            .filter_map(|(slot, op)| {
                let name = slot_name(slot)?;
                (name != "UNKNOWN" || op.count > 0).then(|| (name.to_ascii_lowercase(), op))
            })
            .collect();
        let per_op = |f: fn(&crate::metrics::requests::OpSnapshot) -> u64| {
            ops.iter().map(move |(name, op)| (name.clone(), f(op)))
        };
        counters(
            &mut enc,
            "vhostfs_requests",
            "FUSE requests answered, by opcode",
            None,
            "op",
            per_op(|o| o.count),
        )?;
        counters(
            &mut enc,
            "vhostfs_request_errors",
            "FUSE requests answered with an error, by opcode",
            None,
            "op",
            per_op(|o| o.errors),
        )?;
        let errnos = s.requests.errno.iter().enumerate().filter(|(_, n)| **n > 0);
        counters(
            &mut enc,
            "vhostfs_errors",
            "FUSE error replies, by errno",
            None,
            "errno",
            errnos.map(|(e, n)| (errno_name(e), *n)),
        )?;
        let bytes = |op: &str| {
            ops.iter()
                .find(|(n, _)| n == op)
                .map_or(0, |(_, o)| o.bytes)
        };
        let m = enc.encode_descriptor(
            "vhostfs_read",
            "Data read from files for the guest (READ replies)",
            Some(&Unit::Bytes),
            MetricType::Counter,
        )?;
        ConstCounter::new(bytes("read")).encode(m)?;
        let m = enc.encode_descriptor(
            "vhostfs_written",
            "Data written to files for the guest (WRITE requests)",
            Some(&Unit::Bytes),
            MetricType::Counter,
        )?;
        ConstCounter::new(bytes("write")).encode(m)?;
        let mut m = enc.encode_descriptor(
            "vhostfs_request_duration",
            "Service time of FUSE requests (from the serving thread taking the request to its \
             reply written), by opcode",
            Some(&Unit::Seconds),
            MetricType::Histogram,
        )?;
        for (name, op) in &ops {
            let buckets: Vec<(f64, u64)> = (0..BUCKETS)
                .map(|k| (bucket_bound_seconds(k), op.buckets[k]))
                .collect();
            let labels = [("op", name.as_str())];
            m.encode_family(&labels)?.encode_histogram::<NoLabelSet>(
                op.nanos as f64 / 1e9,
                op.count,
                &buckets,
                None,
            )?;
        }
        let queues = || s.queues.iter().enumerate();
        let mut m = enc.encode_descriptor(
            "vhostfs_requests_in_flight",
            "FUSE requests taken from a queue and not answered yet, by queue (0: high priority)",
            None,
            MetricType::Gauge,
        )?;
        for (q, g) in queues() {
            let labels = [("queue", q.to_string())];
            ConstGauge::new(g.in_flight).encode(m.encode_family(&labels)?)?;
        }
        let mut m = enc.encode_descriptor(
            "vhostfs_queue_depth",
            "Requests waiting in a queue behind the last one taken, by queue",
            None,
            MetricType::Gauge,
        )?;
        for (q, g) in queues() {
            let labels = [("queue", q.to_string())];
            ConstGauge::new(g.depth).encode(m.encode_family(&labels)?)?;
        }
        let fs = &s.fs;
        gauge(
            &mut enc,
            "vhostfs_inodes_held",
            "Inodes the guest holds (looked up and not forgotten), the root included",
            fs.inodes as u64,
        )?;
        gauge(
            &mut enc,
            "vhostfs_open_handles",
            "Files and directories the guest holds open",
            fs.open_handles as u64,
        )?;
        gauge(
            &mut enc,
            "vhostfs_fds_in_use",
            "File descriptors held for the guest (open files, inode fds, the fd cache)",
            fs.fds_in_use as u64,
        )?;
        gauge(
            &mut enc,
            "vhostfs_fd_budget",
            "File descriptors the guest may make the daemon hold (RLIMIT_NOFILE minus a reserve)",
            fs.fd_budget as u64,
        )?;
        counter(
            &mut enc,
            "vhostfs_fd_cache_hits",
            "Inode fd lookups served from the fd cache",
            fs.fd_cache_hits,
        )?;
        counter(
            &mut enc,
            "vhostfs_fd_cache_misses",
            "Inode fd lookups the fd cache could not serve",
            fs.fd_cache_misses,
        )?;
        counter(
            &mut enc,
            "vhostfs_enfile_refusals",
            "Operations refused with ENFILE: the fd budget was spent",
            fs.enfile_refusals,
        )?;
        let m = enc.encode_descriptor(
            "vhostfs_uptime",
            "Time since the daemon started serving",
            Some(&Unit::Seconds),
            MetricType::Gauge,
        )?;
        ConstGauge::new(s.uptime.as_secs_f64()).encode(m)
    }
}

/// `s` in the Prometheus text format.
pub(super) fn encode(s: &Snapshot) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Collect(s.clone())));
    let mut out = String::new();
    if prometheus_client::encoding::prometheus_text::encode(&mut out, &registry).is_err() {
        // Only a failing `Write` fails encoding, and a String does not fail.
        out.clear();
        let _ = writeln!(out, "# encoding failed");
    }
    out
}
