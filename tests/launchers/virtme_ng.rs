//! virtme-ng's command lines and probes (`vng`, which falls back to 9p when the daemon is not
//! ready in time), run against vhostfs; tests/e2e/vng.sh boots vng itself.

use std::path::Path;
use std::time::Duration;

use super::common::fuse_abi::*;
use super::common::smoke::serve_one_guest;
use super::common::{self, Daemon, TempDir};
use super::{host_owner, vhostfs, TIMEOUT};

// virtme-ng 1.42 (`vng`, virtme/commands/run.py, VirtioFS.start) boots a kernel on the host's own
// root (or on `--root DIR`), shared by the first `virtiofsd` it finds (its guest-tools dir, PATH,
// /usr/libexec/virtiofsd, ...), started through the shell as the invoking user, who is often
// not root. Its line, word for word: `--syslog --no-announce-submounts [--posix-acl]
// [--readonly] --socket-path S --shared-dir D --sandbox none --cache always|auto`: `--readonly
// --cache always` for the default read-only root, `--cache auto` without `--readonly` for
// `vng --rw`, `--posix-acl` only for an external `--root`. Before that it runs `virtiofsd
// --version` (it skips a binary that fails it) and `virtiofsd --help` (it drops `--readonly`
// unless the help names it); readiness is `S.pid` existing, polled at 0, 0.1, 0.3, 0.7 and
// 1.5 s, after which it gives up and falls back to 9p. tests/e2e/vng.sh boots vng itself.
fn vng_line(posix_acl: bool, readonly: bool) -> Vec<&'static str> {
    let mut argv = vec!["--syslog", "--no-announce-submounts"];
    if posix_acl {
        argv.push("--posix-acl");
    }
    if readonly {
        argv.push("--readonly");
    }
    argv.extend([
        "--socket-path",
        "{sock}",
        "--shared-dir",
        "{dir}",
        "--sandbox",
        "none",
        "--cache",
        if readonly { "always" } else { "auto" },
    ]);
    argv
}

/// Starts `argv` (with `{sock}` and `{dir}` replaced) as vng does, as `uid` (the share and the
/// socket's directory are given to it), and checks vng's readiness: the socket listens and
/// `S.pid` exists within the 1.5 s of vng's last look. Returns the daemon, the socket and the
/// directories (kept alive by the caller).
fn start_like_vng(argv: &[&str], uid: u32) -> (Daemon, std::path::PathBuf, TempDir, TempDir) {
    use std::os::unix::process::CommandExt;
    let shared = TempDir::new("vng-shared").unwrap();
    let dir = TempDir::new("vng-sock").unwrap();
    for d in [&shared, &dir] {
        std::os::unix::fs::chown(d.path(), Some(uid), Some(uid)).unwrap();
    }
    let socket = dir.join("virtme1234abcd");
    let argv: Vec<String> = argv
        .iter()
        .map(|a| {
            a.replace("{sock}", &socket.display().to_string())
                .replace("{dir}", &shared.path().display().to_string())
        })
        .collect();
    let mut cmd = vhostfs();
    cmd.args(&argv);
    if uid != 0 {
        cmd.uid(uid).gid(uid);
    }
    let start = std::time::Instant::now();
    let daemon =
        Daemon::spawn(&mut cmd, &socket).unwrap_or_else(|e| panic!("vhostfs {argv:?}: {e}"));
    let pid_file = dir.join("virtme1234abcd.pid");
    assert!(
        pid_file.exists(),
        "no {} once the socket listens",
        pid_file.display()
    );
    let ready = start.elapsed();
    assert!(
        ready < Duration::from_millis(1500),
        "ready after {ready:?}: vng gives up at 1.5 s"
    );
    (daemon, socket, shared, dir)
}

fn wait_clean_exit(mut daemon: Daemon, socket: &Path) {
    let status = daemon.wait_exit(TIMEOUT).unwrap().expect("still running");
    assert_eq!(status.code(), Some(0), "{status}");
    assert!(!socket.exists(), "socket left behind");
}

/// vng's probes of the binary it found: `--version` exits 0, `--help` (stdout and stderr, which
/// it reads together) names `--readonly`.
#[test]
fn virtme_ng_probes() {
    let version = vhostfs().arg("--version").output().unwrap();
    assert!(version.status.success(), "--version: {}", version.status);
    let help = vhostfs().arg("--help").output().unwrap();
    assert!(help.status.success(), "--help: {}", help.status);
    let text = [help.stdout, help.stderr].concat();
    assert!(String::from_utf8_lossy(&text).contains("--readonly"));
}

/// `vng --rw`, as root: the guest writes through.
#[test]
fn virtme_ng_rw() {
    let (daemon, socket, shared, _dir) = start_like_vng(&vng_line(false, false), 0);
    drop(serve_one_guest(&socket, shared.path()));
    assert_eq!(host_owner(&shared.join("from-guest.txt")), (0, 0));
    wait_clean_exit(daemon, &socket);
}

/// `vng` (read-only root), as root: the guest reads, every write fails with EROFS.
#[test]
fn virtme_ng_readonly() {
    let (daemon, socket, shared, _dir) = start_like_vng(&vng_line(false, true), 0);
    std::fs::write(shared.join("hello.txt"), b"hello from the host\n").unwrap();
    let guest = common::TestGuest::connect(&socket, 1, 256, 1 << 24).expect("vhost-user set-up");
    let c = common::FuseClient::new(std::sync::Arc::new(guest), 0);
    c.init().expect("FUSE_INIT");
    let e = c.lookup(FUSE_ROOT_ID, "hello.txt").expect("LOOKUP");
    let o = c.open(e.nodeid, libc::O_RDONLY as u32).expect("OPEN");
    assert_eq!(
        c.read(e.nodeid, o.fh, 0, 4096).unwrap(),
        b"hello from the host\n"
    );
    let create = c.create(
        FUSE_ROOT_ID,
        "new",
        libc::S_IFREG | 0o644,
        libc::O_RDWR as u32,
        0,
    );
    assert_eq!(create.err(), Some(libc::EROFS));
    assert_eq!(
        c.open(e.nodeid, libc::O_RDWR as u32).err(),
        Some(libc::EROFS)
    );
    assert_eq!(
        c.mkdir(FUSE_ROOT_ID, "d", 0o755, 0).err(),
        Some(libc::EROFS)
    );
    drop(c);
    assert!(!shared.join("new").exists() && !shared.join("d").exists());
    wait_clean_exit(daemon, &socket);
}

/// `vng --rw` run by an unprivileged user (nobody here): no capability at all; what the guest's
/// root creates belongs to that user on the host.
#[test]
fn virtme_ng_rw_unprivileged() {
    let (daemon, socket, shared, _dir) = start_like_vng(&vng_line(false, false), 65534);
    drop(serve_one_guest(&socket, shared.path()));
    assert_eq!(host_owner(&shared.join("from-guest.txt")), (65534, 65534));
    wait_clean_exit(daemon, &socket);
}

/// `vng --root DIR --rw` (an external root): with `--posix-acl`, negotiated.
#[test]
fn virtme_ng_external_root_posix_acl() {
    let (daemon, socket, shared, _dir) = start_like_vng(&vng_line(true, false), 0);
    let c = serve_one_guest(&socket, shared.path());
    let acl = FUSE_POSIX_ACL | FUSE_DONT_MASK;
    assert_eq!(c.flags() & acl, acl, "INIT flags {:#x}", c.flags());
    drop(c);
    wait_clean_exit(daemon, &socket);
}
