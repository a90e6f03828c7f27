//! The exact command lines that the tools launching virtiofsd today emit, run against vhostfs:
//! each starts the daemon with that argv and serves the test guest (INIT, LOOKUP, CREATE, WRITE,
//! READ), with the options each launcher passes for its share settings.

mod common;
#[path = "launchers/virtme_ng.rs"]
mod virtme_ng;

use std::os::fd::AsRawFd;
use std::os::unix::net::UnixListener;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::fuse_abi::{
    FOPEN_DIRECT_IO, FUSE_DIRECT_IO_ALLOW_MMAP, FUSE_DONT_MASK, FUSE_POSIX_ACL, FUSE_ROOT_ID,
    FUSE_SECURITY_CTX,
};
use common::smoke::{inherit_fd, serve_one_guest, serve_until_exit};
use common::{Daemon, TempDir};

const TIMEOUT: Duration = Duration::from_secs(20);

fn vhostfs() -> Command {
    Command::new(env!("CARGO_BIN_EXE_vhostfs"))
}

/// A listening socket at `dir/name`, as Proxmox and libvirt create it before starting the
/// daemon with `--fd=N`.
fn listening_socket(dir: &TempDir, name: &str) -> (UnixListener, std::path::PathBuf) {
    let path = dir.join(name);
    (UnixListener::bind(&path).unwrap(), path)
}

/// Runs `args` (with `{fd}` and `{dir}` replaced) with a listening socket passed as `--fd` and
/// serves the test guest; returns nothing but panics on any failure.
fn serve_with_fd(args: &[&str], check: impl FnOnce(&common::FuseClient)) {
    let shared = TempDir::new("launch-shared").unwrap();
    let dir = TempDir::new("launch-sock").unwrap();
    let (listener, socket) = listening_socket(&dir, "vm.sock");
    let fd = listener.as_raw_fd();
    let argv: Vec<String> = args
        .iter()
        .map(|a| {
            a.replace("{fd}", &fd.to_string())
                .replace("{dir}", &shared.path().display().to_string())
        })
        .collect();
    let mut cmd = vhostfs();
    cmd.args(&argv);
    inherit_fd(&mut cmd, fd, fd);
    serve_until_exit(&mut cmd, &socket, shared.path(), check);
}

fn xattr_roundtrip(c: &common::FuseClient) {
    let e = c.lookup(FUSE_ROOT_ID, "from-guest.txt").unwrap();
    c.setxattr(e.nodeid, "user.launcher", b"1", 0)
        .expect("SETXATTR with --xattr");
}

// Proxmox VE qemu-server (PVE::QemuServer::Virtiofs): a socket it created and listens on,
// passed as --fd, then the share's options. --xattr, --posix-acl and --allow-direct-io follow
// the share's expose-xattr, expose-acl and direct-io settings.
const PROXMOX: &[&str] = &[
    "--fd={fd}",
    "--shared-dir={dir}",
    "--announce-submounts",
    "--cache=auto",
    "--inode-file-handles=prefer",
    "--syslog",
];

#[test]
fn proxmox_qemu_server() {
    serve_with_fd(PROXMOX, |_| {});
}

#[test]
fn proxmox_qemu_server_expose_xattr() {
    let mut args = PROXMOX.to_vec();
    args.push("--xattr");
    serve_with_fd(&args, xattr_roundtrip);
}

#[test]
fn proxmox_qemu_server_expose_acl_and_direct_io() {
    let mut args = PROXMOX.to_vec();
    args.extend(["--xattr", "--posix-acl", "--allow-direct-io"]);
    serve_with_fd(&args, |c| {
        let acl = FUSE_POSIX_ACL | FUSE_DONT_MASK;
        assert_eq!(c.flags() & acl, acl, "INIT flags {:#x}", c.flags());
        xattr_roundtrip(c);
    });
}

#[test]
fn proxmox_qemu_server_direct_io() {
    let mut args = PROXMOX.to_vec();
    args.push("--allow-direct-io");
    serve_with_fd(&args, |c| {
        assert_eq!(c.flags() & FUSE_POSIX_ACL, 0);
    });
}

/// libvirt first runs `--print-capabilities` and reads the JSON: with `separate-options` it
/// passes separate options, else the legacy `-o` form.
fn libvirt_capabilities() -> Vec<String> {
    let out = vhostfs().arg("--print-capabilities").output().unwrap();
    assert!(out.status.success());
    let caps: serde_json::Value = serde_json::from_slice(&out.stdout).expect("capabilities JSON");
    assert_eq!(caps["type"], "fs");
    caps["features"]
        .as_array()
        .expect("features array")
        .iter()
        .map(|f| f.as_str().expect("feature string").to_string())
        .collect()
}

/// libvirt 11 allows migrating a domain with a virtio-fs device only when its daemon lists
/// `migrate-precopy` (tests/e2e/migration.sh migrates such a guest between two QEMUs).
#[test]
fn libvirt_sees_migrate_precopy() {
    assert!(libvirt_capabilities().contains(&"migrate-precopy".to_string()));
}

#[test]
fn libvirt_separate_options() {
    assert!(libvirt_capabilities().contains(&"separate-options".to_string()));
    serve_with_fd(
        &[
            "--fd={fd}",
            "--shared-dir",
            "{dir}",
            "--cache",
            "never",
            "--sandbox",
            "chroot",
            "--xattr",
            "--thread-pool-size=4",
            "--rlimit-nofile=4096",
        ],
        xattr_roundtrip,
    );
}

#[test]
fn libvirt_legacy_options() {
    serve_with_fd(
        &["--fd={fd}", "-o", "source={dir},cache=always,xattr"],
        xattr_roundtrip,
    );
}

/// Community Proxmox hookscripts start one daemon per share on a socket of their own.
#[test]
fn community_hookscript() {
    let shared = TempDir::new("launch-shared").unwrap();
    let run_dir = Path::new("/run/vhostfs-test");
    std::fs::create_dir_all(run_dir).unwrap();
    let socket = run_dir.join("100-share.sock");
    let mut cmd = vhostfs();
    cmd.args(["--socket-path", "/run/vhostfs-test/100-share.sock"])
        .arg("--shared-dir")
        .arg(shared.path())
        .args([
            "--cache=auto",
            "--announce-submounts",
            "--inode-file-handles=mandatory",
            "--log-level",
            "debug",
        ]);
    let mut daemon = Daemon::spawn(&mut cmd, &socket).unwrap();
    drop(serve_one_guest(&socket, shared.path()));
    let status = daemon.wait_exit(TIMEOUT).unwrap().expect("still running");
    assert_eq!(status.code(), Some(0));
    assert!(!socket.exists(), "socket left behind");
    assert!(!run_dir.join("100-share.sock.pid").exists());
    std::fs::remove_dir(run_dir).unwrap();
}

/// contrib/qemu/50-vhostfs.json (installed in /usr/share/qemu/vhost-user/, where libvirt looks
/// for a virtio-fs backend when the domain names no binary) agrees with `--print-capabilities`,
/// and names the installed binary.
#[test]
fn vhost_user_json_agrees_with_print_capabilities() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("contrib/qemu/50-vhostfs.json");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).expect("valid JSON");
    let out = vhostfs().arg("--print-capabilities").output().unwrap();
    let caps: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["type"], caps["type"]);
    assert_eq!(json["type"], "fs");
    assert_eq!(json["binary"], "/usr/bin/vhostfs");
    assert!(json["description"].as_str().is_some_and(|d| !d.is_empty()));
    // The keys of QEMU's vhost-user.json schema, and no others.
    for key in json.as_object().unwrap().keys() {
        assert!(
            ["description", "type", "binary", "tags"].contains(&key.as_str()),
            "unknown key {key}"
        );
    }
}

/// Runs `args` (with `{sock}`, `{fd}` and `{dir}` replaced) on a share owned by `owner` (as the
/// launcher's share is: the mapped guest root must be able to create in it) and serves the test
/// guest, then runs `check` with the client and the share.
fn serve_with_socket(args: &[&str], owner: u32, check: impl FnOnce(&common::FuseClient, &Path)) {
    let shared = TempDir::new("launch-shared").unwrap();
    std::os::unix::fs::chown(shared.path(), Some(owner), Some(owner)).unwrap();
    let dir = TempDir::new("launch-sock").unwrap();
    let socket = dir.join("vm.sock");
    // With `{fd}`: a socket the launcher listens on, passed as --fd.
    let listener = args
        .iter()
        .any(|a| a.contains("{fd}"))
        .then(|| UnixListener::bind(&socket).unwrap());
    let fd = listener.as_ref().map_or(-1, |l| l.as_raw_fd());
    let argv: Vec<String> = args
        .iter()
        .map(|a| {
            a.replace("{sock}", &socket.display().to_string())
                .replace("{dir}", &shared.path().display().to_string())
                .replace("{fd}", &fd.to_string())
        })
        .collect();
    let mut cmd = vhostfs();
    cmd.args(&argv);
    if listener.is_some() {
        inherit_fd(&mut cmd, fd, fd);
    }
    let mut daemon =
        Daemon::spawn(&mut cmd, &socket).unwrap_or_else(|e| panic!("vhostfs {argv:?}: {e}"));
    let client = serve_one_guest(&socket, shared.path());
    check(&client, shared.path());
    assert!(daemon.is_alive());
    drop(client);
    let status = daemon.wait_exit(TIMEOUT).unwrap().expect("still running");
    assert_eq!(status.code(), Some(0), "vhostfs {argv:?}: {status}");
}

fn host_owner(path: &Path) -> (u32, u32) {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::symlink_metadata(path).unwrap();
    (m.uid(), m.gid())
}

/// The owner of `name` as LOOKUP shows it (".": of the share, as GETATTR shows it).
fn guest_owner(c: &common::FuseClient, name: &str) -> (u32, u32) {
    if name == "." {
        let a = c.getattr(FUSE_ROOT_ID, None).unwrap();
        return (a.attr.uid, a.attr.gid);
    }
    let e = c.lookup(FUSE_ROOT_ID, name).unwrap();
    (e.attr.uid, e.attr.gid)
}

// KubeVirt (virt-controller services/virtiofs.go) for a service-account volume: the files of
// the virt-launcher's qemu user (107) show as root in the guest. The migration options are those
// of every KubeVirt daemon (tests/migration.rs migrates with them).
#[test]
fn kubevirt() {
    serve_with_socket(
        &[
            "--socket-path={sock}",
            "--shared-dir={dir}",
            "--sandbox=none",
            "--cache=auto",
            "--migration-on-error=guest-error",
            "--migration-mode=find-paths",
            "--translate-uid=host:107:0:1",
        ],
        107,
        |c, shared| {
            assert_eq!(guest_owner(c, "."), (0, 107));
            assert_eq!(host_owner(&shared.join("from-guest.txt")), (0, 0));
        },
    );
}

// Incus: the container's id range, every other guest id forbidden.
#[test]
fn incus() {
    serve_with_socket(
        &[
            "--socket-path={sock}",
            "--shared-dir={dir}",
            "--translate-uid=map:0:1000000:65536",
            "--translate-gid=map:0:1000000:65536",
            "--translate-uid=forbid-guest:65536:4294901759",
            "--translate-gid=forbid-guest:65536:4294901759",
        ],
        1000000,
        |c, shared| {
            assert_eq!(
                host_owner(&shared.join("from-guest.txt")),
                (1000000, 1000000)
            );
            assert_eq!(guest_owner(c, "from-guest.txt"), (0, 0));
            assert_eq!(guest_owner(c, "."), (0, 0));
            let forbidden = c.with_creds(70000, 70000);
            assert_eq!(
                forbidden.mkdir(FUSE_ROOT_ID, "no", 0o755, 0).err(),
                Some(libc::EPERM)
            );
        },
    );
}

// systemd-vmspawn, for a directory bound with an id range (`--bind=...:idmap`): its own
// listening socket as --fd, the directory's range mapped to the guest's 0.. instead of a user
// namespace.
#[test]
fn systemd_vmspawn() {
    serve_with_socket(
        &[
            "--shared-dir",
            "{dir}",
            "--xattr",
            "--fd",
            "{fd}",
            "--no-announce-submounts",
            "--translate-uid",
            "map:0:100000:65536",
            "--translate-gid",
            "map:0:100000:65536",
        ],
        100000,
        |c, shared| {
            assert_eq!(host_owner(&shared.join("from-guest.txt")), (100000, 100000));
            assert_eq!(guest_owner(c, "from-guest.txt"), (0, 0));
            assert_eq!(guest_owner(c, "."), (0, 0));
            xattr_roundtrip(c);
        },
    );
}

// Docker Desktop for Linux: every guest id squashed onto the desktop user (1000), xattrs under
// a prefix.
#[test]
fn docker_desktop() {
    serve_with_socket(
        &[
            "--socket-path={sock}",
            "--shared-dir={dir}",
            "--xattr",
            "--xattrmap=:prefix:all::user.docker.desktop.::bad:all:::",
            "--translate-uid",
            "squash-guest:0:1000:4294967295",
            "--announce-submounts",
            "--sandbox=none",
            "--cache=auto",
        ],
        1000,
        |c, shared| {
            // The uid is squashed, the gid (no --translate-gid) is not.
            assert_eq!(host_owner(&shared.join("from-guest.txt")), (1000, 0));
            assert_eq!(guest_owner(c, "from-guest.txt"), (1000, 0));
            xattr_roundtrip(c);
            let mut value = [0u8; 1];
            let path = std::ffi::CString::new(
                shared
                    .join("from-guest.txt")
                    .into_os_string()
                    .into_encoded_bytes(),
            )
            .unwrap();
            // SAFETY: C strings and a buffer of the given size.
            let n = unsafe {
                libc::lgetxattr(
                    path.as_ptr(),
                    c"user.docker.desktop.user.launcher".as_ptr(),
                    value.as_mut_ptr().cast(),
                    1,
                )
            };
            assert_eq!((n, value), (1, *b"1"));
        },
    );
}

// mkosi (mkosi/qemu.py, start_virtiofsd): an SELinux-labelled image tree, shared in a chroot.
#[test]
fn mkosi() {
    serve_with_socket(
        &[
            "--socket-path={sock}",
            "--shared-dir={dir}",
            "--security-label",
            "--no-announce-submounts",
            "--sandbox=chroot",
        ],
        0,
        |c, _| {
            let flags = c.flags();
            assert_ne!(flags & FUSE_SECURITY_CTX, 0, "INIT flags {flags:#x}");
            // --security-label implies --xattr.
            xattr_roundtrip(c);
        },
    );
}

// microvm.nix and bootc tooling: a share the guest mmaps although nothing is cached.
#[test]
fn microvm_nix_and_bootc() {
    serve_with_socket(
        &[
            "--socket-path={sock}",
            "--shared-dir={dir}",
            "--allow-mmap",
            "--cache=never",
        ],
        0,
        |c, _| {
            let flags = c.flags();
            assert_ne!(
                flags & FUSE_DIRECT_IO_ALLOW_MMAP,
                0,
                "INIT flags {flags:#x}"
            );
            let e = c.lookup(FUSE_ROOT_ID, "hello.txt").unwrap();
            let o = c.open(e.nodeid, libc::O_RDONLY as u32).unwrap();
            assert_ne!(
                o.open_flags & FOPEN_DIRECT_IO,
                0,
                "open flags {:#x}",
                o.open_flags
            );
        },
    );
}

// Kata Containers (runtime's virtiofsd.go): one pool thread, submounts announced, --xattr when
// the sandbox asks for it.
const KATA: &[&str] = &[
    "--syslog",
    "--cache=auto",
    "--shared-dir={dir}",
    "--fd={fd}",
    "--thread-pool-size=1",
];

#[test]
fn kata_containers() {
    let mut args = KATA.to_vec();
    args.push("--announce-submounts");
    serve_with_fd(&args, |c| {
        // No --xattr: the guest is told xattrs are not supported.
        let e = c.lookup(FUSE_ROOT_ID, "hello.txt").unwrap();
        assert_eq!(c.setxattr(e.nodeid, "user.x", b"1", 0), Err(libc::ENOSYS));
    });
}

#[test]
fn kata_containers_xattr() {
    let mut args = KATA.to_vec();
    args.extend(["--announce-submounts", "--xattr"]);
    serve_with_fd(&args, xattr_roundtrip);
}

// Kata's newer (Rust) runtime still passes the legacy form.
#[test]
fn kata_containers_legacy_announce_submounts() {
    let mut args = KATA.to_vec();
    args.extend(["-o", "announce_submounts", "--xattr"]);
    serve_with_fd(&args, xattr_roundtrip);
}
