//! vhost-user messages as bytes: a 12-byte header (request, flags, payload size), the payload,
//! and the fds sent with the header (SCM_RIGHTS). The relay forwards them untouched; the
//! device set-up reads the few it records and writes the ones it replays.

use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;

use vmm_sys_util::sock_ctrl_msg::ScmSocket;

/// Requests of the vhost-user specification that the device set-up knows by number.
pub mod req {
    pub const GET_FEATURES: u32 = 1;
    pub const SET_FEATURES: u32 = 2;
    pub const SET_OWNER: u32 = 3;
    pub const RESET_OWNER: u32 = 4;
    pub const SET_MEM_TABLE: u32 = 5;
    pub const SET_LOG_BASE: u32 = 6;
    pub const SET_LOG_FD: u32 = 7;
    pub const SET_VRING_NUM: u32 = 8;
    pub const SET_VRING_ADDR: u32 = 9;
    pub const SET_VRING_BASE: u32 = 10;
    pub const GET_VRING_BASE: u32 = 11;
    pub const SET_VRING_KICK: u32 = 12;
    pub const SET_VRING_CALL: u32 = 13;
    pub const SET_VRING_ERR: u32 = 14;
    pub const GET_PROTOCOL_FEATURES: u32 = 15;
    pub const SET_PROTOCOL_FEATURES: u32 = 16;
    pub const GET_QUEUE_NUM: u32 = 17;
    pub const SET_VRING_ENABLE: u32 = 18;
    pub const SET_BACKEND_REQ_FD: u32 = 21;
    pub const GET_CONFIG: u32 = 24;
    pub const SET_CONFIG: u32 = 25;
    pub const GET_INFLIGHT_FD: u32 = 31;
    pub const SET_INFLIGHT_FD: u32 = 32;
    pub const RESET_DEVICE: u32 = 34;
    pub const GET_MAX_MEM_SLOTS: u32 = 36;
    pub const ADD_MEM_REG: u32 = 37;
    pub const REM_MEM_REG: u32 = 38;
    pub const SET_STATUS: u32 = 39;
    pub const GET_STATUS: u32 = 40;
    pub const SET_DEVICE_STATE_FD: u32 = 42;
    pub const CHECK_DEVICE_STATE: u32 = 43;
}

/// Header flags: protocol version 1, a request for an acknowledgement (REPLY_ACK).
pub const VERSION: u32 = 0x1;
pub const NEED_REPLY: u32 = 0x8;

/// Largest payload vhost accepts (`MAX_MSG_SIZE` less the header).
const MAX_PAYLOAD: usize = 0x1000 - 12;
/// Most fds one message carries (vhost's `MAX_ATTACHED_FD_ENTRIES`).
const MAX_FDS: usize = 32;

/// One vhost-user message.
pub struct Msg {
    pub request: u32,
    pub flags: u32,
    pub payload: Vec<u8>,
    pub fds: Vec<OwnedFd>,
}

impl Msg {
    /// A request from the frontend side, protocol version 1.
    pub fn new(request: u32, payload: Vec<u8>, fds: Vec<OwnedFd>) -> Msg {
        Msg {
            request,
            flags: VERSION,
            payload,
            fds,
        }
    }

    /// The `u64` of a payload that is one (features, a vring's index and fd flag).
    pub fn u64_at(&self, offset: usize) -> Option<u64> {
        let b = self.payload.get(offset..offset + 8)?;
        Some(u64::from_le_bytes(b.try_into().ok()?))
    }

    pub fn u32_at(&self, offset: usize) -> Option<u32> {
        let b = self.payload.get(offset..offset + 4)?;
        Some(u32::from_le_bytes(b.try_into().ok()?))
    }
}

/// Reads one message; `None` at the end of the stream (the peer closed it between messages).
pub fn recv(sock: &UnixStream) -> io::Result<Option<Msg>> {
    let mut hdr = [0u8; 12];
    let mut fds: [RawFd; MAX_FDS] = [-1; MAX_FDS];
    let mut iov = [libc::iovec {
        iov_base: hdr.as_mut_ptr().cast(),
        iov_len: hdr.len(),
    }];
    // SAFETY: the iovec points at `hdr`, which may take any bytes.
    let (n, nfds) = unsafe { sock.recv_with_fds(&mut iov, &mut fds) }
        .map_err(|e| io::Error::from_raw_os_error(e.errno()))?;
    // SAFETY: the first `nfds` entries are fds the kernel just gave us; nobody else owns them.
    let fds: Vec<OwnedFd> = fds[..nfds]
        .iter()
        .map(|&fd| unsafe { OwnedFd::from_raw_fd(fd) })
        .collect();
    if n == 0 {
        return Ok(None);
    }
    (&*sock).read_exact(&mut hdr[n..])?;
    let word = |i: usize| u32::from_le_bytes(hdr[i..i + 4].try_into().unwrap());
    let (request, flags, size) = (word(0), word(4), word(8) as usize);
    if size > MAX_PAYLOAD {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("vhost-user message {request} of {size} bytes"),
        ));
    }
    let mut payload = vec![0u8; size];
    (&*sock).read_exact(&mut payload)?;
    Ok(Some(Msg {
        request,
        flags,
        payload,
        fds,
    }))
}

/// Writes one message, its fds with the header.
pub fn send(sock: &UnixStream, msg: &Msg) -> io::Result<()> {
    let mut bytes = Vec::with_capacity(12 + msg.payload.len());
    bytes.extend_from_slice(&msg.request.to_le_bytes());
    bytes.extend_from_slice(&msg.flags.to_le_bytes());
    bytes.extend_from_slice(&(msg.payload.len() as u32).to_le_bytes());
    bytes.extend_from_slice(&msg.payload);
    let fds: Vec<RawFd> = msg.fds.iter().map(AsRawFd::as_raw_fd).collect();
    let n = sock
        .send_with_fds(&[&bytes[..]], &fds)
        .map_err(|e| io::Error::from_raw_os_error(e.errno()))?;
    io::Write::write_all(&mut &*sock, &bytes[n..])
}

/// Sends `msg` to a handler on `sock`; returns its reply when it sends one: to a query, or
/// (REPLY_ACK) to a message flagged NEED_REPLY, whose acknowledgement must be 0.
pub fn exchange(sock: &UnixStream, msg: &Msg) -> io::Result<Option<Msg>> {
    send(sock, msg)?;
    let query = matches!(
        msg.request,
        req::GET_FEATURES | req::GET_PROTOCOL_FEATURES | req::GET_VRING_BASE
    );
    if !query && msg.flags & NEED_REPLY == 0 {
        return Ok(None);
    }
    let reply = match recv(sock)? {
        Some(r) if r.request == msg.request => r,
        Some(r) => {
            return Err(io::Error::other(format!(
                "the vhost-user handler answered request {} with {}",
                msg.request, r.request
            )))
        }
        None => return Err(io::Error::other("the vhost-user handler closed its end")),
    };
    if !query && reply.u64_at(0) != Some(0) {
        return Err(io::Error::other(format!(
            "the vhost-user handler refused request {}",
            msg.request
        )));
    }
    Ok(Some(reply))
}
