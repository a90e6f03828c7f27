//! Filesystems whose file handles may name another file (issue 35 item 1): a FUSE filesystem
//! (here bindfs, as GlusterFS's client is one) hands out handles naming its node IDs, which
//! open another file once the host forgot the inode and the server reused the number. vhostfs
//! serves such a share, or a FUSE mount below the share, through O_PATH fds in `prefer`, and
//! `mandatory` refuses it with one clear message: no read or write ever reaches another file
//! through a stale handle. (The check that a handle opened the inode the table recorded, for
//! every filesystem, is a unit test of `state/inode_table/inode.rs`.)

mod common;

use std::fs;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::daemon::run_with_timeout;
use common::fuse_abi::*;
use common::{Session, TempDir};

/// A bindfs (FUSE) view of `src` at `mnt`, unmounted on drop.
struct Bindfs(std::path::PathBuf);

impl Bindfs {
    fn mount(src: &std::path::Path, mnt: &std::path::Path) -> Bindfs {
        fs::create_dir_all(mnt).unwrap();
        let st = Command::new("bindfs")
            .arg(src)
            .arg(mnt)
            .status()
            .expect("bindfs (apt-get install bindfs; .ci/setup installs it)");
        assert!(st.success(), "bindfs {src:?} {mnt:?}");
        Bindfs(mnt.to_path_buf())
    }
}

impl Drop for Bindfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

fn drop_host_caches() {
    fs::write("/proc/sys/vm/drop_caches", "3").unwrap();
}

/// 50 files in `base/src`, and a bindfs view of it on the returned share dir.
fn fuse_share(base: &TempDir) -> (std::path::PathBuf, TempDir, Bindfs) {
    let src = base.join("src");
    fs::create_dir(&src).unwrap();
    for i in 0..50 {
        fs::write(src.join(format!("f{i}")), format!("file {i}")).unwrap();
    }
    // The mount point is the session's share (removed after the daemon stops, through bindfs:
    // the temporary files of `src`), unmounted after it.
    let share = TempDir::new("fuse-mnt").unwrap();
    let fuse = Bindfs::mount(&src, share.path());
    (src, share, fuse)
}

#[test]
fn mandatory_refuses_a_fuse_share() {
    let base = TempDir::new("fuse-share").unwrap();
    let (_src, share, _fuse) = fuse_share(&base);
    let mnt = share.path().to_path_buf();
    // One line, non-zero exit, no serving.
    let sock = base.join("m.sock");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_vhostfs"));
    cmd.arg("--socket-path")
        .arg(&sock)
        .arg("--shared-dir")
        .arg(&mnt)
        .args(["--inode-file-handles=mandatory", "--sandbox=none"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let out = run_with_timeout(&mut cmd, Duration::from_secs(10))
        .expect("--inode-file-handles=mandatory on a FUSE share must refuse to start");
    assert!(!out.status.success(), "{}", out.stderr);
    assert!(
        out.stderr.contains("--inode-file-handles=mandatory") && out.stderr.contains("fuse"),
        "{}",
        out.stderr
    );
}

/// `prefer`: served; every file reads and writes its own data after the host forgot the inodes.
#[test]
fn prefer_serves_a_fuse_share_through_fds() {
    let base = TempDir::new("fuse-share").unwrap();
    let (src, share, _fuse) = fuse_share(&base);
    let s = Session::start_on_share(share, &["--sandbox=none"]);
    let c = &s.client;
    let nodes: Vec<u64> = (0..50)
        .map(|i| c.lookup(ROOT, &format!("f{i}")).unwrap().nodeid)
        .collect();
    // The fd cache closes an fd 1 s after its last use: then nothing but the daemon's own
    // reference (a handle, or an O_PATH fd) keeps the host inodes.
    std::thread::sleep(Duration::from_millis(2500));
    drop_host_caches();
    for (i, &n) in nodes.iter().enumerate() {
        let o = c.open(n, libc::O_RDWR as u32).unwrap();
        assert_eq!(
            c.read(n, o.fh, 0, 64).unwrap(),
            format!("file {i}").as_bytes()
        );
        c.write(n, o.fh, 0, format!("FILE {i}").as_bytes()).unwrap();
        c.release(n, o.fh, 0).unwrap();
    }
    for i in 0..50 {
        assert_eq!(
            fs::read(src.join(format!("f{i}"))).unwrap(),
            format!("FILE {i}").as_bytes()
        );
    }
}
