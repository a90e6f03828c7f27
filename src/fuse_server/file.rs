//! Handlers for open files: OPEN/CREATE/TMPFILE, READ/WRITE (zero-copy between the file and
//! guest memory), FLUSH, RELEASE, FSYNC, FALLOCATE, LSEEK, COPY_FILE_RANGE.

use std::fs::File;
use std::io::{self, ErrorKind};

use super::chain::{Reader, Writer};
use fuse_backend_rs::abi::fuse_abi::{
    CopyFileRangeIn, CreateIn, FallocateIn, FlushIn, FsyncIn, LseekIn, LseekOut, OpenIn, OpenOut,
    ReadIn, ReleaseIn, WriteIn, WriteOut,
};
use vm_memory::bitmap::BitmapSlice;
use vm_memory::ByteValued;

use super::abi::{
    FUSE_FSYNC_FDATASYNC, FUSE_OPEN_KILL_SUIDGID, FUSE_READ, FUSE_WRITE, FUSE_WRITE_CACHE,
    FUSE_WRITE_KILL_SUIDGID,
};
use super::ops::{read_obj, read_rest, reply_empty, take_cstr};
use super::reply::{self, einval, OUT_HEADER_SIZE};
use super::{FuseServer, Req};
use crate::passthrough::{is_nospace, Entry, Opened, PassthroughFs};

/// COPY_FILE_RANGE answers in a 32-bit `fuse_write_out.size`: never copy more than fits.
const MAX_COPY: u64 = 0xffff_f000;

pub(super) fn open_out(o: &Opened) -> OpenOut {
    OpenOut {
        fh: o.fh,
        open_flags: o.open_flags,
        passthrough: 0,
    }
}

fn reply_created<S: BitmapSlice>(
    w: &mut Writer<S>,
    unique: u64,
    (e, o): &(Entry, Opened),
) -> io::Result<u32> {
    let entry = reply::entry_out(e);
    let open = open_out(o);
    reply::ok(w, unique, &[entry.as_slice(), open.as_slice()])
}

fn offset_plus(off: u64, done: usize) -> io::Result<u64> {
    off.checked_add(done as u64).ok_or_else(einval)
}

/// Moves up to `size` bytes at `offset` in steps of `step(remaining, offset) -> bytes moved`:
/// retries EINTR, stops at 0 (end of file), and an error after some bytes moved ends the
/// transfer with what was moved (the guest sees a short count, as from read(2)/write(2)).
fn transfer(
    size: usize,
    offset: u64,
    mut step: impl FnMut(usize, u64) -> io::Result<usize>,
) -> io::Result<usize> {
    let mut done = 0;
    while done < size {
        match step(size - done, offset_plus(offset, done)?) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if done == 0 => return Err(e),
            Err(_) => break,
        }
    }
    Ok(done)
}

/// Reads up to `size` bytes of `f` at `offset` straight into the guest buffers of `data`
/// (preadv, no bounce buffer).
pub(super) fn read_file_into<S: BitmapSlice>(
    data: &mut Writer<S>,
    f: &mut File,
    size: usize,
    offset: u64,
) -> io::Result<usize> {
    transfer(size, offset, |n, off| data.write_from_at(f, n, off))
}

/// Writes `size` bytes from the guest buffers of `r` straight into `f` at `offset` (pwritev).
/// The caller has checked that `r` holds `size` bytes.
pub(super) fn write_file_from<S: BitmapSlice>(
    r: &mut Reader<S>,
    f: &mut File,
    size: usize,
    offset: u64,
) -> io::Result<usize> {
    transfer(size, offset, |n, off| r.read_to_at(f, n, off))
}

impl FuseServer {
    pub(super) fn do_open<S: BitmapSlice>(
        &self,
        q: &Req,
        dir: bool,
        r: &mut Reader<S>,
        w: &mut Writer<S>,
    ) -> io::Result<u32> {
        let i: OpenIn = read_obj(r)?;
        let o = if dir {
            self.fs.opendir(&q.ctx, q.nodeid, i.flags)?
        } else {
            let kill = self.kill_privs(i.fuse_flags & FUSE_OPEN_KILL_SUIDGID);
            self.fs.open(&q.ctx, q.nodeid, i.flags, kill)?
        };
        reply::ok(w, q.unique, &[open_out(&o).as_slice()])
    }

    pub(super) fn do_create<S: BitmapSlice>(
        &self,
        q: &Req,
        r: &mut Reader<S>,
        w: &mut Writer<S>,
    ) -> io::Result<u32> {
        let c: CreateIn = read_obj(r)?;
        let body = read_rest(r)?;
        let (name, rest) = take_cstr(&body)?;
        let label = self.security_label(q, rest, true)?;
        let umask = self.umask(c.umask);
        let kill = self.kill_privs(c.fuse_flags & FUSE_OPEN_KILL_SUIDGID);
        let created = self.fs.create(
            &q.ctx,
            q.nodeid,
            name,
            c.mode,
            c.flags,
            umask,
            label.as_ref(),
            kill,
        )?;
        reply_created(w, q.unique, &created)
    }

    /// TMPFILE: a `fuse_create_in` like CREATE; the kernel appends the placeholder name "/",
    /// which means nothing and is ignored, and a security context as for CREATE (optional
    /// here: virtiofsd has no TMPFILE to follow).
    pub(super) fn do_tmpfile<S: BitmapSlice>(
        &self,
        q: &Req,
        r: &mut Reader<S>,
        w: &mut Writer<S>,
    ) -> io::Result<u32> {
        let c: CreateIn = read_obj(r)?;
        let body = read_rest(r)?;
        let after_name = take_cstr(&body).map_or(&[][..], |(_, rest)| rest);
        let label = self.security_label(q, after_name, false)?;
        let umask = self.umask(c.umask);
        let created = self
            .fs
            .tmpfile(&q.ctx, q.nodeid, c.mode, c.flags, umask, label.as_ref())?;
        reply_created(w, q.unique, &created)
    }

    /// READ: the data goes from the file straight into the guest's buffers after the header.
    pub(super) fn do_read<S: BitmapSlice>(
        &self,
        q: &Req,
        r: &mut Reader<S>,
        w: &mut Writer<S>,
    ) -> io::Result<u32> {
        let i: ReadIn = read_obj(r)?;
        let (mut data, size) = reply::data_part(w, i.size)?;
        let n = self
            .fs
            .with_file(i.fh, |f| read_file_into(&mut data, f, size, i.offset))?;
        self.count_bytes(FUSE_READ, n);
        reply::write_header(w, q.unique, 0, OUT_HEADER_SIZE + n)
    }

    /// WRITE: the data goes from the guest's buffers straight into the file.
    pub(super) fn do_write<S: BitmapSlice>(
        &self,
        q: &Req,
        r: &mut Reader<S>,
        w: &mut Writer<S>,
    ) -> io::Result<u32> {
        let i: WriteIn = read_obj(r)?;
        let size = i.size as usize;
        if size > r.available_bytes() {
            return Err(einval());
        }
        let kill = self.kill_privs(i.fuse_flags & FUSE_WRITE_KILL_SUIDGID);
        let cache = i.fuse_flags & FUSE_WRITE_CACHE != 0;
        // An append is copied out of guest memory once, up front (it is rare and small).
        let appended = if self.fs.appends(i.flags, cache) {
            let mut data = vec![0; size];
            io::Read::read_exact(r, &mut data)?;
            Some(data)
        } else {
            None
        };
        let mut write = || {
            self.fs
                .with_file_to_write(&q.ctx, i.fh, kill, |f| match &appended {
                    Some(data) => PassthroughFs::append(f, data),
                    None => write_file_from(r, f, size, i.offset),
                })
        };
        // A failed pwritev consumed nothing of `r`: it can be tried again.
        let n = match write() {
            Err(e) if is_nospace(&e) && self.fs.reclaim_deleted() => write()?,
            other => other?,
        };
        // The data is written: a failure to put the guest's mtime back is not the WRITE's.
        if let Err(e) = self
            .fs
            .after_write(i.fh, i.offset.saturating_add(n as u64), cache)
        {
            log::debug!("WRITE of fh {}: keeping the guest's view: {e}", i.fh);
        }
        self.count_bytes(FUSE_WRITE, n);
        let out = WriteOut {
            size: n as u32,
            padding: 0,
        };
        reply::ok(w, q.unique, &[out.as_slice()])
    }

    pub(super) fn do_flush<S: BitmapSlice>(
        &self,
        q: &Req,
        r: &mut Reader<S>,
        w: &mut Writer<S>,
    ) -> io::Result<u32> {
        let f: FlushIn = read_obj(r)?;
        self.fs.flush(&q.ctx, q.nodeid, f.fh, f.lock_owner)?;
        reply_empty(w, q.unique)
    }

    /// RELEASE and RELEASEDIR (`dir`).
    pub(super) fn do_release<S: BitmapSlice>(
        &self,
        q: &Req,
        dir: bool,
        r: &mut Reader<S>,
        w: &mut Writer<S>,
    ) -> io::Result<u32> {
        let i: ReleaseIn = read_obj(r)?;
        if dir {
            self.fs.releasedir(&q.ctx, q.nodeid, i.fh)?;
        } else {
            self.fs.release(&q.ctx, q.nodeid, i.fh)?;
        }
        reply_empty(w, q.unique)
    }

    /// FSYNC and FSYNCDIR (`dir`).
    pub(super) fn do_fsync<S: BitmapSlice>(
        &self,
        q: &Req,
        dir: bool,
        r: &mut Reader<S>,
        w: &mut Writer<S>,
    ) -> io::Result<u32> {
        let i: FsyncIn = read_obj(r)?;
        let datasync = i.fsync_flags & FUSE_FSYNC_FDATASYNC != 0;
        if dir {
            self.fs.fsyncdir(&q.ctx, q.nodeid, i.fh, datasync)?;
        } else {
            self.fs.fsync(&q.ctx, q.nodeid, i.fh, datasync)?;
        }
        reply_empty(w, q.unique)
    }

    pub(super) fn do_fallocate<S: BitmapSlice>(
        &self,
        q: &Req,
        r: &mut Reader<S>,
        w: &mut Writer<S>,
    ) -> io::Result<u32> {
        let i: FallocateIn = read_obj(r)?;
        self.fs
            .fallocate(&q.ctx, q.nodeid, i.fh, i.mode, i.offset, i.length)?;
        reply_empty(w, q.unique)
    }

    pub(super) fn do_lseek<S: BitmapSlice>(
        &self,
        q: &Req,
        r: &mut Reader<S>,
        w: &mut Writer<S>,
    ) -> io::Result<u32> {
        let i: LseekIn = read_obj(r)?;
        let offset = self.fs.lseek(&q.ctx, q.nodeid, i.fh, i.offset, i.whence)?;
        reply::ok(w, q.unique, &[LseekOut { offset }.as_slice()])
    }

    pub(super) fn do_copy_file_range<S: BitmapSlice>(
        &self,
        q: &Req,
        r: &mut Reader<S>,
        w: &mut Writer<S>,
    ) -> io::Result<u32> {
        let i: CopyFileRangeIn = read_obj(r)?;
        let n = self.fs.copy_file_range(
            &q.ctx,
            q.nodeid,
            i.fh_in,
            i.offset_in,
            i.nodeid_out,
            i.fh_out,
            i.offset_out,
            i.len.min(MAX_COPY),
            i.flags,
        )?;
        let out = WriteOut {
            size: u32::try_from(n).map_err(|_| einval())?,
            padding: 0,
        };
        reply::ok(w, q.unique, &[out.as_slice()])
    }
}
