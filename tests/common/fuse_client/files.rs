//! Open files: OPEN, CREATE, TMPFILE, READ, WRITE, FLUSH, RELEASE, FSYNC, FALLOCATE, LSEEK,
//! COPY_FILE_RANGE.

use super::*;

impl FuseClient {
    pub fn open(&self, nodeid: u64, flags: u32) -> Result<OpenOut, i32> {
        let inp = OpenIn {
            flags,
            fuse_flags: 0,
        };
        let body = self.raw(FUSE_OPEN, nodeid, inp.as_slice(), HDR + 16)?;
        Ok(from_bytes(&body, "OPEN"))
    }

    fn create_like(
        &self,
        opcode: u32,
        parent: u64,
        name: &str,
        mode: u32,
        flags: u32,
        umask: u32,
    ) -> Result<(EntryOut, OpenOut), i32> {
        let inp = CreateIn {
            flags,
            mode,
            umask,
            fuse_flags: 0,
        };
        let mut body = inp.as_slice().to_vec();
        body.extend_from_slice(&cstr(name));
        let body = self.create_call(opcode, parent, body, HDR + 128 + 16)?;
        Ok((
            from_bytes(&body, "CREATE entry"),
            from_bytes(&body[128..], "CREATE open"),
        ))
    }

    pub fn create(
        &self,
        parent: u64,
        name: &str,
        mode: u32,
        flags: u32,
        umask: u32,
    ) -> Result<(EntryOut, OpenOut), i32> {
        self.create_like(FUSE_CREATE, parent, name, mode, flags, umask)
    }

    /// TMPFILE in `parent` (the name is "/", as for the dentry of a Linux O_TMPFILE open).
    pub fn tmpfile(
        &self,
        parent: u64,
        mode: u32,
        flags: u32,
        umask: u32,
    ) -> Result<(EntryOut, OpenOut), i32> {
        self.create_like(FUSE_TMPFILE, parent, "/", mode, flags, umask)
    }

    pub fn read(&self, nodeid: u64, fh: u64, offset: u64, size: u32) -> Result<Vec<u8>, i32> {
        let inp = ReadIn {
            fh,
            offset,
            size,
            ..Default::default()
        };
        self.raw(FUSE_READ, nodeid, inp.as_slice(), HDR + size as usize)
    }

    /// The body of a WRITE of `data` at `offset` of `fh`.
    pub fn write_body(fh: u64, offset: u64, data: &[u8]) -> Vec<u8> {
        let inp = WriteIn {
            fh,
            offset,
            size: data.len() as u32,
            ..Default::default()
        };
        let mut body = inp.as_slice().to_vec();
        body.extend_from_slice(data);
        body
    }

    /// WRITE; returns the number of bytes written.
    pub fn write(&self, nodeid: u64, fh: u64, offset: u64, data: &[u8]) -> Result<u32, i32> {
        let body = Self::write_body(fh, offset, data);
        let out: WriteOut = from_bytes(&self.raw(FUSE_WRITE, nodeid, &body, HDR + 8)?, "WRITE");
        Ok(out.size)
    }

    /// A guest buffer of `len` bytes at a page-aligned guest address (so page-aligned in the
    /// daemon's mapping too): the buffer holding it and that address.
    fn page_buf(&self, len: usize) -> (GuestBuf, u64) {
        let buf = self
            .guest
            .guest_alloc(len + PAGE - 1)
            .expect("guest memory");
        let addr = buf.addr().next_multiple_of(PAGE as u64);
        (buf, addr)
    }

    /// Sends the chain `descs` (device-readable `request` first, in one descriptor) and
    /// returns the used length.
    fn chain(&self, request: &GuestBuf, descs: &[(u64, usize, u16)]) -> usize {
        let mut all = vec![RawDesc {
            addr: request.addr(),
            len: request.len() as u32,
            flags: VIRTQ_DESC_F_NEXT,
            next: Next::Auto,
        }];
        for (i, &(addr, len, flags)) in descs.iter().enumerate() {
            let more = if i + 1 < descs.len() {
                VIRTQ_DESC_F_NEXT
            } else {
                0
            };
            all.push(RawDesc {
                addr,
                len: len as u32,
                flags: flags | more,
                next: Next::Auto,
            });
        }
        self.guest
            .raw_chain(self.queue, &all, Duration::from_secs(10))
            .expect("raw chain")
            .expect("no reply within 10 s") as usize
    }

    /// WRITE laid out as a Linux guest lays it out: the headers in one descriptor, the data in a
    /// page-aligned one of its own (what O_DIRECT on the host needs). Returns the bytes written.
    pub fn write_paged(&self, nodeid: u64, fh: u64, offset: u64, data: &[u8]) -> Result<u32, i32> {
        let inp = WriteIn {
            fh,
            offset,
            size: data.len() as u32,
            ..Default::default()
        };
        // The header's length counts the data, which goes in a descriptor of its own.
        let mut req = self.request(FUSE_WRITE, nodeid, &[inp.as_slice(), data].concat());
        req.truncate(req.len() - data.len());
        let req_buf = self.guest.guest_alloc(req.len()).expect("guest memory");
        req_buf.write(0, &req);
        let (_page, addr) = self.page_buf(data.len());
        self.guest.memory().write(addr, data);
        let reply = self.guest.guest_alloc(HDR + 8).expect("guest memory");
        let used = self.chain(
            &req_buf,
            &[
                (addr, data.len(), 0),
                (reply.addr(), HDR + 8, VIRTQ_DESC_F_WRITE),
            ],
        );
        let out: WriteOut = from_bytes(&Self::parse_reply(&req, &reply.read(0, used))?, "WRITE");
        Ok(out.size)
    }

    /// READ laid out as a Linux guest lays it out: the reply header in one descriptor, the data
    /// in a page-aligned one of its own.
    pub fn read_paged(&self, nodeid: u64, fh: u64, offset: u64, size: u32) -> Result<Vec<u8>, i32> {
        let inp = ReadIn {
            fh,
            offset,
            size,
            ..Default::default()
        };
        let req = self.request(FUSE_READ, nodeid, inp.as_slice());
        let req_buf = self.guest.guest_alloc(req.len()).expect("guest memory");
        req_buf.write(0, &req);
        let header = self.guest.guest_alloc(HDR).expect("guest memory");
        let (_page, addr) = self.page_buf(size as usize);
        let used = self.chain(
            &req_buf,
            &[
                (header.addr(), HDR, VIRTQ_DESC_F_WRITE),
                (addr, size as usize, VIRTQ_DESC_F_WRITE),
            ],
        );
        let mut reply = header.read(0, HDR.min(used));
        reply.extend(self.guest.memory().read(addr, used.saturating_sub(HDR)));
        Self::parse_reply(&req, &reply)
    }

    pub fn flush(&self, nodeid: u64, fh: u64, lock_owner: u64) -> Result<(), i32> {
        let inp = FlushIn {
            fh,
            lock_owner,
            ..Default::default()
        };
        self.raw(FUSE_FLUSH, nodeid, inp.as_slice(), HDR).map(drop)
    }

    /// RELEASE of `fh` opened with `flags`.
    pub fn release(&self, nodeid: u64, fh: u64, flags: u32) -> Result<(), i32> {
        let inp = ReleaseIn {
            fh,
            flags,
            ..Default::default()
        };
        self.raw(FUSE_RELEASE, nodeid, inp.as_slice(), HDR)
            .map(drop)
    }

    pub fn fsync(&self, nodeid: u64, fh: u64, datasync: bool) -> Result<(), i32> {
        let inp = FsyncIn {
            fh,
            fsync_flags: u32::from(datasync),
            padding: 0,
        };
        self.raw(FUSE_FSYNC, nodeid, inp.as_slice(), HDR).map(drop)
    }

    pub fn fallocate(
        &self,
        nodeid: u64,
        fh: u64,
        offset: u64,
        length: u64,
        mode: u32,
    ) -> Result<(), i32> {
        let inp = FallocateIn {
            fh,
            offset,
            length,
            mode,
            padding: 0,
        };
        self.raw(FUSE_FALLOCATE, nodeid, inp.as_slice(), HDR)
            .map(drop)
    }

    /// LSEEK (SEEK_DATA/SEEK_HOLE/...); returns the resulting offset.
    pub fn lseek(&self, nodeid: u64, fh: u64, offset: u64, whence: u32) -> Result<u64, i32> {
        let inp = LseekIn {
            fh,
            offset,
            whence,
            padding: 0,
        };
        let out: LseekOut = from_bytes(
            &self.raw(FUSE_LSEEK, nodeid, inp.as_slice(), HDR + 8)?,
            "LSEEK",
        );
        Ok(out.offset)
    }

    /// COPY_FILE_RANGE from `nodeid_in`; returns the number of bytes copied.
    pub fn copy_file_range(&self, nodeid_in: u64, args: &CopyFileRangeIn) -> Result<u32, i32> {
        let body = self.raw(FUSE_COPY_FILE_RANGE, nodeid_in, args.as_slice(), HDR + 8)?;
        Ok(from_bytes::<WriteOut>(&body, "COPY_FILE_RANGE").size)
    }
}
