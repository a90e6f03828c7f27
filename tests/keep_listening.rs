//! `--keep-listening`: the test guest connects, works (LOOKUP, CREATE, WRITE, READ), disconnects
//! with files still open and inodes held, and connects again, three times, under
//! `--sandbox=namespace`, `chroot` and `none`. Each connection gets a fresh FUSE session (the
//! old node IDs and file handles are unknown in the new one), the serving process's fds and
//! threads come back to what they were before the first connection, the metrics show the new
//! session's gauges, and the pid file keeps naming the daemon. Without the option the daemon
//! exits 0 after the first disconnect, as virtiofsd does. A malformed vhost-user message drops
//! its connection with one warning, and the next connection is served; without the option the
//! daemon then exits 1 with one error line.

mod common;
// Only the scrape of the metrics endpoint is used here.
#[allow(dead_code)]
#[path = "metrics/scrape.rs"]
mod scrape;

use std::fs::{self, File};
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::fuse_abi::FUSE_ROOT_ID;
use common::{Daemon, FuseClient, TempDir, TestGuest};
use scrape::scrape_unix;

const MIB: usize = 1 << 20;
const VHOSTFS: &str = env!("CARGO_BIN_EXE_vhostfs");

struct Listening {
    daemon: Daemon,
    socket: PathBuf,
    metrics: PathBuf,
    log: PathBuf,
    shared: TempDir,
    _dir: TempDir,
}

/// vhostfs with `--metrics` and `extra` arguments, its stderr in a file.
fn start(extra: &[&str]) -> Listening {
    let dir = TempDir::new("keep-listening").unwrap();
    let shared = TempDir::new("keep-listening-shared").unwrap();
    fs::write(shared.join("hello.txt"), b"hello from the host\n").unwrap();
    let (socket, metrics, log) = (dir.join("vfs.sock"), dir.join("m.sock"), dir.join("log"));
    let mut cmd = Command::new(VHOSTFS);
    cmd.arg(format!("--socket-path={}", socket.display()))
        .arg(format!("--shared-dir={}", shared.path().display()))
        .arg(format!("--metrics=unix:{}", metrics.display()))
        .args(extra)
        .stderr(File::create(&log).unwrap());
    let daemon = Daemon::spawn(&mut cmd, &socket).expect("vhostfs starts");
    Listening {
        daemon,
        socket,
        metrics,
        log,
        shared,
        _dir: dir,
    }
}

/// What one session left behind when its guest went away: node IDs and an open file.
struct Held {
    hello: u64,
    created: u64,
    fh: u64,
}

/// One guest session: INIT, LOOKUP, CREATE + WRITE + READ of `session-N.txt` (left open), and an
/// OPEN of `hello.txt` (left open too), as a guest that is reset or killed leaves them.
fn work(l: &Listening, n: usize) -> (FuseClient, Held) {
    let guest = TestGuest::connect(&l.socket, 1, 256, 16 * MIB).expect("vhost-user set-up");
    let c = FuseClient::new(Arc::new(guest), 0);
    c.init().expect("FUSE_INIT");
    let hello = c.lookup(FUSE_ROOT_ID, "hello.txt").expect("LOOKUP");
    assert_eq!(hello.attr.size, 20);
    let name = format!("session-{n}.txt");
    let (f, o) = c
        .create(
            FUSE_ROOT_ID,
            &name,
            libc::S_IFREG | 0o644,
            libc::O_RDWR as u32,
            0o022,
        )
        .expect("CREATE");
    let data = format!("written in session {n}");
    assert_eq!(
        c.write(f.nodeid, o.fh, 0, data.as_bytes()).expect("WRITE"),
        data.len() as u32
    );
    assert_eq!(
        c.read(f.nodeid, o.fh, 0, 4096).expect("READ"),
        data.as_bytes()
    );
    assert_eq!(fs::read(l.shared.join(&name)).unwrap(), data.as_bytes());
    c.open(hello.nodeid, libc::O_RDONLY as u32).expect("OPEN");
    (
        c,
        Held {
            hello: hello.nodeid,
            created: f.nodeid,
            fh: o.fh,
        },
    )
}

/// Open fds and threads of the serving process.
fn resources(d: &Daemon) -> (usize, usize) {
    let pid = d.served_pid().unwrap();
    let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let threads = status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap();
    (d.fd_count().unwrap(), threads)
}

/// The resources once they have not changed for 300 ms (at most 10 s).
fn settled(d: &Daemon) -> (usize, usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut last = resources(d);
    let mut since = Instant::now();
    while since.elapsed() < Duration::from_millis(300) {
        assert!(
            Instant::now() < deadline,
            "fds/threads never settle: {last:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
        let now = resources(d);
        if now != last {
            (last, since) = (now, Instant::now());
        }
    }
    last
}

/// Waits (up to 10 s) for the serving process to be back to `baseline` (fds, threads); with
/// `threads` false, only the fds are compared.
fn back_to(d: &Daemon, baseline: (usize, usize), threads: bool, after: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let now = resources(d);
        if now.0 == baseline.0 && (!threads || now.1 == baseline.1) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{after}: (fds, threads) {now:?}, {baseline:?} before"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn log_of(l: &Listening) -> String {
    fs::read_to_string(&l.log).unwrap()
}

fn three_sessions(sandbox: &str) {
    let mut l = start(&["--keep-listening", &format!("--sandbox={sandbox}")]);
    let pid_file = PathBuf::from(format!("{}.pid", l.socket.display()));
    // Before the first connection, then (threads too) after it: the fd cache's reaper thread
    // starts with the first use of the cache and stays.
    let mut baseline = settled(&l.daemon);
    let mut old: Option<Held> = None;
    for n in 0..3 {
        let (c, held) = work(&l, n);
        if let Some(old) = &old {
            // A fresh session: what the last guest held is unknown here.
            for id in [old.hello, old.created] {
                assert_ne!(id, held.hello, "session {n}: node ID {id} reused");
                assert_ne!(id, held.created, "session {n}: node ID {id} reused");
                assert_eq!(c.getattr(id, None).err(), Some(libc::EBADF), "node {id}");
            }
            assert_eq!(
                c.read(held.created, old.fh, 0, 16).err(),
                Some(libc::EBADF),
                "session {n}: the last session's fh {}",
                old.fh
            );
        }
        // The gauges are the new session's: the root, hello.txt, session-N.txt; two files open.
        let m = scrape_unix(&l.metrics);
        assert_eq!(m.get("vhostfs_inodes_held"), 3, "session {n}");
        assert_eq!(m.get("vhostfs_open_handles"), 2, "session {n}");
        assert_eq!(
            m.get("vhostfs_requests_total{op=\"create\"}"),
            n as u64 + 1,
            "the counters span the daemon's life"
        );
        // A request counts in flight until its used entry is in and the guest notified: the
        // queue thread may still be on its way out of that when the reply is seen here.
        let deadline = Instant::now() + Duration::from_secs(2);
        let mut in_flight = m.get("vhostfs_requests_in_flight{queue=\"1\"}");
        while in_flight != 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
            in_flight = scrape_unix(&l.metrics).get("vhostfs_requests_in_flight{queue=\"1\"}");
        }
        assert_eq!(
            in_flight, 0,
            "session {n}: requests in flight once all were answered"
        );
        assert_eq!(
            fs::read_to_string(&pid_file).unwrap().trim(),
            l.daemon.pid().to_string(),
            "the pid file names the daemon"
        );
        drop(c);
        back_to(&l.daemon, baseline, n > 0, &format!("after session {n}"));
        if n == 0 {
            baseline = settled(&l.daemon);
        }
        assert!(l.daemon.is_alive(), "exited after session {n}");
        let m = scrape_unix(&l.metrics);
        assert_eq!(m.get("vhostfs_inodes_held"), 1, "after session {n}");
        assert_eq!(m.get("vhostfs_open_handles"), 0, "after session {n}");
        assert_eq!(
            m.get("vhostfs_fds_in_use"),
            1,
            "after session {n}: the root's"
        );
        old = Some(held);
    }
    // SAFETY: kill(2) on our own child.
    assert_eq!(
        unsafe { libc::kill(l.daemon.pid() as i32, libc::SIGTERM) },
        0
    );
    let status = l.daemon.wait_exit(Duration::from_secs(10)).unwrap();
    assert_eq!(status.and_then(|s| s.code()), Some(0), "SIGTERM");
    let log = log_of(&l);
    assert!(!log.contains("panicked"), "{log}");
    assert_eq!(
        log.matches("the frontend disconnected; waiting for the next connection")
            .count(),
        3,
        "{log}"
    );
}

#[test]
fn three_sessions_under_the_namespace_sandbox() {
    three_sessions("namespace");
}

#[test]
fn three_sessions_under_the_chroot_sandbox() {
    three_sessions("chroot");
}

#[test]
fn three_sessions_without_a_sandbox() {
    three_sessions("none");
}

/// Without the option: exit 0 after the first disconnect.
#[test]
fn without_the_option_the_daemon_exits_0_after_the_first_disconnect() {
    for sandbox in ["namespace", "none"] {
        let mut l = start(&[&format!("--sandbox={sandbox}")]);
        let (c, _) = work(&l, 0);
        drop(c);
        let status = l.daemon.wait_exit(Duration::from_secs(10)).unwrap();
        assert_eq!(status.and_then(|s| s.code()), Some(0), "{sandbox}");
        let log = log_of(&l);
        assert!(log.contains("the frontend disconnected\n"), "{log}");
    }
}

/// Sends a message with an unknown request code (version 1, no payload) and waits for the
/// daemon to close the connection.
fn send_bad_message(socket: &Path) {
    // The socket file exists from bind(), a moment before listen().
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut s = loop {
        match UnixStream::connect(socket) {
            Ok(s) => break s,
            Err(e) if Instant::now() < deadline => {
                assert_eq!(e.kind(), std::io::ErrorKind::ConnectionRefused, "{e}");
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => panic!("connect: {e}"),
        }
    };
    let header: Vec<u8> = [0xdead_u32, 0x1, 0]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    s.write_all(&header).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut buf = [0u8; 64];
    assert_eq!(s.read(&mut buf).expect("closed, not timed out"), 0);
}

#[test]
fn a_bad_message_drops_the_connection_and_the_next_one_is_served() {
    for sandbox in ["namespace", "none"] {
        let mut l = start(&["--keep-listening", &format!("--sandbox={sandbox}")]);
        send_bad_message(&l.socket);
        let (c, _) = work(&l, 0);
        drop(c);
        send_bad_message(&l.socket);
        let (c, _) = work(&l, 1);
        drop(c);
        assert!(l.daemon.is_alive());
        let log = log_of(&l);
        let warnings: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("broke the protocol"))
            .collect();
        assert_eq!(warnings.len(), 2, "{log}");
        assert!(
            warnings.iter().all(|w| w.contains("WARN")
                && w.ends_with("connection dropped; waiting for the next connection")),
            "{log}"
        );
    }
}

#[test]
fn without_the_option_a_bad_message_makes_the_daemon_exit_1() {
    let mut l = start(&["--sandbox=none"]);
    send_bad_message(&l.socket);
    let status = l.daemon.wait_exit(Duration::from_secs(10)).unwrap();
    assert_eq!(status.and_then(|s| s.code()), Some(1));
    let log = log_of(&l);
    let last = log.lines().last().unwrap();
    assert!(
        last.starts_with("vhostfs: error: the vhost-user frontend broke the protocol (")
            && last.ends_with(": connection dropped"),
        "{log}"
    );
    assert_eq!(
        log.matches("broke the protocol").count(),
        1,
        "one line: {log}"
    );
}
