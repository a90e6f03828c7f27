//! `--sandbox=namespace|chroot|none`: confine the daemon's view of the host to the shared dir.
//!
//! Parts: `userns` (the user namespace of an unprivileged run and its id maps), `supervisor`
//! (the fork into a new pid namespace, signal forwarding), `root` (the mount namespace,
//! `pivot_root` or `chroot`), then what confines the serving process: `landlock`,
//! `capabilities`, `seccomp`. Configured by a [`SandboxConfig`] of its own.
//!
//! The sandbox is entered in two steps, both called from `daemon::run`:
//!
//! 1. [`Sandbox::enter`], first thing in `run`, while the process is still single-threaded.
//!    In `namespace` mode run by a user other than root (as virtiofsd) it first enters a new
//!    **user namespace**: a helper child forked beforehand, still outside, writes its id maps
//!    (without `--uid-map`/`--gid-map`: the caller's uid and gid as 0, a single-id map an
//!    unprivileged process may write, with setgroups denied; with them: the ranges, through
//!    the setuid tools `newuidmap`/`newgidmap`, which check `/etc/subuid`/`/etc/subgid`), then
//!    the process takes uid and gid 0 inside, with every capability of that namespace (and
//!    none outside) for the steps below. Then, in `namespace` mode, it unshares a new pid
//!    namespace and **forks**: the original process
//!    becomes the *supervisor*, which never returns from `enter`: it forwards SIGTERM, SIGINT,
//!    SIGHUP and SIGQUIT to the child, waits for it and exits with its exit status (128 + N
//!    when the child died of signal N), as virtiofsd does. The child, pid 1 of the new pid
//!    namespace, gets SIGKILL when the supervisor dies (`PR_SET_PDEATHSIG`), unshares a new
//!    mount and network namespace, makes every mount a slave of the host's (host unmounts still
//!    propagate in, nothing propagates out) and mounts a fresh `/proc` of its own pid namespace,
//!    so the `/proc/self/fd` that `PassthroughFs::new` opens next shows no host process. Last,
//!    it bind-mounts the shared dir on itself, recursively (the future root, see below). It
//!    keeps an fd of its mount namespace, for an in-place upgrade (unless its supervisor is
//!    its upgrade launcher too, a [`Duty`] of a root run, which opens it for a launch).
//!    A process an in-place upgrade started (`join`: that fd, handed over, and unprivileged
//!    the old daemon's user namespace, which it joins instead of making one, with the same
//!    ids) forks its supervisor the same way, but its child *joins* the old daemon's mount
//!    namespace instead of making one (`setns`: root and cwd become that namespace's root,
//!    the share), with a
//!    new network namespace and a `/proc` of its own pid namespace mounted nowhere
//!    ([`Sandbox::take_proc_self_fd`]); from then on the shared dir is `/`
//!    ([`Sandbox::shared_dir`]) and step 2 does not `pivot_root` again.
//! 2. [`Sandbox::confine`], once the filesystem holds its fds (shared dir, `/proc/self/fd`) and
//!    the listening socket exists, before the first connection is accepted: `namespace`
//!    `pivot_root`s into that bind mount and detaches the old root; `chroot` chroots into the
//!    shared dir. From then on no host path outside the share resolves.
//!
//! Invariants:
//! - The share's root fd (opened by `PassthroughFs::new` between the two steps) must be on the
//!   mount that stays: in `namespace` mode the bind mount made in step 1, which `pivot_root`
//!   turns into `/`. An fd opened on the shared dir before that bind would sit on the copy of
//!   the host's mount that detaching the old root takes away, and with it every filesystem
//!   mounted below the share: the guest would see the empty directories under them. The bind
//!   is a slave of the host's mount (it is made after `MS_SLAVE | MS_REC`), so filesystems the
//!   host mounts or unmounts below a shared share later propagate into it.
//! - Nothing after [`Sandbox::confine`] may open a host path: the passthrough only uses the
//!   fds it holds; the pid file and the socket are created before; syslog (`--syslog`)
//!   connects to `/dev/log` when logging is set up, before `enter` (a syslog daemon restart
//!   afterwards is not followed: records then fall back as the logger decides).
//! - The pid file holds the supervisor's pid (it is written before the fork, by the process
//!   that becomes the supervisor): the pid the host sees and may signal (in
//!   `namespace` mode the serving child is pid 1 in its own namespace and its host pid is
//!   not the process the service manager started). A readiness notification to the service
//!   manager must likewise name the supervisor; a notification sent by the child before
//!   [`Sandbox::confine`] reaches the socket path but carries the child's pid.
//! - A process started by an in-place upgrade serves in the old daemon's mount namespace, never
//!   in one of its own: its inodes' keys and file handles name mounts by ID, and those IDs
//!   are the old mounts'. The supervisor removes the socket and pid file only once they are
//!   its child's (see `supervisor`).
//! - The fork happens before any thread exists (logging is the only thing set up before).
//! - When the namespace sandbox cannot be set up, `enter` fails with one line naming the
//!   fixes (`--sandbox=chroot` or `--sandbox=none`; unprivileged: enabling user namespaces,
//!   root, `--sandbox=none`; for id ranges: the `uidmap` tools and a subordinate id grant):
//!   the daemon never runs unconfined unless asked to.
//! - `--uid-map`/`--gid-map` apply only to an unprivileged `namespace` run, and
//!   `--sandbox=chroot` needs root (both as virtiofsd); either map may come without the other.

mod capabilities;
mod landlock;
mod root;
mod seccomp;
mod supervisor;
mod userns;

use std::ffi::CString;
use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

pub use capabilities::ModCaps;
pub use landlock::LandlockMode;
pub use seccomp::SeccompMode;
pub use supervisor::Duty;
pub use userns::IdMap;

use crate::option_values::option_values;
use landlock::Landlock;
use userns::{enter_user_namespace, join_user_namespace, UserNsError};

option_values! {
    /// Which sandbox to set up (`--sandbox`).
    pub enum SandboxMode {
        /// New pid, mount and network namespaces (and a user namespace when not root) and
        /// `pivot_root` into the shared dir (default).
        Namespace = "namespace",
        /// `chroot` into the shared dir, for hosts where namespaces are not available.
        Chroot = "chroot",
        /// No sandbox.
        None = "none",
    }
}

/// What the supervisor removes when the child has exited: the socket path and pid file the
/// daemon created (the child, confined, can no longer name them).
static CLEANUP: OnceLock<Vec<PathBuf>> = OnceLock::new();

/// What the sandbox needs to know (`cli` builds it from the command line).
#[derive(Clone, Debug)]
pub struct SandboxConfig {
    pub mode: SandboxMode,
    /// The directory that becomes the root.
    pub shared_dir: PathBuf,
    /// `--uid-map`/`--gid-map`: the id maps of an unprivileged run's user namespace.
    pub uid_map: Vec<IdMap>,
    pub gid_map: Vec<IdMap>,
    /// `--modcaps`.
    pub modcaps: ModCaps,
    /// File handles must work (`--inode-file-handles=mandatory`): CAP_DAC_READ_SEARCH is needed.
    pub handles_required: bool,
    pub landlock: LandlockMode,
    pub seccomp: SeccompMode,
}

/// A sandbox entered by [`Sandbox::enter`], to be completed by [`Sandbox::confine`].
#[derive(Debug)]
pub struct Sandbox {
    mode: SandboxMode,
    /// Whether the daemon runs in a user namespace of its own (an unprivileged `namespace` run).
    user_ns: bool,
    /// `namespace` mode: the mount namespace the daemon serves in (made by it, or joined), for
    /// the next process of an in-place upgrade.
    mount_ns: Option<OwnedFd>,
    /// Likewise its user namespace, in an unprivileged run.
    user_ns_fd: Option<OwnedFd>,
    /// Whether that namespace was joined (its root is the share already).
    joined: bool,
    /// A joined namespace has no `/proc`: `/proc/self/fd` of one mounted nowhere.
    proc_self_fd: Option<OwnedFd>,
}

/// What a process an in-place upgrade started joins under `--sandbox=namespace`: the old
/// daemon's mount namespace and, in an unprivileged run, its user namespace.
pub struct Join {
    pub mount: OwnedFd,
    pub user: Option<OwnedFd>,
}

/// In the serving child of the `namespace` mode: tells the supervisor that the socket and pid
/// file are this process's now (it took an in-place upgrade over). Elsewhere nothing.
pub fn took_over() {
    supervisor::tell(supervisor::TOOK_OVER);
}

/// In the serving child of the `namespace` mode: tells the supervisor that the socket and pid
/// file are another process's now (this one handed over and exits). Elsewhere nothing.
pub fn handed_over() {
    supervisor::tell(supervisor::HANDED_OVER);
}

fn os_err(what: &str) -> io::Error {
    let e = io::Error::last_os_error();
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

fn check(ret: libc::c_int, what: &str) -> io::Result<()> {
    if ret < 0 {
        Err(os_err(what))
    } else {
        Ok(())
    }
}

fn cstring(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))
}

impl Sandbox {
    /// Whether the supervisor of a run in `mode` stays on the host with the caller's
    /// credentials, so that it may serve the daemon as its upgrade launcher ([`Duty`]):
    /// under `namespace` as root. An unprivileged run's supervisor is in the sandbox's user
    /// namespace already (it must be, to make the pid namespace).
    pub fn supervisor_stays_on_host(mode: SandboxMode) -> bool {
        // SAFETY: plain syscall.
        mode == SandboxMode::Namespace && unsafe { libc::geteuid() } == 0
    }

    /// Step 1 (see the module doc). In `namespace` mode the calling process turns into the
    /// supervisor and never returns; the child returns. Must be called while single-threaded.
    /// Checks first that the capabilities the options need are there
    /// ([`capabilities::check_available`]).
    /// `created`: the socket and pid file the daemon created, which the supervisor removes
    /// when the child has exited. `join`: in `namespace` mode, the mount namespace of the
    /// daemon an in-place upgrade takes over from, joined instead of making one (the socket and
    /// pid file are then the child's only once it says it took over, [`took_over`]).
    /// `duty`: in `namespace` mode, a service the supervisor runs for the child (see
    /// [`Sandbox::supervisor_stays_on_host`]); it then removes what the child made, not the
    /// supervisor (`created` is not used).
    pub fn enter(
        cfg: &SandboxConfig,
        created: Vec<PathBuf>,
        join: Option<Join>,
        duty: Option<Duty>,
    ) -> Result<Sandbox, String> {
        let mode = cfg.mode;
        // SAFETY: plain syscall.
        let root = unsafe { libc::geteuid() } == 0;
        if !root && mode == SandboxMode::Chroot {
            return Err(
                "--sandbox=chroot needs root; pass --sandbox=namespace (a user \
                        namespace) or --sandbox=none"
                    .into(),
            );
        }
        if (root || mode != SandboxMode::Namespace)
            && !(cfg.uid_map.is_empty() && cfg.gid_map.is_empty())
        {
            return Err(
                "--uid-map/--gid-map only apply to a run as a user other than root \
                        with --sandbox=namespace"
                    .into(),
            );
        }
        let user_ns = !root && mode == SandboxMode::Namespace;
        capabilities::check_available(&cfg.modcaps, cfg.handles_required, user_ns)?;
        let _ = CLEANUP.set(created);
        if let (true, Some(join)) = (user_ns, &join) {
            let ns = join.user.as_ref().ok_or(
                "upgrade: the old daemon sent no user namespace to join (it runs as root)",
            )?;
            join_user_namespace(ns, &cfg.gid_map)
                .map_err(|e| format!("upgrade: cannot join the old daemon's sandbox ({e})"))?;
        } else if user_ns {
            enter_user_namespace(&cfg.uid_map, &cfg.gid_map).map_err(|e| match e {
                UserNsError::Unavailable(e) => format!(
                    "cannot set up the namespace sandbox: no user namespace ({e}); enable \
                     unprivileged user namespaces (sysctl user.max_user_namespaces, \
                     kernel.unprivileged_userns_clone), run as root (which --sandbox=chroot \
                     needs too), or pass --sandbox=none"
                ),
                UserNsError::Maps(msg) => format!(
                    "cannot set up the namespace sandbox: cannot set the id maps of its user \
                     namespace ({msg}); --uid-map/--gid-map ranges need newuidmap/newgidmap \
                     (package uidmap) and a grant to this user in /etc/subuid and \
                     /etc/subgid; or pass --sandbox=none"
                ),
                UserNsError::Other(e) => format!(
                    "cannot set up the namespace sandbox's user namespace ({e}); pass \
                     --sandbox=none to run unconfined"
                ),
            })?;
        }
        // Through the host's /proc, before any other namespace: ours now.
        let user_ns_fd = match user_ns {
            true => Some(OwnedFd::from(
                std::fs::File::open("/proc/self/ns/user")
                    .map_err(|e| format!("the sandbox's user namespace: {e}"))?,
            )),
            false => None,
        };
        let mut sandbox = Sandbox {
            mode,
            user_ns,
            mount_ns: None,
            user_ns_fd,
            joined: join.is_some(),
            proc_self_fd: None,
        };
        if mode != SandboxMode::Namespace {
            return Ok(sandbox);
        }
        supervisor::fork_supervisor(join.is_none(), duty).map_err(|e| {
            format!(
                "cannot set up the namespace sandbox ({e}); run as root with namespaces \
                     available, or pass --sandbox=chroot or --sandbox=none"
            )
        })?;
        match join {
            None => {
                let ns = root::enter_mount_namespace(&cfg.shared_dir).map_err(|e| {
                    format!(
                        "cannot set up the namespace sandbox ({e}); run as root with namespaces \
                         available, or pass --sandbox=chroot or --sandbox=none"
                    )
                })?;
                sandbox.mount_ns = Some(ns);
            }
            Some(Join { mount, .. }) => {
                let proc = root::join_mount_namespace(&mount)
                    .map_err(|e| format!("upgrade: cannot join the old daemon's sandbox ({e})"))?;
                sandbox.proc_self_fd = Some(proc);
                sandbox.mount_ns = Some(mount);
            }
        }
        Ok(sandbox)
    }

    /// The mount namespace the daemon serves in (`namespace` mode), for an in-place upgrade
    /// (taken: the sandbox needs it no more).
    pub fn take_mount_namespace(&mut self) -> Option<OwnedFd> {
        self.mount_ns.take()
    }

    /// The user namespace the daemon serves in (an unprivileged `namespace` run), for an
    /// in-place upgrade (taken, likewise).
    pub fn take_user_namespace(&mut self) -> Option<OwnedFd> {
        self.user_ns_fd.take()
    }

    /// Where the shared dir is from now on: `shared_dir` itself, or `/` in a joined namespace
    /// (its root is the share).
    pub fn shared_dir(&self, shared_dir: &Path) -> PathBuf {
        if self.joined {
            PathBuf::from("/")
        } else {
            shared_dir.to_path_buf()
        }
    }

    /// `/proc/self/fd` for the passthrough when the usual one does not resolve (a joined
    /// namespace); `None` otherwise.
    pub fn take_proc_self_fd(&mut self) -> Option<OwnedFd> {
        self.proc_self_fd.take()
    }

    /// Step 2 (see the module doc), in this order: make the shared dir the root of this
    /// process, restrict filesystem access with Landlock, drop capabilities (the kept set
    /// includes CAP_DAC_READ_SEARCH when `file_handles`), install the seccomp filter (last: it
    /// no longer allows the set-up syscalls). Must be called while single-threaded: Landlock
    /// domains and capabilities are per thread.
    pub fn confine(&self, cfg: &SandboxConfig, file_handles: bool) -> Result<(), String> {
        let landlock = Landlock::prepare(
            cfg.landlock,
            &self.shared_dir(&cfg.shared_dir),
            file_handles,
        )?;
        if !self.joined {
            self.enter_root(&cfg.shared_dir)?;
        }
        landlock.enforce()?;
        let kept = capabilities::drop_to(&capabilities::wanted(file_handles, &cfg.modcaps))?;
        let mut names: Vec<String> = kept.iter().map(|c| c.to_string()).collect();
        names.sort();
        log::info!(
            "sandbox {}{}, seccomp {:?}, capabilities kept: {}",
            self.mode.as_str(),
            if self.user_ns {
                " (in a user namespace)"
            } else {
                ""
            },
            cfg.seccomp,
            names.join(" ")
        );
        seccomp::install(cfg.seccomp)
    }

    fn enter_root(&self, shared_dir: &Path) -> Result<(), String> {
        let fail = |e: io::Error| {
            format!(
                "cannot confine the daemon to {} ({e}); pass --sandbox=none to run \
                 unconfined",
                shared_dir.display()
            )
        };
        match self.mode {
            SandboxMode::Namespace => root::pivot_into(shared_dir).map_err(fail),
            SandboxMode::Chroot => root::chroot_into(shared_dir).map_err(fail),
            SandboxMode::None => Ok(()),
        }
    }
}

/// Closes every fd from 3 up but those in `keep`.
pub fn close_all_but(keep: &[RawFd]) {
    let mut keep = keep.to_vec();
    keep.sort_unstable();
    let mut lo = 3;
    for next in keep.into_iter().chain([RawFd::MAX]) {
        if lo < next {
            // SAFETY: close_range only closes fds; none of these is used by this process
            // any more (the caller owns nothing else, or never uses it again).
            unsafe { libc::syscall(libc::SYS_close_range, lo as u32, (next - 1) as u32, 0u32) };
        }
        lo = lo.max(next.saturating_add(1));
    }
}

fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two fds.
    check(
        unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) },
        "pipe2",
    )?;
    // SAFETY: the fds were just created and are owned by nothing else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_and_print() {
        for m in [
            SandboxMode::Namespace,
            SandboxMode::Chroot,
            SandboxMode::None,
        ] {
            assert_eq!(m.as_str().parse::<SandboxMode>(), Ok(m));
        }
        assert!("jail".parse::<SandboxMode>().is_err());
    }
}
