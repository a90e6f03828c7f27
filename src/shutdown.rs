//! Signals: clean exit on SIGTERM and SIGINT (systemd's `systemctl stop`, Proxmox's post-stop,
//! Ctrl-C), the metrics table in the log on SIGUSR1, and an in-place upgrade on SIGHUP.
//!
//! The signals are blocked in the calling thread, so in every thread started after it, and one
//! thread takes them with `sigwait`: no async-signal-safety concerns, no crate needed.

use std::io;

/// Blocks SIGTERM, SIGINT, SIGUSR1 and SIGHUP and starts a thread that runs `on_usr1` on each
/// SIGUSR1, `on_hup` on each SIGHUP (with the sender's pid and value when it came from
/// `sigqueue`, as `vhostfs upgrade` sends it) and, when SIGTERM or SIGINT arrives, `on_exit`
/// with its number. Must be called before the process starts any other thread (a thread started
/// earlier keeps the default actions, which kill the process).
pub fn on_signals(
    on_exit: impl FnOnce(i32) + Send + 'static,
    on_usr1: impl Fn() + Send + 'static,
    on_hup: impl Fn(Option<(u32, u32)>) + Send + 'static,
) -> io::Result<()> {
    // SAFETY: sigset_t is plain data; sigemptyset initialises it.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointers to our sigset.
    unsafe {
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGUSR1);
        libc::sigaddset(&mut set, libc::SIGHUP);
    }
    // SAFETY: valid set pointer, null old-set pointer.
    let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || loop {
            // SAFETY: siginfo_t is plain data, filled by sigwaitinfo.
            let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
            // SAFETY: valid pointers; the set lists blocked signals only.
            let signo = unsafe { libc::sigwaitinfo(&set, &mut info) };
            match signo {
                libc::SIGUSR1 => on_usr1(),
                libc::SIGHUP => on_hup(queued_by(&info)),
                -1 => {
                    let e = io::Error::last_os_error();
                    if e.kind() == io::ErrorKind::Interrupted {
                        continue;
                    }
                    log::error!("sigwaitinfo: {e}");
                    return;
                }
                _ => {
                    on_exit(signo);
                    return;
                }
            }
        })?;
    Ok(())
}

/// `(pid, value)` of a signal sent with `sigqueue`; `None` for one sent by `kill`. A sender
/// outside our pid namespace has pid 0 here: the namespace sandbox's supervisor, forwarding
/// it, put the pid of the process that sent it in the value's high 32 bits.
fn queued_by(info: &libc::siginfo_t) -> Option<(u32, u32)> {
    if info.si_code != libc::SI_QUEUE {
        return None;
    }
    // SAFETY: for SI_QUEUE the kernel filled si_pid and si_value.
    let (pid, value) = unsafe { (info.si_pid(), info.si_value()) };
    let value = value.sival_ptr as usize as u64;
    let pid = match pid {
        0 => (value >> 32) as u32,
        p => p as u32,
    };
    Some((pid, value as u32))
}

/// The name of a termination signal, for the log.
pub fn signal_name(signo: i32) -> &'static str {
    match signo {
        libc::SIGTERM => "SIGTERM",
        libc::SIGINT => "SIGINT",
        _ => "signal",
    }
}
