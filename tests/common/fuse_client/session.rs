//! The session and the file system as a whole: INIT, DESTROY, STATFS, SYNCFS.

use super::*;

impl FuseClient {
    /// FUSE_INIT 7.38 with the flags of a Linux 6.12 virtio-fs driver; remembers what the daemon
    /// accepted.
    pub fn init(&self) -> Result<InitOut, i32> {
        self.init_with(LINUX_6_12_VIRTIOFS_INIT_FLAGS)
    }

    /// FUSE_INIT 7.38 with `flags` (flags | flags2 << 32).
    pub fn init_with(&self, flags: u64) -> Result<InitOut, i32> {
        let init = InitIn {
            major: FUSE_KERNEL_VERSION,
            minor: FUSE_KERNEL_MINOR_VERSION,
            max_readahead: LINUX_MAX_READAHEAD,
            flags: flags as u32,
            flags2: (flags >> 32) as u32,
            unused: [0; 11],
        };
        let body = self.raw(FUSE_INIT, 0, init.as_slice(), HDR + 64)?;
        let out: InitOut = from_bytes(&body, "INIT");
        let mut accepted = u64::from(out.flags);
        if accepted & FUSE_INIT_EXT != 0 {
            accepted |= u64::from(out.flags2) << 32;
        }
        self.flags.store(accepted, Ordering::Relaxed);
        Ok(out)
    }

    /// DESTROY (sent by Linux on unmount, expecting a header). A completion without any reply
    /// (virtiofsd 1.14 does that) also counts as success.
    pub fn destroy(&self) -> Result<(), i32> {
        let req = self.request(FUSE_DESTROY, 0, &[]);
        let reply = self
            .guest
            .roundtrip(self.queue, &req, HDR)
            .unwrap_or_else(|e| panic!("DESTROY on queue {}: {e}", self.queue));
        if reply.is_empty() {
            return Ok(());
        }
        Self::parse_reply(&req, &reply).map(drop)
    }

    pub fn statfs(&self, nodeid: u64) -> Result<Kstatfs, i32> {
        let body = self.raw(FUSE_STATFS, nodeid, &[], HDR + 80)?;
        Ok(from_bytes(&body, "STATFS"))
    }

    /// SYNCFS (sent by Linux for the root inode).
    pub fn syncfs(&self) -> Result<(), i32> {
        self.raw(
            FUSE_SYNCFS,
            FUSE_ROOT_ID,
            SyncfsIn::default().as_slice(),
            HDR,
        )
        .map(drop)
    }
}
