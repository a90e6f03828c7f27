//! The share (one directory of N files and a tree of √N directories × √N files) and the walk a
//! Windows guest makes of it: READDIRPLUS, then per entry LOOKUP, OPEN, GETATTR with the fh,
//! READ 4 KiB, RELEASE, and never FORGET. Every reply is checked: an error reply, a short read or
//! wrong data fails the walk.

use std::collections::HashSet;
use std::fs;
use std::io;
use std::path::Path;

use vm_memory::ByteValued;

use crate::common::fuse_abi::*;
use crate::common::fuse_client::from_bytes;
use crate::common::FuseClient;

/// Reply header size.
const HDR: usize = std::mem::size_of::<OutHeader>();
/// READDIRPLUS reply buffer: one page, as a Linux guest asks for.
const READDIR_BUF: u32 = 4096;
/// READ size: what Windows' file cache asks for first.
const READ_SIZE: u32 = 4096;
/// The flat directory.
pub const FLAT: &str = "flat";
/// The tree's top directory.
pub const TREE: &str = "tree";

/// How the share is laid out.
#[derive(Clone, Copy)]
pub struct Layout {
    pub flat_files: usize,
    pub tree_dirs: usize,
    pub files_per_dir: usize,
}

impl Layout {
    /// `files` in the flat directory and about as many in a square tree.
    pub fn new(files: usize) -> Layout {
        let side = ((files as f64).sqrt().round() as usize).max(1);
        Layout {
            flat_files: files,
            tree_dirs: side,
            files_per_dir: files / side,
        }
    }
}

pub fn file_name(i: usize) -> String {
    format!("f{i:07}")
}

pub fn dir_name(d: usize) -> String {
    format!("d{d:04}")
}

/// The content of file `name` in directory `dir`: unique per file, so that a READ answered from
/// the wrong file shows.
pub fn content(dir: &str, name: &str) -> Vec<u8> {
    format!("million_files {dir}/{name}\n").into_bytes()
}

/// Create the share under `root` with two threads.
pub fn create(root: &Path, l: Layout) -> io::Result<()> {
    let flat = root.join(FLAT);
    let tree = root.join(TREE);
    fs::create_dir(&flat)?;
    fs::create_dir(&tree)?;
    for d in 0..l.tree_dirs {
        fs::create_dir(tree.join(dir_name(d)))?;
    }
    std::thread::scope(|s| {
        let jobs: Vec<_> = (0..2)
            .map(|t| {
                let (flat, tree) = (&flat, &tree);
                s.spawn(move || -> io::Result<()> {
                    for i in (t..l.flat_files).step_by(2) {
                        let n = file_name(i);
                        fs::write(flat.join(&n), content(FLAT, &n))?;
                    }
                    for d in (t..l.tree_dirs).step_by(2) {
                        let dn = dir_name(d);
                        for i in 0..l.files_per_dir {
                            let n = file_name(i);
                            fs::write(tree.join(&dn).join(&n), content(&dn, &n))?;
                        }
                    }
                    Ok(())
                })
            })
            .collect();
        jobs.into_iter()
            .try_for_each(|j| j.join().unwrap_or_else(|_| Err(io::Error::other("panic"))))
    })
}

/// What a walk did.
#[derive(Default)]
pub struct Walked {
    /// Files visited (LOOKUP … RELEASE each).
    pub files: usize,
    /// Distinct node IDs the daemon handed out (files and directories): inodes it holds, since
    /// the walk never sends FORGET.
    pub inodes: HashSet<u64>,
}

fn fail(what: &str, errno: i32) -> String {
    format!("{what}: {}", io::Error::from_raw_os_error(errno))
}

/// Walk the share: the flat directory (its first `limit` entries) and the tree (its first
/// `limit / files_per_dir` directories, at least one). `depth` requests in flight.
pub fn walk(c: &FuseClient, l: Layout, limit: usize, depth: usize) -> Result<Walked, String> {
    let mut w = Walked::default();
    let flat = lookup(c, FUSE_ROOT_ID, FLAT, &mut w)?;
    let n = walk_dir(c, flat, FLAT, limit, depth, &mut w)?;
    if n != l.flat_files.min(limit) {
        return Err(format!(
            "{FLAT}: {n} files listed, {} expected",
            l.flat_files.min(limit)
        ));
    }
    let tree = lookup(c, FUSE_ROOT_ID, TREE, &mut w)?;
    let dirs = list(c, tree, TREE, l.tree_dirs, &mut w)?;
    if dirs.len() != l.tree_dirs {
        return Err(format!(
            "{TREE}: {} entries, {} expected",
            dirs.len(),
            l.tree_dirs
        ));
    }
    let want_dirs = (limit / l.files_per_dir.max(1)).clamp(1, l.tree_dirs);
    for (name, _) in dirs.iter().take(want_dirs) {
        let d = lookup(c, tree, name, &mut w)?;
        let n = walk_dir(c, d, name, usize::MAX, depth, &mut w)?;
        if n != l.files_per_dir {
            return Err(format!(
                "{TREE}/{name}: {n} files, {} expected",
                l.files_per_dir
            ));
        }
    }
    Ok(w)
}

fn lookup(c: &FuseClient, parent: u64, name: &str, w: &mut Walked) -> Result<u64, String> {
    let e = c
        .lookup(parent, name)
        .map_err(|e| fail(&format!("LOOKUP {name}"), e))?;
    w.inodes.insert(e.nodeid);
    Ok(e.nodeid)
}

/// OPENDIR, READDIRPLUS until `limit` entries (or the end), RELEASEDIR: `(name, node ID)` of the
/// entries other than `.` and `..`.
fn list(
    c: &FuseClient,
    dir: u64,
    what: &str,
    limit: usize,
    w: &mut Walked,
) -> Result<Vec<(String, u64)>, String> {
    let fh = c
        .opendir(dir, 0)
        .map_err(|e| fail(&format!("OPENDIR {what}"), e))?
        .fh;
    let mut out = Vec::new();
    let mut off = 0;
    while out.len() < limit {
        let page = c
            .readdirplus(dir, fh, off, READDIR_BUF)
            .map_err(|e| fail(&format!("READDIRPLUS {what}"), e))?;
        let Some(last) = page.last() else { break };
        off = last.dirent.off;
        for e in page {
            let name = String::from_utf8_lossy(&e.dirent.name).into_owned();
            if name == "." || name == ".." || out.len() >= limit {
                continue;
            }
            if e.entry.nodeid == 0 {
                return Err(format!("READDIRPLUS {what}/{name}: no entry"));
            }
            w.inodes.insert(e.entry.nodeid);
            out.push((name, e.entry.nodeid));
        }
    }
    c.releasedir(dir, fh)
        .map_err(|e| fail(&format!("RELEASEDIR {what}"), e))?;
    Ok(out)
}

/// List `dir` (up to `limit` entries) and visit every file, a READDIRPLUS page at a time: LOOKUP,
/// OPEN, GETATTR (fh), READ, RELEASE of the page's files, each step with `depth` in flight.
/// Returns the files visited.
fn walk_dir(
    c: &FuseClient,
    dir: u64,
    what: &str,
    limit: usize,
    depth: usize,
    w: &mut Walked,
) -> Result<usize, String> {
    let entries = list(c, dir, what, limit, w)?;
    for page in entries.chunks(32) {
        let step = |reqs: Vec<(Vec<u8>, usize)>, op: &str| -> Result<Vec<Vec<u8>>, String> {
            c.pipeline(&reqs, depth)
                .into_iter()
                .zip(page)
                .map(|(r, (name, _))| r.map_err(|e| fail(&format!("{op} {what}/{name}"), e)))
                .collect()
        };
        let lookups = page.iter().map(|(name, _)| {
            let mut body = name.as_bytes().to_vec();
            body.push(0);
            (c.request(FUSE_LOOKUP, dir, &body), HDR + 128)
        });
        let entries: Vec<EntryOut> = step(lookups.collect(), "LOOKUP")?
            .iter()
            .map(|b| from_bytes(b, "LOOKUP"))
            .collect();
        for ((name, id), e) in page.iter().zip(&entries) {
            if e.nodeid != *id {
                return Err(format!(
                    "LOOKUP {what}/{name}: node {} ≠ {id} of READDIRPLUS",
                    e.nodeid
                ));
            }
        }
        let opens = page.iter().map(|&(_, id)| {
            let inp = OpenIn {
                flags: libc::O_RDONLY as u32,
                fuse_flags: 0,
            };
            (c.request(FUSE_OPEN, id, inp.as_slice()), HDR + 16)
        });
        let fhs: Vec<u64> = step(opens.collect(), "OPEN")?
            .iter()
            .map(|b| from_bytes::<OpenOut>(b, "OPEN").fh)
            .collect();
        let getattrs = page.iter().zip(&fhs).map(|(&(_, id), &fh)| {
            let inp = GetattrIn {
                flags: FUSE_GETATTR_FH,
                dummy: 0,
                fh,
            };
            (c.request(FUSE_GETATTR, id, inp.as_slice()), HDR + 104)
        });
        let attrs = step(getattrs.collect(), "GETATTR")?;
        let reads = page.iter().zip(&fhs).map(|(&(_, id), &fh)| {
            let inp = ReadIn {
                fh,
                offset: 0,
                size: READ_SIZE,
                ..Default::default()
            };
            (
                c.request(FUSE_READ, id, inp.as_slice()),
                HDR + READ_SIZE as usize,
            )
        });
        let data = step(reads.collect(), "READ")?;
        for (((name, _), a), d) in page.iter().zip(&attrs).zip(&data) {
            let want = content(what, name);
            let size = from_bytes::<AttrOut>(a, "GETATTR").attr.size;
            if size != want.len() as u64 {
                return Err(format!(
                    "GETATTR {what}/{name}: size {size}, {} expected",
                    want.len()
                ));
            }
            if *d != want {
                return Err(format!(
                    "READ {what}/{name}: {} bytes {:?}, {:?} expected",
                    d.len(),
                    String::from_utf8_lossy(d),
                    String::from_utf8_lossy(&want)
                ));
            }
        }
        let releases = page.iter().zip(&fhs).map(|(&(_, id), &fh)| {
            let inp = ReleaseIn {
                fh,
                flags: libc::O_RDONLY as u32,
                ..Default::default()
            };
            (c.request(FUSE_RELEASE, id, inp.as_slice()), HDR)
        });
        step(releases.collect(), "RELEASE")?;
        w.files += page.len();
    }
    Ok(entries.len())
}
