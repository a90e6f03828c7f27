//! `--sandbox=namespace|chroot|none`: confine the daemon's view of the host to the shared dir.
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
//!    it bind-mounts the shared dir on itself, recursively (the future root, see below).
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
//! - The pid file holds [`supervisor_pid`]: the pid the host sees and may signal (in
//!   `namespace` mode the serving child is pid 1 in its own namespace and its host pid is
//!   not the process the service manager started). A readiness notification to the service
//!   manager must likewise name the supervisor; a notification sent by the child before
//!   [`Sandbox::confine`] reaches the socket path but carries the child's pid.
//! - The fork happens before any thread exists (logging is the only thing set up before).
//! - When the namespace sandbox cannot be set up, `enter` fails with one line naming the
//!   fixes (`--sandbox=chroot` or `--sandbox=none`; unprivileged: enabling user namespaces,
//!   root, `--sandbox=none`; for id ranges: the `uidmap` tools and a subordinate id grant):
//!   the daemon never runs unconfined unless asked to.
//! - `--uid-map`/`--gid-map` apply only to an unprivileged `namespace` run, and
//!   `--sandbox=chroot` needs root (both as virtiofsd); either map may come without the other.

use std::ffi::CString;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::OnceLock;

use crate::capabilities;
use crate::cli::Config;
use crate::landlock::Landlock;
use crate::seccomp;

/// Which sandbox to set up (`--sandbox`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SandboxMode {
    /// New pid, mount and network namespaces (and a user namespace when not root) and
    /// `pivot_root` into the shared dir (default).
    Namespace,
    /// `chroot` into the shared dir, for hosts where namespaces are not available.
    Chroot,
    /// No sandbox.
    None,
}

impl SandboxMode {
    /// The option value naming this mode.
    pub fn as_str(self) -> &'static str {
        match self {
            SandboxMode::Namespace => "namespace",
            SandboxMode::Chroot => "chroot",
            SandboxMode::None => "none",
        }
    }
}

impl std::str::FromStr for SandboxMode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "namespace" => Ok(SandboxMode::Namespace),
            "chroot" => Ok(SandboxMode::Chroot),
            "none" => Ok(SandboxMode::None),
            _ => Err("expected one of: namespace, chroot, none".into()),
        }
    }
}

/// The pid of the process the host started and should signal: the supervisor in `namespace`
/// mode, else this process. Written into the pid file.
pub fn supervisor_pid() -> u32 {
    *SUPERVISOR.get().unwrap_or(&std::process::id())
}

static SUPERVISOR: OnceLock<u32> = OnceLock::new();

/// What the supervisor removes when the child has exited: the socket path and pid file the
/// daemon created (the child, confined, can no longer name them).
static CLEANUP: OnceLock<Vec<std::path::PathBuf>> = OnceLock::new();

/// The child the supervisor forwards signals to (0 before the fork).
static CHILD: AtomicI32 = AtomicI32::new(0);

/// A sandbox entered by [`Sandbox::enter`], to be completed by [`Sandbox::confine`].
#[derive(Debug)]
pub struct Sandbox {
    mode: SandboxMode,
    /// Whether the daemon runs in a user namespace of its own (an unprivileged `namespace` run).
    user_ns: bool,
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
    /// Step 1 (see the module doc). In `namespace` mode the calling process turns into the
    /// supervisor and never returns; the child returns. Must be called while single-threaded.
    /// Checks first that the capabilities the options need are there
    /// ([`capabilities::check_available`]).
    /// `created`: the socket and pid file the daemon created, which the supervisor removes
    /// when the child has exited.
    pub fn enter(cfg: &Config, created: Vec<std::path::PathBuf>) -> Result<Sandbox, String> {
        let mode = cfg.sandbox;
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
        capabilities::check_available(&cfg.modcaps, cfg.inode_file_handles, user_ns)?;
        let _ = CLEANUP.set(created);
        if user_ns {
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
        if mode == SandboxMode::Namespace {
            enter_namespaces(&cfg.shared_dir).map_err(|e| {
                format!(
                    "cannot set up the namespace sandbox ({e}); run as root with namespaces \
                     available, or pass --sandbox=chroot or --sandbox=none"
                )
            })?;
        }
        Ok(Sandbox { mode, user_ns })
    }

    /// Step 2 (see the module doc), in this order: make the shared dir the root of this
    /// process, restrict filesystem access with Landlock, drop capabilities (the kept set
    /// includes CAP_DAC_READ_SEARCH when `file_handles`), install the seccomp filter (last: it
    /// no longer allows the set-up syscalls). Must be called while single-threaded: Landlock
    /// domains and capabilities are per thread.
    pub fn confine(&self, cfg: &Config, file_handles: bool) -> Result<(), String> {
        let landlock = Landlock::prepare(cfg.landlock, &cfg.shared_dir)?;
        self.enter_root(&cfg.shared_dir)?;
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
            SandboxMode::Namespace => pivot_into(shared_dir).map_err(fail),
            SandboxMode::Chroot => chroot_into(shared_dir).map_err(fail),
            SandboxMode::None => Ok(()),
        }
    }
}

/// One range of a user namespace's id map (`--uid-map`/`--gid-map`), in virtiofsd's syntax
/// `:inside:outside:count:` (any non-alphanumeric delimiter, the same at every place).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IdMap {
    /// First id inside the namespace.
    pub inside: u32,
    /// First id on the host it maps to.
    pub outside: u32,
    /// Number of ids.
    pub count: u32,
}

impl std::str::FromStr for IdMap {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let syntax = || "expected :namespace_id:host_id:count:".to_string();
        let delim = s.chars().next().filter(|c| !c.is_alphanumeric());
        let delim = delim.ok_or_else(syntax)?;
        let inner = s
            .strip_prefix(delim)
            .and_then(|r| r.strip_suffix(delim))
            .ok_or_else(syntax)?;
        let fields: Vec<u32> = inner
            .split(delim)
            .map(|f| f.parse().map_err(|e| format!("'{f}': {e}")))
            .collect::<Result<_, _>>()?;
        match fields[..] {
            [inside, outside, count] => Ok(IdMap {
                inside,
                outside,
                count,
            }),
            _ => Err(syntax()),
        }
    }
}

/// Why [`enter_user_namespace`] failed: each has its own fixes.
enum UserNsError {
    /// unshare(CLONE_NEWUSER) refused: user namespaces are disabled or exhausted.
    Unavailable(io::Error),
    /// The helper could not write the id maps (newuidmap/newgidmap missing or refusing).
    Maps(String),
    Other(io::Error),
}

impl From<io::Error> for UserNsError {
    fn from(e: io::Error) -> Self {
        UserNsError::Other(e)
    }
}

/// unshare(NEWUSER) for an unprivileged run, the id maps written from outside by a helper
/// child (see the module doc), then uid and gid 0 inside.
fn enter_user_namespace(uid_map: &[IdMap], gid_map: &[IdMap]) -> Result<(), UserNsError> {
    // SAFETY: plain syscalls.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    let (go_r, go_w) = pipe()?;
    let (result_r, result_w) = pipe()?;
    // SAFETY: the process is single-threaded (module invariant).
    let helper = unsafe { libc::fork() };
    if helper < 0 {
        return Err(os_err("fork").into());
    }
    if helper == 0 {
        drop((go_w, result_r));
        let mut go = [0u8; 1];
        let mut code = 1;
        if std::fs::File::from(go_r).read_exact(&mut go).is_ok() {
            // SAFETY: plain syscall; the parent waits for this child, so it is still there.
            let parent = unsafe { libc::getppid() };
            code = match write_id_maps(parent, uid, gid, uid_map, gid_map) {
                Ok(()) => 0,
                Err(msg) => {
                    let _ = std::fs::File::from(result_w).write_all(msg.as_bytes());
                    1
                }
            };
        }
        // SAFETY: leaving the helper without running the parent's destructors.
        unsafe { libc::_exit(code) };
    }
    drop((go_r, result_w));
    // SAFETY: plain syscall.
    let unshared = check(
        unsafe { libc::unshare(libc::CLONE_NEWUSER) },
        "unshare(CLONE_NEWUSER)",
    );
    // Without the go-ahead (unshare failed) the helper exits at once.
    let mut go = std::fs::File::from(go_w);
    if unshared.is_ok() {
        go.write_all(b"1")?;
    }
    drop(go);
    let mut msg = String::new();
    std::fs::File::from(result_r).read_to_string(&mut msg)?;
    let mut status = 0;
    // SAFETY: valid out pointer; `helper` is our child.
    if unsafe { libc::waitpid(helper, &mut status, 0) } < 0 {
        return Err(os_err("waitpid(id map helper)").into());
    }
    unshared.map_err(UserNsError::Unavailable)?;
    if !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
        return Err(UserNsError::Maps(if msg.is_empty() {
            "the id map helper failed".to_string()
        } else {
            msg
        }));
    }
    // SAFETY: plain syscalls on this (only) thread's credentials.
    unsafe {
        if !gid_map.is_empty() {
            // newgidmap leaves setgroups allowed: drop the caller's supplementary groups.
            check(libc::setgroups(0, std::ptr::null()), "setgroups")?;
        }
        check(libc::setresgid(0, 0, 0), "setresgid(0): gid 0 not mapped")?;
        check(libc::setresuid(0, 0, 0), "setresuid(0): uid 0 not mapped")?;
    }
    Ok(())
}

/// Writes the id maps of `pid`'s user namespace. Without a map the caller's id becomes 0 (a
/// single-id map an unprivileged process may write itself, with setgroups denied); ranges
/// need the setuid helpers `newuidmap`/`newgidmap` (package `uidmap`, `/etc/subuid`).
fn write_id_maps(
    pid: libc::pid_t,
    uid: u32,
    gid: u32,
    uid_map: &[IdMap],
    gid_map: &[IdMap],
) -> Result<(), String> {
    let proc = |file: &str, data: String| {
        std::fs::write(format!("/proc/{pid}/{file}"), data)
            .map_err(|e| format!("writing /proc/{pid}/{file}: {e}"))
    };
    if uid_map.is_empty() {
        proc("uid_map", format!("0 {uid} 1"))?;
    } else {
        run_map_tool("newuidmap", pid, uid_map)?;
    }
    if gid_map.is_empty() {
        proc("setgroups", "deny".into())?;
        proc("gid_map", format!("0 {gid} 1"))
    } else {
        run_map_tool("newgidmap", pid, gid_map)
    }
}

fn run_map_tool(tool: &str, pid: libc::pid_t, map: &[IdMap]) -> Result<(), String> {
    let mut cmd = std::process::Command::new(tool);
    cmd.arg(pid.to_string());
    for m in map {
        cmd.args([m.inside, m.outside, m.count].map(|n| n.to_string()));
    }
    let out = cmd
        .output()
        .map_err(|e| format!("cannot run {tool} (package uidmap), which id ranges need: {e}"))?;
    if out.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    Err(format!(
        "{tool} failed ({}): {}",
        out.status,
        stderr.trim().replace('\n', "; ")
    ))
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

/// unshare(NEWPID), fork; the parent supervises, the child sets up its mount/net namespaces
/// and bind-mounts `shared_dir` on itself (the root [`pivot_into`] enters).
fn enter_namespaces(shared_dir: &Path) -> io::Result<()> {
    // SAFETY: plain syscall; CLONE_NEWPID only affects children created afterwards.
    check(
        unsafe { libc::unshare(libc::CLONE_NEWPID) },
        "unshare(CLONE_NEWPID)",
    )?;
    // Lets the child notice a supervisor that died before PR_SET_PDEATHSIG was in force.
    let (alive_r, alive_w) = pipe()?;
    let parent = std::process::id();
    // SAFETY: the process is single-threaded (module invariant), so the child may run
    // arbitrary code after fork.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(os_err("fork"));
    }
    if pid > 0 {
        drop(alive_r);
        supervise(pid, alive_w);
    }
    drop(alive_w);
    let _ = SUPERVISOR.set(parent);
    // SAFETY: plain prctl.
    check(
        unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) },
        "prctl(PR_SET_PDEATHSIG)",
    )?;
    let mut pfd = libc::pollfd {
        fd: alive_r.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd; a hang-up means the supervisor is gone.
    if unsafe { libc::poll(&mut pfd, 1, 0) } != 0 {
        // SAFETY: exiting the child without running the parent's destructors.
        unsafe { libc::_exit(1) };
    }
    drop(alive_r);
    install_child_signal_handlers()?;
    // SAFETY: plain syscall.
    check(
        unsafe { libc::unshare(libc::CLONE_NEWNS | libc::CLONE_NEWNET) },
        "unshare(CLONE_NEWNS | CLONE_NEWNET)",
    )?;
    // SAFETY: NUL-terminated literals; null data.
    check(
        unsafe {
            libc::mount(
                std::ptr::null(),
                c"/".as_ptr(),
                std::ptr::null(),
                libc::MS_SLAVE | libc::MS_REC,
                std::ptr::null(),
            )
        },
        "making / a slave mount",
    )?;
    // SAFETY: as above.
    check(
        unsafe {
            libc::mount(
                c"proc".as_ptr(),
                c"/proc".as_ptr(),
                c"proc".as_ptr(),
                libc::MS_NODEV | libc::MS_NOEXEC | libc::MS_NOSUID | libc::MS_RELATIME,
                std::ptr::null(),
            )
        },
        "mounting /proc",
    )?;
    bind_on_itself(shared_dir)
}

/// Bind-mounts `dir` on itself with every mount below it: the mount `pivot_into` makes the
/// root, on which the share's root fd must be opened (module invariants).
fn bind_on_itself(dir: &Path) -> io::Result<()> {
    let c = cstring(dir)?;
    // SAFETY: valid C strings; null fs type and data.
    check(
        unsafe {
            libc::mount(
                c.as_ptr(),
                c.as_ptr(),
                std::ptr::null(),
                libc::MS_BIND | libc::MS_REC,
                std::ptr::null(),
            )
        },
        "bind-mounting the shared dir",
    )
}

extern "C" fn forward_signal(sig: libc::c_int) {
    let child = CHILD.load(Ordering::Relaxed);
    if child > 0 {
        // SAFETY: kill is async-signal-safe.
        unsafe { libc::kill(child, sig) };
    }
}

extern "C" fn exit_on_signal(sig: libc::c_int) {
    // SAFETY: _exit is async-signal-safe. As pid 1 of its namespace the child would ignore a
    // signal it has no handler for, so it exits the way a default action would be reported.
    unsafe { libc::_exit(128 + sig) };
}

const FORWARDED: [libc::c_int; 4] = [libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGQUIT];

fn set_handler(sig: libc::c_int, handler: extern "C" fn(libc::c_int)) -> io::Result<()> {
    // SAFETY: a zeroed sigaction with a plain handler and an empty mask is valid.
    let mut sa: libc::sigaction = unsafe { std::mem::zeroed() };
    sa.sa_sigaction = handler as usize;
    sa.sa_flags = libc::SA_RESTART;
    // SAFETY: valid sigaction; the handler only calls async-signal-safe functions.
    check(
        unsafe { libc::sigaction(sig, &sa, std::ptr::null_mut()) },
        "sigaction",
    )
}

/// The child is pid 1 of its namespace: without handlers, forwarded signals would be ignored.
/// The daemon may install its own handlers later (they replace these).
fn install_child_signal_handlers() -> io::Result<()> {
    FORWARDED
        .iter()
        .try_for_each(|&sig| set_handler(sig, exit_on_signal))
}

/// The supervisor: forward signals to `child`, wait for it, exit with its status.
fn supervise(child: libc::pid_t, _alive: OwnedFd) -> ! {
    CHILD.store(child, Ordering::Relaxed);
    for sig in FORWARDED {
        if let Err(e) = set_handler(sig, forward_signal) {
            log::warn!("sandbox supervisor: cannot forward signal {sig}: {e}");
        }
    }
    let mut status = 0;
    loop {
        // SAFETY: valid out pointer.
        let ret = unsafe { libc::waitpid(child, &mut status, 0) };
        if ret == child {
            break;
        }
        if io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            log::error!(
                "sandbox supervisor: waitpid: {}",
                io::Error::last_os_error()
            );
            std::process::exit(1);
        }
    }
    for path in CLEANUP.get().into_iter().flatten() {
        let _ = std::fs::remove_file(path);
    }
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        128 + libc::WTERMSIG(status)
    };
    std::process::exit(code)
}

/// Pivots the root into `dir` (the bind mount [`bind_on_itself`] made) and detaches the old
/// root, with every mount below it that is not also below `dir`.
fn pivot_into(dir: &Path) -> io::Result<()> {
    let c = cstring(dir)?;
    let old_root = open_dir(c"/")?;
    let new_root = open_dir(&c)?;
    // SAFETY: plain syscalls on fds we hold and NUL-terminated literals.
    unsafe {
        check(libc::fchdir(new_root.as_raw_fd()), "fchdir(shared dir)")?;
        check(
            libc::syscall(libc::SYS_pivot_root, c".".as_ptr(), c".".as_ptr()) as libc::c_int,
            "pivot_root",
        )?;
        // The old root is now stacked under the new one at "/"; reach it through its fd.
        check(libc::fchdir(old_root.as_raw_fd()), "fchdir(old root)")?;
        check(
            libc::mount(
                std::ptr::null(),
                c".".as_ptr(),
                std::ptr::null(),
                libc::MS_SLAVE | libc::MS_REC,
                std::ptr::null(),
            ),
            "making the old root a slave",
        )?;
        check(
            libc::umount2(c".".as_ptr(), libc::MNT_DETACH),
            "detaching the old root",
        )?;
        check(libc::chdir(c"/".as_ptr()), "chdir(/)")
    }
}

fn chroot_into(dir: &Path) -> io::Result<()> {
    let c = cstring(dir)?;
    // SAFETY: valid C strings.
    unsafe {
        check(libc::chroot(c.as_ptr()), "chroot")?;
        check(libc::chdir(c"/".as_ptr()), "chdir(/)")
    }
}

fn open_dir(path: &std::ffi::CStr) -> io::Result<OwnedFd> {
    // SAFETY: valid C string.
    let fd = unsafe {
        libc::open(
            path.as_ptr(),
            libc::O_DIRECTORY | libc::O_RDONLY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(os_err("open"));
    }
    // SAFETY: a fresh fd we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
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

    #[test]
    fn supervisor_pid_is_ours_without_a_fork() {
        assert_eq!(supervisor_pid(), std::process::id());
    }
}
