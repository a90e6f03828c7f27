//! The supervisor of the namespace sandbox: the original process forks the serving child into
//! a new pid namespace, forwards signals to it, waits for it and exits with its status; the
//! child (pid 1 of its namespace) dies with its supervisor.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicI32, Ordering};

use super::{check, os_err, pipe, CLEANUP};

/// The child the supervisor forwards signals to (0 before the fork).
static CHILD: AtomicI32 = AtomicI32::new(0);

/// unshare(NEWPID) and fork: the parent becomes the supervisor and never returns; the child,
/// pid 1 of the new pid namespace, returns.
pub(super) fn fork_supervisor() -> io::Result<()> {
    // SAFETY: plain syscall; CLONE_NEWPID only affects children created afterwards.
    check(
        unsafe { libc::unshare(libc::CLONE_NEWPID) },
        "unshare(CLONE_NEWPID)",
    )?;
    // Lets the child notice a supervisor that died before PR_SET_PDEATHSIG was in force.
    let (alive_r, alive_w) = pipe()?;
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
    Ok(())
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
/// Forwarded too, but the child needs no handler of its own for them: the daemon blocks them
/// and takes them with `sigwait` (SIGUSR1: the metrics table in the log), and a signal pid 1
/// has no handler for is ignored rather than fatal.
const FORWARDED_ONLY: [libc::c_int; 1] = [libc::SIGUSR1];

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
    for sig in FORWARDED.into_iter().chain(FORWARDED_ONLY) {
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
