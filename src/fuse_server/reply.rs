//! Writing replies into the device-writable part of a chain, and converting the filesystem's
//! results (`libc::statx`, [`Entry`], `Duration`) into FUSE ABI structs.

use std::io::{self, Write};
use std::mem::size_of;
use std::time::Duration;

use super::chain::Writer;
use fuse_backend_rs::abi::fuse_abi::{Attr as FuseAttr, AttrOut, EntryOut, OutHeader};
use vm_memory::bitmap::BitmapSlice;

use super::abi::{Statx, SxTime};
use crate::passthrough::{Attr, Entry};

pub const OUT_HEADER_SIZE: usize = size_of::<OutHeader>();

/// `EINVAL`, the answer to a malformed request.
pub fn einval() -> io::Error {
    io::Error::from_raw_os_error(libc::EINVAL)
}

/// The positive errno of `e` (EIO when it carries none).
pub fn errno_of(e: &io::Error) -> i32 {
    match e.raw_os_error() {
        Some(n) if n > 0 => n,
        _ => libc::EIO,
    }
}

/// Writes an out header saying `len` bytes in all. The caller has checked that 16 bytes fit.
pub fn write_header<S: BitmapSlice>(
    w: &mut Writer<S>,
    unique: u64,
    error: i32,
    len: usize,
) -> io::Result<u32> {
    let len = u32::try_from(len).map_err(|_| einval())?;
    let h = OutHeader { len, error, unique };
    w.write_all(vm_memory::ByteValued::as_slice(&h))?;
    Ok(len)
}

/// An error reply; returns the used length (0 when not even a header fits).
/// The data part of a reply that carries up to `wanted` bytes (READ, READDIR): the writable
/// descriptors after the out header, and how many bytes may go there (at most `wanted`). EINVAL
/// when not even the header fits.
pub fn data_part<'a, S: BitmapSlice>(
    w: &mut Writer<'a, S>,
    wanted: u32,
) -> io::Result<(Writer<'a, S>, usize)> {
    let room = w
        .available_bytes()
        .checked_sub(OUT_HEADER_SIZE)
        .ok_or_else(einval)?;
    let data = w.split_at(OUT_HEADER_SIZE).map_err(|_| einval())?;
    Ok((data, room.min(wanted as usize)))
}

pub fn error<S: BitmapSlice>(w: &mut Writer<S>, unique: u64, errno: i32) -> u32 {
    if w.available_bytes() < OUT_HEADER_SIZE {
        return 0;
    }
    write_header(w, unique, -errno, OUT_HEADER_SIZE).unwrap_or(0)
}

/// A successful reply made of `parts`, all or nothing: a reply that does not fit the writable
/// space is `EINVAL` (the guest sized its buffer wrongly) and nothing is written.
pub fn ok<S: BitmapSlice>(w: &mut Writer<S>, unique: u64, parts: &[&[u8]]) -> io::Result<u32> {
    let len = parts
        .iter()
        .fold(OUT_HEADER_SIZE, |acc, p| acc.saturating_add(p.len()));
    if len > w.available_bytes() {
        return Err(einval());
    }
    let used = write_header(w, unique, 0, len)?;
    for p in parts {
        w.write_all(p)?;
    }
    Ok(used)
}

fn secs_nsecs(d: Duration) -> (u64, u32) {
    (d.as_secs(), d.subsec_nanos())
}

/// `statx` → `fuse_attr`, with `FUSE_ATTR_*` `flags`.
pub fn fuse_attr(st: &libc::statx, flags: u32) -> FuseAttr {
    FuseAttr {
        ino: st.stx_ino,
        size: st.stx_size,
        blocks: st.stx_blocks,
        atime: st.stx_atime.tv_sec as u64,
        mtime: st.stx_mtime.tv_sec as u64,
        ctime: st.stx_ctime.tv_sec as u64,
        atimensec: st.stx_atime.tv_nsec,
        mtimensec: st.stx_mtime.tv_nsec,
        ctimensec: st.stx_ctime.tv_nsec,
        mode: u32::from(st.stx_mode),
        nlink: st.stx_nlink,
        uid: st.stx_uid,
        gid: st.stx_gid,
        // The kernel decodes this with new_decode_dev(), which matches the low 32 bits of
        // glibc's dev_t encoding.
        rdev: libc::makedev(st.stx_rdev_major, st.stx_rdev_minor) as u32,
        blksize: st.stx_blksize,
        flags,
    }
}

fn sx_time(t: &libc::statx_timestamp) -> SxTime {
    SxTime {
        tv_sec: t.tv_sec,
        tv_nsec: t.tv_nsec,
        reserved: 0,
    }
}

/// `statx` → `fuse_statx`.
pub fn fuse_statx(st: &libc::statx) -> Statx {
    Statx {
        mask: st.stx_mask,
        blksize: st.stx_blksize,
        attributes: st.stx_attributes,
        nlink: st.stx_nlink,
        uid: st.stx_uid,
        gid: st.stx_gid,
        mode: st.stx_mode,
        ino: st.stx_ino,
        size: st.stx_size,
        blocks: st.stx_blocks,
        attributes_mask: st.stx_attributes_mask,
        atime: sx_time(&st.stx_atime),
        btime: sx_time(&st.stx_btime),
        ctime: sx_time(&st.stx_ctime),
        mtime: sx_time(&st.stx_mtime),
        rdev_major: st.stx_rdev_major,
        rdev_minor: st.stx_rdev_minor,
        dev_major: st.stx_dev_major,
        dev_minor: st.stx_dev_minor,
        ..Default::default()
    }
}

pub fn entry_out(e: &Entry) -> EntryOut {
    let (entry_valid, entry_valid_nsec) = secs_nsecs(e.entry_timeout);
    let (attr_valid, attr_valid_nsec) = secs_nsecs(e.attr_timeout);
    EntryOut {
        nodeid: e.nodeid,
        generation: e.generation,
        entry_valid,
        attr_valid,
        entry_valid_nsec,
        attr_valid_nsec,
        attr: fuse_attr(&e.attr, e.attr_flags),
    }
}

pub fn attr_out(a: &Attr) -> AttrOut {
    let (attr_valid, attr_valid_nsec) = secs_nsecs(a.timeout);
    AttrOut {
        attr_valid,
        attr_valid_nsec,
        dummy: 0,
        attr: fuse_attr(&a.st, 0),
    }
}

/// The `fuse_statx_out` for a STATX answer.
pub fn statx_out(a: &Attr) -> super::abi::StatxOut {
    let (attr_valid, attr_valid_nsec) = secs_nsecs(a.timeout);
    super::abi::StatxOut {
        attr_valid,
        attr_valid_nsec,
        flags: 0,
        spare: [0; 2],
        stat: fuse_statx(&a.st),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample_statx() -> libc::statx {
        // SAFETY: libc::statx is plain integers; all-zero is a valid value.
        let mut st: libc::statx = unsafe { std::mem::zeroed() };
        st.stx_mask = libc::STATX_BASIC_STATS | libc::STATX_BTIME;
        st.stx_ino = 42;
        st.stx_size = 12345;
        st.stx_blocks = 24;
        st.stx_blksize = 4096;
        st.stx_mode = (libc::S_IFCHR | 0o640) as u16;
        st.stx_nlink = 3;
        st.stx_uid = 1000;
        st.stx_gid = 100;
        st.stx_rdev_major = 259;
        st.stx_rdev_minor = 0x12345;
        st.stx_dev_major = 8;
        st.stx_dev_minor = 1;
        st.stx_atime.tv_sec = 1_700_000_000;
        st.stx_atime.tv_nsec = 1;
        st.stx_mtime.tv_sec = 1_700_000_001;
        st.stx_mtime.tv_nsec = 2;
        st.stx_ctime.tv_sec = 1_700_000_002;
        st.stx_ctime.tv_nsec = 3;
        st.stx_btime.tv_sec = 1_600_000_000;
        st.stx_btime.tv_nsec = 4;
        st
    }

    #[test]
    fn statx_to_fuse_attr() {
        let a = fuse_attr(&sample_statx(), 1);
        assert_eq!((a.ino, a.size, a.blocks, a.blksize), (42, 12345, 24, 4096));
        assert_eq!(a.mode, libc::S_IFCHR | 0o640);
        assert_eq!((a.nlink, a.uid, a.gid, a.flags), (3, 1000, 100, 1));
        assert_eq!((a.atime, a.atimensec), (1_700_000_000, 1));
        assert_eq!((a.mtime, a.mtimensec), (1_700_000_001, 2));
        assert_eq!((a.ctime, a.ctimensec), (1_700_000_002, 3));
        // Linux new_encode_dev(): (minor & 0xff) | (major << 8) | ((minor & ~0xff) << 12).
        let expect = (0x45) | (259 << 8) | ((0x12345 & !0xff) << 12);
        assert_eq!(a.rdev, expect);
    }

    #[test]
    fn statx_to_fuse_statx() {
        let s = fuse_statx(&sample_statx());
        assert_eq!(s.mask, libc::STATX_BASIC_STATS | libc::STATX_BTIME);
        assert_eq!(
            (s.ino, s.size, s.mode),
            (42, 12345, (libc::S_IFCHR | 0o640) as u16)
        );
        assert_eq!((s.btime.tv_sec, s.btime.tv_nsec), (1_600_000_000, 4));
        assert_eq!((s.rdev_major, s.rdev_minor), (259, 0x12345));
        assert_eq!((s.dev_major, s.dev_minor), (8, 1));
    }

    #[test]
    fn errno_defaults_to_eio() {
        assert_eq!(
            errno_of(&io::Error::from_raw_os_error(libc::ENOENT)),
            libc::ENOENT
        );
        assert_eq!(errno_of(&io::Error::other("no errno")), libc::EIO);
    }
}
