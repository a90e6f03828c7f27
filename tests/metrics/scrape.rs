//! Reading the metrics endpoint: HTTP GET, the Prometheus text format, the stats table.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;

/// A Prometheus text exposition, as series (`name{labels}`) → value.
pub struct Scrape(pub HashMap<String, f64>);

impl Scrape {
    pub fn parse(text: &str) -> Scrape {
        let mut series = HashMap::new();
        for line in text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
        {
            let (name, value) = line.rsplit_once(' ').expect("series and value");
            let value = value.parse().unwrap_or_else(|_| panic!("value of {line}"));
            assert!(
                series.insert(name.to_string(), value).is_none(),
                "{name} twice"
            );
        }
        Scrape(series)
    }

    /// The value of `series`, which must be present.
    pub fn get(&self, series: &str) -> u64 {
        let v = self.0.get(series).unwrap_or_else(|| panic!("no {series}"));
        *v as u64
    }

    /// The value of `series`, 0 when absent (the errno family only has errnos seen).
    pub fn get_or_0(&self, series: &str) -> u64 {
        self.0.get(series).map_or(0, |v| *v as u64)
    }

    /// The label values of `op` in `vhostfs_requests_total`.
    pub fn ops(&self) -> Vec<String> {
        self.0
            .keys()
            .filter_map(|k| k.strip_prefix("vhostfs_requests_total{op=\""))
            .map(|k| k.trim_end_matches("\"}").to_string())
            .collect()
    }

    /// Checks what holds in every scrape: per opcode, the request count is the histogram's
    /// count and its +Inf bucket, buckets are cumulative, errors are at most the requests.
    pub fn check_consistent(&self) {
        for op in self.ops() {
            let n = self.get(&format!("vhostfs_requests_total{{op=\"{op}\"}}"));
            let h = "vhostfs_request_duration_seconds";
            assert_eq!(self.get(&format!("{h}_count{{op=\"{op}\"}}")), n, "{op}");
            assert_eq!(
                self.get(&format!("{h}_bucket{{op=\"{op}\",le=\"+Inf\"}}")),
                n,
                "{op}"
            );
            let mut buckets: Vec<(f64, u64)> = self
                .0
                .iter()
                .filter_map(|(k, v)| {
                    let le = k.strip_prefix(&format!("{h}_bucket{{op=\"{op}\",le=\""))?;
                    let le = le.trim_end_matches("\"}");
                    let le = if le == "+Inf" {
                        f64::INFINITY
                    } else {
                        le.parse().unwrap()
                    };
                    Some((le, *v as u64))
                })
                .collect();
            buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
            assert_eq!(buckets.len(), 25, "{op}: 24 log buckets and +Inf");
            assert!(buckets.windows(2).all(|w| w[0].1 <= w[1].1), "{op}");
            assert_eq!(buckets[0].0, 1e-6);
            assert!(buckets.windows(2).take(23).all(|w| w[1].0 == 2.0 * w[0].0));
            let errors = self.get(&format!("vhostfs_request_errors_total{{op=\"{op}\"}}"));
            assert!(errors <= n, "{op}");
        }
    }
}

/// `GET path` from a metrics endpoint: (status line, body).
pub fn http_get(mut s: impl Read + Write, path: &str) -> (String, String) {
    write!(s, "GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").expect("HTTP answer");
    if path == "/metrics" {
        assert!(
            head.contains("Content-Type: text/plain; version=0.0.4"),
            "{head}"
        );
    }
    (head.lines().next().unwrap().to_string(), body.to_string())
}

pub fn scrape_unix(path: &Path) -> Scrape {
    let (status, body) = http_get(UnixStream::connect(path).unwrap(), "/metrics");
    assert_eq!(status, "HTTP/1.0 200 OK");
    Scrape::parse(&body)
}

/// The row of `op` in a `vhostfs stats` table: (requests, errors, bytes).
pub fn table_row(table: &str, op: &str) -> (u64, u64, u64) {
    let line = table
        .lines()
        .map(|l| l.split_once("stats: ").map_or(l, |(_, t)| t))
        .find(|l| l.split_whitespace().next() == Some(op))
        .unwrap_or_else(|| panic!("no {op} row in\n{table}"));
    let f: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .take(3)
        .map(|v| v.parse().unwrap())
        .collect();
    (f[0], f[1], f[2])
}
