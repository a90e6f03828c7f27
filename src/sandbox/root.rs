//! The sandbox's root: the mount namespace of the `namespace` mode (slave mounts, a fresh
//! `/proc`, the share bound on itself), `pivot_root` into the share, or `chroot`; for the
//! process an in-place upgrade started, the mount namespace of the process it takes over from,
//! joined.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

use super::{check, cstring, os_err};

/// In the child: new mount and network namespaces, every mount a slave of the host's, a fresh
/// `/proc`, and the shared dir bind-mounted on itself (the root [`pivot_into`] enters).
/// Returns an fd of the new mount namespace (`/proc/self/ns/mnt`), which an in-place upgrade
/// hands to the next process.
pub(super) fn enter_mount_namespace(shared_dir: &Path) -> io::Result<OwnedFd> {
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
    let ns = openat(None, c"/proc/self/ns/mnt", libc::O_RDONLY)?;
    bind_on_itself(shared_dir)?;
    Ok(ns)
}

/// In the child of a process started by an in-place upgrade: joins the mount namespace `ns` of
/// the process it takes over from (its root, already pivoted into the share, becomes ours, and
/// every mount, so every mount ID, is the one its inodes were found on) and a new network
/// namespace. Returns `/proc/self/fd` of a fresh `/proc` of our own pid namespace, mounted
/// nowhere (`fsmount`): that namespace has no `/proc`, and attaching one would show in the
/// share. The procfs is made first, in a private copy of our current mount namespace, left
/// at once: one of our own user namespace (in which an unprivileged sandbox has
/// CAP_SYS_ADMIN), with the host's fully visible `/proc`, without which a user namespace may
/// not make one.
pub(super) fn join_mount_namespace(ns: &OwnedFd) -> io::Result<OwnedFd> {
    // SAFETY: plain syscall.
    check(
        unsafe { libc::unshare(libc::CLONE_NEWNS) },
        "unshare(CLONE_NEWNS)",
    )?;
    let proc = detached_proc()?;
    let proc_self_fd = openat(Some(&proc), c"self/fd", libc::O_PATH | libc::O_DIRECTORY)?;
    // SAFETY: plain syscalls; `ns` is an fd we hold. The process is single-threaded (setns of
    // a mount namespace refuses a shared fs_struct).
    unsafe {
        check(
            libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNS),
            "setns(the old daemon's mount namespace)",
        )?;
        check(libc::unshare(libc::CLONE_NEWNET), "unshare(CLONE_NEWNET)")?;
    }
    Ok(proc_self_fd)
}

/// A new procfs instance (of the caller's pid namespace), as a mount attached nowhere.
fn detached_proc() -> io::Result<OwnedFd> {
    // SAFETY: fsopen with a NUL-terminated literal; the fd returned is ours.
    let fs = unsafe { libc::syscall(libc::SYS_fsopen, c"proc".as_ptr(), libc::FSOPEN_CLOEXEC) };
    if fs < 0 {
        return Err(os_err("fsopen(proc)"));
    }
    // SAFETY: a fresh fd we own.
    let fs = unsafe { OwnedFd::from_raw_fd(fs as libc::c_int) };
    // SAFETY: fsconfig CMD_CREATE takes no key or value.
    let created = unsafe {
        libc::syscall(
            libc::SYS_fsconfig,
            fs.as_raw_fd(),
            libc::FSCONFIG_CMD_CREATE,
            std::ptr::null::<libc::c_char>(),
            std::ptr::null::<libc::c_void>(),
            0,
        )
    };
    if created < 0 {
        return Err(os_err("fsconfig(proc)"));
    }
    let attrs = libc::MOUNT_ATTR_NODEV | libc::MOUNT_ATTR_NOEXEC | libc::MOUNT_ATTR_NOSUID;
    // SAFETY: fsmount on the fs context we hold, with integer flags.
    let mnt = unsafe {
        libc::syscall(
            libc::SYS_fsmount,
            fs.as_raw_fd(),
            libc::FSMOUNT_CLOEXEC,
            attrs as libc::c_uint,
        )
    };
    if mnt < 0 {
        return Err(os_err("fsmount(proc)"));
    }
    // SAFETY: a fresh fd we own.
    Ok(unsafe { OwnedFd::from_raw_fd(mnt as libc::c_int) })
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
    openat(None, path, libc::O_DIRECTORY | libc::O_RDONLY)
}

/// openat of `path` relative to `dir` (`None`: the cwd), close-on-exec.
fn openat(dir: Option<&OwnedFd>, path: &std::ffi::CStr, flags: libc::c_int) -> io::Result<OwnedFd> {
    let dir = dir.map_or(libc::AT_FDCWD, |d| d.as_raw_fd());
    // SAFETY: valid C string; `dir` is an fd we hold or AT_FDCWD.
    let fd = unsafe { libc::openat(dir, path.as_ptr(), flags | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(os_err(&format!("open {}", path.to_string_lossy())));
    }
    // SAFETY: a fresh fd we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}
