//! Clean exit on SIGTERM and SIGINT (systemd's `systemctl stop`, Proxmox's post-stop, Ctrl-C).
//!
//! The signals are blocked in the calling thread, so in every thread started after it, and one
//! thread takes them with `sigwait`: no async-signal-safety concerns, no crate needed.

use std::io;

/// Blocks SIGTERM and SIGINT and starts a thread that, when one arrives, runs `on_signal` with
/// its number. Must be called before the process starts any other thread (a thread started
/// earlier keeps the default action, which kills the process).
pub fn on_termination(on_signal: impl FnOnce(i32) + Send + 'static) -> io::Result<()> {
    // SAFETY: sigset_t is plain data; sigemptyset initialises it.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointers to our sigset.
    unsafe {
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
    }
    // SAFETY: valid set pointer, null old-set pointer.
    let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            let mut signo = 0;
            // SAFETY: valid pointers; the set lists blocked signals only.
            let rc = unsafe { libc::sigwait(&set, &mut signo) };
            if rc == 0 {
                on_signal(signo);
            } else {
                log::error!("sigwait: {}", io::Error::from_raw_os_error(rc));
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
