//! Signals: clean exit on SIGTERM and SIGINT (systemd's `systemctl stop`, Proxmox's post-stop,
//! Ctrl-C), the metrics table in the log on SIGUSR1, and an in-place upgrade on SIGHUP. SIGUSR2,
//! sent by the daemon to its own main thread ([`wake`]), interrupts its wait: how the relay is
//! asked to pause.
//!
//! The signals are blocked in every thread (blocked first, in the one thread the process has,
//! so every thread started after inherits the mask) and let in only while the main thread
//! waits for the daemon's next event ([`wait_readable`]: `ppoll` with them unblocked, for a
//! frontend to connect or while it relays the connection's messages). Their handler only notes
//! them (atomics: async-signal-safe); the waiting thread then runs what they ask
//! ([`Signals::dispatch`]). No thread and no fd of their own (issue 36: an idle daemon keeps
//! nothing it does not need); a signal that comes while the main thread is busy waits, pending,
//! for its next wait.

use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// The pid and value of a signal sent with `sigqueue`.
pub type Requester = (u32, u32);

/// The signals noted by [`note`] and not dispatched yet, as bits `1 << signo`.
static PENDING: AtomicU64 = AtomicU64::new(0);
/// The last SIGHUP's sender, [`QUEUED`] set when it came from `sigqueue`: its pid in the high
/// 32 bits and its value in the low ones.
static HUP_FROM: AtomicU64 = AtomicU64::new(0);
static QUEUED: AtomicBool = AtomicBool::new(false);

/// What each signal does; see [`Signals::dispatch`].
pub struct Signals {
    /// The signal mask while waiting: the thread's before [`Signals::take`] blocked ours.
    waiting: libc::sigset_t,
    on_exit: Box<dyn Fn(i32) + Send + Sync>,
    on_usr1: Box<dyn Fn() + Send + Sync>,
    on_hup: Box<dyn Fn(Option<Requester>) + Send + Sync>,
}

/// The signal handler: notes the signal (and a SIGHUP's sender), nothing else.
extern "C" fn note(signo: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    if signo == libc::SIGHUP {
        // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler; for SI_QUEUE it
        // filled si_pid and si_value.
        let from = unsafe {
            ((*info).si_code == libc::SI_QUEUE).then(|| {
                let value = (*info).si_value().sival_ptr as usize as u64;
                let pid = match (*info).si_pid() {
                    0 => value >> 32,
                    p => p as u64,
                };
                (pid << 32) | (value & 0xffff_ffff)
            })
        };
        HUP_FROM.store(from.unwrap_or(0), Ordering::SeqCst);
        QUEUED.store(from.is_some(), Ordering::SeqCst);
    }
    PENDING.fetch_or(1 << signo, Ordering::SeqCst);
}

impl Signals {
    /// Blocks SIGTERM, SIGINT, SIGUSR1, SIGHUP and SIGUSR2 and installs their handler:
    /// [`Signals::dispatch`] runs `on_usr1` on each SIGUSR1, `on_hup` on each SIGHUP (with the
    /// sender's pid and value when it came from `sigqueue`, as `vhostfs upgrade` sends it; a
    /// sender outside our pid namespace has pid 0 there: the namespace sandbox's supervisor,
    /// forwarding it, put the pid of the process that sent it in the value's high 32 bits) and
    /// `on_exit` with its number on SIGTERM or SIGINT. Must be called before the process
    /// starts any other thread, and once.
    pub fn take(
        on_exit: impl Fn(i32) + Send + Sync + 'static,
        on_usr1: impl Fn() + Send + Sync + 'static,
        on_hup: impl Fn(Option<Requester>) + Send + Sync + 'static,
    ) -> io::Result<Signals> {
        let set = handled();
        // SAFETY: sigset_t is plain data, filled by pthread_sigmask.
        let mut waiting: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: valid set pointers.
        let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut waiting) };
        if rc != 0 {
            return Err(io::Error::from_raw_os_error(rc));
        }
        for signo in HANDLED {
            // SAFETY: valid set pointer; removes a signal from our copy of the mask.
            unsafe { libc::sigdelset(&mut waiting, signo) };
            // SAFETY: a zeroed sigaction with our handler (async-signal-safe: atomics only),
            // SA_SIGINFO and SA_RESTART, and an empty mask is valid.
            let mut sa: libc::sigaction = unsafe { std::mem::zeroed() };
            sa.sa_sigaction = note as *const () as usize;
            sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
            // SAFETY: valid sigaction pointer, null old-action pointer.
            if unsafe { libc::sigaction(signo, &sa, std::ptr::null_mut()) } != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(Signals {
            waiting,
            on_exit: Box::new(on_exit),
            on_usr1: Box::new(on_usr1),
            on_hup: Box::new(on_hup),
        })
    }

    /// Handles every signal noted since the last call (see [`Signals::take`]); SIGUSR2 stays
    /// for [`Signals::take_wake`].
    pub fn dispatch(&self) {
        let pending = PENDING.fetch_and(1 << libc::SIGUSR2, Ordering::SeqCst);
        for signo in HANDLED {
            if signo == libc::SIGUSR2 || pending & (1 << signo) == 0 {
                continue;
            }
            match signo {
                libc::SIGUSR1 => (self.on_usr1)(),
                libc::SIGHUP => {
                    let from = HUP_FROM.load(Ordering::SeqCst);
                    let queued = QUEUED.swap(false, Ordering::SeqCst);
                    (self.on_hup)(queued.then_some(((from >> 32) as u32, from as u32)));
                }
                signo => (self.on_exit)(signo),
            }
        }
    }

    /// Whether a SIGUSR2 came since the last call.
    pub fn take_wake(&self) -> bool {
        PENDING.fetch_and(!(1 << libc::SIGUSR2), Ordering::SeqCst) & (1 << libc::SIGUSR2) != 0
    }

    fn woken(&self) -> bool {
        PENDING.load(Ordering::SeqCst) & (1 << libc::SIGUSR2) != 0
    }
}

/// The signals the daemon handles.
const HANDLED: [libc::c_int; 5] = [
    libc::SIGTERM,
    libc::SIGINT,
    libc::SIGUSR1,
    libc::SIGHUP,
    libc::SIGUSR2,
];

fn handled() -> libc::sigset_t {
    // SAFETY: sigset_t is plain data; sigemptyset initialises it.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointers to our sigset.
    unsafe {
        libc::sigemptyset(&mut set);
        for signo in HANDLED {
            libc::sigaddset(&mut set, signo);
        }
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

/// Waits until one of `fds` is readable (or hung up), handling the signals that come
/// meanwhile (they are let in only during the wait); returns which, by index. `signals`:
/// none before the daemon takes them. With `wakes`, returns also when a [`wake`] came (all
/// `false` if nothing else did): the caller asks [`Signals::take_wake`].
pub fn wait_readable(
    fds: &[RawFd],
    signals: Option<&Signals>,
    wakes: bool,
) -> io::Result<Vec<bool>> {
    let mut p: Vec<libc::pollfd> = fds
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    loop {
        if let Some(s) = signals {
            s.dispatch();
            if wakes && s.woken() {
                return Ok(vec![false; fds.len()]);
            }
        }
        let mask = signals.map_or(std::ptr::null(), |s| &s.waiting as *const libc::sigset_t);
        // SAFETY: `p` is a valid array of `p.len()` pollfds that outlives the call; a null
        // timeout waits; `mask` is null or points to the signals' mask, alive meanwhile.
        let rc = unsafe {
            libc::ppoll(
                p.as_mut_ptr(),
                p.len() as libc::nfds_t,
                std::ptr::null(),
                mask,
            )
        };
        if rc < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        let ready: Vec<bool> = p.iter().map(|x| x.revents != 0).collect();
        if ready.iter().any(|&r| r) {
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
