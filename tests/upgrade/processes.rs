//! What `/proc` says about the daemon's processes: the pid file's, each one's children, the
//! one that serves, its namespaces; zombies count as gone.

use std::fs;
use std::path::{Path, PathBuf};

pub fn pid_in_file(socket: &Path) -> Option<u32> {
    let mut p = socket.as_os_str().to_owned();
    p.push(".pid");
    fs::read_to_string(p).ok()?.trim().parse().ok()
}

pub fn alive(pid: u32) -> bool {
    // A zombie is not serving.
    fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            !s.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
        .unwrap_or(false)
}

/// The processes of this daemon's binary copy (their argv[0]), zombies left out.
pub fn processes_of(bin: &Path) -> Vec<u32> {
    let mut pids: Vec<u32> = fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter(|&pid| {
            let argv0 = fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            argv0.split(|&b| b == 0).next() == Some(bin.as_os_str().as_encoded_bytes())
                && alive(pid)
        })
        .collect();
    pids.sort();
    pids
}

/// `pid` and its children (under the namespace sandbox: the supervisor, its serving child and
/// the launcher; else the daemon and its launcher), zombies left out.
pub fn family(pid: u32) -> Vec<u32> {
    let children = fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap();
    let mut pids: Vec<u32> = children
        .split_whitespace()
        .map(|c| c.parse().unwrap())
        .chain([pid])
        .filter(|&p| alive(p))
        .collect();
    pids.sort();
    pids
}

/// The process that serves for the one the pid file names: its child that is not the
/// launcher (under the namespace sandbox), else itself.
pub fn serving(pid: u32) -> u32 {
    let children = fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap();
    children
        .split_whitespace()
        .map(|c| c.parse().unwrap())
        .find(|c| {
            fs::read_to_string(format!("/proc/{c}/comm"))
                .is_ok_and(|n| n.trim() != "vhostfs-launch")
        })
        .unwrap_or(pid)
}

/// The namespaces process `pid` serves in: (mount, user).
pub fn namespaces(pid: u32) -> (PathBuf, PathBuf) {
    let ns = |kind| fs::read_link(format!("/proc/{pid}/ns/{kind}")).unwrap();
    (ns("mnt"), ns("user"))
}
