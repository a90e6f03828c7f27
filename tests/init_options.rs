//! Options that change what INIT offers the guest, as virtiofsd 1.14 spells and applies them:
//! `--no-readdirplus` (and `--cache=never`) take READDIRPLUS out of the answer, yet a READDIRPLUS
//! the guest sends anyway is still served, as virtiofsd serves it; `--allow-mmap` adds
//! FUSE_DIRECT_IO_ALLOW_MMAP (a guest that offers it may then mmap direct-I/O files shared).

mod common;

use std::fs;

use common::fuse_abi::*;
use common::Session;

const READDIRPLUS: u64 = FUSE_DO_READDIRPLUS | FUSE_READDIRPLUS_AUTO;

/// The flags the daemon answered (flags | flags2 << 32).
fn flags(init: &InitOut) -> u64 {
    u64::from(init.flags) | (u64::from(init.flags2) << 32)
}

/// A READDIR and a READDIRPLUS of the root, which holds only `file` (3 bytes).
fn assert_both_listings_work(s: &Session) {
    fs::write(s.shared.join("file"), b"abc").unwrap();
    let c = &s.client;
    let dir = c.opendir(ROOT, RDONLY).expect("OPENDIR");
    let mut names: Vec<Vec<u8>> = c
        .readdir(ROOT, dir.fh, 0, 4096)
        .expect("READDIR")
        .into_iter()
        .map(|e| e.name)
        .collect();
    names.sort();
    assert_eq!(names, [&b"."[..], b"..", b"file"]);
    let plus = c
        .readdirplus(ROOT, dir.fh, 0, 4096)
        .expect("READDIRPLUS not negotiated, yet served (as virtiofsd)");
    let file = plus
        .iter()
        .find(|e| e.dirent.name == b"file")
        .expect("file in READDIRPLUS");
    assert_ne!(file.entry.nodeid, 0);
    assert_eq!(file.entry.attr.size, 3);
    c.forget(file.entry.nodeid, 1);
    c.releasedir(ROOT, dir.fh).expect("RELEASEDIR");
}

#[test]
fn readdirplus_is_offered_unless_turned_off() {
    let default = flags(&Session::start(&[]).init);
    assert_eq!(default & READDIRPLUS, READDIRPLUS);
    for extra in [
        &["-o", "readdirplus"][..],
        // -o items apply after the long options.
        &["--no-readdirplus", "-o", "readdirplus"],
        &["--cache=metadata"],
    ] {
        let s = Session::start(extra);
        assert_eq!(flags(&s.init), default, "{extra:?}");
    }
    for extra in [
        &["--no-readdirplus"][..],
        &["-o", "no_readdirplus"],
        // virtiofsd turns READDIRPLUS off with --cache=never too.
        &["--cache=never"],
        &["--cache=never", "-o", "readdirplus"],
    ] {
        let s = Session::start(extra);
        assert_eq!(flags(&s.init), default & !READDIRPLUS, "{extra:?}");
        assert_both_listings_work(&s);
    }
}

#[test]
fn allow_mmap_negotiates_direct_io_allow_mmap() {
    let default = flags(&Session::start(&["--cache=never"]).init);
    assert_eq!(default & FUSE_DIRECT_IO_ALLOW_MMAP, 0);
    for extra in [&["--cache=never", "--allow-mmap"][..], &["--allow-mmap"]] {
        let s = Session::start(extra);
        // A 7.39 flag in the 7.38 answer, as virtiofsd 1.14 gives it (the guest honours it).
        assert_eq!(s.init.minor, 38, "{extra:?}");
        let without_mmap = flags(&Session::start(&extra[..extra.len() - 1]).init);
        assert_eq!(
            flags(&s.init),
            without_mmap | FUSE_DIRECT_IO_ALLOW_MMAP,
            "{extra:?}"
        );
        // Only to a guest that offers it (in flags2, which counts only with FUSE_INIT_EXT).
        let init = s
            .client
            .init_with(LINUX_6_12_VIRTIOFS_INIT_FLAGS & !FUSE_INIT_EXT)
            .expect("INIT without INIT_EXT");
        assert_eq!(flags(&init) & FUSE_DIRECT_IO_ALLOW_MMAP, 0, "{extra:?}");
        assert_eq!(init.flags2, 0, "{extra:?}");
    }
    // The files it is about: opened for direct I/O under --cache=never.
    let s = Session::start(&["--cache=never", "--allow-mmap"]);
    fs::write(s.shared.join("f"), b"abc").unwrap();
    let e = s.client.lookup(ROOT, "f").unwrap();
    let o = s.client.open(e.nodeid, RDONLY).expect("OPEN");
    assert_eq!(o.open_flags & FOPEN_DIRECT_IO, FOPEN_DIRECT_IO);
}
