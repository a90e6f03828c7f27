//! The filesystem's settings, from the command line (`daemon` builds them; nothing here knows
//! the command line itself).

use std::time::Duration;

use crate::option_values::option_values;
use crate::passthrough::migration::config::MigrationConfig;
use crate::passthrough::policy::id_map::IdMaps;
use crate::passthrough::policy::xattr_map::XattrMap;

option_values! {
    /// When to reference inodes by file handle rather than by an `O_PATH` file descriptor
    /// (`--inode-file-handles=never|prefer|mandatory`; `fallback` is a deprecated alias of
    /// `prefer`).
    pub enum InodeFileHandles {
        /// Always use `O_PATH` file descriptors.
        Never = "never",
        /// Use file handles where the filesystem supports them, else `O_PATH` descriptors.
        Prefer = "prefer" | "fallback",
        /// Always use file handles; fail where they are not supported.
        Mandatory = "mandatory",
    }
}

/// Settings of the filesystem, from the command line.
#[derive(Clone, Debug)]
pub struct FsConfig {
    pub shared_dir: std::path::PathBuf,
    pub inode_file_handles: InodeFileHandles,
    pub entry_timeout: Duration,
    pub attr_timeout: Duration,
    /// `--cache=never`: open files with `FOPEN_DIRECT_IO`.
    pub direct_io: bool,
    /// `--allow-direct-io`: keep the guest's O_DIRECT when opening files.
    pub allow_direct_io: bool,
    /// `--preserve-noatime`: keep the guest's O_NOATIME when opening files and directories.
    /// Else it is cleared, as virtiofsd clears it: the host allows O_NOATIME only to the file's
    /// owner or with CAP_FOWNER, which the daemon may lack (an unprivileged run, `--modcaps`, an
    /// owner outside its user namespace, CREATE under the caller's fsuid), and the open would
    /// fail with EPERM where the guest's own check passed.
    pub preserve_noatime: bool,
    /// `--cache=always`: let the guest keep its page cache across opens.
    pub keep_cache: bool,
    pub readonly: bool,
    pub xattr: bool,
    /// `--xattrmap`: how xattr names are translated between guest and host.
    pub xattrmap: Option<XattrMap>,
    /// `--translate-uid` / `--translate-gid`: how uids and gids are translated between guest
    /// and host (the identity by default).
    pub ids: IdMaps,
    pub announce_submounts: bool,
    /// `--windows-names`: host names Windows cannot hold shown as private-use characters, and
    /// mapped back (`policy/windows_names.rs`).
    pub windows_names: bool,
    /// `--case-insensitive`: names match ignoring case (`ops/case_names.rs`).
    pub case_insensitive: bool,
    /// How many fds the guest may make us hold (opened files, dirs, O_PATH inodes).
    pub fd_budget: usize,
    /// How many O_PATH fds of handle-backed inodes the fd cache may hold (0: no cache).
    pub fd_cache_size: usize,
    /// `--migration-*`: how the state is saved for, and loaded from, a live migration.
    pub migration: MigrationConfig,
}

#[cfg(test)]
impl FsConfig {
    /// The unit tests' share: `dir` with the given inode mode, 1 s timeouts, a budget of 1,000
    /// fds and every option at its default.
    pub(crate) fn for_tests(dir: &std::path::Path, inode_file_handles: InodeFileHandles) -> Self {
        FsConfig {
            shared_dir: dir.to_path_buf(),
            inode_file_handles,
            entry_timeout: Duration::from_secs(1),
            attr_timeout: Duration::from_secs(1),
            direct_io: false,
            allow_direct_io: false,
            preserve_noatime: false,
            keep_cache: false,
            readonly: false,
            xattr: false,
            xattrmap: None,
            ids: Default::default(),
            announce_submounts: false,
            windows_names: false,
            case_insensitive: false,
            fd_budget: 1000,
            fd_cache_size: crate::passthrough::state::fd_cache::DEFAULT_SIZE,
            migration: Default::default(),
        }
    }
}
