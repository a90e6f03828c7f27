//! FUSE wire format for the test guest: fuse-backend-rs's ABI structs where they exist, our own
//! `#[repr(C)]` structs for what it lacks (FUSE 7.38 INIT with flags2, SETXATTR_EXT, SYNCFS,
//! STATX, security context extension), opcodes and flags as in the Linux uapi <linux/fuse.h>,
//! and builders of the SETATTR bodies the tests send. The one copy for all tests and benches.

use vm_memory::ByteValued;

pub use fuse_backend_rs::abi::fuse_abi::{
    AccessIn, Attr, AttrOut, BatchForgetIn, CopyFileRangeIn, CreateIn, Dirent, EntryOut,
    FallocateIn, FlushIn, ForgetIn, ForgetOne, FsyncIn, GetattrIn, GetxattrIn, GetxattrOut,
    InHeader, InitOut, InterruptIn, Kstatfs, LinkIn, LseekIn, LseekOut, MkdirIn, MknodIn, OpenIn,
    OpenOut, OutHeader, ReadIn, ReleaseIn, Rename2In, RenameIn, SetattrIn, StatfsOut, WriteIn,
    WriteOut,
};

pub const FUSE_KERNEL_VERSION: u32 = 7;
/// The protocol minor version the test guest speaks.
pub const FUSE_KERNEL_MINOR_VERSION: u32 = 38;
pub const FUSE_ROOT_ID: u64 = 1;

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

// INIT flags (flags | flags2 << 32).
pub const FUSE_ASYNC_READ: u64 = 1 << 0;
pub const FUSE_POSIX_LOCKS: u64 = 1 << 1;
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
pub const FUSE_SECURITY_CTX: u64 = 1 << 32;
pub const FUSE_HAS_INODE_DAX: u64 = 1 << 33;
pub const FUSE_CREATE_SUPP_GROUP: u64 = 1 << 34;
pub const FUSE_HAS_EXPIRE_ONLY: u64 = 1 << 35;
pub const FUSE_DIRECT_IO_ALLOW_MMAP: u64 = 1 << 36;
pub const FUSE_PASSTHROUGH: u64 = 1 << 37;
pub const FUSE_NO_EXPORT_SUPPORT: u64 = 1 << 38;
pub const FUSE_HAS_RESEND: u64 = 1 << 39;
pub const FUSE_ALLOW_IDMAP: u64 = 1 << 40;

// fuse_setattr_in.valid.
pub const FATTR_MODE: u32 = 1 << 0;
pub const FATTR_UID: u32 = 1 << 1;
pub const FATTR_GID: u32 = 1 << 2;
pub const FATTR_SIZE: u32 = 1 << 3;
pub const FATTR_ATIME: u32 = 1 << 4;
pub const FATTR_MTIME: u32 = 1 << 5;
pub const FATTR_FH: u32 = 1 << 6;
pub const FATTR_ATIME_NOW: u32 = 1 << 7;
pub const FATTR_MTIME_NOW: u32 = 1 << 8;
pub const FATTR_LOCKOWNER: u32 = 1 << 9;
pub const FATTR_CTIME: u32 = 1 << 10;
pub const FATTR_KILL_SUIDGID: u32 = 1 << 11;

// fuse_open_out.open_flags.
pub const FOPEN_DIRECT_IO: u32 = 1 << 0;
pub const FOPEN_KEEP_CACHE: u32 = 1 << 1;
pub const FOPEN_NONSEEKABLE: u32 = 1 << 2;
pub const FOPEN_CACHE_DIR: u32 = 1 << 3;
pub const FOPEN_STREAM: u32 = 1 << 4;
pub const FOPEN_NOFLUSH: u32 = 1 << 5;
pub const FOPEN_PARALLEL_DIRECT_WRITES: u32 = 1 << 6;
pub const FOPEN_PASSTHROUGH: u32 = 1 << 7;

/// fuse_getattr_in.flags (and fuse_statx_in.getattr_flags): `fh` is valid.
pub const FUSE_GETATTR_FH: u32 = 1 << 0;

/// fuse_attr.flags: the entry is the root of a submount.
pub const FUSE_ATTR_SUBMOUNT: u32 = 1 << 0;

/// The root's node ID, as the tests spell it.
pub const ROOT: u64 = FUSE_ROOT_ID;
/// Open flags as fuse_open_in and fuse_create_in carry them.
pub const RDONLY: u32 = libc::O_RDONLY as u32;
pub const RDWR: u32 = libc::O_RDWR as u32;

/// SETATTR of the mode (chmod).
pub fn set_mode(mode: u32) -> SetattrIn {
    SetattrIn {
        valid: FATTR_MODE,
        mode,
        ..Default::default()
    }
}

/// SETATTR of the size (truncate).
pub fn set_size(size: u64) -> SetattrIn {
    SetattrIn {
        valid: FATTR_SIZE,
        size,
        ..Default::default()
    }
}

/// SETATTR of the owner (chown to `uid`, the group unchanged).
pub fn set_uid(uid: u32) -> SetattrIn {
    SetattrIn {
        valid: FATTR_UID,
        uid,
        ..Default::default()
    }
}

/// SETATTR of atime and mtime, each (seconds, nanoseconds).
pub fn set_times(atime: (u64, u32), mtime: (u64, u32)) -> SetattrIn {
    SetattrIn {
        valid: FATTR_ATIME | FATTR_MTIME,
        atime: atime.0,
        atimensec: atime.1,
        mtime: mtime.0,
        mtimensec: mtime.1,
        ..Default::default()
    }
}

/// SETATTR of atime and mtime to the current time (utimes with NULL).
pub fn set_times_now() -> SetattrIn {
    SetattrIn {
        valid: FATTR_ATIME | FATTR_MTIME | FATTR_ATIME_NOW | FATTR_MTIME_NOW,
        ..Default::default()
    }
}

/// `attr` applied through the open file `fh` (FATTR_FH), as ftruncate or fchmod do.
pub fn with_fh(attr: SetattrIn, fh: u64) -> SetattrIn {
    SetattrIn {
        valid: attr.valid | FATTR_FH,
        fh,
        ..attr
    }
}

/// The INIT flags a Linux 6.12 virtio-fs driver sends (fuse_send_init without DAX, with
/// CONFIG_FUSE_PASSTHROUGH as in distribution kernels; virtio-fs sets auto_submounts).
pub const LINUX_6_12_VIRTIOFS_INIT_FLAGS: u64 = FUSE_ASYNC_READ
    | FUSE_POSIX_LOCKS
    | FUSE_ATOMIC_O_TRUNC
    | FUSE_EXPORT_SUPPORT
    | FUSE_BIG_WRITES
    | FUSE_DONT_MASK
    | FUSE_SPLICE_WRITE
    | FUSE_SPLICE_MOVE
    | FUSE_SPLICE_READ
    | FUSE_FLOCK_LOCKS
    | FUSE_HAS_IOCTL_DIR
    | FUSE_AUTO_INVAL_DATA
    | FUSE_DO_READDIRPLUS
    | FUSE_READDIRPLUS_AUTO
    | FUSE_ASYNC_DIO
    | FUSE_WRITEBACK_CACHE
    | FUSE_NO_OPEN_SUPPORT
    | FUSE_PARALLEL_DIROPS
    | FUSE_HANDLE_KILLPRIV
    | FUSE_POSIX_ACL
    | FUSE_ABORT_ERROR
    | FUSE_MAX_PAGES
    | FUSE_CACHE_SYMLINKS
    | FUSE_NO_OPENDIR_SUPPORT
    | FUSE_EXPLICIT_INVAL_DATA
    | FUSE_HANDLE_KILLPRIV_V2
    | FUSE_SETXATTR_EXT
    | FUSE_INIT_EXT
    | FUSE_SECURITY_CTX
    | FUSE_CREATE_SUPP_GROUP
    | FUSE_HAS_EXPIRE_ONLY
    | FUSE_DIRECT_IO_ALLOW_MMAP
    | FUSE_NO_EXPORT_SUPPORT
    | FUSE_HAS_RESEND
    | FUSE_ALLOW_IDMAP
    | FUSE_SUBMOUNTS
    | FUSE_PASSTHROUGH;

/// `max_readahead` of a Linux guest (32 pages).
pub const LINUX_MAX_READAHEAD: u32 = 128 * 1024;

/// fuse_init_in of FUSE 7.36+ (with flags2).
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
// SAFETY: plain old data without padding.
unsafe impl ByteValued for InitIn {}

/// fuse_setxattr_in as sent when FUSE_SETXATTR_EXT is negotiated.
#[repr(C)]
#[derive(Debug, Default, Copy, Clone)]
pub struct SetxattrInExt {
    pub size: u32,
    pub flags: u32,
    pub setxattr_flags: u32,
    pub padding: u32,
}
// SAFETY: plain old data without padding.
unsafe impl ByteValued for SetxattrInExt {}

/// fuse_setxattr_in before FUSE_SETXATTR_EXT.
pub use fuse_backend_rs::abi::fuse_abi::SetxattrIn;

/// fuse_syncfs_in.
#[repr(C)]
#[derive(Debug, Default, Copy, Clone)]
pub struct SyncfsIn {
    pub padding: u64,
}
// SAFETY: plain old data without padding.
unsafe impl ByteValued for SyncfsIn {}

/// fuse_secctx_header (the security context request extension).
#[repr(C)]
#[derive(Debug, Default, Copy, Clone)]
pub struct SecctxHeader {
    pub size: u32,
    pub nr_secctx: u32,
}
// SAFETY: plain old data without padding.
unsafe impl ByteValued for SecctxHeader {}

/// fuse_statx_in (FUSE 7.39).
#[repr(C)]
#[derive(Debug, Default, Copy, Clone)]
pub struct StatxIn {
    pub getattr_flags: u32,
    pub reserved: u32,
    pub fh: u64,
    pub sx_flags: u32,
    pub sx_mask: u32,
}
// SAFETY: plain old data without padding.
unsafe impl ByteValued for StatxIn {}

/// fuse_sx_time.
#[repr(C)]
#[derive(Debug, Default, Copy, Clone)]
pub struct SxTime {
    pub tv_sec: i64,
    pub tv_nsec: u32,
    pub reserved: i32,
}
// SAFETY: plain old data without padding.
unsafe impl ByteValued for SxTime {}

/// fuse_statx.
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
    pub spare0: u16,
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
// SAFETY: plain old data without padding.
unsafe impl ByteValued for Statx {}

/// fuse_statx_out.
#[repr(C)]
#[derive(Debug, Default, Copy, Clone)]
pub struct StatxOut {
    pub attr_valid: u64,
    pub attr_valid_nsec: u32,
    pub flags: u32,
    pub spare: [u64; 2],
    pub stat: Statx,
}
// SAFETY: plain old data without padding.
unsafe impl ByteValued for StatxOut {}

// Sizes from the Linux uapi <linux/fuse.h>.
const _: () = {
    assert!(std::mem::size_of::<InHeader>() == 40);
    assert!(std::mem::size_of::<OutHeader>() == 16);
    assert!(std::mem::size_of::<InitIn>() == 64);
    assert!(std::mem::size_of::<InitOut>() == 64);
    assert!(std::mem::size_of::<SetxattrInExt>() == 16);
    assert!(std::mem::size_of::<SyncfsIn>() == 8);
    assert!(std::mem::size_of::<SecctxHeader>() == 8);
    assert!(std::mem::size_of::<StatxIn>() == 24);
    assert!(std::mem::size_of::<SxTime>() == 16);
    assert!(std::mem::size_of::<Statx>() == 256);
    assert!(std::mem::size_of::<StatxOut>() == 288);
    assert!(std::mem::size_of::<EntryOut>() == 128);
    assert!(std::mem::size_of::<AttrOut>() == 104);
    assert!(std::mem::size_of::<OpenOut>() == 16);
    assert!(std::mem::size_of::<WriteIn>() == 40);
    assert!(std::mem::size_of::<ReadIn>() == 40);
};

/// A `fuse_secctx_header` record with one context named `name` (no NUL), padded to 8 bytes, as
/// Linux builds the FUSE_SECURITY_CTX request extension.
pub fn secctx(name: &[u8], value: &[u8]) -> Vec<u8> {
    let mut ctx = (value.len() as u32).to_le_bytes().to_vec();
    ctx.extend([0; 4]);
    ctx.extend(name);
    ctx.push(0);
    ctx.extend(value);
    let size = (8 + ctx.len()).next_multiple_of(8);
    let mut v = (size as u32).to_le_bytes().to_vec();
    v.extend(1u32.to_le_bytes());
    v.extend(ctx);
    v.resize(size, 0);
    v
}
