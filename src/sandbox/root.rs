//! The sandbox's root: the mount namespace of the `namespace` mode (slave mounts, a fresh
//! `/proc`, the share bound on itself), `pivot_root` into the share, or `chroot`.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

use super::{check, cstring, os_err};

/// In the child: new mount and network namespaces, every mount a slave of the host's, a fresh
/// `/proc`, and the shared dir bind-mounted on itself (the root [`pivot_into`] enters).
pub(super) fn enter_mount_namespace(shared_dir: &Path) -> io::Result<()> {
    // SAFETY: plain syscall.
    check(
        unsafe { libc::unshare(libc::CLONE_NEWNS | libc::CLONE_NEWNET) },
        "unshare(CLONE_NEWNS | CLONE_NEWNET)",
    )?;
    // SAFETY: NUL-terminated literals; null data.
    check(
        unsafe {
            libc::mount(
                std::ptr::null(),
                c"/".as_ptr(),
                std::ptr::null(),
                libc::MS_SLAVE | libc::MS_REC,
                std::ptr::null(),
            )
        },
        "making / a slave mount",
    )?;
    // SAFETY: as above.
    check(
        unsafe {
            libc::mount(
                c"proc".as_ptr(),
                c"/proc".as_ptr(),
                c"proc".as_ptr(),
                libc::MS_NODEV | libc::MS_NOEXEC | libc::MS_NOSUID | libc::MS_RELATIME,
                std::ptr::null(),
            )
        },
        "mounting /proc",
    )?;
    bind_on_itself(shared_dir)
}

/// Bind-mounts `dir` on itself with every mount below it: the mount `pivot_into` makes the
/// root, on which the share's root fd must be opened (module invariants).
fn bind_on_itself(dir: &Path) -> io::Result<()> {
    let c = cstring(dir)?;
    // SAFETY: valid C strings; null fs type and data.
    check(
        unsafe {
            libc::mount(
                c.as_ptr(),
                c.as_ptr(),
                std::ptr::null(),
                libc::MS_BIND | libc::MS_REC,
                std::ptr::null(),
            )
        },
        "bind-mounting the shared dir",
    )
}

/// Pivots the root into `dir` (the bind mount [`bind_on_itself`] made) and detaches the old
/// root, with every mount below it that is not also below `dir`.
pub(super) fn pivot_into(dir: &Path) -> io::Result<()> {
    let c = cstring(dir)?;
    let old_root = open_dir(c"/")?;
    let new_root = open_dir(&c)?;
    // SAFETY: plain syscalls on fds we hold and NUL-terminated literals.
    unsafe {
        check(libc::fchdir(new_root.as_raw_fd()), "fchdir(shared dir)")?;
        check(
            libc::syscall(libc::SYS_pivot_root, c".".as_ptr(), c".".as_ptr()) as libc::c_int,
            "pivot_root",
        )?;
        // The old root is now stacked under the new one at "/"; reach it through its fd.
        check(libc::fchdir(old_root.as_raw_fd()), "fchdir(old root)")?;
        check(
            libc::mount(
                std::ptr::null(),
                c".".as_ptr(),
                std::ptr::null(),
                libc::MS_SLAVE | libc::MS_REC,
                std::ptr::null(),
            ),
            "making the old root a slave",
        )?;
        check(
            libc::umount2(c".".as_ptr(), libc::MNT_DETACH),
            "detaching the old root",
        )?;
        check(libc::chdir(c"/".as_ptr()), "chdir(/)")
    }
}

pub(super) fn chroot_into(dir: &Path) -> io::Result<()> {
    let c = cstring(dir)?;
    // SAFETY: valid C strings.
    unsafe {
        check(libc::chroot(c.as_ptr()), "chroot")?;
        check(libc::chdir(c"/".as_ptr()), "chdir(/)")
    }
}

fn open_dir(path: &std::ffi::CStr) -> io::Result<OwnedFd> {
    // SAFETY: valid C string.
    let fd = unsafe {
        libc::open(
            path.as_ptr(),
            libc::O_DIRECTORY | libc::O_RDONLY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(os_err("open"));
    }
    // SAFETY: a fresh fd we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}
