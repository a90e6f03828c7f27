//! GlusterFS as a tested backend (issue 35 item 2), the "other host": the share is a directory on
//! mount A of a replicated volume (tests/common/gluster.rs) that this machine mounts a second time
//! as mount B. Changes made through mount B while the guest works (create, append, truncate,
//! rename, delete, replace by rename) are seen by the guest within its cache timeout, never stale
//! past it, ESTALE/ENOENT only for files really gone, and no fd of the daemon pins a file B
//! deleted once the guest forgot it. `VHOSTFS_BIN` runs another vhostfs binary. One test, ~7 s
//! (GlusterFS start-up and tear-down included).

mod common;

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::fuse_abi::*;
use common::gluster::Gluster;
use common::served::{read_node, Served};

const CREATE: u32 = (libc::O_RDWR | libc::O_CREAT | libc::O_EXCL) as u32;

/// `Ok` once GETATTR's size and READ's data are `want`'s; else what they were (not yet).
fn shows(size: u64, data: &[u8], want: &[u8]) -> Result<(), String> {
    if size == want.len() as u64 && data == want {
        Ok(())
    } else {
        Err(format!(
            "size {size}, data {:?}",
            String::from_utf8_lossy(data)
        ))
    }
}

/// Polls `check` every 50 ms until it answers `Ok`, up to `within`; returns how long that took.
/// `check` panics itself on a state that must never be seen (another file's data).
fn eventually(
    what: &str,
    within: Duration,
    mut check: impl FnMut() -> Result<(), String>,
) -> Duration {
    let t0 = Instant::now();
    loop {
        match check() {
            Ok(()) => return t0.elapsed(),
            Err(e) if t0.elapsed() > within => {
                panic!("{what}: not seen within {within:?}: {e}")
            }
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

/// The serving process's fds whose file is `(dev, ino)`, with what /proc shows for each.
fn fds_on(pid: u32, dev: u64, ino: u64) -> Vec<String> {
    let mut found = Vec::new();
    for e in fs::read_dir(format!("/proc/{pid}/fd")).unwrap().flatten() {
        if let Ok(m) = fs::metadata(e.path()) {
            if m.dev() == dev && m.ino() == ino {
                let link = fs::read_link(e.path()).unwrap_or_default();
                found.push(format!("fd {:?} -> {}", e.file_name(), link.display()));
            }
        }
    }
    found
}

const ESTALE_OR_ENOENT: [i32; 2] = [libc::ESTALE, libc::ENOENT];

/// Changes made through mount B while the guest holds the files (`--cache=auto`): each seen
/// through LOOKUP/GETATTR/READ within the guest's timeout plus the host mount's own caching,
/// ESTALE/ENOENT only for files really gone, the daemon serving throughout, and no fd of the
/// daemon on a file B deleted once the guest forgot it.
#[test]
fn changes_through_mount_b_are_seen_by_the_guest() {
    let g = Gluster::start();
    let t0 = Instant::now() - g.startup;
    let (a, b) = g.share_dirs("share");
    let s = Served::vhostfs(&a, &["--cache=auto"]);
    let c = &s.client;
    let mut node = std::collections::HashMap::new();
    let mut timeout = Duration::ZERO;
    for f in [
        "append",
        "truncate",
        "rename-src",
        "delete",
        "replace",
        "steady",
    ] {
        let (e, o) = c.create(ROOT, f, 0o644, CREATE, 0).unwrap();
        c.write(
            e.nodeid,
            o.fh,
            0,
            format!("{f}: the guest's data").as_bytes(),
        )
        .unwrap();
        c.release(e.nodeid, o.fh, 0).unwrap();
        node.insert(f, e.nodeid);
        timeout = Duration::new(e.entry_valid, e.entry_valid_nsec)
            .max(Duration::new(e.attr_valid, e.attr_valid_nsec));
    }
    let orig = |f: &str| format!("{f}: the guest's data").into_bytes();
    assert_eq!(c.lookup(ROOT, "created").err(), Some(libc::ENOENT));
    // The files B deletes: their host identity, to look for fds on them later.
    let meta = |f: &str| fs::metadata(a.join(f)).unwrap();
    let deleted_ids: Vec<(&str, u64, u64)> = ["delete", "replace"]
        .iter()
        .map(|&f| (f, meta(f).dev(), meta(f).ino()))
        .collect();
    let pid = s.daemon.served_pid().unwrap();
    for (f, dev, ino) in &deleted_ids {
        eprintln!(
            "before B's changes, fds of the daemon on {f}: {:?}",
            fds_on(pid, *dev, *ino)
        );
    }

    // Host B at work.
    fs::write(b.join("created"), "created by B").unwrap();
    let mut appended = orig("append");
    appended.extend_from_slice(b" + appended by B");
    fs::OpenOptions::new()
        .append(true)
        .open(b.join("append"))
        .and_then(|mut f| std::io::Write::write_all(&mut f, b" + appended by B"))
        .unwrap();
    fs::OpenOptions::new()
        .write(true)
        .open(b.join("truncate"))
        .and_then(|f| f.set_len(5))
        .unwrap();
    fs::rename(b.join("rename-src"), b.join("rename-dst")).unwrap();
    fs::remove_file(b.join("delete")).unwrap();
    fs::write(b.join(".replace.tmp"), "replacement by B").unwrap();
    fs::rename(b.join(".replace.tmp"), b.join("replace")).unwrap();
    let changed = Instant::now();
    // The daemon can only show what mount A shows: first wait until mount A itself shows B's
    // changes (GlusterFS's client caches and the host kernel's 1 s timeouts; once seen to lag
    // past 3.5 s under load), and say how long that took; the guest's bounds below start after.
    let len = |p: PathBuf| fs::symlink_metadata(p).map(|m| m.len()).ok();
    let ino = |p: PathBuf| fs::symlink_metadata(p).map(|m| m.ino()).ok();
    let host_lag = eventually(
        "mount A showing B's changes",
        Duration::from_secs(30),
        || {
            let shown = len(a.join("created")).is_some()
                && len(a.join("append")) == Some(appended.len() as u64)
                && len(a.join("truncate")) == Some(5)
                && len(a.join("rename-src")).is_none()
                && ino(a.join("rename-dst")) == ino(b.join("rename-dst"))
                && len(a.join("delete")).is_none()
                && ino(a.join("replace")) == ino(b.join("replace"));
            if shown {
                Ok(())
            } else {
                Err("not yet".into())
            }
        },
    );
    eprintln!("mount A showed B's changes {host_lag:.1?} after they were made");

    // The guest's timeout, plus the host mount's own: GlusterFS's FUSE client gives the host
    // kernel 1 s entry and attribute timeouts, and its md-cache keeps metadata 1 s.
    let within = timeout + Duration::from_secs(2) + Duration::from_millis(500);
    let mut seen = Vec::new();

    seen.push((
        "create",
        eventually("LOOKUP of the file B created", within, || {
            let e = c
                .lookup(ROOT, "created")
                .map_err(|e| format!("errno {e}"))?;
            let data = read_node(c, e.nodeid).map_err(|e| format!("READ errno {e}"))?;
            assert_eq!(data, b"created by B", "the file B created");
            Ok(())
        }),
    ));
    seen.push((
        "append",
        eventually("GETATTR/READ of the file B appended to", within, || {
            let n = node["append"];
            let attr = c
                .getattr(n, None)
                .unwrap_or_else(|e| panic!("GETATTR append: errno {e}"))
                .attr;
            let data = read_node(c, n).unwrap_or_else(|e| panic!("READ append: errno {e}"));
            assert!(
                data == orig("append") || data == appended,
                "append read {data:?}"
            );
            shows(attr.size, &data, &appended)
        }),
    ));
    seen.push((
        "truncate",
        eventually("GETATTR/READ of the file B truncated", within, || {
            let n = node["truncate"];
            let attr = c
                .getattr(n, None)
                .unwrap_or_else(|e| panic!("GETATTR truncate: errno {e}"))
                .attr;
            let data = read_node(c, n).unwrap_or_else(|e| panic!("READ truncate: errno {e}"));
            // Seen in ~1 of 3 runs, within the host mount's own attribute timeout: the host
            // kernel's read of mount A (one preadv of the daemon, passed through as it is)
            // gives the new 5 bytes zero-padded to the old cached size (FUSE's short read
            // against a stale i_size). Allowed only there; past the bound only the new data.
            let mut padded = orig("truncate")[..5].to_vec();
            padded.resize(orig("truncate").len(), 0);
            if data == padded {
                let host = fs::read(a.join("truncate")).unwrap_or_default();
                eprintln!(
                    "truncate: READ gave the 5 bytes zero-padded to the old size {} after B's \
                     truncate (host read of mount A now: {host:?})",
                    data.len()
                );
            }
            assert!(
                data == orig("truncate") || data == orig("truncate")[..5] || data == padded,
                "truncate read {data:?}"
            );
            shows(attr.size, &data, &orig("truncate")[..5])
        }),
    ));
    seen.push((
        "rename",
        eventually("LOOKUP of the file B renamed", within, || {
            let n = node["rename-src"];
            // The renamed file is still there: its node reads its data throughout.
            assert_eq!(
                read_node(c, n),
                Ok(orig("rename-src")),
                "READ of the renamed file's node"
            );
            match c.lookup(ROOT, "rename-src") {
                Err(libc::ENOENT) => {}
                Ok(_) => return Err("old name still found".into()),
                Err(e) => panic!("LOOKUP rename-src: errno {e}"),
            }
            let e = c
                .lookup(ROOT, "rename-dst")
                .map_err(|e| format!("new name: errno {e}"))?;
            assert_eq!(
                e.nodeid, n,
                "the renamed file under its new name is the node the guest holds"
            );
            c.forget(e.nodeid, 1);
            Ok(())
        }),
    ));
    seen.push((
        "delete",
        eventually("LOOKUP of the file B deleted", within, || {
            let n = node["delete"];
            // Through the held node: the file's own data, or ESTALE/ENOENT (it is gone).
            match read_node(c, n) {
                Ok(d) => assert_eq!(d, orig("delete"), "READ of the deleted file's node"),
                Err(e) => assert!(
                    ESTALE_OR_ENOENT.contains(&e),
                    "READ of the deleted file's node: errno {e}"
                ),
            }
            match c.lookup(ROOT, "delete") {
                Err(libc::ENOENT) => Ok(()),
                Ok(_) => Err("still found".into()),
                Err(e) => panic!("LOOKUP delete: errno {e}"),
            }
        }),
    ));
    seen.push((
        "replace",
        eventually("LOOKUP of the file B replaced by rename", within, || {
            let old = node["replace"];
            match read_node(c, old) {
                Ok(d) => assert_eq!(d, orig("replace"), "READ of the replaced file's old node"),
                Err(e) => assert!(
                    ESTALE_OR_ENOENT.contains(&e),
                    "READ of the replaced file's old node: errno {e}"
                ),
            }
            let e = c
                .lookup(ROOT, "replace")
                .unwrap_or_else(|e| panic!("LOOKUP replace: errno {e}"));
            let data = read_node(c, e.nodeid).unwrap_or_else(|e| panic!("READ replace: errno {e}"));
            if e.nodeid == old {
                assert_eq!(data, orig("replace"), "READ replace (old node)");
                c.forget(e.nodeid, 1);
                return Err("the name still leads to the old file".into());
            }
            assert_eq!(data, b"replacement by B", "READ replace (new node)");
            c.forget(e.nodeid, 1);
            Ok(())
        }),
    ));
    for (what, took) in &seen {
        eprintln!("B's {what}: seen by the guest {took:.2?} after it was polled for");
    }
    eprintln!(
        "all of B's changes seen {:.2?} after B made them (guest timeout {timeout:?}, bound {within:?})",
        changed.elapsed()
    );
    // Never stale past it: everything once more.
    assert_eq!(read_node(c, node["append"]), Ok(appended));
    assert_eq!(
        read_node(c, node["truncate"]),
        Ok(orig("truncate")[..5].to_vec())
    );
    assert_eq!(read_node(c, node["steady"]), Ok(orig("steady")));
    assert_eq!(c.lookup(ROOT, "delete").err(), Some(libc::ENOENT));
    for f in ["delete", "replace"] {
        match c.getattr(node[f], None) {
            Ok(a) => assert_eq!(a.attr.nlink, 0, "GETATTR of {f}'s old node: {:?}", a.attr),
            Err(e) => assert!(
                ESTALE_OR_ENOENT.contains(&e),
                "GETATTR of {f}'s old node: errno {e}"
            ),
        }
    }

    // The guest forgets the files B removed: no fd of the daemon may keep them.
    c.forget(node["delete"], 1);
    c.forget(node["replace"], 1);
    for (f, dev, ino) in &deleted_ids {
        eventually(
            &format!("the daemon letting go of {f}"),
            Duration::from_secs(5),
            || match fds_on(pid, *dev, *ino) {
                v if v.is_empty() => Ok(()),
                v => Err(format!("{v:?}")),
            },
        );
    }
    assert!(c.getattr(ROOT, None).is_ok(), "the daemon stopped serving");
    let mut daemon = s.daemon;
    assert!(daemon.is_alive());
    drop(daemon);
    drop(g);
    eprintln!("test took {:.1?}", t0.elapsed());
}
