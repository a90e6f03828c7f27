//! The passthrough filesystem: serves FUSE operations from a host directory.
//!
//! Every method takes the caller's [`Context`] and node IDs as the guest sent them; it validates
//! them (unknown node ID or fh → `EBADF`, bad name → `EINVAL`) and returns `io::Result`. The
//! FUSE dispatcher (`fuse_server`) turns results into replies.
//!
//! Confinement: everything is resolved relative to fds the daemon holds (the shared dir, inode
//! fds or handles, the pre-opened `/proc/self/fd`), one name component at a time, with
//! `O_NOFOLLOW`: a name the guest sends is never a path, and no symlink is ever followed on the
//! host. So nothing here depends on host absolute paths, and a later pivot_root into the shared
//! dir changes nothing.
//!
//! Rooms (an import runs only downwards in this list; `tests/passthrough_layers.rs` checks it):
//! - `ops/`: the FUSE operations, each an `impl PassthroughFs` block (lookups, entries, setattr,
//!   files, dirs, xattrs, labelled creation, the writeback guest's view); `migration/` is of
//!   their level (save and load of the whole state).
//! - `filesystem.rs`: [`PassthroughFs`] itself, its construction and the helpers every
//!   operation shares.
//! - `policy/`: what a request passes through on its way to the host: the uid/gid map, the
//!   xattr name map, the umask under ACLs, setuid/setgid clearing, per-thread credentials, the
//!   writeback rules.
//! - `state/`: what the filesystem holds: the inode table and its index, host inode
//!   identities, the writeback guest state, file handles, the fd cache, open files, the fd
//!   budget, the daemon's own-id hash.
//! - `config.rs`, `request_types.rs`: the settings and the values requests pass in and out.
//! - `sys/`: one checked wrapper per syscall.

pub mod config;
mod filesystem;
pub mod migration;
mod ops;
mod policy;
pub mod request_types;
mod state;
pub(crate) mod sys;

pub use config::{FsConfig, InodeFileHandles};
pub use filesystem::{is_nospace, PassthroughFs};
pub use ops::labels::SecurityLabel;
pub use policy::{id_map, xattr_map};
pub use request_types::{Attr, Context, DirEntry, Entry, FsGauges, Opened, XattrReply};
pub use state::{fd_budget, fd_cache};
