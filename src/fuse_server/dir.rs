//! Directory handlers: OPENDIR is in `file.rs` (shared with OPEN); here READDIR/READDIRPLUS and
//! the `fuse_dirent`/`fuse_direntplus` record format.

use std::io::{self, Write};
use std::mem::size_of;

use super::chain::{Reader, Writer};
use fuse_backend_rs::abi::fuse_abi::{Dirent, Direntplus, EntryOut, ReadIn};
use vm_memory::bitmap::BitmapSlice;
use vm_memory::ByteValued;

use super::ops::read_obj;
use super::reply::{self, einval, OUT_HEADER_SIZE};
use super::{FuseServer, Req};
use crate::passthrough::{DirEntry, Entry};

/// The size of a record for a `namelen`-byte name: the fixed part, the name, then zero padding
/// to a multiple of 8 (`FUSE_DIRENT_SIZE` / `FUSE_DIRENTPLUS_SIZE`).
pub fn dirent_size(namelen: usize, plus: bool) -> usize {
    (fixed_size(plus) + namelen + 7) & !7
}

fn fixed_size(plus: bool) -> usize {
    if plus {
        size_of::<Direntplus>()
    } else {
        size_of::<Dirent>()
    }
}

/// Writes one record for `d`: a `fuse_direntplus` when `plus` is `Some` (with that
/// `fuse_entry_out`; all zeros means "no entry", as for `.` and `..`), else a `fuse_dirent`.
/// Returns its size. The caller checks that [`dirent_size`] bytes fit.
pub fn write_dirent<W: Write>(
    out: &mut W,
    d: &DirEntry,
    plus: Option<&EntryOut>,
) -> io::Result<usize> {
    let dirent = Dirent {
        ino: d.ino,
        off: d.off,
        namelen: u32::try_from(d.name.len()).map_err(|_| einval())?,
        type_: d.kind,
    };
    if let Some(entry_out) = plus {
        out.write_all(entry_out.as_slice())?;
    }
    out.write_all(dirent.as_slice())?;
    out.write_all(d.name)?;
    let len = dirent_size(d.name.len(), plus.is_some());
    let pad = len - fixed_size(plus.is_some()) - d.name.len();
    out.write_all(&[0u8; 8][..pad])?;
    Ok(len)
}

/// Lays READDIR(PLUS) records into the guest's reply buffers, up to `size` bytes.
pub(super) struct DirentSink<'w, 'a, S: BitmapSlice> {
    data: &'w mut Writer<'a, S>,
    size: usize,
    plus: bool,
    /// Bytes written so far.
    pub used: usize,
}

impl<'w, 'a, S: BitmapSlice> DirentSink<'w, 'a, S> {
    pub fn new(data: &'w mut Writer<'a, S>, size: usize, plus: bool) -> Self {
        DirentSink {
            data,
            size,
            plus,
            used: 0,
        }
    }

    /// The `add` callback of `PassthroughFs::readdir`: `false` when the record does not fit
    /// (nothing is written then).
    pub fn add(&mut self, d: &DirEntry, e: Option<&Entry>) -> bool {
        if self.used + dirent_size(d.name.len(), self.plus) > self.size {
            return false;
        }
        let entry_out = self
            .plus
            .then(|| e.map(reply::entry_out).unwrap_or_default());
        match write_dirent(self.data, d, entry_out.as_ref()) {
            Ok(n) => {
                self.used += n;
                true
            }
            Err(err) => {
                log::warn!("READDIR: writing an entry into guest memory failed: {err}");
                false
            }
        }
    }
}

impl FuseServer {
    /// READDIR and READDIRPLUS (`plus`): records go straight into the guest's buffers after the
    /// header, until `size` or the writable space is full.
    pub(super) fn do_readdir<S: BitmapSlice>(
        &self,
        q: &Req,
        plus: bool,
        r: &mut Reader<S>,
        w: &mut Writer<S>,
    ) -> io::Result<u32> {
        let i: ReadIn = read_obj(r)?;
        let (mut data, size) = reply::data_part(w, i.size)?;
        let mut sink = DirentSink::new(&mut data, size, plus);
        let res = self
            .fs
            .readdir(&q.ctx, q.nodeid, i.fh, i.offset, plus, &mut |d, e| {
                sink.add(d, e)
            });
        let used = sink.used;
        match res {
            // Entries already handed out (and looked up, for READDIRPLUS) must reach the guest.
            Err(e) if used == 0 => Err(e),
            _ => reply::write_header(w, q.unique, 0, OUT_HEADER_SIZE + used),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(name: &[u8]) -> DirEntry<'_> {
        DirEntry {
            ino: 7,
            off: 3,
            kind: u32::from(libc::DT_REG),
            name,
        }
    }

    #[test]
    fn sizes_are_8_aligned() {
        assert_eq!(dirent_size(0, false), 24);
        assert_eq!(dirent_size(1, false), 32);
        assert_eq!(dirent_size(8, false), 32);
        assert_eq!(dirent_size(9, false), 40);
        assert_eq!(dirent_size(1, true), 160);
        assert_eq!(dirent_size(255, true), 408);
        for n in 0..300 {
            assert_eq!(dirent_size(n, false) % 8, 0);
            assert_eq!(dirent_size(n, true) % 8, 0);
        }
    }

    #[test]
    fn dirent_layout() {
        let mut buf = Vec::new();
        let n = write_dirent(&mut buf, &entry(b"hello"), None).unwrap();
        assert_eq!(n, 32);
        assert_eq!(buf.len(), 32);
        assert_eq!(&buf[0..8], &7u64.to_ne_bytes());
        assert_eq!(&buf[8..16], &3u64.to_ne_bytes());
        assert_eq!(&buf[16..20], &5u32.to_ne_bytes());
        assert_eq!(&buf[20..24], &u32::from(libc::DT_REG).to_ne_bytes());
        assert_eq!(&buf[24..29], b"hello");
        assert_eq!(&buf[29..32], &[0, 0, 0]);
        // A second record starts 8-aligned right after.
        let n2 = write_dirent(&mut buf, &entry(b"12345678"), None).unwrap();
        assert_eq!((n2, buf.len()), (32, 64));
        assert_eq!(&buf[56..64], b"12345678");
    }

    #[test]
    fn direntplus_layout() {
        let eo = EntryOut {
            nodeid: 99,
            generation: 1,
            ..Default::default()
        };
        let mut buf = Vec::new();
        let n = write_dirent(&mut buf, &entry(b"x"), Some(&eo)).unwrap();
        assert_eq!((n, buf.len()), (160, 160));
        assert_eq!(&buf[0..8], &99u64.to_ne_bytes());
        assert_eq!(&buf[128..136], &7u64.to_ne_bytes());
        assert_eq!(&buf[144..148], &1u32.to_ne_bytes());
        assert_eq!(buf[152], b'x');
        assert!(buf[153..].iter().all(|&b| b == 0));
        // `.`/`..` in READDIRPLUS: a zeroed entry (nodeid 0 = no lookup).
        let mut buf = Vec::new();
        write_dirent(&mut buf, &entry(b".."), Some(&EntryOut::default())).unwrap();
        assert!(buf[..128].iter().all(|&b| b == 0));
    }
}
