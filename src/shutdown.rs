//! Signals: clean exit on SIGTERM and SIGINT (systemd's `systemctl stop`, Proxmox's post-stop,
//! Ctrl-C), the metrics table in the log on SIGUSR1, and an in-place upgrade on SIGHUP. SIGUSR2,
//! sent by the daemon to its own main thread ([`wake`]), interrupts its wait: how the relay is
//! asked to pause, without an fd of its own.
//!
//! The signals are blocked in the calling thread, so in every thread started after it, and
//! taken from a `signalfd` by whichever thread waits for the daemon's next event (the main
//! thread: for a frontend to connect, or relaying the connection's messages): no thread of
//! their own (issue 36: an idle daemon keeps no thread it does not need), no async-signal-safety
//! concerns, no crate needed.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};

/// The pid and value of a signal sent with `sigqueue`.
pub type Requester = (u32, u32);

/// What each signal does; see [`Signals::dispatch`].
pub struct Signals {
    fd: OwnedFd,
    /// A SIGUSR2 came that [`Signals::take_wake`] has not taken yet.
    woken: AtomicBool,
    on_exit: Box<dyn Fn(i32) + Send + Sync>,
    on_usr1: Box<dyn Fn() + Send + Sync>,
    on_hup: Box<dyn Fn(Option<Requester>) + Send + Sync>,
}

impl Signals {
    /// Blocks SIGTERM, SIGINT, SIGUSR1 and SIGHUP and opens the signalfd that takes them:
    /// [`Signals::dispatch`] runs `on_usr1` on each SIGUSR1, `on_hup` on each SIGHUP (with the
    /// sender's pid and value when it came from `sigqueue`, as `vhostfs upgrade` sends it) and
    /// `on_exit` with its number on SIGTERM or SIGINT. Must be called before the process starts
    /// any other thread (a thread started earlier keeps the default actions, which kill the
    /// process).
    pub fn take(
        on_exit: impl Fn(i32) + Send + Sync + 'static,
        on_usr1: impl Fn() + Send + Sync + 'static,
        on_hup: impl Fn(Option<(u32, u32)>) + Send + Sync + 'static,
    ) -> io::Result<Signals> {
        let set = handled();
        // SAFETY: valid set pointer, null old-set pointer.
        let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
        if rc != 0 {
            return Err(io::Error::from_raw_os_error(rc));
        }
        // SAFETY: a new signalfd for a valid set; the fd is checked before it is owned.
        let fd = unsafe { libc::signalfd(-1, &set, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Signals {
            // SAFETY: `fd` was just opened and is owned by nothing else.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            woken: AtomicBool::new(false),
            on_exit: Box::new(on_exit),
            on_usr1: Box::new(on_usr1),
            on_hup: Box::new(on_hup),
        })
    }

    /// The fd to poll: readable while a signal is pending.
    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Handles every pending signal (see [`Signals::take`]); returns at once if none is.
    pub fn dispatch(&self) {
        while let Some(info) = self.next() {
            match info.ssi_signo as i32 {
                libc::SIGUSR1 => (self.on_usr1)(),
                libc::SIGHUP => (self.on_hup)(queued_by(&info)),
                libc::SIGUSR2 => self.woken.store(true, Ordering::SeqCst),
                signo => (self.on_exit)(signo),
            }
        }
    }

    /// Whether a SIGUSR2 came since the last call.
    pub fn take_wake(&self) -> bool {
        self.woken.swap(false, Ordering::SeqCst)
    }

    fn next(&self) -> Option<libc::signalfd_siginfo> {
        // SAFETY: signalfd_siginfo is plain data.
        let mut info: libc::signalfd_siginfo = unsafe { std::mem::zeroed() };
        let size = std::mem::size_of::<libc::signalfd_siginfo>();
        loop {
            // SAFETY: reads at most `size` bytes into `info`, which is that large.
            let n = unsafe {
                libc::read(
                    self.fd(),
                    (&mut info as *mut libc::signalfd_siginfo).cast(),
                    size,
                )
            };
            if n == size as isize {
                return Some(info);
            }
            let e = io::Error::last_os_error();
            if n < 0 && e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            if n < 0 && e.kind() != io::ErrorKind::WouldBlock {
                log::error!("reading the signalfd: {e}");
            }
            return None;
        }
    }
}

/// The signals the daemon handles.
fn handled() -> libc::sigset_t {
    // SAFETY: sigset_t is plain data; sigemptyset initialises it.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointers to our sigset.
    unsafe {
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGUSR1);
        libc::sigaddset(&mut set, libc::SIGHUP);
        libc::sigaddset(&mut set, libc::SIGUSR2);
    }
    set
}

/// The calling thread's id, for [`wake`].
pub fn thread_id() -> libc::pid_t {
    // SAFETY: gettid has no arguments and cannot fail.
    unsafe { libc::gettid() }
}

/// Interrupts the wait of thread `tid` of this process ([`wait_readable`] with `wakes`),
/// which then finds [`Signals::take_wake`] true.
pub fn wake(tid: libc::pid_t) -> io::Result<()> {
    // SAFETY: plain syscall with integer arguments; `tid` is a thread of this process (or
    // gone, and the call fails with ESRCH).
    if unsafe { libc::syscall(libc::SYS_tgkill, libc::getpid(), tid, libc::SIGUSR2) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `(pid, value)` of a signal sent with `sigqueue`; `None` for one sent by `kill`. A sender
/// outside our pid namespace has pid 0 here: the namespace sandbox's supervisor, forwarding
/// it, put the pid of the process that sent it in the value's high 32 bits.
fn queued_by(info: &libc::signalfd_siginfo) -> Option<(u32, u32)> {
    if info.ssi_code != libc::SI_QUEUE {
        return None;
    }
    let value = info.ssi_ptr;
    let pid = match info.ssi_pid {
        0 => (value >> 32) as u32,
        p => p,
    };
    Some((pid, value as u32))
}

/// Waits until one of `fds` is readable (or hung up), handling the signals that come
/// meanwhile; returns which, by index. `signals`: none before the daemon takes them. With
/// `wakes`, returns also when a [`wake`] came (all `false` if nothing else did): the caller
/// asks [`Signals::take_wake`].
pub fn wait_readable(
    fds: &[RawFd],
    signals: Option<&Signals>,
    wakes: bool,
) -> io::Result<Vec<bool>> {
    let mut p: Vec<libc::pollfd> = fds
        .iter()
        .chain(signals.map(|s| s.fd()).as_ref())
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    loop {
        // SAFETY: `p` is a valid array of `p.len()` pollfds that outlives the call.
        let rc = unsafe { libc::poll(p.as_mut_ptr(), p.len() as libc::nfds_t, -1) };
        if rc < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if let Some(s) = signals {
            if p[fds.len()].revents != 0 {
                p[fds.len()].revents = 0;
                s.dispatch();
            }
        }
        let ready: Vec<bool> = p[..fds.len()].iter().map(|x| x.revents != 0).collect();
        let woken = wakes && signals.is_some_and(|s| s.woken.load(Ordering::SeqCst));
        if woken || ready.iter().any(|&r| r) {
            return Ok(ready);
        }
    }
}

/// The name of a termination signal, for the log.
pub fn signal_name(signo: i32) -> &'static str {
    match signo {
        libc::SIGTERM => "SIGTERM",
        libc::SIGINT => "SIGINT",
        _ => "signal",
    }
}
