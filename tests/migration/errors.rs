//! What the guest holds changes on the host around the switch-over, or the destination's share
//! is another one: each case as docs/migration.md's table says, under `abort` (the load fails,
//! the source goes on with everything) and `guest-error` (only the inodes concerned fail with
//! EIO).

use std::fs;
use std::sync::Arc;

use super::common::fuse_abi::EntryOut;
use super::common::{FuseClient, TempDir};
use super::{start, start_on, Pair, RDWR};

/// `dir/data` and `dir/keep`, both looked up and open in the guest.
struct Scene {
    data: EntryOut,
    data_fh: u64,
    keep: EntryOut,
    keep_fh: u64,
}

fn scene(p: &Pair) -> Scene {
    fs::create_dir(p.shared.join("dir")).unwrap();
    fs::write(p.shared.join("dir/data"), b"0123456789").unwrap();
    fs::write(p.shared.join("dir/keep"), b"keep").unwrap();
    let c = p.c();
    let dir = c.lookup(1, "dir").unwrap();
    let data = c.lookup(dir.nodeid, "data").unwrap();
    let keep = c.lookup(dir.nodeid, "keep").unwrap();
    let data_fh = c.open(data.nodeid, RDWR).unwrap().fh;
    let keep_fh = c.open(keep.nodeid, RDWR).unwrap().fh;
    Scene {
        data,
        data_fh,
        keep,
        keep_fh,
    }
}

/// Everything but `data` works; `data` and its fh fail with EIO, and can be let go.
fn only_data_lost(c: &FuseClient, s: &Scene) {
    assert_eq!(c.read(s.keep.nodeid, s.keep_fh, 0, 10).unwrap(), b"keep");
    assert_eq!(
        c.getattr(s.keep.nodeid, None).unwrap().attr.ino,
        s.keep.attr.ino
    );
    assert_eq!(c.getattr(s.data.nodeid, None).err(), Some(libc::EIO));
    assert_eq!(
        c.read(s.data.nodeid, s.data_fh, 0, 10).err(),
        Some(libc::EIO)
    );
    assert_eq!(
        c.write(s.data.nodeid, s.data_fh, 0, b"x").err(),
        Some(libc::EIO)
    );
    assert_eq!(c.open(s.data.nodeid, RDWR).err(), Some(libc::EIO));
    c.release(s.data.nodeid, s.data_fh, 0).unwrap();
    assert_eq!(
        c.read(s.data.nodeid, s.data_fh, 0, 10).err(),
        Some(libc::EBADF)
    );
    c.forget(s.data.nodeid, 1);
    assert!(c.getattr(1, None).is_ok());
    assert_eq!(c.getattr(s.data.nodeid, None).err(), Some(libc::EBADF));
}

/// When the host changes the share: before the save, or between save and load.
#[derive(Clone, Copy, PartialEq)]
enum When {
    BeforeSave,
    AfterSave,
}

/// Under `abort`: the load is refused, and the source (resumed) still serves `data` as it was.
fn aborts_and_source_goes_on(p: &mut Pair, s: &Scene, when: When, change: impl FnOnce(&Pair)) {
    let mut change = Some(change);
    if when == When::BeforeSave {
        change.take().unwrap()(p);
    }
    let saved = p.c().guest().save_state().unwrap();
    if let Some(change) = change {
        change(p);
    }
    let guest = Arc::clone(p.c().guest());
    // A copy of the session's guest: the original stays with the source to resume.
    let err = super::refused_load(p, &saved);
    assert!(err, "the destination loaded a state it should refuse");
    guest.resume(&saved).unwrap();
    let c = p.c();
    assert_eq!(
        c.read(s.data.nodeid, s.data_fh, 0, 10).unwrap(),
        b"0123456789"
    );
    assert_eq!(c.read(s.keep.nodeid, s.keep_fh, 0, 10).unwrap(), b"keep");
    assert!(c.getattr(s.data.nodeid, None).is_ok());
}

fn guest_error<'a>(args: &[&'a str]) -> Vec<&'a str> {
    [args, &["--migration-on-error=guest-error"]].concat()
}

const FIND: &[&str] = &["--migration-mode=find-paths"];
const HANDLES: &[&str] = &["--migration-mode=file-handles"];
const VERIFY: &[&str] = &["--migration-mode=find-paths", "--migration-verify-handles"];

fn unlink(p: &Pair) {
    fs::remove_file(p.shared.join("dir/data")).unwrap();
}

#[test]
fn unlinked_open_file_find_paths_abort() {
    let mut p = start(FIND, FIND);
    let s = scene(&p);
    aborts_and_source_goes_on(&mut p, &s, When::BeforeSave, unlink);
}

#[test]
fn unlinked_open_file_find_paths_guest_error() {
    let mut p = start(FIND, &guest_error(FIND));
    let s = scene(&p);
    unlink(&p);
    p.migrate();
    only_data_lost(p.c(), &s);
}

#[test]
fn unlinked_open_file_migrates_by_file_handle() {
    let mut p = start(HANDLES, HANDLES);
    let s = scene(&p);
    unlink(&p);
    p.migrate();
    // The source still holds it open, so its handle opens.
    let c = p.c();
    assert_eq!(
        c.read(s.data.nodeid, s.data_fh, 0, 10).unwrap(),
        b"0123456789"
    );
    assert_eq!(c.getattr(s.data.nodeid, None).unwrap().attr.nlink, 0);
}

/// Saves, lets the host `change` the share, then loads into the destination.
fn migrate_after_change(p: &mut Pair, change: fn(&Pair)) {
    let saved = p.c().guest().save_state().unwrap();
    change(p);
    p.migrate_with(&saved).unwrap();
}

/// `data`, renamed to `dir/moved`, is served through its old fh and found under its new name.
fn data_found_moved(c: &FuseClient, s: &Scene) {
    assert_eq!(
        c.read(s.data.nodeid, s.data_fh, 0, 10).unwrap(),
        b"0123456789"
    );
    let dir = c.lookup(1, "dir").unwrap();
    assert_eq!(c.lookup(dir.nodeid, "moved").unwrap().nodeid, s.data.nodeid);
}

fn rename(p: &Pair) {
    fs::rename(p.shared.join("dir/data"), p.shared.join("dir/moved")).unwrap();
}

#[test]
fn renamed_before_the_save_migrates_by_path() {
    let mut p = start(FIND, FIND);
    let s = scene(&p);
    rename(&p);
    p.migrate();
    data_found_moved(p.c(), &s);
}

#[test]
fn renamed_between_save_and_load_find_paths_abort() {
    let mut p = start(FIND, FIND);
    let s = scene(&p);
    aborts_and_source_goes_on(&mut p, &s, When::AfterSave, rename);
}

#[test]
fn renamed_between_save_and_load_find_paths_guest_error() {
    let mut p = start(FIND, &guest_error(FIND));
    let s = scene(&p);
    migrate_after_change(&mut p, rename);
    only_data_lost(p.c(), &s);
}

#[test]
fn renamed_between_save_and_load_migrates_by_file_handle() {
    let mut p = start(HANDLES, HANDLES);
    let s = scene(&p);
    migrate_after_change(&mut p, rename);
    data_found_moved(p.c(), &s);
}

/// Another file takes `dir/data`'s name (the old one stays open in the source).
fn replace(p: &Pair) {
    fs::write(p.shared.join("dir/other"), b"OTHER FILE").unwrap();
    fs::rename(p.shared.join("dir/other"), p.shared.join("dir/data")).unwrap();
}

#[test]
fn replaced_between_save_and_load_is_served_as_the_old_file_without_verify_handles() {
    // What docs/migration.md warns about: the path opens, the file is another.
    let mut p = start(FIND, FIND);
    let s = scene(&p);
    migrate_after_change(&mut p, replace);
    assert_eq!(
        p.c().read(s.data.nodeid, s.data_fh, 0, 10).unwrap(),
        b"OTHER FILE"
    );
}

#[test]
fn replaced_between_save_and_load_verify_handles_abort() {
    let mut p = start(VERIFY, VERIFY);
    let s = scene(&p);
    aborts_and_source_goes_on(&mut p, &s, When::AfterSave, replace);
}

#[test]
fn replaced_between_save_and_load_verify_handles_guest_error() {
    let mut p = start(VERIFY, &guest_error(VERIFY));
    let s = scene(&p);
    migrate_after_change(&mut p, replace);
    only_data_lost(p.c(), &s);
}

/// The destination shares a copy of the source's directory.
fn with_copy(source: &[&str], dest: &[&str]) -> (Pair, Scene, TempDir) {
    let copy = TempDir::new("mig-copy").unwrap();
    let shared = TempDir::new("mig-shared").unwrap();
    let p = start_on(shared, source, Some(copy.path()), dest);
    let s = scene(&p);
    let status = std::process::Command::new("cp")
        .args(["-a", "--"])
        .arg(p.shared.join("dir"))
        .arg(copy.path())
        .status()
        .unwrap();
    assert!(status.success());
    (p, s, copy)
}

#[test]
fn another_share_with_the_same_contents_migrates_by_path() {
    let (mut p, s, copy) = with_copy(FIND, FIND);
    p.migrate();
    let c = p.c();
    assert_eq!(c.write(s.data.nodeid, s.data_fh, 0, b"AB").unwrap(), 2);
    assert_eq!(fs::read(copy.join("dir/data")).unwrap(), b"AB23456789");
    assert_eq!(fs::read(p.shared.join("dir/data")).unwrap(), b"0123456789");
}

#[test]
fn another_share_is_refused_by_verify_handles_and_file_handles() {
    for mode in [VERIFY, HANDLES] {
        let (mut p, s, _copy) = with_copy(mode, mode);
        aborts_and_source_goes_on(&mut p, &s, When::AfterSave, |_| ());
    }
}

#[test]
fn another_share_under_guest_error_loses_every_inode_but_the_root() {
    for mode in [VERIFY, HANDLES] {
        let (mut p, s, _copy) = with_copy(mode, &guest_error(mode));
        p.migrate();
        let c = p.c();
        for (e, fh) in [(s.data, s.data_fh), (s.keep, s.keep_fh)] {
            assert_eq!(c.getattr(e.nodeid, None).err(), Some(libc::EIO));
            assert_eq!(c.read(e.nodeid, fh, 0, 4).err(), Some(libc::EIO));
        }
        // The destination's own share is served.
        let dir = c.lookup(1, "dir").unwrap();
        assert_ne!(dir.nodeid, s.data.nodeid);
        assert!(c.lookup(dir.nodeid, "keep").is_ok());
    }
}

#[test]
fn a_name_gone_but_another_link_left_is_found_by_searching_the_share() {
    // /proc/self/fd names the removed link ("... (deleted)"): the share is searched.
    let mut p = start(FIND, FIND);
    let s = scene(&p);
    fs::create_dir(p.shared.join("elsewhere")).unwrap();
    fs::hard_link(p.shared.join("dir/data"), p.shared.join("elsewhere/link")).unwrap();
    unlink(&p);
    p.migrate();
    let c = p.c();
    assert_eq!(
        c.read(s.data.nodeid, s.data_fh, 0, 10).unwrap(),
        b"0123456789"
    );
    let dir = c.lookup(1, "elsewhere").unwrap();
    assert_eq!(c.lookup(dir.nodeid, "link").unwrap().nodeid, s.data.nodeid);
}

/// A tmpfs mounted over `dir` after the guest looked its files up, with another `dir/data`:
/// the path the kernel has for the old `data` now opens the new one.
fn overmount(p: &Pair) -> super::common::Mount {
    let m = super::common::Mount::tmpfs_at(&p.shared.join("dir"), "size=1m");
    fs::write(p.shared.join("dir/data"), b"MOUNTED").unwrap();
    m
}

#[test]
fn confirm_paths_catches_a_path_that_opens_another_file() {
    // Without a sandbox (a namespace one would not see the host's later mount at all).
    // Without confirm-paths the stale path is sent and the destination serves the other file.
    // (`keep`, which the mount hides, is lost either way.)
    let find = ["--migration-mode=find-paths", "--sandbox=none"];
    let mut p = start(&find, &guest_error(&find));
    let s = scene(&p);
    let m = overmount(&p);
    p.migrate();
    assert_eq!(
        p.c().read(s.data.nodeid, s.data_fh, 0, 10).unwrap(),
        b"MOUNTED"
    );
    assert_eq!(
        p.c().read(s.keep.nodeid, s.keep_fh, 0, 10).err(),
        Some(libc::EIO)
    );
    // Unmounted before the share goes: a mount point in it would leave the share behind.
    drop(m);
    drop(p);

    let confirm = [
        "--migration-mode=find-paths",
        "--migration-confirm-paths",
        "--sandbox=none",
    ];
    let mut p = start(&confirm, &confirm);
    let s = scene(&p);
    let m = overmount(&p);
    aborts_and_source_goes_on(&mut p, &s, When::BeforeSave, |_| ());
    drop(m);

    let mut p = start(&confirm, &guest_error(&confirm));
    let s = scene(&p);
    let _m = overmount(&p);
    p.migrate();
    let c = p.c();
    assert_eq!(
        c.read(s.data.nodeid, s.data_fh, 0, 10).err(),
        Some(libc::EIO)
    );
    assert_eq!(
        c.read(s.keep.nodeid, s.keep_fh, 0, 10).err(),
        Some(libc::EIO)
    );
    // The mounted directory is what the share has now.
    let dir = c.lookup(1, "dir").unwrap();
    let data = c.lookup(dir.nodeid, "data").unwrap();
    assert_ne!(data.nodeid, s.data.nodeid);
}
