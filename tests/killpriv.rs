//! `--killpriv-v2` (FUSE_HANDLE_KILLPRIV_V2): setuid/setgid cleared on the host exactly when
//! the guest's kill flags say so (WRITE, truncating SETATTR, OPEN and CREATE with O_TRUNC), as
//! Linux clears them for a caller without CAP_FSETID; chown clears them (the host kernel);
//! `security.capability` cleared on write, truncate and chown, also when `--xattrmap` moved it
//! to another name. And FUSE_SETXATTR_EXT under `--posix-acl`: FUSE_SETXATTR_ACL_KILL_SGID
//! clears the setgid bit. Callers are guest root and a guest user (uid/gid in the header).

mod common;

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use common::fuse_abi::*;
use common::fuse_client::XattrReply;
use common::{FuseClient, Session};
use vm_memory::ByteValued;

const FUSE_WRITE_KILL_SUIDGID: u32 = 1 << 2;
const FUSE_OPEN_KILL_SUIDGID: u32 = 1 << 0;
const FATTR_KILL_SUIDGID: u32 = 1 << 11;
const FUSE_SETXATTR_ACL_KILL_SGID: u32 = 1 << 0;
const HDR: usize = std::mem::size_of::<OutHeader>();

/// The guest user the tests act as, and the owner of the files.
const USER: u32 = 1000;
/// A group the user is not in.
const OTHER_GROUP: u32 = 2000;

/// A vfs_cap_data (revision 2): cap_net_raw, permitted and effective.
const CAPS: [u8; 20] = [
    1, 0, 0, 2, 0, 0x20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
];

fn all_flags(init: &InitOut) -> u64 {
    u64::from(init.flags) | (u64::from(init.flags2) << 32)
}

fn host_mode(path: &Path) -> u32 {
    fs::metadata(path).unwrap().mode() & 0o7777
}

/// What Linux leaves of `mode` after a write or truncate by a caller without CAP_FSETID whose
/// gid is `gid`, on a file of group `file_gid`.
fn killed(mode: u32, gid: u32, file_gid: u32) -> u32 {
    let mut m = mode & !0o4000;
    if mode & 0o010 != 0 || gid != file_gid {
        m &= !0o2000;
    }
    m
}

/// A file `name` of `mode`, owned by USER:USER, with some data; its node ID.
fn file(s: &Session, name: &str, mode: u32) -> u64 {
    let p = s.shared.join(name);
    fs::write(&p, b"0123456789").unwrap();
    std::os::unix::fs::chown(&p, Some(USER), Some(USER)).unwrap();
    fs::set_permissions(&p, fs::Permissions::from_mode(mode)).unwrap();
    assert_eq!(host_mode(&p), mode);
    s.client.lookup(ROOT, name).unwrap().nodeid
}

fn host_xattr(path: &Path, name: &str) -> Option<Vec<u8>> {
    let p = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    let n = std::ffi::CString::new(name).unwrap();
    let mut buf = [0u8; 256];
    // SAFETY: C strings and a writable buffer of the given size.
    let r = unsafe { libc::getxattr(p.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), 256) };
    (r >= 0).then(|| buf[..r as usize].to_vec())
}

fn set_host_xattr(path: &Path, name: &str, value: &[u8]) {
    let p = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    let n = std::ffi::CString::new(name).unwrap();
    // SAFETY: C strings and a value of the given size.
    let r = unsafe {
        libc::setxattr(
            p.as_ptr(),
            n.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    assert_eq!(r, 0, "setxattr {name}: {}", std::io::Error::last_os_error());
}

fn write_flagged(c: &FuseClient, nodeid: u64, fh: u64, write_flags: u32) -> Result<u32, i32> {
    let inp = WriteIn {
        fh,
        offset: 2,
        size: 3,
        fuse_flags: write_flags,
        ..Default::default()
    };
    let mut body = inp.as_slice().to_vec();
    body.extend_from_slice(b"abc");
    let out: WriteOut =
        common::fuse_client::from_bytes(&c.raw(FUSE_WRITE, nodeid, &body, HDR + 8)?, "WRITE");
    Ok(out.size)
}

fn open_flagged(c: &FuseClient, nodeid: u64, flags: u32, open_flags: u32) -> Result<u64, i32> {
    let inp = OpenIn {
        flags,
        fuse_flags: open_flags,
    };
    let out: OpenOut = common::fuse_client::from_bytes(
        &c.raw(FUSE_OPEN, nodeid, inp.as_slice(), HDR + 16)?,
        "OPEN",
    );
    Ok(out.fh)
}

/// The modes the write and truncate cases run on, and the caller gids: in the file's group
/// (a setgid file that is not group-executable keeps its bit) and outside it.
const MODES: [u32; 5] = [0o4755, 0o2755, 0o2745, 0o6755, 0o0755];
const GIDS: [u32; 2] = [USER, OTHER_GROUP];

#[test]
fn init_negotiates_killpriv_v2_only_with_the_option() {
    for (extra, on) in [
        (&[][..], false),
        (&["--no-killpriv-v2"], false),
        (&["--killpriv-v2"], true),
        (&["-o", "killpriv_v2"], true),
        (&["--killpriv-v2", "-o", "no_killpriv_v2"], false),
    ] {
        let s = Session::start(extra);
        let flags = all_flags(&s.init);
        assert_eq!(flags & FUSE_HANDLE_KILLPRIV_V2 != 0, on, "{extra:?}");
        // Never the old protocol (the daemon would have to clear on every write).
        assert_eq!(flags & FUSE_HANDLE_KILLPRIV, 0, "{extra:?}");
    }
    // A guest that does not offer it gets a session without it.
    let s = Session::start(&["--killpriv-v2"]);
    let init = s
        .client
        .init_with(LINUX_6_12_VIRTIOFS_INIT_FLAGS & !FUSE_HANDLE_KILLPRIV_V2)
        .unwrap();
    assert_eq!(all_flags(&init) & FUSE_HANDLE_KILLPRIV_V2, 0);
}

#[test]
fn write_clears_exactly_when_flagged() {
    for option in [true, false] {
        let s = Session::start(if option { &["--killpriv-v2"][..] } else { &[] });
        for (i, mode) in MODES.into_iter().enumerate() {
            for (uid, gid) in [(USER, GIDS[0]), (USER, GIDS[1]), (0, 0)] {
                let c = s.client.with_creds(uid, gid);
                for flag in [0, FUSE_WRITE_KILL_SUIDGID] {
                    let name = format!("w{i}-{uid}-{gid}-{flag}");
                    let node = file(&s, &name, mode);
                    let fh = open_flagged(&c, node, RDWR, 0).unwrap();
                    assert_eq!(write_flagged(&c, node, fh, flag), Ok(3));
                    let want = if option && flag != 0 {
                        killed(mode, gid, USER)
                    } else {
                        mode
                    };
                    let path = s.shared.join(&name);
                    assert_eq!(
                        host_mode(&path),
                        want,
                        "{name}: mode {mode:o}, --killpriv-v2 {option}"
                    );
                    assert_eq!(fs::read(&path).unwrap(), b"01abc56789");
                    // The reply's view agrees with the host.
                    let attr = c.getattr(node, Some(fh)).unwrap().attr;
                    assert_eq!(attr.mode & 0o7777, want, "{name}");
                    c.release(node, fh, 0).unwrap();
                }
            }
        }
    }
}

#[test]
fn truncate_clears_exactly_when_flagged() {
    for option in [true, false] {
        let s = Session::start(if option { &["--killpriv-v2"][..] } else { &[] });
        for (i, mode) in MODES.into_iter().enumerate() {
            for (uid, gid) in [(USER, GIDS[0]), (USER, GIDS[1]), (0, 0)] {
                let c = s.client.with_creds(uid, gid);
                for flag in [0, FATTR_KILL_SUIDGID] {
                    let name = format!("t{i}-{uid}-{gid}-{flag}");
                    let node = file(&s, &name, mode);
                    let mut attr = set_size(4);
                    attr.valid |= flag;
                    let out = c
                        .setattr(node, &attr)
                        .unwrap_or_else(|e| panic!("{name} {option}: {e}"));
                    // A guest user without the flag is one with CAP_FSETID: the bits stay
                    // although the truncate runs under its fsuid.
                    let want = if option && flag != 0 {
                        killed(mode, gid, USER)
                    } else {
                        mode
                    };
                    assert_eq!(
                        out.attr.mode & 0o7777,
                        want,
                        "{name}, --killpriv-v2 {option}"
                    );
                    assert_eq!(out.attr.size, 4);
                    assert_eq!(host_mode(&s.shared.join(&name)), want, "{name}");
                }
            }
        }
        // Through an open file (ftruncate) too.
        let node = file(&s, "ft", 0o6755);
        let c = s.client.with_creds(USER, OTHER_GROUP);
        let fh = open_flagged(&c, node, RDWR, 0).unwrap();
        let mut attr = with_fh(set_size(0), fh);
        attr.valid |= FATTR_KILL_SUIDGID;
        let out = c.setattr(node, &attr).unwrap();
        let want = if option { 0o0755 } else { 0o6755 };
        assert_eq!(out.attr.mode & 0o7777, want);
        assert_eq!(host_mode(&s.shared.join("ft")), want);
    }
}

#[test]
fn open_and_create_with_o_trunc_clear_exactly_when_flagged() {
    let s = Session::start(&["--killpriv-v2"]);
    let trunc = RDWR | libc::O_TRUNC as u32;
    for (uid, gid) in [(USER, GIDS[0]), (USER, GIDS[1]), (0, 0)] {
        let c = s.client.with_creds(uid, gid);
        for flag in [0, FUSE_OPEN_KILL_SUIDGID] {
            let name = format!("o-{uid}-{gid}-{flag}");
            let node = file(&s, &name, 0o6745);
            let fh = open_flagged(&c, node, trunc, flag).unwrap();
            let path = s.shared.join(&name);
            assert_eq!(fs::metadata(&path).unwrap().len(), 0);
            let want = if flag != 0 {
                killed(0o6745, gid, USER)
            } else {
                0o6745
            };
            assert_eq!(host_mode(&path), want, "{name}");
            c.release(node, fh, 0).unwrap();
            // Without O_TRUNC the flag changes nothing.
            let node = file(&s, &format!("{name}-keep"), 0o6745);
            let fh = open_flagged(&c, node, RDWR, flag).unwrap();
            assert_eq!(host_mode(&s.shared.join(&format!("{name}-keep"))), 0o6745);
            c.release(node, fh, 0).unwrap();

            // CREATE of a name that exists on the host: O_TRUNC truncates it.
            let name = format!("c-{uid}-{gid}-{flag}");
            file(&s, &name, 0o6755);
            let inp = CreateIn {
                flags: trunc,
                mode: 0o644,
                umask: 0,
                fuse_flags: flag,
            };
            let mut body = inp.as_slice().to_vec();
            body.extend_from_slice(name.as_bytes());
            body.push(0);
            let reply = c.raw(FUSE_CREATE, ROOT, &body, HDR + 128 + 16).unwrap();
            let entry: EntryOut = common::fuse_client::from_bytes(&reply, "CREATE entry");
            let path = s.shared.join(&name);
            assert_eq!(fs::metadata(&path).unwrap().len(), 0);
            let want = if flag != 0 { 0o0755 } else { 0o6755 };
            assert_eq!(host_mode(&path), want, "{name}");
            assert_eq!(entry.attr.mode & 0o7777, want, "{name}");
        }
    }
}

#[test]
fn chown_clears_setuid_and_capabilities() {
    for option in [true, false] {
        let s = Session::start(if option { &["--killpriv-v2"][..] } else { &[] });
        for (mode, want) in [(0o6755, 0o0755), (0o6745, 0o2745)] {
            let name = format!("chown-{mode:o}");
            let node = file(&s, &name, mode);
            let path = s.shared.join(&name);
            set_host_xattr(&path, "security.capability", &CAPS);
            let mut attr = set_uid(USER + 1);
            if option {
                // A Linux guest with KILLPRIV_V2 flags every chown of a non-directory.
                attr.valid |= FATTR_KILL_SUIDGID;
            }
            let out = s.client.setattr(node, &attr).unwrap();
            // setuid always goes; setgid of a file that is not group-executable stays for root.
            assert_eq!(out.attr.mode & 0o7777, want, "{name}");
            assert_eq!(host_mode(&path), want, "{name}");
            assert_eq!(fs::metadata(&path).unwrap().uid(), USER + 1);
            assert_eq!(host_xattr(&path, "security.capability"), None, "{name}");
        }
    }
}

#[test]
fn write_and_truncate_clear_security_capability() {
    let s = Session::start(&["--killpriv-v2"]);
    let node = file(&s, "cap", 0o755);
    let path = s.shared.join("cap");
    let c = s.client.with_creds(USER, USER);
    let fh = open_flagged(&c, node, RDWR, 0).unwrap();
    for flag in [0, FUSE_WRITE_KILL_SUIDGID] {
        set_host_xattr(&path, "security.capability", &CAPS);
        assert_eq!(write_flagged(&c, node, fh, flag), Ok(3));
        assert_eq!(host_xattr(&path, "security.capability"), None, "{flag}");
    }
    for flag in [0, FATTR_KILL_SUIDGID] {
        set_host_xattr(&path, "security.capability", &CAPS);
        let mut attr = set_size(1);
        attr.valid |= flag;
        c.setattr(node, &attr).unwrap();
        assert_eq!(host_xattr(&path, "security.capability"), None, "{flag}");
    }
}

/// `--xattrmap` moves the guest's `security.capability` to `user.virtiofs.security.capability`:
/// the host kernel does not know it, the daemon clears it on write, truncate, O_TRUNC open and
/// chown, with or without `--killpriv-v2` (as the host kernel clears its own).
#[test]
fn mapped_security_capability_is_cleared_too() {
    const HOST_NAME: &str = "user.virtiofs.security.capability";
    for option in [true, false] {
        let mut extra = vec!["--xattrmap=:map::user.virtiofs.:"];
        if option {
            extra.push("--killpriv-v2");
        }
        let s = Session::start(&extra);
        let node = file(&s, "mapped", 0o755);
        let path = s.shared.join("mapped");
        let set = || {
            s.client
                .setxattr(node, "security.capability", &CAPS, 0)
                .unwrap();
            assert_eq!(host_xattr(&path, HOST_NAME).as_deref(), Some(&CAPS[..]));
            assert_eq!(host_xattr(&path, "security.capability"), None);
            match s.client.getxattr(node, "security.capability", 64).unwrap() {
                XattrReply::Data(d) => assert_eq!(d, CAPS),
                other => panic!("{other:?}"),
            }
        };
        let gone = |what: &str| {
            assert_eq!(
                host_xattr(&path, HOST_NAME),
                None,
                "{what}, --killpriv-v2 {option}"
            );
            assert_eq!(
                s.client.getxattr(node, "security.capability", 64),
                Err(libc::ENODATA),
                "{what}"
            );
        };
        let fh = open_flagged(&s.client, node, RDWR, 0).unwrap();
        set();
        assert_eq!(write_flagged(&s.client, node, fh, 0), Ok(3));
        gone("write");
        // Writes to a file without it go through.
        assert_eq!(write_flagged(&s.client, node, fh, 0), Ok(3));
        set();
        s.client.setattr(node, &set_size(2)).unwrap();
        gone("truncate");
        set();
        let fh2 = open_flagged(&s.client, node, RDWR | libc::O_TRUNC as u32, 0).unwrap();
        gone("O_TRUNC open");
        set();
        s.client.setattr(node, &set_uid(USER + 1)).unwrap();
        gone("chown");
        // Other xattrs and other operations leave it.
        set();
        s.client.setattr(node, &set_mode(0o750)).unwrap();
        s.client.setxattr(node, "user.other", b"x", 0).unwrap();
        assert!(host_xattr(&path, HOST_NAME).is_some());
        s.client.release(node, fh, 0).unwrap();
        s.client.release(node, fh2, 0).unwrap();
    }
}

/// A minimal access ACL (user::rwx group::r-x other::r-x, plus a named user and mask, so the
/// host keeps it as an ACL rather than folding it into the mode).
fn access_acl() -> Vec<u8> {
    let mut v = 2u32.to_le_bytes().to_vec();
    for (tag, perm, id) in [
        (0x01u16, 7u16, u32::MAX),
        (0x02, 5, 1234),
        (0x04, 5, u32::MAX),
        (0x10, 5, u32::MAX),
        (0x20, 5, u32::MAX),
    ] {
        v.extend_from_slice(&tag.to_le_bytes());
        v.extend_from_slice(&perm.to_le_bytes());
        v.extend_from_slice(&id.to_le_bytes());
    }
    v
}

fn setxattr_ext(
    c: &FuseClient,
    node: u64,
    name: &str,
    value: &[u8],
    sflags: u32,
) -> Result<(), i32> {
    let inp = SetxattrInExt {
        size: value.len() as u32,
        flags: 0,
        setxattr_flags: sflags,
        padding: 0,
    };
    let mut body = inp.as_slice().to_vec();
    body.extend_from_slice(name.as_bytes());
    body.push(0);
    body.extend_from_slice(value);
    c.raw(FUSE_SETXATTR, node, &body, HDR).map(drop)
}

#[test]
fn setxattr_ext_acl_kill_sgid() {
    let s = Session::start(&["--posix-acl"]);
    assert_ne!(all_flags(&s.init) & FUSE_SETXATTR_EXT, 0);
    for (i, flag) in [0, FUSE_SETXATTR_ACL_KILL_SGID].into_iter().enumerate() {
        let name = format!("acl{i}");
        let node = file(&s, &name, 0o2755);
        let path = s.shared.join(&name);
        setxattr_ext(
            &s.client,
            node,
            "system.posix_acl_access",
            &access_acl(),
            flag,
        )
        .unwrap();
        let want = if flag != 0 { 0o0755 } else { 0o2755 };
        assert_eq!(host_mode(&path), want, "{name}");
        assert!(host_xattr(&path, "system.posix_acl_access").is_some());
        // Another name with the flag: no change to the mode.
        setxattr_ext(&s.client, node, "user.x", b"1", FUSE_SETXATTR_ACL_KILL_SGID).unwrap();
        assert_eq!(host_mode(&path), want, "{name}");
        assert_eq!(host_xattr(&path, "user.x").as_deref(), Some(&b"1"[..]));
    }
    // A guest without SETXATTR_EXT still gets ACLs, and sends the compat struct.
    let init = s
        .client
        .init_with(LINUX_6_12_VIRTIOFS_INIT_FLAGS & !FUSE_SETXATTR_EXT)
        .unwrap();
    assert_eq!(all_flags(&init) & FUSE_SETXATTR_EXT, 0);
    assert_ne!(all_flags(&init) & FUSE_POSIX_ACL, 0);
    let node = file(&s, "compat", 0o2755);
    s.client
        .setxattr(node, "system.posix_acl_access", &access_acl(), 0)
        .unwrap();
    assert!(host_xattr(&s.shared.join("compat"), "system.posix_acl_access").is_some());
    assert_eq!(host_mode(&s.shared.join("compat")), 0o2755);
}
