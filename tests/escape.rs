//! Escape attempts from the guest under every `--sandbox` mode, and a tour of the opcodes under
//! the explicit default confinement (`--sandbox=namespace --seccomp=kill`): a syscall missing
//! from the seccomp allowlist kills the daemon, which the tour notices.

mod common;

use std::fs;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::fuse_abi::*;
use common::{Session, TempDir};

const MODES: [&str; 3] = ["--sandbox=namespace", "--sandbox=chroot", "--sandbox=none"];

/// Linux `new_encode_dev()`.
fn encode_dev(major: u32, minor: u32) -> u32 {
    (minor & 0xff) | (major << 8) | ((minor & !0xff) << 12)
}

/// A file outside every share, written by the test (the target of the escapes), in a
/// directory of its own (removed with the returned `TempDir`).
fn outside_file() -> (TempDir, PathBuf) {
    let dir = TempDir::new("vhostfs-escape-target").unwrap();
    let p = dir.join("secret");
    fs::write(&p, b"host secret").unwrap();
    (dir, p)
}

#[test]
fn dot_dot_and_names_with_a_slash() {
    for mode in MODES {
        let s = Session::start(&[mode]);
        let c = &s.client;
        for name in ["a/b", "/etc", "../etc/passwd"] {
            assert_eq!(
                c.lookup(ROOT, name).err(),
                Some(libc::EINVAL),
                "{mode} {name}"
            );
        }
        // The share root's "." and ".." are the root itself (issue 34: the Windows service
        // opens the share with LOOKUP(1, ".")): nothing above the share is reached.
        for name in ["..", "."] {
            assert_eq!(
                c.lookup(ROOT, name).map(|e| e.nodeid),
                Ok(ROOT),
                "{mode} {name}"
            );
        }
        assert_eq!(
            c.create(ROOT, "../x", 0o644, libc::O_RDWR as u32, 0).err(),
            Some(libc::EINVAL),
            "{mode}"
        );
        assert_eq!(c.symlink(ROOT, "a/b", "t").err(), Some(libc::EINVAL));
        assert_eq!(c.rename(ROOT, "..", ROOT, "z").err(), Some(libc::EINVAL));
    }
}

#[test]
fn symlinks_pointing_out_are_never_followed() {
    let (_dir, outside) = outside_file();
    let outside_dir = outside.parent().unwrap().to_path_buf();
    for mode in MODES {
        let s = Session::start(&[mode]);
        let c = &s.client;
        std::os::unix::fs::symlink(&outside, s.shared.join("abs")).unwrap();
        std::os::unix::fs::symlink(&outside_dir, s.shared.join("absdir")).unwrap();
        std::os::unix::fs::symlink("../../../../../..", s.shared.join("rel")).unwrap();
        for name in ["abs", "absdir", "rel"] {
            let l = c.lookup(ROOT, name).unwrap();
            assert_eq!(l.attr.mode & libc::S_IFMT, libc::S_IFLNK, "{mode} {name}");
            assert_eq!(
                c.open(l.nodeid, libc::O_RDWR as u32).err(),
                Some(libc::ELOOP)
            );
            assert_eq!(c.opendir(l.nodeid, 0).err(), Some(libc::ENOTDIR));
            let file = outside.file_name().unwrap().to_str().unwrap();
            assert_eq!(c.lookup(l.nodeid, file).err(), Some(libc::ENOTDIR));
            assert_eq!(
                c.create(l.nodeid, "planted", 0o644, libc::O_RDWR as u32, 0)
                    .err(),
                Some(libc::ENOTDIR)
            );
            // A hard link of the symlink links the symlink, not what it points to.
            let h = c.link(l.nodeid, ROOT, &format!("{name}-hard")).unwrap();
            assert_eq!(h.attr.mode & libc::S_IFMT, libc::S_IFLNK);
        }
        assert!(!outside_dir.join("planted").exists());
        assert_eq!(fs::read(&outside).unwrap(), b"host secret");
    }
}

#[test]
fn forged_node_ids_and_hard_links_to_files_outside() {
    for mode in MODES {
        let s = Session::start(&[mode]);
        let c = &s.client;
        fs::write(s.shared.join("f"), b"x").unwrap();
        let f = c.lookup(ROOT, "f").unwrap();
        // Node IDs the daemon never handed out: 0, the next ones, wild values, our own + 1.
        for forged in [0, 2, f.nodeid + 1, f.nodeid << 8, u64::MAX, 0xdead_beef] {
            assert_eq!(
                c.getattr(forged, None).err(),
                Some(libc::EBADF),
                "{forged:#x}"
            );
            assert_eq!(c.lookup(forged, "etc").err(), Some(libc::EBADF));
            assert_eq!(
                c.open(forged, libc::O_RDONLY as u32).err(),
                Some(libc::EBADF)
            );
            // LINK of a forged node: no hard link to anything outside can be made.
            assert_eq!(c.link(forged, ROOT, "hard").err(), Some(libc::EBADF));
        }
        assert!(!s.shared.join("hard").exists(), "{mode}");
        // A forgotten node ID is dead too.
        c.forget(f.nodeid, 1);
        assert_eq!(c.getattr(f.nodeid, None).err(), Some(libc::EBADF), "{mode}");
    }
}

#[test]
fn device_nodes_need_cap_mknod_and_a_root_caller() {
    let chr = libc::S_IFCHR | 0o600;
    let null = encode_dev(1, 3);
    for mode in MODES {
        let s = Session::start(&[mode]);
        let c = &s.client;
        // Guest root with CAP_MKNOD kept (the default): allowed, as in virtiofsd.
        c.mknod(ROOT, "null", chr, null, 0).unwrap();
        assert!(fs::symlink_metadata(s.shared.join("null"))
            .unwrap()
            .file_type()
            .is_char_device());
        // A guest user, in a directory it may write: refused by the host (fsuid != 0 has no
        // CAP_MKNOD).
        fs::set_permissions(s.shared.path(), fs::Permissions::from_mode(0o777)).unwrap();
        let user = c.with_creds(1000, 1000);
        assert_eq!(
            user.mknod(ROOT, "u-null", chr, null, 0).err(),
            Some(libc::EPERM)
        );
        // Without CAP_MKNOD (--modcaps=-mknod), not even guest root; FIFOs still work.
        let s = Session::start(&[mode, "--modcaps=-mknod"]);
        let c = &s.client;
        assert_eq!(
            c.mknod(ROOT, "null", chr, null, 0).err(),
            Some(libc::EPERM),
            "{mode}"
        );
        c.mknod(ROOT, "fifo", libc::S_IFIFO | 0o600, 0, 0).unwrap();
    }
}

#[test]
fn setuid_bits_and_owners_of_files_the_caller_does_not_own() {
    for mode in MODES {
        let s = Session::start(&[mode]);
        let c = &s.client;
        let path = s.shared.join("root-owned");
        fs::write(&path, b"#!/bin/sh\n").unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o777)).unwrap();
        let f = c.lookup(ROOT, "root-owned").unwrap();
        let user = c.with_creds(1000, 1000);
        let suid = set_mode(libc::S_IFREG | 0o4777);
        assert_eq!(
            user.setattr(f.nodeid, &suid).err(),
            Some(libc::EPERM),
            "{mode}"
        );
        let take = set_uid(1000);
        assert_eq!(
            user.setattr(f.nodeid, &take).err(),
            Some(libc::EPERM),
            "{mode}"
        );
        let m = fs::metadata(&path).unwrap();
        assert_eq!((m.mode() & 0o7777, m.uid()), (0o777, 0), "{mode}");
        // The owner may.
        c.setattr(f.nodeid, &suid).unwrap();
        assert_eq!(fs::metadata(&path).unwrap().mode() & 0o7777, 0o4777);
    }
}

/// One request of every family under the explicit defaults; the daemon must survive them all.
#[test]
fn opcode_tour_under_namespace_and_seccomp_kill() {
    let mut s = Session::start(&["--sandbox=namespace", "--seccomp=kill", "--xattr"]);
    let c = &s.client;
    let d = c.mkdir(ROOT, "d", 0o755, 0).unwrap();
    let (f, o) = c
        .create(d.nodeid, "f", 0o644, libc::O_RDWR as u32, 0)
        .unwrap();
    assert_eq!(c.write(f.nodeid, o.fh, 0, b"hello world").unwrap(), 11);
    assert_eq!(c.read(f.nodeid, o.fh, 6, 5).unwrap(), b"world");
    c.fsync(f.nodeid, o.fh, true).unwrap();
    c.fallocate(f.nodeid, o.fh, 0, 4096, 0).unwrap();
    assert_eq!(
        c.lseek(f.nodeid, o.fh, 0, libc::SEEK_DATA as u32).unwrap(),
        0
    );
    c.flush(f.nodeid, o.fh, 0).unwrap();
    c.release(f.nodeid, o.fh, 0).unwrap();
    c.getattr(f.nodeid, None).unwrap();
    c.setattr(f.nodeid, &set_mode(libc::S_IFREG | 0o600))
        .unwrap();
    c.setxattr(f.nodeid, "user.k", b"v", 0).unwrap();
    c.getxattr(f.nodeid, "user.k", 64).unwrap();
    c.listxattr(f.nodeid, 64).unwrap();
    c.removexattr(f.nodeid, "user.k").unwrap();
    let l = c.symlink(d.nodeid, "l", "f").unwrap();
    assert_eq!(c.readlink(l.nodeid).unwrap(), b"f");
    c.link(f.nodeid, ROOT, "hard").unwrap();
    c.rename(d.nodeid, "l", ROOT, "l2").unwrap();
    c.mknod(ROOT, "fifo", libc::S_IFIFO | 0o600, 0, 0).unwrap();
    c.tmpfile(ROOT, libc::S_IFREG | 0o600, libc::O_RDWR as u32, 0)
        .unwrap();
    let od = c.opendir(d.nodeid, 0).unwrap();
    assert!(c.readdirplus(d.nodeid, od.fh, 0, 4096).unwrap().len() >= 3);
    c.readdir(d.nodeid, od.fh, 0, 4096).unwrap();
    c.fsyncdir(d.nodeid, od.fh, false).unwrap();
    c.releasedir(d.nodeid, od.fh).unwrap();
    c.statfs(ROOT).unwrap();
    c.syncfs().unwrap();
    c.unlink(ROOT, "hard").unwrap();
    c.unlink(ROOT, "l2").unwrap();
    c.unlink(d.nodeid, "f").unwrap();
    c.rmdir(ROOT, "d").unwrap();
    c.batch_forget(&[(f.nodeid, 1), (l.nodeid, 1)]);
    c.forget(d.nodeid, 1);
    c.destroy().unwrap();
    c.init().unwrap();
    assert!(s.daemon.is_alive(), "killed by seccomp");
    assert!(Path::new(&s.shared.join("fifo")).exists());
    drop(s.client);
    let status = s.daemon.wait_exit(Duration::from_secs(10)).unwrap();
    assert_eq!(
        status.and_then(|s| s.code()),
        Some(0),
        "exit after disconnect"
    );
}
