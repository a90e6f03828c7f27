//! Start-up and the serving loop: from a parsed [`Config`] to a served vhost-user connection.
//!
//! Order matters: every check that can fail on the host (shared dir, fd limit, file handles,
//! pid file, socket) runs before the socket accepts, so a bad set-up is one error line and a
//! non-zero exit, never a half-working device.
//!
//! Threads: the process is single-threaded until `Sandbox::confine` (the sandbox's module doc
//! says why); the signal thread starts right after it, before every other thread, which
//! inherit its blocked signal mask (`shutdown`).

use crate::sync::lock;
use std::fs;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

use vhost::vhost_user::Listener;

use crate::cli::{Config, SocketSource};
use crate::fuse_server::{FuseServer, ServerOptions};
use crate::metrics::QueueGauges;
use crate::passthrough::fd_budget::FdBudget;
use crate::passthrough::migration::MigrationMode;
use crate::passthrough::{FsConfig, PassthroughFs};
use crate::pid_file::PidFile;
use crate::sandbox::{self, Sandbox, SandboxMode};
use crate::shutdown;
use crate::systemd::{self, Notifier};
use crate::vhost_device::MAX_REQUEST_QUEUES;

mod connection;
mod metrics;
mod socket;
mod upgrade;

use connection::{serve_connection, Ended, Serving};

pub use metrics::stats_command;
use metrics::Registry;
use socket::{open_listener, SocketGroup};
pub use upgrade::command::run as upgrade_command;

/// virtiofsd's default for `--rlimit-nofile` when it is not given.
const DEFAULT_RLIMIT_NOFILE: u64 = 1_000_000;

/// Raises RLIMIT_NOFILE as asked (`None`: as high as allowed; `Some(0)`: leave it) and returns
/// the soft limit in force.
fn set_rlimit_nofile(wanted: Option<u64>) -> io::Result<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: valid out pointer.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let target = match wanted {
        Some(0) => return Ok(lim.rlim_cur),
        Some(n) => n,
        None => {
            let nr_open = fs::read_to_string("/proc/sys/fs/nr_open")
                .ok()
                .and_then(|s| s.trim().parse().ok())
                .unwrap_or(DEFAULT_RLIMIT_NOFILE);
            DEFAULT_RLIMIT_NOFILE.min(nr_open)
        }
    };
    let new = libc::rlimit {
        rlim_cur: target,
        rlim_max: target.max(lim.rlim_max),
    };
    // SAFETY: valid pointer.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &new) } == 0 {
        return Ok(target);
    }
    let e = io::Error::last_os_error();
    let capped = target.min(lim.rlim_max);
    let level = if wanted.is_some() {
        log::Level::Warn
    } else {
        log::Level::Info
    };
    log::log!(
        level,
        "cannot raise the open-file limit to {target} ({e}; raising the hard limit needs \
         CAP_SYS_RESOURCE): continuing with {capped}"
    );
    let new = libc::rlimit {
        rlim_cur: capped,
        rlim_max: lim.rlim_max,
    };
    // SAFETY: valid pointer.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &new) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(capped)
}

/// A duplicate of `fd`, for what an in-place upgrade hands over.
fn dup(fd: RawFd) -> Result<OwnedFd, String> {
    // SAFETY: `fd` is open for the duration of the call (the caller holds its owner).
    unsafe { BorrowedFd::borrow_raw(fd) }
        .try_clone_to_owned()
        .map_err(|e| format!("dup: {e}"))
}

fn check_shared_dir(cfg: &Config) -> Result<(), String> {
    let dir = &cfg.shared_dir;
    match fs::metadata(dir) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(format!(
            "shared directory {} is not a directory",
            dir.display()
        )),
        Err(e) => Err(format!("shared directory {}: {e}", dir.display())),
    }
}

/// Serves one vhost-user connection (with `--keep-listening`, one after another); returns when
/// the frontend disconnects: `Ok`, or `Err` when it broke the protocol (the connection is then
/// dropped, and the daemon exits 1).
pub fn run(cfg: Config) -> Result<(), String> {
    // Before the sandbox: the pid the host sees (the supervisor's, with a pid namespace).
    let host_pid = std::process::id();
    // The environment is read (and cleared) first, while the process has one thread. A
    // process started for an in-place upgrade gets its sockets and pid file handed over.
    let mut inherited = upgrade::Inherited::take()?;
    let mut handed = |f: fn(&mut upgrade::Process) -> &mut Option<OwnedFd>| {
        inherited.as_mut().and_then(|i| f(&mut i.process).take())
    };
    let (listener_fd, pid_fd, metrics_fd, notify_fd) = (
        handed(|s| &mut s.listener),
        handed(|s| &mut s.pid_file),
        handed(|s| &mut s.metrics),
        handed(|s| &mut s.notify),
    );
    let activation = match cfg.socket {
        SocketSource::Activation if listener_fd.is_none() => systemd::take_activation_socket()?,
        _ => None,
    };
    // Connected now: the notify socket's path may not resolve once the sandbox is entered.
    let notifier = match notify_fd {
        Some(fd) => Some(Notifier::from_socket(fd)),
        None => Notifier::from_env()?,
    };
    // What an upgrade hands over is the new process's only once it has taken over.
    let owned = Arc::new(Mutex::new(Owned {
        socket: None,
        metrics_socket: None,
        pid_file: None,
        handed: inherited.is_some(),
    }));
    // Declared before the listener, so dropped after it, on every way out of this function.
    let _release = ReleaseOnDrop(Arc::clone(&owned));
    // New files get exactly the mode the guest asked for (its kernel applied its umask).
    // Process-wide but harmless: no file has been created yet.
    socket::umask(0);
    check_shared_dir(&cfg)?;
    let socket_group = cfg
        .socket_group
        .as_deref()
        .map(SocketGroup::resolve)
        .transpose()?;
    // One instance per socket path, checked before anything is set up or logged, so that a
    // second instance fails with that one error line.
    // Removed again (through `owned`) on every way out, until the sandbox takes over.
    if let SocketSource::Path(path) = &cfg.socket {
        let pid_file = match pid_fd {
            Some(fd) => Ok(PidFile::adopt(path, fd)),
            None => PidFile::create(path),
        };
        lock(&owned).pid_file = Some(pid_file.map_err(|e| e.to_string())?);
    }
    let nofile =
        set_rlimit_nofile(cfg.rlimit_nofile).map_err(|e| format!("--rlimit-nofile: {e}"))?;
    let budget = FdBudget::from_rlimit(nofile).limit();
    if nofile <= crate::passthrough::fd_budget::DAEMON_RESERVE as u64 {
        return Err(format!(
            "the open-file limit is {nofile}: too low to be useful (vhostfs keeps {} fds for \
             itself; use --rlimit-nofile of at least {}, or raise LimitNOFILE=/ulimit -n)",
            crate::passthrough::fd_budget::DAEMON_RESERVE,
            2 * crate::passthrough::fd_budget::DAEMON_RESERVE
        ));
    }
    if nofile < 2 * crate::passthrough::fd_budget::DAEMON_RESERVE as u64 {
        log::warn!("the open-file limit is {nofile}: the guest can hold only {budget} open files");
    }
    // The socket is checked and bound on the host, before the sandbox: in its own network
    // namespace /proc/net/unix would not show a live listener.
    let listener = match listener_fd {
        Some(fd) => Listener::from(std::os::unix::net::UnixListener::from(fd)),
        None => open_listener(&cfg.socket, socket_group.as_ref(), activation)?,
    };
    if let SocketSource::Path(p) = &cfg.socket {
        lock(&owned).socket = Some(p.clone());
    }
    let mut created: Vec<PathBuf> = match &cfg.socket {
        SocketSource::Path(p) => vec![p.clone(), PidFile::path_for(p)],
        SocketSource::Fd(_) | SocketSource::Activation => Vec::new(),
    };
    // Bound on the host too: the sandbox's namespaces and root would hide it.
    let metrics_listener = match &cfg.metrics {
        Some(addr) if metrics_fd.is_some() => {
            lock(&owned).metrics_socket = match addr {
                crate::cli::MetricsAddr::Unix(p) => Some(p.clone()),
                crate::cli::MetricsAddr::Tcp(_) => None,
            };
            if let crate::cli::MetricsAddr::Unix(p) = addr {
                created.push(p.clone());
            }
            metrics_fd.map(|fd| metrics::Listener::adopt(addr, fd))
        }
        Some(addr) => {
            let (l, path) = metrics::bind(addr, socket_group.as_ref())?;
            created.extend(path.clone());
            lock(&owned).metrics_socket = path;
            Some(l)
        }
        None => None,
    };
    // The request clock reads /sys to know whether the TSC can be trusted: before the sandbox.
    let tsc = crate::metrics::clock::calibrate(std::time::Duration::from_millis(10));
    log::debug!(
        "requests are timed with {}",
        if tsc { "the TSC" } else { "CLOCK_MONOTONIC" }
    );
    let sandbox_cfg = cfg.sandbox_config();
    let dup_fd = |fd: Option<BorrowedFd>| {
        fd.map(|fd| fd.try_clone_to_owned())
            .transpose()
            .map_err(|e| format!("dup: {e}"))
    };
    let pid_file = dup_fd(lock(&owned).pid_file.as_ref().map(PidFile::fd))?;
    // The launcher of in-place upgrades, a process on the host with the caller's credentials:
    // as root under `namespace`, the sandbox's supervisor (its duty); otherwise forked now,
    // while the process has one thread (before the user namespace of an unprivileged run). It
    // removes the socket and pid file once this process has exited (under `namespace`
    // unprivileged, the supervisor does); what an upgrade handed over only once this process
    // has taken over.
    let supervisor_launches = Sandbox::supervisor_stays_on_host(cfg.sandbox);
    let leftovers = match cfg.sandbox {
        SandboxMode::Namespace if !supervisor_launches => upgrade::launcher::Leftovers::default(),
        _ => lock(&owned).leftovers()?,
    };
    let launcher_err = |e: io::Error| format!("the upgrade launcher: {e}");
    let exe = upgrade::launcher::binary_path();
    let args = upgrade::launcher::arguments();
    let (launcher, duty) = if supervisor_launches {
        let (launcher, service) =
            upgrade::Launcher::with_service(exe, &args, leftovers, inherited.is_none())
                .map_err(launcher_err)?;
        let duty = sandbox::Duty {
            fds: service.fds(),
            child_end: launcher.channel(),
            run: Box::new(move |child| service.serve(Some(child))),
        };
        (launcher, Some(duty))
    } else {
        let launcher = upgrade::Launcher::start(exe, &args, leftovers).map_err(launcher_err)?;
        if inherited.is_some() {
            launcher.cleanup(false).map_err(launcher_err)?;
        }
        (launcher, None)
    };
    if cfg.sandbox != SandboxMode::Namespace {
        // From here the launcher alone removes them, once this process has exited.
        lock(&owned).disarm();
    }
    // The process an upgrade started joins the old daemon's mount namespace (unprivileged, its
    // user namespace first): the same mounts, so the inode keys (mount IDs) of what it is
    // handed match its own lookups.
    let join = match (&mut inherited, cfg.sandbox) {
        (Some(i), SandboxMode::Namespace) => Some(i.namespaces()?),
        _ => None,
    };
    let mut sandbox = Sandbox::enter(&sandbox_cfg, created, join, duty)?;
    // The supervisor that launches opens the mount namespace for a launch: none is kept here.
    let mount_ns = sandbox
        .take_mount_namespace()
        .filter(|_| !supervisor_launches);
    let handed = upgrade::Handed {
        pid_file,
        metrics: dup_fd(metrics_listener.as_ref().map(|l| l.fd()))?,
        notifier: notifier.clone(),
        mount_ns,
        user_ns: sandbox.take_user_namespace(),
    };
    // The upgrader holds the listener: the connections are accepted from it, an upgrade hands
    // a duplicate over.
    let upgrader = Arc::new(upgrade::Upgrader::new(launcher, handed, listener, host_pid));
    let fs_cfg = FsConfig {
        shared_dir: sandbox.shared_dir(&cfg.shared_dir),
        inode_file_handles: cfg.inode_file_handles,
        entry_timeout: cfg.cache.entry_timeout(),
        attr_timeout: cfg.cache.attr_timeout(),
        direct_io: cfg.cache.direct_io(),
        allow_direct_io: cfg.allow_direct_io,
        preserve_noatime: cfg.preserve_noatime,
        keep_cache: cfg.cache == crate::cli::CacheMode::Always,
        readonly: cfg.readonly,
        xattr: cfg.xattr,
        xattrmap: cfg.xattrmap.clone(),
        ids: cfg.translate.clone(),
        announce_submounts: cfg.announce_submounts,
        windows_names: cfg.windows_names,
        case_insensitive: cfg.case_insensitive,
        fd_budget: budget,
        fd_cache_size: cfg.fd_cache_size,
        migration: cfg.migration,
    };
    let fs = match sandbox.take_proc_self_fd() {
        Some(proc_self_fd) => PassthroughFs::with_proc_self_fd(fs_cfg, proc_self_fd),
        None => PassthroughFs::new(fs_cfg),
    };
    let fs = Arc::new(fs.map_err(|e| e.to_string())?);
    log::info!(
        "sharing {} ({} mode, fd budget {budget})",
        cfg.shared_dir.display(),
        if fs.uses_file_handles() {
            "file-handle"
        } else {
            "O_PATH fd"
        }
    );
    if cfg.sandbox == SandboxMode::Namespace {
        // From `confine` on, host paths resolve inside the share: nothing may be removed by
        // path any more. The supervisor removes the socket and pid file when the daemon exits
        // (as root, its launcher duty; under `chroot` and `none`, the launcher).
        lock(&owned).disarm();
    }
    // A `file-handles` migration destination opens the source's handles, whatever this
    // daemon's own inodes use.
    let opens_handles = fs.uses_file_handles() || cfg.migration.mode == MigrationMode::FileHandles;
    // Signals are blocked from here, before any thread starts (every thread inherits the
    // blocked mask), and let in only while the main thread waits (`shutdown`); in the serving
    // process (under `namespace`, after the supervisor's fork: the supervisor keeps its own
    // handlers).
    let registry: Arc<OnceLock<Arc<Registry>>> = Arc::default();
    let signals = take_signals(
        notifier.clone(),
        Arc::clone(&owned),
        Arc::clone(&registry),
        Arc::clone(&upgrader),
    )
    .map_err(|e| format!("signal handling: {e}"))?;
    sandbox.confine(&sandbox_cfg, opens_handles)?;
    let opts = ServerOptions {
        readdirplus: cfg.readdirplus,
        allow_direct_io_mmap: cfg.allow_mmap,
        posix_acl: cfg.posix_acl,
        security_label: cfg.security_label,
        writeback: cfg.writeback,
        killpriv_v2: cfg.killpriv_v2,
    };
    let server = Arc::new(FuseServer::new(Arc::clone(&fs), opts));
    let registry = registry.get_or_init(|| {
        Arc::new(Registry::new(
            host_pid,
            Arc::clone(&server),
            fs,
            // No connection yet: every queue idle.
            Arc::new(QueueGauges::new(1 + MAX_REQUEST_QUEUES)),
        ))
    });
    if let (Some(l), Some(addr)) = (metrics_listener, &cfg.metrics) {
        metrics::serve(l, Arc::clone(registry)).map_err(|e| format!("--metrics: {e}"))?;
        log::info!("serving metrics at {addr}");
    }
    let serving = Serving {
        server: &server,
        registry,
        notifier: notifier.as_ref(),
        tag: cfg.tag.as_deref(),
        pool_size: cfg.thread_pool_size,
        upgrader: &upgrader,
        signals: &signals,
    };
    // Ready (once) when the first connection may come.
    let mut status = "READY=1\nSTATUS=waiting for the vhost-user frontend";
    let result = loop {
        // A process started for an upgrade serves the connection it was handed first.
        if inherited.is_none() {
            log::info!("waiting for the vhost-user frontend");
            if let Some(n) = &notifier {
                n.send(status);
            }
        }
        status = "STATUS=waiting for the vhost-user frontend";
        match serve_connection(&serving, inherited.take()) {
            Ok(Ended::Disconnected) if cfg.keep_listening => {
                log::info!("the frontend disconnected; waiting for the next connection");
            }
            Ok(Ended::Disconnected) => {
                log::info!("the frontend disconnected");
                break Ok(());
            }
            Ok(Ended::Dropped(why)) if cfg.keep_listening => {
                log::warn!("{why}: connection dropped; waiting for the next connection");
            }
            Ok(Ended::Dropped(why)) => break Err(format!("{why}: connection dropped")),
            Err(e) => break Err(e),
        }
    };
    if let Some(n) = &notifier {
        n.send("STOPPING=1");
    }
    result
}

/// What the daemon created on the host and removes when it exits: the socket it bound (not an
/// inherited one), the metrics socket and its pid file. Only until it is confined: then the
/// supervisor (`namespace`) or the upgrade launcher (`chroot`, `none`: Landlock refuses a
/// removal outside the share) removes them once the daemon has exited, and this is disarmed.
#[derive(Default)]
struct Owned {
    socket: Option<PathBuf>,
    metrics_socket: Option<PathBuf>,
    pid_file: Option<PidFile>,
    /// Handed over by an in-place upgrade that has not taken over yet: another process's, left
    /// alone (a new process that fails does not take the share down).
    handed: bool,
}

impl Owned {
    /// What the upgrade launcher removes in our place (the pid file as a duplicate of its fd).
    fn leftovers(&self) -> Result<upgrade::launcher::Leftovers, String> {
        let pid_file = match &self.pid_file {
            Some(p) => Some((p.path().to_path_buf(), dup(p.fd().as_raw_fd())?)),
            None => None,
        };
        Ok(upgrade::launcher::Leftovers {
            sockets: [&self.socket, &self.metrics_socket]
                .into_iter()
                .flatten()
                .cloned()
                .collect(),
            pid_file,
        })
    }

    /// Nothing is removed by path any more. The pid file's fd is closed: its duplicates (the
    /// upgrader's, taken before, and the launcher's or supervisor's) keep the lock.
    fn disarm(&mut self) {
        let mut disarmed = std::mem::take(self);
        disarmed.socket = None;
        disarmed.metrics_socket = None;
        if let Some(p) = disarmed.pid_file.take() {
            p.close_leaving_file();
        }
    }
}

impl Drop for Owned {
    fn drop(&mut self) {
        if self.handed {
            std::mem::forget(self.pid_file.take());
            return;
        }
        for path in [&self.socket, &self.metrics_socket].into_iter().flatten() {
            let _ = fs::remove_file(path);
        }
    }
}

/// Releases what is [`Owned`] when `run` returns (the signal thread keeps the `Arc`).
struct ReleaseOnDrop(Arc<Mutex<Owned>>);

impl Drop for ReleaseOnDrop {
    fn drop(&mut self) {
        drop(std::mem::take(&mut *lock(&self.0)));
    }
}

/// On SIGTERM/SIGINT: tell systemd we stop, remove the socket and pid files, exit 0. Whatever the
/// guest had in flight is lost, as when the frontend goes away. On SIGUSR1: the metrics table
/// in the log (info level), one line per row, once `registry` is set. On SIGHUP: an in-place
/// upgrade, on a thread of its own (it pauses the relay, which runs on the thread that
/// handles the signals).
fn take_signals(
    notifier: Option<Notifier>,
    owned: Arc<Mutex<Owned>>,
    registry: Arc<OnceLock<Arc<Registry>>>,
    upgrader: Arc<upgrade::Upgrader>,
) -> io::Result<shutdown::Signals> {
    shutdown::Signals::take(
        move |signo| {
            log::info!("{}: exiting", shutdown::signal_name(signo));
            if let Some(n) = &notifier {
                n.send("STOPPING=1");
            }
            drop(std::mem::take(&mut *lock(&owned)));
            std::process::exit(0);
        },
        move || match registry.get() {
            Some(r) => {
                for line in metrics::table(&r.snapshot()).lines() {
                    log::info!("stats: {line}");
                }
            }
            None => log::info!("stats: not serving yet"),
        },
        move |requester| {
            let upgrader = Arc::clone(&upgrader);
            let started = std::thread::Builder::new()
                .name("vhostfs-upgrade".into())
                .spawn(move || upgrader.upgrade(requester));
            if let Err(e) = started {
                log::error!("SIGHUP: cannot start the upgrade ({e}): serving on");
            }
        },
    )
}
