//! An idle daemon costs its host nothing: once the guest stops sending requests, no thread of
//! vhostfs wakes up. The stall watcher parks after 100 ms without a request
//! (`src/stall_watch.rs`), the fd cache's reaper sleeps once it has closed the fds unused for 1 s
//! (`src/passthrough/state/fd_cache.rs`), a queue thread lingers 35 µs at most after a burst
//! (`src/vhost_device/linger.rs`), and the pool helpers and the queue threads sleep until a
//! kick. On a host with hundreds of mostly idle guests, a daemon that ticks costs CPU time and
//! keeps CPUs out of deep idle states for every one of them.

mod common;

use std::fs;
use std::time::Duration;

use common::fuse_abi::*;
use common::{Session, TempDir};

/// Context switches (voluntary and not) of each thread of process `pid`, by "comm:tid".
fn switches(pid: u32) -> Vec<(String, u64)> {
    let mut threads: Vec<(String, u64)> = fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .map(|e| {
            let dir = e.unwrap().path();
            let comm = fs::read_to_string(dir.join("comm")).unwrap_or_default();
            let status = fs::read_to_string(dir.join("status")).unwrap_or_default();
            let n = status
                .lines()
                .filter(|l| l.contains("ctxt_switches:"))
                .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
                .sum();
            let tid = dir.file_name().unwrap().to_string_lossy().into_owned();
            (format!("{}:{tid}", comm.trim()), n)
        })
        .collect();
    threads.sort();
    threads
}

/// The threads that switched between `before` and `after`, with how often; a thread that
/// started or ended in between counts too.
fn woken(before: &[(String, u64)], after: &[(String, u64)]) -> Vec<String> {
    let mut woke: Vec<String> = after
        .iter()
        .filter_map(|(name, n)| match before.iter().find(|(b, _)| b == name) {
            Some((_, m)) if m == n => None,
            Some((_, m)) => Some(format!("{name} +{}", n - m)),
            None => Some(format!("{name} (new)")),
        })
        .collect();
    woke.extend(
        before
            .iter()
            .filter(|(name, _)| !after.iter().any(|(a, _)| a == name))
            .map(|(name, _)| format!("{name} (ended)")),
    );
    woke
}

#[test]
fn an_idle_daemon_wakes_no_thread() {
    // Two request queues and the metrics endpoint's thread, beside the queue threads and pool
    // helpers every daemon has; then work that wakes the rest: the fd cache's reaper (started
    // by the first handle-backed inode) and the stall watcher (unparked by a request).
    let metrics_dir = TempDir::new("idle-metrics").unwrap();
    let metrics = format!("--metrics=unix:{}", metrics_dir.join("m.sock").display());
    let s = Session::start_with_queues(&[&metrics], 2);
    for i in 0..64 {
        fs::write(s.shared.join(&format!("f{i}")), [i as u8; 4096]).unwrap();
    }
    for _ in 0..3 {
        for i in 0..64 {
            let e = s.client.lookup(FUSE_ROOT_ID, &format!("f{i}")).unwrap();
            s.client.getattr(e.nodeid, None).unwrap();
            let fh = s.client.open(e.nodeid, libc::O_RDWR as u32).unwrap().fh;
            assert_eq!(
                s.client.read(e.nodeid, fh, 0, 4096).unwrap(),
                [i as u8; 4096]
            );
            assert_eq!(s.client.write(e.nodeid, fh, 4096, &[1; 512]).unwrap(), 512);
            s.client.release(e.nodeid, fh, libc::O_RDWR as u32).unwrap();
        }
    }
    // Past the fd cache's 1 s bound and the reaper's last sweep of a non-empty cache.
    std::thread::sleep(Duration::from_secs(3));
    let processes = [s.daemon.pid(), s.daemon.served_pid().unwrap()];
    let before: Vec<_> = processes.iter().map(|&p| switches(p)).collect();
    std::thread::sleep(Duration::from_secs(5));
    let after: Vec<_> = processes.iter().map(|&p| switches(p)).collect();
    let woke: Vec<String> = before
        .iter()
        .zip(&after)
        .flat_map(|(b, a)| woken(b, a))
        .collect();
    assert_eq!(
        woke,
        Vec::<String>::new(),
        "threads of the idle daemon woke up within 5 s (pids {processes:?}, threads {:?})",
        before
            .concat()
            .iter()
            .map(|(name, _)| name)
            .collect::<Vec<_>>()
    );
    // The daemon still serves after its idle spell.
    assert!(s.client.getattr(FUSE_ROOT_ID, None).is_ok());
}
