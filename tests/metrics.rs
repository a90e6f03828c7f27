//! `--metrics`: the endpoint scraped while a test guest works on two queues, its counters
//! checked against the requests the guest sent and the answers it got (requests, errors by
//! opcode and by errno, bytes, histogram counts, state gauges); `vhostfs stats` and the SIGUSR1
//! log lines checked against the same numbers; the TCP endpoint; ENFILE refusals; bad
//! `--metrics` values and `vhostfs stats` errors as one-line errors.

mod common;
#[path = "metrics/scrape.rs"]
mod scrape;

use std::collections::HashMap;
use std::fs::{self, File};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

use common::daemon::run_with_timeout;
use common::{Daemon, FuseClient, TempDir, TestGuest};
use scrape::{http_get, scrape_unix, table_row, Scrape};

const MIB: usize = 1 << 20;
const VHOSTFS: &str = env!("CARGO_BIN_EXE_vhostfs");

/// What the guest sent and what it was answered, per opcode name.
#[derive(Default)]
struct Sent {
    requests: HashMap<&'static str, u64>,
    errors: HashMap<&'static str, u64>,
    errno: HashMap<i32, u64>,
    read: u64,
    written: u64,
}

impl Sent {
    fn track<T>(&mut self, op: &'static str, r: Result<T, i32>) -> Result<T, i32> {
        *self.requests.entry(op).or_default() += 1;
        if let Err(e) = &r {
            *self.errors.entry(op).or_default() += 1;
            *self.errno.entry(*e).or_default() += 1;
        }
        r
    }
}

fn errno_name(e: i32) -> &'static str {
    match e {
        libc::ENOENT => "ENOENT",
        libc::EBADF => "EBADF",
        libc::ESTALE => "ESTALE",
        libc::ENFILE => "ENFILE",
        _ => panic!("unexpected errno {e}"),
    }
}

/// A workload on `client`: files created, written, read, looked up (some missing), stat-ed
/// (one bad node ID), released; returns the nodes it still holds and the handles left open.
/// Halfway through, it waits until `scrapes` has grown by two: a whole scrape then happened in
/// the middle of the workload, whatever the speeds of the two.
fn workload(
    client: &FuseClient,
    tag: &str,
    sent: &Mutex<Sent>,
    scrapes: &AtomicUsize,
) -> (u64, u64) {
    fn track<T>(sent: &Mutex<Sent>, op: &'static str, r: Result<T, i32>) -> Result<T, i32> {
        sent.lock().unwrap().track(op, r)
    }
    let mut held = 0;
    let mut open = 0;
    for i in 0..20 {
        if i == 10 {
            let seen = scrapes.load(Ordering::Acquire);
            while scrapes.load(Ordering::Acquire) < seen + 2 {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        let name = format!("{tag}-{i}");
        let (entry, out) = track(
            sent,
            "create",
            client.create(1, &name, 0o644, libc::O_RDWR as u32, 0),
        )
        .unwrap();
        held += 1;
        let data = vec![i as u8; 1000 + i * 100];
        let n = track(sent, "write", client.write(entry.nodeid, out.fh, 0, &data)).unwrap();
        sent.lock().unwrap().written += u64::from(n);
        let back = track(sent, "read", client.read(entry.nodeid, out.fh, 0, 64 << 10)).unwrap();
        assert_eq!(back, data);
        sent.lock().unwrap().read += back.len() as u64;
        if i % 5 == 0 {
            open += 1;
        } else {
            track(sent, "release", client.release(entry.nodeid, out.fh, 0)).unwrap();
        }
        let again = track(sent, "lookup", client.lookup(1, &name)).unwrap();
        assert_eq!(again.nodeid, entry.nodeid);
        assert!(track(sent, "lookup", client.lookup(1, &format!("{name}-missing"))).is_err());
        track(sent, "getattr", client.getattr(entry.nodeid, None)).unwrap();
    }
    // Forgotten: counted, no reply.
    let forget = client.lookup(1, &format!("{tag}-0")).unwrap();
    track::<()>(sent, "lookup", Ok(())).unwrap();
    client.forget(forget.nodeid, 1);
    track::<()>(sent, "forget", Ok(())).unwrap();
    assert!(track(sent, "getattr", client.getattr(0xdead_0000, None)).is_err());
    (held, open)
}

/// vhostfs with `--metrics=unix:…` (and the default namespace sandbox), its log in a file.
struct Served {
    daemon: Daemon,
    socket: PathBuf,
    metrics: PathBuf,
    log: PathBuf,
    dir: TempDir,
    shared: TempDir,
}

fn serve(extra: &[&str]) -> Served {
    let dir = TempDir::new("metrics").unwrap();
    let shared = TempDir::new("metrics-shared").unwrap();
    let (socket, metrics, log) = (dir.join("vfs.sock"), dir.join("m.sock"), dir.join("log"));
    let mut cmd = Command::new(VHOSTFS);
    cmd.arg(format!("--socket-path={}", socket.display()))
        .arg(format!("--shared-dir={}", shared.path().display()))
        .arg(format!("--metrics=unix:{}", metrics.display()))
        .args(extra)
        .stderr(File::create(&log).unwrap());
    let daemon = Daemon::spawn(&mut cmd, &socket).expect("vhostfs starts");
    Served {
        daemon,
        socket,
        metrics,
        log,
        dir,
        shared,
    }
}

#[test]
fn scraped_counters_match_the_requests_sent() {
    let s = serve(&[]);
    let guest = Arc::new(TestGuest::connect(&s.socket, 2, 256, 64 * MIB).expect("set-up"));
    let client = FuseClient::new(Arc::clone(&guest), 0);
    let sent = Mutex::new(Sent::default());
    sent.lock()
        .unwrap()
        .track("init", client.init().map(|_| ()))
        .unwrap();

    // Scraped again and again while two threads work on two queues.
    let done = AtomicBool::new(false);
    let scrapes = AtomicUsize::new(0);
    // The workers start once the scraper has scraped once.
    let start = Barrier::new(3);
    let (held, open, totals) = std::thread::scope(|scope| {
        let scraper = scope.spawn(|| {
            let mut totals = Vec::new();
            let mut last = 0;
            while !done.load(Ordering::Acquire) {
                let m = scrape_unix(&s.metrics);
                m.check_consistent();
                let total: u64 = m
                    .ops()
                    .iter()
                    .map(|op| m.get(&format!("vhostfs_requests_total{{op=\"{op}\"}}")))
                    .sum();
                assert!(total >= last, "counters only grow: {total} after {last}");
                last = total;
                if totals.is_empty() {
                    start.wait();
                }
                totals.push(total);
                scrapes.fetch_add(1, Ordering::Release);
            }
            totals
        });
        let workers: Vec<_> = [0, 1]
            .map(|q| {
                let (client, sent, start, scrapes) = (client.on_queue(q), &sent, &start, &scrapes);
                scope.spawn(move || {
                    start.wait();
                    workload(&client, &format!("q{q}"), sent, scrapes)
                })
            })
            .into_iter()
            .collect();
        let (mut held, mut open) = (1, 0);
        for w in workers {
            let (h, o) = w.join().unwrap();
            held += h;
            open += o;
        }
        done.store(true, Ordering::Release);
        (held, open, scraper.join().unwrap())
    });
    let m = scrape_unix(&s.metrics);
    m.check_consistent();
    let sent = sent.into_inner().unwrap();
    let final_total: u64 = sent.requests.values().sum();
    assert_eq!(totals[0], 1, "INIT only, before the workers start");
    assert!(
        totals.iter().any(|t| *t > 1 && *t < final_total),
        "a scrape while the guest worked: {totals:?} of {final_total}"
    );
    let mut ops = m.ops();
    ops.sort();
    assert!(ops.contains(&"lookup".to_string()) && ops.contains(&"readdirplus".to_string()));
    for op in &ops {
        let want = sent.requests.get(op.as_str()).copied().unwrap_or(0);
        let got = m.get(&format!("vhostfs_requests_total{{op=\"{op}\"}}"));
        assert_eq!(got, want, "requests of {op}");
        let want = sent.errors.get(op.as_str()).copied().unwrap_or(0);
        let got = m.get(&format!("vhostfs_request_errors_total{{op=\"{op}\"}}"));
        assert_eq!(got, want, "errors of {op}");
    }
    assert_eq!(sent.requests["lookup"], 82);
    assert_eq!(sent.errors["lookup"], 40);
    for (e, n) in &sent.errno {
        let series = format!("vhostfs_errors_total{{errno=\"{}\"}}", errno_name(*e));
        assert_eq!(m.get(&series), *n, "{series}");
    }
    let errno_total: u64 = (m.0.iter())
        .filter(|(k, _)| k.starts_with("vhostfs_errors_total{"))
        .map(|(_, v)| *v as u64)
        .sum();
    assert_eq!(errno_total, sent.errno.values().sum::<u64>());
    assert_eq!(m.get("vhostfs_read_bytes_total"), sent.read);
    assert_eq!(m.get("vhostfs_written_bytes_total"), sent.written);
    assert_eq!(sent.written, 2 * (20 * 1000 + 100 * 190));
    assert_eq!(m.get("vhostfs_inodes_held"), held);
    assert_eq!(m.get("vhostfs_open_handles"), open);
    assert_eq!(open, 8);
    assert!(m.get("vhostfs_fds_in_use") >= open);
    assert_eq!(m.get("vhostfs_fd_budget"), 20_000 - 256);
    assert_eq!(m.get("vhostfs_enfile_refusals_total"), 0);
    for q in 0..=8 {
        assert_eq!(
            m.get(&format!("vhostfs_requests_in_flight{{queue=\"{q}\"}}")),
            0
        );
        assert_eq!(m.get(&format!("vhostfs_queue_depth{{queue=\"{q}\"}}")), 0);
    }

    // GETATTR of a handle-backed inode takes its fd from the fd cache: one lookup each.
    let node = client.lookup(1, "q0-3").unwrap().nodeid;
    let before = scrape_unix(&s.metrics);
    for _ in 0..10 {
        client.getattr(node, None).unwrap();
    }
    let after = scrape_unix(&s.metrics);
    let cache = |m: &Scrape| {
        (
            m.get("vhostfs_fd_cache_hits_total"),
            m.get("vhostfs_fd_cache_misses_total"),
        )
    };
    let ((h0, m0), (h1, m1)) = (cache(&before), cache(&after));
    assert_eq!((h1 - h0) + (m1 - m0), 10, "one fd-cache lookup per GETATTR");
    assert!(h1 > h0, "a GETATTR right after another hits");

    // The same numbers in `vhostfs stats`, found through the socket's pid file.
    let out = run_with_timeout(
        Command::new(VHOSTFS)
            .args(["stats", "--socket-path"])
            .arg(&s.socket)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
        Duration::from_secs(10),
    )
    .expect("vhostfs stats returns");
    assert!(out.status.success(), "{}", out.stderr);
    let table = out.stdout;
    assert!(
        table.starts_with(&format!(
            "vhostfs {} (pid {}), up ",
            env!("CARGO_PKG_VERSION"),
            s.daemon.pid()
        )),
        "{table}"
    );
    let lookups = after.get("vhostfs_requests_total{op=\"lookup\"}");
    assert_eq!(table_row(&table, "LOOKUP"), (lookups, 40, 0));
    assert_eq!(table_row(&table, "WRITE"), (40, 0, sent.written));
    assert_eq!(table_row(&table, "READ"), (40, 0, sent.read));
    let (bad_errno, bad) = sent
        .errno
        .iter()
        .find(|(e, _)| **e != libc::ENOENT)
        .unwrap();
    assert_eq!(*bad, 2, "one bad GETATTR per worker");
    let errno_line = format!("errors by errno: ENOENT 40, {} 2\n", errno_name(*bad_errno));
    assert!(table.contains(&errno_line), "{table}");
    assert!(
        table.contains(&format!(
            "inodes held {}, open handles 8, ",
            after.get("vhostfs_inodes_held")
        )),
        "{table}"
    );

    // And in the log on SIGUSR1 (sent to the supervisor, as an operator would).
    // SAFETY: plain kill of our child.
    assert_eq!(
        unsafe { libc::kill(s.daemon.pid() as i32, libc::SIGUSR1) },
        0
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    let log = loop {
        let log = fs::read_to_string(&s.log).unwrap();
        if log.contains("stats: inodes held") || Instant::now() > deadline {
            break log;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let line = log
        .lines()
        .find(|l| l.contains("stats: LOOKUP"))
        .unwrap_or_else(|| panic!("no LOOKUP row in the log:\n{log}"));
    assert!(line.contains(" INFO "), "{line}");
    assert_eq!(table_row(&log, "LOOKUP"), (lookups, 40, 0));
    assert!(log.contains(&format!("stats: {errno_line}")), "{log}");
    let mut daemon = s.daemon;
    assert!(daemon.is_alive(), "SIGUSR1 does not stop the daemon");

    // SIGTERM: the metrics socket goes with the daemon.
    // SAFETY: plain kill of our child.
    unsafe { libc::kill(daemon.pid() as i32, libc::SIGTERM) };
    assert!(daemon.wait_exit(Duration::from_secs(10)).unwrap().is_some());
    assert!(!s.metrics.exists(), "the metrics socket is removed at exit");
    drop((s.dir, s.shared));
}

#[test]
fn tcp_endpoint_enfile_refusals_and_other_paths() {
    // A free loopback port (released just before the daemon binds it).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = TempDir::new("metrics-tcp").unwrap();
    let shared = TempDir::new("metrics-tcp-shared").unwrap();
    let socket = dir.join("vfs.sock");
    let mut cmd = Command::new(VHOSTFS);
    cmd.arg(format!("--socket-path={}", socket.display()))
        .arg(format!("--shared-dir={}", shared.path().display()))
        .arg(format!("--metrics=tcp:127.0.0.1:{port}"))
        // A budget of 4 fds: the fifth open file is refused.
        .args(["--rlimit-nofile=260", "--log-level=error"]);
    let _daemon = Daemon::spawn(&mut cmd, &socket).expect("vhostfs starts");
    let guest = Arc::new(TestGuest::connect(&socket, 1, 256, 64 * MIB).expect("set-up"));
    let client = FuseClient::new(guest, 0);
    client.init().unwrap();
    let mut results = Vec::new();
    for i in 0..6 {
        results.push(
            client
                .create(1, &format!("f{i}"), 0o644, libc::O_RDWR as u32, 0)
                .map(|_| ()),
        );
    }
    let refused = results.iter().filter(|r| **r == Err(libc::ENFILE)).count() as u64;
    let created = results.iter().filter(|r| r.is_ok()).count() as u64;
    assert!(refused >= 1 && refused + created == 6, "{results:?}");
    let tcp = || TcpStream::connect(("127.0.0.1", port)).unwrap();
    let (status, body) = http_get(tcp(), "/metrics");
    assert_eq!(status, "HTTP/1.0 200 OK");
    let m = Scrape::parse(&body);
    m.check_consistent();
    assert_eq!(m.get("vhostfs_fd_budget"), 4);
    assert_eq!(m.get("vhostfs_fds_in_use"), 4);
    assert_eq!(m.get("vhostfs_open_handles"), created);
    assert_eq!(m.get("vhostfs_enfile_refusals_total"), refused);
    assert_eq!(m.get("vhostfs_errors_total{errno=\"ENFILE\"}"), refused);
    assert_eq!(m.get("vhostfs_requests_total{op=\"create\"}"), 6);
    assert_eq!(
        m.get("vhostfs_request_errors_total{op=\"create\"}"),
        refused
    );
    assert_eq!(m.get("vhostfs_requests_total{op=\"init\"}"), 1);
    assert_eq!(m.get_or_0("vhostfs_errors_total{errno=\"ENOENT\"}"), 0);
    assert_eq!(http_get(tcp(), "/other").0, "HTTP/1.0 404 Not Found");
    // A client that connects and sends nothing holds the endpoint for a second at most.
    let idle = tcp();
    let t = Instant::now();
    assert_eq!(http_get(tcp(), "/stats").0, "HTTP/1.0 200 OK");
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    drop(idle);
    // `vhostfs stats` by address.
    let out = run_with_timeout(
        Command::new(VHOSTFS)
            .args(["stats", &format!("--metrics=tcp:127.0.0.1:{port}")])
            .stdout(Stdio::piped()),
        Duration::from_secs(10),
    )
    .unwrap();
    assert!(out.status.success());
    assert_eq!(table_row(&out.stdout, "CREATE"), (6, refused, 0));
    assert!(
        out.stdout.contains(&format!("ENFILE refusals {refused}\n")),
        "{}",
        out.stdout
    );
}

/// Runs vhostfs with `args` and expects a one-line error containing `says`.
fn fails(args: &[&str], says: &str) {
    let out = run_with_timeout(
        Command::new(VHOSTFS)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
        Duration::from_secs(10),
    )
    .expect("exits");
    assert_eq!(out.status.code(), Some(1), "{args:?}: {}", out.stderr);
    assert_eq!(out.stderr.lines().count(), 1, "{args:?}: {}", out.stderr);
    assert!(out.stderr.contains(says), "{args:?}: {}", out.stderr);
}

#[test]
fn bad_metrics_values_and_targets_are_one_line_errors() {
    let dir = TempDir::new("metrics-bad").unwrap();
    let sock = dir.join("vfs.sock");
    let base = [
        format!("--socket-path={}", sock.display()),
        format!("--shared-dir={}", dir.path().display()),
    ];
    let with = |m: &str| {
        [
            base[0].clone(),
            base[1].clone(),
            "--log-level=error".into(),
            format!("--metrics={m}"),
        ]
    };
    let run = |m: &str, says: &str| {
        let args = with(m);
        fails(&args.iter().map(String::as_str).collect::<Vec<_>>(), says);
    };
    run(
        "tcp:0.0.0.0:9100",
        "vhostfs: error: invalid value 'tcp:0.0.0.0:9100' for '--metrics <unix:PATH|tcp:127.0.0.1:PORT>': 0.0.0.0 is not a loopback address",
    );
    run("tcp:10.1.2.3:9100", "10.1.2.3 is not a loopback address");
    run("9100", "expected unix:PATH or tcp:127.0.0.1:PORT");
    run("tcp:127.0.0.1:99999", "the port must be 1 to 65535");
    // Refused at start-up, before serving: a file in the way, a port in use.
    let file = dir.join("plain");
    fs::write(&file, "x").unwrap();
    run(
        &format!("unix:{}", file.display()),
        "the path exists and is not a socket; refusing to replace it",
    );
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = busy.local_addr().unwrap().port();
    run(
        &format!("tcp:127.0.0.1:{port}"),
        &format!("--metrics tcp:127.0.0.1:{port}: "),
    );
    assert!(!sock.exists(), "nothing left behind");
    // `vhostfs stats` on what serves no metrics.
    fails(
        &["stats", "--socket-path", &sock.display().to_string()],
        "vhostfs stats: error: ",
    );
    fails(
        &["stats", "--pid", &std::process::id().to_string()],
        "was not started with --metrics",
    );
    fails(
        &["stats"],
        "the following required arguments were not provided",
    );
    fails(
        &["stats", "--metrics=tcp:8.8.8.8:80"],
        "8.8.8.8 is not a loopback address",
    );
}
