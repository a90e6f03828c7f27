//! FUSE ABI pieces that `fuse_backend_rs::abi::fuse_abi` (FUSE 7.33) lacks or gets too loose:
//! opcode numbers up to FUSE_STATX (7.39), 64-bit INIT flags, the 7.38 `fuse_in_header` with
//! `total_extlen`, the full `fuse_init_in`/`fuse_init_out`, and the STATX/SYNCFS messages.
//! Layouts follow Linux 6.12 `include/uapi/linux/fuse.h` (protocol 7.41).

use vm_memory::ByteValued;

/// The protocol major version we speak.
pub const KERNEL_VERSION: u32 = 7;
/// The highest minor version we implement; INIT answers `min(guest, this)`.
pub const KERNEL_MINOR_VERSION: u32 = 38;
/// The oldest minor version we accept (as virtiofsd: virtio-fs guests send 7.31 or newer).
pub const MIN_KERNEL_MINOR_VERSION: u32 = 27;

// Opcodes (`enum fuse_opcode`). 7 and 19 are unused numbers.
pub const FUSE_LOOKUP: u32 = 1;
pub const FUSE_FORGET: u32 = 2;
pub const FUSE_GETATTR: u32 = 3;
pub const FUSE_SETATTR: u32 = 4;
pub const FUSE_READLINK: u32 = 5;
pub const FUSE_SYMLINK: u32 = 6;
pub const FUSE_MKNOD: u32 = 8;
pub const FUSE_MKDIR: u32 = 9;
pub const FUSE_UNLINK: u32 = 10;
pub const FUSE_RMDIR: u32 = 11;
pub const FUSE_RENAME: u32 = 12;
pub const FUSE_LINK: u32 = 13;
pub const FUSE_OPEN: u32 = 14;
pub const FUSE_READ: u32 = 15;
pub const FUSE_WRITE: u32 = 16;
pub const FUSE_STATFS: u32 = 17;
pub const FUSE_RELEASE: u32 = 18;
pub const FUSE_FSYNC: u32 = 20;
pub const FUSE_SETXATTR: u32 = 21;
pub const FUSE_GETXATTR: u32 = 22;
pub const FUSE_LISTXATTR: u32 = 23;
pub const FUSE_REMOVEXATTR: u32 = 24;
pub const FUSE_FLUSH: u32 = 25;
pub const FUSE_INIT: u32 = 26;
pub const FUSE_OPENDIR: u32 = 27;
pub const FUSE_READDIR: u32 = 28;
pub const FUSE_RELEASEDIR: u32 = 29;
pub const FUSE_FSYNCDIR: u32 = 30;
pub const FUSE_GETLK: u32 = 31;
pub const FUSE_SETLK: u32 = 32;
pub const FUSE_SETLKW: u32 = 33;
pub const FUSE_ACCESS: u32 = 34;
pub const FUSE_CREATE: u32 = 35;
pub const FUSE_INTERRUPT: u32 = 36;
pub const FUSE_BMAP: u32 = 37;
pub const FUSE_DESTROY: u32 = 38;
pub const FUSE_IOCTL: u32 = 39;
pub const FUSE_POLL: u32 = 40;
pub const FUSE_NOTIFY_REPLY: u32 = 41;
pub const FUSE_BATCH_FORGET: u32 = 42;
pub const FUSE_FALLOCATE: u32 = 43;
pub const FUSE_READDIRPLUS: u32 = 44;
pub const FUSE_RENAME2: u32 = 45;
pub const FUSE_LSEEK: u32 = 46;
pub const FUSE_COPY_FILE_RANGE: u32 = 47;
pub const FUSE_SETUPMAPPING: u32 = 48;
pub const FUSE_REMOVEMAPPING: u32 = 49;
pub const FUSE_SYNCFS: u32 = 50;
pub const FUSE_TMPFILE: u32 = 51;
pub const FUSE_STATX: u32 = 52;
/// The highest opcode number we know.
pub const FUSE_MAX_OPCODE: u32 = FUSE_STATX;

/// The name of a known opcode (for statistics and logs); `None` for gaps and unknown numbers.
pub fn opcode_name(opcode: u32) -> Option<&'static str> {
    Some(match opcode {
        FUSE_LOOKUP => "LOOKUP",
        FUSE_FORGET => "FORGET",
        FUSE_GETATTR => "GETATTR",
        FUSE_SETATTR => "SETATTR",
        FUSE_READLINK => "READLINK",
        FUSE_SYMLINK => "SYMLINK",
        FUSE_MKNOD => "MKNOD",
        FUSE_MKDIR => "MKDIR",
        FUSE_UNLINK => "UNLINK",
        FUSE_RMDIR => "RMDIR",
        FUSE_RENAME => "RENAME",
        FUSE_LINK => "LINK",
        FUSE_OPEN => "OPEN",
        FUSE_READ => "READ",
        FUSE_WRITE => "WRITE",
        FUSE_STATFS => "STATFS",
        FUSE_RELEASE => "RELEASE",
        FUSE_FSYNC => "FSYNC",
        FUSE_SETXATTR => "SETXATTR",
        FUSE_GETXATTR => "GETXATTR",
        FUSE_LISTXATTR => "LISTXATTR",
        FUSE_REMOVEXATTR => "REMOVEXATTR",
        FUSE_FLUSH => "FLUSH",
        FUSE_INIT => "INIT",
        FUSE_OPENDIR => "OPENDIR",
        FUSE_READDIR => "READDIR",
        FUSE_RELEASEDIR => "RELEASEDIR",
        FUSE_FSYNCDIR => "FSYNCDIR",
        FUSE_GETLK => "GETLK",
        FUSE_SETLK => "SETLK",
        FUSE_SETLKW => "SETLKW",
        FUSE_ACCESS => "ACCESS",
        FUSE_CREATE => "CREATE",
        FUSE_INTERRUPT => "INTERRUPT",
        FUSE_BMAP => "BMAP",
        FUSE_DESTROY => "DESTROY",
        FUSE_IOCTL => "IOCTL",
        FUSE_POLL => "POLL",
        FUSE_NOTIFY_REPLY => "NOTIFY_REPLY",
        FUSE_BATCH_FORGET => "BATCH_FORGET",
        FUSE_FALLOCATE => "FALLOCATE",
        FUSE_READDIRPLUS => "READDIRPLUS",
        FUSE_RENAME2 => "RENAME2",
        FUSE_LSEEK => "LSEEK",
        FUSE_COPY_FILE_RANGE => "COPY_FILE_RANGE",
        FUSE_SETUPMAPPING => "SETUPMAPPING",
        FUSE_REMOVEMAPPING => "REMOVEMAPPING",
        FUSE_SYNCFS => "SYNCFS",
        FUSE_TMPFILE => "TMPFILE",
        FUSE_STATX => "STATX",
        _ => return None,
    })
}

// INIT flags, as one 64-bit set: bits 0-31 travel in `flags`, bits 32-63 in `flags2` (which is
// only read/sent when FUSE_INIT_EXT is set).
pub const FUSE_ASYNC_READ: u64 = 1 << 0;
pub const FUSE_POSIX_LOCKS: u64 = 1 << 1;
pub const FUSE_FILE_OPS: u64 = 1 << 2;
pub const FUSE_ATOMIC_O_TRUNC: u64 = 1 << 3;
pub const FUSE_EXPORT_SUPPORT: u64 = 1 << 4;
pub const FUSE_BIG_WRITES: u64 = 1 << 5;
pub const FUSE_DONT_MASK: u64 = 1 << 6;
pub const FUSE_SPLICE_WRITE: u64 = 1 << 7;
pub const FUSE_SPLICE_MOVE: u64 = 1 << 8;
pub const FUSE_SPLICE_READ: u64 = 1 << 9;
pub const FUSE_FLOCK_LOCKS: u64 = 1 << 10;
pub const FUSE_HAS_IOCTL_DIR: u64 = 1 << 11;
pub const FUSE_AUTO_INVAL_DATA: u64 = 1 << 12;
pub const FUSE_DO_READDIRPLUS: u64 = 1 << 13;
pub const FUSE_READDIRPLUS_AUTO: u64 = 1 << 14;
pub const FUSE_ASYNC_DIO: u64 = 1 << 15;
pub const FUSE_WRITEBACK_CACHE: u64 = 1 << 16;
pub const FUSE_NO_OPEN_SUPPORT: u64 = 1 << 17;
pub const FUSE_PARALLEL_DIROPS: u64 = 1 << 18;
pub const FUSE_HANDLE_KILLPRIV: u64 = 1 << 19;
pub const FUSE_POSIX_ACL: u64 = 1 << 20;
pub const FUSE_ABORT_ERROR: u64 = 1 << 21;
pub const FUSE_MAX_PAGES: u64 = 1 << 22;
pub const FUSE_CACHE_SYMLINKS: u64 = 1 << 23;
pub const FUSE_NO_OPENDIR_SUPPORT: u64 = 1 << 24;
pub const FUSE_EXPLICIT_INVAL_DATA: u64 = 1 << 25;
pub const FUSE_MAP_ALIGNMENT: u64 = 1 << 26;
pub const FUSE_SUBMOUNTS: u64 = 1 << 27;
pub const FUSE_HANDLE_KILLPRIV_V2: u64 = 1 << 28;
pub const FUSE_SETXATTR_EXT: u64 = 1 << 29;
pub const FUSE_INIT_EXT: u64 = 1 << 30;
pub const FUSE_INIT_RESERVED: u64 = 1 << 31;
pub const FUSE_SECURITY_CTX: u64 = 1 << 32;
pub const FUSE_HAS_INODE_DAX: u64 = 1 << 33;
pub const FUSE_CREATE_SUPP_GROUP: u64 = 1 << 34;
pub const FUSE_HAS_EXPIRE_ONLY: u64 = 1 << 35;
pub const FUSE_DIRECT_IO_ALLOW_MMAP: u64 = 1 << 36;
pub const FUSE_PASSTHROUGH: u64 = 1 << 37;
pub const FUSE_NO_EXPORT_SUPPORT: u64 = 1 << 38;
pub const FUSE_HAS_RESEND: u64 = 1 << 39;
pub const FUSE_ALLOW_IDMAP: u64 = 1 << 40;

/// `fuse_write_in.write_flags`: clear setuid/setgid (the caller lacks CAP_FSETID).
pub const FUSE_WRITE_KILL_SUIDGID: u32 = 1 << 2;
/// `fuse_open_in.open_flags` / `fuse_create_in.open_flags`: an O_TRUNC clears setuid/setgid.
pub const FUSE_OPEN_KILL_SUIDGID: u32 = 1 << 0;
/// `fuse_setattr_in.valid`: the truncate (or chown) clears setuid/setgid.
pub const FATTR_KILL_SUIDGID: u32 = 1 << 11;
/// `fuse_setxattr_in.setxattr_flags`: setting an access ACL clears setgid.
pub const FUSE_SETXATTR_ACL_KILL_SGID: u32 = 1 << 0;

/// `fuse_getattr_in.getattr_flags` / `fuse_statx_in.getattr_flags`: `fh` is valid.
pub const FUSE_GETATTR_FH: u32 = 1 << 0;
/// `fuse_fsync_in.fsync_flags`: sync data only.
pub const FUSE_FSYNC_FDATASYNC: u32 = 1 << 0;
/// `fuse_write_in.write_flags`: a write of the page cache (delayed; the fh is one the kernel
/// picked among the inode's writable handles, the lock owner is not set).
pub const FUSE_WRITE_CACHE: u32 = 1 << 0;

/// `fuse_in_header` since 7.38: the old `padding` became `total_extlen` (in 8-byte units).
#[repr(C)]
#[derive(Debug, Default, Copy, Clone)]
pub struct InHeader {
    pub len: u32,
    pub opcode: u32,
    pub unique: u64,
    pub nodeid: u64,
    pub uid: u32,
    pub gid: u32,
    pub pid: u32,
    pub total_extlen: u16,
    pub padding: u16,
}
// SAFETY: plain integers, no implicit padding; any bit pattern is valid.
unsafe impl ByteValued for InHeader {}

/// `fuse_setxattr_in` as the guest sends it once FUSE_SETXATTR_EXT is negotiated (the compat
/// form, without `setxattr_flags`, is fuse-backend-rs's `SetxattrIn`).
#[repr(C)]
#[derive(Debug, Default, Copy, Clone)]
pub struct SetxattrInExt {
    pub size: u32,
    pub flags: u32,
    pub setxattr_flags: u32,
    pub padding: u32,
}
// SAFETY: plain integers, no implicit padding; any bit pattern is valid.
unsafe impl ByteValued for SetxattrInExt {}

/// `fuse_init_in` since 7.36. Guests older than that send only the first 16 bytes.
#[repr(C)]
#[derive(Debug, Default, Copy, Clone)]
pub struct InitIn {
    pub major: u32,
    pub minor: u32,
    pub max_readahead: u32,
    pub flags: u32,
    pub flags2: u32,
    pub unused: [u32; 11],
}
// SAFETY: plain integers, no implicit padding; any bit pattern is valid.
unsafe impl ByteValued for InitIn {}

/// The part of `fuse_init_in` every guest sends.
pub const INIT_IN_COMPAT_SIZE: usize = 16;

/// `fuse_init_out` (7.40 layout; `max_stack_depth` is 0 for us).
#[repr(C)]
#[derive(Debug, Default, Copy, Clone, PartialEq, Eq)]
pub struct InitOut {
    pub major: u32,
    pub minor: u32,
    pub max_readahead: u32,
    pub flags: u32,
    pub max_background: u16,
    pub congestion_threshold: u16,
    pub max_write: u32,
    pub time_gran: u32,
    pub max_pages: u16,
    pub map_alignment: u16,
    pub flags2: u32,
    pub max_stack_depth: u32,
    pub unused: [u32; 6],
}
// SAFETY: plain integers, no implicit padding; any bit pattern is valid.
unsafe impl ByteValued for InitOut {}

/// `fuse_syncfs_in`.
#[repr(C)]
#[derive(Debug, Default, Copy, Clone)]
pub struct SyncfsIn {
    pub padding: u64,
}
// SAFETY: plain integers, no implicit padding; any bit pattern is valid.
unsafe impl ByteValued for SyncfsIn {}

/// `fuse_statx_in`.
#[repr(C)]
#[derive(Debug, Default, Copy, Clone)]
pub struct StatxIn {
    pub getattr_flags: u32,
    pub reserved: u32,
    pub fh: u64,
    pub sx_flags: u32,
    pub sx_mask: u32,
}
// SAFETY: plain integers, no implicit padding; any bit pattern is valid.
unsafe impl ByteValued for StatxIn {}

/// `fuse_sx_time`.
#[repr(C)]
#[derive(Debug, Default, Copy, Clone)]
pub struct SxTime {
    pub tv_sec: i64,
    pub tv_nsec: u32,
    pub reserved: i32,
}
// SAFETY: plain integers, no implicit padding; any bit pattern is valid.
unsafe impl ByteValued for SxTime {}

/// `fuse_statx`.
#[repr(C)]
#[derive(Debug, Default, Copy, Clone)]
pub struct Statx {
    pub mask: u32,
    pub blksize: u32,
    pub attributes: u64,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub mode: u16,
    pub spare0: [u16; 1],
    pub ino: u64,
    pub size: u64,
    pub blocks: u64,
    pub attributes_mask: u64,
    pub atime: SxTime,
    pub btime: SxTime,
    pub ctime: SxTime,
    pub mtime: SxTime,
    pub rdev_major: u32,
    pub rdev_minor: u32,
    pub dev_major: u32,
    pub dev_minor: u32,
    pub spare2: [u64; 14],
}
// SAFETY: plain integers, no implicit padding; any bit pattern is valid.
unsafe impl ByteValued for Statx {}

/// `fuse_statx_out`.
#[repr(C)]
#[derive(Debug, Default, Copy, Clone)]
pub struct StatxOut {
    pub attr_valid: u64,
    pub attr_valid_nsec: u32,
    pub flags: u32,
    pub spare: [u64; 2],
    pub stat: Statx,
}
// SAFETY: plain integers, no implicit padding; any bit pattern is valid.
unsafe impl ByteValued for StatxOut {}

#[cfg(test)]
mod tests {
    use super::*;
    use fuse_backend_rs::abi::fuse_abi as fa;
    use std::mem::size_of;

    /// Sizes from Linux 6.12 include/uapi/linux/fuse.h.
    #[test]
    fn struct_sizes_match_linux_6_12() {
        assert_eq!(size_of::<InHeader>(), 40);
        assert_eq!(size_of::<fa::OutHeader>(), 16);
        assert_eq!(size_of::<InitIn>(), 64);
        assert_eq!(size_of::<InitOut>(), 64);
        assert_eq!(size_of::<SyncfsIn>(), 8);
        assert_eq!(size_of::<StatxIn>(), 24);
        assert_eq!(size_of::<SxTime>(), 16);
        assert_eq!(size_of::<Statx>(), 256);
        assert_eq!(size_of::<StatxOut>(), 288);
        assert_eq!(size_of::<fa::Attr>(), 88);
        assert_eq!(size_of::<fa::EntryOut>(), 128);
        assert_eq!(size_of::<fa::AttrOut>(), 104);
        assert_eq!(size_of::<fa::Dirent>(), 24);
        assert_eq!(size_of::<fa::Direntplus>(), 152);
        assert_eq!(size_of::<fa::ForgetIn>(), 8);
        assert_eq!(size_of::<fa::ForgetOne>(), 16);
        assert_eq!(size_of::<fa::BatchForgetIn>(), 8);
        assert_eq!(size_of::<fa::GetattrIn>(), 16);
        assert_eq!(size_of::<fa::SetattrIn>(), 88);
        assert_eq!(size_of::<fa::MknodIn>(), 16);
        assert_eq!(size_of::<fa::MkdirIn>(), 8);
        assert_eq!(size_of::<fa::RenameIn>(), 8);
        assert_eq!(size_of::<fa::Rename2In>(), 16);
        assert_eq!(size_of::<fa::LinkIn>(), 8);
        assert_eq!(size_of::<fa::OpenIn>(), 8);
        assert_eq!(size_of::<fa::OpenOut>(), 16);
        assert_eq!(size_of::<fa::CreateIn>(), 16);
        assert_eq!(size_of::<fa::ReleaseIn>(), 24);
        assert_eq!(size_of::<fa::FlushIn>(), 24);
        assert_eq!(size_of::<fa::ReadIn>(), 40);
        assert_eq!(size_of::<fa::WriteIn>(), 40);
        assert_eq!(size_of::<fa::WriteOut>(), 8);
        assert_eq!(size_of::<fa::Kstatfs>(), 80);
        assert_eq!(size_of::<fa::StatfsOut>(), 80);
        assert_eq!(size_of::<fa::FsyncIn>(), 16);
        assert_eq!(size_of::<fa::SetxattrIn>(), 8); // FUSE_COMPAT_SETXATTR_IN_SIZE
        assert_eq!(size_of::<SetxattrInExt>(), 16);
        assert_eq!(size_of::<fa::GetxattrIn>(), 8);
        assert_eq!(size_of::<fa::GetxattrOut>(), 8);
        assert_eq!(size_of::<fa::AccessIn>(), 8);
        assert_eq!(size_of::<fa::InterruptIn>(), 8);
        assert_eq!(size_of::<fa::FallocateIn>(), 32);
        assert_eq!(size_of::<fa::LseekIn>(), 24);
        assert_eq!(size_of::<fa::LseekOut>(), 8);
        assert_eq!(size_of::<fa::CopyFileRangeIn>(), 56);
    }

    #[test]
    fn opcode_names() {
        assert_eq!(opcode_name(FUSE_STATX), Some("STATX"));
        assert_eq!(opcode_name(FUSE_TMPFILE), Some("TMPFILE"));
        for gap in [0, 7, 19, 53, 4096, 9999, u32::MAX] {
            assert_eq!(opcode_name(gap), None, "opcode {gap}");
        }
        let known = (0..=FUSE_MAX_OPCODE)
            .filter(|&op| opcode_name(op).is_some())
            .count();
        assert_eq!(known, 50);
    }
}
