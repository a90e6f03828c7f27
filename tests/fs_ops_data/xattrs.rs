//! The xattr operations with `--xattr`, and ENOSYS without it.

use super::*;

#[test]
fn xattrs_with_the_xattr_option() {
    let s = Session::start(&["--xattr"]);
    let c = &s.client;
    let path = s.shared.join("f");
    fs::write(&path, b"").unwrap();
    let e = c.lookup(ROOT, "f").unwrap();

    c.setxattr(e.nodeid, "user.color", b"blue", 0)
        .expect("SETXATTR");
    assert_eq!(
        host_xattr(&path, "user.color").as_deref(),
        Some(&b"blue"[..])
    );
    c.setxattr(e.nodeid, "user.empty", b"", 0)
        .expect("SETXATTR empty value");
    assert_eq!(
        c.setxattr(e.nodeid, "user.color", b"red", libc::XATTR_CREATE as u32)
            .err(),
        Some(libc::EEXIST)
    );
    assert_eq!(
        c.setxattr(e.nodeid, "user.none", b"x", libc::XATTR_REPLACE as u32)
            .err(),
        Some(libc::ENODATA)
    );
    c.setxattr(e.nodeid, "user.color", b"green", libc::XATTR_REPLACE as u32)
        .unwrap();
    assert_eq!(
        host_xattr(&path, "user.color").as_deref(),
        Some(&b"green"[..])
    );

    assert_eq!(
        c.getxattr(e.nodeid, "user.color", 0),
        Ok(XattrReply::Size(5))
    );
    assert_eq!(
        c.getxattr(e.nodeid, "user.color", 100),
        Ok(XattrReply::Data(b"green".to_vec()))
    );
    assert_eq!(
        c.getxattr(e.nodeid, "user.color", 2).err(),
        Some(libc::ERANGE)
    );
    assert_eq!(
        c.getxattr(e.nodeid, "user.empty", 0),
        Ok(XattrReply::Size(0))
    );
    assert_eq!(
        c.getxattr(e.nodeid, "user.missing", 0).err(),
        Some(libc::ENODATA)
    );
    assert_eq!(
        c.getxattr(e.nodeid, "user.missing", 64).err(),
        Some(libc::ENODATA)
    );

    let list = b"user.color\0user.empty\0";
    assert_eq!(
        c.listxattr(e.nodeid, 0),
        Ok(XattrReply::Size(list.len() as u32))
    );
    let Ok(XattrReply::Data(names)) = c.listxattr(e.nodeid, 1024) else {
        panic!("LISTXATTR failed");
    };
    let names: BTreeSet<&[u8]> = names.split(|&b| b == 0).filter(|n| !n.is_empty()).collect();
    assert_eq!(names, [&b"user.color"[..], b"user.empty"].into());
    assert_eq!(c.listxattr(e.nodeid, 3).err(), Some(libc::ERANGE));

    c.removexattr(e.nodeid, "user.color").expect("REMOVEXATTR");
    assert_eq!(host_xattr(&path, "user.color"), None);
    assert_eq!(
        c.removexattr(e.nodeid, "user.color").err(),
        Some(libc::ENODATA)
    );
    assert_eq!(
        c.getxattr(e.nodeid, "user.color", 0).err(),
        Some(libc::ENODATA)
    );

    // On a directory too.
    c.setxattr(ROOT, "user.dir", b"1", 0).unwrap();
    assert_eq!(
        host_xattr(s.shared.path(), "user.dir").as_deref(),
        Some(&b"1"[..])
    );
}

#[test]
fn xattrs_without_the_option_are_enosys() {
    let s = Session::start(&[]);
    let c = &s.client;
    let path = s.shared.join("f");
    fs::write(&path, b"").unwrap();
    let e = c.lookup(ROOT, "f").unwrap();
    assert_eq!(
        c.setxattr(e.nodeid, "user.a", b"1", 0).err(),
        Some(libc::ENOSYS)
    );
    assert_eq!(host_xattr(&path, "user.a"), None);
    assert_eq!(c.getxattr(e.nodeid, "user.a", 0).err(), Some(libc::ENOSYS));
    assert_eq!(c.listxattr(e.nodeid, 0).err(), Some(libc::ENOSYS));
    assert_eq!(c.removexattr(e.nodeid, "user.a").err(), Some(libc::ENOSYS));
}
