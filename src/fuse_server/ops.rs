//! Request-body parsing helpers and the handlers for inode, attribute and xattr operations.

use std::ffi::CStr;
use std::io::{self, Read};
use std::sync::atomic::Ordering;

use super::chain::{Reader, Writer};
use fuse_backend_rs::abi::fuse_abi::{
    AccessIn, BatchForgetIn, ForgetIn, ForgetOne, GetattrIn, GetxattrIn, GetxattrOut, Kstatfs,
    LinkIn, MkdirIn, MknodIn, Rename2In, RenameIn, SetattrIn, SetxattrIn, StatfsOut,
};
use vm_memory::bitmap::BitmapSlice;
use vm_memory::ByteValued;

use super::abi::{
    SetxattrInExt, StatxIn, SyncfsIn, FATTR_KILL_SUIDGID, FUSE_GETATTR_FH,
    FUSE_SETXATTR_ACL_KILL_SGID,
};
use super::reply::{self, einval};
use super::{FuseServer, Req};
use crate::passthrough::{Entry, XattrReply};

/// Cap on bodies we copy out of guest memory (names, symlink targets, xattr values): an xattr
/// value (64 KiB) plus a name, with room to spare. WRITE data never goes through this.
const MAX_COPIED_BODY: usize = 64 * 1024 + 8192;

/// Reads a `T` from the body; a body too short for it is `EINVAL`. Reads into an initialised
/// value, never into uninitialised memory.
pub(super) fn read_obj<T: ByteValued + Default, S: BitmapSlice>(
    r: &mut Reader<S>,
) -> io::Result<T> {
    let mut v = T::default();
    if r.available_bytes() < std::mem::size_of::<T>() {
        return Err(einval());
    }
    r.read_exact(v.as_mut_slice()).map_err(|_| einval())?;
    Ok(v)
}

/// Copies the rest of the body out of guest memory.
pub(super) fn read_rest<S: BitmapSlice>(r: &mut Reader<S>) -> io::Result<Vec<u8>> {
    let n = r.available_bytes();
    if n > MAX_COPIED_BODY {
        return Err(einval());
    }
    let mut v = vec![0u8; n];
    r.read_exact(&mut v).map_err(|_| einval())?;
    Ok(v)
}

/// Splits a NUL-terminated string off the front of `buf`; no NUL is `EINVAL`.
pub(super) fn take_cstr(buf: &[u8]) -> io::Result<(&CStr, &[u8])> {
    let nul = buf.iter().position(|&b| b == 0).ok_or_else(einval)?;
    let (s, rest) = buf.split_at(nul + 1);
    let s = CStr::from_bytes_with_nul(s).map_err(|_| einval())?;
    Ok((s, rest))
}

pub(super) fn reply_entry<S: BitmapSlice>(
    w: &mut Writer<S>,
    unique: u64,
    e: &Entry,
) -> io::Result<u32> {
    reply::ok(w, unique, &[reply::entry_out(e).as_slice()])
}

pub(super) fn reply_empty<S: BitmapSlice>(w: &mut Writer<S>, unique: u64) -> io::Result<u32> {
    reply::ok(w, unique, &[])
}

fn reply_xattr<S: BitmapSlice>(
    w: &mut Writer<S>,
    unique: u64,
    size: u32,
    x: XattrReply,
) -> io::Result<u32> {
    match x {
        XattrReply::Size(n) => {
            let out = GetxattrOut {
                size: n,
                padding: 0,
            };
            reply::ok(w, unique, &[out.as_slice()])
        }
        XattrReply::Data(v) => {
            let room = w.available_bytes().saturating_sub(reply::OUT_HEADER_SIZE);
            if v.len() > size as usize || v.len() > room {
                return Err(io::Error::from_raw_os_error(libc::ERANGE));
            }
            reply::ok(w, unique, &[&v])
        }
    }
}

impl FuseServer {
    pub(super) fn do_lookup<S: BitmapSlice>(
        &self,
        q: &Req,
        r: &mut Reader<S>,
        w: &mut Writer<S>,
    ) -> io::Result<u32> {
        let body = read_rest(r)?;
        let (name, _) = take_cstr(&body)?;
        let e = self.fs.lookup(&q.ctx, q.nodeid, name)?;
        reply_entry(w, q.unique, &e)
    }

    /// FORGET: no reply.
    pub(super) fn do_forget<S: BitmapSlice>(&self, q: &Req, r: &mut Reader<S>) -> io::Result<()> {
        let f: ForgetIn = read_obj(r)?;
        self.fs.forget(q.nodeid, f.nlookup);
        Ok(())
    }

    /// BATCH_FORGET: no reply. A count the body cannot hold rejects the whole request.
    pub(super) fn do_batch_forget<S: BitmapSlice>(&self, r: &mut Reader<S>) -> io::Result<()> {
        let b: BatchForgetIn = read_obj(r)?;
        let need = (b.count as usize).saturating_mul(std::mem::size_of::<ForgetOne>());
        if need > r.available_bytes() {
            return Err(einval());
        }
        for _ in 0..b.count {
            let one: ForgetOne = read_obj(r)?;
            self.fs.forget(one.nodeid, one.nlookup);
        }
        Ok(())
    }

    pub(super) fn do_getattr<S: BitmapSlice>(
        &self,
        q: &Req,
        r: &mut Reader<S>,
        w: &mut Writer<S>,
    ) -> io::Result<u32> {
        let g: GetattrIn = read_obj(r)?;
        let fh = (g.flags & FUSE_GETATTR_FH != 0).then_some(g.fh);
        let a = self.fs.getattr(&q.ctx, q.nodeid, fh)?;
        reply::ok(w, q.unique, &[reply::attr_out(&a).as_slice()])
    }

    pub(super) fn do_setattr<S: BitmapSlice>(
        &self,
        q: &Req,
        r: &mut Reader<S>,
        w: &mut Writer<S>,
    ) -> io::Result<u32> {
        let mut s: SetattrIn = read_obj(r)?;
        if !self.kill_privs(s.valid & FATTR_KILL_SUIDGID) {
            s.valid &= !FATTR_KILL_SUIDGID;
        }
        let a = self.fs.setattr(&q.ctx, q.nodeid, &s)?;
        reply::ok(w, q.unique, &[reply::attr_out(&a).as_slice()])
    }

    pub(super) fn do_statx<S: BitmapSlice>(
        &self,
        q: &Req,
        r: &mut Reader<S>,
        w: &mut Writer<S>,
    ) -> io::Result<u32> {
        let s: StatxIn = read_obj(r)?;
        let fh = (s.getattr_flags & FUSE_GETATTR_FH != 0).then_some(s.fh);
        let a = self.fs.statx(&q.ctx, q.nodeid, fh, s.sx_flags, s.sx_mask)?;
        reply::ok(w, q.unique, &[reply::statx_out(&a).as_slice()])
    }

    pub(super) fn do_readlink<S: BitmapSlice>(
        &self,
        q: &Req,
        w: &mut Writer<S>,
    ) -> io::Result<u32> {
        let target = self.fs.readlink(&q.ctx, q.nodeid)?;
        reply::ok(w, q.unique, &[&target])
    }

    pub(super) fn do_symlink<S: BitmapSlice>(
        &self,
        q: &Req,
        r: &mut Reader<S>,
        w: &mut Writer<S>,
    ) -> io::Result<u32> {
        let body = read_rest(r)?;
        let (name, rest) = take_cstr(&body)?;
        let (target, rest) = take_cstr(rest)?;
        let label = self.security_label(q, rest, true)?;
        let e = self
            .fs
            .symlink(&q.ctx, q.nodeid, name, target, label.as_ref())?;
        reply_entry(w, q.unique, &e)
    }

    pub(super) fn do_mknod<S: BitmapSlice>(
        &self,
        q: &Req,
        r: &mut Reader<S>,
        w: &mut Writer<S>,
    ) -> io::Result<u32> {
        let m: MknodIn = read_obj(r)?;
        let body = read_rest(r)?;
        let (name, rest) = take_cstr(&body)?;
        let label = self.security_label(q, rest, true)?;
        let umask = self.umask(m.umask);
        let e = self.fs.mknod(
            &q.ctx,
            q.nodeid,
            name,
            m.mode,
            m.rdev,
            umask,
            label.as_ref(),
        )?;
        reply_entry(w, q.unique, &e)
    }

    pub(super) fn do_mkdir<S: BitmapSlice>(
        &self,
        q: &Req,
        r: &mut Reader<S>,
        w: &mut Writer<S>,
    ) -> io::Result<u32> {
        let m: MkdirIn = read_obj(r)?;
        let body = read_rest(r)?;
        let (name, rest) = take_cstr(&body)?;
        let label = self.security_label(q, rest, true)?;
        let umask = self.umask(m.umask);
        let e = self
            .fs
            .mkdir(&q.ctx, q.nodeid, name, m.mode, umask, label.as_ref())?;
        reply_entry(w, q.unique, &e)
    }

    /// UNLINK (`dir == false`) and RMDIR.
    pub(super) fn do_remove<S: BitmapSlice>(
        &self,
        q: &Req,
        dir: bool,
        r: &mut Reader<S>,
        w: &mut Writer<S>,
    ) -> io::Result<u32> {
        let body = read_rest(r)?;
        let (name, _) = take_cstr(&body)?;
        if dir {
            self.fs.rmdir(&q.ctx, q.nodeid, name)?;
        } else {
            self.fs.unlink(&q.ctx, q.nodeid, name)?;
        }
        reply_empty(w, q.unique)
    }

    /// RENAME (`v2 == false`, flags 0) and RENAME2.
    pub(super) fn do_rename<S: BitmapSlice>(
        &self,
        q: &Req,
        v2: bool,
        r: &mut Reader<S>,
        w: &mut Writer<S>,
    ) -> io::Result<u32> {
        let (newdir, flags) = if v2 {
            let i: Rename2In = read_obj(r)?;
            (i.newdir, i.flags)
        } else {
            let i: RenameIn = read_obj(r)?;
            (i.newdir, 0)
        };
        let body = read_rest(r)?;
        let (old, rest) = take_cstr(&body)?;
        let (new, _) = take_cstr(rest)?;
        self.fs.rename(&q.ctx, q.nodeid, old, newdir, new, flags)?;
        reply_empty(w, q.unique)
    }

    pub(super) fn do_link<S: BitmapSlice>(
        &self,
        q: &Req,
        r: &mut Reader<S>,
        w: &mut Writer<S>,
    ) -> io::Result<u32> {
        let l: LinkIn = read_obj(r)?;
        let body = read_rest(r)?;
        let (name, _) = take_cstr(&body)?;
        let e = self.fs.link(&q.ctx, l.oldnodeid, q.nodeid, name)?;
        reply_entry(w, q.unique, &e)
    }

    pub(super) fn do_statfs<S: BitmapSlice>(&self, q: &Req, w: &mut Writer<S>) -> io::Result<u32> {
        let st = self.fs.statfs(&q.ctx, q.nodeid)?;
        let out = StatfsOut {
            st: Kstatfs {
                blocks: st.f_blocks,
                bfree: st.f_bfree,
                bavail: st.f_bavail,
                files: st.f_files,
                ffree: st.f_ffree,
                bsize: st.f_bsize as u32,
                namelen: st.f_namemax as u32,
                frsize: st.f_frsize as u32,
                padding: 0,
                spare: [0; 6],
            },
        };
        reply::ok(w, q.unique, &[out.as_slice()])
    }

    pub(super) fn do_access<S: BitmapSlice>(
        &self,
        q: &Req,
        r: &mut Reader<S>,
        w: &mut Writer<S>,
    ) -> io::Result<u32> {
        let a: AccessIn = read_obj(r)?;
        self.fs.access(&q.ctx, q.nodeid, a.mask)?;
        reply_empty(w, q.unique)
    }

    pub(super) fn do_syncfs<S: BitmapSlice>(
        &self,
        q: &Req,
        r: &mut Reader<S>,
        w: &mut Writer<S>,
    ) -> io::Result<u32> {
        let _: SyncfsIn = read_obj(r)?;
        self.fs.syncfs(&q.ctx, q.nodeid)?;
        reply_empty(w, q.unique)
    }

    /// GETXATTR (`list == false`) and LISTXATTR.
    pub(super) fn do_getxattr<S: BitmapSlice>(
        &self,
        q: &Req,
        list: bool,
        r: &mut Reader<S>,
        w: &mut Writer<S>,
    ) -> io::Result<u32> {
        let g: GetxattrIn = read_obj(r)?;
        let x = if list {
            self.fs.listxattr(&q.ctx, q.nodeid, g.size)?
        } else {
            let body = read_rest(r)?;
            let (name, _) = take_cstr(&body)?;
            self.fs.getxattr(&q.ctx, q.nodeid, name, g.size)?
        };
        reply_xattr(w, q.unique, g.size, x)
    }

    /// SETXATTR: size, flags (and with FUSE_SETXATTR_EXT setxattr_flags and padding), name,
    /// value.
    pub(super) fn do_setxattr<S: BitmapSlice>(
        &self,
        q: &Req,
        r: &mut Reader<S>,
        w: &mut Writer<S>,
    ) -> io::Result<u32> {
        let s = if self.setxattr_ext.load(Ordering::Acquire) {
            read_obj::<SetxattrInExt, S>(r)?
        } else {
            let s: SetxattrIn = read_obj(r)?;
            SetxattrInExt {
                size: s.size,
                flags: s.flags,
                ..Default::default()
            }
        };
        let body = read_rest(r)?;
        let (name, rest) = take_cstr(&body)?;
        let value = rest.get(..s.size as usize).ok_or_else(einval)?;
        let kill_sgid = s.setxattr_flags & FUSE_SETXATTR_ACL_KILL_SGID != 0;
        self.fs
            .setxattr(&q.ctx, q.nodeid, name, value, s.flags, kill_sgid)?;
        reply_empty(w, q.unique)
    }

    pub(super) fn do_removexattr<S: BitmapSlice>(
        &self,
        q: &Req,
        r: &mut Reader<S>,
        w: &mut Writer<S>,
    ) -> io::Result<u32> {
        let body = read_rest(r)?;
        let (name, _) = take_cstr(&body)?;
        self.fs.removexattr(&q.ctx, q.nodeid, name)?;
        reply_empty(w, q.unique)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cstr_parsing() {
        let (a, rest) = take_cstr(b"abc\0def\0tail").unwrap();
        assert_eq!(a.to_bytes(), b"abc");
        let (b, rest) = take_cstr(rest).unwrap();
        assert_eq!(b.to_bytes(), b"def");
        assert_eq!(rest, b"tail");
        assert_eq!(
            take_cstr(rest).unwrap_err().raw_os_error(),
            Some(libc::EINVAL)
        );
        assert_eq!(
            take_cstr(b"").unwrap_err().raw_os_error(),
            Some(libc::EINVAL)
        );
        let (empty, _) = take_cstr(b"\0").unwrap();
        assert!(empty.to_bytes().is_empty());
    }
}
