//! The fuzz harness's scratch share: laying it out afresh for each input, and what the harness
//! checks around it (nothing outside it changes, no fd on it is left open).

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// What must not change outside the share.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Outside {
    entries: Vec<std::ffi::OsString>,
    base: (u32, u32, u32, i64, i64),
    canary: (u64, u32, u32, u32, u64, i64, i64, i64, i64),
    content: Vec<u8>,
}

fn meta5(m: &std::fs::Metadata) -> (u32, u32, u32, i64, i64) {
    (m.mode(), m.uid(), m.gid(), m.mtime(), m.mtime_nsec())
}

pub(super) fn snapshot(base: &Path) -> Outside {
    let mut entries: Vec<_> = std::fs::read_dir(base)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    entries.sort();
    let b = std::fs::symlink_metadata(base).unwrap();
    let canary = base.join("canary");
    let c = std::fs::symlink_metadata(&canary).unwrap();
    Outside {
        entries,
        base: meta5(&b),
        canary: (
            c.ino(),
            c.mode(),
            c.uid(),
            c.gid(),
            c.nlink(),
            c.size() as i64,
            c.mtime(),
            c.ctime(),
            c.ctime_nsec(),
        ),
        content: std::fs::read(canary).unwrap(),
    }
}

/// The process's fds on files under `base` (the share and the canary): what the filesystem
/// holds. fds of the fuzzer itself (pipes to a symbolizer, /dev/null) do not count.
pub(super) fn fds_under(base: &Path) -> Vec<PathBuf> {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .filter(|t| t.starts_with(base))
        .collect()
}

fn cpath(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

/// Removes `p` whatever modes the guest left on it.
fn remove_tree(p: &Path) {
    let m = std::fs::symlink_metadata(p).unwrap();
    if m.is_dir() {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o700)).unwrap();
        for e in std::fs::read_dir(p).unwrap() {
            remove_tree(&e.unwrap().path());
        }
        std::fs::remove_dir(p).unwrap();
    } else {
        std::fs::remove_file(p).unwrap();
    }
}

/// Empties the share (and its root's mode, owner and xattrs), then lays out a few files, a
/// directory and symlinks pointing inside and outside.
pub(super) fn populate(share: &Path) {
    for e in std::fs::read_dir(share).unwrap() {
        remove_tree(&e.unwrap().path());
    }
    let c = cpath(share);
    // SAFETY: plain syscalls on a NUL-terminated path and buffers of the stated sizes.
    unsafe {
        libc::chmod(c.as_ptr(), 0o755);
        libc::lchown(c.as_ptr(), libc::geteuid(), libc::getegid());
        let mut names = vec![0u8; 65536];
        let n = libc::llistxattr(c.as_ptr(), names.as_mut_ptr().cast(), names.len());
        if n > 0 {
            for name in names[..n as usize]
                .split(|&b| b == 0)
                .filter(|s| !s.is_empty())
            {
                let name = CString::new(name).unwrap();
                libc::lremovexattr(c.as_ptr(), name.as_ptr());
            }
        }
    }
    std::fs::write(share.join("file"), "hello, vhostfs\n".repeat(300)).unwrap();
    std::fs::write(share.join("empty"), "").unwrap();
    std::fs::create_dir_all(share.join("dir/sub")).unwrap();
    std::fs::write(share.join("dir/inner"), "inner\n").unwrap();
    let canary = share.parent().unwrap().join("canary");
    std::os::unix::fs::symlink("file", share.join("link")).unwrap();
    std::os::unix::fs::symlink("../canary", share.join("up")).unwrap();
    std::os::unix::fs::symlink(&canary, share.join("abs")).unwrap();
    std::os::unix::fs::symlink("/etc", share.join("etc")).unwrap();
}
