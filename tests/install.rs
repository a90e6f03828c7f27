//! contrib/install.sh (debug profile, staged into a DESTDIR with another PREFIX): the binary,
//! the man page and completions generated from the command line, the units and the QEMU JSON
//! naming the installed binary.

mod common;

use std::fs;
use std::path::Path;
use std::process::Command;

use common::TempDir;

#[test]
fn install_sh_stages_everything() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let dest = TempDir::new_in(tmp, "install").unwrap();
    let out = Command::new("sh")
        .arg(root.join("contrib/install.sh"))
        .env("DESTDIR", dest.path())
        .env("PREFIX", "/opt/vhostfs")
        .env("PROFILE", "dev")
        // A target dir of its own: the one running this test is locked by cargo.
        .env("CARGO_TARGET_DIR", tmp.join("install-build"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let p = dest.join("opt/vhostfs");

    let version = Command::new(p.join("bin/vhostfs"))
        .arg("--version")
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&version.stdout).starts_with("vhostfs "));

    let man = fs::read_to_string(p.join("share/man/man1/vhostfs.1")).unwrap();
    assert!(
        man.starts_with(".ie") && man.contains(".TH vhostfs 1"),
        "{man}"
    );
    assert!(man.contains(r"\-\-shared\-dir"));
    let bash = fs::read_to_string(p.join("share/bash-completion/completions/vhostfs")).unwrap();
    assert!(bash.contains("--socket-path") && bash.contains("--inode-file-handles"));
    let zsh = fs::read_to_string(p.join("share/zsh/vendor-completions/_vhostfs")).unwrap();
    assert!(zsh.starts_with("#compdef vhostfs"));
    let fish = fs::read_to_string(p.join("share/fish/vendor_completions.d/vhostfs.fish")).unwrap();
    assert!(fish.contains("shared-dir"));

    let service = fs::read_to_string(p.join("lib/systemd/system/vhostfs@.service")).unwrap();
    assert!(service.contains("ExecStart=/opt/vhostfs/bin/vhostfs --shared-dir="));
    assert!(p.join("lib/systemd/system/vhostfs@.socket").is_file());
    let json = fs::read_to_string(p.join("share/qemu/vhost-user/50-vhostfs.json")).unwrap();
    assert!(json.contains("\"binary\": \"/opt/vhostfs/bin/vhostfs\""));
    assert!(dest.join("etc/vhostfs").is_dir());
}
