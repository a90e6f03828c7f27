//! Directories: OPENDIR, READDIR, READDIRPLUS, RELEASEDIR, FSYNCDIR.

use super::*;

impl FuseClient {
    pub fn opendir(&self, nodeid: u64, flags: u32) -> Result<OpenOut, i32> {
        let inp = OpenIn {
            flags,
            fuse_flags: 0,
        };
        let body = self.raw(FUSE_OPENDIR, nodeid, inp.as_slice(), HDR + 16)?;
        Ok(from_bytes(&body, "OPENDIR"))
    }

    /// READDIR from `offset` with `size` bytes of reply space.
    pub fn readdir(
        &self,
        nodeid: u64,
        fh: u64,
        offset: u64,
        size: u32,
    ) -> Result<Vec<DirEntry>, i32> {
        let inp = ReadIn {
            fh,
            offset,
            size,
            ..Default::default()
        };
        let body = self.raw(FUSE_READDIR, nodeid, inp.as_slice(), HDR + size as usize)?;
        Ok(parse_readdir(&body))
    }

    /// READDIRPLUS from `offset` with `size` bytes of reply space.
    pub fn readdirplus(
        &self,
        nodeid: u64,
        fh: u64,
        offset: u64,
        size: u32,
    ) -> Result<Vec<DirEntryPlus>, i32> {
        let inp = ReadIn {
            fh,
            offset,
            size,
            ..Default::default()
        };
        let body = self.raw(
            FUSE_READDIRPLUS,
            nodeid,
            inp.as_slice(),
            HDR + size as usize,
        )?;
        Ok(parse_readdirplus(&body))
    }

    pub fn releasedir(&self, nodeid: u64, fh: u64) -> Result<(), i32> {
        let inp = ReleaseIn {
            fh,
            ..Default::default()
        };
        self.raw(FUSE_RELEASEDIR, nodeid, inp.as_slice(), HDR)
            .map(drop)
    }

    pub fn fsyncdir(&self, nodeid: u64, fh: u64, datasync: bool) -> Result<(), i32> {
        let inp = FsyncIn {
            fh,
            fsync_flags: u32::from(datasync),
            padding: 0,
        };
        self.raw(FUSE_FSYNCDIR, nodeid, inp.as_slice(), HDR)
            .map(drop)
    }
}
