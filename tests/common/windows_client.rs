//! A client that sends what the Windows "VirtIO-FS Service" sends (virtio-win's
//! `viofs/svc/virtiofs.cpp`, commit fbcc19d, read for this; `shared/notes/windows-guest.md` has
//! the account request by request, `L<n>` its lines), for the operations a user makes from
//! Explorer or `cmd`: mount, `dir /s`, open + read, copy a file or folder in, overwrite, rename,
//! delete, and the symlinks met on the way.
//!
//! What it keeps from the service: INIT asks FUSE 7.31 with only DO_READDIRPLUS | MAX_PAGES
//! and `max_readahead` 0 (L2710); every header carries uid = gid = 0 but CREATE, MKDIR and
//! FALLOCATE, which carry the share root's owner (L247, L672, L722, L2051); there is no node-ID
//! cache: every path is walked from node 1, one LOOKUP per component, the root itself being
//! `LOOKUP(1, ".")`, a symlink inside a path read and its target walked from the share root
//! (L1012); WinFsp walks a path twice per open (GetSecurityByName, then Open); every lookup the
//! service makes (LOOKUP, CREATE, MKDIR, non-dot READDIRPLUS entries) is counted, and given back
//! with one FORGET (hiprio queue) only after a successful UNLINK or RMDIR (L766); a CREATE or
//! MKDIR that returns a node ID still counted fails (L693, L738). Every reply is checked: an
//! error is returned to the caller with the opcode, and every one seen is counted by opcode.
//!
//! Requests go one at a time per calling thread; WinFsp's 4–16 dispatcher threads are several
//! threads sharing one client on a guest with `GuestOptions::shared_waits` (the service's one
//! request queue), or clients on other queues ([`WindowsClient::on_queue`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::frontend::TestGuest;
use super::fuse_abi::*;
use super::fuse_client::{from_bytes, FuseClient};

mod changes;

/// `fuse_init_in` of FUSE 7.31: the service's (viofs/shared/fuse.h).
const INIT_MINOR: u32 = 31;
const INIT_FLAGS: u32 = (FUSE_DO_READDIRPLUS | FUSE_MAX_PAGES) as u32;
/// READDIRPLUS size: WinFsp's directory buffer length (65,520) × 2 (L2423).
pub const READDIRPLUS_SIZE: u32 = 131_040;
/// The emptiness check's READDIR (L1175): a 4 KiB buffer less the reply header.
const EMPTY_CHECK_SIZE: u32 = 4096 - 16;
/// READLINK's reply buffer: 300 bytes with the header (L852).
const READLINK_REPLY: usize = 300;
const O_DIRECTORY: u32 = 0o200000;

/// A failed request: its opcode and errno.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Failed {
    pub opcode: u32,
    pub errno: i32,
}

type R<T> = Result<T, Failed>;

fn failed(opcode: u32) -> impl Fn(i32) -> Failed {
    move |errno| Failed { opcode, errno }
}

/// What the service holds of an open file or directory (`VIRTFS_FILE_CONTEXT`).
#[derive(Clone, Copy, Debug)]
pub struct Opened {
    pub nodeid: u64,
    /// 0 for a symlink, which is never opened.
    pub fh: u64,
    pub is_dir: bool,
    pub attr: Attr,
}

#[derive(Default)]
struct Counts {
    /// The service's `LookupMap`: lookups of each node it has not given back.
    lookups: HashMap<u64, u64>,
    /// Replies by opcode (errors included).
    replies: HashMap<u32, u64>,
    /// Error replies by opcode.
    errors: HashMap<u32, u64>,
}

pub struct WindowsClient {
    c: FuseClient,
    /// The share root's owner, from `LOOKUP(1, ".")` (the service's `OwnerUid/OwnerGid`).
    owner: (u32, u32),
    max_pages: u32,
    max_write: u32,
    counts: Arc<Mutex<Counts>>,
}

impl WindowsClient {
    /// Mount: INIT, STATFS(1), `LOOKUP(1, ".")` (L2710, L1308, GetSecurityByName of `\`).
    pub fn mount(guest: Arc<TestGuest>) -> R<WindowsClient> {
        let c = FuseClient::new(guest, 0);
        let mut body = Vec::new();
        for v in [FUSE_KERNEL_VERSION, INIT_MINOR, 0, INIT_FLAGS] {
            body.extend_from_slice(&v.to_le_bytes());
        }
        let reply = c
            .raw(FUSE_INIT, ROOT, &body, 16 + 64)
            .map_err(failed(FUSE_INIT))?;
        let init: InitOut = from_bytes(&reply, "INIT");
        let mut w = WindowsClient {
            c,
            owner: (0, 0),
            max_pages: if init.max_pages == 0 {
                32
            } else {
                u32::from(init.max_pages)
            },
            max_write: init.max_write,
            counts: Arc::default(),
        };
        if w.max_write == 0 {
            return Err(Failed {
                opcode: FUSE_INIT,
                errno: 0,
            });
        }
        w.c.statfs(ROOT).map_err(failed(FUSE_STATFS))?;
        let root = w.lookup(ROOT, ".")?;
        w.owner = (root.attr.uid, root.attr.gid);
        Ok(w)
    }

    /// The same session on request queue `queue` (another WinFsp dispatcher thread).
    pub fn on_queue(&self, queue: usize) -> WindowsClient {
        WindowsClient {
            c: self.c.on_queue(queue),
            owner: self.owner,
            max_pages: self.max_pages,
            max_write: self.max_write,
            counts: Arc::clone(&self.counts),
        }
    }

    pub fn owner(&self) -> (u32, u32) {
        self.owner
    }

    /// Lookups the service holds of `nodeid` and has not given back.
    pub fn held(&self, nodeid: u64) -> u64 {
        self.counts
            .lock()
            .unwrap()
            .lookups
            .get(&nodeid)
            .copied()
            .unwrap_or(0)
    }

    /// Nodes the service holds.
    pub fn nodes_held(&self) -> usize {
        self.counts.lock().unwrap().lookups.len()
    }

    /// Error replies seen, by opcode.
    pub fn errors(&self) -> HashMap<u32, u64> {
        self.counts.lock().unwrap().errors.clone()
    }

    /// Replies seen, by opcode (errors included; INIT, STATFS and FORGET left out).
    pub fn replies(&self) -> HashMap<u32, u64> {
        self.counts.lock().unwrap().replies.clone()
    }

    fn check<T>(&self, opcode: u32, r: Result<T, i32>) -> R<T> {
        let mut counts = self.counts.lock().unwrap();
        *counts.replies.entry(opcode).or_default() += 1;
        r.map_err(|errno| {
            *counts.errors.entry(opcode).or_default() += 1;
            Failed { opcode, errno }
        })
    }

    fn count(&self, nodeid: u64) {
        *self
            .counts
            .lock()
            .unwrap()
            .lookups
            .entry(nodeid)
            .or_default() += 1;
    }

    /// A node a CREATE or MKDIR returned: a node ID the service still holds makes it fail
    /// (`LookupMap.emplace` refuses it, L693/L738).
    fn created(&self, opcode: u32, nodeid: u64) -> R<()> {
        let mut counts = self.counts.lock().unwrap();
        if counts.lookups.contains_key(&nodeid) {
            *counts.errors.entry(opcode).or_default() += 1;
            return Err(Failed {
                opcode,
                errno: libc::EEXIST,
            });
        }
        counts.lookups.insert(nodeid, 1);
        Ok(())
    }

    fn lookup(&self, parent: u64, name: &str) -> R<EntryOut> {
        let e = self.check(FUSE_LOOKUP, self.c.lookup(parent, name))?;
        self.count(e.nodeid);
        Ok(e)
    }

    /// READLINK with the service's 300-byte reply buffer.
    pub fn readlink(&self, nodeid: u64) -> R<String> {
        let target = self.check(
            FUSE_READLINK,
            self.c.raw(FUSE_READLINK, nodeid, &[], READLINK_REPLY),
        )?;
        Ok(String::from_utf8_lossy(&target).into_owned())
    }

    /// `PathWalkthough` (L1012): one LOOKUP per component of `path` but the last, from node
    /// 1; a symlink among them is read and its target walked from the share root. Returns the
    /// parent's node and the last component's name.
    pub fn walk_parent<'p>(&self, path: &'p str) -> R<(u64, &'p str)> {
        let mut parent = ROOT;
        let mut rest = path;
        while let Some((name, tail)) = rest.split_once('/') {
            let mut e = self.lookup(parent, name)?;
            if e.attr.mode & libc::S_IFLNK == libc::S_IFLNK {
                let target = self.readlink(e.nodeid)?;
                e = self.walk(&target)?.1;
            }
            parent = e.nodeid;
            rest = tail;
        }
        Ok((parent, rest))
    }

    /// `VirtFsLookupFileName` (L1059): [`Self::walk_parent`], then the LOOKUP of the last
    /// component (the root itself: `LOOKUP(1, ".")`). Returns the parent's node and the entry.
    pub fn walk(&self, path: &str) -> R<(u64, EntryOut)> {
        if path.is_empty() {
            return Ok((ROOT, self.lookup(ROOT, ".")?));
        }
        let (parent, name) = self.walk_parent(path)?;
        Ok((parent, self.lookup(parent, name)?))
    }

    /// GetSecurityByName + Open (L1346, L1520): two walks, then OPEN or OPENDIR unless the
    /// leaf is a symlink (fh 0), then GETATTR with FUSE_GETATTR_FH.
    pub fn open(&self, path: &str, flags: u32) -> R<Opened> {
        self.walk(path)?;
        let (_, e) = self.walk(path)?;
        let is_link = e.attr.mode & libc::S_IFLNK == libc::S_IFLNK;
        let is_dir = !is_link && e.attr.mode & libc::S_IFDIR != 0;
        let fh = if is_link {
            0
        } else if is_dir {
            let o = self
                .c
                .opendir(e.nodeid, libc::O_RDONLY as u32 | O_DIRECTORY);
            self.check(FUSE_OPENDIR, o)?.fh
        } else {
            self.check(FUSE_OPEN, self.c.open(e.nodeid, flags))?.fh
        };
        let a = self.check(FUSE_GETATTR, self.c.getattr(e.nodeid, Some(fh)))?;
        Ok(Opened {
            nodeid: e.nodeid,
            fh,
            is_dir,
            attr: a.attr,
        })
    }

    /// Close (L1604): RELEASE or RELEASEDIR (of fh 0 too). WinFsp's Close returns nothing: an
    /// error reply is counted and otherwise ignored, as the service ignores it.
    pub fn close(&self, o: &Opened) {
        let _ = if o.is_dir {
            self.check(FUSE_RELEASEDIR, self.c.releasedir(o.nodeid, o.fh))
        } else {
            self.check(FUSE_RELEASE, self.c.release(o.nodeid, o.fh, 0))
        };
    }

    /// ReadDirectory of an open directory (L2390): READDIRPLUS pages from offset 0 until an
    /// empty reply; each non-dot entry counted; a symlink entry's target read and walked
    /// (FixReparsePointAttributes). Returns `(name, entry)` in listing order, dots included.
    pub fn read_directory(&self, dir: &Opened) -> R<Vec<(String, EntryOut)>> {
        let mut out = Vec::new();
        let mut offset = 0;
        loop {
            let page = self
                .c
                .readdirplus(dir.nodeid, dir.fh, offset, READDIRPLUS_SIZE);
            let page = self.check(FUSE_READDIRPLUS, page)?;
            if page.is_empty() {
                return Ok(out);
            }
            for d in page {
                let name = String::from_utf8_lossy(&d.dirent.name).into_owned();
                if name != "." && name != ".." {
                    self.count(d.entry.nodeid);
                }
                if d.entry.attr.mode & libc::S_IFMT == libc::S_IFLNK {
                    let target = self.readlink(d.entry.nodeid)?;
                    // A dangling link is listed all the same.
                    let _ = self.walk(&target);
                }
                offset = d.dirent.off;
                out.push((name, d.entry));
            }
        }
    }

    /// `dir /s` below `path`: every directory opened and listed, recursively. Returns the paths
    /// of everything listed (dots left out), directories first in each.
    pub fn dir_s(&self, path: &str) -> R<Vec<String>> {
        let d = self.open(path, 0)?;
        let entries = self.read_directory(&d)?;
        self.close(&d);
        let mut all = Vec::new();
        for (name, e) in entries {
            if name == "." || name == ".." {
                continue;
            }
            let p = if path.is_empty() {
                name
            } else {
                format!("{path}/{name}")
            };
            all.push(p.clone());
            if e.attr.mode & libc::S_IFMT == libc::S_IFDIR {
                all.extend(self.dir_s(&p)?);
            }
        }
        Ok(all)
    }

    /// One READ of `size` bytes (at most `max_pages` × 4 KiB, the service's chunk) at `offset`
    /// of an open file.
    pub fn read(&self, o: &Opened, offset: u64, size: u32) -> R<Vec<u8>> {
        let size = size.min(self.max_pages * 4096);
        self.check(FUSE_READ, self.c.read(o.nodeid, o.fh, offset, size))
    }

    /// Open + read a whole file: READs of `max_pages` × 4 KiB until a short one.
    pub fn read_file(&self, path: &str) -> R<Vec<u8>> {
        let o = self.open(path, libc::O_RDONLY as u32)?;
        let chunk = self.max_pages * 4096;
        let mut data = Vec::new();
        loop {
            let r = self.read(&o, data.len() as u64, chunk)?;
            let n = r.len();
            data.extend_from_slice(&r);
            if n < chunk as usize {
                break;
            }
        }
        self.close(&o);
        Ok(data)
    }
}
