//! Paths of inodes relative to the share: found on the source through `/proc/self/fd` (and a
//! bounded search of the share where that fails), opened on both sides one component at a time.

use std::collections::HashMap;
use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use crate::passthrough::state::host_inode::InodeKey;
use crate::passthrough::sys;
use crate::passthrough::sys::fd as sysfd;

/// Directory entries the fallback search reads at most (over the whole share, for all the
/// inodes whose path `/proc/self/fd` did not give): past that, those inodes are sent invalid.
pub const SEARCH_LIMIT: usize = 200_000;

const DIRENT64_HEADER: usize = 19;

fn component(name: &[u8]) -> io::Result<CString> {
    if name.is_empty() || name == b"." || name == b".." {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    CString::new(name).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

/// Opens paths relative to a root fd, one component at a time with `O_NOFOLLOW` (a symlink or
/// `..` anywhere but as the last component fails the open); the directories of the last path
/// are kept, so paths in sorted order cost about one `openat` each.
pub struct Walker<'a> {
    root: BorrowedFd<'a>,
    /// The directories opened for the last path: (name, O_PATH fd), from the root down.
    stack: Vec<(Vec<u8>, OwnedFd)>,
}

impl<'a> Walker<'a> {
    pub fn new(root: BorrowedFd<'a>) -> Walker<'a> {
        Walker {
            root,
            stack: Vec::new(),
        }
    }

    /// An O_PATH fd of `rel` (no leading `/`, not empty).
    pub fn open(&mut self, rel: &[u8]) -> io::Result<OwnedFd> {
        let parts: Vec<&[u8]> = rel.split(|&b| b == b'/').collect();
        let (last, dirs) = parts.split_last().expect("split yields one part");
        let keep = self
            .stack
            .iter()
            .zip(dirs.iter())
            .take_while(|((have, _), want)| have.as_slice() == **want)
            .count();
        self.stack.truncate(keep);
        for d in &dirs[keep..] {
            let name = component(d)?;
            let parent = self.stack.last().map_or(self.root, |(_, fd)| fd.as_fd());
            let fd = sys::openat(
                parent,
                &name,
                libc::O_PATH | libc::O_NOFOLLOW | libc::O_DIRECTORY,
                0,
            )?;
            self.stack.push((d.to_vec(), fd));
        }
        let parent = self.stack.last().map_or(self.root, |(_, fd)| fd.as_fd());
        sys::openat(
            parent,
            &component(last)?,
            libc::O_PATH | libc::O_NOFOLLOW,
            0,
        )
    }
}

/// `/proc/self/fd`'s link of `fd` made relative to the share whose own link is `root`; `None`
/// when it is not below the share or names a deleted dentry.
pub fn relative(root: &[u8], link: &[u8]) -> Option<Vec<u8>> {
    if link.ends_with(b" (deleted)") {
        return None;
    }
    let rest = if root == b"/" {
        link.strip_prefix(b"/")?
    } else {
        link.strip_prefix(root)?.strip_prefix(b"/")?
    };
    (!rest.is_empty()).then(|| rest.to_vec())
}

/// Searches the share below `root` (at most [`SEARCH_LIMIT`] entries, never following a
/// symlink) for the inodes `wanted` (key → caller's index); returns the paths found by index.
pub fn search(root: BorrowedFd, wanted: &HashMap<InodeKey, usize>) -> HashMap<usize, Vec<u8>> {
    let inos: std::collections::HashSet<u64> = wanted.keys().map(|k| k.ino).collect();
    let mut found = HashMap::new();
    let mut seen = 0usize;
    let mut queue: std::collections::VecDeque<(Vec<u8>, OwnedFd)> = Default::default();
    match sys::openat(root, c".", libc::O_RDONLY | libc::O_DIRECTORY, 0) {
        Ok(fd) => queue.push_back((Vec::new(), fd)),
        Err(e) => log::warn!("migration: cannot search the share: {e}"),
    }
    let mut buf = vec![0u8; 32 * 1024];
    while let Some((path, dir)) = queue.pop_front() {
        loop {
            let n = match sysfd::getdents64(dir.as_fd(), &mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            let mut pos = 0;
            while pos + DIRENT64_HEADER <= n {
                let rec = &buf[pos..n];
                let ino = u64::from_ne_bytes(rec[0..8].try_into().expect("8 bytes"));
                let reclen = usize::from(u16::from_ne_bytes([rec[16], rec[17]]));
                if reclen < DIRENT64_HEADER || reclen > rec.len() {
                    break;
                }
                let kind = rec[18];
                let field = &rec[DIRENT64_HEADER..reclen];
                let name = &field[..field.iter().position(|&b| b == 0).unwrap_or(field.len())];
                pos += reclen;
                if name == b"." || name == b".." {
                    continue;
                }
                seen += 1;
                if seen > SEARCH_LIMIT {
                    return found;
                }
                let Ok(cname) = CString::new(name) else {
                    continue;
                };
                let mut child = path.clone();
                if !child.is_empty() {
                    child.push(b'/');
                }
                child.extend_from_slice(name);
                if inos.contains(&ino) {
                    if let Ok(st) = sys::statx(dir.as_fd(), &cname, 0, sys::STATX_WANTED) {
                        if let Some(&i) = wanted.get(&InodeKey::of(&st)) {
                            found.entry(i).or_insert_with(|| child.clone());
                            if found.len() == wanted.len() {
                                return found;
                            }
                        }
                    }
                }
                if kind == libc::DT_DIR {
                    let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW;
                    if let Ok(fd) = sys::openat(dir.as_fd(), &cname, flags, 0) {
                        queue.push_back((child, fd));
                    }
                }
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths() {
        assert_eq!(relative(b"/", b"/a/b"), Some(b"a/b".to_vec()));
        assert_eq!(
            relative(b"/srv/share", b"/srv/share/a"),
            Some(b"a".to_vec())
        );
        assert_eq!(relative(b"/srv/share", b"/srv/shared/a"), None);
        assert_eq!(relative(b"/srv/share", b"/srv/share"), None);
        assert_eq!(relative(b"/", b"/a (deleted)"), None);
        assert_eq!(relative(b"/srv", b"/etc/x"), None);
    }

    #[test]
    fn walker_opens_below_the_root_only() {
        let dir = crate::temp_dir::TempDir::new("vhostfs-walk").unwrap();
        std::fs::create_dir_all(dir.join("a/b")).unwrap();
        std::fs::write(dir.join("a/b/f"), b"x").unwrap();
        std::fs::write(dir.join("a/g"), b"y").unwrap();
        std::os::unix::fs::symlink("b", dir.join("a/l")).unwrap();
        let root = std::fs::File::open(dir.path()).unwrap();
        let mut w = Walker::new(root.as_fd());
        for ok in [&b"a/b/f"[..], b"a/g", b"a/b", b"a", b"a/l"] {
            w.open(ok).unwrap();
        }
        for bad in [
            &b"a/l/f"[..],
            b"../x",
            b"a/../a/g",
            b"a//g",
            b"",
            b"a/",
            b"/a",
        ] {
            assert!(w.open(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
        let st = sys::statx(root.as_fd(), c"a/b/f", 0, sys::STATX_WANTED).unwrap();
        let wanted = HashMap::from([(InodeKey::of(&st), 7)]);
        assert_eq!(search(root.as_fd(), &wanted)[&7], b"a/b/f");
    }
}
