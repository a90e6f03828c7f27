//! The raw command line: virtiofsd 1.14's options as clap parses them, before [`super::resolve`]
//! turns them into a [`super::Config`].

use std::os::fd::RawFd;
use std::path::PathBuf;

use clap::Parser;

use super::{CacheMode, MetricsAddr, MAX_TAG_LEN};
use crate::sandbox::{IdMap, LandlockMode, ModCaps};

use crate::fuse_server::Negotiation;
use crate::sandbox::{SandboxMode, SeccompMode};
pub(super) const INODE_FILE_HANDLES: &[&str] = &["never", "fallback", "prefer", "mandatory"];
pub(super) const MIGRATION_MODE: &[&str] = &["find-paths", "file-handles"];
pub(super) const MIGRATION_ON_ERROR: &[&str] = &["abort", "guest-error"];

/// A clap value parser accepting one of `allowed` (case-insensitively when `fold`).
pub(super) fn one_of(
    allowed: &'static [&'static str],
    fold: bool,
) -> impl Fn(&str) -> Result<String, String> + Clone + Send + Sync + 'static {
    move |s: &str| {
        let s = if fold {
            s.to_ascii_lowercase()
        } else {
            s.to_string()
        };
        if allowed.contains(&s.as_str()) {
            Ok(s)
        } else {
            Err(format!("expected one of: {}", allowed.join(", ")))
        }
    }
}

fn parse_modcaps(s: &str) -> Result<ModCaps, String> {
    s.parse()
}

fn parse_landlock(s: &str) -> Result<LandlockMode, String> {
    s.parse()
}

fn parse_metrics(s: &str) -> Result<MetricsAddr, String> {
    s.parse()
}

fn parse_cache(s: &str) -> Result<CacheMode, String> {
    s.parse()
}

fn parse_log_level(s: &str) -> Result<log::LevelFilter, String> {
    s.parse()
        .map_err(|_| "expected one of: error, warn, info, debug, trace, off".to_string())
}

fn parse_tag(s: &str) -> Result<String, String> {
    if !s.is_empty() && s.len() <= MAX_TAG_LEN {
        Ok(s.to_string())
    } else {
        Err(format!(
            "the tag may not be empty or longer than {MAX_TAG_LEN} bytes (encoded as UTF-8)"
        ))
    }
}

/// The raw command line, spelled as virtiofsd 1.14 spells it (same order as its `--help`).
#[derive(Clone, Debug, Parser)]
#[command(
    name = "vhostfs",
    about = "Launch a vhostfs backend (a drop-in for virtiofsd).",
    version,
    args_override_self = true,
    arg_required_else_help = true,
    override_usage = "vhostfs --shared-dir <SHARED_DIR> --socket-path <SOCKET_PATH> [OPTIONS]"
)]
pub(super) struct Opt {
    /// Shared directory path
    #[arg(long)]
    pub(super) shared_dir: Option<PathBuf>,

    /// The tag that the virtio device advertises
    #[arg(long, value_parser = parse_tag)]
    pub(super) tag: Option<String>,

    /// vhost-user socket path [deprecated]
    #[arg(long)]
    pub(super) socket: Option<PathBuf>,

    /// vhost-user socket path
    #[arg(long = "socket-path")]
    pub(super) socket_path: Option<PathBuf>,

    /// Name of group for the vhost-user socket (created with mode 0770 instead of 0700)
    #[arg(long = "socket-group", conflicts_with_all = ["fd", "print_capabilities"])]
    pub(super) socket_group: Option<String>,

    /// File descriptor for the listening (not yet connected) socket
    #[arg(long, conflicts_with_all = ["socket_path", "socket"])]
    pub(super) fd: Option<RawFd>,

    /// Maximum thread pool size. A value of "0" disables the pool [default: 64; pool threads
    /// only join a request queue that has a backlog, at most one per CPU unless its requests
    /// wait for the host filesystem]
    #[arg(long)]
    pub(super) thread_pool_size: Option<usize>,

    /// Enable support for extended attributes
    #[arg(long)]
    pub(super) xattr: bool,

    /// Enable support for posix ACLs (implies --xattr)
    #[arg(long, require_equals = true, default_value = "never", default_missing_value = "always",
          num_args = 0..=1, value_name = "never|auto|always", value_parser = one_of(Negotiation::VALUES, false))]
    pub(super) posix_acl: String,

    /// Add custom rules for translating extended attributes between host and guest (e.g.
    /// ':map::user.virtiofs.:'; implies --xattr)
    #[arg(long)]
    pub(super) xattrmap: Option<String>,

    /// Sandbox mechanism to isolate the daemon process (namespace, chroot, none)
    #[arg(long, default_value = "namespace", value_parser = one_of(SandboxMode::VALUES, true))]
    pub(super) sandbox: String,

    /// Prevent the guest from making modifications to the filesystem
    #[arg(long)]
    pub(super) readonly: bool,

    /// Action to take when seccomp finds a not allowed syscall (none, kill, log, trap)
    #[arg(long, default_value = "kill", value_parser = one_of(SeccompMode::VALUES, false))]
    pub(super) seccomp: String,

    /// Tell the guest which directories are mount points [default]
    #[arg(long)]
    pub(super) announce_submounts: bool,

    /// Do not tell the guest which directories are mount points
    #[arg(long, overrides_with = "announce_submounts")]
    pub(super) no_announce_submounts: bool,

    /// When to use file handles to reference inodes instead of O_PATH file descriptors
    /// (never, prefer, mandatory; "fallback" is a deprecated alias for "prefer")
    #[arg(long, require_equals = true, default_value = "prefer",
          value_parser = one_of(INODE_FILE_HANDLES, false))]
    pub(super) inode_file_handles: String,

    /// The caching policy the file system should use (auto, always, never, metadata)
    #[arg(long, default_value = "auto", value_parser = parse_cache)]
    pub(super) cache: CacheMode,

    /// Let the guest mmap files it opened for direct I/O (--cache=never) shared too; only safe
    /// when nothing else changes the shared directory
    #[arg(long)]
    pub(super) allow_mmap: bool,

    /// Disable support for READDIRPLUS operations
    #[arg(long)]
    pub(super) no_readdirplus: bool,

    /// Enable writeback cache
    #[arg(long)]
    pub(super) writeback: bool,

    /// Honor the O_DIRECT flag passed down by guest applications
    #[arg(long)]
    pub(super) allow_direct_io: bool,

    /// Print vhost-user.json backend program capabilities and exit
    #[arg(long = "print-capabilities")]
    pub(super) print_capabilities: bool,

    /// Modify the list of capabilities, e.g., --modcaps=+sys_admin:-chown
    #[arg(long, value_parser = parse_modcaps)]
    pub(super) modcaps: Option<ModCaps>,

    /// Restrict filesystem access to the shared directory with Landlock (auto, on, off)
    #[arg(long, default_value = "auto", value_parser = parse_landlock)]
    pub(super) landlock: LandlockMode,

    /// Log level (error, warn, info, debug, trace, off)
    #[arg(long = "log-level", default_value = "info", value_parser = parse_log_level)]
    pub(super) log_level: log::LevelFilter,

    /// Log to syslog [default: stderr]
    #[arg(long)]
    pub(super) syslog: bool,

    /// Set maximum number of file descriptors (0 leaves rlimit unchanged)
    /// [default: min(1000000, '/proc/sys/fs/nr_open')]
    #[arg(long = "rlimit-nofile")]
    pub(super) rlimit_nofile: Option<u64>,

    /// With file handles: how many O_PATH fds of inodes the guest uses to keep open (at most
    /// half the fd budget; beyond the first 832 only for inodes the guest comes back to; each
    /// closes 1 s after the guest last used its inode; 0: none) [vhostfs only]
    #[arg(long = "fd-cache-size", value_name = "N", default_value_t = crate::passthrough::fd_cache::DEFAULT_SIZE)]
    pub(super) fd_cache_size: usize,

    /// Serve metrics (Prometheus text format, over HTTP) on a UNIX socket or a loopback TCP
    /// port; `vhostfs stats` prints them as a table [vhostfs only; default: off]
    #[arg(long, value_name = "unix:PATH|tcp:127.0.0.1:PORT", value_parser = parse_metrics)]
    pub(super) metrics: Option<MetricsAddr>,

    /// After the frontend disconnects (or sends a bad message), wait for the next connection on
    /// the same socket and serve it with a fresh FUSE session, as after a guest reboot
    /// [vhostfs only; default: exit, as virtiofsd]
    #[arg(long = "keep-listening")]
    pub(super) keep_listening: bool,

    /// Options in a format compatible with the legacy implementation [deprecated]
    #[arg(short = 'o')]
    pub(super) compat_options: Vec<String>,

    /// Set log level to "debug" [deprecated]
    #[arg(short = 'd')]
    pub(super) compat_debug: bool,

    /// Disable KILLPRIV V2 support [default]
    #[arg(long = "no-killpriv-v2")]
    pub(super) no_killpriv_v2: bool,

    /// Enable KILLPRIV V2 support
    #[arg(long, overrides_with = "no_killpriv_v2")]
    pub(super) killpriv_v2: bool,

    /// Compatibility option that has no effect [deprecated]
    #[arg(short = 'f')]
    pub(super) compat_foreground: bool,

    /// Enable security label support (implies --xattr): the security context the guest sends
    /// with each creation is stored as the new node's security.* xattr
    #[arg(long = "security-label", require_equals = true, default_value = "never",
          default_missing_value = "always", num_args = 0..=1, value_name = "never|auto|always",
          value_parser = one_of(Negotiation::VALUES, false))]
    pub(super) security_label: String,

    /// Map a range of UIDs from the host into the namespace, given as
    /// :namespace_uid:host_uid:count: (unprivileged --sandbox=namespace only; needs newuidmap)
    #[arg(long)]
    pub(super) uid_map: Vec<IdMap>,

    /// Map a range of GIDs from the host into the namespace, given as
    /// :namespace_gid:host_gid:count: (unprivileged --sandbox=namespace only; needs newgidmap)
    #[arg(long)]
    pub(super) gid_map: Vec<IdMap>,

    /// Describe how to translate UIDs between guest and host, given as
    /// '<type>:<source base>:<target base>:<count>': 'map' (both ways, '<guest>:<host>'),
    /// 'guest' / 'host' (1:1, one way), 'squash-guest' / 'squash-host' (n:1, one way),
    /// 'forbid-guest:<guest base>:<count>' (EPERM); repeat for several ranges (they must not
    /// overlap). Unlike virtiofsd, works with --posix-acl (ACL entries are translated too)
    #[arg(long)]
    pub(super) translate_uid: Vec<String>,

    /// Same as '--translate-uid', but for GIDs
    #[arg(long)]
    pub(super) translate_gid: Vec<String>,

    /// Keep the O_NOATIME flag of the guest's opens [default: cleared, as an unprivileged
    /// daemon may not be allowed to use it on files it does not own]
    #[arg(long = "preserve-noatime")]
    pub(super) preserve_noatime: bool,

    /// Show host names Windows cannot hold (\ : * ? " < > |, control characters, a trailing
    /// dot or space) as the private-use characters WinFsp and Samba use (U+F000 + the
    /// character), and map them back [default: off]
    #[arg(long = "windows-names")]
    pub(super) windows_names: bool,

    /// Match names ignoring case (Unicode simple case folding), as Windows and macOS guests
    /// expect: a lookup finds Foo.TXT for foo.txt, and a name another name folds alike to
    /// cannot be created [default: off]
    #[arg(long = "case-insensitive")]
    pub(super) case_insensitive: bool,

    /// How to perform migration (find-paths, file-handles) [default: find-paths]
    #[arg(long = "migration-mode", value_parser = one_of(MIGRATION_MODE, false))]
    pub(super) migration_mode: Option<String>,

    /// How to respond to errors during migration (abort, guest-error) [default: abort]
    #[arg(long = "migration-on-error", value_parser = one_of(MIGRATION_ON_ERROR, false))]
    pub(super) migration_on_error: Option<String>,

    /// Ensure that the migration destination opens the very same inodes as the source (only for
    /// find-paths)
    #[arg(long = "migration-verify-handles")]
    pub(super) migration_verify_handles: bool,

    /// Double-check the identity of inodes before switching over to the migration destination
    /// (only for find-paths)
    #[arg(long = "migration-confirm-paths")]
    pub(super) migration_confirm_paths: bool,
}
