//! The destination side: the stream's inodes and open files re-opened in this daemon's share,
//! then installed in one step.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};

use super::codec::Decoder;
use super::config::OnError;
use super::paths::Walker;
use super::records::{
    invalid_data, HandleRecord, InodeRecord, Location, Section, HANDLE_MIN, INODE_MIN, LOC_FD,
    LOC_HANDLE, LOC_INVALID, LOC_KEYED, LOC_PATH, TAG,
};
use crate::passthrough::filesystem::PassthroughFs;
use crate::passthrough::state::file_handle::{handles_are_stable, FileHandle};
use crate::passthrough::state::handle_table::OpenFile;
use crate::passthrough::state::host_inode::{InodeKey, InodeSource};
use crate::passthrough::state::inode_table::{Inode, ROOT_ID};
use crate::passthrough::sys;
use crate::passthrough::sys::fd as sysfd;

/// A state re-opened and ready to install ([`PassthroughFs::install`]).
pub struct Loaded {
    inodes: Vec<Prepared>,
    handles: Vec<(u64, Option<OpenFile>)>,
    next_fh: u64,
    /// Inodes and fhs marked lost (`guest-error`).
    pub lost_inodes: usize,
    pub lost_handles: usize,
}

struct Prepared {
    inode: Inode,
    nodeid: u64,
    lookups: u64,
    generation: u64,
}

/// Open flags of a handle's fd that are not re-applied: creation, and O_APPEND (never on a host
/// fd, see files.rs).
const NOT_REOPENED: i32 =
    libc::O_CREAT | libc::O_EXCL | libc::O_TRUNC | libc::O_NOCTTY | libc::O_APPEND;

fn handle(dec: &mut Decoder, what: &str) -> io::Result<Option<(i32, Vec<u8>)>> {
    match dec.u8()? {
        0 => Ok(None),
        1 => Ok(Some((dec.i32()?, dec.bytes()?.to_vec()))),
        t => Err(invalid_data(format!("{what}: handle flag {t}"))),
    }
}

pub(super) fn decode(dec: &mut Decoder) -> io::Result<Section> {
    dec.tag(TAG)?;
    let root = handle(dec, "root")?;
    let n = dec.count(8)?;
    let mut mounts = Vec::with_capacity(n);
    for _ in 0..n {
        mounts.push(dec.bytes()?.to_vec());
    }
    let n = dec.count(INODE_MIN)?;
    let mut inodes = Vec::with_capacity(n);
    let mut ids = HashSet::with_capacity(n);
    for _ in 0..n {
        let (nodeid, lookups, kind, generation) = (dec.u64()?, dec.u64()?, dec.u32()?, dec.u64()?);
        if nodeid == 0 || nodeid == ROOT_ID || lookups == 0 || !ids.insert(nodeid) {
            return Err(invalid_data(format!("bad or repeated node ID {nodeid}")));
        }
        let location = match dec.u8()? {
            LOC_INVALID => Location::Invalid(String::from_utf8_lossy(dec.bytes()?).into_owned()),
            LOC_PATH => Location::Path(dec.bytes()?.to_vec()),
            LOC_FD => Location::Fd(dec.u32()?),
            LOC_KEYED => Location::Keyed {
                mount: dec.u32()?,
                ino: dec.u64()?,
                dev: dec.u32()?,
                handle_type: dec.i32()?,
                bytes: dec.bytes()?.to_vec(),
            },
            LOC_HANDLE => {
                let mount = dec.u32()?;
                if mount as usize >= mounts.len() {
                    return Err(invalid_data(format!("node {nodeid}: no mount {mount}")));
                }
                let handle_type = dec.i32()?;
                let bytes = dec.bytes()?.to_vec();
                Location::Handle {
                    mount,
                    handle_type,
                    bytes,
                }
            }
            t => return Err(invalid_data(format!("node {nodeid}: location type {t}"))),
        };
        let check = handle(dec, &format!("node {nodeid}"))?;
        inodes.push(InodeRecord {
            nodeid,
            lookups,
            kind: kind & libc::S_IFMT,
            generation,
            location,
            check,
        });
    }
    let next_fh = dec.u64()?;
    let n = dec.count(HANDLE_MIN)?;
    let mut handles = Vec::with_capacity(n);
    let mut fhs = HashSet::with_capacity(n);
    for _ in 0..n {
        let (fh, nodeid, flags) = (dec.u64()?, dec.u64()?, dec.i32()?);
        let dir = match dec.u8()? {
            0 => false,
            1 => true,
            t => return Err(invalid_data(format!("fh {fh}: kind {t}"))),
        };
        let fd = match dec.u8()? {
            0 => None,
            1 => Some(dec.u32()?),
            t => return Err(invalid_data(format!("fh {fh}: fd flag {t}"))),
        };
        if fh == 0 || !fhs.insert(fh) || !(ids.contains(&nodeid) || nodeid == ROOT_ID) {
            return Err(invalid_data(format!("bad fh {fh} (node {nodeid})")));
        }
        handles.push(HandleRecord {
            fh,
            nodeid,
            flags,
            dir,
            fd,
        });
    }
    let mount_fds = if dec.at_end() {
        Vec::new()
    } else {
        let n = dec.count(4)?;
        (0..n).map(|_| dec.u32()).collect::<io::Result<_>>()?
    };
    for r in &inodes {
        if let Location::Keyed { mount, .. } = r.location {
            if mount as usize >= mount_fds.len() {
                return Err(invalid_data(format!(
                    "node {}: no mount fd {mount}",
                    r.nodeid
                )));
            }
        }
    }
    Ok(Section {
        root,
        mounts,
        inodes,
        next_fh,
        handles,
        mount_fds,
    })
}

impl PassthroughFs {
    /// Reads the filesystem's section from `dec` and re-opens everything it describes, per
    /// `--migration-on-error`; changes nothing in the tables (see [`Self::install`]). `fds`
    /// are the fds the stream names by number (an in-place upgrade; else none).
    pub fn prepare_load(&self, dec: &mut Decoder, fds: Vec<OwnedFd>) -> io::Result<Loaded> {
        let mut fds: Vec<Option<OwnedFd>> = fds.into_iter().map(Some).collect();
        let Section {
            root: source_root,
            mounts,
            inodes: records,
            next_fh,
            handles: handle_records,
            mount_fds: handed_mounts,
        } = decode(dec)?;
        let on_error = self.cfg.migration.on_error;
        let root = self.inodes.get(ROOT_ID)?;
        let root_fd = self.path_fd(&root)?;
        // A share on FUSE is not compared (its root's handle differs between mounts: an older
        // source sends it anyway).
        let comparable = handles_are_stable(sys::fs_magic(root_fd.as_fd()));
        let share_differs = comparable
            && source_root.is_some_and(|(t, b)| {
                sys::handle::name_to_handle_at(root_fd.as_fd(), c"")
                    .map_or(true, |here| here.handle_type != t || here.bytes != b)
            });
        if share_differs && on_error == OnError::Abort && !records.is_empty() {
            return Err(io::Error::other(
                "the share is not the source's (their root directories' file handles differ) \
                 (--migration-on-error=abort)",
            ));
        }
        let mut walker = Walker::new(root_fd.as_fd());
        let mount_fds: Vec<Result<OwnedFd, String>> = mounts
            .iter()
            .map(|p| self.open_mount(&mut walker, p))
            .collect();
        let keyed_mounts: Vec<Result<u64, String>> = handed_mounts
            .iter()
            .map(|&n| self.adopt_mount(&mut fds, n))
            .collect();
        // Sorted by path, the walker re-uses the directories it opened for the last one.
        let mut order: Vec<usize> = (0..records.len()).collect();
        order.sort_by(
            |&a, &b| match (&records[a].location, &records[b].location) {
                (Location::Path(x), Location::Path(y)) => x.cmp(y),
                _ => std::cmp::Ordering::Equal,
            },
        );
        let mut inodes = Vec::with_capacity(records.len());
        let mut lost_inodes = 0;
        for i in order {
            let r = &records[i];
            let reopened = if share_differs {
                Err("the share is not the source's (root file handles differ)".to_string())
            } else {
                self.reopen(&mut walker, &mount_fds, &keyed_mounts, &mut fds, r)
            };
            let inode = match reopened {
                Ok(inode) => inode,
                Err(why) => {
                    let what = describe(r);
                    if on_error == OnError::Abort {
                        return Err(io::Error::other(format!(
                            "node {} ({what}): {why} (--migration-on-error=abort)",
                            r.nodeid
                        )));
                    }
                    if lost_inodes < super::records::LOGGED {
                        log::warn!("migration: node {} ({what}) is lost: {why}", r.nodeid);
                    }
                    lost_inodes += 1;
                    let key = InodeKey {
                        ino: r.nodeid,
                        dev: u32::MAX,
                        mnt_id: u32::MAX,
                    };
                    Inode::new(key, r.kind, InodeSource::Invalid)
                }
            };
            inodes.push(Prepared {
                inode,
                nodeid: r.nodeid,
                lookups: r.lookups,
                generation: r.generation,
            });
        }
        let by_id: HashMap<u64, &Inode> = inodes.iter().map(|p| (p.nodeid, &p.inode)).collect();
        let mut handles = Vec::with_capacity(handle_records.len());
        let mut lost_handles = 0;
        for h in &handle_records {
            let inode = by_id.get(&h.nodeid).copied().unwrap_or(&root);
            let file = match self.reopen_handle(inode, h, &mut fds) {
                Ok(f) => Some(f),
                Err(e) if on_error == OnError::Abort => {
                    return Err(io::Error::other(format!(
                        "fh {} of node {}: {e} (--migration-on-error=abort)",
                        h.fh, h.nodeid
                    )))
                }
                Err(e) => {
                    if !matches!(inode.source, InodeSource::Invalid)
                        && lost_handles < super::records::LOGGED
                    {
                        log::warn!("migration: fh {} of node {} is lost: {e}", h.fh, h.nodeid);
                    }
                    lost_handles += 1;
                    None
                }
            };
            handles.push((h.fh, file));
        }
        Ok(Loaded {
            inodes,
            handles,
            next_fh,
            lost_inodes,
            lost_handles,
        })
    }

    /// Replaces everything the guest held with `loaded` (no request may run meanwhile).
    pub fn install(&self, loaded: Loaded) {
        self.destroy();
        for p in loaded.inodes {
            if let Err(e) = self.inodes.restore(p.inode, p.nodeid, p.lookups) {
                log::error!("migration: node {} not restored: {e}", p.nodeid);
                continue;
            }
            if p.generation > 0 {
                if let Some(g) = self.inodes.guest(p.nodeid) {
                    g.set_generation(p.generation);
                }
            }
        }
        for (fh, file) in loaded.handles {
            if let Err(e) = self.handles.restore(fh, file, loaded.next_fh) {
                log::error!("migration: fh {fh} not restored: {e}");
            }
        }
    }

    /// The fd to open handles of a mount against, from its path (empty: the share's root).
    fn open_mount(&self, walker: &mut Walker, path: &[u8]) -> Result<OwnedFd, String> {
        let flags = libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY;
        let fd = if path.is_empty() {
            let root = self.inodes.get(ROOT_ID).map_err(|e| e.to_string())?;
            return root
                .open(&self.mounts, self.proc_self_fd.as_fd(), flags)
                .map_err(|e| format!("the share's root: {e}"));
        } else {
            walker.open(path)
        };
        let shown = String::from_utf8_lossy(path);
        let fd = fd.map_err(|e| format!("mount path {shown:?}: {e}"))?;
        let st = sys::statx(fd.as_fd(), c"", 0, libc::STATX_TYPE)
            .map_err(|e| format!("mount path {shown:?}: {e}"))?;
        let kind = u32::from(st.stx_mode) & libc::S_IFMT;
        if kind != libc::S_IFDIR && kind != libc::S_IFREG {
            return Err(format!("mount path {shown:?} is no file or directory"));
        }
        sys::reopen(self.proc_self_fd.as_fd(), fd.as_fd(), flags)
            .map_err(|e| format!("mount path {shown:?}: {e}"))
    }

    /// An in-place upgrade's mount fd, the stream's fd `n`, kept to open handles against;
    /// returns its mount ID here.
    fn adopt_mount(&self, fds: &mut [Option<OwnedFd>], n: u32) -> Result<u64, String> {
        let fd = take(fds, n).map_err(|e| e.to_string())?;
        let st = sys::statx(fd.as_fd(), c"", 0, sys::STATX_WANTED)
            .map_err(|e| format!("mount fd {n}: statx: {e}"))?;
        self.mounts.adopt(st.stx_mnt_id, fd);
        Ok(st.stx_mnt_id)
    }

    /// Finds the inode of `r` in this share and makes it this daemon's kind of inode.
    /// `mount_fds`: the fds of the stream's mount paths; `keyed_mounts`: the mount IDs of its
    /// mount fds.
    fn reopen(
        &self,
        walker: &mut Walker,
        mount_fds: &[Result<OwnedFd, String>],
        keyed_mounts: &[Result<u64, String>],
        fds: &mut [Option<OwnedFd>],
        r: &InodeRecord,
    ) -> Result<Inode, String> {
        let fd = match &r.location {
            Location::Keyed {
                mount,
                ino,
                dev,
                handle_type,
                bytes,
            } => {
                let mnt = keyed_mounts[*mount as usize].clone()?;
                let h = FileHandle::new(*handle_type, bytes);
                // The same filesystem, mount and handle as in the process that saved it: kept
                // as it was, without a syscall.
                if self.use_handles {
                    let key = InodeKey {
                        ino: *ino,
                        dev: *dev,
                        mnt_id: mnt as u32,
                    };
                    return Ok(Inode::new(key, r.kind, InodeSource::Handle(h)));
                }
                self.mounts
                    .open(mnt, &h, libc::O_PATH)
                    .map_err(|e| format!("cannot open its file handle: {e}"))?
            }
            Location::Fd(n) => take(fds, *n).map_err(|e| e.to_string())?,
            Location::Invalid(why) => return Err(format!("the source sent no location: {why}")),
            Location::Path(p) => walker.open(p).map_err(|e| format!("cannot open it: {e}"))?,
            Location::Handle {
                mount,
                handle_type,
                bytes,
            } => {
                let mount = mount_fds[*mount as usize].as_ref().map_err(Clone::clone)?;
                // A FUSE handle names the source host's node ID: here it may open another file.
                if !handles_are_stable(sys::fs_magic(mount.as_fd())) {
                    return Err("a file handle on a FUSE filesystem: not opened".into());
                }
                sys::handle::open_by_handle_at(mount.as_fd(), *handle_type, bytes, libc::O_PATH)
                    .map_err(|e| format!("cannot open its file handle: {e}"))?
            }
        };
        let st =
            sys::statx(fd.as_fd(), c"", 0, sys::STATX_WANTED).map_err(|e| format!("statx: {e}"))?;
        let kind = u32::from(st.stx_mode) & libc::S_IFMT;
        if kind != r.kind {
            return Err(format!("it is now of type {kind:#o}, was {:#o}", r.kind));
        }
        if let Some((t, b)) = &r.check {
            let here = sys::handle::name_to_handle_at(fd.as_fd(), c"")
                .map_err(|e| format!("no file handle to verify: {e}"))?;
            if here.handle_type != *t || here.bytes != *b {
                return Err("another file than on the source (file handles differ)".into());
            }
        }
        let key = InodeKey::of(&st);
        // The handle it was opened by is this daemon's handle of it too (same filesystem):
        // kept without asking for it again.
        if let (
            Location::Handle {
                handle_type, bytes, ..
            },
            true,
        ) = (&r.location, self.use_handles)
        {
            let mnt = u64::from(key.mnt_id);
            if self
                .mounts
                .ensure(mnt, fd.as_fd(), kind, self.proc_self_fd.as_fd())
                .is_ok()
            {
                let h = FileHandle::new(*handle_type, bytes);
                return Ok(Inode::new(key, kind, InodeSource::Handle(h)));
            }
        }
        let (source, _) = self
            .source_for(fd, kind, u64::from(key.mnt_id), c"a migrated inode")
            .map_err(|e| format!("cannot keep it: {e}"))?;
        Ok(Inode::new(key, kind, source))
    }

    /// Opens `inode` again as the source had the fh of `h` open (or takes the fd it names).
    fn reopen_handle(
        &self,
        inode: &Inode,
        h: &HandleRecord,
        fds: &mut [Option<OwnedFd>],
    ) -> io::Result<OpenFile> {
        let token = self.take_token()?;
        if let Some(n) = h.fd {
            let file = File::from(take(fds, n)?);
            return Ok(OpenFile::new(h.nodeid, file, h.dir, token));
        }
        let proc_fd = self.proc_self_fd.as_fd();
        let file = if h.dir {
            let flags = libc::O_RDONLY | libc::O_DIRECTORY | (h.flags & libc::O_NOATIME);
            let fd = inode.open(&self.mounts, proc_fd, flags)?;
            // A first READDIR at the guest's offset in a fresh ext4 directory fd can come back
            // empty after a rewind (see docs/migration.md): read from the start once.
            sysfd::getdents64(fd.as_fd(), &mut [0u8; 4096])?;
            sysfd::lseek(fd.as_fd(), 0, libc::SEEK_SET)?;
            fd
        } else {
            inode.open(&self.mounts, proc_fd, h.flags & !NOT_REOPENED)?
        };
        Ok(OpenFile::new(h.nodeid, File::from(file), h.dir, token))
    }
}

/// The fd the stream names `n`, once.
fn take(fds: &mut [Option<OwnedFd>], n: u32) -> io::Result<OwnedFd> {
    fds.get_mut(n as usize)
        .and_then(Option::take)
        .ok_or_else(|| invalid_data(format!("fd {n}: not handed over, or named twice")))
}

fn describe(r: &InodeRecord) -> String {
    match &r.location {
        Location::Path(p) => format!("{:?}", String::from_utf8_lossy(p)),
        Location::Handle { .. } | Location::Keyed { .. } => "by file handle".into(),
        Location::Fd(n) => format!("fd {n}"),
        Location::Invalid(_) => "no location".into(),
    }
}
