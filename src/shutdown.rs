//! Signals: clean exit on SIGTERM and SIGINT (systemd's `systemctl stop`, Proxmox's post-stop,
//! Ctrl-C), and the metrics table in the log on SIGUSR1.
//!
//! The signals are blocked in the calling thread, so in every thread started after it, and one
//! thread takes them with `sigwait`: no async-signal-safety concerns, no crate needed.

use std::io;

/// Blocks SIGTERM, SIGINT and SIGUSR1 and starts a thread that runs `on_usr1` on each SIGUSR1
/// and, when SIGTERM or SIGINT arrives, `on_exit` with its number. Must be called before the
/// process starts any other thread (a thread started earlier keeps the default actions, which
/// kill the process).
pub fn on_signals(
    on_exit: impl FnOnce(i32) + Send + 'static,
    on_usr1: impl Fn() + Send + 'static,
) -> io::Result<()> {
    // SAFETY: sigset_t is plain data; sigemptyset initialises it.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointers to our sigset.
    unsafe {
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGUSR1);
    }
    // SAFETY: valid set pointer, null old-set pointer.
    let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || loop {
            let mut signo = 0;
            // SAFETY: valid pointers; the set lists blocked signals only.
            let rc = unsafe { libc::sigwait(&set, &mut signo) };
            match rc {
                0 if signo == libc::SIGUSR1 => on_usr1(),
                0 => {
                    on_exit(signo);
                    return;
                }
                _ => {
                    log::error!("sigwait: {}", io::Error::from_raw_os_error(rc));
                    return;
                }
            }
        })?;
    Ok(())
}

/// The name of a termination signal, for the log.
pub fn signal_name(signo: i32) -> &'static str {
    match signo {
        libc::SIGTERM => "SIGTERM",
        libc::SIGINT => "SIGINT",
        _ => "signal",
    }
}
