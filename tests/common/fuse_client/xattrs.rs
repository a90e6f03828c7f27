//! Extended attributes: GETXATTR, LISTXATTR, SETXATTR, REMOVEXATTR.

use super::*;

impl FuseClient {
    fn xattr_reply(body: Vec<u8>, size: u32) -> XattrReply {
        if size == 0 {
            XattrReply::Size(from_bytes::<GetxattrOut>(&body, "xattr size").size)
        } else {
            XattrReply::Data(body)
        }
    }

    /// GETXATTR; `size` 0 asks for the value's size.
    pub fn getxattr(&self, nodeid: u64, name: &str, size: u32) -> Result<XattrReply, i32> {
        let mut body = GetxattrIn { size, padding: 0 }.as_slice().to_vec();
        body.extend_from_slice(&cstr(name));
        let reply = self.raw(FUSE_GETXATTR, nodeid, &body, HDR + size.max(8) as usize)?;
        Ok(Self::xattr_reply(reply, size))
    }

    /// LISTXATTR; `size` 0 asks for the list's size.
    pub fn listxattr(&self, nodeid: u64, size: u32) -> Result<XattrReply, i32> {
        let body = GetxattrIn { size, padding: 0 };
        let reply = self.raw(
            FUSE_LISTXATTR,
            nodeid,
            body.as_slice(),
            HDR + size.max(8) as usize,
        )?;
        Ok(Self::xattr_reply(reply, size))
    }

    /// SETXATTR (extended fuse_setxattr_in if FUSE_SETXATTR_EXT was negotiated).
    pub fn setxattr(&self, nodeid: u64, name: &str, value: &[u8], flags: u32) -> Result<(), i32> {
        let size = value.len() as u32;
        let mut body = if self.flags() & FUSE_SETXATTR_EXT != 0 {
            let inp = SetxattrInExt {
                size,
                flags,
                ..Default::default()
            };
            inp.as_slice().to_vec()
        } else {
            SetxattrIn { size, flags }.as_slice().to_vec()
        };
        body.extend_from_slice(&cstr(name));
        body.extend_from_slice(value);
        self.raw(FUSE_SETXATTR, nodeid, &body, HDR).map(drop)
    }

    pub fn removexattr(&self, nodeid: u64, name: &str) -> Result<(), i32> {
        self.raw(FUSE_REMOVEXATTR, nodeid, &cstr(name), HDR)
            .map(drop)
    }
}
