//! contrib/proxmox/vhostfs-hook.pl, run as Proxmox runs a hookscript (`<vmid> <phase>`) with a
//! share config and fake `systemd-run`/`systemctl` on PATH that record their argv. The fake
//! systemd-run also starts the command after `--`, so the test guest checks that the vhostfs
//! command line the hook builds really serves the share on the socket the VM's args: line names.

mod common;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};

use common::smoke::serve_one_guest;
use common::TempDir;

/// A fake of `name` that appends its argv (tab-separated) to `$FAKE_LOG`; `then` is more shell.
fn fake(bin: &Path, name: &str, then: &str) {
    let path = bin.join(name);
    fs::write(
        &path,
        format!(
            "#!/bin/sh\n(printf '%s' {name}; for a in \"$@\"; do printf '\\t%s' \"$a\"; done; \
             echo) >> \"$FAKE_LOG\"\n{then}\n"
        ),
    )
    .unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
}

struct Hook {
    bin: TempDir,
    conf: TempDir,
    run: TempDir,
}

impl Hook {
    fn new() -> Hook {
        let hook = Hook {
            bin: TempDir::new("pve-bin").unwrap(),
            conf: TempDir::new("pve-conf").unwrap(),
            run: TempDir::new("pve-run").unwrap(),
        };
        fake(hook.bin.path(), "systemctl", "exit 0");
        // Start the service's command as systemd would, in the background; remember its pid.
        fake(
            hook.bin.path(),
            "systemd-run",
            "while [ \"$1\" != -- ]; do shift; done; shift\n\
             \"$@\" </dev/null >>\"$FAKE_LOG.out\" 2>&1 &\necho $! >> \"$FAKE_LOG.pids\"",
        );
        hook
    }

    fn log(&self) -> String {
        fs::read_to_string(self.bin.join("log")).unwrap_or_default()
    }

    fn call(&self, vmid: &str, phase: &str) -> Output {
        let path = format!(
            "{}:{}",
            self.bin.path().display(),
            std::env::var("PATH").unwrap()
        );
        Command::new("perl")
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("contrib/proxmox/vhostfs-hook.pl"))
            .args([vmid, phase])
            .env("PATH", path)
            .env("FAKE_LOG", self.bin.join("log"))
            .env("VHOSTFS_BIN", env!("CARGO_BIN_EXE_vhostfs"))
            .env("VHOSTFS_PROXMOX_CONF", self.conf.path())
            .env("VHOSTFS_RUN_DIR", self.run.path())
            .output()
            .expect("perl")
    }
}

impl Drop for Hook {
    fn drop(&mut self) {
        let pids = fs::read_to_string(self.bin.join("log.pids")).unwrap_or_default();
        for pid in pids.lines().filter_map(|p| p.parse::<i32>().ok()) {
            // SAFETY: kill(2) of a daemon this test started.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

#[test]
fn pre_start_starts_one_vhostfs_per_share_and_post_stop_stops_them() {
    let hook = Hook::new();
    let data = TempDir::new("pve-data").unwrap();
    let media = TempDir::new("pve-media").unwrap();
    fs::write(
        hook.conf.join("100.conf"),
        format!(
            "# shares of VM 100\nshare data {} --cache=auto --xattr\n\nshare media {}\n",
            data.path().display(),
            media.path().display()
        ),
    )
    .unwrap();

    let out = hook.call("100", "pre-start");
    assert!(out.status.success(), "{out:?}");
    let bin = env!("CARGO_BIN_EXE_vhostfs");
    let run = hook.run.path().display();
    let expected = [
        "systemctl\tstop\tvhostfs-100-data.service".to_string(),
        "systemctl\treset-failed\tvhostfs-100-data.service".into(),
        format!(
            "systemd-run\t--unit=vhostfs-100-data.service\t--description=vhostfs share data of \
             VM 100\t--property=Type=notify\t--collect\t--\t{bin}\t--socket-path={run}/100-data.sock\t\
             --shared-dir={}\t--syslog\t--cache=auto\t--xattr",
            data.path().display()
        ),
        "systemctl\tstop\tvhostfs-100-media.service".into(),
        "systemctl\treset-failed\tvhostfs-100-media.service".into(),
        format!(
            "systemd-run\t--unit=vhostfs-100-media.service\t--description=vhostfs share media \
             of VM 100\t--property=Type=notify\t--collect\t--\t{bin}\t--socket-path={run}/100-media.sock\t\
             --shared-dir={}\t--syslog",
            media.path().display()
        ),
    ];
    assert_eq!(hook.log().lines().collect::<Vec<_>>(), expected);

    // The daemons the hook started serve the sockets the args: line points QEMU at.
    drop(serve_one_guest(
        &hook.run.join("100-data.sock"),
        data.path(),
    ));
    drop(serve_one_guest(
        &hook.run.join("100-media.sock"),
        media.path(),
    ));

    fs::remove_file(hook.bin.join("log")).unwrap();
    let out = hook.call("100", "post-stop");
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        hook.log().lines().collect::<Vec<_>>(),
        [
            "systemctl\tstop\tvhostfs-100-data.service",
            "systemctl\tstop\tvhostfs-100-media.service"
        ]
    );
}

#[test]
fn other_phases_and_vms_without_config_do_nothing() {
    let hook = Hook::new();
    let data = TempDir::new("pve-data").unwrap();
    fs::write(
        hook.conf.join("100.conf"),
        format!("share data {}\n", data.path().display()),
    )
    .unwrap();
    for (vmid, phase) in [
        ("100", "post-start"),
        ("100", "pre-stop"),
        ("101", "pre-start"),
    ] {
        let out = hook.call(vmid, phase);
        assert!(out.status.success(), "{vmid} {phase}: {out:?}");
    }
    assert_eq!(hook.log(), "");
}

#[test]
fn bad_config_fails_the_start() {
    let hook = Hook::new();
    for (line, message) in [
        ("share data", "expected 'share NAME DIR [args]'"),
        ("mount data /srv", "expected 'share NAME DIR [args]'"),
        ("share da/ta /", "may use only"),
        ("share data /nonexistent-dir", "is not a directory"),
    ] {
        fs::write(hook.conf.join("100.conf"), format!("{line}\n")).unwrap();
        let out = hook.call("100", "pre-start");
        assert!(!out.status.success(), "{line}: {out:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(message), "{line}: {stderr}");
    }
    assert_eq!(hook.log(), "", "nothing is started for a bad config");
}
