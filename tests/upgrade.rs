//! In-place upgrade (issue 13 item 1): a daemon serving the test guest hands its session over
//! to a new process of its binary on SIGHUP or `vhostfs upgrade`, and the guest goes on on the
//! same connection; a failed upgrade (binary missing, or exiting at once) leaves it serving.

mod common;
#[path = "upgrade/failures.rs"]
mod failures;
#[path = "upgrade/pause.rs"]
mod pause;
#[path = "upgrade/processes.rs"]
mod processes;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::daemon::run_with_timeout;
use common::{Daemon, FuseClient, TempDir, TestGuest};
use processes::{alive, family, namespaces, pid_in_file, processes_of, serving};

const MIB: usize = 1 << 20;
/// The daemons' log, in the test's directory, under [`start_logged`].
const LOG: &str = "daemon.log";

/// A node ID and fh the guest holds across upgrades.
struct Held {
    dir: u64,
    file: u64,
    fh: u64,
    ino: u64,
    len: u64,
}

/// A daemon started from a copy of the binary (which the failure cases replace), serving a
/// connected test guest.
struct Upgradable {
    client: Option<FuseClient>,
    first: Daemon,
    bin: PathBuf,
    socket: PathBuf,
    shared: TempDir,
    dir: TempDir,
}

/// Kills the daemon the pid file names when the test ends (after an upgrade it is no child
/// of ours).
impl Drop for Upgradable {
    fn drop(&mut self) {
        if let Some(pid) = pid_in_file(&self.socket) {
            // SAFETY: kill with integer arguments.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            let deadline = Instant::now() + Duration::from_secs(5);
            while Path::new(&format!("/proc/{pid}")).exists() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
}

/// The unprivileged user of [`start_as`].
const NOBODY: u32 = 65534;

fn start(extra: &[&str]) -> Upgradable {
    start_as(extra, None, false)
}

/// [`start`]; with `logged`, at `--log-level=debug` with every process's log in [`LOG`].
fn start_logged(extra: &[&str], logged: bool) -> Upgradable {
    start_as(extra, None, logged)
}

/// The daemon run as `uid` (its own share and the socket's directory made its own); with
/// `logged`, see [`start_logged`].
fn start_as(extra: &[&str], uid: Option<u32>, logged: bool) -> Upgradable {
    let dir = TempDir::new("upgrade").unwrap();
    let shared = TempDir::new("upgrade-shared").unwrap();
    let bin = dir.join("vhostfs");
    fs::copy(env!("CARGO_BIN_EXE_vhostfs"), &bin).unwrap();
    let socket = dir.join("vfs.sock");
    let mut cmd = Command::new(&bin);
    cmd.arg(format!("--socket-path={}", socket.display()))
        .arg(format!("--shared-dir={}", shared.path().display()))
        .arg(if logged {
            "--log-level=debug"
        } else {
            "--log-level=error"
        })
        .args(extra);
    if logged {
        // The processes the upgrades start inherit it through the launcher.
        cmd.stderr(fs::File::create(dir.join(LOG)).unwrap());
    }
    if let Some(uid) = uid {
        use std::os::unix::process::CommandExt;
        for d in [dir.path(), shared.path()] {
            std::os::unix::fs::chown(d, Some(uid), Some(uid)).unwrap();
        }
        cmd.uid(uid).gid(uid);
    }
    // The copy may still be open for writing in a child another test thread forked and has
    // not executed yet (ETXTBSY): try again a moment later.
    // (`Daemon::spawn` keeps the error's text, not its code.)
    let busy = format!("(os error {})", libc::ETXTBSY);
    let mut tries = 0;
    let first = loop {
        match Daemon::spawn(&mut cmd, &socket) {
            Err(e) if e.to_string().ends_with(&busy) && tries < 50 => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(20));
            }
            spawned => break spawned.unwrap(),
        }
    };
    let guest = TestGuest::connect(&socket, 1, 256, 64 * MIB).expect("vhost-user set-up");
    let client = FuseClient::new(Arc::new(guest), 0);
    client.init().expect("FUSE_INIT");
    Upgradable {
        client: Some(client),
        first,
        bin,
        socket,
        shared,
        dir,
    }
}

impl Upgradable {
    fn c(&self) -> &FuseClient {
        self.client.as_ref().expect("a connected guest")
    }

    /// `vhostfs upgrade --socket-path` with the binary at `bin`'s path (or the real one when
    /// the copy is broken on purpose); returns (success, stdout + stderr).
    fn upgrade_command(&self) -> (bool, String) {
        self.upgrade_with(&format!("--socket-path={}", self.socket.display()))
    }

    /// `vhostfs upgrade TARGET` (`--socket-path=...` or `--pid=...`, as `ExecReload=` has it).
    fn upgrade_with(&self, target: &str) -> (bool, String) {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_vhostfs"));
        cmd.arg("upgrade")
            .arg(target)
            .arg("--timeout=30")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let out = run_with_timeout(&mut cmd, Duration::from_secs(40)).expect("upgrade hung");
        (out.status.success(), out.stdout + &out.stderr)
    }

    /// Waits until the pid file names a live process other than `old`, and `old` is gone.
    fn wait_taken_over(&self, old: u32) -> u32 {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(pid) = pid_in_file(&self.socket) {
                if pid != old && alive(pid) && !alive(old) {
                    return pid;
                }
            }
            assert!(Instant::now() < deadline, "no process took over from {old}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// What the guest holds from before: a node ID and an fh of a file it writes to at the end,
    /// and a directory's node ID.
    fn hold(&self) -> Held {
        let c = self.c();
        let dir = c.mkdir(1, "dir", 0o755, 0).expect("MKDIR").nodeid;
        let (entry, open) = c
            .create(dir, "held", 0o644, libc::O_RDWR as u32, 0)
            .expect("CREATE");
        assert_eq!(c.write(entry.nodeid, open.fh, 0, b"0").unwrap(), 1);
        Held {
            dir,
            file: entry.nodeid,
            fh: open.fh,
            ino: entry.attr.ino,
            len: 1,
        }
    }

    /// The held node IDs and fh still work: GETATTR, READ of everything written, a WRITE.
    fn check_held(&self, h: &mut Held) {
        let c = self.c();
        assert_eq!(
            c.getattr(h.dir, None)
                .expect("GETATTR of the held dir")
                .attr
                .ino,
            {
                use std::os::unix::fs::MetadataExt;
                fs::metadata(self.shared.join("dir")).unwrap().ino()
            }
        );
        let attr = c
            .getattr(h.file, Some(h.fh))
            .expect("GETATTR of the held file");
        assert_eq!((attr.attr.ino, attr.attr.size), (h.ino, h.len));
        let expected: Vec<u8> = (0..h.len).map(|i| b'0' + (i % 10) as u8).collect();
        assert_eq!(
            c.read(h.file, h.fh, 0, 64).expect("READ on the held fh"),
            expected
        );
        let next = [b'0' + (h.len % 10) as u8];
        assert_eq!(
            c.write(h.file, h.fh, h.len, &next)
                .expect("WRITE on the held fh"),
            1
        );
        h.len += 1;
        let entry = c.lookup(h.dir, "held").expect("LOOKUP in the held dir");
        assert_eq!(entry.nodeid, h.file, "the same node ID");
    }

    /// The guest works on the connection it has: a new LOOKUP, OPEN, WRITE and READ.
    fn check_serving(&self, name: &str) {
        let c = self.c();
        c.getattr(1, None).expect("GETATTR of the root");
        let (entry, open) = c
            .create(1, name, 0o644, libc::O_RDWR as u32, 0)
            .expect("CREATE");
        assert_eq!(c.write(entry.nodeid, open.fh, 0, b"after").unwrap(), 5);
        assert_eq!(c.read(entry.nodeid, open.fh, 0, 16).unwrap(), b"after");
        assert_eq!(fs::read(self.shared.join(name)).unwrap(), b"after");
        c.release(entry.nodeid, open.fh, 0).unwrap();
    }
}

impl Upgradable {
    /// Waits until the processes of the binary are exactly `pid`'s family: whatever the old
    /// one left (its launcher dies with it) is gone.
    fn wait_alone(&self, pid: u32) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while processes_of(&self.bin) != family(pid) {
            assert!(
                Instant::now() < deadline,
                "processes left behind: {:?} run, {pid} has {:?}",
                processes_of(&self.bin),
                family(pid)
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// SIGHUP, then `vhostfs upgrade` twice, with the daemon started with `extra`: the guest keeps
/// its connection, node IDs (the same ones on a new LOOKUP), fhs and an unlinked open file; the
/// pid file names each new process, the old ones are gone, nothing is left behind; SIGTERM
/// then ends the last one, and the socket and pid file it took over go (removed by its
/// launcher, or under the namespace sandbox its supervisor).
fn hands_over(extra: &[&str]) {
    hands_over_as(extra, None)
}

/// [`hands_over`] with the daemon run as `uid`.
fn hands_over_as(extra: &[&str], uid: Option<u32>) {
    let mut s = start_as(extra, uid, false);
    s.check_serving("before");
    let mut held = s.hold();
    s.check_held(&mut held);
    // A file the host removes while the guest has it open: no path leads to it any more, so
    // only its fd, passed over, keeps it (re-opening by path would lose it).
    let c = s.c();
    let (gone, gone_open) = c
        .create(1, "gone", 0o644, libc::O_RDWR as u32, 0)
        .expect("CREATE");
    assert_eq!(c.write(gone.nodeid, gone_open.fh, 0, b"kept").unwrap(), 4);
    fs::remove_file(s.shared.join("gone")).unwrap();
    // Many node IDs held (a stream of inodes by fd is the densest the loader checks).
    let many: Vec<u64> = (0..300)
        .map(|i| {
            let (e, o) = c
                .create(1, &format!("many{i}"), 0o644, 0, 0)
                .expect("CREATE");
            c.release(e.nodeid, o.fh, 0).unwrap();
            e.nodeid
        })
        .collect();
    let first = s.first.pid();
    assert_eq!(pid_in_file(&s.socket), Some(first));
    s.wait_alone(first);
    // A SIGUSR2 from outside (what the daemon sends its own main thread to pause the relay)
    // pauses nothing, and the hand-over below still works.
    // SAFETY: kill with integer arguments.
    assert_eq!(
        unsafe { libc::kill(serving(first) as libc::pid_t, libc::SIGUSR2) },
        0
    );
    s.check_serving("after a SIGUSR2 from outside");
    let ns = namespaces(serving(first));
    assert_eq!(
        ns.1 != namespaces(std::process::id()).1,
        uid.is_some(),
        "a user namespace of its own when unprivileged"
    );
    let check_all = |s: &Upgradable, held: &mut Held| {
        s.check_held(held);
        let c = s.c();
        assert_eq!(
            c.read(gone.nodeid, gone_open.fh, 0, 16)
                .expect("READ of the unlinked file"),
            b"kept"
        );
        assert_eq!(c.getattr(gone.nodeid, None).expect("GETATTR").attr.nlink, 0);
        for (i, &node) in many.iter().enumerate() {
            assert_eq!(
                c.lookup(1, &format!("many{i}")).expect("LOOKUP").nodeid,
                node
            );
        }
    };

    // SIGHUP, as `systemctl reload` or an administrator sends it.
    // SAFETY: kill with integer arguments.
    assert_eq!(unsafe { libc::kill(first as i32, libc::SIGHUP) }, 0);
    let second = s.wait_taken_over(first);
    let status = s.first.wait_exit(Duration::from_secs(5)).unwrap();
    assert_eq!(
        status.map(|s| s.code()),
        Some(Some(0)),
        "the old process exits 0"
    );
    assert!(s.socket.exists(), "the old process removed the socket");
    assert_eq!(pid_in_file(&s.socket), Some(second));
    s.wait_alone(second);
    // The same mounts (under the namespace sandbox: the old daemon's namespaces, joined).
    assert_eq!(namespaces(serving(second)), ns);
    check_all(&s, &mut held);
    s.check_serving("after-sighup");

    // `vhostfs upgrade`: exits 0 once the new process serves, and names it; twice.
    let mut old = second;
    for round in ["after-command", "after-second-command"] {
        let (ok, out) = s.upgrade_command();
        assert!(ok, "vhostfs upgrade failed: {out}");
        let new = pid_in_file(&s.socket).unwrap();
        assert_ne!(new, old);
        assert!(out.contains(&format!("pid {new} serves")), "{out}");
        s.wait_taken_over(old);
        s.wait_alone(new);
        assert_eq!(namespaces(serving(new)), ns);
        check_all(&s, &mut held);
        s.check_serving(round);
        old = new;
    }
    assert_eq!(fs::read(s.shared.join("dir/held")).unwrap(), b"01234");

    // The last process ends as any daemon does, and removes what it took over.
    drop(s.client.take());
    // SAFETY: kill with integer arguments.
    assert_eq!(unsafe { libc::kill(old as i32, libc::SIGTERM) }, 0);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !processes_of(&s.bin).is_empty() {
        assert!(
            Instant::now() < deadline,
            "{:?} outlived SIGTERM",
            processes_of(&s.bin)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!s.socket.exists(), "socket left behind");
    assert_eq!(pid_in_file(&s.socket), None, "pid file left behind");
}

#[test]
fn sighup_and_the_upgrade_command_hand_the_connection_over() {
    hands_over(&["--sandbox=none"]);
}

/// The default sandbox and inode mode (`prefer`: inodes kept as file handles, which name
/// their mount by ID: the new process's mounts must be the old one's).
#[test]
fn the_namespace_sandbox_hands_over_into_the_same_mounts() {
    hands_over(&[]);
}

#[test]
fn fd_based_inodes_are_kept_under_the_namespace_sandbox() {
    hands_over(&["--inode-file-handles=never"]);
}

/// Unprivileged: the new process joins the old one's user namespace, then its mount namespace.
#[test]
fn an_unprivileged_namespace_sandbox_hands_over() {
    hands_over_as(&[], Some(NOBODY));
}

#[test]
fn the_listening_socket_moves_too() {
    let mut s = start(&["--sandbox=chroot", "--keep-listening"]);
    let first = s.first.pid();
    let (ok, out) = s.upgrade_with(&format!("--pid={first}"));
    assert!(ok, "vhostfs upgrade --pid failed: {out}");
    let second = s.wait_taken_over(first);
    s.check_serving("chroot");
    // The guest goes; with --keep-listening the new process accepts the next one.
    drop(s.client.take());
    let guest = TestGuest::connect(&s.socket, 1, 256, 64 * MIB).expect("a second connection");
    let client = FuseClient::new(Arc::new(guest), 0);
    client.init().expect("FUSE_INIT of the next guest");
    s.client = Some(client);
    s.check_serving("next-guest");
    assert_eq!(pid_in_file(&s.socket), Some(second));
}
