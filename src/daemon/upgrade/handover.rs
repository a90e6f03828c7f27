//! The hand-over connection between the serving process and the next binary, and the format
//! of what moves over it.
//!
//! Two states go old → new, each as fds in frames of at most [`FDS_PER_FRAME`] (`F`, a count,
//! the fds as SCM_RIGHTS), then its bytes (`S`, a length, the bytes), which name fds by their
//! index in the order sent: first the [`Process`] (sockets and pid file), at once; the new
//! process starts up with it (the old one serves meanwhile) and answers `W`; the old process
//! then stops its queues and sends the [`Session`]. New → old: `R` once the new process holds
//! the device (its handler replayed the set-up and acknowledged every step) and serves as soon
//! as the old one is gone, or at any point `X` with the reason it refused. The old process
//! exits after `R`, which the new one sees as the end of the connection.
//!
//! Invariant: the state starts with [`MAGIC`] and a format [`VERSION`]; a reader refuses any
//! other version, and a truncated or inconsistent state (an fd index out of range or used
//! twice, trailing bytes) is an error, never a partial load.

use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;

use vmm_sys_util::sock_ctrl_msg::ScmSocket;

use super::setup::{DeviceSetup, Region, Vring};

/// `W`: the new process has started and waits for the session.
pub const WAITING: u8 = b'W';
/// `R`: the new process holds the device.
pub const READY: u8 = b'R';

pub const MAGIC: &[u8; 8] = b"VHFSUPGR";
pub const VERSION: u32 = 2;
/// Fds per frame (the kernel's limit for one message is 253).
const FDS_PER_FRAME: usize = 200;
/// Largest state accepted (the FUSE session of a million inodes fits many times over).
const MAX_STATE: u64 = 1 << 30;

/// What the next process needs to start, sent as soon as it runs (the old one still serves).
/// Each `Option` is taken by the part that adopts it.
pub struct Process {
    /// The listening socket (a later frontend connects there).
    pub listener: Option<OwnedFd>,
    /// `<socket>.pid`, locked (the lock belongs to the open file, so it moves with it).
    pub pid_file: Option<OwnedFd>,
    /// The `--metrics` listener.
    pub metrics: Option<OwnedFd>,
    /// The connected `NOTIFY_SOCKET` datagram socket.
    pub notify: Option<OwnedFd>,
    /// `--sandbox=namespace`: the mount namespace the old daemon serves in, which the new one
    /// joins (the same mounts, so the same mount IDs in the inode keys).
    pub mount_ns: Option<OwnedFd>,
    /// Unprivileged, its user namespace, which the new one joins first.
    pub user_ns: Option<OwnedFd>,
    /// The `vhostfs upgrade` process to tell the outcome, and its nonce.
    pub requester: Option<(u32, u32)>,
}

/// The live session, sent once the next process has started and asked for it (`W`), and the
/// old one has stopped its queues. `F`: how the sender holds the FUSE session's fds (they are
/// sent as they are, not duplicated); the receiver gets them as its own.
pub struct Session<F = OwnedFd> {
    pub setup: DeviceSetup,
    /// The frontend's connection.
    pub frontend: OwnedFd,
    /// When the old process stopped its queues (CLOCK_MONOTONIC, ns): the pause is logged.
    pub paused_at: u64,
    /// The FUSE session, as `FuseServer` saves it, and its fds.
    pub fuse: Vec<u8>,
    pub fuse_fds: Vec<F>,
}

#[derive(Default)]
struct Enc {
    bytes: Vec<u8>,
    /// Kept open until sent.
    fds: Vec<Box<dyn AsFd>>,
}

impl Enc {
    fn u8(&mut self, v: u8) {
        self.bytes.push(v);
    }
    fn u32(&mut self, v: u32) {
        self.bytes.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.bytes.extend_from_slice(&v.to_le_bytes());
    }
    fn bytes(&mut self, b: &[u8]) {
        self.u64(b.len() as u64);
        self.bytes.extend_from_slice(b);
    }
    fn fd(&mut self, fd: impl AsFd + 'static) {
        self.u32(self.fds.len() as u32);
        self.fds.push(Box::new(fd));
    }
    fn opt_u32(&mut self, v: Option<u32>) {
        self.u8(v.is_some() as u8);
        self.u32(v.unwrap_or(0));
    }
    fn opt_u64(&mut self, v: Option<u64>) {
        self.u8(v.is_some() as u8);
        self.u64(v.unwrap_or(0));
    }
    fn opt_fd(&mut self, fd: Option<OwnedFd>) {
        self.u8(fd.is_some() as u8);
        if let Some(fd) = fd {
            self.fd(fd);
        }
    }
    /// A vring eventfd: absent, set without an fd, or an fd.
    fn event(&mut self, e: Option<Option<OwnedFd>>) {
        match e {
            None => self.u8(0),
            Some(None) => self.u8(1),
            Some(Some(fd)) => {
                self.u8(2);
                self.fd(fd);
            }
        }
    }
}

struct Dec {
    bytes: Vec<u8>,
    at: usize,
    fds: Vec<Option<OwnedFd>>,
}

fn bad(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("hand-over state: {what}"),
    )
}

impl Dec {
    fn take(&mut self, n: usize) -> io::Result<&[u8]> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.bytes.len());
        let end = end.ok_or_else(|| bad("truncated"))?;
        let s = &self.bytes[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn u8(&mut self) -> io::Result<u8> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> io::Result<u32> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().unwrap()))
    }
    fn u64(&mut self) -> io::Result<u64> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().unwrap()))
    }
    fn bytes(&mut self) -> io::Result<Vec<u8>> {
        let n = self.u64()?;
        let n = usize::try_from(n).map_err(|_| bad("a length too large"))?;
        Ok(self.take(n)?.to_vec())
    }
    fn flag(&mut self) -> io::Result<bool> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(bad("a flag that is neither 0 nor 1")),
        }
    }
    fn fd(&mut self) -> io::Result<OwnedFd> {
        let i = self.u32()? as usize;
        self.fds
            .get_mut(i)
            .and_then(Option::take)
            .ok_or_else(|| bad("an fd index out of range or used twice"))
    }
    fn opt_u32(&mut self) -> io::Result<Option<u32>> {
        let some = self.flag()?;
        let v = self.u32()?;
        Ok(some.then_some(v))
    }
    fn opt_u64(&mut self) -> io::Result<Option<u64>> {
        let some = self.flag()?;
        let v = self.u64()?;
        Ok(some.then_some(v))
    }
    fn opt_fd(&mut self) -> io::Result<Option<OwnedFd>> {
        if self.flag()? {
            Ok(Some(self.fd()?))
        } else {
            Ok(None)
        }
    }
    fn event(&mut self) -> io::Result<Option<Option<OwnedFd>>> {
        match self.u8()? {
            0 => Ok(None),
            1 => Ok(Some(None)),
            2 => Ok(Some(Some(self.fd()?))),
            _ => Err(bad("an eventfd tag")),
        }
    }
}

fn header(e: &mut Enc) {
    e.bytes.extend_from_slice(MAGIC);
    e.u32(VERSION);
}

fn check_header(d: &mut Dec) -> io::Result<()> {
    if d.take(8)? != MAGIC {
        return Err(bad("not a vhostfs hand-over"));
    }
    let version = d.u32()?;
    if version != VERSION {
        return Err(bad(&format!(
            "format version {version}; this binary reads version {VERSION}"
        )));
    }
    Ok(())
}

fn check_end(d: &Dec) -> io::Result<()> {
    if d.at != d.bytes.len() {
        return Err(bad("trailing bytes"));
    }
    Ok(())
}

fn encode_process(p: Process) -> Enc {
    let mut e = Enc::default();
    header(&mut e);
    e.opt_fd(p.listener);
    e.opt_fd(p.pid_file);
    e.opt_fd(p.metrics);
    e.opt_fd(p.notify);
    e.opt_fd(p.mount_ns);
    e.opt_fd(p.user_ns);
    e.u8(p.requester.is_some() as u8);
    let (pid, nonce) = p.requester.unwrap_or((0, 0));
    e.u32(pid);
    e.u32(nonce);
    e
}

fn decode_process(d: &mut Dec) -> io::Result<Process> {
    check_header(d)?;
    let (listener, pid_file) = (d.opt_fd()?, d.opt_fd()?);
    let (metrics, notify) = (d.opt_fd()?, d.opt_fd()?);
    let (mount_ns, user_ns) = (d.opt_fd()?, d.opt_fd()?);
    let has_requester = d.flag()?;
    let requester = (d.u32()?, d.u32()?);
    check_end(d)?;
    Ok(Process {
        listener,
        pid_file,
        metrics,
        notify,
        mount_ns,
        user_ns,
        requester: has_requester.then_some(requester),
    })
}

fn encode_session<F: AsFd + 'static>(session: Session<F>) -> Enc {
    let mut e = Enc::default();
    header(&mut e);
    let s = session.setup;
    e.u8(s.owner as u8);
    e.opt_u64(s.features);
    e.opt_u64(s.protocol_features);
    e.u32(s.regions.len() as u32);
    for r in s.regions {
        r.layout.iter().for_each(|&v| e.u64(v));
        e.fd(r.fd);
    }
    e.u32(s.vrings.len() as u32);
    for v in s.vrings {
        e.opt_u32(v.num);
        e.u8(v.addr.is_some() as u8);
        e.bytes(v.addr.as_deref().unwrap_or(&[]));
        e.opt_u32(v.base);
        e.event(v.kick);
        e.event(v.call);
        e.event(v.err);
        e.u8(v.enabled.map_or(0, |b| 1 + b as u8));
        e.u8(v.started as u8);
    }
    e.fd(session.frontend);
    e.u64(session.paused_at);
    e.bytes(&session.fuse);
    e.u32(session.fuse_fds.len() as u32);
    for fd in session.fuse_fds {
        e.fd(fd);
    }
    e
}

fn decode_session(d: &mut Dec) -> io::Result<Session> {
    check_header(d)?;
    let mut setup = DeviceSetup {
        owner: d.flag()?,
        features: d.opt_u64()?,
        protocol_features: d.opt_u64()?,
        ..DeviceSetup::default()
    };
    for _ in 0..d.u32()?.min(4096) {
        let layout = [d.u64()?, d.u64()?, d.u64()?, d.u64()?];
        setup.regions.push(Region {
            layout,
            fd: d.fd()?,
        });
    }
    for _ in 0..d.u32()?.min(4096) {
        let num = d.opt_u32()?;
        let has_addr = d.flag()?;
        let addr = d.bytes()?;
        setup.vrings.push(Vring {
            num,
            addr: has_addr.then_some(addr),
            base: d.opt_u32()?,
            kick: d.event()?,
            call: d.event()?,
            err: d.event()?,
            enabled: match d.u8()? {
                0 => None,
                1 => Some(false),
                2 => Some(true),
                _ => return Err(bad("an enable state")),
            },
            started: d.flag()?,
            live: 0,
        });
    }
    let frontend = d.fd()?;
    let paused_at = d.u64()?;
    let fuse = d.bytes()?;
    let n = d.u32()?;
    let fuse_fds = (0..n).map(|_| d.fd()).collect::<io::Result<_>>()?;
    check_end(d)?;
    Ok(Session {
        setup,
        frontend,
        paused_at,
        fuse,
        fuse_fds,
    })
}

fn scm_err(e: vmm_sys_util::errno::Error) -> io::Error {
    io::Error::from_raw_os_error(e.errno())
}

/// Sends what the next process needs to start (old process).
pub fn send_process(sock: &UnixStream, p: Process) -> io::Result<()> {
    send(sock, encode_process(p))
}

/// Sends the live session (old process).
pub fn send_session<F: AsFd + 'static>(sock: &UnixStream, s: Session<F>) -> io::Result<()> {
    send(sock, encode_session(s))
}

/// Receives what [`send_process`] sent (new process).
pub fn recv_process(sock: &UnixStream) -> io::Result<Process> {
    decode_process(&mut recv(sock)?)
}

/// Receives what [`send_session`] sent (new process).
pub fn recv_session(sock: &UnixStream) -> io::Result<Session> {
    decode_session(&mut recv(sock)?)
}

fn send(sock: &UnixStream, e: Enc) -> io::Result<()> {
    for chunk in e.fds.chunks(FDS_PER_FRAME) {
        let mut head = vec![b'F'];
        head.extend_from_slice(&(chunk.len() as u32).to_le_bytes());
        let raw: Vec<RawFd> = chunk.iter().map(|fd| fd.as_fd().as_raw_fd()).collect();
        let n = sock.send_with_fds(&[&head[..]], &raw).map_err(scm_err)?;
        (&*sock).write_all(&head[n..])?;
    }
    let mut head = vec![b'S'];
    head.extend_from_slice(&(e.bytes.len() as u64).to_le_bytes());
    (&*sock).write_all(&head)?;
    (&*sock).write_all(&e.bytes)
}

fn recv(sock: &UnixStream) -> io::Result<Dec> {
    let mut fds: Vec<Option<OwnedFd>> = Vec::new();
    loop {
        let mut tag = [0u8; 1];
        let mut raw = [-1 as RawFd; FDS_PER_FRAME];
        let mut iov = [libc::iovec {
            iov_base: tag.as_mut_ptr().cast(),
            iov_len: 1,
        }];
        // SAFETY: the iovec points at `tag`, which may take any byte.
        let (n, nfds) = unsafe { sock.recv_with_fds(&mut iov, &mut raw) }.map_err(scm_err)?;
        // SAFETY: the first `nfds` are fds the kernel just gave us.
        fds.extend(
            raw[..nfds]
                .iter()
                .map(|&fd| Some(unsafe { OwnedFd::from_raw_fd(fd) })),
        );
        if n == 0 {
            return Err(bad("the old process closed the connection"));
        }
        match tag[0] {
            b'F' => {
                let mut count = [0u8; 4];
                (&*sock).read_exact(&mut count)?;
            }
            b'S' => {
                let mut len = [0u8; 8];
                (&*sock).read_exact(&mut len)?;
                let len = u64::from_le_bytes(len);
                if len > MAX_STATE {
                    return Err(bad("too large"));
                }
                let mut bytes = vec![0u8; len as usize];
                (&*sock).read_exact(&mut bytes)?;
                return Ok(Dec { bytes, at: 0, fds });
            }
            _ => return Err(bad("an unknown frame")),
        }
    }
}

/// What the new process tells the old one.
pub enum Answer<'a> {
    /// Started: send the session.
    Waiting,
    /// The device is ours.
    Ready,
    /// Refused, and why.
    Refused(&'a str),
}

/// New process: where it is, or why it refuses.
pub fn answer(sock: &UnixStream, outcome: Answer<'_>) -> io::Result<()> {
    let msg = match outcome {
        Answer::Waiting => vec![WAITING],
        Answer::Ready => vec![READY],
        Answer::Refused(why) => [
            &[b'X'][..],
            &(why.len() as u32).to_le_bytes(),
            why.as_bytes(),
        ]
        .concat(),
    };
    (&*sock).write_all(&msg)
}

/// Old process: the new process's answer, which must be `expected` ([`WAITING`] or [`READY`]);
/// `Err` with its reason, or why there was none.
pub fn await_answer(sock: &UnixStream, expected: u8) -> Result<(), String> {
    let mut tag = [0u8; 1];
    match (&*sock).read(&mut tag) {
        Ok(0) => return Err("the new process exited before taking over".into()),
        Err(e) if e.kind() == io::ErrorKind::ConnectionReset => {
            return Err("the new process exited before taking over".into())
        }
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::TimedOut => {
            return Err("the new process did not answer in time".into())
        }
        Err(e) => return Err(format!("the hand-over connection: {e}")),
    }
    match tag[0] {
        t if t == expected => Ok(()),
        b'X' => {
            let mut len = [0u8; 4];
            let mut why = vec![];
            if (&*sock).read_exact(&mut len).is_ok() {
                why = vec![0u8; (u32::from_le_bytes(len) as usize).min(4096)];
                let _ = (&*sock).read_exact(&mut why);
            }
            Err(format!(
                "the new process refused the state: {}",
                String::from_utf8_lossy(&why)
            ))
        }
        _ => Err("the new process answered nonsense".into()),
    }
}
