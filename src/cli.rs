//! Command line of vhostfs: a drop-in for the command line of virtiofsd 1.14.
//!
//! Every option that `virtiofsd --help` lists is known to the parser, with the same spelling
//! and value syntax (including the legacy `-o` comma-separated forms), so that management
//! stacks (libvirt, Proxmox, hookscripts) calling `virtiofsd --fd=N ...` keep working.
//! Every one of them has its effect; an unknown option is a one-line error.
//! `docs/options.md` lists every option with its status.

use clap::{CommandFactory, FromArgMatches};
use std::ffi::OsString;
use std::fmt;
use std::mem::MaybeUninit;
use std::os::unix::io::RawFd;
use std::path::PathBuf;

pub use crate::fuse_server::Negotiation;
use crate::passthrough::id_map::{IdMap as Translation, IdMaps};
use crate::passthrough::migration::{MigrationConfig, MigrationMode, OnError};
use crate::passthrough::xattr_map::XattrMap;
pub use crate::passthrough::InodeFileHandles;
use crate::sandbox::{IdMap, LandlockMode, ModCaps, SandboxConfig, SandboxMode, SeccompMode};

mod cache_mode;
mod compat;
mod metrics;
mod options;
mod subcommand;
mod upgrade;

pub use cache_mode::CacheMode;

use compat::Effective;
pub use metrics::{MetricsAddr, StatsTarget};
use options::Opt;
pub use upgrade::{UpgradeDaemon, UpgradeTarget};

/// Maximum length in bytes of `--tag` (the size of the tag field of the virtio-fs config space).
pub const MAX_TAG_LEN: usize = 36;

/// What the process should do, as decided by the command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Serve a shared directory over vhost-user (boxed: the other variants are small).
    Run(Box<Config>),
    /// Print [`capabilities_json`] on stdout and exit 0 (`--print-capabilities`).
    PrintCapabilities,
    /// `vhostfs stats ...`: print the metrics of a running daemon as a table.
    Stats(StatsTarget),
    /// `vhostfs upgrade ...`: hand a running daemon over to a new process of its binary.
    Upgrade(UpgradeTarget),
    /// Print `text` and exit with `code`: `--help`, `--version`, or the help shown when no
    /// argument is given. `text` goes to stderr when `stderr` is true, else to stdout.
    Exit {
        /// The text to print, as rendered by clap (ends with a newline).
        text: String,
        /// Print on stderr rather than stdout.
        stderr: bool,
        /// The process exit code.
        code: i32,
    },
}

/// Where the vhost-user socket comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SocketSource {
    /// `--socket-path PATH` (or the deprecated `--socket PATH`): vhostfs creates the socket.
    Path(PathBuf),
    /// `--fd N`: an already-listening socket inherited from the caller (checked to be an open
    /// socket at parse time).
    Fd(RawFd),
    /// Neither option: the socket must come from systemd socket activation (`LISTEN_FDS`),
    /// taken at start-up by `systemd::take_activation_socket`.
    Activation,
}

/// Everything the daemon needs to run, resolved from the command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// The vhost-user socket.
    pub socket: SocketSource,
    /// `--socket-group`: the group (by name) to give the socket created at `--socket-path`,
    /// which is then made group-connectable (only with a socket path).
    pub socket_group: Option<String>,
    /// The directory to share (`--shared-dir` or `-o source=`); not checked to exist here.
    pub shared_dir: PathBuf,
    /// `--inode-file-handles` (default `prefer`).
    pub inode_file_handles: InodeFileHandles,
    /// `--cache` or `-o cache=` (default `auto`).
    pub cache: CacheMode,
    /// `--thread-pool-size` (0: every request is served on its queue's thread; default 64,
    /// unlike virtiofsd's 0, because pool threads cost nothing until a queue has a backlog, and
    /// at most one per CPU helps with requests that keep a thread on a CPU).
    pub thread_pool_size: usize,
    /// `--rlimit-nofile`; `None` means virtiofsd's default (min(1000000, fs.nr_open)) and
    /// `Some(0)` leaves the limit unchanged.
    pub rlimit_nofile: Option<u64>,
    /// `--fd-cache-size` (vhostfs only): how many O_PATH fds of handle-backed inodes may be
    /// cached (0: none).
    pub fd_cache_size: usize,
    /// `--readonly`.
    pub readonly: bool,
    /// `--xattr`, `-o xattr` / `-o no_xattr` (default off); on whenever `posix_acl` or
    /// `security_label` is not `Never` or `xattrmap` is set, as in virtiofsd.
    pub xattr: bool,
    /// `--xattrmap`, `-o xattrmap=` (the `-o` form wins, as every `-o` form does).
    pub xattrmap: Option<XattrMap>,
    /// `--posix-acl[=never|auto|always]`, `-o posix_acl` / `-o no_posix_acl` (default `Never`).
    pub posix_acl: Negotiation,
    /// `--translate-uid` / `--translate-gid` (repeatable; default: the identity).
    pub translate: IdMaps,
    /// `--security-label[=never|auto|always]` (bare: `always`), `-o security_label` /
    /// `-o no_security_label` (default `Never`): store the security context the guest sends
    /// with each creation as the new node's xattr; implies `--xattr`, as in virtiofsd.
    pub security_label: Negotiation,
    /// `--allow-direct-io`, `-o allow_direct_io` / `-o no_allow_direct_io`: keep the guest's
    /// O_DIRECT when opening files (default off: stripped).
    pub allow_direct_io: bool,
    /// Offer READDIRPLUS: off with `--no-readdirplus` or `-o no_readdirplus` (`-o readdirplus`
    /// turns it back on), and with `--cache=never` whatever is given, as in virtiofsd (entries
    /// that expire at once are not worth the lookups).
    pub readdirplus: bool,
    /// `--allow-mmap`: negotiate FUSE_DIRECT_IO_ALLOW_MMAP, so the guest may mmap files opened
    /// with FOPEN_DIRECT_IO (`--cache=never`) shared too (default off).
    pub allow_mmap: bool,
    /// `--writeback`, `-o writeback` / `-o no_writeback`: negotiate FUSE_WRITEBACK_CACHE
    /// (default off).
    pub writeback: bool,
    /// `--migration-mode`, `--migration-on-error`, `--migration-verify-handles`,
    /// `--migration-confirm-paths`.
    pub migration: MigrationConfig,
    /// `--preserve-noatime`: keep the guest's O_NOATIME when opening (default off: cleared).
    pub preserve_noatime: bool,
    /// `--windows-names`: host names Windows cannot hold shown as private-use characters
    /// (default off).
    pub windows_names: bool,
    /// `--case-insensitive`: names match ignoring case (default off).
    pub case_insensitive: bool,
    /// `--killpriv-v2` / `--no-killpriv-v2`, `-o killpriv_v2` / `-o no_killpriv_v2` (default
    /// off): negotiate FUSE_HANDLE_KILLPRIV_V2.
    pub killpriv_v2: bool,
    /// `--announce-submounts` / `--no-announce-submounts` (default on).
    pub announce_submounts: bool,
    /// `--log-level`, `-o loglevel=`, `-d` (default `info`).
    pub log_level: log::LevelFilter,
    /// `--syslog`: log to syslog instead of stderr.
    pub syslog: bool,
    /// `--sandbox`, `-o sandbox=` (default `namespace`).
    pub sandbox: SandboxMode,
    /// `--seccomp` (default `kill`).
    pub seccomp: SeccompMode,
    /// `--modcaps`, `-o modcaps=` (default: no change to the kept set).
    pub modcaps: ModCaps,
    /// `--uid-map` (repeatable): the uid ranges of the user namespace of an unprivileged
    /// `--sandbox=namespace` run (default: the caller's uid as 0).
    pub uid_map: Vec<IdMap>,
    /// `--gid-map` (repeatable), as `uid_map` for gids.
    pub gid_map: Vec<IdMap>,
    /// `--landlock` (default `auto`).
    pub landlock: LandlockMode,
    /// `--tag`: the tag advertised in the device config space (at most [`MAX_TAG_LEN`] bytes).
    pub tag: Option<String>,
    /// `--metrics` (vhostfs only): where to serve the metrics (default: nowhere).
    pub metrics: Option<MetricsAddr>,
    /// `--keep-listening` (vhostfs only): serve one connection after another on the listening
    /// socket, each with a fresh FUSE session (default off: exit when the first one ends).
    pub keep_listening: bool,
    /// Warnings about the command line, to be logged once logging is set up: deprecated
    /// spellings that were used (`-o`, `-d`, `-f`, `--socket`, `fallback`), worded as
    /// virtiofsd words them.
    pub deprecations: Vec<String>,
}

impl Config {
    /// The sandbox's part of the configuration.
    pub fn sandbox_config(&self) -> SandboxConfig {
        SandboxConfig {
            mode: self.sandbox,
            shared_dir: self.shared_dir.clone(),
            uid_map: self.uid_map.clone(),
            gid_map: self.gid_map.clone(),
            modcaps: self.modcaps.clone(),
            handles_required: self.inode_file_handles == InodeFileHandles::Mandatory,
            landlock: self.landlock,
            seccomp: self.seccomp,
        }
    }
}

/// A command-line error: one line, without the `error:` prefix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CliError(String);

impl CliError {
    fn new(message: impl Into<String>) -> Self {
        CliError(message.into())
    }

    /// The one-line message.
    pub fn message(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CliError {}

/// The features `--print-capabilities` lists: virtiofsd 1.14's, in its order, each one vhostfs
/// implements. `migrate-precopy`: live migration (dirty-page logging and the device state over
/// vhost-user; libvirt allows migrating a domain with a virtio-fs device only when its daemon
/// lists it); `posix-acl-negotiation-mode` and `security-label-negotiation-mode`: `--posix-acl`
/// and `--security-label` take `never|auto|always`; `separate-options`: options are given one
/// by one rather than through `-o` (libvirt then does so).
pub const FEATURES: [&str; 4] = [
    "migrate-precopy",
    "posix-acl-negotiation-mode",
    "security-label-negotiation-mode",
    "separate-options",
];

/// The backend capabilities, in the vhost-user.json form printed by `--print-capabilities`
/// (same layout as virtiofsd 1.14; without trailing newline): [`FEATURES`].
pub fn capabilities_json() -> String {
    let features: Vec<String> = FEATURES.iter().map(|f| format!("    \"{f}\"")).collect();
    format!(
        "{{\n  \"type\": \"fs\",\n  \"features\": [\n{}\n  ]\n}}",
        features.join(",\n")
    )
}

/// The clap command behind [`parse_args`], for generating the man page and shell completions
/// (`vhostfs-gen`).
pub fn command() -> clap::Command {
    Opt::command()
}

/// Checks that `fd` is an open file descriptor referring to a socket.
fn validate_fd(fd: RawFd) -> Result<(), CliError> {
    // SAFETY: F_GETFD only reads the descriptor flags; an invalid fd yields EBADF.
    if unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
        let err = std::io::Error::last_os_error();
        return Err(CliError::new(format!(
            "invalid value '{fd}' for '--fd <FD>': not an open file descriptor ({err})"
        )));
    }
    let mut st = MaybeUninit::<libc::stat>::uninit();
    // SAFETY: `st` is a valid out-pointer for one `struct stat`.
    if unsafe { libc::fstat(fd, st.as_mut_ptr()) } < 0 {
        let err = std::io::Error::last_os_error();
        return Err(CliError::new(format!(
            "invalid value '{fd}' for '--fd <FD>': fstat failed ({err})"
        )));
    }
    // SAFETY: fstat succeeded, so it filled `st`.
    let mode = unsafe { st.assume_init() }.st_mode;
    if mode & libc::S_IFMT != libc::S_IFSOCK {
        return Err(CliError::new(format!(
            "invalid value '{fd}' for '--fd <FD>': not a socket"
        )));
    }
    Ok(())
}

/// Turns a clap error into its first line, without the `error: ` prefix.
fn one_line(err: &clap::Error) -> CliError {
    let rendered = err.render().to_string();
    let first = rendered
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("");
    CliError::new(first.strip_prefix("error: ").unwrap_or(first).trim_end())
}

/// The thread pool size when `--thread-pool-size` is not given: 64. At most one per CPU helps
/// with requests that keep a thread on a CPU; the others only serve requests that wait for the
/// host filesystem, each blocked in one (a network filesystem: issue 35 item 3), and exist only
/// while they do (and 1 s after).
pub fn default_thread_pool_size() -> usize {
    64
}

/// Parses the command line (`args` includes the program name, as from `std::env::args_os`).
///
/// Returns the [`Action`] to take, or a one-line [`CliError`] for a syntax error, a bad
/// value, a missing required option, an invalid `--fd`, or an option vhostfs does not
/// support yet. `--print-capabilities` is honoured once the syntax is valid, whatever else
/// is given (as virtiofsd does). A first argument `stats` starts the stats subcommand's
/// command line (virtiofsd's has no subcommands nor positional arguments).
pub fn parse_args<I: IntoIterator<Item = OsString>>(args: I) -> Result<Action, CliError> {
    let mut args: Vec<OsString> = args.into_iter().collect();
    if args.get(1).is_some_and(|a| a == "stats") {
        args.remove(0);
        return metrics::parse_stats(args)
            .map(Action::Stats)
            .or_else(clap_exit);
    }
    if args.get(1).is_some_and(|a| a == "upgrade") {
        args.remove(0);
        return upgrade::parse(args).map(Action::Upgrade).or_else(clap_exit);
    }
    let matches = match Opt::command().try_get_matches_from(args) {
        Ok(m) => m,
        Err(e) => return clap_exit(e),
    };
    let opt = Opt::from_arg_matches(&matches).map_err(|e| one_line(&e))?;
    resolve(opt)
}

/// Help and version requests as [`Action::Exit`]; anything else as a one-line error.
fn clap_exit(e: clap::Error) -> Result<Action, CliError> {
    use clap::error::ErrorKind;
    match e.kind() {
        ErrorKind::DisplayHelp
        | ErrorKind::DisplayVersion
        | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => Ok(Action::Exit {
            text: e.render().to_string(),
            stderr: e.use_stderr(),
            code: e.exit_code(),
        }),
        _ => Err(one_line(&e)),
    }
}

/// Applies the compat forms, the support checks and the requirements to a parsed command line.
fn resolve(opt: Opt) -> Result<Action, CliError> {
    let mut eff = Effective::from_opt(&opt);
    for line in &opt.compat_options {
        for item in line.split(',') {
            eff.apply_compat(item)?;
        }
    }
    // Checked after syntax, like virtiofsd, so an invalid mode is reported as such.
    let inode_file_handles = opt.inode_file_handles.parse().map_err(|e: String| {
        CliError::new(format!(
            "invalid value '{}' for '--inode-file-handles=<INODE_FILE_HANDLES>': {e}",
            opt.inode_file_handles
        ))
    })?;

    if opt.print_capabilities {
        return Ok(Action::PrintCapabilities);
    }

    let mut deprecations = Vec::new();
    let socket = match (opt.fd, &opt.socket_path, &opt.socket) {
        (Some(fd), _, _) => {
            validate_fd(fd)?;
            SocketSource::Fd(fd)
        }
        (None, Some(path), _) => SocketSource::Path(path.clone()),
        (None, None, Some(path)) => {
            deprecations.push(
                "use of deprecated parameter '--socket': Please use the '--socket-path' option instead".into(),
            );
            SocketSource::Path(path.clone())
        }
        (None, None, None) => SocketSource::Activation,
    };
    // With --fd clap refuses it already, as virtiofsd does.
    if opt.socket_group.is_some() && socket == SocketSource::Activation {
        return Err(CliError::new(
            "--socket-group needs --socket-path: a socket-activated socket is created by systemd \
             (set SocketGroup= and SocketMode= in the .socket unit)",
        ));
    }
    let shared_dir = eff
        .shared_dir
        .ok_or_else(|| CliError::new("missing \"--shared-dir\" or \"-o source\" option"))?;

    if opt.compat_foreground {
        deprecations
            .push("Use of deprecated flag '-f': This flag has no effect, please remove it".into());
    }
    if opt.compat_debug {
        deprecations.push(
            "Use of deprecated flag '-d': Please use the '--log-level debug' option instead".into(),
        );
    }
    if !opt.compat_options.is_empty() {
        deprecations.push("Use of deprecated option format '-o': Please specify options without it (e.g., '--cache auto' instead of '-o cache=auto')".into());
    }
    if opt.inode_file_handles == "fallback" {
        deprecations.push("Use of deprecated value 'fallback' for '--inode-file-handles': Please use 'prefer' instead".into());
    }

    // Checked by clap already (one of the listed values).
    let migration = MigrationConfig {
        mode: match opt.migration_mode.as_deref() {
            Some(m) => m.parse().map_err(CliError::new)?,
            None => MigrationMode::FindPaths,
        },
        on_error: match opt.migration_on_error.as_deref() {
            Some(m) => m.parse().map_err(CliError::new)?,
            None => OnError::Abort,
        },
        verify_handles: opt.migration_verify_handles,
        confirm_paths: opt.migration_confirm_paths,
    };
    let translation = |specs: &[String], option: &str| {
        Translation::parse(specs.iter().map(String::as_str))
            .map_err(|e| CliError::new(format!("invalid value for '{option}': {e}")))
    };
    let translate = IdMaps {
        uid: translation(&opt.translate_uid, "--translate-uid")?,
        gid: translation(&opt.translate_gid, "--translate-gid")?,
    };
    let posix_acl = eff.posix_acl.parse().map_err(CliError::new)?;
    let security_label: Negotiation = eff.security_label.parse().map_err(CliError::new)?;
    let xattrmap = match &eff.xattrmap {
        Some((map, spelling)) => Some(
            map.parse::<XattrMap>()
                .map_err(|e| CliError::new(format!("invalid value for '{spelling}': {e}")))?,
        ),
        None => None,
    };
    Ok(Action::Run(Box::new(Config {
        socket,
        socket_group: opt.socket_group,
        shared_dir,
        inode_file_handles,
        cache: eff.cache,
        thread_pool_size: opt
            .thread_pool_size
            .unwrap_or_else(default_thread_pool_size),
        rlimit_nofile: opt.rlimit_nofile,
        fd_cache_size: opt.fd_cache_size,
        readonly: opt.readonly,
        xattr: eff.xattr
            || posix_acl != Negotiation::Never
            || security_label != Negotiation::Never
            || xattrmap.is_some(),
        xattrmap,
        posix_acl,
        translate,
        security_label,
        allow_direct_io: eff.allow_direct_io,
        readdirplus: eff.readdirplus && eff.cache != CacheMode::Never,
        allow_mmap: opt.allow_mmap,
        writeback: eff.writeback,
        migration,
        preserve_noatime: opt.preserve_noatime,
        windows_names: opt.windows_names,
        case_insensitive: opt.case_insensitive,
        killpriv_v2: eff.killpriv_v2.value,
        announce_submounts: eff.announce_submounts,
        log_level: if opt.compat_debug {
            log::LevelFilter::Debug
        } else {
            eff.log_level
        },
        syslog: opt.syslog,
        sandbox: eff.sandbox.value.parse().map_err(CliError::new)?,
        seccomp: opt.seccomp.parse().map_err(CliError::new)?,
        modcaps: eff.modcaps.unwrap_or_default(),
        uid_map: opt.uid_map,
        gid_map: opt.gid_map,
        landlock: opt.landlock,
        tag: opt.tag,
        metrics: opt.metrics,
        keep_listening: opt.keep_listening,
        deprecations,
    })))
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_docs;
#[cfg(test)]
mod tests_options;
