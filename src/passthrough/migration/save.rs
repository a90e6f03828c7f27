//! The source side: every inode and open file the guest holds, described for the destination.

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::Arc;

use super::codec::Encoder;
use super::config::MigrationMode;
use super::paths;
use super::paths::Walker;
use super::records::{
    HandedFd, HandleRecord, Held, InodeRecord, Location, Section, LOC_FD, LOC_HANDLE, LOC_INVALID,
    LOC_KEYED, LOC_PATH, TAG,
};
use crate::passthrough::filesystem::PassthroughFs;
use crate::passthrough::state::file_handle::handles_are_stable;
use crate::passthrough::state::host_inode::{InodeKey, InodeSource};
use crate::passthrough::state::inode_table::{Inode, InodeFd, ROOT_ID};
use crate::passthrough::sys;

/// What a save wrote, for the log and the numbers in docs/migration.md.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Saved {
    pub inodes: usize,
    pub handles: usize,
    /// Inodes sent as invalid (no path or no handle): the destination's `--migration-on-error`
    /// decides.
    pub invalid: usize,
}

/// The mounts file handles belong to, as paths in the share (`file-handles` mode).
#[derive(Default)]
struct Mounts {
    /// Source mount ID → index in `paths`, or why it has no path.
    index: HashMap<u32, Result<u32, String>>,
    paths: Vec<Vec<u8>>,
}

impl PassthroughFs {
    /// Writes the filesystem's section of the state into `enc`. Nothing changes here: a failed
    /// migration leaves the source serving as before. Callers make sure no request runs.
    /// With `fds` (an in-place upgrade), every open file and every inode not reached by a file
    /// handle is described by an fd pushed there, an inode reached by a handle by its key and
    /// handle (and its mount by an fd): see [`Location::Keyed`].
    pub fn save_state(
        &self,
        enc: &mut Encoder,
        mut fds: Option<&mut Vec<HandedFd>>,
    ) -> io::Result<Saved> {
        let mode = self.cfg.migration.mode;
        let root = self.inodes.get(ROOT_ID)?;
        let root_fd = self.path_fd(&root)?;
        let root_link = sys::fd_path(self.proc_self_fd.as_fd(), root_fd.as_fd())?;
        let mut walker = Walker::new(root_fd.as_fd());
        let mut mounts = Mounts::default();
        let held = self.inodes.held();
        let mut records = Vec::with_capacity(held.len());
        let mut unresolved = HashMap::new();
        // An in-place upgrade's mounts: source mount ID → index in `mount_fds`.
        let (mut mount_index, mut mount_fds) = (HashMap::new(), Vec::new());
        for (inode, lookups) in &held {
            // An inode on a filesystem whose handles do not keep naming it (FUSE: the handle
            // names this host's node ID) is found by its path in `file-handles` mode too.
            // (`--migration-verify-handles` does not send such a handle to check either.)
            let stable = self.handles_stable(inode);
            let inode_mode = match mode {
                MigrationMode::FileHandles if !stable => MigrationMode::FindPaths,
                m => m,
            };
            let location = match (fds.as_deref_mut(), inode_mode) {
                (Some(fds), _) => self
                    .keyed_location(inode, fds, &mut mount_index, &mut mount_fds)
                    .unwrap_or_else(|| match self.handed_fd(inode) {
                        Ok(fd) => {
                            fds.push(fd);
                            Location::Fd((fds.len() - 1) as u32)
                        }
                        Err(e) => Location::Invalid(format!("no fd: {e}")),
                    }),
                (None, MigrationMode::FindPaths) => {
                    match self.find_path(inode, &root_link, &mut walker) {
                        Ok(Some(p)) => Location::Path(p),
                        Ok(None) => {
                            unresolved.insert(inode.key, records.len());
                            Location::Invalid("no path found in the share".into())
                        }
                        Err(why) => Location::Invalid(why),
                    }
                }
                (None, MigrationMode::FileHandles) => {
                    self.handle_location(inode, &root_link, &mut mounts)
                }
            };
            let by_path = matches!(location, Location::Path(_) | Location::Invalid(_));
            let check = (by_path
                && stable
                && mode == MigrationMode::FindPaths
                && self.cfg.migration.verify_handles)
                .then(|| self.handle_of(inode).ok())
                .flatten()
                .map(|(t, b, _)| (t, b));
            records.push(InodeRecord {
                nodeid: inode.nodeid,
                lookups: *lookups,
                kind: inode.kind,
                generation: self.inodes.generation(inode.nodeid),
                location,
                check,
            });
        }
        if !unresolved.is_empty() {
            let found = paths::search(root_fd.as_fd(), &unresolved);
            for (i, path) in found {
                records[i].location = Location::Path(path);
            }
        }
        let (open, next_fh) = self.handles.held();
        let mut handles = Vec::with_capacity(open.len());
        for (fh, f) in &open {
            let fd = match fds.as_deref_mut() {
                Some(fds) => {
                    fds.push(HandedFd(Held::File(Arc::clone(f))));
                    Some((fds.len() - 1) as u32)
                }
                None => None,
            };
            handles.push(HandleRecord {
                fh: *fh,
                nodeid: f.nodeid,
                flags: sys::fd::status_flags(f.file.as_fd()).unwrap_or(libc::O_RDONLY),
                dir: f.dir.is_some(),
                fd,
            });
        }
        let saved = Saved {
            inodes: records.len(),
            handles: handles.len(),
            invalid: records
                .iter()
                .filter(|r| matches!(r.location, Location::Invalid(_)))
                .count(),
        };
        let invalid = records.iter().filter_map(|r| match &r.location {
            Location::Invalid(why) => Some((r.nodeid, why)),
            _ => None,
        });
        for (nodeid, why) in invalid.take(super::records::LOGGED) {
            log::warn!("migration: node {nodeid} cannot be described: {why}");
        }
        let by_handle = mode == MigrationMode::FileHandles || self.cfg.migration.verify_handles;
        let section = Section {
            // Not on FUSE: the other host's mount gives its root another handle.
            root: (by_handle && handles_are_stable(sys::fs_magic(root_fd.as_fd())))
                .then(|| sys::handle::name_to_handle_at(root_fd.as_fd(), c"").ok())
                .flatten()
                .map(|h| (h.handle_type, h.bytes)),
            mounts: mounts.paths,
            inodes: records,
            next_fh,
            handles,
            mount_fds,
        };
        section.encode(enc);
        Ok(saved)
    }

    /// An in-place upgrade's [`Location::Keyed`] of an inode reached by a handle, pushing its
    /// mount's fd the first time; `None` for any other inode, or one whose mount has no fd (it
    /// goes as an fd).
    fn keyed_location(
        &self,
        inode: &Inode,
        fds: &mut Vec<HandedFd>,
        index: &mut HashMap<u32, Option<u32>>,
        mount_fds: &mut Vec<u32>,
    ) -> Option<Location> {
        let InodeSource::Handle(h) = &inode.source else {
            return None;
        };
        let mnt = inode.key.mnt_id;
        let mount = (*index.entry(mnt).or_insert_with(|| {
            let fd = self.mounts.get(u64::from(mnt))?;
            fds.push(HandedFd(Held::Shared(fd)));
            mount_fds.push((fds.len() - 1) as u32);
            Some((mount_fds.len() - 1) as u32)
        }))?;
        Some(Location::Keyed {
            mount,
            ino: inode.key.ino,
            dev: inode.key.dev,
            handle_type: h.handle_type(),
            bytes: h.bytes().to_vec(),
        })
    }

    /// The fd an in-place upgrade hands `inode` over by: its own, else [`Self::save_fd`]'s.
    fn handed_fd(&self, inode: &Inode) -> io::Result<HandedFd> {
        if let InodeSource::Fd(p) = &inode.source {
            return Ok(HandedFd(Held::Path(Arc::clone(p))));
        }
        match self.save_fd(inode)? {
            InodeFd::Shared(fd) => Ok(HandedFd(Held::Shared(fd))),
            InodeFd::Owned(fd) => Ok(HandedFd(Held::Shared(Arc::new(fd)))),
            InodeFd::Borrowed(fd) => Ok(HandedFd(Held::Shared(Arc::new(fd.try_clone_to_owned()?)))),
        }
    }

    /// An O_PATH fd of `inode` for the save, not put in the fd cache.
    fn save_fd<'a>(&self, inode: &'a Inode) -> io::Result<InodeFd<'a>> {
        match &inode.source {
            InodeSource::Fd(p) => Ok(InodeFd::Borrowed(p.fd.as_fd())),
            InodeSource::Handle(h) => match self.fd_cache.get(inode.nodeid) {
                Some(fd) => Ok(InodeFd::Shared(fd)),
                None => {
                    let fd = self
                        .mounts
                        .open(u64::from(inode.key.mnt_id), h, libc::O_PATH)?;
                    Ok(InodeFd::Shared(Arc::new(fd)))
                }
            },
            InodeSource::Invalid => Err(io::Error::from_raw_os_error(libc::EIO)),
        }
    }

    /// `find-paths`: the path of `inode` relative to the share; `Ok(None)` when it must be
    /// searched for, `Err` with the reason when it has none.
    fn find_path(
        &self,
        inode: &Inode,
        root_link: &[u8],
        walker: &mut Walker,
    ) -> Result<Option<Vec<u8>>, String> {
        if matches!(inode.source, InodeSource::Invalid) {
            return Err("lost in an earlier migration".into());
        }
        let fd = self
            .save_fd(inode)
            .map_err(|e| format!("cannot open it: {e}"))?;
        let st =
            sys::statx(fd.as_fd(), c"", 0, libc::STATX_NLINK).map_err(|e| format!("statx: {e}"))?;
        if st.stx_nlink == 0 {
            return Err("unlinked while open: it has no path".into());
        }
        let Ok(link) = sys::fd_path(self.proc_self_fd.as_fd(), fd.as_fd()) else {
            return Ok(None);
        };
        let Some(rel) = paths::relative(root_link, &link) else {
            return Ok(None);
        };
        if self.cfg.migration.confirm_paths && !same_inode(walker, &rel, &inode.key) {
            return Ok(None);
        }
        Ok(Some(rel))
    }

    /// `inode`'s handle: the one it is keyed by, else one made from its fd; with its mount ID.
    fn handle_of(&self, inode: &Inode) -> Result<(i32, Vec<u8>, u32), String> {
        match &inode.source {
            InodeSource::Handle(h) => Ok((h.handle_type(), h.bytes().to_vec(), inode.key.mnt_id)),
            InodeSource::Fd(p) => match sys::handle::name_to_handle_at(p.fd.as_fd(), c"") {
                Ok(raw) => Ok((raw.handle_type, raw.bytes, raw.mnt_id as u32)),
                Err(e) => Err(format!("no file handle: {e}")),
            },
            InodeSource::Invalid => Err("lost in an earlier migration".into()),
        }
    }

    /// Whether `inode`'s file handle names it on another host too: not on FUSE (see
    /// [`handles_are_stable`]). Inodes reached by handles are on filesystems checked at lookup.
    fn handles_stable(&self, inode: &Inode) -> bool {
        match &inode.source {
            InodeSource::Fd(p) => handles_are_stable(sys::fs_magic(p.fd.as_fd())),
            InodeSource::Handle(_) | InodeSource::Invalid => true,
        }
    }

    /// `file-handles`: `inode`'s handle and the index of its mount's path.
    fn handle_location(&self, inode: &Inode, root_link: &[u8], mounts: &mut Mounts) -> Location {
        let (handle_type, bytes, mnt) = match self.handle_of(inode) {
            Ok(h) => h,
            Err(why) => return Location::Invalid(why),
        };
        let index = match mounts.index.get(&mnt) {
            Some(i) => i.clone(),
            None => {
                let path = self.mount_path(mnt, inode, root_link);
                let i = path.map(|p| {
                    mounts.paths.push(p);
                    (mounts.paths.len() - 1) as u32
                });
                mounts.index.insert(mnt, i.clone());
                i
            }
        };
        match index {
            Ok(mount) => Location::Handle {
                mount,
                handle_type,
                bytes,
            },
            Err(why) => Location::Invalid(why),
        }
    }

    /// The path in the share of an inode on mount `mnt` to open handles against: the mount fd,
    /// else `inode` itself (empty: the share's root).
    fn mount_path(&self, mnt: u32, inode: &Inode, root_link: &[u8]) -> Result<Vec<u8>, String> {
        let of = |fd: BorrowedFd| -> Result<Vec<u8>, String> {
            let link = sys::fd_path(self.proc_self_fd.as_fd(), fd)
                .map_err(|e| format!("mount {mnt}: no path: {e}"))?;
            if link == root_link {
                return Ok(Vec::new());
            }
            paths::relative(root_link, &link)
                .ok_or_else(|| format!("mount {mnt}: no path in the share"))
        };
        if let Some(fd) = self.mounts.get(u64::from(mnt)) {
            return of(fd.as_fd());
        }
        let fd = self
            .save_fd(inode)
            .map_err(|e| format!("cannot open it: {e}"))?;
        of(fd.as_fd())
    }
}

/// Whether `rel` opens the inode with `key` (`--migration-confirm-paths`).
fn same_inode(walker: &mut Walker, rel: &[u8], key: &InodeKey) -> bool {
    walker
        .open(rel)
        .and_then(|fd| sys::statx(fd.as_fd(), c"", 0, sys::STATX_WANTED))
        .is_ok_and(|st| InodeKey::of(&st) == *key)
}

fn handle(enc: &mut Encoder, h: &Option<(i32, Vec<u8>)>) {
    match h {
        Some((t, b)) => {
            enc.u8(1);
            enc.i32(*t);
            enc.bytes(b);
        }
        None => enc.u8(0),
    }
}

impl Section {
    fn encode(&self, enc: &mut Encoder) {
        enc.tag(TAG);
        handle(enc, &self.root);
        enc.u64(self.mounts.len() as u64);
        for m in &self.mounts {
            enc.bytes(m);
        }
        enc.u64(self.inodes.len() as u64);
        for r in &self.inodes {
            enc.u64(r.nodeid);
            enc.u64(r.lookups);
            enc.u32(r.kind);
            enc.u64(r.generation);
            match &r.location {
                Location::Invalid(why) => {
                    enc.u8(LOC_INVALID);
                    enc.bytes(why.as_bytes());
                }
                Location::Path(p) => {
                    enc.u8(LOC_PATH);
                    enc.bytes(p);
                }
                Location::Handle {
                    mount,
                    handle_type,
                    bytes,
                } => {
                    enc.u8(LOC_HANDLE);
                    enc.u32(*mount);
                    enc.i32(*handle_type);
                    enc.bytes(bytes);
                }
                Location::Fd(n) => {
                    enc.u8(LOC_FD);
                    enc.u32(*n);
                }
                Location::Keyed {
                    mount,
                    ino,
                    dev,
                    handle_type,
                    bytes,
                } => {
                    enc.u8(LOC_KEYED);
                    enc.u32(*mount);
                    enc.u64(*ino);
                    enc.u32(*dev);
                    enc.i32(*handle_type);
                    enc.bytes(bytes);
                }
            }
            handle(enc, &r.check);
        }
        enc.u64(self.next_fh);
        enc.u64(self.handles.len() as u64);
        for h in &self.handles {
            enc.u64(h.fh);
            enc.u64(h.nodeid);
            enc.i32(h.flags);
            enc.u8(u8::from(h.dir));
            match h.fd {
                Some(n) => {
                    enc.u8(1);
                    enc.u32(n);
                }
                None => enc.u8(0),
            }
        }
        if !self.mount_fds.is_empty() {
            enc.u64(self.mount_fds.len() as u64);
            self.mount_fds.iter().for_each(|&n| enc.u32(n));
        }
    }
}
