//! Names and attributes: LOOKUP, FORGET, GETATTR/SETATTR/STATX, ACCESS, creating, linking,
//! renaming and removing entries.

use super::*;

impl FuseClient {
    pub fn lookup(&self, parent: u64, name: &str) -> Result<EntryOut, i32> {
        let body = self.raw(FUSE_LOOKUP, parent, &cstr(name), HDR + 128)?;
        Ok(from_bytes(&body, "LOOKUP"))
    }

    /// FORGET on the hiprio queue: no reply, the chain is completed with used length 0.
    pub fn forget(&self, nodeid: u64, nlookup: u64) {
        self.no_reply(FUSE_FORGET, nodeid, ForgetIn { nlookup }.as_slice());
    }

    /// BATCH_FORGET of `(nodeid, nlookup)` pairs on the hiprio queue.
    pub fn batch_forget(&self, items: &[(u64, u64)]) {
        let head = BatchForgetIn {
            count: items.len() as u32,
            dummy: 0,
        };
        let mut body = head.as_slice().to_vec();
        for &(nodeid, nlookup) in items {
            body.extend_from_slice(ForgetOne { nodeid, nlookup }.as_slice());
        }
        self.no_reply(FUSE_BATCH_FORGET, 0, &body);
    }

    /// INTERRUPT of request `unique` on the hiprio queue (no reply expected).
    pub fn interrupt(&self, unique: u64) {
        self.no_reply(FUSE_INTERRUPT, 0, InterruptIn { unique }.as_slice());
    }

    /// GETATTR, with `fh` set (FUSE_GETATTR_FH) if given.
    pub fn getattr(&self, nodeid: u64, fh: Option<u64>) -> Result<AttrOut, i32> {
        let inp = GetattrIn {
            flags: u32::from(fh.is_some()),
            dummy: 0,
            fh: fh.unwrap_or(0),
        };
        let body = self.raw(FUSE_GETATTR, nodeid, inp.as_slice(), HDR + 104)?;
        Ok(from_bytes(&body, "GETATTR"))
    }

    pub fn setattr(&self, nodeid: u64, attr: &SetattrIn) -> Result<AttrOut, i32> {
        let body = self.raw(FUSE_SETATTR, nodeid, attr.as_slice(), HDR + 104)?;
        Ok(from_bytes(&body, "SETATTR"))
    }

    pub fn readlink(&self, nodeid: u64) -> Result<Vec<u8>, i32> {
        self.raw(FUSE_READLINK, nodeid, &[], HDR + 4096)
    }

    pub fn symlink(&self, parent: u64, name: &str, target: &str) -> Result<EntryOut, i32> {
        let mut body = cstr(name);
        body.extend_from_slice(&cstr(target));
        let body = self.create_call(FUSE_SYMLINK, parent, body, HDR + 128)?;
        Ok(from_bytes(&body, "SYMLINK"))
    }

    pub fn mknod(
        &self,
        parent: u64,
        name: &str,
        mode: u32,
        rdev: u32,
        umask: u32,
    ) -> Result<EntryOut, i32> {
        let inp = MknodIn {
            mode,
            rdev,
            umask,
            padding: 0,
        };
        let mut body = inp.as_slice().to_vec();
        body.extend_from_slice(&cstr(name));
        let body = self.create_call(FUSE_MKNOD, parent, body, HDR + 128)?;
        Ok(from_bytes(&body, "MKNOD"))
    }

    pub fn mkdir(&self, parent: u64, name: &str, mode: u32, umask: u32) -> Result<EntryOut, i32> {
        let mut body = MkdirIn { mode, umask }.as_slice().to_vec();
        body.extend_from_slice(&cstr(name));
        let body = self.create_call(FUSE_MKDIR, parent, body, HDR + 128)?;
        Ok(from_bytes(&body, "MKDIR"))
    }

    pub fn unlink(&self, parent: u64, name: &str) -> Result<(), i32> {
        self.raw(FUSE_UNLINK, parent, &cstr(name), HDR).map(drop)
    }

    pub fn rmdir(&self, parent: u64, name: &str) -> Result<(), i32> {
        self.raw(FUSE_RMDIR, parent, &cstr(name), HDR).map(drop)
    }

    pub fn rename(
        &self,
        olddir: u64,
        oldname: &str,
        newdir: u64,
        newname: &str,
    ) -> Result<(), i32> {
        let mut body = RenameIn { newdir }.as_slice().to_vec();
        body.extend_from_slice(&cstr(oldname));
        body.extend_from_slice(&cstr(newname));
        self.raw(FUSE_RENAME, olddir, &body, HDR).map(drop)
    }

    /// RENAME2 with `flags` (RENAME_NOREPLACE, RENAME_EXCHANGE, RENAME_WHITEOUT).
    pub fn rename2(
        &self,
        olddir: u64,
        oldname: &str,
        newdir: u64,
        newname: &str,
        flags: u32,
    ) -> Result<(), i32> {
        let inp = Rename2In {
            newdir,
            flags,
            padding: 0,
        };
        let mut body = inp.as_slice().to_vec();
        body.extend_from_slice(&cstr(oldname));
        body.extend_from_slice(&cstr(newname));
        self.raw(FUSE_RENAME2, olddir, &body, HDR).map(drop)
    }

    pub fn link(&self, oldnodeid: u64, newparent: u64, newname: &str) -> Result<EntryOut, i32> {
        let mut body = LinkIn { oldnodeid }.as_slice().to_vec();
        body.extend_from_slice(&cstr(newname));
        let body = self.raw(FUSE_LINK, newparent, &body, HDR + 128)?;
        Ok(from_bytes(&body, "LINK"))
    }

    /// STATX with `sx_flags` (AT_STATX_*) and `sx_mask` (STATX_*), `fh` if given.
    pub fn statx(
        &self,
        nodeid: u64,
        fh: Option<u64>,
        sx_flags: u32,
        sx_mask: u32,
    ) -> Result<StatxOut, i32> {
        let inp = StatxIn {
            getattr_flags: u32::from(fh.is_some()),
            reserved: 0,
            fh: fh.unwrap_or(0),
            sx_flags,
            sx_mask,
        };
        let body = self.raw(FUSE_STATX, nodeid, inp.as_slice(), HDR + 288)?;
        Ok(from_bytes(&body, "STATX"))
    }

    pub fn access(&self, nodeid: u64, mask: u32) -> Result<(), i32> {
        let inp = AccessIn { mask, padding: 0 };
        self.raw(FUSE_ACCESS, nodeid, inp.as_slice(), HDR).map(drop)
    }
}
