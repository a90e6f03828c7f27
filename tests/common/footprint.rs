//! What a daemon costs its host while it idles (issue 36): its processes (the one started and
//! every descendant: a sandbox supervisor's child, an upgrade launcher), their threads, fds and
//! proportional set size (PSS: shared pages split between the processes that map them), and the
//! context switches of all their threads.

use std::fs;
use std::io;

/// The processes, threads, fds and PSS of one daemon's process tree at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Footprint {
    pub processes: usize,
    pub threads: usize,
    pub fds: usize,
    /// Sum of the processes' `Pss:` in /proc/PID/smaps_rollup, bytes.
    pub pss: u64,
}

impl std::ops::Add for Footprint {
    type Output = Footprint;
    fn add(self, o: Footprint) -> Footprint {
        Footprint {
            processes: self.processes + o.processes,
            threads: self.threads + o.threads,
            fds: self.fds + o.fds,
            pss: self.pss + o.pss,
        }
    }
}

impl std::fmt::Display for Footprint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} processes, {} threads, {} fds, {:.2} MiB PSS",
            self.processes,
            self.threads,
            self.fds,
            self.pss as f64 / (1 << 20) as f64
        )
    }
}

/// `pid` and all its descendants (through /proc/PID/task/TID/children of every thread).
pub fn process_tree(pid: u32) -> Vec<u32> {
    let mut tree = vec![pid];
    let mut i = 0;
    while i < tree.len() {
        let p = tree[i];
        if let Ok(tasks) = fs::read_dir(format!("/proc/{p}/task")) {
            for task in tasks.flatten() {
                let children = fs::read_to_string(task.path().join("children")).unwrap_or_default();
                tree.extend(
                    children
                        .split_whitespace()
                        .filter_map(|c| c.parse::<u32>().ok()),
                );
            }
        }
        i += 1;
    }
    tree
}

/// The footprint of the tree rooted at `pid`.
pub fn footprint(pid: u32) -> io::Result<Footprint> {
    let mut total = Footprint::default();
    for p in process_tree(pid) {
        let threads = fs::read_dir(format!("/proc/{p}/task"))?.count();
        let fds = fs::read_dir(format!("/proc/{p}/fd"))?.count();
        let rollup = fs::read_to_string(format!("/proc/{p}/smaps_rollup"))?;
        let pss_kib = rollup
            .lines()
            .find_map(|l| l.strip_prefix("Pss:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .ok_or_else(|| io::Error::other(format!("no Pss in /proc/{p}/smaps_rollup")))?;
        total = total
            + Footprint {
                processes: 1,
                threads,
                fds,
                pss: pss_kib * 1024,
            };
    }
    Ok(total)
}

/// Context switches (voluntary and not) of every thread in the tree rooted at `pid`, summed.
pub fn context_switches(pid: u32) -> u64 {
    let mut n = 0;
    for p in process_tree(pid) {
        let Ok(tasks) = fs::read_dir(format!("/proc/{p}/task")) else {
            continue;
        };
        for task in tasks.flatten() {
            let status = fs::read_to_string(task.path().join("status")).unwrap_or_default();
            n += status
                .lines()
                .filter(|l| l.contains("ctxt_switches:"))
                .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
                .sum::<u64>();
        }
    }
    n
}

/// The names of the threads of the tree rooted at `pid` ("comm" of each), sorted: what a
/// failing footprint assertion shows.
pub fn thread_names(pid: u32) -> Vec<String> {
    let mut names = Vec::new();
    for p in process_tree(pid) {
        let Ok(tasks) = fs::read_dir(format!("/proc/{p}/task")) else {
            continue;
        };
        for task in tasks.flatten() {
            let comm = fs::read_to_string(task.path().join("comm")).unwrap_or_default();
            names.push(format!("{p}:{}", comm.trim()));
        }
    }
    names.sort();
    names
}

/// What each fd of the tree rooted at `pid` points at (the readlink of /proc/PID/fd/N), sorted.
pub fn fd_targets(pid: u32) -> Vec<String> {
    let mut targets = Vec::new();
    for p in process_tree(pid) {
        let Ok(fds) = fs::read_dir(format!("/proc/{p}/fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            let target = fs::read_link(fd.path()).unwrap_or_default();
            targets.push(format!("{p}:{}", target.display()));
        }
    }
    targets.sort();
    targets
}
