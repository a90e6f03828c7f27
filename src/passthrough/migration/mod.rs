//! Live migration of the filesystem's state: what the guest holds (node IDs with their lookup
//! counts, open files and directories with their fhs) saved on the source and re-opened on the
//! destination, so that the guest goes on with the same IDs and fhs. The data itself is never
//! moved: source and destination share (or copy) the directory. docs/migration.md is the user's
//! account; virtiofsd 1.14's doc/migration.md the specification followed.
//!
//! How an inode is found again ([`MigrationMode`], chosen by the source):
//! - `find-paths`: its path relative to the share, read from `/proc/self/fd` on an fd of the
//!   inode (checked by opening it again under `--migration-confirm-paths`), else found by a
//!   bounded search of the share ([`paths`]). The destination opens the path one component at a
//!   time from its own share root, never following a symlink, and under
//!   `--migration-verify-handles` compares the file handle the source sent with the one of what
//!   it opened.
//! - `file-handles`: its file handle, and for each mount the path of one inode on it, to open
//!   the handles against (mount IDs mean nothing on another host or namespace).
//!
//! Errors: what the source cannot describe (an unlinked file in `find-paths`, an inode without
//! a handle in `file-handles`) is sent as invalid with the reason; the destination decides by
//! its [`OnError`]: `abort` fails the whole load (nothing is installed, QEMU fails the
//! migration, the source goes on with everything open: saving changes nothing there);
//! `guest-error` installs such an inode as [`InodeSource::Invalid`] and its fhs as lost (`EIO`
//! to the guest), and everything else as usual.
//!
//! Invariant: a load either installs a complete state or nothing: the stream is read whole and
//! checked ([`codec`]), every inode and handle is re-opened into new objects, and only then are
//! the tables emptied and filled ([`PassthroughFs::install`]), with no request running (the
//! frontend has not started the queues yet).
//!
//! Layering: this module reads and writes only the filesystem's section of the stream; the
//! FUSE server writes the envelope and its INIT section around it (`fuse_server::migration`),
//! the vhost-user device moves the bytes. The API works on any `Write`/`Read`, so an in-place
//! upgrade can use it as well: there the fds themselves go beside the stream and the stream
//! names them by number: every open file goes by its own fd, an inode reached by a file handle
//! by its key and handle (with one fd per mount, [`Location::Keyed`]), any other inode by its
//! O_PATH fd. Nothing is looked up or re-opened, and no syscall is made per inode held by a
//! handle, on either side (the guest's queues stand still meanwhile).

pub mod codec;
pub mod config;
mod load;
mod paths;
mod records;
mod save;
#[cfg(test)]
mod tests;

pub use codec::{read_envelope, Decoder, Encoder};
pub use config::{MigrationConfig, MigrationMode, OnError};
pub use load::Loaded;
pub use records::HandedFd;
