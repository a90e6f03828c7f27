//! Malformed vhost-user messages from the frontend never crash the daemon: a few thousand
//! random and mutated messages (bad request codes, flags and sizes, sizes beyond the limit,
//! wrong fd counts, truncated payloads, messages before SET_OWNER, SET_MEM_TABLE and
//! ADD_MEM_REG with bogus regions, regions past the end of their file, vring indexes out of
//! range, rings of garbage in guest memory and kicks on them, ...) from a deterministic seed,
//! sent over the daemon's real socket (default sandbox, seccomp kill) with `--keep-listening`.
//! Each attempt ends with a reply to its last message or a dropped connection, never a hang;
//! the daemon stays alive, no panic reaches its stderr, a correct test-guest session works
//! every 100 attempts and at the end, and its fds are back to where they were. Three attempts
//! that once killed or hung the daemon run first (`Attempt::region_past_the_end_of_its_file`,
//! `::avail_index_out_of_range`, `::avail_ring_at_address_0`).
//!
//! `VHOSTFS_FUZZ_SEED` and `VHOSTFS_FUZZ_ATTEMPTS` override the seed and the number of attempts.

mod common;

#[path = "vhost_user_fuzz/gen.rs"]
mod gen;
#[path = "vhost_user_fuzz/known.rs"]
mod known;
#[path = "vhost_user_fuzz/wire.rs"]
mod wire;

use std::fs::{self, File};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::fuse_abi::FUSE_ROOT_ID;
use common::{Daemon, FuseClient, TempDir, TestGuest};
use gen::{Attempt, Rng};
use wire::Conn;

const SEED: u64 = 0x7e57_f0220_u64;
const ATTEMPTS: usize = 400;
const MIB: usize = 1 << 20;

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A correct session: INIT, LOOKUP, CREATE + WRITE + READ, checked against the host file.
fn good_session(socket: &std::path::Path, shared: &std::path::Path, n: usize) {
    let guest = TestGuest::connect(socket, 1, 256, 16 * MIB).expect("vhost-user set-up");
    let c = FuseClient::new(Arc::new(guest), 0);
    c.init().expect("FUSE_INIT");
    assert_eq!(
        c.lookup(FUSE_ROOT_ID, "hello.txt")
            .expect("LOOKUP")
            .attr
            .size,
        5
    );
    let name = format!("good-{n}");
    let (f, o) = c
        .create(
            FUSE_ROOT_ID,
            &name,
            libc::S_IFREG | 0o644,
            libc::O_RDWR as u32,
            0,
        )
        .expect("CREATE");
    assert_eq!(
        c.write(f.nodeid, o.fh, 0, name.as_bytes()).expect("WRITE"),
        name.len() as u32
    );
    assert_eq!(
        c.read(f.nodeid, o.fh, 0, 64).expect("READ"),
        name.as_bytes()
    );
    assert_eq!(fs::read(shared.join(&name)).unwrap(), name.as_bytes());
}

/// The last lines of the daemon's log.
fn log_tail(log: &std::path::Path) -> String {
    let log = fs::read_to_string(log).unwrap();
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(12)..].join("\n")
}

fn fd_count(d: &Daemon) -> usize {
    d.fd_count().unwrap()
}

/// The fd count once it has not changed for 300 ms (at most 20 s).
fn settled_fds(d: &Daemon) -> usize {
    let deadline = Instant::now() + Duration::from_secs(20);
    let (mut last, mut since) = (fd_count(d), Instant::now());
    while since.elapsed() < Duration::from_millis(300) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        let now = fd_count(d);
        if now != last {
            (last, since) = (now, Instant::now());
        }
    }
    last
}

/// How the daemon says a connection ended, once it is torn down.
#[derive(Debug, PartialEq, Eq)]
enum End {
    Disconnected,
    Dropped,
}

/// The connection ends in the daemon's log, one line each, in order.
struct Ends {
    log: std::path::PathBuf,
    seen: usize,
}

impl Ends {
    /// The next connection's end (waiting up to 20 s for its line).
    fn next(&mut self) -> Option<End> {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            let log = fs::read_to_string(&self.log).unwrap();
            let line = log
                .lines()
                .filter(|l| l.ends_with("waiting for the next connection"))
                .nth(self.seen);
            if let Some(line) = line {
                self.seen += 1;
                return Some(if line.contains("connection dropped") {
                    End::Dropped
                } else {
                    End::Disconnected
                });
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        None
    }
}

#[test]
fn malformed_frontend_messages_never_crash_the_daemon() {
    let seed = env_or("VHOSTFS_FUZZ_SEED", SEED);
    let attempts = env_or("VHOSTFS_FUZZ_ATTEMPTS", ATTEMPTS);
    let dir = TempDir::new("vu-fuzz").unwrap();
    let shared = TempDir::new("vu-fuzz-shared").unwrap();
    fs::write(shared.join("hello.txt"), b"hello").unwrap();
    let (socket, log) = (dir.join("vfs.sock"), dir.join("log"));
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_vhostfs"));
    cmd.arg(format!("--socket-path={}", socket.display()))
        .arg(format!("--shared-dir={}", shared.path().display()))
        .args(["--keep-listening", "--thread-pool-size=2"])
        .stderr(File::create(&log).unwrap());
    let mut daemon = Daemon::spawn(&mut cmd, &socket).expect("vhostfs starts");
    let mut ends = Ends {
        log: log.clone(),
        seen: 0,
    };
    good_session(&socket, shared.path(), 0);
    assert_eq!(ends.next(), Some(End::Disconnected));
    let baseline = settled_fds(&daemon);

    let started = Instant::now();
    let mut rng = Rng::new(seed);
    let (mut messages, mut dropped, mut served) = (0, 0, 0);
    // Cases first that once killed or hung the daemon, then the random ones.
    let known = [
        Attempt::region_past_the_end_of_its_file(),
        Attempt::avail_index_out_of_range(),
        Attempt::avail_ring_at_address_0(),
    ];
    let n_known = known.len();
    let mut known = known.into_iter();
    for i in 0..attempts + n_known {
        let attempt = known.next().unwrap_or_else(|| Attempt::generate(&mut rng));
        let why = || format!("seed {seed:#x}, attempt {i}: {attempt:?}");
        let mut conn = Conn::connect(&socket).unwrap_or_else(|e| panic!("{}: {e}", why()));
        let played = conn.play(&attempt);
        messages += played.sent;
        assert!(played.closed, "{}: the connection never ended", why());
        let Some(end) = ends.next() else {
            if std::env::var_os("VHOSTFS_FUZZ_PAUSE").is_some() {
                eprintln!("PAUSED attempt {i} daemon {}", daemon.served_pid().unwrap());
                std::thread::sleep(Duration::from_secs(300));
            }
            let log = fs::read_to_string(&log).unwrap();
            match daemon.is_alive() {
                true => panic!("{}: the connection was never torn down; log:\n{log}", why()),
                false => panic!("{}: the daemon died; log:\n{log}", why()),
            }
        };
        match end {
            End::Dropped => dropped += 1,
            End::Disconnected => {
                // Every message was taken, the probe too: its answer came.
                assert!(
                    !played.probed || played.received >= 12,
                    "{}: the probe was not answered ({} bytes came); the log ends with:\n{}",
                    why(),
                    played.received,
                    log_tail(&log)
                );
                served += 1;
            }
        }
        if i % 100 == 1 {
            good_session(&socket, shared.path(), i + 1);
            assert_eq!(ends.next(), Some(End::Disconnected));
        }
    }
    let elapsed = started.elapsed();
    good_session(&socket, shared.path(), attempts + n_known + 1);
    assert!(daemon.is_alive());
    let fds = settled_fds(&daemon);
    let log = fs::read_to_string(&log).unwrap();
    assert!(
        !log.contains("panicked"),
        "a panic in the daemon's log:\n{log}"
    );
    let mut reasons: std::collections::BTreeMap<String, usize> = Default::default();
    for line in log.lines().filter(|l| l.contains("broke the protocol (")) {
        let why = line.split("broke the protocol (").nth(1).unwrap_or("");
        *reasons
            .entry(why.split(')').next().unwrap_or("").to_string())
            .or_default() += 1;
    }
    eprintln!("connections dropped, by reason: {reasons:?}");
    eprintln!(
        "queues found broken: {}; bad descriptor chains: {}",
        log.matches("not served until the guest fixes or resets it")
            .count(),
        log.matches("bad descriptor chain").count()
    );
    eprintln!(
        "{attempts} attempts + {n_known}, {messages} messages in {elapsed:?}: {dropped} connections \
         dropped, {served} served to the end; fds {baseline} -> {fds}"
    );
    assert_eq!(fds, baseline, "the daemon's fds grew over the run");
    assert!(
        messages >= attempts * 8 && dropped > attempts / 4 && served > attempts / 10,
        "the run exercised too little: {messages} messages, {dropped} dropped, {served} served"
    );
}
