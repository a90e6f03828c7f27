//! Directory handles: OPENDIR, READDIR(PLUS), RELEASEDIR, FSYNCDIR.

use std::ffi::CStr;
use std::fs::File;
use std::io;
use std::os::fd::AsFd;

use crate::passthrough::filesystem::{err, PassthroughFs};
use crate::passthrough::request_types::{Context, DirEntry, Entry, Opened};
use crate::passthrough::state::handle_table::{OpenFile, NO_FH};
use crate::passthrough::sys::fd as sysfd;

/// getdents64 buffer size per directory handle.
const DIRENT_BUF: usize = 32 * 1024;
/// Size of `struct linux_dirent64` up to `d_name`.
const DIRENT64_HEADER: usize = 19;

impl PassthroughFs {
    /// `flags`: the guest's open(2) flags; only O_NOATIME counts, with `--preserve-noatime`.
    pub fn opendir(&self, _ctx: &Context, nodeid: u64, flags: u32) -> io::Result<Opened> {
        let inode = self.inodes.get(nodeid)?;
        if !inode.is_dir() {
            return Err(err(libc::ENOTDIR));
        }
        let noatime = if self.cfg.preserve_noatime {
            flags as i32 & libc::O_NOATIME
        } else {
            0
        };
        let token = self.take_token()?;
        let fd = inode.open(
            &self.mounts,
            self.proc_self_fd.as_fd(),
            libc::O_RDONLY | libc::O_DIRECTORY | noatime,
        )?;
        let fh = self
            .handles
            .insert(OpenFile::new(nodeid, File::from(fd), true, token));
        Ok(Opened { fh, open_flags: 0 })
    }

    /// Hands entries from `offset` on to `add` until it returns `false` (the reply buffer is
    /// full) or the directory ends. With `plus`, each entry but `.` and `..` comes with a looked-up
    /// [`Entry`] (its lookup count incremented); when `add` returns `false` for an entry, that
    /// lookup is undone here. Entries that vanish between getdents and lookup are skipped.
    pub fn readdir(
        &self,
        _ctx: &Context,
        _nodeid: u64,
        fh: u64,
        offset: u64,
        plus: bool,
        add: &mut dyn FnMut(&DirEntry, Option<&Entry>) -> bool,
    ) -> io::Result<()> {
        let open = self.handles.get(fh)?;
        let Some(state) = &open.dir else {
            return Err(err(libc::ENOTDIR));
        };
        let dir_inode = self.inodes.get(open.nodeid)?;
        let dirfd = open.file.as_fd();
        // One READDIR per handle at a time: the fd's offset and the buffer are shared.
        let mut guard = crate::sync::lock(state);
        let st = &mut *guard;
        if st.buf.len() != DIRENT_BUF {
            st.buf.resize(DIRENT_BUF, 0);
        }
        if st.pos >= st.len || st.offset != offset {
            // Not a continuation of the buffered entries: start over at `offset`.
            let off = i64::try_from(offset).map_err(|_| err(libc::EINVAL))?;
            sysfd::lseek(dirfd, off, libc::SEEK_SET)?;
            (st.len, st.pos, st.offset) = (0, 0, offset);
        }
        let mut added_any = false;
        loop {
            if st.pos + DIRENT64_HEADER > st.len {
                let n = sysfd::getdents64(dirfd, &mut st.buf).inspect_err(|_| st.len = 0)?;
                (st.len, st.pos) = (n, 0);
                if n == 0 {
                    return Ok(());
                }
            }
            let rec = &st.buf[st.pos..st.len];
            let ino = u64::from_ne_bytes(rec[0..8].try_into().expect("8 bytes"));
            let next = u64::from_ne_bytes(rec[8..16].try_into().expect("8 bytes"));
            let reclen = u16::from_ne_bytes([rec[16], rec[17]]) as usize;
            let kind = rec[18] as u32;
            if reclen < DIRENT64_HEADER || reclen > rec.len() {
                st.len = 0;
                return Err(err(libc::EIO));
            }
            let name_field = &rec[DIRENT64_HEADER..reclen];
            let name_len = name_field
                .iter()
                .position(|&b| b == 0)
                .unwrap_or(name_field.len());
            let name = &name_field[..name_len];
            let entry = if plus && name != b"." && name != b".." {
                let cname = CStr::from_bytes_until_nul(name_field).map_err(|_| err(libc::EIO))?;
                match self.lookup_listed(&dir_inode, dirfd, cname, ino) {
                    Ok(e) => Some(e),
                    Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                        // Gone since getdents: skip it.
                        (st.pos, st.offset) = (st.pos + reclen, next);
                        continue;
                    }
                    Err(e) if added_any => {
                        log::debug!("readdirplus stops early: {e}");
                        return Ok(());
                    }
                    Err(e) => return Err(e),
                }
            } else {
                None
            };
            let shown = self.name_to_guest(name);
            let dent = DirEntry {
                ino,
                off: next,
                kind,
                name: &shown,
            };
            if !add(&dent, entry.as_ref()) {
                if let Some(e) = entry {
                    self.forget(e.nodeid, 1);
                }
                return Ok(());
            }
            added_any = true;
            (st.pos, st.offset) = (st.pos + reclen, next);
        }
    }

    pub fn releasedir(&self, _ctx: &Context, _nodeid: u64, fh: u64) -> io::Result<()> {
        if fh == NO_FH {
            return Ok(());
        }
        self.handles.remove(fh)
    }

    pub fn fsyncdir(
        &self,
        _ctx: &Context,
        _nodeid: u64,
        fh: u64,
        datasync: bool,
    ) -> io::Result<()> {
        let open = self.handles.get(fh)?;
        if open.dir.is_none() {
            return Err(err(libc::ENOTDIR));
        }
        sysfd::sync(open.file.as_fd(), datasync)
    }
}
