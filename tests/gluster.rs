//! GlusterFS as a tested backend (issue 35 item 2), driven by the in-process test guest: the share
//! is a directory on mount A of a replicated volume (tests/common/gluster.rs) that this machine
//! mounts a second time as mount B, the "other host".
//!
//! - The wrong-file case: the guest creates 300 small files and keeps them (no FORGET), the host
//!   forgets the inodes (drop_caches), the guest reads every file again through the node IDs it
//!   holds, byte for byte, and writes through some of them: mount B shows exactly those files
//!   changed. For vhostfs in `prefer`, each `--cache` mode; `mandatory` refuses the share.
//! - Changes made through mount B while the guest works: `tests/gluster_other_host.rs`.
//! - The read-back against virtiofsd 1.14 `--cache=always` (its default `--inode-file-handles`, and
//!   `prefer`), printed as a comparison: only vhostfs's result is asserted.
//!
//! `VHOSTFS_BIN` runs another vhostfs binary (e.g. an older build) in place of this crate's.
//! Each test starts its own glusterd and volume (2.9-4.8 s up, 2.2-2.4 s down); the binary takes
//! ~75 s (6 tests, one volume at a time; each test 7-21 s).

mod common;

use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::daemon::run_with_timeout;
use common::fuse_abi::*;
use common::gluster::{drop_host_caches, Gluster};
use common::served::{read_node, vhostfs_bin, Served};
use common::{FuseClient, TempDir};

const FILES: usize = 300;
/// Each file's contents: `file N` padded to this length (all the same size, so another file's
/// data is told apart by its bytes, not its length).
const LEN: usize = 64;
const CREATE: u32 = (libc::O_RDWR | libc::O_CREAT | libc::O_EXCL) as u32;
const RDONLY: u32 = libc::O_RDONLY as u32;
const RDWR: u32 = libc::O_RDWR as u32;

fn contents(i: usize) -> Vec<u8> {
    format!("{:<LEN$}", format!("file {i}")).into_bytes()
}

fn written(i: usize) -> Vec<u8> {
    format!("{:<LEN$}", format!("WRITTEN through node of file {i}")).into_bytes()
}

/// The contents of host B's other files.
fn other(i: usize) -> Vec<u8> {
    format!("{:<LEN$}", format!("other {i}")).into_bytes()
}

fn name(i: usize) -> String {
    format!("f{i:03}")
}

/// The name of file `i` of [`ReadBack`]'s lists: ours below [`FILES`], host B's from there on.
fn any_name(i: usize) -> String {
    if i < FILES {
        name(i)
    } else {
        format!("g{:03}", i - FILES)
    }
}

/// What the read-back and the writes through held node IDs gave.
#[derive(Default)]
struct ReadBack {
    /// Files read back right.
    right: usize,
    /// (file, what its node read instead); files numbered as [`any_name`] names them.
    wrong: Vec<(usize, String)>,
    /// (file, request, errno), numbered likewise.
    errors: Vec<(usize, &'static str, i32)>,
    /// Files mount B shows other than expected after the writes: (file, what B read); B's own
    /// files `g000`... numbered from [`FILES`] on.
    b_wrong: Vec<(usize, String)>,
    took: Duration,
}

impl ReadBack {
    fn summary(&self) -> String {
        let mut s = format!(
            "{} of {FILES} right, {} another file's data, {} errors; mount B after the writes: {} \
             files not as expected ({:.1?})",
            self.right,
            self.wrong.len(),
            self.errors.len(),
            self.b_wrong.len(),
            self.took
        );
        for (i, got) in self.wrong.iter().take(8) {
            s += &format!("\n  node of {} read {got:?}", any_name(*i));
        }
        for (i, req, errno) in self.errors.iter().take(8) {
            s += &format!(
                "\n  node of {}: {req} -> {}",
                any_name(*i),
                std::io::Error::from_raw_os_error(*errno)
            );
        }
        let ours = self.b_wrong.iter().filter(|(i, _)| *i < FILES).take(4);
        let bs = self.b_wrong.iter().filter(|(i, _)| *i >= FILES).take(4);
        for (i, got) in ours.chain(bs) {
            s += &format!("\n  mount B: {} holds {got:?}", any_name(*i));
        }
        s
    }

    fn all_right(&self) -> bool {
        self.right == FILES
            && self.wrong.is_empty()
            && self.errors.is_empty()
            && self.b_wrong.is_empty()
    }
}

/// The wrong-file case: the guest creates and writes [`FILES`] files on the share through `c`,
/// keeps their nodes, the host drops its caches, the guest reads every file again through the
/// node it holds (after looking up as many other files, made by B), then writes through the
/// nodes of every 10th file; `b_dir` (the share seen on mount B) must then hold exactly those
/// files changed.
fn wrong_file_case(c: &FuseClient, b_dir: &Path) -> ReadBack {
    let t0 = Instant::now();
    let mut nodes = Vec::with_capacity(FILES);
    for i in 0..FILES {
        let (e, o) = c
            .create(ROOT, &name(i), 0o644, CREATE, 0)
            .unwrap_or_else(|errno| panic!("CREATE {}: errno {errno}", name(i)));
        assert_eq!(c.write(e.nodeid, o.fh, 0, &contents(i)), Ok(LEN as u32));
        c.release(e.nodeid, o.fh, 0).unwrap();
        nodes.push(e.nodeid);
    }
    // Other files, made by host B: looked up by the guest once the host forgot the inodes, so
    // that GlusterFS's client hands out node IDs again (its node IDs are its inodes' addresses,
    // reused once freed), as a guest that goes on working would make it do.
    for i in 0..FILES {
        fs::write(b_dir.join(format!("g{i:03}")), other(i)).unwrap();
    }
    // vhostfs's fd cache closes an fd 1 s after its last use: then only what the daemon keeps per
    // inode (a handle, or an O_PATH fd) refers to the host inodes.
    std::thread::sleep(Duration::from_millis(2500));
    drop_host_caches();
    let mut r = ReadBack::default();
    for i in 0..FILES {
        match c.lookup(ROOT, &format!("g{i:03}")) {
            Ok(e) => match read_node(c, e.nodeid) {
                Ok(data) if data == other(i) => {}
                Ok(data) => r
                    .wrong
                    .push((FILES + i, String::from_utf8_lossy(&data).trim_end().into())),
                Err(errno) => r.errors.push((FILES + i, "OPEN/READ", errno)),
            },
            Err(errno) => r.errors.push((FILES + i, "LOOKUP", errno)),
        }
    }
    for (i, &n) in nodes.iter().enumerate() {
        let o = match c.open(n, RDONLY) {
            Ok(o) => o,
            Err(errno) => {
                r.errors.push((i, "OPEN", errno));
                continue;
            }
        };
        match c.read(n, o.fh, 0, 4096) {
            Ok(data) if data == contents(i) => r.right += 1,
            Ok(data) => r
                .wrong
                .push((i, String::from_utf8_lossy(&data).trim_end().into())),
            Err(errno) => r.errors.push((i, "READ", errno)),
        }
        let _ = c.release(n, o.fh, 0);
    }
    for i in (0..FILES).step_by(10) {
        let n = nodes[i];
        match c.open(n, RDWR) {
            Ok(o) => {
                if let Err(errno) = c.write(n, o.fh, 0, &written(i)) {
                    r.errors.push((i, "WRITE", errno));
                }
                let _ = c.release(n, o.fh, 0);
            }
            Err(errno) => r.errors.push((i, "OPEN for WRITE", errno)),
        }
    }
    for i in 0..FILES {
        let want = if i % 10 == 0 { written(i) } else { contents(i) };
        let got = fs::read(b_dir.join(name(i))).unwrap();
        if got != want {
            r.b_wrong
                .push((i, String::from_utf8_lossy(&got).trim_end().into()));
        }
    }
    // No other file changed: host B's files hold their own data.
    for i in 0..FILES {
        let got = fs::read(b_dir.join(format!("g{i:03}"))).unwrap();
        if got != other(i) {
            r.b_wrong
                .push((FILES + i, String::from_utf8_lossy(&got).trim_end().into()));
        }
    }
    r.took = t0.elapsed();
    r
}

/// The wrong-file case for vhostfs in `prefer` with `--cache=<cache>`: every read right, every
/// write in its own file.
fn vhostfs_reads_right(cache: &str) {
    let g = Gluster::start();
    let t0 = Instant::now() - g.startup;
    let (a, b) = g.share_dirs("share");
    let cache_arg = format!("--cache={cache}");
    let s = Served::vhostfs(&a, &["--inode-file-handles=prefer", &cache_arg]);
    let r = wrong_file_case(&s.client, &b);
    eprintln!(
        "{} --inode-file-handles=prefer {cache_arg}: {}",
        vhostfs_bin().display(),
        r.summary()
    );
    assert!(
        s.client.getattr(ROOT, None).is_ok(),
        "the daemon stopped serving"
    );
    assert!(
        r.all_right(),
        "vhostfs --inode-file-handles=prefer {cache_arg} on a GlusterFS share: {}",
        r.summary()
    );
    drop(s);
    drop(g);
    eprintln!("test took {:.1?}", t0.elapsed());
}

#[test]
fn prefer_cache_auto_reads_and_writes_the_right_files() {
    vhostfs_reads_right("auto");
}

#[test]
fn prefer_cache_always_reads_and_writes_the_right_files() {
    vhostfs_reads_right("always");
}

#[test]
fn prefer_cache_metadata_reads_and_writes_the_right_files() {
    vhostfs_reads_right("metadata");
}

#[test]
fn prefer_cache_never_reads_and_writes_the_right_files() {
    vhostfs_reads_right("never");
}

/// `mandatory` on a share on GlusterFS's FUSE mount: one error line, non-zero exit, no socket
/// (as tests/unstable_handles.rs asserts for bindfs).
#[test]
fn mandatory_refuses_a_glusterfs_share() {
    let g = Gluster::start();
    let (a, _) = g.share_dirs("share");
    let sock_dir = TempDir::new("gluster-sock").unwrap();
    let sock = sock_dir.join("m.sock");
    let mut cmd = Command::new(vhostfs_bin());
    cmd.arg("--socket-path")
        .arg(&sock)
        .arg("--shared-dir")
        .arg(&a)
        .arg("--inode-file-handles=mandatory")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let out = run_with_timeout(&mut cmd, Duration::from_secs(10))
        .expect("--inode-file-handles=mandatory on a GlusterFS share must refuse to start");
    eprintln!(
        "mandatory: {}; stderr: {}",
        out.status,
        out.stderr.trim_end()
    );
    assert!(!out.status.success(), "{}", out.stderr);
    assert!(
        out.stderr.contains("--inode-file-handles=mandatory") && out.stderr.contains("fuse"),
        "{}",
        out.stderr
    );
    // One error line (an INFO line about the fd limit may precede it on hosts without
    // CAP_SYS_RESOURCE, as here).
    let errors: Vec<&str> = out
        .stderr
        .lines()
        .filter(|l| l.contains("error:"))
        .collect();
    assert_eq!(errors.len(), 1, "one error line: {}", out.stderr);
    assert!(
        errors[0].contains("--inode-file-handles=mandatory"),
        "{}",
        out.stderr
    );
    assert!(!sock.exists(), "it created its socket before refusing");
}

/// The read-back with `--cache=always`: vhostfs (`prefer`) asserted, virtiofsd 1.14 with its
/// default `--inode-file-handles` (never) and with `prefer` printed for comparison.
#[test]
fn cache_always_readback_against_virtiofsd() {
    let g = Gluster::start();
    let t0 = Instant::now() - g.startup;
    let (a, b) = g.share_dirs("vhostfs");
    let s = Served::vhostfs(&a, &["--inode-file-handles=prefer", "--cache=always"]);
    let ours = wrong_file_case(&s.client, &b);
    drop(s);
    eprintln!("vhostfs prefer --cache=always: {}", ours.summary());
    for (dir, args) in [
        ("virtiofsd-default", &["--cache=always"][..]),
        (
            "virtiofsd-prefer",
            &["--cache=always", "--inode-file-handles=prefer"][..],
        ),
    ] {
        let (a, b) = g.share_dirs(dir);
        let s = Served::virtiofsd(&a, args);
        let theirs = wrong_file_case(&s.client, &b);
        eprintln!("virtiofsd 1.14 {}: {}", args.join(" "), theirs.summary());
    }
    assert!(
        ours.all_right(),
        "vhostfs --inode-file-handles=prefer --cache=always: {}",
        ours.summary()
    );
    drop(g);
    eprintln!("test took {:.1?}", t0.elapsed());
}
