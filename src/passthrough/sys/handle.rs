//! `name_to_handle_at` / `open_by_handle_at` over a `struct file_handle` with room for the
//! largest handle Linux hands out.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// Room for the largest handle Linux hands out (MAX_HANDLE_SZ).
pub const MAX_HANDLE_SZ: usize = 128;

/// `struct file_handle` with room for [`MAX_HANDLE_SZ`] bytes.
#[repr(C)]
struct HandleBuf {
    handle_bytes: u32,
    handle_type: i32,
    data: [u8; MAX_HANDLE_SZ],
}

/// A handle as the kernel made it: its type, its bytes, and the mount ID it belongs to.
pub struct RawHandle {
    pub handle_type: i32,
    pub bytes: Vec<u8>,
    pub mnt_id: u64,
}

/// The handle of what `fd` refers to (`name` empty) or of `name` in directory `fd`, never
/// following a final symlink.
pub fn name_to_handle_at(fd: BorrowedFd, name: &CStr) -> io::Result<RawHandle> {
    let mut buf = HandleBuf {
        handle_bytes: MAX_HANDLE_SZ as u32,
        handle_type: 0,
        data: [0; MAX_HANDLE_SZ],
    };
    let mut mnt_id: libc::c_int = 0;
    let flags = if name.is_empty() {
        libc::AT_EMPTY_PATH
    } else {
        0
    };
    // SAFETY: `buf` is a file_handle with room for MAX_HANDLE_SZ bytes, as declared in it;
    // valid fd, C string and out pointer.
    let ret = unsafe {
        libc::name_to_handle_at(
            fd.as_raw_fd(),
            name.as_ptr(),
            (&mut buf as *mut HandleBuf).cast::<libc::file_handle>(),
            &mut mnt_id,
            flags,
        )
    };
    if ret != 0 {
        return Err(io::Error::last_os_error());
    }
    let len = (buf.handle_bytes as usize).min(MAX_HANDLE_SZ);
    Ok(RawHandle {
        handle_type: buf.handle_type,
        bytes: buf.data[..len].to_vec(),
        mnt_id: mnt_id as u64,
    })
}

/// Opens the inode of the handle (`handle_type`, `bytes`) on the mount of `mount_fd` with
/// `flags` (O_PATH for a reference, or real open flags).
pub fn open_by_handle_at(
    mount_fd: BorrowedFd,
    handle_type: i32,
    bytes: &[u8],
    flags: libc::c_int,
) -> io::Result<OwnedFd> {
    if bytes.len() > MAX_HANDLE_SZ {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    let mut buf = HandleBuf {
        handle_bytes: bytes.len() as u32,
        handle_type,
        data: [0; MAX_HANDLE_SZ],
    };
    buf.data[..bytes.len()].copy_from_slice(bytes);
    // SAFETY: `buf` is a valid file_handle; the returned fd is checked and owned.
    let fd = unsafe {
        libc::open_by_handle_at(
            mount_fd.as_raw_fd(),
            (&mut buf as *mut HandleBuf).cast::<libc::file_handle>(),
            flags | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh fd nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}
