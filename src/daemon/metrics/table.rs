//! The human table of a [`Snapshot`]: what `vhostfs stats` prints and SIGUSR1 logs.

use std::ffi::CStr;
use std::fmt::Write;
use std::time::Duration;

use super::Snapshot;
use crate::fuse_server::slot_name;

/// The symbolic name of `errno` ("ENOENT"), or "E<number>" for one glibc does not name (slot 0
/// of the registry's errno counters holds errnos out of range: "E?").
pub(super) fn errno_name(errno: usize) -> String {
    if errno == 0 {
        return "E?".into();
    }
    let Ok(n) = libc::c_int::try_from(errno) else {
        return format!("E{errno}");
    };
    extern "C" {
        /// glibc ≥ 2.32; not bound by the libc crate.
        fn strerrorname_np(errnum: libc::c_int) -> *const libc::c_char;
    }
    // SAFETY: strerrorname_np takes any int and returns NULL or a pointer to a static,
    // NUL-terminated string (it reads a constant table: thread-safe, no allocation).
    let name = unsafe { strerrorname_np(n) };
    if name.is_null() {
        return format!("E{errno}");
    }
    // SAFETY: non-NULL: a static NUL-terminated string, as above.
    unsafe { CStr::from_ptr(name) }
        .to_string_lossy()
        .into_owned()
}

/// `secs` in the unit that keeps it readable (`850ns`, `12us`, `3.4ms`, `1.2s`).
fn duration(secs: f64) -> String {
    if secs.is_infinite() {
        return "inf".into();
    }
    let ns = secs * 1e9;
    if ns < 1e3 {
        format!("{ns:.0}ns")
    } else if ns < 1e6 {
        format!("{:.0}us", ns / 1e3)
    } else if ns < 1e9 {
        format!("{:.1}ms", ns / 1e6)
    } else {
        format!("{:.1}s", ns / 1e9)
    }
}

fn uptime(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, s / 60 % 60),
    }
}

/// The table: one row per opcode seen, errors by errno, the queues, the state's counts.
/// Latency columns are the mean and upper bounds of the median and 99th percentile (from the
/// histogram's power-of-two buckets).
pub fn table(s: &Snapshot) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "vhostfs {} (pid {}), up {}",
        env!("CARGO_PKG_VERSION"),
        s.pid,
        uptime(s.uptime)
    );
    let _ = writeln!(
        t,
        "{:<14}{:>10}{:>8}{:>14}{:>9}{:>9}{:>9}",
        "opcode", "requests", "errors", "bytes", "mean", "p50<=", "p99<="
    );
    for (slot, op) in s.requests.ops.iter().enumerate() {
        let Some(name) = slot_name(slot).filter(|_| op.count > 0) else {
            continue;
        };
        let q = |q| duration(op.quantile_bound(q).unwrap_or(0.0));
        let _ = writeln!(
            t,
            "{name:<14}{:>10}{:>8}{:>14}{:>9}{:>9}{:>9}",
            op.count,
            op.errors,
            op.bytes,
            duration(op.nanos as f64 / 1e9 / op.count as f64),
            q(0.5),
            q(0.99)
        );
    }
    let errors: Vec<String> = (s.requests.errno.iter().enumerate())
        .filter(|(_, n)| **n > 0)
        .map(|(e, n)| format!("{} {n}", errno_name(e)))
        .collect();
    let _ = writeln!(
        t,
        "errors by errno: {}",
        if errors.is_empty() {
            "none".into()
        } else {
            errors.join(", ")
        }
    );
    let queues: Vec<String> = (s.queues.iter().enumerate())
        .filter(|(q, g)| *q <= 1 || g.in_flight > 0 || g.depth > 0)
        .map(|(q, g)| format!("{q}: {} in flight, {} waiting", g.in_flight, g.depth))
        .collect();
    let _ = writeln!(t, "queues: {}", queues.join("; "));
    let fs = &s.fs;
    let _ = writeln!(
        t,
        "inodes held {}, open handles {}, fds {} of {} budget, fd cache {} hits {} misses, \
         ENFILE refusals {}",
        fs.inodes,
        fs.open_handles,
        fs.fds_in_use,
        fs.fd_budget,
        fs.fd_cache_hits,
        fs.fd_cache_misses,
        fs.enfile_refusals
    );
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errno_names() {
        assert_eq!(errno_name(libc::ENOENT as usize), "ENOENT");
        assert_eq!(errno_name(libc::ENFILE as usize), "ENFILE");
        assert_eq!(errno_name(0), "E?");
        assert_eq!(errno_name(4000), "E4000");
    }

    #[test]
    fn durations() {
        assert_eq!(duration(5e-7), "500ns");
        assert_eq!(duration(1.6e-5), "16us");
        assert_eq!(duration(3.4e-3), "3.4ms");
        assert_eq!(duration(2.0), "2.0s");
        assert_eq!(duration(f64::INFINITY), "inf");
        assert_eq!(uptime(Duration::from_secs(3725)), "1h02m");
    }
}
