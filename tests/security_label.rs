//! `--security-label` against a real daemon: FUSE_SECURITY_CTX negotiation in each mode, the
//! security context a Linux guest appends to CREATE, MKNOD, MKDIR, SYMLINK and TMPFILE stored
//! as the host xattr (through `--xattrmap`), no moment at which the new name exists on the host
//! without its label, and malformed extensions answered with EINVAL.
//!
//! The host has no LSM loaded: root may still set `security.selinux` on ext4 and tmpfs, which
//! is all this needs.

mod common;
#[path = "security_label/races.rs"]
mod races;

use std::ffi::CString;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use common::fuse_abi::*;
use common::fuse_client::{from_bytes, XattrReply};
use common::{FuseClient, Session};
use vm_memory::ByteValued;

const SELINUX: &str = "security.selinux";
const CTX: &[u8] = b"system_u:object_r:container_file_t:s0\0";
const HDR: usize = 16;
const ENTRY: usize = 128;

fn cstr(s: &str) -> Vec<u8> {
    CString::new(s).unwrap().into_bytes_with_nul()
}

/// How the extension travels: as a 7.38 extension (`total_extlen`), or appended after the
/// names with `total_extlen` 0, as a 7.36/7.37 guest (Linux 5.17 to 6.3) sends it.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Carry {
    Extlen,
    AfterNames,
}

/// Sends `opcode` with `body` and `ext` appended; the reply body or the errno.
fn send(
    c: &FuseClient,
    opcode: u32,
    parent: u64,
    body: &[u8],
    ext: &[u8],
    carry: Carry,
) -> Result<Vec<u8>, i32> {
    let mut full = body.to_vec();
    full.extend(ext);
    let extlen = match carry {
        Carry::Extlen => (ext.len() / 8) as u16,
        Carry::AfterNames => 0,
    };
    let req = c.request_with_ext(opcode, parent, &full, extlen);
    let reply = c
        .guest()
        .roundtrip(c.queue(), &req, HDR + ENTRY + 16)
        .unwrap();
    FuseClient::parse_reply(&req, &reply)
}

/// One creating request of each kind (`name` in `parent`), its body without extension.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Op {
    Create,
    Mkdir,
    Mknod,
    Symlink,
}

const OPS: [Op; 4] = [Op::Create, Op::Mkdir, Op::Mknod, Op::Symlink];

fn body(op: Op, name: &str) -> (u32, Vec<u8>) {
    let (opcode, mut b) = match op {
        Op::Create => {
            let i = CreateIn {
                flags: (libc::O_RDWR | libc::O_CREAT | libc::O_EXCL) as u32,
                mode: libc::S_IFREG | 0o644,
                umask: 0o022,
                fuse_flags: 0,
            };
            (FUSE_CREATE, i.as_slice().to_vec())
        }
        Op::Mkdir => (
            FUSE_MKDIR,
            MkdirIn {
                mode: 0o755,
                umask: 0o022,
            }
            .as_slice()
            .to_vec(),
        ),
        Op::Mknod => (
            FUSE_MKNOD,
            MknodIn {
                mode: libc::S_IFIFO | 0o644,
                rdev: 0,
                umask: 0o022,
                padding: 0,
            }
            .as_slice()
            .to_vec(),
        ),
        Op::Symlink => (FUSE_SYMLINK, Vec::new()),
    };
    b.extend(cstr(name));
    if op == Op::Symlink {
        b.extend(cstr("target-of-the-link"));
    }
    (opcode, b)
}

/// Creates `name` in the root with `ext`; the new entry (a CREATE's file is released).
fn create(c: &FuseClient, op: Op, name: &str, ext: &[u8], carry: Carry) -> Result<EntryOut, i32> {
    let (opcode, b) = body(op, name);
    let reply = send(c, opcode, FUSE_ROOT_ID, &b, ext, carry)?;
    let e: EntryOut = from_bytes(&reply, "entry");
    if op == Op::Create {
        let o: OpenOut = from_bytes(&reply[ENTRY..], "open");
        c.release(e.nodeid, o.fh, libc::O_RDWR as u32).unwrap();
    }
    Ok(e)
}

/// [`create`] with the label `CTX` in a 7.38 extension.
fn create_labelled(c: &FuseClient, op: Op, name: &str) -> Result<EntryOut, i32> {
    create(c, op, name, &secctx(SELINUX.as_bytes(), CTX), Carry::Extlen)
}

fn lget(p: &Path, name: &str) -> Result<Vec<u8>, i32> {
    let path = CString::new(p.as_os_str().as_bytes()).unwrap();
    let n = CString::new(name).unwrap();
    let mut buf = vec![0u8; 4096];
    // SAFETY: valid C strings; `buf` is writable for its length.
    let r = unsafe {
        libc::lgetxattr(
            path.as_ptr(),
            n.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    if r < 0 {
        return Err(std::io::Error::last_os_error().raw_os_error().unwrap());
    }
    buf.truncate(r as usize);
    Ok(buf)
}

/// The names in the share (the staging directories must be gone).
fn listing(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

fn kind_of(p: &Path) -> u32 {
    fs::symlink_metadata(p).unwrap().mode() & libc::S_IFMT
}

#[test]
fn negotiation_follows_the_mode() {
    for (args, offered, expect) in [
        (&[][..], true, Ok(false)),
        (&["--security-label=never"], true, Ok(false)),
        (&["-o", "no_security_label"], true, Ok(false)),
        (&["--security-label=auto"], true, Ok(true)),
        (&["--security-label=auto"], false, Ok(false)),
        (&["--security-label"], true, Ok(true)),
        (&["-o", "security_label"], true, Ok(true)),
        (&["--security-label=always"], false, Err(libc::EPROTO)),
    ] {
        let mut s = Session::start(args);
        // The session above negotiated with the Linux 6.12 flags; start over with the offer.
        let flags = if offered {
            LINUX_6_12_VIRTIOFS_INIT_FLAGS
        } else {
            LINUX_6_12_VIRTIOFS_INIT_FLAGS & !FUSE_SECURITY_CTX
        };
        let got = s
            .client
            .init_with(flags)
            .map(|_| s.client.flags() & FUSE_SECURITY_CTX != 0);
        assert_eq!(got, expect, "{args:?} offered={offered}");
        assert!(s.daemon.is_alive());
    }
}

#[test]
fn each_creating_op_stores_the_label_before_the_reply() {
    let s = Session::start(&["--security-label"]);
    let c = &s.client;
    assert_ne!(c.flags() & FUSE_SECURITY_CTX, 0);
    for carry in [Carry::Extlen, Carry::AfterNames] {
        for op in OPS {
            let name = format!("{op:?}-{carry:?}");
            let e = create(c, op, &name, &secctx(SELINUX.as_bytes(), CTX), carry)
                .unwrap_or_else(|e| panic!("{op:?} {carry:?}: errno {e}"));
            let host = s.shared.join(&name);
            assert_eq!(lget(&host, SELINUX), Ok(CTX.to_vec()), "{op:?} {carry:?}");
            let expect_kind = match op {
                Op::Create => libc::S_IFREG,
                Op::Mkdir => libc::S_IFDIR,
                Op::Mknod => libc::S_IFIFO,
                Op::Symlink => libc::S_IFLNK,
            };
            assert_eq!(kind_of(&host), expect_kind, "{op:?}");
            assert_eq!(e.attr.mode & libc::S_IFMT, expect_kind, "{op:?}");
            if op != Op::Symlink {
                // The guest's umask is applied by the guest (no DONT_MASK): the mode as sent.
                let perm = fs::symlink_metadata(&host).unwrap().permissions().mode() & 0o7777;
                assert_eq!(perm, if op == Op::Mkdir { 0o755 } else { 0o644 }, "{op:?}");
            }
            // The guest reads it back through GETXATTR.
            if matches!(op, Op::Create | Op::Mkdir) {
                match c.getxattr(e.nodeid, SELINUX, 4096).unwrap() {
                    XattrReply::Data(v) => assert_eq!(v, CTX),
                    other => panic!("{other:?}"),
                }
            }
        }
    }
    assert_eq!(
        fs::read_link(s.shared.join("Symlink-Extlen")).unwrap(),
        Path::new("target-of-the-link")
    );
    // An empty header (no LSM in the guest): created, unlabelled.
    let bare = [8u8, 0, 0, 0, 0, 0, 0, 0];
    for op in OPS {
        let name = format!("{op:?}-bare");
        create(c, op, &name, &bare, Carry::Extlen).unwrap();
        assert_eq!(
            lget(&s.shared.join(&name), SELINUX),
            Err(libc::ENODATA),
            "{op:?}"
        );
    }
    // Only the created names: no staging directory left behind.
    assert!(
        listing(s.shared.path())
            .iter()
            .all(|n| !n.starts_with(".vhostfs")),
        "{:?}",
        listing(s.shared.path())
    );
    assert_eq!(listing(s.shared.path()).len(), 12);
}

#[test]
fn a_guest_user_gets_its_own_node_and_existing_names_are_kept() {
    let s = Session::start(&["--security-label"]);
    fs::set_permissions(s.shared.path(), fs::Permissions::from_mode(0o777)).unwrap();
    let user = s.client.with_creds(1000, 1000);
    for op in OPS {
        let name = format!("{op:?}-user");
        create_labelled(&user, op, &name).unwrap();
        let host = s.shared.join(&name);
        let md = fs::symlink_metadata(&host).unwrap();
        assert_eq!((md.uid(), md.gid()), (1000, 1000), "{op:?}");
        assert_eq!(lget(&host, SELINUX), Ok(CTX.to_vec()), "{op:?}");
    }
    // A guest user without write access to the directory creates nothing.
    fs::create_dir(s.shared.join("closed")).unwrap();
    let closed = s.client.lookup(FUSE_ROOT_ID, "closed").unwrap();
    for op in OPS {
        let (opcode, b) = body(op, "x");
        let r = send(
            &user,
            opcode,
            closed.nodeid,
            &b,
            &secctx(SELINUX.as_bytes(), CTX),
            Carry::Extlen,
        );
        assert_eq!(r.err(), Some(libc::EACCES), "{op:?}");
    }
    assert!(listing(&s.shared.join("closed")).is_empty());
    // An existing name: EEXIST (exclusive), and the existing node keeps its (missing) label.
    fs::write(s.shared.join("existing"), b"old").unwrap();
    for op in OPS {
        let r = create_labelled(&s.client, op, "existing");
        assert_eq!(r.err(), Some(libc::EEXIST), "{op:?}");
    }
    // A CREATE without O_EXCL opens the existing file, as without labels.
    let i = CreateIn {
        flags: libc::O_RDWR as u32,
        mode: libc::S_IFREG | 0o644,
        umask: 0,
        fuse_flags: 0,
    };
    let mut b = i.as_slice().to_vec();
    b.extend(cstr("existing"));
    let reply = send(
        &s.client,
        FUSE_CREATE,
        FUSE_ROOT_ID,
        &b,
        &secctx(SELINUX.as_bytes(), CTX),
        Carry::Extlen,
    )
    .unwrap();
    let e: EntryOut = from_bytes(&reply, "entry");
    let o: OpenOut = from_bytes(&reply[ENTRY..], "open");
    assert_eq!(s.client.read(e.nodeid, o.fh, 0, 16).unwrap(), b"old");
    assert_eq!(
        lget(&s.shared.join("existing"), SELINUX),
        Err(libc::ENODATA)
    );
    assert!(listing(s.shared.path())
        .iter()
        .all(|n| !n.starts_with(".vhostfs")));
}

#[test]
fn labelled_nodes_get_the_translated_owner() {
    let s = Session::start(&[
        "--security-label",
        "--translate-uid=map:1000:2000:1",
        "--translate-gid=map:1000:2000:1",
    ]);
    fs::set_permissions(s.shared.path(), fs::Permissions::from_mode(0o777)).unwrap();
    let user = s.client.with_creds(1000, 1000);
    for op in OPS {
        let name = format!("{op:?}-translated");
        let e = create_labelled(&user, op, &name).unwrap();
        assert_eq!(
            (e.attr.uid, e.attr.gid),
            (1000, 1000),
            "{op:?}: the guest's view"
        );
        let md = fs::symlink_metadata(s.shared.join(&name)).unwrap();
        assert_eq!((md.uid(), md.gid()), (2000, 2000), "{op:?}: the host's");
        assert_eq!(
            lget(&s.shared.join(&name), SELINUX),
            Ok(CTX.to_vec()),
            "{op:?}"
        );
    }
}

#[test]
fn tmpfile_is_labelled_before_it_gets_a_name() {
    let s = Session::start(&["--security-label"]);
    let c = &s.client;
    let i = CreateIn {
        flags: libc::O_RDWR as u32,
        mode: libc::S_IFREG | 0o600,
        umask: 0,
        fuse_flags: 0,
    };
    let mut b = i.as_slice().to_vec();
    b.extend(cstr("/"));
    let reply = send(
        c,
        FUSE_TMPFILE,
        FUSE_ROOT_ID,
        &b,
        &secctx(SELINUX.as_bytes(), CTX),
        Carry::Extlen,
    )
    .unwrap();
    let e: EntryOut = from_bytes(&reply, "entry");
    c.link(e.nodeid, FUSE_ROOT_ID, "linked-tmpfile").unwrap();
    assert_eq!(
        lget(&s.shared.join("linked-tmpfile"), SELINUX),
        Ok(CTX.to_vec())
    );
}

#[test]
fn the_label_name_goes_through_the_xattr_map() {
    let s = Session::start(&[
        "--security-label",
        "--xattrmap=:map:security.:user.virtiofs.:",
    ]);
    for op in [Op::Create, Op::Mkdir] {
        let name = format!("{op:?}-mapped");
        let e = create_labelled(&s.client, op, &name).unwrap();
        let host = s.shared.join(&name);
        assert_eq!(
            lget(&host, "user.virtiofs.security.selinux"),
            Ok(CTX.to_vec()),
            "{op:?}"
        );
        assert_eq!(lget(&host, SELINUX), Err(libc::ENODATA), "{op:?}");
        // The guest sees its own name.
        match s.client.getxattr(e.nodeid, SELINUX, 4096).unwrap() {
            XattrReply::Data(v) => assert_eq!(v, CTX),
            other => panic!("{other:?}"),
        }
    }
    drop(s);
    // A map that refuses the name: the creation fails as a SETXATTR would (EPERM), nothing left.
    let s = Session::start(&[
        "--security-label",
        "--xattrmap=:bad:all:security.:::ok:all:::",
    ]);
    for op in OPS {
        let r = create_labelled(&s.client, op, "refused");
        assert_eq!(r.err(), Some(libc::EPERM), "{op:?}");
    }
    assert!(
        listing(s.shared.path()).is_empty(),
        "{:?}",
        listing(s.shared.path())
    );
}

#[test]
fn malformed_extensions_are_einval_and_create_nothing() {
    let mut s = Session::start(&["--security-label"]);
    let good = secctx(SELINUX.as_bytes(), CTX);
    // The record with the u32 at byte `at` (0: record size, 4: contexts, 8: context size)
    // replaced by `n`.
    let with = |at: usize, n: u32| {
        let mut v = good.clone();
        v[at..at + 4].copy_from_slice(&n.to_le_bytes());
        v
    };
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("missing", Vec::new()),
        ("two contexts", with(4, 2)),
        ("two records", [good.clone(), good.clone()].concat()),
        ("supplementary groups", with(4, 32)),
        ("unknown type", with(4, 77)),
        ("record overruns", with(0, 4096)),
        ("record below header", with(0, 4)),
        ("context overruns", with(8, 4000)),
        ("zero context", with(8, 0)),
        (
            "cut header",
            good[..8]
                .iter()
                .copied()
                .chain([1u8, 0, 0, 0, 0, 0, 0, 0])
                .collect(),
        ),
        ("not security.*", secctx(b"trusted.overlay.opaque", b"y")),
    ];
    for (what, ext) in &cases {
        for op in OPS {
            let r = create(&s.client, op, "bad", ext, Carry::Extlen);
            assert_eq!(r.err(), Some(libc::EINVAL), "{what} {op:?}");
        }
    }
    // total_extlen claiming more than the request holds.
    let (opcode, b) = body(Op::Mkdir, "bad");
    let mut req = s.client.request_with_ext(opcode, FUSE_ROOT_ID, &b, 200);
    req.extend(&good);
    let len = req.len() as u32;
    req[0..4].copy_from_slice(&len.to_le_bytes());
    let reply = s.client.guest().roundtrip(0, &req, HDR + ENTRY).unwrap();
    assert_eq!(
        FuseClient::parse_reply(&req, &reply).err(),
        Some(libc::EINVAL)
    );
    assert!(
        listing(s.shared.path()).is_empty(),
        "{:?}",
        listing(s.shared.path())
    );
    assert!(s.daemon.is_alive());
    // Still serving.
    create(&s.client, Op::Create, "good", &good, Carry::Extlen).unwrap();
}
