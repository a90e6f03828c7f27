//! The launcher: a service on the host, outside the sandbox, that does for the daemon what the
//! confined daemon no longer can. Its own process, forked at start-up before the sandbox and
//! any thread ([`Launcher::start`]), or the duty of the namespace sandbox's supervisor when that
//! stays on the host (root: [`Launcher::with_service`], [`Service::serve`]).
//!
//! The serving process cannot create sockets or execute anything once confined (seccomp has no
//! `socket` or `execve`, Landlock allows only the share, and a seccomp filter cannot be lifted:
//! the next binary would inherit it). The launcher keeps the state of the process before all
//! that: it closes every fd but its channel and the pid file, and serves one request at a time
//! until the daemon has exited (its end of the channel closes):
//! - `PAIR`: a private connection for a vhost-user-backend handler (see
//!   [`relay`](super::relay)): a listener with one connection pending, and that connection.
//! - `LAUNCH`: a socket pair for the hand-over; a child that executes the binary path the daemon
//!   was started from, with the same arguments and `VHOSTFS_UPGRADE_FD` naming its end; the
//!   daemon gets the child's pid and the other end (and, from a supervisor, the mount namespace
//!   its child serves in: the daemon keeps no fd of it).
//! - `KILL`: SIGKILL to a launched child that did not answer in time.
//! - `CLEANUP`: whether the launcher removes the daemon's [`Leftovers`] once the daemon has
//!   exited (yes at first; no while a hand-over is under way and after it).
//!
//! Invariant: the launcher does nothing the daemon could not have done before its sandbox: it
//! runs only the daemon's own binary and arguments, and kills only its own children that it has
//! not reaped yet (a zombie keeps its pid, so the pid names that child and no other process).
//! Exited children are reaped (`waitpid(WNOHANG)`) before each request.
//! - `REPORT`: the outcome of an upgrade, as one datagram to the abstract socket
//!   `vhostfs-upgrade-<pid>` of the `vhostfs upgrade` process that asked for it.
//!
//! When the daemon has exited, the launcher removes its socket and pid file (the confined daemon
//! cannot: under `chroot` their paths do not resolve, under `none` Landlock refuses), unless they
//! were handed over: then the new process's own launcher removes them in turn. A launcher of its
//! own ignores SIGTERM, SIGINT, SIGHUP and SIGQUIT (a signal to the process group, or systemd's
//! stop, would end it before the daemon: a supervisor forwards them instead), and exits once
//! the daemon has. The new process of a hand-over is reparented.
//!
//! Invariant: the pid file stays locked until it is removed: the launcher holds the same open
//! file (the lock belongs to it), so no second instance starts on the socket path before the
//! launcher has removed the first one's socket.

use std::ffi::{CString, OsString};
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram, UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::Mutex;

use vmm_sys_util::sock_ctrl_msg::ScmSocket;

use crate::sync::lock;

/// The environment variable that tells a starting vhostfs it is the next binary of an upgrade,
/// and the fd of its hand-over connection.
pub const UPGRADE_FD_ENV: &str = "VHOSTFS_UPGRADE_FD";

/// The launcher's process name (`/proc/PID/comm`), which tells it from the serving process.
pub const COMM: &std::ffi::CStr = c"vhostfs-launch";

const PAIR: u8 = b'P';
const LAUNCH: u8 = b'L';
const KILL: u8 = b'K';
const REPORT: u8 = b'R';
const CLEANUP: u8 = b'C';

/// The signals the launcher ignores (and its launched children get back as default).
const IGNORED: [libc::c_int; 4] = [libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGQUIT];

/// What the daemon made on the host, which the launcher removes once the daemon has exited
/// (nothing under `--sandbox=namespace`, whose supervisor does).
#[derive(Default)]
pub struct Leftovers {
    /// Removed by path: the vhost-user socket the daemon bound, the `--metrics` socket.
    pub sockets: Vec<PathBuf>,
    /// The pid file's path and the open, locked file (close-on-exec): removed if the path
    /// still names it.
    pub pid_file: Option<(PathBuf, OwnedFd)>,
}

impl Leftovers {
    fn remove(self) {
        for path in &self.sockets {
            let _ = std::fs::remove_file(path);
        }
        if let Some((path, fd)) = self.pid_file {
            use std::os::unix::fs::MetadataExt;
            let ours = std::fs::File::from(fd).metadata();
            if let (Ok(ours), Ok(current)) = (ours, std::fs::metadata(&path)) {
                if (ours.dev(), ours.ino()) == (current.dev(), current.ino()) {
                    let _ = std::fs::remove_file(&path);
                }
            }
        }
    }
}

/// The abstract socket name `vhostfs upgrade` (pid `pid`) waits on for the outcome.
pub fn report_name(pid: u32) -> String {
    format!("vhostfs-upgrade-{pid}")
}

/// The daemon's end of the launcher's channel (one request at a time).
pub struct Launcher {
    sock: Mutex<UnixStream>,
}

/// What executing the binary takes, prepared before the fork.
struct Exec {
    path: CString,
    argv: Vec<CString>,
}

fn cstring(s: &[u8]) -> io::Result<CString> {
    CString::new(s).map_err(|_| io::Error::other("a NUL byte in an argument"))
}

fn scm_err(e: vmm_sys_util::errno::Error) -> io::Error {
    io::Error::from_raw_os_error(e.errno())
}

impl Launcher {
    /// Forks the launcher. Must run while the process has one thread. `exe`: the binary to run
    /// (the path this one was started from); `args`: its arguments, without argv[0];
    /// `leftovers`: what it removes once this process has exited.
    pub fn start(exe: PathBuf, args: &[OsString], leftovers: Leftovers) -> io::Result<Launcher> {
        let (launcher, service) = Launcher::with_service(exe, args, leftovers, true)?;
        // SAFETY: the process has one thread (the caller's contract), so the child may go on
        // running ordinary code.
        match unsafe { libc::fork() } {
            -1 => Err(io::Error::last_os_error()),
            0 => {
                drop(launcher);
                service.serve_alone();
                // SAFETY: leaving the child without running the parent's destructors.
                unsafe { libc::_exit(0) }
            }
            _ => Ok(launcher),
        }
    }

    /// The launcher's channel, and the service at its other end, for a process of the caller's
    /// choosing (the namespace sandbox's supervisor, [`Service::serve`]) instead of one of its
    /// own. `cleanup`: whether the service removes the leftovers unless told otherwise (not
    /// while what an upgrade handed over is not this process's yet).
    pub fn with_service(
        exe: PathBuf,
        args: &[OsString],
        leftovers: Leftovers,
        cleanup: bool,
    ) -> io::Result<(Launcher, Service)> {
        let mut argv = vec![cstring(exe.as_os_str().as_bytes())?];
        for a in args {
            argv.push(cstring(a.as_bytes())?);
        }
        let exec = Exec {
            path: cstring(exe.as_os_str().as_bytes())?,
            argv,
        };
        let (ours, theirs) = UnixStream::pair()?;
        let launcher = Launcher {
            sock: Mutex::new(ours),
        };
        let service = Service {
            sock: theirs,
            exec,
            leftovers,
            cleanup,
        };
        Ok((launcher, service))
    }

    /// Our end of the channel: its hang-up tells that the service is gone.
    pub fn channel(&self) -> RawFd {
        lock(&self.sock).as_raw_fd()
    }

    /// One request: `op`, two numbers and a text; the reply: two numbers and up to 2 fds.
    fn request(&self, op: u8, a: u32, b: u32, text: &[u8]) -> io::Result<(i32, i32, Vec<OwnedFd>)> {
        let sock = lock(&self.sock);
        let mut msg = vec![op];
        msg.extend_from_slice(&a.to_le_bytes());
        msg.extend_from_slice(&b.to_le_bytes());
        msg.extend_from_slice(&(text.len() as u32).to_le_bytes());
        msg.extend_from_slice(text);
        (&*sock).write_all(&msg)?;
        let mut reply = [0u8; 8];
        let mut fds = [-1; 2];
        let mut iov = [libc::iovec {
            iov_base: reply.as_mut_ptr().cast(),
            iov_len: reply.len(),
        }];
        // SAFETY: the iovec points at `reply`, which may take any bytes.
        let (n, nfds) = unsafe { sock.recv_with_fds(&mut iov, &mut fds) }.map_err(scm_err)?;
        // SAFETY: the first `nfds` are fds the kernel just gave us.
        let fds = fds[..nfds]
            .iter()
            .map(|&fd| unsafe { OwnedFd::from_raw_fd(fd) })
            .collect();
        if n == 0 {
            return Err(io::Error::other("the launcher is gone"));
        }
        (&*sock).read_exact(&mut reply[n..])?;
        let word = |i: usize| i32::from_le_bytes(reply[i..i + 4].try_into().unwrap());
        match (word(0), word(4)) {
            (_, errno) if errno != 0 => Err(io::Error::from_raw_os_error(errno)),
            (x, _) => Ok((x, 0, fds)),
        }
    }

    /// A private connection for a vhost-user-backend handler: (the relay's end, the listener
    /// with that connection pending).
    pub fn pair(&self) -> io::Result<(UnixStream, vhost::vhost_user::Listener)> {
        let (_, _, mut fds) = self.request(PAIR, 0, 0, b"")?;
        if fds.len() != 2 {
            return Err(io::Error::other("the launcher sent no connection"));
        }
        let listener = UnixListener::from(fds.pop().unwrap());
        let stream = UnixStream::from(fds.pop().unwrap());
        Ok((stream, vhost::vhost_user::Listener::from(listener)))
    }

    /// Starts the next binary; returns its pid, our end of its hand-over connection, and the
    /// mount namespace this process serves in if the service knows it (a supervisor's service
    /// opens its child's: [`Service::serve`]).
    pub fn launch(&self) -> io::Result<(libc::pid_t, UnixStream, Option<OwnedFd>)> {
        let (pid, _, mut fds) = self.request(LAUNCH, 0, 0, b"")?;
        let mut fds = fds.drain(..);
        let end = fds
            .next()
            .ok_or_else(|| io::Error::other("no hand-over connection"))?;
        Ok((pid, UnixStream::from(end), fds.next()))
    }

    /// Kills a launched child that did not answer.
    pub fn kill(&self, pid: libc::pid_t) {
        let _ = self.request(KILL, pid as u32, 0, b"");
    }

    /// Whether the launcher removes the socket and pid file once this process has exited: not
    /// while they may be the new process's (from before the session moves).
    pub fn cleanup(&self, on: bool) -> io::Result<()> {
        self.request(CLEANUP, on as u32, 0, b"").map(drop)
    }

    /// Tells `vhostfs upgrade` (pid `requester`, which sent `nonce` with its SIGHUP) the outcome.
    pub fn report(&self, requester: u32, nonce: u32, text: &str) {
        if let Err(e) = self.request(REPORT, requester, nonce, text.as_bytes()) {
            log::warn!("cannot report the upgrade's outcome to pid {requester}: {e}");
        }
    }
}

/// Sets the disposition of the signals the launcher ignores: `SIG_IGN` in the launcher,
/// `SIG_DFL` back in a child about to execute the binary (async-signal-safe).
fn set_ignored(disposition: libc::sighandler_t) {
    for sig in IGNORED {
        // SAFETY: signal with a valid signal number and SIG_IGN or SIG_DFL.
        unsafe { libc::signal(sig, disposition) };
    }
}

/// The launcher's side of the channel: serves the daemon's requests (see the module doc).
pub struct Service {
    sock: UnixStream,
    exec: Exec,
    leftovers: Leftovers,
    /// Whether `leftovers` are removed once the daemon has exited (`CLEANUP` sets it).
    cleanup: bool,
}

impl Service {
    /// The fds the service uses: whoever runs it keeps them open (and may close all others).
    pub fn fds(&self) -> Vec<RawFd> {
        let pid_fd = self
            .leftovers
            .pid_file
            .as_ref()
            .map(|(_, fd)| fd.as_raw_fd());
        [Some(self.sock.as_raw_fd()), pid_fd]
            .into_iter()
            .flatten()
            .collect()
    }

    /// Serves requests until the daemon's end of the channel closes, then removes the
    /// leftovers unless told not to. `served`: the host pid of the process serving the guest,
    /// when it is not the one at the channel's other end as the host sees it (a supervisor's
    /// child): a launch then also returns the mount namespace that process serves in.
    pub fn serve(mut self, served: Option<libc::pid_t>) {
        requests(&self.sock, &self.exec, &mut self.cleanup, served);
        if self.cleanup {
            self.leftovers.remove();
        }
    }

    /// [`Service::serve`] in a process of its own (forked by [`Launcher::start`]).
    fn serve_alone(self) {
        // SAFETY: prctl with a C string.
        unsafe { libc::prctl(libc::PR_SET_NAME, COMM.as_ptr()) };
        set_ignored(libc::SIG_IGN);
        crate::sandbox::close_all_but(&self.fds());
        self.serve(None);
    }
}

/// The launcher's loop; returns when the daemon's end of the channel is closed.
fn requests(sock: &UnixStream, exec: &Exec, cleanup: &mut bool, served: Option<libc::pid_t>) {
    // Launched children not reaped yet.
    let mut children: Vec<libc::pid_t> = Vec::new();
    loop {
        let mut head = [0u8; 13];
        if (&*sock).read_exact(&mut head).is_err() {
            return;
        }
        let word = |i: usize| u32::from_le_bytes(head[i..i + 4].try_into().unwrap());
        let (a, b, len) = (word(1), word(5), word(9) as usize);
        let mut text = vec![0u8; len.min(4096)];
        if (&*sock).read_exact(&mut text).is_err() {
            return;
        }
        // SAFETY: waitpid on our own children, with a valid status pointer.
        children.retain(|&pid| unsafe { libc::waitpid(pid, &mut 0, libc::WNOHANG) } == 0);
        let (x, fds) = match head[0] {
            PAIR => {
                private_connection().map(|(s, l)| (0, vec![OwnedFd::from(s), OwnedFd::from(l)]))
            }
            LAUNCH => UnixStream::pair().and_then(|(ours, theirs)| {
                let ns = served.map(mount_namespace).transpose()?;
                let pid = spawn(exec, &OwnedFd::from(theirs), sock.as_raw_fd())?;
                children.push(pid);
                Ok((pid, [OwnedFd::from(ours)].into_iter().chain(ns).collect()))
            }),
            KILL if children.contains(&(a as libc::pid_t)) => {
                // SAFETY: kill with integer arguments, to a child of ours not reaped yet.
                unsafe { libc::kill(a as libc::pid_t, libc::SIGKILL) };
                Ok((0, Vec::new()))
            }
            KILL => Err(io::Error::from_raw_os_error(libc::ESRCH)),
            REPORT => {
                let _ = send_report(a, b, &text);
                Ok((0, Vec::new()))
            }
            CLEANUP => {
                *cleanup = a != 0;
                Ok((0, Vec::new()))
            }
            _ => return,
        }
        .map_or_else(
            |e: io::Error| ((0, e.raw_os_error().unwrap_or(libc::EIO)), Vec::new()),
            |(x, fds)| ((x, 0), fds),
        );
        let mut reply = [0u8; 8];
        reply[..4].copy_from_slice(&x.0.to_le_bytes());
        reply[4..].copy_from_slice(&x.1.to_le_bytes());
        let raw: Vec<RawFd> = fds.iter().map(AsRawFd::as_raw_fd).collect();
        if sock.send_with_fds(&[&reply[..]], &raw).is_err() {
            return;
        }
    }
}

/// The mount namespace process `pid` is in.
fn mount_namespace(pid: libc::pid_t) -> io::Result<OwnedFd> {
    std::fs::File::open(format!("/proc/{pid}/ns/mnt")).map(OwnedFd::from)
}

/// A listening socket with one connection pending, and that connection: bound in a fresh
/// directory of mode 0700 (nobody else can connect), both removed at once.
fn private_connection() -> io::Result<(UnixStream, UnixListener)> {
    use std::os::unix::fs::DirBuilderExt;
    let base = std::env::temp_dir();
    let mut n = 0u32;
    let dir = loop {
        let dir = base.join(format!("vhostfs-relay-{}-{n}", std::process::id()));
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => break dir,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && n < 1000 => n += 1,
            Err(e) => return Err(e),
        }
    };
    let path = dir.join("s");
    let pair = UnixListener::bind(&path).and_then(|l| Ok((UnixStream::connect(&path)?, l)));
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_dir(&dir);
    pair
}

fn send_report(requester: u32, nonce: u32, text: &[u8]) -> io::Result<()> {
    let addr = SocketAddr::from_abstract_name(report_name(requester).as_bytes())?;
    let mut msg = nonce.to_le_bytes().to_vec();
    msg.extend_from_slice(text);
    UnixDatagram::unbound()?.send_to_addr(&msg, &addr).map(drop)
}

/// Forks and executes the binary with `fd` open (not close-on-exec) and named in the
/// environment; returns the child's pid.
fn spawn(exec: &Exec, fd: &OwnedFd, channel: RawFd) -> io::Result<i32> {
    let vars: Vec<CString> = std::env::vars_os()
        .filter(|(k, _)| k != UPGRADE_FD_ENV)
        .map(|(k, v)| [k.as_bytes(), b"=", v.as_bytes()].concat())
        .chain([format!("{UPGRADE_FD_ENV}={}", fd.as_raw_fd()).into_bytes()])
        .filter_map(|kv| CString::new(kv).ok())
        .collect();
    let mut envp: Vec<*const libc::c_char> = vars.iter().map(|v| v.as_ptr()).collect();
    envp.push(std::ptr::null());
    let mut argv: Vec<*const libc::c_char> = exec.argv.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    // SAFETY: the launcher has one thread; the child only makes async-signal-safe calls
    // (signal, close, fcntl, execve, _exit) on memory prepared before the fork.
    match unsafe { libc::fork() } {
        -1 => Err(io::Error::last_os_error()),
        0 => {
            set_ignored(libc::SIG_DFL);
            // SAFETY: as above; `argv` and `envp` are NULL-terminated arrays of C strings.
            unsafe {
                libc::close(channel);
                libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, 0);
                libc::execve(exec.path.as_ptr(), argv.as_ptr(), envp.as_ptr());
                libc::_exit(127)
            }
        }
        pid => Ok(pid),
    }
}

/// The hand-over connection of a process started by a launcher (`VHOSTFS_UPGRADE_FD`), taken
/// from the environment (and removed from it). Call while the process has one thread.
pub fn take_handover() -> Option<UnixStream> {
    let value = std::env::var_os(UPGRADE_FD_ENV)?;
    std::env::remove_var(UPGRADE_FD_ENV);
    let fd: RawFd = value.to_str()?.parse().ok()?;
    // SAFETY: fcntl on an fd number only reads its flags.
    if unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
        return None;
    }
    // SAFETY: the launcher left this fd open for us alone; nothing else in this process owns it.
    let sock = unsafe { UnixStream::from_raw_fd(fd) };
    // SAFETY: sets close-on-exec on the fd we now own.
    unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    Some(sock)
}

/// The binary an upgrade executes: the path this process was started as when it has a slash
/// (the launcher keeps the start-up working directory), so a new build installed at that path
/// is the one started; else the one `/proc/self/exe` names.
pub fn binary_path() -> PathBuf {
    match std::env::args_os().next() {
        Some(a) if a.as_encoded_bytes().contains(&b'/') => PathBuf::from(a),
        _ => std::env::current_exe().unwrap_or_else(|_| PathBuf::from("/proc/self/exe")),
    }
}

/// This process's arguments (without argv[0]): the next process gets the same.
pub fn arguments() -> Vec<OsString> {
    std::env::args_os().skip(1).collect()
}
