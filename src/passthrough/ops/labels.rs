//! `--security-label`: nodes created with the security context the guest's LSM chose for them
//! (FUSE_SECURITY_CTX), stored as that context's `security.*` xattr (its name through
//! `--xattrmap`, as in virtiofsd).
//!
//! Invariant — no unlabelled window: a node created with a label gets its name in the parent
//! only once it carries the label, so no request (a LOOKUP or READDIRPLUS racing with the
//! creation, from this guest, another daemon on the same directory, or a host process) can
//! see it unlabelled:
//! - a regular file (CREATE) is made unnamed with O_TMPFILE, labelled through its fd, then
//!   linked under its name (`linkat` fails with EEXIST if the name appeared meanwhile);
//! - TMPFILE is labelled through its fd before the reply: it has no name at all;
//! - a directory, device node, FIFO, socket or symlink (and a regular file where the host
//!   filesystem has no O_TMPFILE) is made in a fresh private staging directory created in the
//!   parent itself, labelled there, and renamed into place with RENAME_NOREPLACE. The staging
//!   directory is made with the caller's credentials (so the host checks the caller's write
//!   access to the parent) and inherits what the parent hands down (setgid group, default
//!   ACL), so the node ends up with what a creation in the parent gives it. Only the staging
//!   directory's name (`.vhostfs-label-PID-N`) is visible meanwhile, and it is removed at once.
//!
//! A label that cannot be set fails the creation with the host's errno, in `auto` and `always`
//! modes alike (as virtiofsd); the node is then removed again (it never had its name).

use std::borrow::Cow;
use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::passthrough::filesystem::PassthroughFs;
use crate::passthrough::request_types::Context;
use crate::passthrough::sys;
use crate::passthrough::sys::xattr;

/// The security context of a creating request: an xattr name (`security.*`) and its value, as
/// the guest's LSM gave them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SecurityLabel {
    pub name: CString,
    pub value: Vec<u8>,
}

/// What a labelled creation makes (modes already masked).
pub(in crate::passthrough) enum NewNode<'a> {
    Dir {
        mode: u32,
    },
    /// MKNOD: `mode` has the file type bits.
    Special {
        mode: u32,
        rdev: u32,
    },
    Symlink {
        target: &'a CStr,
    },
    /// CREATE: open(2) `flags` (O_CREAT and O_EXCL are added here) and permission bits.
    File {
        flags: i32,
        mode: u32,
    },
}

/// Numbers the staging directories of this process.
static STAGING_SEQ: AtomicU64 = AtomicU64::new(0);

fn is_no_tmpfile(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EOPNOTSUPP | libc::EISDIR | libc::EINVAL)
    )
}

impl PassthroughFs {
    /// The host name of a label's xattr (refused as a SETXATTR of that name is).
    fn label_name<'a>(&self, label: &'a SecurityLabel) -> io::Result<Cow<'a, CStr>> {
        self.host_name(&label.name, libc::EPERM)
    }

    /// Labels the open (or O_TMPFILE) file `fd`.
    pub(in crate::passthrough) fn label_fd(
        &self,
        fd: BorrowedFd,
        label: &SecurityLabel,
    ) -> io::Result<()> {
        xattr::fsetxattr(fd, &self.label_name(label)?, &label.value, 0)
    }

    /// Creates `name` in `dir` as `node`, with `label` set before the name exists (see the
    /// module invariant). For [`NewNode::File`], returns the open file; when the name exists
    /// already and the guest did not ask for O_EXCL, that existing file is opened instead, as a
    /// CREATE does (it is not new: it keeps its label).
    pub(in crate::passthrough) fn create_labelled(
        &self,
        ctx: &Context,
        dir: BorrowedFd,
        name: &CStr,
        node: NewNode,
        label: &SecurityLabel,
    ) -> io::Result<Option<OwnedFd>> {
        let xname = self.label_name(label)?;
        if let NewNode::File { flags, mode } = node {
            match self.labelled_tmpfile(ctx, dir, name, flags, mode, &xname, label) {
                Err(e) if is_no_tmpfile(&e) => {}
                other => return other.map(Some),
            }
        }
        let created = self.staged(ctx, dir, name, &node, &xname, &label.value);
        match (created, node) {
            (Err(e), NewNode::File { flags, .. })
                if e.raw_os_error() == Some(libc::EEXIST) && flags & libc::O_EXCL == 0 =>
            {
                self.open_existing(ctx, dir, name, flags).map(Some)
            }
            (created, _) => created,
        }
    }

    /// CREATE through O_TMPFILE: make, label, link. A read-only create gets a read-write fd
    /// (O_TMPFILE needs write access; the guest only reads through it).
    #[allow(clippy::too_many_arguments)]
    fn labelled_tmpfile(
        &self,
        ctx: &Context,
        dir: BorrowedFd,
        name: &CStr,
        flags: i32,
        mode: u32,
        xname: &CStr,
        label: &SecurityLabel,
    ) -> io::Result<OwnedFd> {
        let mut tmp_flags = flags & !(libc::O_CREAT | libc::O_EXCL | libc::O_TRUNC);
        if tmp_flags & libc::O_ACCMODE == libc::O_RDONLY {
            tmp_flags = (tmp_flags & !libc::O_ACCMODE) | libc::O_RDWR;
        }
        let fd = {
            let _creds = self.as_caller(ctx)?;
            self.retry_nospace(|| sys::openat(dir, c".", tmp_flags | libc::O_TMPFILE, mode))?
        };
        xattr::fsetxattr(fd.as_fd(), xname, &label.value, 0)?;
        let linked = {
            let _creds = self.as_caller(ctx)?;
            sys::link_proc(self.proc_self_fd.as_fd(), fd.as_fd(), dir, name)
        };
        match linked {
            Ok(()) => Ok(fd),
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) && flags & libc::O_EXCL == 0 => {
                self.open_existing(ctx, dir, name, flags)
            }
            Err(e) => Err(e),
        }
    }

    /// Opens the file a non-exclusive CREATE found under its name.
    fn open_existing(
        &self,
        ctx: &Context,
        dir: BorrowedFd,
        name: &CStr,
        flags: i32,
    ) -> io::Result<OwnedFd> {
        let _creds = self.as_caller(ctx)?;
        // Without O_CREAT: if it vanished meanwhile, no unlabelled file is made in its place.
        sys::openat(dir, name, flags & !(libc::O_CREAT | libc::O_EXCL), 0)
    }

    /// Makes `node` in a staging directory in `dir`, labels it and renames it to `name`.
    fn staged(
        &self,
        ctx: &Context,
        dir: BorrowedFd,
        name: &CStr,
        node: &NewNode,
        xname: &CStr,
        value: &[u8],
    ) -> io::Result<Option<OwnedFd>> {
        let seq = STAGING_SEQ.fetch_add(1, Ordering::Relaxed);
        let staging = CString::new(format!(".vhostfs-label-{}-{seq}", std::process::id()))
            .expect("digits have no NUL");
        {
            let _creds = self.as_caller(ctx)?;
            self.retry_nospace(|| sys::mkdirat(dir, &staging, 0o700))?;
        }
        let result = sys::openat(
            dir,
            &staging,
            libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW,
            0,
        )
        .and_then(|sdir| {
            let made = self.make_labelled(ctx, sdir.as_fd(), name, node, xname, value);
            let made = made.and_then(|fd| {
                sys::renameat2(sdir.as_fd(), name, dir, name, libc::RENAME_NOREPLACE)?;
                Ok(fd)
            });
            if made.is_err() {
                let flags = match node {
                    NewNode::Dir { .. } => libc::AT_REMOVEDIR,
                    _ => 0,
                };
                // Nothing may be there (the failure came before the node was made).
                let _ = sys::unlinkat(sdir.as_fd(), name, flags);
            }
            made
        });
        if let Err(e) = sys::unlinkat(dir, &staging, libc::AT_REMOVEDIR) {
            log::warn!("cannot remove the staging directory {staging:?}: {e}");
        }
        result
    }

    /// Makes `node` as `name` in the staging directory `sdir` with the caller's credentials,
    /// then sets the label with the daemon's.
    fn make_labelled(
        &self,
        ctx: &Context,
        sdir: BorrowedFd,
        name: &CStr,
        node: &NewNode,
        xname: &CStr,
        value: &[u8],
    ) -> io::Result<Option<OwnedFd>> {
        let file = {
            let _creds = self.as_caller(ctx)?;
            self.retry_nospace(|| make_node(sdir, name, node))?
        };
        match (node, &file) {
            (_, Some(fd)) => xattr::fsetxattr(fd.as_fd(), xname, value, 0)?,
            (NewNode::Dir { .. }, None) => {
                let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW;
                let d = sys::openat(sdir, name, flags, 0)?;
                xattr::fsetxattr(d.as_fd(), xname, value, 0)?
            }
            (_, None) => {
                let o_path = sys::openat(sdir, name, libc::O_PATH | libc::O_NOFOLLOW, 0)?;
                xattr::setxattr_o_path(self.proc_self_fd.as_fd(), o_path.as_fd(), xname, value)?
            }
        }
        Ok(file)
    }
}

/// Makes `node` as `name` in `dir` (with the current credentials); returns the open file of a
/// [`NewNode::File`] (created exclusively).
pub(in crate::passthrough) fn make_node(
    dir: BorrowedFd,
    name: &CStr,
    node: &NewNode,
) -> io::Result<Option<OwnedFd>> {
    match *node {
        NewNode::Dir { mode } => sys::mkdirat(dir, name, mode).map(|_| None),
        NewNode::Special { mode, rdev } => sys::mknodat(dir, name, mode, rdev).map(|_| None),
        NewNode::Symlink { target } => sys::symlinkat(target, dir, name).map(|_| None),
        NewNode::File { flags, mode } => {
            sys::openat(dir, name, flags | libc::O_CREAT | libc::O_EXCL, mode).map(Some)
        }
    }
}
