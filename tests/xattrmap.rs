//! `--xattrmap` against a real daemon: the examples of virtiofsd's doc/xattr-mapping.md and
//! Docker Desktop's map behave as documented. Host names are checked with l*xattr(2) on the
//! share, the guest's view through the test guest's GET/SET/LIST/REMOVEXATTR.

mod common;

use std::ffi::CString;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use common::fuse_client::XattrReply;
use common::Session;

const DOCKER: &str = "--xattrmap=:prefix:all::user.docker.desktop.::bad:all:::";

fn path_c(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

fn host_set(p: &Path, name: &str, value: &[u8]) {
    let n = CString::new(name).unwrap();
    // SAFETY: valid C strings; `value` is readable for its length.
    let r = unsafe {
        libc::lsetxattr(
            path_c(p).as_ptr(),
            n.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    assert_eq!(
        r,
        0,
        "lsetxattr {name}: {}",
        std::io::Error::last_os_error()
    );
}

fn host_get(p: &Path, name: &str) -> Option<Vec<u8>> {
    let n = CString::new(name).unwrap();
    let mut buf = vec![0u8; 4096];
    // SAFETY: valid C strings; `buf` is writable for its length.
    let r = unsafe {
        libc::lgetxattr(
            path_c(p).as_ptr(),
            n.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    if r < 0 {
        assert_eq!(
            std::io::Error::last_os_error().raw_os_error(),
            Some(libc::ENODATA),
            "{name}"
        );
        return None;
    }
    buf.truncate(r as usize);
    Some(buf)
}

fn host_list(p: &Path) -> Vec<String> {
    let mut buf = vec![0u8; 65536];
    // SAFETY: valid C string; `buf` is writable for its length.
    let r = unsafe { libc::llistxattr(path_c(p).as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    assert!(r >= 0, "llistxattr: {}", std::io::Error::last_os_error());
    names(&buf[..r as usize])
}

fn names(list: &[u8]) -> Vec<String> {
    let mut v: Vec<String> = list
        .split(|&b| b == 0)
        .filter(|n| !n.is_empty())
        .map(|n| String::from_utf8(n.to_vec()).unwrap())
        .collect();
    v.sort();
    v
}

/// A session on a share holding the regular file `f` with the host xattrs `host`, and the
/// nodeid of `f`.
fn session_with_file(args: &[&str], host: &[(&str, &[u8])]) -> (Session, u64) {
    let s = Session::start(args);
    fs::write(s.shared.join("f"), b"x").unwrap();
    for (name, value) in host {
        host_set(&s.shared.join("f"), name, value);
    }
    let node = s.client.lookup(1, "f").expect("LOOKUP f").nodeid;
    (s, node)
}

fn guest_get(s: &Session, node: u64, name: &str) -> Result<Vec<u8>, i32> {
    match s.client.getxattr(node, name, 4096)? {
        XattrReply::Data(d) => Ok(d),
        XattrReply::Size(_) => panic!("size reply to a sized GETXATTR"),
    }
}

/// The guest's list, checked against its size-only query and an exact-size read.
fn guest_list(s: &Session, node: u64) -> Vec<String> {
    let XattrReply::Size(size) = s.client.listxattr(node, 0).expect("LISTXATTR size") else {
        panic!("data reply to a size query");
    };
    let XattrReply::Data(data) = s.client.listxattr(node, 4096).expect("LISTXATTR") else {
        panic!("size reply to a sized LISTXATTR");
    };
    assert_eq!(
        size as usize,
        data.len(),
        "size query vs the mapped list {data:?}"
    );
    if size > 0 {
        assert!(matches!(s.client.listxattr(node, size), Ok(XattrReply::Data(d)) if d == data));
        assert_eq!(s.client.listxattr(node, size - 1).err(), Some(libc::ERANGE));
    }
    names(&data)
}

/// SETXATTR `name` = `value` from the guest on node `f` (it must work); then the host's value of
/// `host_name` on the share's `f`.
fn set_then_host_get(
    s: &Session,
    f: u64,
    name: &str,
    value: &[u8],
    host_name: &str,
) -> Option<Vec<u8>> {
    s.client
        .setxattr(f, name, value, 0)
        .unwrap_or_else(|e| panic!("SETXATTR {name}: errno {e}"));
    host_get(&s.shared.join("f"), host_name)
}

#[test]
fn docker_desktop_prefixes_everything_and_hides_the_host() {
    let (s, f) = session_with_file(
        &["--xattr", DOCKER],
        &[
            ("user.host", b"h"),
            ("trusted.host", b"t"),
            ("user.docker.desktop.user.pre", b"p"),
        ],
    );
    let hf = s.shared.join("f");
    assert_eq!(guest_list(&s, f), ["user.pre"]);

    assert_eq!(
        set_then_host_get(&s, f, "user.foo", b"bar", "user.docker.desktop.user.foo").as_deref(),
        Some(&b"bar"[..])
    );
    assert_eq!(host_get(&hf, "user.foo"), None);
    // security.* and trusted.* from the guest land under the prefix too.
    s.client
        .setxattr(f, "security.selinux", b"ctx", 0)
        .expect("SETXATTR security.selinux");
    assert_eq!(
        set_then_host_get(
            &s,
            f,
            "trusted.overlay.opaque",
            b"y",
            "user.docker.desktop.security.selinux"
        )
        .as_deref(),
        Some(&b"ctx"[..])
    );
    assert_eq!(
        host_get(&hf, "user.docker.desktop.trusted.overlay.opaque").as_deref(),
        Some(&b"y"[..])
    );

    assert_eq!(guest_get(&s, f, "user.foo"), Ok(b"bar".to_vec()));
    assert_eq!(guest_get(&s, f, "user.pre"), Ok(b"p".to_vec()));
    // The host's own names are out of reach: looked up under the prefix, they are not there.
    assert_eq!(guest_get(&s, f, "user.host"), Err(libc::ENODATA));
    assert_eq!(
        guest_list(&s, f),
        [
            "security.selinux",
            "trusted.overlay.opaque",
            "user.foo",
            "user.pre"
        ]
    );

    s.client
        .removexattr(f, "user.foo")
        .expect("REMOVEXATTR user.foo");
    assert_eq!(host_get(&hf, "user.docker.desktop.user.foo"), None);
    assert_eq!(s.client.removexattr(f, "user.host"), Err(libc::ENODATA));
    assert_eq!(host_get(&hf, "user.host").as_deref(), Some(&b"h"[..]));
    assert_eq!(
        host_list(&hf),
        [
            "trusted.host",
            "user.docker.desktop.security.selinux",
            "user.docker.desktop.trusted.overlay.opaque",
            "user.docker.desktop.user.pre",
            "user.host",
        ]
    );
}

#[test]
fn map_shorthand_implies_xattr() {
    // No --xattr: the map turns xattrs on, as in virtiofsd.
    let (s, f) = session_with_file(
        &["--xattrmap=:map::user.virtiofs.:"],
        &[("user.plain", b"1")],
    );
    assert_eq!(
        set_then_host_get(&s, f, "trusted.a", b"1", "user.virtiofs.trusted.a").as_deref(),
        Some(&b"1"[..])
    );
    assert_eq!(guest_list(&s, f), ["trusted.a"]);
}

#[test]
fn example_2_prefix_trusted_only() {
    let (s, f) = session_with_file(
        &["--xattr", "--xattrmap=/map/trusted./user.virtiofs./"],
        &[("trusted.host", b"t"), ("user.plain", b"u")],
    );
    let hf = s.shared.join("f");
    assert_eq!(
        set_then_host_get(
            &s,
            f,
            "trusted.overlay.opaque",
            b"y",
            "user.virtiofs.trusted.overlay.opaque"
        )
        .as_deref(),
        Some(&b"y"[..])
    );
    assert_eq!(host_get(&hf, "trusted.overlay.opaque"), None);
    // The guest cannot reach the target of the remapping directly.
    assert_eq!(
        s.client.setxattr(f, "user.virtiofs.x", b"1", 0),
        Err(libc::EPERM)
    );
    assert_eq!(
        guest_get(&s, f, "user.virtiofs.trusted.overlay.opaque"),
        Err(libc::ENODATA)
    );
    assert_eq!(
        s.client
            .removexattr(f, "user.virtiofs.trusted.overlay.opaque"),
        Err(libc::EPERM)
    );
    // Other names pass unchanged.
    s.client
        .setxattr(f, "user.other", b"o", 0)
        .expect("SETXATTR user.other");
    assert_eq!(host_get(&hf, "user.other").as_deref(), Some(&b"o"[..]));
    assert_eq!(guest_get(&s, f, "user.plain"), Ok(b"u".to_vec()));
    assert_eq!(
        guest_list(&s, f),
        ["trusted.overlay.opaque", "user.other", "user.plain"]
    );
}

#[test]
fn bad_and_unsupported_rules() {
    let map = "--xattrmap=/bad/all/user.secret./user.secret./ \
               /unsupported/all/user.nope/user.nope/ /ok/all///";
    let (s, f) = session_with_file(
        &["--xattr", map],
        &[
            ("user.secret.a", b"s"),
            ("user.nope.b", b"n"),
            ("user.fine", b"f"),
        ],
    );
    let hf = s.shared.join("f");
    assert_eq!(guest_list(&s, f), ["user.fine"]);
    assert_eq!(
        s.client.setxattr(f, "user.secret.a", b"x", 0),
        Err(libc::EPERM)
    );
    assert_eq!(guest_get(&s, f, "user.secret.a"), Err(libc::ENODATA));
    assert_eq!(s.client.removexattr(f, "user.secret.a"), Err(libc::EPERM));
    assert_eq!(
        s.client.setxattr(f, "user.nope.b", b"x", 0),
        Err(libc::EOPNOTSUPP)
    );
    assert_eq!(guest_get(&s, f, "user.nope.b"), Err(libc::EOPNOTSUPP));
    assert_eq!(
        s.client.removexattr(f, "user.nope.b"),
        Err(libc::EOPNOTSUPP)
    );
    assert_eq!(host_get(&hf, "user.secret.a").as_deref(), Some(&b"s"[..]));
    assert_eq!(host_get(&hf, "user.nope.b").as_deref(), Some(&b"n"[..]));
    assert_eq!(guest_get(&s, f, "user.fine"), Ok(b"f".to_vec()));
}

#[test]
fn everything_hidden_lists_nothing() {
    let (s, f) = session_with_file(&["--xattr", DOCKER], &[("user.host", b"h")]);
    assert!(guest_list(&s, f).is_empty());
}

#[test]
fn posix_acl_names_go_through_the_map() {
    let (s, f) = session_with_file(
        &["--posix-acl=auto", "--xattrmap=:map::user.virtiofs.:"],
        &[],
    );
    let hf = s.shared.join("f");
    // The host stores the value opaquely, so any bytes do (here an ACL header and one entry).
    let acl: &[u8] = b"\x02\0\0\0\x01\0\x06\0\xff\xff\xff\xff";
    s.client
        .setxattr(f, "system.posix_acl_access", acl, 0)
        .expect("SETXATTR ACL");
    assert_eq!(
        host_get(&hf, "user.virtiofs.system.posix_acl_access").as_deref(),
        Some(acl)
    );
    assert_eq!(host_get(&hf, "system.posix_acl_access"), None);
    assert_eq!(guest_list(&s, f), ["system.posix_acl_access"]);
}
