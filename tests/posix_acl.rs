//! `--posix-acl`: INIT negotiates FUSE_POSIX_ACL | FUSE_DONT_MASK, the daemon applies the
//! guest's umask to MKNOD/MKDIR/CREATE/TMPFILE unless the parent directory has a default ACL
//! (which the new node then inherits on the host), and ACLs pass through as xattrs. Checked on
//! the host with getfacl/setfacl (the `acl` package).

mod common;

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;

use common::fuse_abi::*;
use common::fuse_client::XattrReply;
use common::Session;

const ACL: u64 = FUSE_POSIX_ACL | FUSE_DONT_MASK;

fn flags(init: &InitOut) -> u64 {
    u64::from(init.flags) | (u64::from(init.flags2) << 32)
}

fn host_mode(path: &Path) -> u32 {
    fs::symlink_metadata(path).unwrap().mode() & 0o7777
}

/// `getfacl -n` of `path` on the host.
fn getfacl(path: &Path) -> String {
    let out = Command::new("getfacl")
        .args(["-n", "-p"])
        .arg(path)
        .output()
        .expect("getfacl (package acl)");
    assert!(out.status.success(), "getfacl {}: {out:?}", path.display());
    String::from_utf8(out.stdout).unwrap()
}

fn setfacl(args: &[&str], path: &Path) {
    let status = Command::new("setfacl")
        .args(args)
        .arg(path)
        .status()
        .expect("setfacl (package acl)");
    assert!(status.success(), "setfacl {args:?} {}", path.display());
}

/// Whether `path` has the xattr `name` on the host.
fn has_xattr(path: &Path, name: &str) -> bool {
    let p = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    let n = std::ffi::CString::new(name).unwrap();
    // SAFETY: C strings; a null buffer of size 0 asks for the size only.
    unsafe { libc::lgetxattr(p.as_ptr(), n.as_ptr(), std::ptr::null_mut(), 0) >= 0 }
}

#[test]
fn init_negotiates_acl_only_with_the_option() {
    for extra in [&[][..], &["--xattr"], &["--posix-acl=never"]] {
        let s = Session::start(extra);
        assert_eq!(flags(&s.init) & ACL, 0, "{extra:?}");
    }
    for extra in [
        &["--posix-acl"][..],
        &["--posix-acl=always"],
        &["--posix-acl=auto"],
        &["-o", "posix_acl"],
    ] {
        let s = Session::start(extra);
        assert_eq!(flags(&s.init) & ACL, ACL, "{extra:?}");
    }

    // A guest that does not offer both: `always` fails INIT, `auto` goes on without.
    let offer = LINUX_6_12_VIRTIOFS_INIT_FLAGS & !FUSE_DONT_MASK;
    let s = Session::start(&["--posix-acl"]);
    assert_eq!(s.client.init_with(offer).err(), Some(libc::EPROTO));
    let s = Session::start(&["--posix-acl=auto"]);
    let init = s.client.init_with(offer).expect("INIT");
    assert_eq!(flags(&init) & ACL, 0);
    // Then the guest applies the umask itself, and the daemon ignores the field.
    s.client
        .create(ROOT, "f", 0o640, RDWR, 0o077)
        .expect("CREATE");
    assert_eq!(host_mode(&s.shared.join("f")), 0o640);
}

#[test]
fn without_the_option_the_umask_field_is_ignored() {
    let s = Session::start(&["--xattr"]);
    let c = &s.client;
    c.create(ROOT, "f", 0o640, RDWR, 0o077).expect("CREATE");
    assert_eq!(host_mode(&s.shared.join("f")), 0o640);
    c.mkdir(ROOT, "d", 0o750, 0o077).expect("MKDIR");
    assert_eq!(host_mode(&s.shared.join("d")), 0o750);
    c.mknod(ROOT, "p", libc::S_IFIFO | 0o640, 0, 0o077)
        .expect("MKNOD");
    assert_eq!(host_mode(&s.shared.join("p")), 0o640);
    let (e, _) = c.tmpfile(ROOT, 0o640, RDWR, 0o077).expect("TMPFILE");
    assert_eq!(e.attr.mode & 0o7777, 0o640);
}

#[test]
fn the_umask_applies_where_there_is_no_default_acl() {
    let s = Session::start(&["--posix-acl"]);
    let c = &s.client;
    c.create(ROOT, "f", 0o666, RDWR, 0o022).expect("CREATE");
    assert_eq!(host_mode(&s.shared.join("f")), 0o644);
    c.mkdir(ROOT, "d", 0o777, 0o027).expect("MKDIR");
    assert_eq!(host_mode(&s.shared.join("d")), 0o750);
    c.mknod(ROOT, "p", libc::S_IFIFO | 0o666, 0, 0o077)
        .expect("MKNOD");
    assert_eq!(host_mode(&s.shared.join("p")), 0o600);
    let (e, _) = c.tmpfile(ROOT, 0o666, RDWR, 0o002).expect("TMPFILE");
    assert_eq!(e.attr.mode & 0o7777, 0o664);
    // The guest's mode bits beyond the permissions are kept.
    c.mkdir(ROOT, "sticky", 0o1777, 0o022).expect("MKDIR");
    assert_eq!(host_mode(&s.shared.join("sticky")), 0o1755);
    // SYMLINK has no mode: as always.
    c.symlink(ROOT, "l", "f").expect("SYMLINK");
    assert_eq!(fs::read_link(s.shared.join("l")).unwrap(), Path::new("f"));
}

#[test]
fn a_default_acl_is_inherited_and_the_umask_ignored() {
    let s = Session::start(&["--posix-acl"]);
    let c = &s.client;
    let dir = s.shared.join("acl");
    fs::create_dir(&dir).unwrap();
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o777)).unwrap();
    setfacl(&["-d", "-m", "u::rwx,g::rwx,o::r-x,u:1234:rwx"], &dir);
    let d = c.lookup(ROOT, "acl").expect("LOOKUP").nodeid;

    // The mode as sent, masked by the inherited ACL only (group bits = the ACL mask).
    c.create(d, "f", 0o666, RDWR, 0o077).expect("CREATE");
    let f = dir.join("f");
    assert_eq!(host_mode(&f), 0o664);
    assert!(has_xattr(&f, "system.posix_acl_access"));
    let acl = getfacl(&f);
    assert!(acl.contains("user:1234:rwx"), "{acl}");
    assert!(acl.contains("mask::rw-"), "{acl}");

    c.mkdir(d, "sub", 0o777, 0o077).expect("MKDIR");
    let sub = dir.join("sub");
    assert_eq!(host_mode(&sub), 0o775);
    let acl = getfacl(&sub);
    assert!(acl.contains("\nuser:1234:rwx"), "{acl}");
    // A directory inherits the default ACL as its own default.
    assert!(acl.contains("default:user:1234:rwx"), "{acl}");

    c.mknod(d, "p", libc::S_IFIFO | 0o666, 0, 0o077)
        .expect("MKNOD");
    assert_eq!(host_mode(&dir.join("p")), 0o664);
    let (e, _) = c.tmpfile(d, 0o666, RDWR, 0o077).expect("TMPFILE");
    assert_eq!(e.attr.mode & 0o7777, 0o664);

    // Inside the inheriting subdirectory as well, and not in a sibling without one.
    let sub_id = c.lookup(d, "sub").expect("LOOKUP").nodeid;
    c.create(sub_id, "g", 0o640, RDWR, 0o077).expect("CREATE");
    assert_eq!(host_mode(&sub.join("g")), 0o640);
    c.create(ROOT, "plain", 0o640, RDWR, 0o077).expect("CREATE");
    assert_eq!(host_mode(&s.shared.join("plain")), 0o600);
}

/// A `system.posix_acl_access` value (version 2): (tag, perm, id) entries in tag order.
fn acl_xattr(entries: &[(u16, u16, u32)]) -> Vec<u8> {
    let mut v = 2u32.to_le_bytes().to_vec();
    for &(tag, perm, id) in entries {
        v.extend_from_slice(&tag.to_le_bytes());
        v.extend_from_slice(&perm.to_le_bytes());
        v.extend_from_slice(&id.to_le_bytes());
    }
    v
}

#[test]
fn acl_xattrs_pass_through() {
    const USER_OBJ: u16 = 0x01;
    const USER: u16 = 0x02;
    const GROUP_OBJ: u16 = 0x04;
    const MASK: u16 = 0x10;
    const OTHER: u16 = 0x20;
    const UNDEFINED: u32 = u32::MAX;
    let s = Session::start(&["--posix-acl"]);
    let c = &s.client;
    let (e, _) = c.create(ROOT, "f", 0o600, RDWR, 0).expect("CREATE");
    let path = s.shared.join("f");

    let acl = acl_xattr(&[
        (USER_OBJ, 6, UNDEFINED),
        (USER, 4, 4321),
        (GROUP_OBJ, 4, UNDEFINED),
        (MASK, 6, UNDEFINED),
        (OTHER, 0, UNDEFINED),
    ]);
    c.setxattr(e.nodeid, "system.posix_acl_access", &acl, 0)
        .expect("SETXATTR");
    let on_host = getfacl(&path);
    assert!(on_host.contains("user:4321:r--"), "{on_host}");
    assert!(on_host.contains("mask::rw-"), "{on_host}");
    // The group bits of the mode show the mask.
    assert_eq!(host_mode(&path), 0o660);
    assert_eq!(
        c.getxattr(e.nodeid, "system.posix_acl_access", 4096),
        Ok(XattrReply::Data(acl))
    );

    // Set on the host, read by the guest: a default ACL on a directory.
    let dir = s.shared.join("d");
    fs::create_dir(&dir).unwrap();
    setfacl(&["-d", "-m", "u:4321:r-x"], &dir);
    let d = c.lookup(ROOT, "d").expect("LOOKUP").nodeid;
    match c.getxattr(d, "system.posix_acl_default", 4096) {
        Ok(XattrReply::Data(v)) => {
            assert!(
                v[4..]
                    .chunks(8)
                    .any(|e| e[..2] == USER.to_le_bytes() && e[4..] == 4321u32.to_le_bytes()),
                "{v:?}"
            );
        }
        other => panic!("GETXATTR: {other:?}"),
    }
    c.removexattr(d, "system.posix_acl_default")
        .expect("REMOVEXATTR");
    assert!(!has_xattr(&dir, "system.posix_acl_default"));
}
