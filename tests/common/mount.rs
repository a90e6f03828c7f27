//! Mounts made by the tests (as root), detached lazily when dropped: tmpfs shares, filesystems
//! below a share, a share made a shared mount.

use std::ffi::{CStr, CString};
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::temp_dir::TempDir;

/// A mount; `MNT_DETACH`ed (with everything below it) on drop, before its own directory (if it
/// made one) is removed.
pub struct Mount {
    at: PathBuf,
    _dir: Option<TempDir>,
}

impl Mount {
    /// A tmpfs with `options` (e.g. `size=1m,mode=0755`) on a fresh directory of its own.
    pub fn tmpfs(options: &str) -> Mount {
        let dir = TempDir::new("test-tmpfs").unwrap();
        let mut m = Mount::tmpfs_at(dir.path(), options);
        m._dir = Some(dir);
        m
    }

    /// A tmpfs with `options` at `at` (created if missing).
    pub fn tmpfs_at(at: &Path, options: &str) -> Mount {
        fs::create_dir_all(at).unwrap();
        mount(c"vhostfs-test", at, Some(c"tmpfs"), 0, options);
        Mount::at(at)
    }

    /// An overlayfs at `at` without `nfs_export` (so it has no file handles), its lower, upper
    /// and work directories in `layers`; the lower layer holds `from-lower`.
    pub fn overlay(at: &Path, layers: &Path) -> Mount {
        for d in ["lower", "upper", "work"] {
            fs::create_dir_all(layers.join(d)).unwrap();
        }
        fs::write(layers.join("lower/from-lower"), b"lower layer").unwrap();
        fs::create_dir_all(at).unwrap();
        let options = format!(
            "lowerdir={},upperdir={},workdir={}",
            layers.join("lower").display(),
            layers.join("upper").display(),
            layers.join("work").display()
        );
        mount(c"overlay", at, Some(c"overlay"), 0, &options);
        Mount::at(at)
    }

    /// `dir` bound on itself and made a recursively shared mount, as a systemd host's are.
    pub fn shared_bind(dir: &Path) -> Mount {
        let src = CString::new(dir.as_os_str().as_bytes()).unwrap();
        mount(&src, dir, None, libc::MS_BIND, "");
        mount(c"none", dir, None, libc::MS_SHARED | libc::MS_REC, "");
        Mount::at(dir)
    }

    fn at(at: &Path) -> Mount {
        Mount {
            at: at.to_path_buf(),
            _dir: None,
        }
    }

    pub fn path(&self) -> &Path {
        &self.at
    }

    /// `mount -o remount,ro`: the superblock becomes read-only, in every mount namespace.
    pub fn remount_ro(&self) {
        mount(
            c"none",
            &self.at,
            None,
            libc::MS_REMOUNT | libc::MS_RDONLY,
            "",
        );
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let target = CString::new(self.at.as_os_str().as_bytes()).unwrap();
        // SAFETY: a valid C string.
        unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
    }
}

/// mount(2), asserting it worked.
fn mount(source: &CStr, target: &Path, fstype: Option<&CStr>, flags: u64, options: &str) {
    let target_c = CString::new(target.as_os_str().as_bytes()).unwrap();
    let options_c = CString::new(options).unwrap();
    // SAFETY: valid C strings (or null for the file system type of a remount or bind).
    let rc = unsafe {
        libc::mount(
            source.as_ptr(),
            target_c.as_ptr(),
            fstype.map_or(std::ptr::null(), |t| t.as_ptr()),
            flags,
            options_c.as_ptr().cast(),
        )
    };
    assert_eq!(
        rc,
        0,
        "mount {source:?} on {} ({options}): {}",
        target.display(),
        std::io::Error::last_os_error()
    );
}
