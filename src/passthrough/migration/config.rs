//! The migration settings (`--migration-mode`, `--migration-on-error`,
//! `--migration-verify-handles`, `--migration-confirm-paths`), as the command line gives them.

use crate::option_values::option_values;

option_values! {
    /// How the source describes each inode to the destination (`--migration-mode`).
    pub enum MigrationMode {
        /// By its path in the share (virtiofsd's default).
        FindPaths = "find-paths",
        /// By its file handle: same filesystem on both sides, CAP_DAC_READ_SEARCH on the
        /// destination.
        FileHandles = "file-handles",
    }
}

option_values! {
    /// What the destination does with an inode it cannot find (`--migration-on-error`).
    pub enum OnError {
        /// Fail the load, so that the migration fails and the source goes on.
        Abort = "abort",
        /// Mark only the inodes (and their fhs) concerned; the guest gets `EIO` on them.
        GuestError = "guest-error",
    }
}

/// The migration settings, from the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MigrationConfig {
    pub mode: MigrationMode,
    pub on_error: OnError,
    /// `--migration-verify-handles` (find-paths): the source sends each inode's file handle
    /// along with its path, and the destination refuses a path that opens another file.
    pub verify_handles: bool,
    /// `--migration-confirm-paths` (find-paths): the source opens every path it found again
    /// and looks for the inode in the share where that is not the same inode.
    pub confirm_paths: bool,
}

impl Default for MigrationConfig {
    fn default() -> Self {
        MigrationConfig {
            mode: MigrationMode::FindPaths,
            on_error: OnError::Abort,
            verify_handles: false,
            confirm_paths: false,
        }
    }
}
