//! GlusterFS as a tested backend (issue 35 item 2), driven by the in-process test guest: the share
//! is a directory on mount A of a replicated volume (tests/common/gluster.rs) that this machine
//! mounts a second time as mount B, the "other host".
//!
//! - The wrong-file case: the guest creates 300 small files and keeps them (no FORGET), the host
//!   forgets the inodes (drop_caches), the guest reads every file again through the node IDs it
//!   holds, byte for byte, and writes through some of them: mount B shows exactly those files
//!   changed. For vhostfs in `prefer`, each `--cache` mode; `mandatory` refuses the share.
//! - Changes made through mount B while the guest works: create, append, truncate, rename,
//!   delete, replace by rename; no fd of the daemon pins a file B deleted once the guest forgot it.
//! - The read-back against virtiofsd 1.14 `--cache=always` (its default `--inode-file-handles`, and
//!   `prefer`), printed as a comparison: only vhostfs's result is asserted.
//!
//! `VHOSTFS_BIN` runs another vhostfs binary (e.g. an older build) in place of this crate's.
//! Each test starts its own glusterd and volume (2.9-4.8 s up, 2.2-2.4 s down); the binary takes
//! ~80 s (7 tests, one volume at a time; each test 7-21 s).

mod common;

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::daemon::{run_with_timeout, spawn_virtiofsd, Daemon};
use common::fuse_abi::*;
use common::gluster::Gluster;
use common::{FuseClient, TempDir, TestGuest};

const FILES: usize = 300;
/// Each file's contents: `file N` padded to this length (all the same size, so another file's
/// data is told apart by its bytes, not its length).
const LEN: usize = 64;
const CREATE: u32 = (libc::O_RDWR | libc::O_CREAT | libc::O_EXCL) as u32;
const RDONLY: u32 = libc::O_RDONLY as u32;
const RDWR: u32 = libc::O_RDWR as u32;
const MIB: usize = 1 << 20;

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

fn vhostfs_bin() -> PathBuf {
    std::env::var_os("VHOSTFS_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_vhostfs")))
}

/// A daemon serving a share, with an initialised test guest.
struct Served {
    client: FuseClient,
    daemon: Daemon,
    _sock_dir: TempDir,
}

impl Served {
    fn connect(daemon: Daemon, sock_dir: TempDir) -> Served {
        let guest = TestGuest::connect(&sock_dir.join("vfs.sock"), 1, 256, 64 * MIB)
            .expect("vhost-user set-up");
        let client = FuseClient::new(Arc::new(guest), 0);
        client.init().expect("FUSE_INIT");
        Served {
            client,
            daemon,
            _sock_dir: sock_dir,
        }
    }

    fn vhostfs(share: &Path, args: &[&str]) -> Served {
        let sock_dir = TempDir::new("gluster-sock").unwrap();
        let socket = sock_dir.join("vfs.sock");
        let mut cmd = Command::new(vhostfs_bin());
        cmd.arg(format!("--socket-path={}", socket.display()))
            .arg(format!("--shared-dir={}", share.display()))
            .arg("--log-level=error")
            .args(args);
        let daemon = Daemon::spawn(&mut cmd, &socket)
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", vhostfs_bin().display()));
        Served::connect(daemon, sock_dir)
    }

    fn virtiofsd(share: &Path, args: &[&str]) -> Served {
        let sock_dir = TempDir::new("gluster-sock").unwrap();
        let daemon = spawn_virtiofsd(&sock_dir.join("vfs.sock"), share, args)
            .unwrap_or_else(|e| panic!("cannot start virtiofsd: {e}"));
        Served::connect(daemon, sock_dir)
    }
}

fn drop_host_caches() {
    fs::write("/proc/sys/vm/drop_caches", "3").unwrap();
}

/// A fresh directory `name` on mount A (the share) and the same directory seen on mount B.
fn share_dirs(g: &Gluster, name: &str) -> (PathBuf, PathBuf) {
    let a = g.mount_a.join(name);
    fs::create_dir(&a).unwrap();
    (a, g.mount_b.join(name))
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
    let (a, b) = share_dirs(&g, "share");
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
    let (a, _) = share_dirs(&g, "share");
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
    let (a, b) = share_dirs(&g, "vhostfs");
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
        let (a, b) = share_dirs(&g, dir);
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

/// `Ok` once GETATTR's size and READ's data are `want`'s; else what they were (not yet).
fn shows(size: u64, data: &[u8], want: &[u8]) -> Result<(), String> {
    if size == want.len() as u64 && data == want {
        Ok(())
    } else {
        Err(format!(
            "size {size}, data {:?}",
            String::from_utf8_lossy(data)
        ))
    }
}

/// Polls `check` every 50 ms until it answers `Ok`, up to `within`; returns how long that took.
/// `check` panics itself on a state that must never be seen (another file's data).
fn eventually(
    what: &str,
    within: Duration,
    mut check: impl FnMut() -> Result<(), String>,
) -> Duration {
    let t0 = Instant::now();
    loop {
        match check() {
            Ok(()) => return t0.elapsed(),
            Err(e) if t0.elapsed() > within => {
                panic!("{what}: not seen within {within:?}: {e}")
            }
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

fn read_node(c: &FuseClient, node: u64) -> Result<Vec<u8>, i32> {
    let o = c.open(node, RDONLY)?;
    let data = c.read(node, o.fh, 0, 4096);
    let _ = c.release(node, o.fh, 0);
    data
}

/// The serving process's fds whose file is `(dev, ino)`, with what /proc shows for each.
fn fds_on(pid: u32, dev: u64, ino: u64) -> Vec<String> {
    let mut found = Vec::new();
    for e in fs::read_dir(format!("/proc/{pid}/fd")).unwrap().flatten() {
        if let Ok(m) = fs::metadata(e.path()) {
            if m.dev() == dev && m.ino() == ino {
                let link = fs::read_link(e.path()).unwrap_or_default();
                found.push(format!("fd {:?} -> {}", e.file_name(), link.display()));
            }
        }
    }
    found
}

const ESTALE_OR_ENOENT: [i32; 2] = [libc::ESTALE, libc::ENOENT];

/// Changes made through mount B while the guest holds the files (`--cache=auto`): each seen
/// through LOOKUP/GETATTR/READ within the guest's timeout plus the host mount's own caching,
/// ESTALE/ENOENT only for files really gone, the daemon serving throughout, and no fd of the
/// daemon on a file B deleted once the guest forgot it.
#[test]
fn changes_through_mount_b_are_seen_by_the_guest() {
    let g = Gluster::start();
    let t0 = Instant::now() - g.startup;
    let (a, b) = share_dirs(&g, "share");
    let s = Served::vhostfs(&a, &["--cache=auto"]);
    let c = &s.client;
    let mut node = std::collections::HashMap::new();
    let mut timeout = Duration::ZERO;
    for f in [
        "append",
        "truncate",
        "rename-src",
        "delete",
        "replace",
        "steady",
    ] {
        let (e, o) = c.create(ROOT, f, 0o644, CREATE, 0).unwrap();
        c.write(
            e.nodeid,
            o.fh,
            0,
            format!("{f}: the guest's data").as_bytes(),
        )
        .unwrap();
        c.release(e.nodeid, o.fh, 0).unwrap();
        node.insert(f, e.nodeid);
        timeout = Duration::new(e.entry_valid, e.entry_valid_nsec)
            .max(Duration::new(e.attr_valid, e.attr_valid_nsec));
    }
    let orig = |f: &str| format!("{f}: the guest's data").into_bytes();
    assert_eq!(c.lookup(ROOT, "created").err(), Some(libc::ENOENT));
    // The files B deletes: their host identity, to look for fds on them later.
    let meta = |f: &str| fs::metadata(a.join(f)).unwrap();
    let deleted_ids: Vec<(&str, u64, u64)> = ["delete", "replace"]
        .iter()
        .map(|&f| (f, meta(f).dev(), meta(f).ino()))
        .collect();
    let pid = s.daemon.served_pid().unwrap();
    for (f, dev, ino) in &deleted_ids {
        eprintln!(
            "before B's changes, fds of the daemon on {f}: {:?}",
            fds_on(pid, *dev, *ino)
        );
    }

    // Host B at work.
    fs::write(b.join("created"), "created by B").unwrap();
    let mut appended = orig("append");
    appended.extend_from_slice(b" + appended by B");
    fs::OpenOptions::new()
        .append(true)
        .open(b.join("append"))
        .and_then(|mut f| std::io::Write::write_all(&mut f, b" + appended by B"))
        .unwrap();
    fs::OpenOptions::new()
        .write(true)
        .open(b.join("truncate"))
        .and_then(|f| f.set_len(5))
        .unwrap();
    fs::rename(b.join("rename-src"), b.join("rename-dst")).unwrap();
    fs::remove_file(b.join("delete")).unwrap();
    fs::write(b.join(".replace.tmp"), "replacement by B").unwrap();
    fs::rename(b.join(".replace.tmp"), b.join("replace")).unwrap();
    let changed = Instant::now();
    // The daemon can only show what mount A shows: first wait until mount A itself shows B's
    // changes (GlusterFS's client caches and the host kernel's 1 s timeouts; once seen to lag
    // past 3.5 s under load), and say how long that took; the guest's bounds below start after.
    let len = |p: PathBuf| fs::symlink_metadata(p).map(|m| m.len()).ok();
    let ino = |p: PathBuf| fs::symlink_metadata(p).map(|m| m.ino()).ok();
    let host_lag = eventually(
        "mount A showing B's changes",
        Duration::from_secs(30),
        || {
            let shown = len(a.join("created")).is_some()
                && len(a.join("append")) == Some(appended.len() as u64)
                && len(a.join("truncate")) == Some(5)
                && len(a.join("rename-src")).is_none()
                && ino(a.join("rename-dst")) == ino(b.join("rename-dst"))
                && len(a.join("delete")).is_none()
                && ino(a.join("replace")) == ino(b.join("replace"));
            if shown {
                Ok(())
            } else {
                Err("not yet".into())
            }
        },
    );
    eprintln!("mount A showed B's changes {host_lag:.1?} after they were made");

    // The guest's timeout, plus the host mount's own: GlusterFS's FUSE client gives the host
    // kernel 1 s entry and attribute timeouts, and its md-cache keeps metadata 1 s.
    let within = timeout + Duration::from_secs(2) + Duration::from_millis(500);
    let mut seen = Vec::new();

    seen.push((
        "create",
        eventually("LOOKUP of the file B created", within, || {
            let e = c
                .lookup(ROOT, "created")
                .map_err(|e| format!("errno {e}"))?;
            let data = read_node(c, e.nodeid).map_err(|e| format!("READ errno {e}"))?;
            assert_eq!(data, b"created by B", "the file B created");
            Ok(())
        }),
    ));
    seen.push((
        "append",
        eventually("GETATTR/READ of the file B appended to", within, || {
            let n = node["append"];
            let attr = c
                .getattr(n, None)
                .unwrap_or_else(|e| panic!("GETATTR append: errno {e}"))
                .attr;
            let data = read_node(c, n).unwrap_or_else(|e| panic!("READ append: errno {e}"));
            assert!(
                data == orig("append") || data == appended,
                "append read {data:?}"
            );
            shows(attr.size, &data, &appended)
        }),
    ));
    seen.push((
        "truncate",
        eventually("GETATTR/READ of the file B truncated", within, || {
            let n = node["truncate"];
            let attr = c
                .getattr(n, None)
                .unwrap_or_else(|e| panic!("GETATTR truncate: errno {e}"))
                .attr;
            let data = read_node(c, n).unwrap_or_else(|e| panic!("READ truncate: errno {e}"));
            // Seen in ~1 of 3 runs, within the host mount's own attribute timeout: the host
            // kernel's read of mount A (one preadv of the daemon, passed through as it is)
            // gives the new 5 bytes zero-padded to the old cached size (FUSE's short read
            // against a stale i_size). Allowed only there; past the bound only the new data.
            let mut padded = orig("truncate")[..5].to_vec();
            padded.resize(orig("truncate").len(), 0);
            if data == padded {
                let host = fs::read(a.join("truncate")).unwrap_or_default();
                eprintln!(
                    "truncate: READ gave the 5 bytes zero-padded to the old size {} after B's \
                     truncate (host read of mount A now: {host:?})",
                    data.len()
                );
            }
            assert!(
                data == orig("truncate") || data == orig("truncate")[..5] || data == padded,
                "truncate read {data:?}"
            );
            shows(attr.size, &data, &orig("truncate")[..5])
        }),
    ));
    seen.push((
        "rename",
        eventually("LOOKUP of the file B renamed", within, || {
            let n = node["rename-src"];
            // The renamed file is still there: its node reads its data throughout.
            assert_eq!(
                read_node(c, n),
                Ok(orig("rename-src")),
                "READ of the renamed file's node"
            );
            match c.lookup(ROOT, "rename-src") {
                Err(libc::ENOENT) => {}
                Ok(_) => return Err("old name still found".into()),
                Err(e) => panic!("LOOKUP rename-src: errno {e}"),
            }
            let e = c
                .lookup(ROOT, "rename-dst")
                .map_err(|e| format!("new name: errno {e}"))?;
            assert_eq!(
                e.nodeid, n,
                "the renamed file under its new name is the node the guest holds"
            );
            c.forget(e.nodeid, 1);
            Ok(())
        }),
    ));
    seen.push((
        "delete",
        eventually("LOOKUP of the file B deleted", within, || {
            let n = node["delete"];
            // Through the held node: the file's own data, or ESTALE/ENOENT (it is gone).
            match read_node(c, n) {
                Ok(d) => assert_eq!(d, orig("delete"), "READ of the deleted file's node"),
                Err(e) => assert!(
                    ESTALE_OR_ENOENT.contains(&e),
                    "READ of the deleted file's node: errno {e}"
                ),
            }
            match c.lookup(ROOT, "delete") {
                Err(libc::ENOENT) => Ok(()),
                Ok(_) => Err("still found".into()),
                Err(e) => panic!("LOOKUP delete: errno {e}"),
            }
        }),
    ));
    seen.push((
        "replace",
        eventually("LOOKUP of the file B replaced by rename", within, || {
            let old = node["replace"];
            match read_node(c, old) {
                Ok(d) => assert_eq!(d, orig("replace"), "READ of the replaced file's old node"),
                Err(e) => assert!(
                    ESTALE_OR_ENOENT.contains(&e),
                    "READ of the replaced file's old node: errno {e}"
                ),
            }
            let e = c
                .lookup(ROOT, "replace")
                .unwrap_or_else(|e| panic!("LOOKUP replace: errno {e}"));
            let data = read_node(c, e.nodeid).unwrap_or_else(|e| panic!("READ replace: errno {e}"));
            if e.nodeid == old {
                assert_eq!(data, orig("replace"), "READ replace (old node)");
                c.forget(e.nodeid, 1);
                return Err("the name still leads to the old file".into());
            }
            assert_eq!(data, b"replacement by B", "READ replace (new node)");
            c.forget(e.nodeid, 1);
            Ok(())
        }),
    ));
    for (what, took) in &seen {
        eprintln!("B's {what}: seen by the guest {took:.2?} after it was polled for");
    }
    eprintln!(
        "all of B's changes seen {:.2?} after B made them (guest timeout {timeout:?}, bound {within:?})",
        changed.elapsed()
    );
    // Never stale past it: everything once more.
    assert_eq!(read_node(c, node["append"]), Ok(appended));
    assert_eq!(
        read_node(c, node["truncate"]),
        Ok(orig("truncate")[..5].to_vec())
    );
    assert_eq!(read_node(c, node["steady"]), Ok(orig("steady")));
    assert_eq!(c.lookup(ROOT, "delete").err(), Some(libc::ENOENT));
    for f in ["delete", "replace"] {
        match c.getattr(node[f], None) {
            Ok(a) => assert_eq!(a.attr.nlink, 0, "GETATTR of {f}'s old node: {:?}", a.attr),
            Err(e) => assert!(
                ESTALE_OR_ENOENT.contains(&e),
                "GETATTR of {f}'s old node: errno {e}"
            ),
        }
    }

    // The guest forgets the files B removed: no fd of the daemon may keep them.
    c.forget(node["delete"], 1);
    c.forget(node["replace"], 1);
    for (f, dev, ino) in &deleted_ids {
        eventually(
            &format!("the daemon letting go of {f}"),
            Duration::from_secs(5),
            || match fds_on(pid, *dev, *ino) {
                v if v.is_empty() => Ok(()),
                v => Err(format!("{v:?}")),
            },
        );
    }
    assert!(c.getattr(ROOT, None).is_ok(), "the daemon stopped serving");
    let mut daemon = s.daemon;
    assert!(daemon.is_alive());
    drop(daemon);
    drop(g);
    eprintln!("test took {:.1?}", t0.elapsed());
}
