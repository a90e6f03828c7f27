//! `--sandbox`: what the serving process can see of the host in each mode and the supervisor of
//! the namespace mode (pid file, signal forwarding, exit status), run as root. Unprivileged runs
//! (a user namespace) and the one-line failure when it cannot be set up: `tests/userns.rs`.

mod common;

use std::fs;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::Duration;

use common::fuse_abi::*;
use common::{Session, TempDir};

/// The namespace (`pid`, `mnt`, `net`) `pid` is in.
fn ns(pid: u32, kind: &str) -> String {
    fs::read_link(format!("/proc/{pid}/ns/{kind}"))
        .unwrap()
        .display()
        .to_string()
}

/// Names in the root directory of process `pid`, sorted.
fn root_listing(pid: u32) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(format!("/proc/{pid}/root"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn namespace_is_the_default_and_sees_only_the_share() {
    let s = Session::start(&[]);
    fs::write(s.shared.join("only-this"), b"x").unwrap();
    let served = s.daemon.served_pid().unwrap();
    assert_ne!(served, s.daemon.pid(), "no supervisor/child split");
    let me = std::process::id();
    for kind in ["pid", "mnt", "net"] {
        assert_ne!(ns(served, kind), ns(me, kind), "{kind} namespace not new");
    }
    assert_eq!(root_listing(served), ["only-this"]);
    // One mount only: the share as "/" (the host's /proc, /dev, /sys are gone).
    let mounts = fs::read_to_string(format!("/proc/{served}/mountinfo")).unwrap();
    assert_eq!(mounts.lines().count(), 1, "{mounts}");
    assert!(mounts.split_whitespace().nth(4) == Some("/"), "{mounts}");
    // The guest still gets served.
    let e = s.client.lookup(FUSE_ROOT_ID, "only-this").unwrap();
    assert_eq!(e.attr.size, 1);
}

#[test]
fn namespace_pid_file_names_the_supervisor_which_forwards_sigterm() {
    let mut s = Session::start(&[]);
    let pid_file = fs::read_to_string(s.sock_dir.join("vfs.sock.pid")).unwrap();
    assert_eq!(pid_file.trim(), s.daemon.pid().to_string());
    let served = s.daemon.served_pid().unwrap();
    // SAFETY: plain kill of the daemon we spawned.
    assert_eq!(
        unsafe { libc::kill(s.daemon.pid() as i32, libc::SIGTERM) },
        0
    );
    let status = s.daemon.wait_exit(Duration::from_secs(10)).unwrap();
    let status = status.expect("the supervisor did not exit on SIGTERM");
    // The serving child exits cleanly on SIGTERM, and the supervisor with its status; then it
    // removes the socket and pid file the confined child can no longer name.
    assert_eq!(status.code(), Some(0), "{status:?}");
    assert!(!s.sock_dir.join("vfs.sock").exists(), "socket left behind");
    assert!(
        !s.sock_dir.join("vfs.sock.pid").exists(),
        "pid file left behind"
    );
    assert!(
        !std::path::Path::new(&format!("/proc/{served}")).exists(),
        "the serving child outlived its supervisor"
    );
}

#[test]
fn chroot_sees_only_the_share_without_namespaces() {
    let s = Session::start(&["--sandbox=chroot"]);
    fs::write(s.shared.join("only-this"), b"x").unwrap();
    let pid = s.daemon.pid();
    assert_eq!(s.daemon.served_pid().unwrap(), pid);
    assert_eq!(root_listing(pid), ["only-this"]);
    assert_eq!(ns(pid, "mnt"), ns(std::process::id(), "mnt"));
    s.client.lookup(FUSE_ROOT_ID, "only-this").unwrap();
}

#[test]
fn none_keeps_the_host_root() {
    let s = Session::start(&["--sandbox=none"]);
    let pid = s.daemon.pid();
    assert_eq!(s.daemon.served_pid().unwrap(), pid);
    assert_eq!(root_listing(pid), root_listing(std::process::id()));
}

/// The `Seccomp:` mode of process `pid` (0 none, 2 filter).
fn seccomp_mode(pid: u32) -> String {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("Seccomp:"))
        .unwrap()
        .trim()
        .to_string()
}

#[test]
fn seccomp_filter_is_on_by_default_on_every_thread() {
    let s = Session::start(&["--thread-pool-size=2"]);
    let served = s.daemon.served_pid().unwrap();
    let tasks: Vec<u32> = fs::read_dir(format!("/proc/{served}/task"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().parse().unwrap())
        .collect();
    assert!(tasks.len() > 2, "{tasks:?}");
    for tid in tasks {
        assert_eq!(seccomp_mode(tid), "2", "thread {tid} unfiltered");
    }
    let s = Session::start(&["--seccomp=none"]);
    assert_eq!(seccomp_mode(s.daemon.served_pid().unwrap()), "0");
}

/// `CapEff` of thread `tid` as a bit mask.
fn effective_caps(tid: u32) -> u64 {
    let status = fs::read_to_string(format!("/proc/{tid}/status")).unwrap();
    let hex = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .unwrap()
        .trim();
    u64::from_str_radix(hex, 16).unwrap()
}

fn mask(caps: &[caps::Capability]) -> u64 {
    caps.iter().fold(0, |m, c| m | c.bitmask())
}

#[test]
fn capabilities_are_dropped_on_every_thread() {
    use caps::Capability::*;
    let base = [
        CAP_CHOWN,
        CAP_DAC_OVERRIDE,
        CAP_FOWNER,
        CAP_FSETID,
        CAP_SETGID,
        CAP_SETUID,
        CAP_MKNOD,
        CAP_SETFCAP,
    ];
    let with_handles = [&base[..], &[CAP_DAC_READ_SEARCH]].concat();
    for (args, want) in [
        (&["--thread-pool-size=2"][..], mask(&with_handles)),
        (&["--inode-file-handles=never"], mask(&base)),
        (
            &["--modcaps=-mknod:+sys_ptrace", "--inode-file-handles=never"],
            mask(&base) & !mask(&[CAP_MKNOD]) | mask(&[CAP_SYS_PTRACE]),
        ),
        (&["--sandbox=chroot"], mask(&with_handles)),
    ] {
        let s = Session::start(args);
        let served = s.daemon.served_pid().unwrap();
        for e in fs::read_dir(format!("/proc/{served}/task")).unwrap() {
            let tid: u32 = e.unwrap().file_name().to_string_lossy().parse().unwrap();
            assert_eq!(effective_caps(tid), want, "{args:?}: thread {tid}");
        }
    }
}

/// `CAP_DAC_READ_SEARCH` (linux/capability.h).
const CAP_DAC_READ_SEARCH: libc::c_ulong = 2;

/// vhostfs started with CAP_DAC_READ_SEARCH gone from its bounding set (so root's exec does
/// not get it), with `args`; returns its stderr.
fn run_without_dac_read_search(args: &[&str]) -> (std::process::ExitStatus, String) {
    let shared = TempDir::new("caps-shared").unwrap();
    let sock_dir = TempDir::new("caps-sock").unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_vhostfs"));
    cmd.arg(format!("--socket-path={}", sock_dir.join("s").display()))
        .arg(format!("--shared-dir={}", shared.path().display()))
        .arg("--log-level=error")
        .args(args);
    // SAFETY: the closure only makes the prctl syscall (no allocation, no locks).
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_CAPBSET_DROP, CAP_DAC_READ_SEARCH, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out = cmd.output().unwrap();
    (
        out.status,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn mandatory_file_handles_without_the_capability_is_one_clear_line() {
    let (status, stderr) = run_without_dac_read_search(&["--inode-file-handles=mandatory"]);
    assert!(!status.success());
    assert_eq!(
        stderr,
        "vhostfs: error: --inode-file-handles=mandatory needs CAP_DAC_READ_SEARCH, which the \
         process does not have: grant it, or pass --inode-file-handles=never\n"
    );
    let (status, stderr) = run_without_dac_read_search(&["--modcaps=+dac_read_search"]);
    assert!(!status.success());
    assert_eq!(
        stderr,
        "vhostfs: error: --modcaps: the process does not have CAP_DAC_READ_SEARCH to keep \
         (run as root or grant it)\n"
    );
}
