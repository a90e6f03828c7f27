//! SETATTR as a guest user's kernel sends it (issue 38; pjdfstest chmod/12.t, chown/00.t,
//! chown/05.t): the guest's kernel has checked the caller's right with what the daemon is not
//! told (supplementary groups), so the host must carry out
//! - the mode a non-owner's write leaves (setuid/setgid cleared: the kernel's SETATTR of the
//!   mode, from the writer, who could not make that chmod itself);
//! - the owner's chgrp to one of its supplementary groups, through the file, a symlink (the
//!   guest sends the target's node) and lchown (the link's node), with setuid/setgid cleared
//!   as Linux clears them for a non-root chown;
//! - a truncate and a `touch` by a user who may write the file through a supplementary group;
//!
//! and still refuse what no guest kernel sends for a user: a mode change by a non-owner that
//! is more than clearing those bits, a chgrp by a non-owner, a chown to another uid. Every
//! case in both `--inode-file-handles` modes that reach inodes differently.

mod common;

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use common::fuse_abi::*;
use common::Session;

/// pjdfstest's users: the non-owner writer and the owner, its group and supplementary groups.
const USER: u32 = 65534;
const GROUP: u32 = 65534;
const SUPP_A: u32 = 65533;
const SUPP_B: u32 = 65532;

const FH_MODES: [&str; 2] = ["--inode-file-handles=prefer", "--inode-file-handles=never"];

fn mode_uid_gid(path: &Path) -> (u32, u32, u32) {
    let m = fs::symlink_metadata(path).unwrap();
    (m.mode() & 0o7777, m.uid(), m.gid())
}

fn set_gid(gid: u32) -> SetattrIn {
    SetattrIn {
        valid: FATTR_GID,
        gid,
        ..Default::default()
    }
}

#[test]
fn a_non_owners_write_clears_setuid_and_setgid() {
    for fh_mode in FH_MODES {
        let s = Session::start(&[fh_mode]);
        for mode in [0o4777, 0o2777, 0o6777] {
            let path = s.shared.join(&format!("f{mode:o}"));
            fs::write(&path, b"").unwrap();
            fs::set_permissions(&path, fs::Permissions::from_mode(mode)).unwrap();
            let root = s.client.lookup(ROOT, &format!("f{mode:o}")).unwrap();
            // What a 6.12 guest sends for `open(O_WRONLY); write(1 byte)` by uid 65534 on a
            // root-owned file: OPEN, then (file_remove_privs, no KILLPRIV) a SETATTR of the mode
            // without the bits, then the WRITE.
            let user = s.client.with_creds(USER, GROUP);
            let o = user.open(root.nodeid, libc::O_WRONLY as u32).unwrap();
            let got = user.setattr(root.nodeid, &set_mode(libc::S_IFREG | 0o777));
            assert_eq!(
                got.map(|a| a.attr.mode & 0o7777),
                Ok(0o777),
                "{fh_mode} {mode:o}"
            );
            assert_eq!(user.write(root.nodeid, o.fh, 0, b"x"), Ok(1));
            user.release(root.nodeid, o.fh, libc::O_WRONLY as u32)
                .unwrap();
            assert_eq!(mode_uid_gid(&path), (0o777, 0, 0), "{fh_mode} {mode:o}");
        }
        // Only clearing: a non-owner still may not add a bit, change permissions, or drop the
        // sticky bit.
        let path = s.shared.join("g");
        fs::write(&path, b"").unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o5777)).unwrap();
        let g = s.client.lookup(ROOT, "g").unwrap();
        let user = s.client.with_creds(USER, GROUP);
        for mode in [0o7777, 0o5755, 0o4777, 0o1777 | 0o2000] {
            assert_eq!(
                user.setattr(g.nodeid, &set_mode(libc::S_IFREG | mode))
                    .err(),
                Some(libc::EPERM),
                "{fh_mode} {mode:o}"
            );
        }
        assert_eq!(mode_uid_gid(&path), (0o5777, 0, 0), "{fh_mode}");
    }
}

#[test]
fn the_owner_chgrps_to_a_supplementary_group() {
    for fh_mode in FH_MODES {
        let s = Session::start(&[fh_mode]);
        let f = s.shared.join("f");
        fs::write(&f, b"").unwrap();
        std::os::unix::fs::symlink("f", s.shared.join("l")).unwrap();
        for p in ["f", "l"] {
            std::os::unix::fs::lchown(s.shared.join(p), Some(USER), Some(SUPP_A)).unwrap();
        }
        let file = s.client.lookup(ROOT, "f").unwrap();
        let link = s.client.lookup(ROOT, "l").unwrap();
        // The owner, whose primary group is 65534 and who is in 65533 and 65532 (its guest
        // kernel checked that), as pjdfstest's `-u 65534 -g 65533,65532` runs it.
        let owner = s.client.with_creds(USER, GROUP);
        // chown FILE -1 65532, and the same through the symlink (the guest follows it and
        // sends the target's node).
        owner.setattr(file.nodeid, &set_gid(SUPP_B)).expect("chgrp");
        assert_eq!(mode_uid_gid(&f), (0o644, USER, SUPP_B), "{fh_mode}");
        owner
            .setattr(file.nodeid, &set_gid(SUPP_A))
            .expect("chgrp through the symlink");
        assert_eq!(mode_uid_gid(&f), (0o644, USER, SUPP_A), "{fh_mode}");
        // lchown: the link itself.
        let a = owner
            .setattr(link.nodeid, &set_gid(SUPP_B))
            .expect("lchown");
        assert_eq!(a.attr.gid, SUPP_B);
        assert_eq!(mode_uid_gid(&s.shared.join("l")).1, USER);
        assert_eq!(mode_uid_gid(&s.shared.join("l")).2, SUPP_B, "{fh_mode}");
        assert_eq!(
            mode_uid_gid(&f).2,
            SUPP_A,
            "{fh_mode}: lchown followed the link"
        );
        // chown FILE 65534 65532: naming its own uid is no change of owner.
        let both = SetattrIn {
            valid: FATTR_UID | FATTR_GID,
            uid: USER,
            gid: SUPP_B,
            ..Default::default()
        };
        owner.setattr(file.nodeid, &both).expect("chown to self");
        assert_eq!(mode_uid_gid(&f), (0o644, USER, SUPP_B), "{fh_mode}");

        // Not the owner: no chgrp; the owner: no chown to another uid.
        let other = s.client.with_creds(1000, SUPP_A);
        assert_eq!(
            other.setattr(file.nodeid, &set_gid(SUPP_A)).err(),
            Some(libc::EPERM)
        );
        assert_eq!(
            owner.setattr(file.nodeid, &set_uid(1000)).err(),
            Some(libc::EPERM)
        );
        assert_eq!(mode_uid_gid(&f), (0o644, USER, SUPP_B), "{fh_mode}");
    }
}

/// The setuid/setgid outcome of a non-root chgrp of a 06555 file (pjdfstest chown/00.t):
/// without KILLPRIV_V2 the guest sends the cleared mode with the group; with it, the group
/// alone and the host clears the bits. Both end at 0555.
#[test]
fn a_non_root_chgrp_clears_setuid_and_setgid() {
    for args in [&[][..], &["--killpriv-v2"][..]] {
        for fh_mode in FH_MODES {
            let mut argv = args.to_vec();
            argv.push(fh_mode);
            let s = Session::start(&argv);
            for dir in [false, true] {
                let name = if dir { "d" } else { "f" };
                let p = s.shared.join(name);
                if dir {
                    fs::create_dir(&p).unwrap();
                } else {
                    fs::write(&p, b"").unwrap();
                }
                std::os::unix::fs::chown(&p, Some(USER), Some(SUPP_A)).unwrap();
                fs::set_permissions(&p, fs::Permissions::from_mode(0o6555)).unwrap();
                let e = s.client.lookup(ROOT, name).unwrap();
                let owner = s.client.with_creds(USER, GROUP);
                let kind = if dir { libc::S_IFDIR } else { libc::S_IFREG };
                let req = if args.is_empty() && !dir {
                    SetattrIn {
                        valid: FATTR_GID | FATTR_MODE,
                        gid: SUPP_B,
                        mode: kind | 0o555,
                        ..Default::default()
                    }
                } else {
                    set_gid(SUPP_B)
                };
                owner.setattr(e.nodeid, &req).expect("chgrp");
                // Linux keeps the bits of a directory.
                let want = if dir { 0o6555 } else { 0o555 };
                assert_eq!(mode_uid_gid(&p), (want, USER, SUPP_B), "{argv:?} {name}");
            }
        }
    }
}

#[test]
fn truncate_and_touch_by_a_group_writer() {
    for fh_mode in FH_MODES {
        let s = Session::start(&[fh_mode]);
        let p = s.shared.join("f");
        fs::write(&p, b"0123456789").unwrap();
        std::os::unix::fs::chown(&p, Some(0), Some(SUPP_A)).unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(0o660)).unwrap();
        let e = s.client.lookup(ROOT, "f").unwrap();
        // uid 65534 writes through its supplementary group 65533: truncate and touch.
        let user = s.client.with_creds(USER, GROUP);
        let a = user.setattr(e.nodeid, &set_size(4)).expect("truncate");
        assert_eq!(a.attr.size, 4);
        assert_eq!(fs::read(&p).unwrap(), b"0123", "{fh_mode}");
        let before = fs::metadata(&p).unwrap().mtime();
        std::thread::sleep(std::time::Duration::from_millis(1100));
        user.setattr(e.nodeid, &set_times_now()).expect("touch");
        assert!(fs::metadata(&p).unwrap().mtime() > before, "{fh_mode}");
        // Explicit times still need the owner.
        assert_eq!(
            user.setattr(e.nodeid, &set_times((1, 0), (2, 0))).err(),
            Some(libc::EPERM)
        );
        assert!(fs::metadata(&p).unwrap().mtime() > before, "{fh_mode}");
    }
}
