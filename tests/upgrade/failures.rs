//! Failed upgrades and clean-up: an upgrade to a missing binary, or to one that exits at once,
//! leaves the daemon serving with its socket and pid file; whichever process exits last removes
//! them.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use super::processes::{alive, pid_in_file};
use super::start;

/// A failed upgrade (the binary missing, or exiting at once) leaves the daemon started with
/// `extra` serving, its socket and pid file in place; then the real binary takes over.
fn fails_and_serves_on(extra: &[&str]) {
    let mut s = start(extra);
    let mut held = s.hold();
    let pid = s.first.pid();
    s.wait_alone(pid);
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
    assert_eq!(pid_in_file(&s.socket), Some(pid));
    assert!(s.socket.exists());
    s.wait_alone(pid);
    s.check_held(&mut held);
    s.check_serving("exits");

    // The real binary back: the same daemon upgrades.
    fs::rename(&real, &s.bin).unwrap();
    let (ok, out) = s.upgrade_command();
    assert!(ok, "{out}");
    let new = s.wait_taken_over(pid);
    s.wait_alone(new);
    s.check_held(&mut held);
    s.check_serving("restored");
}

#[test]
fn a_failed_upgrade_leaves_the_daemon_serving() {
    fails_and_serves_on(&["--sandbox=none"]);
}

#[test]
fn a_failed_upgrade_leaves_the_namespace_sandbox_serving() {
    fails_and_serves_on(&[]);
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
