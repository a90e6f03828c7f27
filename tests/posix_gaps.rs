//! POSIX behaviours that conformance suites check in a real guest (issue 10 item 4), at the
//! daemon level; `tests/e2e/posix-probe.c` checks them in a Linux guest.
//! - utimensat(AT_SYMLINK_NOFOLLOW) reaches us as SETATTR of times on the symlink's node: it
//!   sets the link's own times, never its target's.

mod common;

use std::fs;
use std::os::unix::fs::{symlink, MetadataExt};
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use common::fuse_abi::*;
use common::Session;

const ROOT: u64 = FUSE_ROOT_ID;
const HANDLE_MODES: [&str; 2] = ["--inode-file-handles=never", "--inode-file-handles=prefer"];

const FATTR_MODE: u32 = 1 << 0;
const FATTR_ATIME: u32 = 1 << 4;
const FATTR_MTIME: u32 = 1 << 5;
const FATTR_ATIME_NOW: u32 = 1 << 7;
const FATTR_MTIME_NOW: u32 = 1 << 8;

/// (atime, mtime) of `path` itself (a symlink is not followed), in (seconds, nanoseconds).
fn times(path: &Path) -> ((i64, i64), (i64, i64)) {
    let m = fs::symlink_metadata(path).unwrap();
    ((m.atime(), m.atime_nsec()), (m.mtime(), m.mtime_nsec()))
}

fn set_times(atime: (u64, u32), mtime: (u64, u32)) -> SetattrIn {
    SetattrIn {
        valid: FATTR_ATIME | FATTR_MTIME,
        atime: atime.0,
        atimensec: atime.1,
        mtime: mtime.0,
        mtimensec: mtime.1,
        ..Default::default()
    }
}

#[test]
fn utimes_on_a_symlink_set_the_links_own_times() {
    for mode in HANDLE_MODES {
        let s = Session::start(&[mode]);
        let c = &s.client;
        let (target, link, dangling) = (s.shared.join("t"), s.shared.join("l"), s.shared.join("d"));
        fs::write(&target, b"target").unwrap();
        symlink("t", &link).unwrap();
        symlink("missing", &dangling).unwrap();
        let t = c.lookup(ROOT, "t").unwrap();
        c.setattr(t.nodeid, &set_times((1_000_000_000, 1), (1_000_000_001, 2)))
            .expect("SETATTR times of the target");
        let target_times = ((1_000_000_000, 1), (1_000_000_001, 2));
        assert_eq!(times(&target), target_times, "{mode}");

        // utimensat(link, AT_SYMLINK_NOFOLLOW): the link's times, in the reply and on the host.
        let l = c.lookup(ROOT, "l").unwrap();
        assert_eq!(l.attr.mode & libc::S_IFMT, libc::S_IFLNK);
        let a = c
            .setattr(l.nodeid, &set_times((1_100_000_000, 3), (1_100_000_001, 4)))
            .expect("SETATTR times of a symlink");
        assert_eq!(a.attr.mode & libc::S_IFMT, libc::S_IFLNK, "{mode}");
        assert_eq!(a.attr.ino, l.attr.ino);
        assert_eq!(
            (
                (a.attr.atime, a.attr.atimensec),
                (a.attr.mtime, a.attr.mtimensec)
            ),
            ((1_100_000_000, 3), (1_100_000_001, 4)),
            "{mode}"
        );
        assert_eq!(
            times(&link),
            ((1_100_000_000, 3), (1_100_000_001, 4)),
            "{mode}"
        );
        assert_eq!(times(&target), target_times, "{mode}: the target changed");
        let g = c.getattr(l.nodeid, None).unwrap();
        assert_eq!((g.attr.mtime, g.attr.mtimensec), (1_100_000_001, 4));

        // UTIME_OMIT for atime (FATTR_MTIME alone).
        c.setattr(
            l.nodeid,
            &SetattrIn {
                valid: FATTR_MTIME,
                mtime: 1_200_000_000,
                mtimensec: 5,
                ..Default::default()
            },
        )
        .expect("SETATTR mtime of a symlink");
        assert_eq!(
            times(&link),
            ((1_100_000_000, 3), (1_200_000_000, 5)),
            "{mode}"
        );
        assert_eq!(times(&target), target_times, "{mode}");

        // UTIME_NOW for both.
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64;
        c.setattr(
            l.nodeid,
            &SetattrIn {
                valid: FATTR_ATIME | FATTR_MTIME | FATTR_ATIME_NOW | FATTR_MTIME_NOW,
                ..Default::default()
            },
        )
        .expect("SETATTR times NOW of a symlink");
        let ((at, _), (mt, _)) = times(&link);
        assert!(
            (at - now).abs() <= 5 && (mt - now).abs() <= 5,
            "{at} {mt} vs {now}"
        );
        assert_eq!(times(&target), target_times, "{mode}");

        // A dangling link has times of its own too.
        let d = c.lookup(ROOT, "d").unwrap();
        c.setattr(d.nodeid, &set_times((1_300_000_000, 6), (1_300_000_001, 7)))
            .expect("SETATTR times of a dangling symlink");
        assert_eq!(times(&dangling), ((1_300_000_000, 6), (1_300_000_001, 7)));

        // Following the link is the guest's business: it sends the target's node.
        let before = times(&link);
        c.setattr(t.nodeid, &set_times((1_400_000_000, 8), (1_400_000_001, 9)))
            .unwrap();
        assert_eq!(times(&target), ((1_400_000_000, 8), (1_400_000_001, 9)));
        assert_eq!(times(&link), before, "{mode}: the link changed");

        // As the caller: a user who does not own the link may not set explicit times.
        assert_eq!(
            c.with_creds(1000, 1000)
                .setattr(l.nodeid, &set_times((1, 0), (2, 0)))
                .err(),
            Some(libc::EPERM),
            "{mode}"
        );
        assert_eq!(times(&link), before, "{mode}");
        // Mode bits of a symlink still cannot be changed (Linux has none to change).
        let chmod = SetattrIn {
            valid: FATTR_MODE,
            mode: 0o700,
            ..Default::default()
        };
        assert_eq!(c.setattr(l.nodeid, &chmod).err(), Some(libc::EOPNOTSUPP));
    }
}
