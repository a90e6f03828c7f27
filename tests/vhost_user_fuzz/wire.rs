//! Sending an [`Attempt`] over a raw vhost-user connection: messages with their fds
//! (SCM_RIGHTS, one `sendmsg` per message as QEMU sends them), kicks, and what came back.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use super::gen::{Attempt, Fd, Rng, Step, AVAIL, DESC, GET_FEATURES, MEM_SIZE, VERSION};

/// How long the last message's answer (or the connection's end) may take: the machine may be
/// busy with other tests.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(20);

/// What an attempt's connection saw.
pub struct Played {
    /// Messages sent.
    pub sent: usize,
    /// Bytes the daemon sent back.
    pub received: usize,
    /// Whether the probe (GET_FEATURES, the last message) was sent: not after a message whose
    /// bytes are not the ones its header declares.
    pub probed: bool,
    /// Whether the daemon closed the connection (at the latest once we had shut ours down).
    pub closed: bool,
}

pub struct Conn {
    sock: UnixStream,
    memory: Option<File>,
    kicks: [Option<OwnedFd>; 3],
}

fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

fn eventfd() -> OwnedFd {
    // SAFETY: plain syscall; the new fd is owned by nothing else.
    unsafe { OwnedFd::from_raw_fd(check(libc::eventfd(0, libc::EFD_CLOEXEC)).unwrap()) }
}

fn memfd(len: u64) -> File {
    // SAFETY: the name is a C string; the new fd is owned by nothing else.
    let fd = check(unsafe { libc::memfd_create(c"vu-fuzz".as_ptr(), libc::MFD_CLOEXEC) }).unwrap();
    // SAFETY: as above.
    let f = unsafe { File::from_raw_fd(fd) };
    f.set_len(len).unwrap();
    f
}

/// The read end of a pipe whose write end is closed (reads give EOF at once).
fn pipe_reader() -> OwnedFd {
    let mut fds = [0; 2];
    // SAFETY: room for two fds.
    check(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }).unwrap();
    // SAFETY: both fds are new and ours.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    drop(w);
    r
}

/// Guest memory contents: random bytes, or (`structured`) rings of descriptors pointing mostly
/// into the memory with random lengths, flags and links, and avail indexes a few ahead.
fn fill_memory(f: &File, seed: u64, structured: bool) {
    let mut rng = Rng::new(seed);
    let mut mem = rng.bytes(MEM_SIZE as usize);
    if structured {
        for q in 0..2u64 {
            let base = (q * 0x10000) as usize;
            for i in 0..256 {
                let d = base + DESC as usize + 16 * i;
                let addr = if rng.one_in(8) {
                    rng.next()
                } else {
                    rng.below(MEM_SIZE)
                };
                mem[d..d + 8].copy_from_slice(&addr.to_le_bytes());
                mem[d + 8..d + 12].copy_from_slice(&(rng.below(8192) as u32).to_le_bytes());
                mem[d + 12..d + 14].copy_from_slice(&(rng.below(8) as u16).to_le_bytes());
                mem[d + 14..d + 16].copy_from_slice(&(rng.below(260) as u16).to_le_bytes());
            }
            let a = base + AVAIL as usize;
            mem[a..a + 2].copy_from_slice(&0u16.to_le_bytes());
            mem[a + 2..a + 4].copy_from_slice(&(1 + rng.below(15) as u16).to_le_bytes());
            for k in 0..256 {
                let e = a + 4 + 2 * k;
                mem[e..e + 2].copy_from_slice(&(rng.below(260) as u16).to_le_bytes());
            }
        }
    }
    (&*f).write_all(&mem).unwrap();
}

/// Sends `bytes` with `fds` in one `sendmsg` (MSG_NOSIGNAL: a dropped connection is EPIPE).
fn send_with_fds(sock: RawFd, bytes: &[u8], fds: &[RawFd]) -> io::Result<()> {
    let fd_bytes = std::mem::size_of_val(fds) as u32;
    // SAFETY: CMSG_SPACE only computes a size.
    let space = unsafe { libc::CMSG_SPACE(fd_bytes) } as usize;
    let mut control = vec![0u64; space.div_ceil(8)];
    let mut sent = 0;
    while sent < bytes.len() {
        let mut iov = libc::iovec {
            iov_base: bytes[sent..].as_ptr() as *mut libc::c_void,
            iov_len: bytes.len() - sent,
        };
        // SAFETY: an all-zero msghdr is valid; the pointers set below outlive the call.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        // The fds go with the first bytes only.
        if sent == 0 && !fds.is_empty() {
            msg.msg_control = control.as_mut_ptr().cast();
            msg.msg_controllen = space;
            // SAFETY: `control` has room for one header and `fds` (CMSG_SPACE above).
            unsafe {
                let c = libc::CMSG_FIRSTHDR(&msg);
                (*c).cmsg_level = libc::SOL_SOCKET;
                (*c).cmsg_type = libc::SCM_RIGHTS;
                (*c).cmsg_len = libc::CMSG_LEN(fd_bytes) as usize;
                std::ptr::copy_nonoverlapping(fds.as_ptr(), libc::CMSG_DATA(c).cast(), fds.len());
            }
        }
        // SAFETY: `msg` describes valid buffers.
        let n = unsafe { libc::sendmsg(sock, &msg, libc::MSG_NOSIGNAL) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        sent += n as usize;
    }
    Ok(())
}

impl Conn {
    /// Connects, retrying while the daemon sets up (the socket exists a moment before it
    /// listens).
    pub fn connect(socket: &Path) -> io::Result<Conn> {
        let deadline = Instant::now() + Duration::from_secs(5);
        let sock = loop {
            match UnixStream::connect(socket) {
                Ok(s) => break s,
                Err(e)
                    if e.kind() == io::ErrorKind::ConnectionRefused
                        && Instant::now() < deadline =>
                {
                    std::thread::sleep(Duration::from_millis(10))
                }
                Err(e) => return Err(e),
            }
        };
        Ok(Conn {
            sock,
            memory: None,
            kicks: [None, None, None],
        })
    }

    /// Reads what the daemon sent within `wait` (at least what is there already), adding the
    /// bytes to `played.received`; `false` once the connection is closed.
    fn receive(&mut self, wait: Duration, played: &mut Played) -> bool {
        let deadline = Instant::now() + wait;
        let mut buf = [0u8; 4096];
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let mut pfd = libc::pollfd {
                fd: self.sock.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd.
            if unsafe { libc::poll(&mut pfd, 1, left.as_millis() as i32) } <= 0 {
                return true;
            }
            match self.sock.read(&mut buf) {
                Ok(0) => return false,
                Ok(n) => played.received += n,
                Err(e) if e.kind() == io::ErrorKind::ConnectionReset => return false,
                Err(e) => panic!("reading from the daemon: {e}"),
            }
        }
    }

    fn fd_for(&mut self, fd: Fd, memory: (u64, bool), keep: &mut Vec<OwnedFd>) -> RawFd {
        match fd {
            Fd::Event => {
                keep.push(eventfd());
                keep.last().unwrap().as_raw_fd()
            }
            Fd::Kick(q) => self.kicks[q as usize]
                .get_or_insert_with(eventfd)
                .as_raw_fd(),
            Fd::Memory => self
                .memory
                .get_or_insert_with(|| {
                    let f = memfd(MEM_SIZE);
                    fill_memory(&f, memory.0, memory.1);
                    f
                })
                .as_raw_fd(),
            Fd::ShortMemory => {
                keep.push(memfd(4096).into());
                keep.last().unwrap().as_raw_fd()
            }
            Fd::Pipe => {
                keep.push(pipe_reader());
                keep.last().unwrap().as_raw_fd()
            }
        }
    }

    /// Sends the steps, then (unless the framing was lost) a GET_FEATURES probe, reading what
    /// comes back as it comes; then shuts our side down and waits for the daemon to close.
    pub fn play(&mut self, a: &Attempt) -> Played {
        let probe = Step::Msg {
            code: GET_FEATURES,
            flags: VERSION,
            size: 0,
            payload: vec![],
            fds: vec![],
            truncated: false,
        };
        let mut played = Played {
            sent: 0,
            received: 0,
            probed: false,
            closed: false,
        };
        for step in a.steps.iter().chain(std::iter::once(&probe)) {
            let truncated = match step {
                Step::Kick(q) => {
                    if let Some(k) = &self.kicks[*q as usize] {
                        // SAFETY: an 8-byte write to our eventfd.
                        unsafe { libc::write(k.as_raw_fd(), (&1u64 as *const u64).cast(), 8) };
                    }
                    false
                }
                Step::Pause(ms) => {
                    std::thread::sleep(Duration::from_millis(*ms));
                    false
                }
                Step::Msg {
                    code,
                    flags,
                    size,
                    payload,
                    fds,
                    truncated,
                } => {
                    let mut keep = Vec::new();
                    let raw: Vec<RawFd> = fds
                        .iter()
                        .map(|f| self.fd_for(*f, a.memory, &mut keep))
                        .collect();
                    let head = [code.to_le_bytes(), flags.to_le_bytes(), size.to_le_bytes()];
                    let bytes = [&head.concat()[..], payload].concat();
                    if send_with_fds(self.sock.as_raw_fd(), &bytes, &raw).is_err() {
                        break;
                    }
                    played.sent += 1;
                    played.probed = std::ptr::eq(step, &probe);
                    *truncated
                }
            };
            if !self.receive(Duration::ZERO, &mut played) {
                played.closed = true;
                return played;
            }
            // The daemon waits for bytes that never come, or reads the next message as this
            // one's: the attempt ends here.
            if truncated {
                break;
            }
        }
        let _ = self.sock.shutdown(std::net::Shutdown::Write);
        let deadline = Instant::now() + ANSWER_TIMEOUT;
        while !played.closed && Instant::now() < deadline {
            played.closed = !self.receive(deadline - Instant::now(), &mut played);
        }
        played
    }
}
