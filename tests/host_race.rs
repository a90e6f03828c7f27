//! The host races the guest: a host thread swaps a directory `d` of the share with a symlink
//! `d.link` to a canary directory outside the share (`renameat2(RENAME_EXCHANGE)`, in a tight
//! loop) while the guest looks `d` up and lists it, opens and reads `d/secret`, and creates and
//! removes entries under the node it got. Since every name is resolved with
//! `openat(parent, name, O_NOFOLLOW)` and symlink nodes are never opened, the guest must never
//! see, read or change the canary, in either `--inode-file-handles` mode and with or without
//! the namespace sandbox; and the daemon must go on.

mod common;

use std::fs;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::fuse_abi::*;
use common::{FuseClient, Session, TempDir};

const RACE_TIME: Duration = Duration::from_secs(2);
const CANARY: &[u8] = b"CANARY: outside the share";
const INSIDE: &[u8] = b"inside";
/// Names only the canary directory holds.
const CANARY_ONLY: &str = "canary-only";

/// Opens `path` as an O_PATH directory fd.
fn dir_fd(path: &Path) -> OwnedFd {
    fs::File::open(path).unwrap().into()
}

/// Swaps `d` and `d.link` in `dir` until `stop`; returns the number of swaps done.
fn swapper(dir: OwnedFd, stop: Arc<AtomicBool>, swaps: Arc<AtomicU64>) {
    let (a, b) = (c"d", c"d.link");
    while !stop.load(Ordering::Relaxed) {
        // SAFETY: a valid dirfd and C strings.
        let rc = unsafe {
            libc::renameat2(
                dir.as_raw_fd(),
                a.as_ptr(),
                dir.as_raw_fd(),
                b.as_ptr(),
                libc::RENAME_EXCHANGE,
            )
        };
        assert_eq!(
            rc,
            0,
            "RENAME_EXCHANGE: {}",
            std::io::Error::last_os_error()
        );
        swaps.fetch_add(1, Ordering::Relaxed);
    }
}

/// What the guest saw in the race.
#[derive(Default, Debug)]
struct Seen {
    listings: u64,
    reads: u64,
    creates: u64,
}

/// One round of the guest's operations on whatever `d` is at the moment.
fn guest_round(c: &FuseClient, i: u64, seen: &mut Seen) {
    let Ok(d) = c.lookup(ROOT, "d") else { return };
    if let Ok(od) = c.opendir(d.nodeid, 0) {
        if let Ok(entries) = c.readdirplus(d.nodeid, od.fh, 0, 8192) {
            let names: Vec<&[u8]> = entries.iter().map(|e| &e.dirent.name[..]).collect();
            assert!(
                !names.contains(&CANARY_ONLY.as_bytes()),
                "the guest listed the canary: {names:?}"
            );
            for e in entries.iter().filter(|e| e.entry.nodeid != 0) {
                let name = &e.dirent.name[..];
                if name != b"." && name != b".." {
                    c.forget(e.entry.nodeid, 1);
                }
            }
            seen.listings += 1;
        }
        c.releasedir(d.nodeid, od.fh).unwrap();
    }
    if let Ok(secret) = c.lookup(d.nodeid, "secret") {
        if let Ok(o) = c.open(secret.nodeid, RDONLY) {
            let data = c.read(secret.nodeid, o.fh, 0, 256).unwrap();
            assert_ne!(data, CANARY, "the guest read the canary");
            assert_eq!(data, INSIDE);
            seen.reads += 1;
            c.release(secret.nodeid, o.fh, RDONLY).unwrap();
        }
        c.forget(secret.nodeid, 1);
    }
    let name = format!("new-{i}");
    if let Ok((e, o)) = c.create(d.nodeid, &name, 0o644, RDWR, 0) {
        c.release(e.nodeid, o.fh, RDWR).unwrap();
        c.unlink(d.nodeid, &name).unwrap();
        c.forget(e.nodeid, 1);
        seen.creates += 1;
    }
    let dir = format!("dir-{i}");
    if let Ok(e) = c.mkdir(d.nodeid, &dir, 0o755, 0) {
        c.rmdir(d.nodeid, &dir).unwrap();
        c.forget(e.nodeid, 1);
    }
    // Symlink nodes: refused, never followed.
    if d.attr.mode & libc::S_IFMT == libc::S_IFLNK {
        assert_eq!(c.open(d.nodeid, RDONLY).err(), Some(libc::ELOOP));
    }
    c.forget(d.nodeid, 1);
}

/// The names in the canary directory, sorted.
fn canary_names(canary: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(canary)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

#[test]
fn directory_swapped_for_a_symlink_out_of_the_share_is_never_followed() {
    let outside = TempDir::new("host-race-outside").unwrap();
    let canary = outside.join("canary");
    fs::create_dir(&canary).unwrap();
    fs::write(canary.join("secret"), CANARY).unwrap();
    fs::write(canary.join(CANARY_ONLY), CANARY).unwrap();
    let before = canary_names(&canary);
    for sandbox in ["--sandbox=namespace", "--sandbox=none"] {
        for handles in ["--inode-file-handles=never", "--inode-file-handles=prefer"] {
            let mut s = Session::start(&[sandbox, handles]);
            fs::create_dir(s.shared.join("d")).unwrap();
            fs::write(s.shared.join("d/secret"), INSIDE).unwrap();
            std::os::unix::fs::symlink(&canary, s.shared.join("d.link")).unwrap();

            let stop = Arc::new(AtomicBool::new(false));
            let swaps = Arc::new(AtomicU64::new(0));
            let host = {
                let (dir, stop, swaps) = (
                    dir_fd(s.shared.path()),
                    Arc::clone(&stop),
                    Arc::clone(&swaps),
                );
                thread::spawn(move || swapper(dir, stop, swaps))
            };
            let mut seen = Seen::default();
            let deadline = Instant::now() + RACE_TIME;
            let mut i = 0;
            while Instant::now() < deadline {
                guest_round(&s.client, i, &mut seen);
                i += 1;
            }
            stop.store(true, Ordering::Relaxed);
            host.join().unwrap();

            let what = format!("{sandbox} {handles}: {i} rounds, {seen:?}, {swaps:?} swaps");
            assert!(s.daemon.is_alive(), "{what}");
            assert_eq!(canary_names(&canary), before, "{what}");
            assert_eq!(fs::read(canary.join("secret")).unwrap(), CANARY, "{what}");
            // Both sides of the race were hit: the real directory was used.
            assert!(swaps.load(Ordering::Relaxed) > 100, "{what}");
            assert!(
                seen.listings > 0 && seen.reads > 0 && seen.creates > 0,
                "{what}"
            );
            // The daemon still serves, and the share holds the directory and the symlink.
            assert!(s.client.lookup(ROOT, "d").is_ok(), "{what}");
            assert!(s.client.lookup(ROOT, "d.link").is_ok(), "{what}");
        }
    }
}
