//! Start-up and the serving loop: from a parsed [`Config`] to a served vhost-user connection.
//!
//! Order matters: every check that can fail on the host (shared dir, fd limit, file handles,
//! pid file, socket) runs before the socket accepts, so a bad set-up is one error line and a
//! non-zero exit, never a half-working device.

use std::fs;
use std::io;
use std::os::fd::FromRawFd;
use std::sync::Arc;

use vhost::vhost_user::{Error as VhostUserError, Listener};
use vhost_user_backend::{Error as DaemonError, VhostUserDaemon};
use vm_memory::{GuestMemoryAtomic, GuestMemoryMmap};

use crate::cli::{Config, SocketSource};
use crate::fd_budget::FdBudget;
use crate::fuse_server::{FuseServer, ServerOptions};
use crate::passthrough::{FsConfig, PassthroughFs};
use crate::pid_file::PidFile;
use crate::sandbox::Sandbox;
use crate::vhost_device::VhostFsBackend;

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

/// Serves one vhost-user connection; returns when the frontend disconnects.
pub fn run(cfg: Config) -> Result<(), String> {
    // New files get exactly the mode the guest asked for (its kernel applied its umask).
    // SAFETY: process-wide but harmless: no file has been created yet.
    unsafe { libc::umask(0) };
    check_shared_dir(&cfg)?;
    let nofile =
        set_rlimit_nofile(cfg.rlimit_nofile).map_err(|e| format!("--rlimit-nofile: {e}"))?;
    let budget = FdBudget::from_rlimit(nofile).limit();
    if nofile < 2 * crate::fd_budget::DAEMON_RESERVE as u64 {
        log::warn!("the open-file limit is {nofile}: the guest can hold only {budget} open files");
    }
    let sandbox = Sandbox::enter(&cfg)?;
    let fs_cfg = FsConfig {
        shared_dir: cfg.shared_dir.clone(),
        inode_file_handles: cfg.inode_file_handles,
        entry_timeout: cfg.cache.entry_timeout(),
        attr_timeout: cfg.cache.attr_timeout(),
        direct_io: cfg.cache.direct_io(),
        keep_cache: cfg.cache == crate::cli::CacheMode::Always,
        readonly: cfg.readonly,
        xattr: cfg.xattr,
        announce_submounts: cfg.announce_submounts,
        fd_budget: budget,
    };
    let fs = Arc::new(PassthroughFs::new(fs_cfg).map_err(|e| e.to_string())?);
    log::info!(
        "sharing {} ({} mode, fd budget {budget})",
        cfg.shared_dir.display(),
        if fs.uses_file_handles() {
            "file-handle"
        } else {
            "O_PATH fd"
        }
    );
    let (_pid_file, mut listener) = match &cfg.socket {
        SocketSource::Path(path) => {
            let pid = PidFile::create(path).map_err(|e| e.to_string())?;
            let l =
                Listener::new(path, true).map_err(|e| format!("socket {}: {e}", path.display()))?;
            (Some(pid), l)
        }
        // SAFETY: the command line checked that the fd is an open socket; we take it over.
        SocketSource::Fd(fd) => (None, unsafe { Listener::from_raw_fd(*fd) }),
    };
    sandbox.confine(&cfg, fs.uses_file_handles())?;
    let server = Arc::new(FuseServer::new(fs, ServerOptions::default()));
    let backend = VhostFsBackend::new(server, cfg.tag.as_deref(), cfg.thread_pool_size)
        .map_err(|e| e.to_string())?;

    let mem = GuestMemoryAtomic::new(GuestMemoryMmap::new());
    let mut daemon =
        VhostUserDaemon::new("vhostfs".into(), backend, mem).map_err(|e| e.to_string())?;
    log::info!("waiting for the vhost-user frontend");
    daemon
        .start(&mut listener)
        .map_err(|e| format!("vhost-user: {e}"))?;
    match daemon.wait() {
        Ok(()) => Ok(()),
        Err(DaemonError::HandleRequest(
            VhostUserError::Disconnected
            | VhostUserError::PartialMessage
            | VhostUserError::SocketBroken(_),
        )) => {
            log::info!("the frontend disconnected");
            Ok(())
        }
        Err(e) => Err(format!("vhost-user: {e}")),
    }
}
