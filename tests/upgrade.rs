//! In-place upgrade (issue 13 item 1): a daemon serving the test guest hands its session over
//! to a new process of its binary on SIGHUP or `vhostfs upgrade`, and the guest goes on on the
//! same connection; a failed upgrade (binary missing, or exiting at once) leaves it serving.

mod common;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::daemon::run_with_timeout;
use common::{Daemon, FuseClient, TempDir, TestGuest};

const MIB: usize = 1 << 20;

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
    _dir: TempDir,
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

fn pid_in_file(socket: &Path) -> Option<u32> {
    let mut p = socket.as_os_str().to_owned();
    p.push(".pid");
    fs::read_to_string(p).ok()?.trim().parse().ok()
}

fn alive(pid: u32) -> bool {
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

fn start(extra: &[&str]) -> Upgradable {
    let dir = TempDir::new("upgrade").unwrap();
    let shared = TempDir::new("upgrade-shared").unwrap();
    let bin = dir.join("vhostfs");
    fs::copy(env!("CARGO_BIN_EXE_vhostfs"), &bin).unwrap();
    let socket = dir.join("vfs.sock");
    let mut cmd = Command::new(&bin);
    cmd.arg(format!("--socket-path={}", socket.display()))
        .arg(format!("--shared-dir={}", shared.path().display()))
        .arg("--log-level=error")
        .args(extra);
    let first = Daemon::spawn(&mut cmd, &socket).unwrap();
    let guest = TestGuest::connect(&socket, 1, 256, 64 * MIB).expect("vhost-user set-up");
    let client = FuseClient::new(Arc::new(guest), 0);
    client.init().expect("FUSE_INIT");
    Upgradable {
        client: Some(client),
        first,
        bin,
        socket,
        shared,
        _dir: dir,
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

#[test]
fn sighup_and_the_upgrade_command_hand_the_connection_over() {
    let mut s = start(&["--sandbox=none"]);
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
    s.check_held(&mut held);
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
    s.check_serving("after-sighup");

    // `vhostfs upgrade`: exits 0 once the new process serves, and names it.
    let (ok, out) = s.upgrade_command();
    assert!(ok, "vhostfs upgrade failed: {out}");
    let third = pid_in_file(&s.socket).unwrap();
    assert_ne!(third, second);
    assert!(out.contains(&format!("pid {third} serves")), "{out}");
    assert!(!alive(second), "the old process is gone");
    s.check_held(&mut held);
    s.check_serving("after-command");
    assert_eq!(fs::read(s.shared.join("dir/held")).unwrap(), b"0123");
}

#[test]
fn a_failed_upgrade_leaves_the_daemon_serving() {
    let mut s = start(&["--sandbox=none"]);
    let mut held = s.hold();
    let pid = s.first.pid();
    let real = s.bin.with_extension("real");
    fs::rename(&s.bin, &real).unwrap();

    // The binary is missing.
    let (ok, out) = s.upgrade_command();
    assert!(!ok, "an upgrade to a missing binary succeeded: {out}");
    assert!(out.contains("exited before taking over"), "{out}");
    assert!(s.first.is_alive());
    assert_eq!(pid_in_file(&s.socket), Some(pid));
    s.check_held(&mut held);
    s.check_serving("missing");

    // The binary exits at once.
    fs::write(&s.bin, "#!/bin/sh\nexit 1\n").unwrap();
    fs::set_permissions(&s.bin, fs::Permissions::from_mode(0o755)).unwrap();
    let (ok, out) = s.upgrade_command();
    assert!(!ok, "an upgrade to a failing binary succeeded: {out}");
    assert!(out.contains("exited before taking over"), "{out}");
    assert!(s.first.is_alive());
    s.check_held(&mut held);
    s.check_serving("exits");

    // The real binary back: the same daemon upgrades.
    fs::rename(&real, &s.bin).unwrap();
    let (ok, out) = s.upgrade_command();
    assert!(ok, "{out}");
    s.wait_taken_over(pid);
    s.check_held(&mut held);
    s.check_serving("restored");
}

#[test]
fn namespace_sandbox_refuses_and_serves_on() {
    let mut s = start(&[]);
    // A plain SIGHUP (forwarded by the supervisor) is logged and ignored.
    // SAFETY: kill with integer arguments.
    assert_eq!(unsafe { libc::kill(s.first.pid() as i32, libc::SIGHUP) }, 0);
    std::thread::sleep(Duration::from_millis(300));
    assert!(s.first.is_alive(), "SIGHUP ended the daemon");
    s.check_serving("hup");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_vhostfs"));
    cmd.arg("upgrade")
        .arg(format!("--socket-path={}", s.socket.display()))
        .arg("--timeout=2")
        .stderr(Stdio::piped());
    let out = run_with_timeout(&mut cmd, Duration::from_secs(20)).expect("upgrade hung");
    assert!(!out.status.success());
    assert!(
        out.stderr
            .contains("--sandbox=namespace: an in-place upgrade needs"),
        "{}",
        out.stderr
    );
    s.check_serving("namespace");
    assert_eq!(pid_in_file(&s.socket), Some(s.first.pid()));
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

/// Whether `<socket>.pid` and the socket are gone, within 2 s (the launcher removes them once
/// the daemon has exited).
fn cleaned_up(socket: &Path) -> (bool, bool) {
    let mut pid_file = socket.as_os_str().to_owned();
    pid_file.push(".pid");
    let deadline = Instant::now() + Duration::from_secs(2);
    while (Path::new(&pid_file).exists() || socket.exists()) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    (!Path::new(&pid_file).exists(), !socket.exists())
}

/// The process an upgrade started is no child of the first, and is confined (no host path
/// resolves under chroot, Landlock refuses a removal outside the share under none): the socket
/// and pid file it took over are still removed when it exits, also after a failed upgrade; so
/// are a confined daemon's own on SIGTERM.
#[test]
fn the_socket_and_pid_file_go_when_the_last_process_exits() {
    for mode in ["--sandbox=none", "--sandbox=chroot"] {
        let mut s = start(&[mode]);
        let first = s.first.pid();
        let real = s.bin.with_extension("real");
        fs::rename(&s.bin, &real).unwrap();
        let (ok, out) = s.upgrade_command();
        assert!(
            !ok,
            "{mode}: an upgrade to a missing binary succeeded: {out}"
        );
        fs::rename(&real, &s.bin).unwrap();
        // SAFETY: kill with integer arguments.
        assert_eq!(unsafe { libc::kill(first as i32, libc::SIGHUP) }, 0);
        let second = s.wait_taken_over(first);
        s.check_serving("upgraded");
        drop(s.client.take());
        let deadline = Instant::now() + Duration::from_secs(10);
        while alive(second) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(
            !alive(second),
            "{mode}: the new process exits when the frontend goes"
        );
        assert_eq!(
            cleaned_up(&s.socket),
            (true, true),
            "{mode}: (pid file, socket) gone"
        );

        let mut s = start(&[mode]);
        // SAFETY: kill with integer arguments.
        assert_eq!(
            unsafe { libc::kill(s.first.pid() as i32, libc::SIGTERM) },
            0
        );
        let status = s.first.wait_exit(Duration::from_secs(10)).unwrap();
        assert_eq!(status.map(|s| s.code()), Some(Some(0)), "{mode}: SIGTERM");
        assert_eq!(
            cleaned_up(&s.socket),
            (true, true),
            "{mode}: SIGTERM: (pid file, socket) gone"
        );
    }
}
