//! The fd cache is bounded in time: an O_PATH fd that no open file or directory of the guest
//! needs is closed at most 1 s after the guest last used its inode, so a file the host deletes
//! gives its space back (no fd pins it) and an idle daemon holds almost no fds, however many
//! inodes the guest holds without FORGET. The 100,000-file walk: `tests/inode_walk.rs`.

mod common;

use std::fs;
use std::time::{Duration, Instant};

use common::fuse_abi::*;
use common::{Daemon, Mount, Session, TempDir};

fn free_bytes(path: &std::path::Path) -> u64 {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: valid C string and out pointer.
    assert_eq!(unsafe { libc::statvfs(c.as_ptr(), &mut st) }, 0);
    st.f_bfree * st.f_frsize
}

/// The serving process's fds that point at deleted files (but the guest memory's memfd).
fn deleted_fds(daemon: &Daemon) -> Vec<String> {
    let dir = format!("/proc/{}/fd", daemon.served_pid().unwrap());
    fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| fs::read_link(e.ok()?.path()).ok())
        .map(|p| p.display().to_string())
        .filter(|p| p.ends_with("(deleted)") && !p.starts_with("/memfd:"))
        .collect()
}

const BIG: u64 = 256 << 20;

fn host_delete_frees_the_space(mode: &str) {
    // A tmpfs of its own, so its free space measures what the daemon pins.
    let fs_ = Mount::tmpfs("size=512m");
    let shared = TempDir::new_in(fs_.path(), "share").unwrap();
    let big = shared.join("big");
    let f = fs::File::create(&big).unwrap();
    f.set_len(BIG).unwrap();
    // Real pages, not a sparse file: write them.
    let chunk = vec![0xa5u8; 1 << 20];
    let mut f = f;
    for _ in 0..(BIG >> 20) {
        std::io::Write::write_all(&mut f, &chunk).unwrap();
    }
    drop(f);
    let s = Session::start_on_share(shared, &[&format!("--inode-file-handles={mode}")]);
    let e = s.client.lookup(FUSE_ROOT_ID, "big").unwrap();
    assert_eq!(s.client.getattr(e.nodeid, None).unwrap().attr.size, BIG);
    let full = free_bytes(fs_.path());
    fs::remove_file(&big).unwrap();
    let start = Instant::now();
    while free_bytes(fs_.path()) < full + BIG / 2 {
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "{mode}: the host's rm gave no space back within 2 s (deleted fds: {:?})",
            deleted_fds(&s.daemon)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let took = start.elapsed();
    println!("{mode}: space back {took:?} after the host's rm");
    assert_eq!(deleted_fds(&s.daemon), Vec::<String>::new(), "{mode}");
    // The guest still holds the node: it is stale now, and the daemon is fine.
    assert!(s.client.getattr(e.nodeid, None).is_err());
    assert!(s.client.getattr(FUSE_ROOT_ID, None).is_ok());
}

#[test]
fn a_host_rm_of_a_file_the_guest_looked_up_frees_its_space_within_2s_prefer() {
    host_delete_frees_the_space("prefer");
}

#[test]
fn a_host_rm_of_a_file_the_guest_looked_up_frees_its_space_within_2s_mandatory() {
    host_delete_frees_the_space("mandatory");
}

/// `ls -l` of 20,000 files with `--rlimit-nofile=4096` (READDIRPLUS, then LOOKUP and GETATTR of
/// each, no FORGET): 2 s later the daemon holds fewer than 64 fds.
#[test]
fn ls_l_of_20000_files_leaves_fewer_than_64_fds_after_2s_idle() {
    let shared = TempDir::new("fd-bound-many").unwrap();
    fs::create_dir(shared.join("many")).unwrap();
    for i in 0..20_000 {
        fs::File::create(shared.join(&format!("many/f{i:05}"))).unwrap();
    }
    let s = Session::start_on_share(
        shared,
        &["--inode-file-handles=prefer", "--rlimit-nofile=4096"],
    );
    let c = &s.client;
    let dir = c.lookup(FUSE_ROOT_ID, "many").unwrap();
    let dh = c.opendir(dir.nodeid, 0).unwrap();
    let (mut offset, mut names) = (0, Vec::new());
    loop {
        let batch = c.readdirplus(dir.nodeid, dh.fh, offset, 64 * 1024).unwrap();
        if batch.is_empty() {
            break;
        }
        for e in batch {
            offset = e.dirent.off;
            if e.entry.nodeid != 0 {
                names.push(String::from_utf8(e.dirent.name).unwrap());
            }
        }
    }
    c.releasedir(dir.nodeid, dh.fh).unwrap();
    assert_eq!(names.len(), 20_000);
    let mut max = 0;
    for (i, n) in names.iter().enumerate() {
        let e = c.lookup(dir.nodeid, n).unwrap();
        c.getattr(e.nodeid, None).unwrap();
        if i % 1000 == 0 {
            max = max.max(s.daemon.fd_count().unwrap());
        }
    }
    std::thread::sleep(Duration::from_secs(2));
    let idle = s.daemon.fd_count().unwrap();
    println!("ls -l of 20,000 files: max {max} fds during, {idle} after 2 s idle");
    assert!(idle < 64, "{idle} fds after 2 s idle");
}
