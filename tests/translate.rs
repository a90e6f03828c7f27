//! `--translate-uid` / `--translate-gid`: every id the guest sends (the caller of creating
//! requests, SETATTR's new owner, ACL entries) reaches the host translated, every id it receives
//! (LOOKUP, GETATTR, STATX, READDIRPLUS, the create replies, SETATTR, ACL values) comes back
//! translated, `forbid-guest` ids get EPERM, bad values stop the start with one line; as root
//! and unprivileged (in the daemon's own user namespace). Host state is checked with stat and
//! getfacl/setfacl (package acl).

mod common;

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use common::daemon::run_with_timeout;
use common::fuse_abi::*;
use common::fuse_client::XattrReply;
use common::{Daemon, FuseClient, Session, TempDir, TestGuest};

/// One rule of each form for uids, a map, a squash and a forbidden range for gids.
const FORMS: &[&str] = &[
    "--translate-uid=map:0:100000:1000",
    "--translate-uid=squash-guest:1000:5000:1000",
    "--translate-uid=forbid-guest:2000:10",
    "--translate-uid=host:7000:3000:1",
    "--translate-uid=squash-host:8000:4000:10",
    "--translate-gid=map:0:200000:1000",
    "--translate-gid=squash-guest:1000:6000:1000",
    "--translate-gid=forbid-guest:2000:10",
];

fn host_owner(path: &Path) -> (u32, u32) {
    let m = fs::symlink_metadata(path).unwrap();
    (m.uid(), m.gid())
}

fn owner(e: &EntryOut) -> (u32, u32) {
    (e.attr.uid, e.attr.gid)
}

/// A share anyone may create in (the mapped callers are not root on the host).
fn open_share(s: &Session) {
    fs::set_permissions(s.shared.path(), fs::Permissions::from_mode(0o1777)).unwrap();
}

#[test]
fn created_nodes_land_with_host_ids_and_replies_carry_guest_ids() {
    let s = Session::start(FORMS);
    open_share(&s);
    let root = s.client.with_creds(0, 0);
    let user = s.client.with_creds(1000, 1001);

    // map: guest 0:0 is host 100000:200000 and shows as 0:0 again.
    let (e, _) = root
        .create(ROOT, "by-root", 0o644, RDWR, 0)
        .expect("CREATE");
    assert_eq!(owner(&e), (0, 0));
    assert_eq!(host_owner(&s.shared.join("by-root")), (100000, 200000));
    let e = root.mkdir(ROOT, "dir-root", 0o755, 0).expect("MKDIR");
    assert_eq!(owner(&e), (0, 0));
    assert_eq!(host_owner(&s.shared.join("dir-root")), (100000, 200000));
    let (e, _) = root.tmpfile(ROOT, 0o600, RDWR, 0).expect("TMPFILE");
    assert_eq!(owner(&e), (0, 0));

    // squash-guest is one way: 1000:1001 lands as 5000:6000, which shows as itself.
    let e = user.mkdir(ROOT, "dir-user", 0o755, 0).expect("MKDIR");
    assert_eq!(owner(&e), (5000, 6000));
    assert_eq!(host_owner(&s.shared.join("dir-user")), (5000, 6000));
    let e = user
        .mknod(ROOT, "fifo", libc::S_IFIFO | 0o644, 0, 0)
        .expect("MKNOD");
    assert_eq!(owner(&e), (5000, 6000));
    assert_eq!(host_owner(&s.shared.join("fifo")), (5000, 6000));
    let e = user.symlink(ROOT, "link", "by-root").expect("SYMLINK");
    assert_eq!(owner(&e), (5000, 6000));
    assert_eq!(host_owner(&s.shared.join("link")), (5000, 6000));
    let by_root = root.lookup(ROOT, "by-root").unwrap();
    let e = root.link(by_root.nodeid, ROOT, "hard").expect("LINK");
    assert_eq!(owner(&e), (0, 0));

    // forbid-guest: the caller's uid or gid in the range is EPERM, and nothing is created.
    for (uid, gid) in [(2000, 0), (2009, 1), (0, 2005)] {
        let c = s.client.with_creds(uid, gid);
        assert_eq!(
            c.create(ROOT, "no", 0o644, RDWR, 0).err(),
            Some(libc::EPERM)
        );
        assert_eq!(c.mkdir(ROOT, "no", 0o755, 0).err(), Some(libc::EPERM));
        assert_eq!(c.symlink(ROOT, "no", "x").err(), Some(libc::EPERM));
        assert_eq!(
            c.mknod(ROOT, "no", libc::S_IFIFO | 0o644, 0, 0).err(),
            Some(libc::EPERM)
        );
        let attr = SetattrIn {
            valid: FATTR_MODE,
            mode: 0o600,
            ..Default::default()
        };
        assert_eq!(c.setattr(by_root.nodeid, &attr).err(), Some(libc::EPERM));
    }
    assert!(!s.shared.join("no").exists());
    // Just outside the range is allowed (and squashed).
    let (e, _) = s
        .client
        .with_creds(2010, 0)
        .create(ROOT, "yes", 0o644, RDWR, 0)
        .expect("CREATE");
    assert_eq!(host_owner(&s.shared.join("yes")), (2010, 200000));
    assert_eq!(owner(&e), (2010, 0));
}

#[test]
fn host_owners_are_shown_translated_everywhere() {
    let s = Session::start(FORMS);
    let c = &s.client;
    // host owner → what the guest must see.
    let cases = [
        ("h-map", (100005, 200007), (5, 7)),
        ("h-host", (7000, 0), (3000, 0)),
        ("h-squash", (8009, 0), (4000, 0)),
        // No host → guest rule: the same number (also host 0, and the squash-guest target).
        ("h-none", (0, 0), (0, 0)),
        ("h-target", (5000, 6000), (5000, 6000)),
    ];
    for (name, (uid, gid), _) in cases {
        let p = s.shared.join(name);
        fs::write(&p, name).unwrap();
        std::os::unix::fs::lchown(&p, Some(uid), Some(gid)).unwrap();
    }
    let dir = c.opendir(ROOT, 0).unwrap();
    let plus = c.readdirplus(ROOT, dir.fh, 0, 8192).expect("READDIRPLUS");
    for (name, _, want) in cases {
        let e = c.lookup(ROOT, name).expect("LOOKUP");
        assert_eq!(owner(&e), want, "LOOKUP {name}");
        let a = c.getattr(e.nodeid, None).expect("GETATTR");
        assert_eq!((a.attr.uid, a.attr.gid), want, "GETATTR {name}");
        let x = c
            .statx(e.nodeid, None, 0, libc::STATX_BASIC_STATS)
            .expect("STATX");
        assert_eq!((x.stat.uid, x.stat.gid), want, "STATX {name}");
        let d = plus
            .iter()
            .find(|d| d.dirent.name == name.as_bytes())
            .unwrap_or_else(|| panic!("{name} not in READDIRPLUS"));
        assert_eq!(owner(&d.entry), want, "READDIRPLUS {name}");
    }
    // ACCESS compares the caller with the owner as the guest sees it: guest 5 owns h-map.
    let e = c.lookup(ROOT, "h-map").unwrap();
    fs::set_permissions(s.shared.join("h-map"), fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(
        c.with_creds(5, 7).access(e.nodeid, libc::R_OK as u32),
        Ok(())
    );
    assert_eq!(
        c.with_creds(6, 7).access(e.nodeid, libc::R_OK as u32),
        Err(libc::EACCES)
    );
}

#[test]
fn chown_translates_the_new_owner() {
    let s = Session::start(FORMS);
    open_share(&s);
    let root = s.client.with_creds(0, 0);
    let (e, _) = root.create(ROOT, "f", 0o644, RDWR, 0).unwrap();
    let chown = |uid: Option<u32>, gid: Option<u32>| SetattrIn {
        valid: uid.map_or(0, |_| FATTR_UID) | gid.map_or(0, |_| FATTR_GID),
        uid: uid.unwrap_or(0),
        gid: gid.unwrap_or(0),
        ..Default::default()
    };
    let a = root
        .setattr(e.nodeid, &chown(Some(10), Some(20)))
        .expect("chown");
    assert_eq!((a.attr.uid, a.attr.gid), (10, 20));
    assert_eq!(host_owner(&s.shared.join("f")), (100010, 200020));
    // Only the uid; then a squashed one, shown as its host id.
    let a = root.setattr(e.nodeid, &chown(Some(1500), None)).unwrap();
    assert_eq!((a.attr.uid, a.attr.gid), (5000, 20));
    assert_eq!(host_owner(&s.shared.join("f")), (5000, 200020));
    // A forbidden new owner is EPERM and changes nothing.
    for (uid, gid) in [
        (Some(2001), None),
        (None, Some(2002)),
        (Some(3), Some(2003)),
    ] {
        assert_eq!(
            root.setattr(e.nodeid, &chown(uid, gid)).err(),
            Some(libc::EPERM),
            "{uid:?}:{gid:?}"
        );
    }
    assert_eq!(host_owner(&s.shared.join("f")), (5000, 200020));
    // A guest user is checked by the host as its host ids: it may not give its file away.
    let user = s.client.with_creds(5, 7);
    let (e, _) = user.create(ROOT, "g", 0o644, RDWR, 0).unwrap();
    assert_eq!(host_owner(&s.shared.join("g")), (100005, 200007));
    assert_eq!(
        user.setattr(e.nodeid, &chown(Some(6), None)).err(),
        Some(libc::EPERM)
    );
    let mode = SetattrIn {
        valid: FATTR_MODE,
        mode: 0o600,
        ..Default::default()
    };
    user.setattr(e.nodeid, &mode)
        .expect("chmod of its own file");
}

/// `system.posix_acl_*` value with these (tag, perm, id) entries.
fn acl(entries: &[(u16, u16, u32)]) -> Vec<u8> {
    let mut v = 2u32.to_le_bytes().to_vec();
    for &(tag, perm, id) in entries {
        v.extend_from_slice(&tag.to_le_bytes());
        v.extend_from_slice(&perm.to_le_bytes());
        v.extend_from_slice(&id.to_le_bytes());
    }
    v
}

const NONE: u32 = u32::MAX;

fn getfacl(path: &Path) -> String {
    let out = Command::new("getfacl")
        .args(["-n", "-p", "-c"])
        .arg(path)
        .output()
        .expect("getfacl (package acl)");
    assert!(out.status.success(), "getfacl {}: {out:?}", path.display());
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn acl_entries_are_translated_both_ways() {
    let s = Session::start(&[
        "--posix-acl",
        "--translate-uid=map:0:100000:65536",
        "--translate-uid=forbid-guest:65536:10",
        "--translate-gid=map:0:200000:65536",
    ]);
    open_share(&s);
    let c = s.client.with_creds(0, 0);
    let (f, _) = c.create(ROOT, "f", 0o640, RDWR, 0).unwrap();
    let guest_acl = acl(&[
        (0x01, 6, NONE),
        (0x02, 7, 1000),
        (0x04, 4, NONE),
        (0x08, 5, 100),
        (0x10, 7, NONE),
        (0x20, 0, NONE),
    ]);
    c.setxattr(f.nodeid, "system.posix_acl_access", &guest_acl, 0)
        .expect("SETXATTR access ACL");
    let host = getfacl(&s.shared.join("f"));
    assert!(host.contains("user:101000:rwx"), "{host}");
    assert!(host.contains("group:200100:r-x"), "{host}");
    assert_eq!(
        c.getxattr(f.nodeid, "system.posix_acl_access", 0),
        Ok(XattrReply::Size(guest_acl.len() as u32))
    );
    assert_eq!(
        c.getxattr(f.nodeid, "system.posix_acl_access", 4096),
        Ok(XattrReply::Data(guest_acl.clone()))
    );

    // Set on the host, read by the guest.
    let g = s.shared.join("g");
    fs::write(&g, "").unwrap();
    let status = Command::new("setfacl")
        .args(["-m", "u:100042:r,g:200043:w,u:7:x"])
        .arg(&g)
        .status()
        .expect("setfacl (package acl)");
    assert!(status.success());
    let e = c.lookup(ROOT, "g").unwrap();
    let Ok(XattrReply::Data(v)) = c.getxattr(e.nodeid, "system.posix_acl_access", 4096) else {
        panic!("GETXATTR");
    };
    let ids: Vec<(u16, u32)> = v[4..]
        .chunks(8)
        .map(|e| {
            (
                u16::from_le_bytes([e[0], e[1]]),
                u32::from_le_bytes([e[4], e[5], e[6], e[7]]),
            )
        })
        .filter(|(tag, _)| matches!(tag, 0x02 | 0x08))
        .collect();
    // Host uid 7 has no guest mapping: it shows as 7.
    assert_eq!(ids, [(0x02, 7), (0x02, 42), (0x08, 43)]);

    // Default ACLs too, and new nodes inherit the host ids.
    let d = c.mkdir(ROOT, "d", 0o755, 0).unwrap();
    let default_acl = acl(&[
        (0x01, 7, NONE),
        (0x02, 5, 1),
        (0x04, 5, NONE),
        (0x10, 7, NONE),
        (0x20, 5, NONE),
    ]);
    c.setxattr(d.nodeid, "system.posix_acl_default", &default_acl, 0)
        .expect("SETXATTR default ACL");
    assert!(getfacl(&s.shared.join("d")).contains("default:user:100001:r-x"));
    assert_eq!(
        c.getxattr(d.nodeid, "system.posix_acl_default", 4096),
        Ok(XattrReply::Data(default_acl))
    );
    c.create(d.nodeid, "inherits", 0o644, RDWR, 0).unwrap();
    assert!(getfacl(&s.shared.join("d/inherits")).contains("user:100001:r-x"));

    // An entry naming a forbidden uid is EPERM, a malformed value EINVAL; the ACL stays.
    let forbidden = acl(&[
        (0x01, 6, NONE),
        (0x02, 7, 65537),
        (0x04, 4, NONE),
        (0x10, 7, NONE),
        (0x20, 0, NONE),
    ]);
    assert_eq!(
        c.setxattr(f.nodeid, "system.posix_acl_access", &forbidden, 0),
        Err(libc::EPERM)
    );
    assert_eq!(
        c.setxattr(f.nodeid, "system.posix_acl_access", &[2, 0, 0, 0, 1], 0),
        Err(libc::EINVAL)
    );
    assert!(getfacl(&s.shared.join("f")).contains("user:101000:rwx"));
}

/// A run whose start must fail: non-zero exit, one stderr line containing `needle`.
fn start_fails(args: &[&str], needle: &str) {
    let dir = TempDir::new("translate-bad").unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_vhostfs"));
    cmd.arg(format!("--socket-path={}", dir.join("s").display()))
        .arg(format!("--shared-dir={}", dir.path().display()))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let out = run_with_timeout(&mut cmd, Duration::from_secs(10)).expect("exits");
    assert!(!out.status.success(), "{args:?}");
    assert_eq!(out.stderr.lines().count(), 1, "{args:?}: {}", out.stderr);
    assert!(out.stderr.starts_with("vhostfs: error: "), "{}", out.stderr);
    assert!(out.stderr.contains(needle), "{args:?}: {}", out.stderr);
    assert!(!dir.join("s").exists());
}

#[test]
fn bad_values_stop_the_start_with_one_line() {
    start_fails(
        &["--translate-uid=map:0:1000:10", "--translate-uid=guest:9:0:1"],
        "invalid value for '--translate-uid': 'guest:9:0:1' overlaps 'map:0:1000:10': both map guest ids [9, 10)",
    );
    start_fails(
        &["--translate-gid=squash-host:10:0:5", "--translate-gid=map:0:12:1"],
        "invalid value for '--translate-gid': 'map:0:12:1' overlaps 'squash-host:10:0:5': both map host ids [12, 13)",
    );
    start_fails(
        &["--translate-uid=forbid-guest:0:1:1"],
        "'forbid-guest:0:1:1': 'forbid-guest' takes 2 numbers, got 3",
    );
    start_fails(&["--translate-uid=squash:0:1:1"], "unknown type 'squash'");
    start_fails(&["--translate-gid=map:0:x:1"], "invalid number 'x'");
    start_fails(&["--translate-uid=map:4294967295:0:1"], "range overflow");
}

/// The unprivileged user the daemon runs as.
const NOBODY: u32 = 65534;

/// vhostfs run as [`NOBODY`] (its own user namespace, where it is 0) on a share it owns, with
/// `args`, and a connected test guest.
fn serve_as_nobody(args: &[&str]) -> (Daemon, FuseClient, TempDir, TempDir) {
    let shared = TempDir::new("translate-userns").unwrap();
    std::os::unix::fs::chown(shared.path(), Some(NOBODY), Some(NOBODY)).unwrap();
    let sock_dir = TempDir::new("translate-userns-sock").unwrap();
    fs::set_permissions(sock_dir.path(), fs::Permissions::from_mode(0o777)).unwrap();
    let socket = sock_dir.join("s");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_vhostfs"));
    cmd.arg(format!("--socket-path={}", socket.display()))
        .arg(format!("--shared-dir={}", shared.path().display()))
        .arg("--log-level=error")
        .args(args);
    std::os::unix::process::CommandExt::uid(&mut cmd, NOBODY);
    std::os::unix::process::CommandExt::gid(&mut cmd, NOBODY);
    let daemon = Daemon::spawn(&mut cmd, &socket).unwrap();
    let guest = TestGuest::connect(&socket, 1, 256, 16 << 20).expect("vhost-user set-up");
    let client = FuseClient::new(Arc::new(guest), 0);
    client.init().expect("FUSE_INIT");
    (daemon, client, shared, sock_dir)
}

#[test]
fn unprivileged_daemon_serves_any_guest_user_through_a_squash() {
    // Without translation a guest user other than root cannot create: the daemon's namespace
    // has no uid 1000.
    let (_d, c, _shared, _s) = serve_as_nobody(&[]);
    let user = c.with_creds(1000, 1000);
    assert_eq!(
        user.create(ROOT, "f", 0o644, RDWR, 0).err(),
        Some(libc::EPERM)
    );

    // Squashed onto the namespace's 0 (nobody on the host), shown as 1000:1000.
    let (_d, c, shared, _s) = serve_as_nobody(&[
        "--translate-uid=squash-guest:0:0:4294967295",
        "--translate-gid=squash-guest:0:0:4294967295",
        "--translate-uid=host:0:1000:1",
        "--translate-gid=host:0:1000:1",
    ]);
    let user = c.with_creds(1000, 1000);
    let (e, _) = user.create(ROOT, "f", 0o644, RDWR, 0).expect("CREATE");
    assert_eq!(owner(&e), (1000, 1000));
    assert_eq!(host_owner(&shared.join("f")), (NOBODY, NOBODY));
    let e = c
        .with_creds(4242, 4242)
        .mkdir(ROOT, "d", 0o755, 0)
        .expect("MKDIR");
    assert_eq!(owner(&e), (1000, 1000));
    assert_eq!(host_owner(&shared.join("d")), (NOBODY, NOBODY));
    let a = c.getattr(ROOT, None).unwrap();
    assert_eq!((a.attr.uid, a.attr.gid), (1000, 1000));
}
