//! The supervisor of the namespace sandbox: the original process forks the serving child into
//! a new pid namespace, forwards signals to it, waits for it and exits with its status; the
//! child (pid 1 of its namespace) dies with its supervisor.
//!
//! An in-place upgrade replaces both: the new process is a supervisor of its own, with its own
//! child. The child tells its supervisor over a pipe when the socket and pid file become its
//! own ([`TOOK_OVER`]) and when they stop being so ([`HANDED_OVER`]); the supervisor removes
//! them after the child exits only if they are its own then. So the old supervisor, whose
//! child exits once the new process serves, leaves them to the new one, and a new process
//! that fails before taking over leaves them to the old one.
//!
//! A supervisor may have a [`Duty`] besides (as root, the upgrade launcher's service): it then
//! keeps only the duty's fds, does it until its child is gone, and the duty, not the status
//! pipe, decides what is removed.

use std::io::{self, Read};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::OnceLock;

use super::{check, close_all_but, os_err, pipe, CLEANUP};

/// The child the supervisor forwards signals to (0 before the fork).
static CHILD: AtomicI32 = AtomicI32::new(0);

/// In the child: the write end of the pipe its supervisor reads once it has exited. Held by
/// the child alone (close-on-exec, and the child forks nothing), so the supervisor reads it
/// to its end.
static STATUS: OnceLock<OwnedFd> = OnceLock::new();

/// On the status pipe: the socket and pid file are the child's now (an upgrade took over).
pub(super) const TOOK_OVER: u8 = b'T';
/// On the status pipe: they are another process's now (the child handed over).
pub(super) const HANDED_OVER: u8 = b'U';

/// Tells the supervisor (if this process has one) `what` ([`TOOK_OVER`], [`HANDED_OVER`]).
pub(super) fn tell(what: u8) {
    let Some(fd) = STATUS.get() else { return };
    // SAFETY: a one-byte write from a valid buffer to an fd we hold (a pipe write this small
    // is atomic).
    if unsafe { libc::write(fd.as_raw_fd(), [what].as_ptr().cast(), 1) } != 1 {
        log::warn!(
            "cannot tell the sandbox supervisor: {}",
            io::Error::last_os_error()
        );
    }
}

/// A service the supervisor runs for its child besides supervising it (the upgrade launcher's),
/// instead of a process of its own doing it.
///
/// Invariant: the duty's channel is the child's line to its supervisor: the child holds one end
/// (`child_end`), the supervisor alone the other, so its hang-up means the supervisor is gone,
/// and the duty returns once the child is (or has closed its end).
pub struct Duty {
    /// Runs in the supervisor with the child's host pid, until the child's end closes. It
    /// removes what the child made on the host once the child is gone (the supervisor then
    /// leaves the socket and pid file to it).
    pub run: Box<dyn FnOnce(libc::pid_t)>,
    /// The fds `run` uses: the supervisor closes every other one but stdio and the log's.
    pub fds: Vec<RawFd>,
    /// The child's end of the duty's channel.
    pub child_end: RawFd,
}

/// What links the child to its supervisor: a duty's channel, or two pipes (`alive`: its
/// hang-up tells the child the supervisor is gone; `status`: [`TOOK_OVER`], [`HANDED_OVER`]).
enum Lines {
    Duty(Duty),
    Pipes {
        alive: (OwnedFd, OwnedFd),
        status: (OwnedFd, OwnedFd),
    },
}

/// unshare(NEWPID) and fork: the parent becomes the supervisor and never returns; the child,
/// pid 1 of the new pid namespace, returns. `owns`: whether the socket and pid file are the
/// child's from the start (not when an in-place upgrade started this process). `duty`: what
/// the supervisor also does (it then removes nothing itself, and needs no pipes to the child).
pub(super) fn fork_supervisor(owns: bool, duty: Option<Duty>) -> io::Result<()> {
    // A supervisor with a duty starts processes (a launch): in the host's pid namespace, not
    // in its child's, whose end would kill them.
    let host_pids = match duty {
        Some(_) => Some(OwnedFd::from(std::fs::File::open("/proc/self/ns/pid")?)),
        None => None,
    };
    // SAFETY: plain syscall; CLONE_NEWPID only affects children created afterwards.
    check(
        unsafe { libc::unshare(libc::CLONE_NEWPID) },
        "unshare(CLONE_NEWPID)",
    )?;
    // Lets the child notice a supervisor that died before PR_SET_PDEATHSIG was in force (a
    // duty's channel, else a pipe), and tells the supervisor what became of the socket and pid
    // file (with a duty, its service hears it).
    let lines = match duty {
        Some(duty) => Lines::Duty(duty),
        None => Lines::Pipes {
            alive: pipe()?,
            status: pipe()?,
        },
    };
    // SAFETY: the process is single-threaded (module invariant), so the child may run
    // arbitrary code after fork.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(os_err("fork"));
    }
    if pid > 0 {
        match lines {
            Lines::Duty(duty) => supervise_with(pid, duty, host_pids),
            Lines::Pipes {
                alive: (alive_r, alive_w),
                status: (status_r, status_w),
            } => {
                drop((alive_r, status_w));
                supervise(pid, alive_w, status_r, owns)
            }
        }
    }
    let alive = match lines {
        Lines::Duty(duty) => {
            let end = duty.child_end;
            drop(duty);
            // SAFETY: the duty's channel end, which the caller holds open.
            unsafe { std::os::fd::BorrowedFd::borrow_raw(end) }.try_clone_to_owned()?
        }
        Lines::Pipes {
            alive: (alive_r, alive_w),
            status: (status_r, status_w),
        } => {
            drop((alive_w, status_r));
            let _ = STATUS.set(status_w);
            alive_r
        }
    };
    // SAFETY: plain prctl.
    check(
        unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) },
        "prctl(PR_SET_PDEATHSIG)",
    )?;
    let mut pfd = libc::pollfd {
        fd: alive.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd; a hang-up means the supervisor is gone.
    if unsafe { libc::poll(&mut pfd, 1, 0) } != 0 {
        // SAFETY: exiting the child without running the parent's destructors.
        unsafe { libc::_exit(1) };
    }
    drop(alive);
    install_child_signal_handlers()?;
    Ok(())
}

/// The start of a siginfo of `sigqueue` as the kernel lays it out (`si_value` after five ints,
/// pointer-aligned), to set the value of one forwarded.
#[repr(C)]
struct QueuedInfo {
    _signo: libc::c_int,
    _errno: libc::c_int,
    _code: libc::c_int,
    _pid: libc::c_int,
    _uid: libc::c_int,
    value: usize,
}

/// Forwards `sig` to the child. One sent with `sigqueue` (`vhostfs upgrade`) goes on with
/// its value, and its sender's pid in the value's high 32 bits: the kernel gives the child 0
/// as the pid of a sender outside its pid namespace (`shutdown` reads it back).
extern "C" fn forward_signal(sig: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    let child = CHILD.load(Ordering::Relaxed);
    if child <= 0 {
        return;
    }
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler, and for SI_QUEUE it
    // holds si_pid and si_value (QueuedInfo's layout); kill and the raw rt_sigqueueinfo
    // syscall are async-signal-safe. A negative si_code (SI_QUEUE) may be sent to another
    // process.
    unsafe {
        if info.is_null() || (*info).si_code != libc::SI_QUEUE {
            libc::kill(child, sig);
            return;
        }
        let mut fwd = *info;
        let sender = (*info).si_pid() as u32 as u64;
        let value = (*info).si_value().sival_ptr as usize as u64 & 0xffff_ffff;
        (*(&mut fwd as *mut libc::siginfo_t).cast::<QueuedInfo>()).value =
            (sender << 32 | value) as usize;
        libc::syscall(libc::SYS_rt_sigqueueinfo, child, sig, &fwd);
    }
}

extern "C" fn exit_on_signal(sig: libc::c_int) {
    // SAFETY: _exit is async-signal-safe. As pid 1 of its namespace the child would ignore a
    // signal it has no handler for, so it exits the way a default action would be reported.
    unsafe { libc::_exit(128 + sig) };
}

const FORWARDED: [libc::c_int; 4] = [libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGQUIT];
/// Forwarded too, but the child needs no handler of its own for them: the daemon blocks them
/// and takes them with `sigwait` (SIGUSR1: the metrics table in the log), and a signal pid 1
/// has no handler for is ignored rather than fatal.
const FORWARDED_ONLY: [libc::c_int; 1] = [libc::SIGUSR1];

/// Installs `handler` (a plain one, or with `SA_SIGINFO` in `flags` one taking the siginfo).
fn set_handler(sig: libc::c_int, handler: usize, flags: libc::c_int) -> io::Result<()> {
    // SAFETY: a zeroed sigaction with a handler and an empty mask is valid.
    let mut sa: libc::sigaction = unsafe { std::mem::zeroed() };
    sa.sa_sigaction = handler;
    sa.sa_flags = libc::SA_RESTART | flags;
    // SAFETY: valid sigaction; the handler only calls async-signal-safe functions.
    check(
        unsafe { libc::sigaction(sig, &sa, std::ptr::null_mut()) },
        "sigaction",
    )
}

/// The child is pid 1 of its namespace: without handlers, forwarded signals would be ignored.
/// The daemon may install its own handlers later (they replace these).
fn install_child_signal_handlers() -> io::Result<()> {
    FORWARDED.iter().try_for_each(|&sig| {
        set_handler(
            sig,
            exit_on_signal as extern "C" fn(libc::c_int) as usize,
            0,
        )
    })
}

/// Forwards the signals [`FORWARDED`] and [`FORWARDED_ONLY`] to `child` from here on.
fn forward_signals(child: libc::pid_t) {
    CHILD.store(child, Ordering::Relaxed);
    type Forward = extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void);
    let forward = forward_signal as Forward as usize;
    for sig in FORWARDED.into_iter().chain(FORWARDED_ONLY) {
        if let Err(e) = set_handler(sig, forward, libc::SA_SIGINFO) {
            log::warn!("sandbox supervisor: cannot forward signal {sig}: {e}");
        }
    }
}

/// The supervisor with a duty: forward signals to `child`, keep only the fds the duty uses, do
/// it until the child is gone, then wait for the child and exit with its status.
/// `host_pids`: the pid namespace its further children go in.
fn supervise_with(child: libc::pid_t, duty: Duty, host_pids: Option<OwnedFd>) -> ! {
    forward_signals(child);
    if let Some(ns) = host_pids {
        // SAFETY: setns with an fd we hold; for CLONE_NEWPID it sets the namespace of the
        // children created from now on (the caller's own is always allowed).
        if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWPID) } != 0 {
            log::error!(
                "sandbox supervisor: cannot start processes outside the sandbox's pid \
                 namespace ({}): an upgrade's new process would die with this one",
                io::Error::last_os_error()
            );
        }
    }
    close_all_but(
        &duty
            .fds
            .iter()
            .copied()
            .chain(crate::logger::fd())
            .collect::<Vec<_>>(),
    );
    (duty.run)(child);
    exit_with(wait_for(child))
}

/// Waits for `child` to exit (through interrupting signals): its wait status.
fn wait_for(child: libc::pid_t) -> libc::c_int {
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
    status
}

/// Exits as the child did (a signal's death as the shell reports it).
fn exit_with(status: libc::c_int) -> ! {
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        128 + libc::WTERMSIG(status)
    };
    std::process::exit(code)
}

/// The supervisor: forward signals to `child`, wait for it, exit with its status; remove the
/// socket and pid file if they are the child's when it exits (`owns`, then what it said on
/// `told`).
fn supervise(child: libc::pid_t, _alive: OwnedFd, told: OwnedFd, mut owns: bool) -> ! {
    forward_signals(child);
    let status = wait_for(child);
    let mut said = Vec::new();
    let _ = std::fs::File::from(told).read_to_end(&mut said);
    for &what in &said {
        owns = match what {
            TOOK_OVER => true,
            HANDED_OVER => false,
            _ => owns,
        };
    }
    if owns {
        for path in CLEANUP.get().into_iter().flatten() {
            let _ = std::fs::remove_file(path);
        }
    }
    exit_with(status)
}
