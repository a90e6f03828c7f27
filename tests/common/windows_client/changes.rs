//! What the Windows service sends for the operations that change the share: copy a file in,
//! create a folder, change a folder's attributes, overwrite, rename, delete (the account in
//! `shared/notes/windows-guest.md`, `L<n>` its lines in virtio-win's `viofs/svc/virtiofs.cpp`).

use super::super::fuse_abi::*;
use super::{Failed, WindowsClient, EMPTY_CHECK_SIZE, O_DIRECTORY, R};

impl WindowsClient {
    /// Copy a file in (Create, L1437, then writes, SetBasicInfo, Cleanup): the walk of `path`
    /// ends in ENOENT; two walks of the path's parents; CREATE (access mode | O_EXCL, no O_CREAT, mode
    /// 0664, umask 0, the owner's ids); for a non-empty file SetFileSize with the allocation
    /// size (GETATTR, FALLOCATE KEEP_SIZE, GETATTR); WRITEs of `max_write`, each followed by
    /// GETATTR; SetBasicInfo (SETATTR of mode 0664, atime, mtime, ctime through the fh) +
    /// GETATTR; RELEASE.
    pub fn copy_in(&self, path: &str, data: &[u8]) -> R<u64> {
        match self.walk(path) {
            Err(Failed {
                errno: libc::ENOENT,
                ..
            }) => {}
            Ok(_) => {
                return Err(Failed {
                    opcode: FUSE_LOOKUP,
                    errno: libc::EEXIST,
                })
            }
            Err(e) => return Err(e),
        }
        self.walk_parent(path)?;
        let (parent, name) = self.walk_parent(path)?;
        let owner = self.c.with_creds(self.owner.0, self.owner.1);
        let flags = (libc::O_RDWR | libc::O_EXCL) as u32;
        let created = owner.create(parent, name, 0o664, flags, 0);
        let (e, o) = self.check(FUSE_CREATE, created)?;
        self.created(FUSE_CREATE, e.nodeid)?;
        if !data.is_empty() {
            self.check(FUSE_GETATTR, self.c.getattr(e.nodeid, Some(o.fh)))?;
            let len = data.len() as u64;
            let f = owner.fallocate(e.nodeid, o.fh, 0, len, libc::FALLOC_FL_KEEP_SIZE as u32);
            self.check(FUSE_FALLOCATE, f)?;
            self.check(FUSE_GETATTR, self.c.getattr(e.nodeid, Some(o.fh)))?;
        }
        for (i, chunk) in data.chunks(self.max_write as usize).enumerate() {
            let off = (i * self.max_write as usize) as u64;
            let n = self.check(FUSE_WRITE, self.c.write(e.nodeid, o.fh, off, chunk))?;
            if n as usize != chunk.len() {
                return Err(Failed {
                    opcode: FUSE_WRITE,
                    errno: libc::EIO,
                });
            }
            self.check(FUSE_GETATTR, self.c.getattr(e.nodeid, Some(o.fh)))?;
        }
        self.set_basic_info(e.nodeid, Some(o.fh), false)?;
        self.check(FUSE_RELEASE, self.c.release(e.nodeid, o.fh, flags))?;
        Ok(e.nodeid)
    }

    /// Create a folder: two walks of the path's parents, MKDIR (mode 0775 | 0111 = 0775, umask 0, the
    /// owner's ids), OPENDIR, RELEASEDIR.
    pub fn mkdir(&self, path: &str) -> R<u64> {
        self.walk_parent(path)?;
        let (parent, name) = self.walk_parent(path)?;
        let owner = self.c.with_creds(self.owner.0, self.owner.1);
        let e = self.check(FUSE_MKDIR, owner.mkdir(parent, name, 0o775, 0))?;
        self.created(FUSE_MKDIR, e.nodeid)?;
        let o = self
            .c
            .opendir(e.nodeid, libc::O_RDONLY as u32 | O_DIRECTORY);
        let o = self.check(FUSE_OPENDIR, o)?;
        self.check(FUSE_RELEASEDIR, self.c.releasedir(e.nodeid, o.fh))?;
        Ok(e.nodeid)
    }

    /// SetBasicInfo (L1873): mode 0664 (0444 read-only; a directory's with the S_IFDIR bits),
    /// atime, mtime and ctime, through the fh of a file, then GETATTR.
    fn set_basic_info(&self, nodeid: u64, fh: Option<u64>, dir: bool) -> R<()> {
        let mut s = SetattrIn {
            valid: FATTR_MODE | FATTR_ATIME | FATTR_MTIME | FATTR_CTIME,
            mode: if dir { libc::S_IFDIR | 0o775 } else { 0o664 },
            atime: 1_700_000_000,
            mtime: 1_700_000_000,
            ctime: 1_700_000_000,
            ..Default::default()
        };
        if let Some(fh) = fh {
            s.valid |= FATTR_FH;
            s.fh = fh;
        }
        self.check(FUSE_SETATTR, self.c.setattr(nodeid, &s))?;
        self.check(FUSE_GETATTR, self.c.getattr(nodeid, fh))?;
        Ok(())
    }

    /// Change a folder's attributes as Explorer's properties do (SetBasicInfo on a directory:
    /// no fh, the S_IFDIR bits in the mode).
    pub fn touch_dir(&self, path: &str) -> R<()> {
        let o = self.open(path, 0)?;
        let r = self.set_basic_info(o.nodeid, None, true);
        self.close(&o);
        r
    }

    /// Overwrite (L1558): open for writing, SetFileSize to 0 (SETATTR SIZE | FH) + GETATTR,
    /// WRITEs, RELEASE.
    pub fn overwrite(&self, path: &str, data: &[u8]) -> R<()> {
        let o = self.open(path, libc::O_WRONLY as u32)?;
        let s = SetattrIn {
            valid: FATTR_SIZE | FATTR_FH,
            fh: o.fh,
            ..Default::default()
        };
        self.check(FUSE_SETATTR, self.c.setattr(o.nodeid, &s))?;
        self.check(FUSE_GETATTR, self.c.getattr(o.nodeid, Some(o.fh)))?;
        for (i, chunk) in data.chunks(self.max_write as usize).enumerate() {
            let off = (i * self.max_write as usize) as u64;
            self.check(FUSE_WRITE, self.c.write(o.nodeid, o.fh, off, chunk))?;
        }
        self.close(&o);
        Ok(())
    }

    /// Rename (L2108), of an open file: PathWalkthough of both paths, RENAME2 with flags 0
    /// (a file replacing) or 1 (RENAME_NOREPLACE: no replace asked, or a directory); on EINVAL
    /// the service retries as plain RENAME (L955), which drops NOREPLACE: counted as an error
    /// reply all the same.
    pub fn rename(&self, from: &str, to: &str, replace: bool) -> R<()> {
        let o = self.open(from, 0)?;
        let (old_parent, from_name) = self.walk_parent(from)?;
        let (new_parent, to_name) = self.walk_parent(to)?;
        let flags = u32::from(o.is_dir || !replace);
        let r = self
            .c
            .rename2(old_parent, from_name, new_parent, to_name, flags);
        let r = match self.check(FUSE_RENAME2, r) {
            Err(Failed {
                errno: libc::EINVAL,
                ..
            }) => {
                let r = self.c.rename(old_parent, from_name, new_parent, to_name);
                self.check(FUSE_RENAME, r)
            }
            other => other,
        };
        self.close(&o);
        r
    }

    /// Delete (DeleteFile + Cleanup, L1943): open; a directory must read empty (READDIR of one
    /// 4 KiB page: 2 entries or fewer); walk of the parent, UNLINK or RMDIR, FORGET of the
    /// node with every lookup the service made of it, RELEASE.
    pub fn delete(&self, path: &str) -> R<()> {
        let o = self.open(path, 0)?;
        if o.is_dir {
            let r = self.c.readdir(o.nodeid, o.fh, 0, EMPTY_CHECK_SIZE);
            if self.check(FUSE_READDIR, r)?.len() > 2 {
                self.close(&o);
                return Err(Failed {
                    opcode: FUSE_READDIR,
                    errno: libc::ENOTEMPTY,
                });
            }
        }
        let (parent, name) = self.walk_parent(path)?;
        let r = if o.is_dir {
            self.check(FUSE_RMDIR, self.c.rmdir(parent, name))
        } else {
            self.check(FUSE_UNLINK, self.c.unlink(parent, name))
        };
        if r.is_ok() {
            let n = self
                .counts
                .lock()
                .unwrap()
                .lookups
                .remove(&o.nodeid)
                .unwrap_or(0);
            self.c.forget(o.nodeid, n);
        }
        self.close(&o);
        r
    }
}
