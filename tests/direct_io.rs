//! `--allow-direct-io`: the guest's O_DIRECT reaches the host open (it is stripped by default,
//! as virtiofsd does), checked in the flags of the serving process's fd; data moves either way.
//! The share is under /var/tmp: /tmp may be a tmpfs, where O_DIRECT means nothing.

mod common;

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use common::fuse_abi::*;
use common::Session;

const DIRECT_RDWR: u32 = (libc::O_RDWR | libc::O_DIRECT) as u32;
const BLOCK: usize = 4096;

/// The open(2) flags of the fds of `pid` on the file `path` (O_PATH fds left out), from
/// /proc/PID/fdinfo.
fn open_flags_on(pid: u32, path: &Path) -> Vec<i32> {
    let want = fs::metadata(path).unwrap();
    let mut found = Vec::new();
    for fd in fs::read_dir(format!("/proc/{pid}/fd")).unwrap() {
        let fd = fd.unwrap();
        let Ok(st) = fs::metadata(fd.path()) else {
            continue;
        };
        if (st.dev(), st.ino()) != (want.dev(), want.ino()) {
            continue;
        }
        let info = fs::read_to_string(format!(
            "/proc/{pid}/fdinfo/{}",
            fd.file_name().to_string_lossy()
        ))
        .unwrap();
        let flags = info
            .lines()
            .find_map(|l| l.strip_prefix("flags:"))
            .map(|v| i32::from_str_radix(v.trim(), 8).unwrap())
            .unwrap();
        if flags & libc::O_PATH == 0 {
            found.push(flags);
        }
    }
    found
}

/// A 4 KiB block written and read back through `fh` with page-aligned guest buffers.
fn aligned_io(s: &Session, nodeid: u64, fh: u64, seed: u8) {
    let data: Vec<u8> = (0..BLOCK).map(|i| (i as u8) ^ seed).collect();
    let c = &s.client;
    assert_eq!(c.write_paged(nodeid, fh, 0, &data), Ok(BLOCK as u32));
    assert_eq!(c.read_paged(nodeid, fh, 0, BLOCK as u32), Ok(data));
}

/// CREATE and OPEN with O_DIRECT; `kept` is whether the host fds must have it.
fn check(extra: &[&str], kept: bool) {
    let s = Session::start_in(Path::new("/var/tmp"), extra);
    let c = &s.client;
    let pid = s.daemon.served_pid().unwrap();
    let path = s.shared.join("f");

    let (e, o) = c.create(ROOT, "f", 0o644, DIRECT_RDWR, 0).expect("CREATE");
    let flags = open_flags_on(pid, &path);
    assert_eq!(flags.len(), 1, "{extra:?}: {flags:?}");
    assert_eq!(flags[0] & libc::O_DIRECT != 0, kept, "{extra:?}: {flags:?}");
    aligned_io(&s, e.nodeid, o.fh, 1);
    c.release(e.nodeid, o.fh, DIRECT_RDWR).unwrap();
    assert!(open_flags_on(pid, &path).is_empty());

    let o = c.open(e.nodeid, DIRECT_RDWR).expect("OPEN");
    let flags = open_flags_on(pid, &path);
    assert_eq!(flags.len(), 1, "{extra:?}: {flags:?}");
    assert_eq!(flags[0] & libc::O_DIRECT != 0, kept, "{extra:?}: {flags:?}");
    aligned_io(&s, e.nodeid, o.fh, 2);
    let on_host = fs::read(&path).unwrap();
    assert_eq!(on_host.len(), BLOCK);
    assert_eq!(on_host[1], 1 ^ 2);
    c.release(e.nodeid, o.fh, DIRECT_RDWR).unwrap();
}

#[test]
fn o_direct_is_stripped_by_default() {
    check(&[], false);
}

#[test]
fn allow_direct_io_keeps_o_direct() {
    check(&["--allow-direct-io"], true);
    check(&["-o", "allow_direct_io"], true);
}
