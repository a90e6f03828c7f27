//! The device set-up model and the hand-over format, without a daemon.

use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;

use vmm_sys_util::eventfd::EventFd;

use super::handover::{self, Process, Session};
use super::setup::DeviceSetup;
use super::wire::{req, Msg, NEED_REPLY};

fn eventfd() -> OwnedFd {
    let e = EventFd::new(0).unwrap();
    // SAFETY: the EventFd's fd is open while `e` lives; the duplicate is ours.
    unsafe { std::os::fd::BorrowedFd::borrow_raw(e.as_raw_fd()) }
        .try_clone_to_owned()
        .unwrap()
}

fn ino(fd: &OwnedFd) -> u64 {
    // SAFETY: fstat into a zeroed struct we own, on an fd we own.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { libc::fstat(fd.as_raw_fd(), &mut st) }, 0);
    st.st_ino
}

fn state(index: u32, n: u32) -> Vec<u8> {
    [index.to_le_bytes(), n.to_le_bytes()].concat()
}

/// What a frontend sends to set up one memory region and two vrings, the first kicked.
fn frontend_setup() -> DeviceSetup {
    let mut s = DeviceSetup::default();
    let mut mem = 1u64.to_le_bytes().to_vec();
    for v in [0x1000u64, 0x10000, 0x7f00_0000_0000, 0] {
        mem.extend_from_slice(&v.to_le_bytes());
    }
    let features = (1u64 << 32) | (1 << 30);
    let protocol = (1u64 << 3) | (1 << 15);
    let msgs = vec![
        Msg::new(req::SET_OWNER, vec![], vec![]),
        Msg::new(req::GET_FEATURES, vec![], vec![]),
        Msg::new(
            req::SET_PROTOCOL_FEATURES,
            protocol.to_le_bytes().to_vec(),
            vec![],
        ),
        Msg::new(req::SET_FEATURES, features.to_le_bytes().to_vec(), vec![]),
        Msg::new(req::SET_MEM_TABLE, mem, vec![eventfd()]),
        Msg::new(req::SET_VRING_NUM, state(0, 256), vec![]),
        Msg::new(req::SET_VRING_BASE, state(0, 0), vec![]),
        Msg::new(
            req::SET_VRING_ADDR,
            [&[0u8; 8][..], &[7u8; 32]].concat(),
            vec![],
        ),
        Msg::new(
            req::SET_VRING_CALL,
            0u64.to_le_bytes().to_vec(),
            vec![eventfd()],
        ),
        Msg::new(
            req::SET_VRING_KICK,
            0u64.to_le_bytes().to_vec(),
            vec![eventfd()],
        ),
        Msg::new(req::SET_VRING_ENABLE, state(0, 1), vec![]),
        Msg::new(req::SET_VRING_NUM, state(1, 128), vec![]),
        Msg::new(req::SET_VRING_KICK, 0x101u64.to_le_bytes().to_vec(), vec![]),
    ];
    for m in &msgs {
        s.apply(m).unwrap();
    }
    s
}

#[test]
fn the_setup_is_recorded_and_replayed_as_a_frontend_sends_it() {
    let s = frontend_setup();
    assert!(s.unreplayable.is_none());
    assert_eq!(s.regions.len(), 1);
    assert_eq!(s.regions[0].layout, [0x1000, 0x10000, 0x7f00_0000_0000, 0]);
    assert_eq!(
        s.started().collect::<Vec<_>>(),
        vec![0],
        "vring 1 has no kick fd"
    );
    let msgs = s.replay().unwrap();
    let order: Vec<u32> = msgs.iter().map(|m| m.request).collect();
    assert_eq!(
        order,
        vec![
            req::SET_OWNER,
            req::GET_FEATURES,
            req::GET_PROTOCOL_FEATURES,
            req::SET_PROTOCOL_FEATURES,
            req::SET_FEATURES,
            req::SET_MEM_TABLE,
            req::SET_VRING_NUM,
            req::SET_VRING_BASE,
            req::SET_VRING_ADDR,
            req::SET_VRING_CALL,
            req::SET_VRING_KICK,
            req::SET_VRING_ENABLE,
            req::SET_VRING_NUM,
        ]
    );
    // REPLY_ACK negotiated: everything after the features is acknowledged.
    for m in &msgs[5..] {
        assert_ne!(m.flags & NEED_REPLY, 0, "request {}", m.request);
    }
    assert_eq!(msgs[5].fds.len(), 1, "the region's fd");
    assert_eq!(ino(&msgs[5].fds[0]), ino(&s.regions[0].fd));
}

#[test]
fn a_stopped_vring_is_replayed_stopped_and_state_the_model_cannot_keep_refuses() {
    let mut s = frontend_setup();
    // An index past any vring the device has is left to the handler to refuse.
    s.apply(&Msg::new(req::SET_VRING_NUM, state(u32::MAX, 8), vec![]))
        .unwrap();
    assert_eq!(s.vrings.len(), 2);
    s.apply(&Msg::new(req::GET_VRING_BASE, state(0, 0), vec![]))
        .unwrap();
    assert_eq!(s.started().count(), 0);
    let msgs = s.replay().unwrap();
    assert!(msgs.iter().all(|m| m.request != req::SET_VRING_KICK));
    s.apply(&Msg::new(req::SET_LOG_BASE, vec![0; 16], vec![eventfd()]))
        .unwrap();
    assert_eq!(
        s.unreplayable.as_deref(),
        Some("dirty-page logging was set up (a live migration)")
    );
}

fn sample_session(fuse_fds: usize) -> (Session, Vec<u64>) {
    let (a, _) = UnixStream::pair().unwrap();
    let fds: Vec<OwnedFd> = (0..fuse_fds).map(|_| eventfd()).collect();
    let inos = fds.iter().map(ino).collect();
    let session = Session {
        setup: frontend_setup(),
        frontend: OwnedFd::from(a),
        paused_at: 123,
        fuse: b"session bytes".to_vec(),
        fuse_fds: fds,
    };
    (session, inos)
}

#[test]
fn the_state_crosses_a_socket_with_its_fds() {
    let (tx, rx) = UnixStream::pair().unwrap();
    let (l, _) = UnixStream::pair().unwrap();
    let process = Process {
        listener: Some(OwnedFd::from(l)),
        pid_file: None,
        metrics: None,
        notify: Some(eventfd()),
        mount_ns: Some(OwnedFd::from(
            std::fs::File::open("/proc/self/ns/mnt").unwrap(),
        )),
        user_ns: Some(OwnedFd::from(
            std::fs::File::open("/proc/self/ns/user").unwrap(),
        )),
        requester: Some((42, 7)),
    };
    let ns = ino(process.mount_ns.as_ref().unwrap());
    handover::send_process(&tx, process).unwrap();
    let got = handover::recv_process(&rx).unwrap();
    assert_eq!(got.requester, Some((42, 7)));
    assert!(got.listener.is_some() && got.notify.is_some() && got.pid_file.is_none());
    assert_eq!(got.mount_ns.as_ref().map(ino), Some(ns));
    assert!(got.user_ns.is_some());

    let (session, inos) = sample_session(450);
    let region = ino(&session.setup.regions[0].fd);
    let sender = std::thread::spawn(move || handover::send_session(&tx, session).unwrap());
    let got = handover::recv_session(&rx).unwrap();
    sender.join().unwrap();
    assert_eq!(got.paused_at, 123);
    assert_eq!(got.fuse, b"session bytes");
    assert_eq!(got.fuse_fds.iter().map(ino).collect::<Vec<_>>(), inos);
    assert_eq!(ino(&got.setup.regions[0].fd), region);
    assert_eq!(got.setup.features, Some((1 << 32) | (1 << 30)));
    assert_eq!(got.setup.vrings[0].num, Some(256));
    assert!(got.setup.vrings[0].started);
    assert!(matches!(got.setup.vrings[1].kick, Some(None)));
}

/// The state's bytes and fds as `send` writes them, read back by `recv` after `f` changed them.
fn recv_altered(f: &dyn Fn(&mut Vec<u8>)) -> std::io::Result<Session> {
    let (session, _) = sample_session(3);
    let (tx, rx) = UnixStream::pair().unwrap();
    handover::send_session(&tx, session).unwrap();
    drop(tx);
    // Re-frame: take the fd frames as they are, then the state frame with altered bytes.
    let (mid_tx, mid_rx) = UnixStream::pair().unwrap();
    let mut frames = Vec::new();
    let mut fds = Vec::new();
    loop {
        let mut tag = [0u8; 1];
        let mut raw = [-1; 253];
        let mut iov = [libc::iovec {
            iov_base: tag.as_mut_ptr().cast(),
            iov_len: 1,
        }];
        use vmm_sys_util::sock_ctrl_msg::ScmSocket;
        // SAFETY: the iovec points at `tag`.
        let (n, nfds) = unsafe { rx.recv_with_fds(&mut iov, &mut raw) }.unwrap();
        assert_eq!(n, 1);
        fds.extend_from_slice(&raw[..nfds]);
        use std::io::Read;
        if tag[0] == b'F' {
            let mut count = [0u8; 4];
            (&rx).read_exact(&mut count).unwrap();
            frames.push((count, raw[..nfds].to_vec()));
        } else {
            let mut len = [0u8; 8];
            (&rx).read_exact(&mut len).unwrap();
            let mut bytes = vec![0u8; u64::from_le_bytes(len) as usize];
            (&rx).read_exact(&mut bytes).unwrap();
            f(&mut bytes);
            for (count, fds) in frames {
                let head = [&[b'F'][..], &count].concat();
                mid_tx.send_with_fds(&[&head[..]], &fds).unwrap();
            }
            use std::io::Write;
            (&mid_tx).write_all(b"S").unwrap();
            (&mid_tx)
                .write_all(&(bytes.len() as u64).to_le_bytes())
                .unwrap();
            (&mid_tx).write_all(&bytes).unwrap();
            break;
        }
    }
    for fd in fds {
        // SAFETY: closes the fds this test received and re-sent (the kernel duplicated them).
        unsafe { libc::close(fd) };
    }
    handover::recv_session(&mid_rx)
}

#[test]
fn another_version_a_truncated_or_padded_state_is_refused() {
    assert!(recv_altered(&|_| {}).is_ok(), "unaltered");
    let refused = |f: &dyn Fn(&mut Vec<u8>)| match recv_altered(f) {
        Ok(_) => panic!("an altered state was accepted"),
        Err(e) => e.to_string(),
    };
    let other = handover::VERSION + 1;
    let e = refused(&|b| b[8..12].copy_from_slice(&other.to_le_bytes()));
    assert!(
        e.to_string().contains(&format!("format version {other}")),
        "{e}"
    );
    let e = refused(&|b| b[0] ^= 1);
    assert!(e.to_string().contains("not a vhostfs hand-over"), "{e}");
    let full = std::cell::Cell::new(0);
    assert!(recv_altered(&|b| full.set(b.len())).is_ok());
    for cut in 0..full.get() {
        assert!(recv_altered(&|b| b.truncate(cut)).is_err(), "cut at {cut}");
    }
    let e = refused(&|b| b.push(0));
    assert!(e.to_string().contains("trailing bytes"), "{e}");
}

/// Once the backend knows its vrings the record lets go of its fds, keeps recording what is
/// set (live), refuses to replay until filled, and replays after a fill exactly what it would
/// have with its own copies, with the backend's fds.
#[test]
fn a_live_record_holds_no_fd_and_replays_the_backends_once_filled() {
    let mut s = frontend_setup();
    let before: Vec<u32> = s.replay().unwrap().iter().map(|m| m.request).collect();
    s.forget_fds();
    assert!(
        s.regions.is_empty()
            && s.vrings
                .iter()
                .all(|v| v.kick.as_ref().is_none_or(Option::is_none))
    );
    assert!(s
        .vrings
        .iter()
        .all(|v| v.call.as_ref().is_none_or(Option::is_none)));
    assert!(
        s.replay().is_err() && s.try_clone().is_err(),
        "nothing to replay while live"
    );
    // Set while live: a new call fd for vring 0 (recorded as the backend's), an err fd for 1.
    s.apply(&Msg::new(
        req::SET_VRING_CALL,
        0u64.to_le_bytes().to_vec(),
        vec![eventfd()],
    ))
    .unwrap();
    s.apply(&Msg::new(
        req::SET_VRING_ERR,
        1u64.to_le_bytes().to_vec(),
        vec![eventfd()],
    ))
    .unwrap();
    // The backend's fds: a fill missing one that was set fails and changes nothing.
    // Sockets: each its own inode (eventfds all share one), so the replayed fds can be told.
    let fd = || OwnedFd::from(UnixStream::pair().unwrap().0);
    let (mem, kick, call, err) = (fd(), fd(), fd(), fd());
    let backend = |with_err: bool| crate::vhost_device::DeviceFds {
        vrings: vec![
            [
                Some(kick.try_clone().unwrap()),
                Some(call.try_clone().unwrap()),
                None,
            ],
            [None, None, with_err.then(|| err.try_clone().unwrap())],
        ],
        regions: vec![(0x1000, 0x10000, mem.try_clone().unwrap())],
    };
    assert!(s.fill(backend(false)).is_err());
    assert!(s.live && s.regions.is_empty());
    s.fill(backend(true)).unwrap();
    let msgs = s.replay().unwrap();
    let mut order: Vec<u32> = msgs.iter().map(|m| m.request).collect();
    // The err fd set while live is replayed too (after vring 1's size).
    assert_eq!(order.pop(), Some(req::SET_VRING_ERR));
    assert_eq!(order, before);
    let fd_of = |request: u32| {
        let m = msgs.iter().find(|m| m.request == request).unwrap();
        ino(&m.fds[0])
    };
    assert_eq!(fd_of(req::SET_MEM_TABLE), ino(&mem));
    assert_eq!(fd_of(req::SET_VRING_KICK), ino(&kick));
    assert_eq!(fd_of(req::SET_VRING_CALL), ino(&call));
    assert_eq!(fd_of(req::SET_VRING_ERR), ino(&err));
}
