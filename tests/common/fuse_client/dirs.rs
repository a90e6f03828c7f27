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

    /// READDIR or READDIRPLUS (`opcode`) from `offset` with `size` bytes of reply space: the
    /// reply's body.
    fn listing(
        &self,
        opcode: u32,
        nodeid: u64,
        fh: u64,
        offset: u64,
        size: u32,
    ) -> Result<Vec<u8>, i32> {
        let inp = ReadIn {
            fh,
            offset,
            size,
            ..Default::default()
        };
        self.raw(opcode, nodeid, inp.as_slice(), HDR + size as usize)
    }

    /// READDIR from `offset` with `size` bytes of reply space.
    pub fn readdir(
        &self,
        nodeid: u64,
        fh: u64,
        offset: u64,
        size: u32,
    ) -> Result<Vec<DirEntry>, i32> {
        Ok(parse_readdir(&self.listing(
            FUSE_READDIR,
            nodeid,
            fh,
            offset,
            size,
        )?))
    }

    /// READDIRPLUS from `offset` with `size` bytes of reply space.
    pub fn readdirplus(
        &self,
        nodeid: u64,
        fh: u64,
        offset: u64,
        size: u32,
    ) -> Result<Vec<DirEntryPlus>, i32> {
        let body = self.listing(FUSE_READDIRPLUS, nodeid, fh, offset, size)?;
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
