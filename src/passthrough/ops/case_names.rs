//! `--case-insensitive` in the operations that take a name: what name on the host a guest's
//! name stands for, and whether a new name is free.
//!
//! - LOOKUP, UNLINK, RMDIR and RENAME's source: the exact name first (the common case costs
//!   nothing more); on ENOENT, the names of the directory that fold alike
//!   (`policy/case_fold.rs`), from its listing (`state/dir_names.rs`). Several host names that
//!   fold alike (`foo` and `FOO`, made on the host): the first in byte order, and one warning
//!   per directory and listing. A thread whose LOOKUPs are mostly by another case
//!   (`streaks::OTHER_CASE_NAME`) reads the listing first instead, and skips the exact `statx`
//!   that would fail when the listing, current as of the directory's stamp, does not hold the
//!   name: the exact name still wins when it is there.
//! - CREATE, MKNOD, MKDIR, SYMLINK, LINK: EEXIST when another name of the directory folds
//!   alike (CREATE without O_EXCL opens that file instead), checked and made under the
//!   directory's listing lock, so creators of `foo` and `FOO` on several queues at once cannot
//!   both win (virtio-win issue 1620).
//! - RENAME's target: a case-alike name of another file is EEXIST with RENAME_NOREPLACE, and
//!   is replaced without it (the file then takes the case the guest asked for); a case-only
//!   rename of the file itself is a rename on the host.
//! - A directory the host folds itself (FS_CASEFOLD_FL) is left to the host.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsFd, BorrowedFd};

use crate::passthrough::filesystem::{err, PassthroughFs};
use crate::passthrough::policy::case_fold;
use crate::passthrough::state::dir_names::{stamp_of, Listing, Stamp};
use crate::passthrough::state::inode_table::Inode;
use crate::passthrough::sys;
use std::sync::atomic::Ordering;

use crate::sync::{read, write};

/// FS_CASEFOLD_FL (linux/fs.h): the directory's names are case-insensitive on the host.
const FS_CASEFOLD_FL: u32 = 0x4000_0000;

fn folded(n: &[u8]) -> Vec<u8> {
    case_fold::fold(n).into_owned()
}

/// What a name of the guest is on the host.
pub(in crate::passthrough) enum HostName {
    /// The name itself, or nothing folds alike.
    AsGiven,
    /// Another name that folds alike.
    Alike(CString),
}

impl PassthroughFs {
    fn dir_stamp(&self, dirfd: BorrowedFd) -> io::Result<Stamp> {
        let st = sys::statx(dirfd, c"", 0, libc::STATX_MTIME | libc::STATX_CTIME)?;
        Ok(stamp_of(&st))
    }

    /// Reads the directory's names into `l` unless it is current as of `stamp`.
    fn refill(&self, l: &mut Listing, dirfd: BorrowedFd, stamp: Stamp) -> io::Result<()> {
        if l.is_current(&stamp) {
            return Ok(());
        }
        let open = sys::reopen(
            self.proc_self_fd.as_fd(),
            dirfd,
            libc::O_RDONLY | libc::O_DIRECTORY,
        )?;
        let host_folds = sys::fd::inode_flags(open.as_fd()).is_ok_and(|f| f & FS_CASEFOLD_FL != 0);
        let names = if host_folds {
            Vec::new()
        } else {
            sys::fd::read_names(open.as_fd())?
        };
        l.fill(stamp, host_folds, names.iter().map(|n| &**n), folded);
        Ok(())
    }

    /// Runs `f` on the directory's listing, current as of the stamp it is given (read again
    /// when the directory changed), under the listing's write lock: the lock of creations.
    fn with_listing<T>(
        &self,
        dir: &Inode,
        dirfd: BorrowedFd,
        f: impl FnOnce(&mut Listing, Stamp) -> io::Result<T>,
    ) -> io::Result<T> {
        let listing = self.dir_names.listing(dir.key);
        let mut l = write(&listing);
        let stamp = self.dir_stamp(dirfd)?;
        self.refill(&mut l, dirfd, stamp)?;
        f(&mut l, stamp)
    }

    /// Of the host names of the directory other than `name` that fold as `name` does: the
    /// first in byte order and how many there are (none when the host folds the directory
    /// itself, or, unless `missing`, when `name` itself is one of them: the exact name wins).
    fn alike(l: &Listing, name: &[u8], missing: bool) -> (Option<CString>, usize) {
        if l.host_folds {
            return (None, 0);
        }
        let f = case_fold::fold(name);
        let mut exact = false;
        let (first, count) = l.alike(&f, |n| {
            exact |= n == name;
            n != name && case_fold::folds_to(n, &f)
        });
        if exact && !missing {
            return (None, 0);
        }
        let first = first.map(|n| CString::new(n).expect("a directory entry has no NUL"));
        (first, count)
    }

    /// The name on the host that `name` stands for when it is not itself a name of the
    /// directory: `missing` when the host just answered ENOENT for it, else as the kept names
    /// say (AsGiven when they hold `name` itself). The directory's stamp is taken first and a
    /// listing current as of it is only read, so lookups in one directory run side by side; a
    /// listing that is not current is read again under the write lock.
    pub(in crate::passthrough) fn case_alike(
        &self,
        dir: &Inode,
        dirfd: BorrowedFd,
        name: &CStr,
        missing: bool,
    ) -> io::Result<HostName> {
        let stamp = self.dir_stamp(dirfd)?;
        let listing = self.dir_names.listing(dir.key);
        let current = read(&listing);
        let (found, count) = if current.is_current(&stamp) {
            Self::alike(&current, name.to_bytes(), missing)
        } else {
            drop(current);
            let mut l = write(&listing);
            self.refill(&mut l, dirfd, stamp)?;
            Self::alike(&l, name.to_bytes(), missing)
        };
        if let Some(used) = found.as_ref().filter(|_| count > 1) {
            if !read(&listing).warned.swap(true, Ordering::Relaxed) {
                log::warn!(
                    "--case-insensitive: {count} names in one directory fold as {name:?}; \
                     {used:?} is used"
                );
            }
        }
        Ok(found.map_or(HostName::AsGiven, HostName::Alike))
    }

    /// The existing name on the host `name` stands for: itself if it exists, else a name
    /// that folds alike, else ENOENT.
    pub(in crate::passthrough) fn case_existing<'a>(
        &self,
        dir: &Inode,
        dirfd: BorrowedFd,
        name: &'a CStr,
    ) -> io::Result<std::borrow::Cow<'a, CStr>> {
        match sys::statx(dirfd, name, 0, libc::STATX_INO) {
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                match self.case_alike(dir, dirfd, name, true)? {
                    HostName::Alike(n) => Ok(std::borrow::Cow::Owned(n)),
                    HostName::AsGiven => Err(e),
                }
            }
            Err(e) => Err(e),
            Ok(_) => Ok(std::borrow::Cow::Borrowed(name)),
        }
    }

    /// Makes `name` in the directory with `make(host_name)` under the directory's listing
    /// lock, refusing (EEXIST) a name another name folds alike to, unless `open_alike` (CREATE
    /// without O_EXCL), which hands `make` that name instead and returns it with the result.
    /// Without `--case-insensitive`, just `make(name)`.
    pub(in crate::passthrough) fn case_create<T>(
        &self,
        dir: &Inode,
        dirfd: BorrowedFd,
        name: &CStr,
        open_alike: bool,
        make: impl FnOnce(&CStr) -> io::Result<T>,
    ) -> io::Result<(T, Option<CString>)> {
        if !self.cfg.case_insensitive {
            return Ok((make(name)?, None));
        }
        self.with_listing(dir, dirfd, |l, before| {
            let (alike, _) = Self::alike(l, name.to_bytes(), true);
            let exact = sys::statx(dirfd, name, 0, libc::STATX_INO).is_ok();
            let target: &CStr = match &alike {
                Some(other) if !exact && open_alike => other,
                Some(_) => return Err(err(libc::EEXIST)),
                None => name,
            };
            let r = make(target)?;
            let after = self.dir_stamp(dirfd)?;
            l.changed(&before, after, Some(target.to_bytes()), None, folded);
            Ok((r, (target != name).then(|| target.to_owned())))
        })
    }

    /// Removes `name` (any case) from the directory with `remove(host_name)`, under its listing
    /// lock. Without `--case-insensitive`, just `remove(name)`.
    pub(in crate::passthrough) fn case_remove(
        &self,
        dir: &Inode,
        dirfd: BorrowedFd,
        name: &CStr,
        remove: impl FnOnce(&CStr) -> io::Result<()>,
    ) -> io::Result<()> {
        if !self.cfg.case_insensitive {
            return remove(name);
        }
        let host = self.case_existing(dir, dirfd, name)?;
        self.with_listing(dir, dirfd, |l, before| {
            remove(&host)?;
            let after = self.dir_stamp(dirfd)?;
            l.changed(&before, after, None, Some(host.to_bytes()), folded);
            Ok(())
        })
    }

    /// RENAME under `--case-insensitive`: `old` (any case) in `olddir` to `new` in `newdir`,
    /// with `rename(old_host, new_host, flags)`.
    #[allow(clippy::too_many_arguments)]
    pub(in crate::passthrough) fn case_rename(
        &self,
        olddir: &Inode,
        oldfd: BorrowedFd,
        oldname: &CStr,
        newdir: &Inode,
        newfd: BorrowedFd,
        newname: &CStr,
        flags: u32,
        rename: impl Fn(&CStr, &CStr, u32) -> io::Result<()>,
    ) -> io::Result<()> {
        let old = self.case_existing(olddir, oldfd, oldname)?;
        let same_dir = olddir.nodeid == newdir.nodeid;
        let r = self.with_listing(newdir, newfd, |l, _| {
            let exact = sys::statx(newfd, newname, 0, libc::STATX_INO).is_ok();
            let (alike, _) = Self::alike(l, newname.to_bytes(), true);
            let r = match &alike {
                // The target's own name exists, or nothing folds alike: as without the option.
                _ if exact || flags & libc::RENAME_EXCHANGE != 0 => rename(&old, newname, flags),
                None => rename(&old, newname, flags),
                // A case-only rename of the file itself.
                Some(other) if same_dir && other.as_c_str() == &*old => {
                    rename(&old, newname, flags)
                }
                Some(_) if flags & libc::RENAME_NOREPLACE != 0 => Err(err(libc::EEXIST)),
                // Replace the case-alike file, then take the case asked for.
                Some(other) => rename(&old, other, flags).and_then(|()| rename(other, newname, 0)),
            };
            l.drop_names();
            r
        });
        if !same_dir {
            write(&self.dir_names.listing(olddir.key)).drop_names();
        }
        r
    }
}
