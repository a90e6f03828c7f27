//! Who owns what the guest creates, and with which mode: the caller's uid and gid, the guest's
//! mode bits exactly.

use super::*;

/// Creates one of each kind through `c`, named with `prefix`.
fn create_all(c: &FuseClient, parent: u64, prefix: &str) -> Result<(), i32> {
    let (e, o) = c.create(
        parent,
        &format!("{prefix}file"),
        0o644,
        libc::O_RDWR as u32,
        0,
    )?;
    c.release(e.nodeid, o.fh, libc::O_RDWR as u32).unwrap();
    c.mkdir(parent, &format!("{prefix}dir"), 0o755, 0)?;
    c.symlink(parent, &format!("{prefix}link"), "target")?;
    c.mknod(
        parent,
        &format!("{prefix}fifo"),
        libc::S_IFIFO | 0o644,
        0,
        0,
    )?;
    Ok(())
}

#[test]
fn created_files_belong_to_the_caller() {
    let s = Session::start(&[]);
    let c = &s.client;
    // A root-owned 0755 directory: uid 1000 may not create there.
    let user = c.with_creds(1000, 1000);
    assert_eq!(create_all(&user, ROOT, "u-"), Err(libc::EACCES));
    assert_eq!(fs::read_dir(s.shared.path()).unwrap().count(), 0);

    fs::set_permissions(s.shared.path(), fs::Permissions::from_mode(0o777)).unwrap();
    create_all(&user, ROOT, "u-").expect("create as uid 1000");
    create_all(&c.with_creds(0, 0), ROOT, "r-").expect("create as root");
    for kind in ["file", "dir", "link", "fifo"] {
        let u = fs::symlink_metadata(s.shared.join(&format!("u-{kind}"))).unwrap();
        assert_eq!((u.uid(), u.gid()), (1000, 1000), "u-{kind}");
        let r = fs::symlink_metadata(s.shared.join(&format!("r-{kind}"))).unwrap();
        assert_eq!((r.uid(), r.gid()), (0, 0), "r-{kind}");
    }
    // The entry reply says so too.
    let e = user.mkdir(ROOT, "u-dir2", 0o700, 0).unwrap();
    assert_eq!((e.attr.uid, e.attr.gid), (1000, 1000));
    // Without root's capabilities, uid 1000 cannot make a device node.
    assert_eq!(
        user.mknod(ROOT, "u-chr", libc::S_IFCHR | 0o600, encode_dev(1, 3), 0)
            .err(),
        Some(libc::EPERM)
    );
    assert!(!s.shared.join("u-chr").exists());
    // The daemon switched back: a root request still creates root files.
    let e = c.mkdir(ROOT, "r-dir2", 0o700, 0).unwrap();
    assert_eq!((e.attr.uid, e.attr.gid), (0, 0));
}

#[test]
fn the_guest_mode_is_applied_exactly() {
    let s = Session::start(&[]);
    let c = &s.client;
    // The guest kernel applied its umask already; the umask field is not applied again, and
    // the daemon's own umask is 0.
    let (e, _) = c
        .create(ROOT, "f640", 0o640, libc::O_RDWR as u32, 0o077)
        .unwrap();
    assert_eq!(e.attr.mode, libc::S_IFREG | 0o640);
    c.create(ROOT, "f666", 0o666, libc::O_RDWR as u32, 0o022)
        .unwrap();
    c.create(ROOT, "suid", 0o4755, libc::O_RDWR as u32, 0)
        .unwrap();
    c.mkdir(ROOT, "d777", 0o777, 0o022).unwrap();
    c.mkdir(ROOT, "sticky", 0o1777, 0).unwrap();
    c.mknod(ROOT, "p666", libc::S_IFIFO | 0o666, 0, 0o022)
        .unwrap();
    for (name, mode) in [
        ("f640", 0o640),
        ("f666", 0o666),
        ("suid", 0o4755),
        ("d777", 0o777),
        ("sticky", 0o1777),
        ("p666", 0o666),
    ] {
        let m = fs::symlink_metadata(s.shared.join(name)).unwrap();
        assert_eq!(mode_bits(m.mode()), mode, "{name}: {:o}", m.mode());
    }
}
