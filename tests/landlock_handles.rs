//! Files opened by handle under Landlock (found by the Windows-style million-file walk, issue 34
//! item 5): once the host's kernel has dropped a file's dentry, `open_by_handle_at` gives a
//! disconnected one, which Landlock refused to open (EACCES) when the daemon's ruleset
//! restricted file reads and writes to the share. A guest holding files it looked up before
//! (a Windows guest never sends FORGET) then got "access denied" on files it had just listed.
//!
//! Here, as root, with the default sandbox and `--landlock=auto`: the guest looks up 200 files
//! and holds them, the daemon's fd cache lets go of them (1 s after their last use), the host
//! drops its dentries and inodes (`drop_caches` 2, every 20 ms) while the guest opens and
//! reads each file: every one must open and read back right, in `prefer` and `mandatory`,
//! also for writing. `VHOSTFS_BIN` runs another binary.

mod common;

use std::fs;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{Daemon, FuseClient, TempDir, TestGuest};

const FILES: usize = 200;
const RDONLY: u32 = libc::O_RDONLY as u32;
const RDWR: u32 = libc::O_RDWR as u32;

fn contents(i: usize) -> Vec<u8> {
    format!("file {i:03} of the walk").into_bytes()
}

fn opens_after_dentries_dropped(mode: &str, sandbox: &str) {
    let share = TempDir::new("landlock-handles").unwrap();
    fs::create_dir(share.join("d")).unwrap();
    for i in 0..FILES {
        fs::write(share.join(&format!("d/f{i:03}")), contents(i)).unwrap();
    }
    let sock_dir = TempDir::new("landlock-handles-sock").unwrap();
    let socket = sock_dir.join("vfs.sock");
    let bin =
        std::env::var_os("VHOSTFS_BIN").unwrap_or_else(|| env!("CARGO_BIN_EXE_vhostfs").into());
    let mut cmd = Command::new(&bin);
    cmd.arg(format!("--socket-path={}", socket.display()))
        .arg(format!("--shared-dir={}", share.path().display()))
        .arg(format!("--inode-file-handles={mode}"))
        .arg(format!("--sandbox={sandbox}"))
        .arg("--log-level=error");
    let _daemon = Daemon::spawn(&mut cmd, &socket).unwrap();
    let guest = TestGuest::connect(&socket, 1, 256, 16 << 20).unwrap();
    let c = FuseClient::new(Arc::new(guest), 0);
    c.init().unwrap();

    let d = c.lookup(1, "d").unwrap();
    let nodes: Vec<u64> = (0..FILES)
        .map(|i| c.lookup(d.nodeid, &format!("f{i:03}")).unwrap().nodeid)
        .collect();
    // The daemon's fd cache closes an fd 1 s after the inode's last use (checked when requests
    // come); the host then drops dentries and inodes every 20 ms while the guest opens.
    std::thread::sleep(Duration::from_millis(1500));
    c.getattr(1, None).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let dropper = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                fs::write("/proc/sys/vm/drop_caches", "2").unwrap();
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    let mut failed = Vec::new();
    for (i, &n) in nodes.iter().enumerate() {
        let flags = if i % 10 == 0 { RDWR } else { RDONLY };
        match c.open(n, flags) {
            Ok(o) => {
                match c.read(n, o.fh, 0, 4096) {
                    Ok(data) if data == contents(i) => {}
                    Ok(data) => failed.push(format!("f{i:03}: read {data:?}")),
                    Err(errno) => failed.push(format!("f{i:03}: READ errno {errno}")),
                }
                c.release(n, o.fh, 0).unwrap();
            }
            Err(errno) => failed.push(format!("f{i:03}: OPEN errno {errno}")),
        }
    }
    stop.store(true, Ordering::Relaxed);
    dropper.join().unwrap();
    assert!(
        failed.is_empty(),
        "--inode-file-handles={mode} --sandbox={sandbox}: {} of {FILES} files held by the guest failed after the \
         host dropped its dentries: {:?}",
        failed.len(),
        &failed[..failed.len().min(8)]
    );
}

#[test]
fn prefer_opens_held_files_after_the_host_dropped_their_dentries() {
    for sandbox in ["none", "chroot", "namespace"] {
        opens_after_dentries_dropped("prefer", sandbox);
    }
}

#[test]
fn mandatory_opens_held_files_after_the_host_dropped_their_dentries() {
    for sandbox in ["none", "chroot", "namespace"] {
        opens_after_dentries_dropped("mandatory", sandbox);
    }
}
