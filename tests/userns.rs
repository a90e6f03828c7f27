//! Unprivileged `--sandbox=namespace`: a user other than root gets a user namespace of its own
//! (its uid and gid as 0 inside, or `--uid-map`/`--gid-map` ranges set by newuidmap and
//! newgidmap), serves the guest from it, and fails with one line where that cannot work.

mod common;

use std::ffi::CString;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use common::fuse_abi::*;
use common::{Daemon, FuseClient, Mount, TempDir, TestGuest};

/// The unprivileged user the daemon runs as.
const NOBODY: u32 = 65534;

fn vhostfs(socket: &Path, shared: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_vhostfs"));
    cmd.arg(format!("--socket-path={}", socket.display()))
        .arg(format!("--shared-dir={}", shared.display()))
        .arg("--log-level=error")
        .args(args);
    cmd
}

/// A share owned by `owner` and a socket dir anyone may create the socket in (the guest, root,
/// may always connect to it).
fn dirs(owner: u32) -> (TempDir, TempDir) {
    let shared = TempDir::new("userns-shared").unwrap();
    std::os::unix::fs::chown(shared.path(), Some(owner), Some(owner)).unwrap();
    let sock_dir = TempDir::new("userns-sock").unwrap();
    fs::set_permissions(sock_dir.path(), fs::Permissions::from_mode(0o777)).unwrap();
    (shared, sock_dir)
}

fn connect(socket: &Path) -> FuseClient {
    let guest = TestGuest::connect(socket, 1, 256, 16 << 20).expect("vhost-user set-up");
    let client = FuseClient::new(Arc::new(guest), 0);
    client.init().expect("FUSE_INIT");
    client
}

/// vhostfs with its defaults, run as [`NOBODY`] on `shared` (socket `s` in `sock_dir`), and a
/// connected, initialised test guest.
fn serve_as_nobody(sock_dir: &TempDir, shared: &TempDir) -> (Daemon, FuseClient) {
    let socket = sock_dir.join("s");
    let mut cmd = vhostfs(&socket, shared.path(), &[]);
    cmd.uid(NOBODY).gid(NOBODY);
    let daemon = Daemon::spawn(&mut cmd, &socket).unwrap();
    (daemon, connect(&socket))
}

/// The namespace of `kind` process `pid` is in.
fn ns(pid: u32, kind: &str) -> String {
    fs::read_link(format!("/proc/{pid}/ns/{kind}"))
        .unwrap()
        .display()
        .to_string()
}

/// The lines of `/proc/<pid>/<file>` with their fields single-spaced.
fn id_map(pid: u32, file: &str) -> Vec<String> {
    fs::read_to_string(format!("/proc/{pid}/{file}"))
        .unwrap()
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect()
}

/// CREATE `name` in the root as `client`, WRITE and READ it back; returns its host path's
/// metadata.
fn create_write_read(client: &FuseClient, shared: &Path, name: &str) -> fs::Metadata {
    let (entry, open) = client
        .create(FUSE_ROOT_ID, name, 0o644, libc::O_RDWR as u32, 0)
        .unwrap_or_else(|e| panic!("CREATE {name}: errno {e}"));
    assert_eq!(client.write(entry.nodeid, open.fh, 0, b"hello").unwrap(), 5);
    assert_eq!(client.read(entry.nodeid, open.fh, 0, 16).unwrap(), b"hello");
    fs::metadata(shared.join(name)).unwrap()
}

#[test]
fn unprivileged_namespace_run_serves_from_a_user_namespace() {
    let (shared, sock_dir) = dirs(NOBODY);
    fs::write(shared.join("from-host"), b"abc").unwrap();
    // The default sandbox (namespace) and file handle mode (prefer).
    let (daemon, client) = serve_as_nobody(&sock_dir, &shared);
    assert_eq!(
        client.lookup(FUSE_ROOT_ID, "from-host").unwrap().attr.size,
        3
    );
    let meta = create_write_read(&client, shared.path(), "new");
    assert_eq!((meta.uid(), meta.gid()), (NOBODY, NOBODY));
    assert_eq!(fs::read(shared.join("new")).unwrap(), b"hello");

    let served = daemon.served_pid().unwrap();
    assert_ne!(served, daemon.pid(), "no supervisor/child split");
    let me = std::process::id();
    for kind in ["user", "pid", "mnt", "net"] {
        assert_ne!(ns(served, kind), ns(me, kind), "{kind} namespace not new");
    }
    assert_eq!(id_map(served, "uid_map"), [format!("0 {NOBODY} 1")]);
    assert_eq!(id_map(served, "gid_map"), [format!("0 {NOBODY} 1")]);
    assert_eq!(id_map(served, "setgroups"), ["deny"]);
    // Root in the namespace, confined to the share like a privileged run.
    let mounts = fs::read_to_string(format!("/proc/{served}/mountinfo")).unwrap();
    assert_eq!(mounts.lines().count(), 1, "{mounts}");

    // Root inside cannot give a file to an id the namespace does not map.
    let node = client.lookup(FUSE_ROOT_ID, "new").unwrap().nodeid;
    let chown = set_uid(1000);
    assert_eq!(client.setattr(node, &chown).unwrap_err(), libc::EINVAL);
    assert_eq!(fs::metadata(shared.join("new")).unwrap().uid(), NOBODY);
}

#[test]
fn unprivileged_namespace_run_sees_submounts() {
    let (shared, sock_dir) = dirs(NOBODY);
    let sub = shared.join("tmp");
    let _tmpfs = Mount::tmpfs_at(&sub, "uid=65534,gid=65534");
    fs::write(sub.join("f"), b"in the tmpfs").unwrap();
    let (_daemon, client) = serve_as_nobody(&sock_dir, &shared);
    let dir = client.lookup(FUSE_ROOT_ID, "tmp").unwrap();
    let f = client
        .lookup(dir.nodeid, "f")
        .expect("a file of the submount");
    assert_eq!(f.attr.size, 12);
    let o = client.open(f.nodeid, libc::O_RDONLY as u32).unwrap();
    assert_eq!(client.read(f.nodeid, o.fh, 0, 64).unwrap(), b"in the tmpfs");
}

/// Runs `cmd` to its end; returns its stderr, which must be one line, and checks it failed
/// without leaving its socket behind.
fn one_line_failure(cmd: &mut Command, socket: &Path) -> String {
    let out = cmd.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(!socket.exists(), "the socket was left behind");
    stderr
}

#[test]
fn options_that_cannot_work_unprivileged_are_one_line() {
    let (shared, sock_dir) = dirs(NOBODY);
    let socket = sock_dir.join("s");
    let mut cmd = vhostfs(&socket, shared.path(), &["--inode-file-handles=mandatory"]);
    cmd.uid(NOBODY).gid(NOBODY);
    assert_eq!(
        one_line_failure(&mut cmd, &socket),
        "vhostfs: error: --inode-file-handles=mandatory needs CAP_DAC_READ_SEARCH in the \
         initial user namespace, which an unprivileged --sandbox=namespace run (in a user \
         namespace) does not have: run as root, or pass --inode-file-handles=prefer\n"
    );
    let mut cmd = vhostfs(&socket, shared.path(), &["--sandbox=chroot"]);
    cmd.uid(NOBODY).gid(NOBODY);
    assert_eq!(
        one_line_failure(&mut cmd, &socket),
        "vhostfs: error: --sandbox=chroot needs root; pass --sandbox=namespace (a user \
         namespace) or --sandbox=none\n"
    );
    // Ranges need newuidmap (here: not found).
    let mut cmd = vhostfs(&socket, shared.path(), &["--uid-map=:0:100000:65536:"]);
    cmd.uid(NOBODY).gid(NOBODY).env("PATH", "/nonexistent");
    let stderr = one_line_failure(&mut cmd, &socket);
    assert!(
        stderr.starts_with(
            "vhostfs: error: cannot set up the namespace sandbox: cannot set the id maps of its \
             user namespace (cannot run newuidmap (package uidmap)"
        ),
        "{stderr}"
    );
    assert!(stderr.contains("/etc/subuid"), "{stderr}");
    // As virtiofsd: the maps are for an unprivileged namespace run only.
    for (args, root) in [
        (&["--uid-map=:0:100000:65536:"][..], true),
        (&["--gid-map=:0:100000:65536:", "--sandbox=none"], false),
    ] {
        let mut cmd = vhostfs(&socket, shared.path(), args);
        if !root {
            cmd.uid(NOBODY).gid(NOBODY);
        }
        assert_eq!(
            one_line_failure(&mut cmd, &socket),
            "vhostfs: error: --uid-map/--gid-map only apply to a run as a user other than \
             root with --sandbox=namespace\n",
            "{args:?}"
        );
    }
}

/// `path` as a C string, for use after fork.
fn c(path: &str) -> CString {
    CString::new(path).unwrap()
}

/// Fails the `pre_exec` closure with errno when `ret` is negative.
fn ok(ret: libc::c_int) -> std::io::Result<()> {
    if ret < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Writes `data` to `path` with plain syscalls (safe after fork).
///
/// # Safety
/// Only calls open/write/close.
unsafe fn write_file(path: &CString, data: &[u8]) -> std::io::Result<()> {
    let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
    ok(fd)?;
    let n = libc::write(fd, data.as_ptr().cast(), data.len());
    libc::close(fd);
    ok(n as libc::c_int)
}

/// User namespaces unavailable to the daemon (as with `user.max_user_namespaces=0` on the
/// host): it starts as uid 1000 of a user namespace whose own limit of nested namespaces is 0,
/// so its unshare(CLONE_NEWUSER) fails. Nothing on the host is changed.
#[test]
fn user_namespaces_unavailable_is_one_line_naming_the_fixes() {
    let (shared, sock_dir) = dirs(0);
    let socket = sock_dir.join("s");
    let mut cmd = vhostfs(&socket, shared.path(), &[]);
    let (max, uid_map, setgroups, gid_map) = (
        c("/proc/sys/user/max_user_namespaces"),
        c("/proc/self/uid_map"),
        c("/proc/self/setgroups"),
        c("/proc/self/gid_map"),
    );
    // SAFETY: the closure only makes syscalls on strings prepared before the fork.
    unsafe {
        cmd.pre_exec(move || {
            ok(libc::unshare(libc::CLONE_NEWUSER))?;
            write_file(&max, b"0")?;
            write_file(&uid_map, b"1000 0 1")?;
            write_file(&setgroups, b"deny")?;
            write_file(&gid_map, b"1000 0 1")
        });
    }
    let stderr = one_line_failure(&mut cmd, &socket);
    assert!(
        stderr
            .starts_with("vhostfs: error: cannot set up the namespace sandbox: no user namespace"),
        "{stderr}"
    );
    for fix in ["user.max_user_namespaces", "run as root", "--sandbox=none"] {
        assert!(stderr.contains(fix), "{fix}: {stderr}");
    }
}

/// `--uid-map`/`--gid-map` ranges go through newuidmap/newgidmap (package uidmap), which check
/// /etc/subuid and /etc/subgid: the daemon gets its own mount namespace with those files
/// replaced by ones granting nobody the range, so the host's stay untouched.
#[test]
fn id_map_ranges_are_set_by_newuidmap_and_newgidmap() {
    for tool in ["newuidmap", "newgidmap"] {
        assert!(
            Command::new("sh")
                .args(["-c", &format!("command -v {tool}")])
                .output()
                .unwrap()
                .status
                .success(),
            "{tool} is not installed: install the uidmap package (apt-get install uidmap)"
        );
    }
    const BASE: u32 = 100000;
    let (shared, sock_dir) = dirs(BASE);
    fs::set_permissions(shared.path(), fs::Permissions::from_mode(0o777)).unwrap();
    let sub = TempDir::new("userns-subid").unwrap();
    let grant = sub.join("grant");
    fs::write(&grant, format!("nobody:{BASE}:65536\n")).unwrap();
    let socket = sock_dir.join("s");
    let range = format!("--uid-map=:0:{BASE}:65536:");
    let mut cmd = vhostfs(
        &socket,
        shared.path(),
        &[&range, &range.replace("uid", "gid")],
    );
    let (root, grant_c, subuid, subgid) = (
        c("/"),
        c(grant.to_str().unwrap()),
        c("/etc/subuid"),
        c("/etc/subgid"),
    );
    // SAFETY: the closure only makes syscalls on strings prepared before the fork.
    unsafe {
        cmd.pre_exec(move || {
            let null = std::ptr::null();
            ok(libc::unshare(libc::CLONE_NEWNS))?;
            ok(libc::mount(
                null,
                root.as_ptr(),
                null,
                libc::MS_PRIVATE | libc::MS_REC,
                null.cast(),
            ))?;
            for target in [&subuid, &subgid] {
                ok(libc::mount(
                    grant_c.as_ptr(),
                    target.as_ptr(),
                    null,
                    libc::MS_BIND,
                    null.cast(),
                ))?;
            }
            ok(libc::setgroups(0, std::ptr::null()))?;
            ok(libc::setgid(NOBODY))?;
            ok(libc::setuid(NOBODY))
        });
    }
    let daemon = Daemon::spawn(&mut cmd, &socket).unwrap();
    // Once the guest is connected, the serving child exists (the socket is made before).
    let client = connect(&socket);
    let served = daemon.served_pid().unwrap();
    assert_eq!(id_map(served, "uid_map"), [format!("0 {BASE} 65536")]);
    assert_eq!(id_map(served, "gid_map"), [format!("0 {BASE} 65536")]);
    let meta = create_write_read(&client, shared.path(), "by-root");
    assert_eq!((meta.uid(), meta.gid()), (BASE, BASE));
    let meta = create_write_read(&client.with_creds(1000, 1000), shared.path(), "by-1000");
    assert_eq!((meta.uid(), meta.gid()), (BASE + 1000, BASE + 1000));
}
