//! `--landlock=auto|on|off`: restrict filesystem access to the shared directory with Landlock.
//!
//! Landlock rules are attached to inodes, not paths: the one rule allows every filesystem
//! access right the kernel knows beneath the shared dir's inode, whichever mount it is reached
//! through (the original mount held by the passthrough's fds, or the bind mount that
//! `pivot_root` made the new root). Re-opening an inode through `/proc/self/fd/N` is checked on
//! the file reached, which is beneath the share; `O_PATH` opens are not restricted by Landlock.
//! So nothing the daemon does is refused, while any open, create, remove, rename, link,
//! truncate or device ioctl of a file outside the share is, even if a bug handed the daemon an
//! fd of one.
//!
//! Except opening files by handle: `open_by_handle_at` of a non-directory whose dentry the
//! kernel has dropped since (memory pressure, `drop_caches`) gets a *disconnected* dentry, which
//! no path leads to from the share. Kernel 6.18 counts it as at the root of its mount: under
//! `--sandbox=none` and `chroot` (the share below that root) Landlock refused to open it for
//! reading or writing (EACCES on every OPEN of a million-file walk after ~531,000 files, or of
//! all 200 held files with `drop_caches` in a loop: `tests/landlock_handles.rs`); under
//! `namespace` (the share is that root) it passes, and so would a handle of a file outside the
//! share on the same filesystem. So the file rights never confined opens by handle, and a
//! daemon that opens handles leaves them ([`AccessFs::from_file`]: read, write, truncate,
//! execute, device ioctl) out of its ruleset; Landlock keeps restricting what is done to
//! directories (list, create, remove, rename, link) to the share (directories opened by handle
//! are always reconnected by the kernel); see docs/security.md.
//!
//! Invariants:
//! - The shared dir is opened by [`Landlock::prepare`] before `pivot_root`/`chroot`, and the
//!   ruleset is enforced by [`Landlock::enforce`] after them, while the process is
//!   single-threaded (a Landlock domain applies to the calling thread and the threads it
//!   creates afterwards).
//! - `auto` uses Landlock when the kernel has it (best effort: the rights the kernel knows)
//!   and says so in the log either way; `on` fails with one line when the kernel has none;
//!   `off` does nothing.

use crate::option_values::option_values;
use std::path::Path;

use ::landlock::{
    Access, AccessFs, PathBeneath, PathFd, Ruleset, RulesetAttr, RulesetCreatedAttr, RulesetStatus,
    ABI,
};

option_values! {
    /// `--landlock`.
    pub enum LandlockMode {
        /// Use Landlock when the kernel supports it (default).
        Auto = "auto",
        /// Require Landlock.
        On = "on",
        /// Do not use Landlock.
        Off = "off",
    }
}

/// The newest Landlock ABI this build knows; older kernels get what they support.
const ABI_WANTED: ABI = ABI::V6;

/// A Landlock restriction to the shared dir, prepared but not yet enforced.
pub struct Landlock {
    mode: LandlockMode,
    share: Option<PathFd>,
    /// The daemon opens files by handle: file rights are not restricted (see the module doc).
    by_handle: bool,
}

impl Landlock {
    /// Opens `shared_dir` for the rule (`None` rule with `--landlock=off`); `by_handle`: the
    /// daemon opens files by handle.
    pub fn prepare(
        mode: LandlockMode,
        shared_dir: &Path,
        by_handle: bool,
    ) -> Result<Landlock, String> {
        let share = match mode {
            LandlockMode::Off => None,
            _ => Some(
                PathFd::new(shared_dir)
                    .map_err(|e| format!("landlock: {}: {e}", shared_dir.display()))?,
            ),
        };
        Ok(Landlock {
            mode,
            share,
            by_handle,
        })
    }

    /// Restricts this thread (and threads it creates) to the shared dir; logs the outcome.
    pub fn enforce(self) -> Result<(), String> {
        let Some(share) = self.share else {
            log::info!("landlock: off");
            return Ok(());
        };
        let mut handled = AccessFs::from_all(ABI_WANTED);
        if self.by_handle {
            handled &= !AccessFs::from_file(ABI_WANTED);
        }
        let status = Ruleset::default()
            .handle_access(handled)
            .and_then(|r| r.create())
            .and_then(|r| r.add_rule(PathBeneath::new(share, handled)))
            .and_then(|r| r.restrict_self())
            .map_err(|e| format!("landlock: {e}"))?;
        match (status.ruleset, self.mode) {
            (RulesetStatus::NotEnforced, LandlockMode::On) => Err(
                "--landlock=on: the kernel does not support Landlock; pass --landlock=auto or \
                 --landlock=off"
                    .into(),
            ),
            (RulesetStatus::NotEnforced, _) => {
                log::info!("landlock: not supported by the kernel, not used");
                Ok(())
            }
            (RulesetStatus::PartiallyEnforced, _) => {
                log::info!("landlock: on (partially: the kernel knows fewer access rights)");
                Ok(())
            }
            (RulesetStatus::FullyEnforced, _) if self.by_handle => {
                log::info!(
                    "landlock: on (directory access limited to the shared directory; file \
                     reads and writes not restricted: files are opened by handle)"
                );
                Ok(())
            }
            (RulesetStatus::FullyEnforced, _) => {
                log::info!("landlock: on (filesystem access limited to the shared directory)");
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::temp_dir::TempDir;
    use std::fs;
    use std::io;

    #[test]
    fn modes_parse() {
        assert_eq!("auto".parse(), Ok(LandlockMode::Auto));
        assert_eq!("on".parse(), Ok(LandlockMode::On));
        assert_eq!("off".parse(), Ok(LandlockMode::Off));
        assert!("yes".parse::<LandlockMode>().is_err());
    }

    /// In a thread of its own (the domain applies to it alone): files beneath the share stay
    /// usable, files outside cannot be opened or created, even through an fd held before.
    #[test]
    fn only_the_share_is_reachable() {
        let tmp = TempDir::new("vhostfs-landlock-base").unwrap();
        let base = tmp.path().to_path_buf();
        let share = base.join("share");
        fs::create_dir(&share).unwrap();
        fs::write(share.join("in"), b"in").unwrap();
        fs::write(base.join("out"), b"out").unwrap();
        let base_dir = fs::File::open(&base).unwrap();
        let (share2, base2) = (share.clone(), base.clone());
        std::thread::spawn(move || {
            Landlock::prepare(LandlockMode::On, &share2, false)
                .unwrap()
                .enforce()
                .unwrap();
            assert_eq!(fs::read(share2.join("in")).unwrap(), b"in");
            fs::write(share2.join("new"), b"x").unwrap();
            let denied = |r: io::Result<_>| {
                assert_eq!(r.err().and_then(|e| e.raw_os_error()), Some(libc::EACCES))
            };
            denied(fs::read(base2.join("out")).map(drop));
            denied(fs::write(base2.join("new"), b"x"));
            // Through the fd of the parent dir opened before: still refused.
            let fd = std::os::fd::AsRawFd::as_raw_fd(&base_dir);
            // SAFETY: valid fd and NUL-terminated name.
            let r = unsafe { libc::openat(fd, c"out".as_ptr(), libc::O_RDONLY) };
            assert_eq!(r, -1);
            assert_eq!(
                io::Error::last_os_error().raw_os_error(),
                Some(libc::EACCES)
            );
        })
        .join()
        .unwrap();
    }

    /// A daemon that opens files by handle: directories outside the share are still out of
    /// reach (no file created, no directory made there).
    #[test]
    fn by_handle_keeps_directories_confined() {
        let tmp = TempDir::new("vhostfs-landlock-handles").unwrap();
        let base = tmp.path().to_path_buf();
        let share = base.join("share");
        fs::create_dir(&share).unwrap();
        std::thread::spawn(move || {
            Landlock::prepare(LandlockMode::On, &share, true)
                .unwrap()
                .enforce()
                .unwrap();
            fs::write(share.join("new"), b"x").unwrap();
            fs::create_dir(share.join("dir")).unwrap();
            let denied = |r: io::Result<()>| {
                assert_eq!(r.err().and_then(|e| e.raw_os_error()), Some(libc::EACCES))
            };
            denied(fs::write(base.join("new"), b"x"));
            denied(fs::create_dir(base.join("dir")));
        })
        .join()
        .unwrap();
    }
}
