//! INTERRUPT and unknown opcodes, and the daemon's exit when the frontend disconnects.

use super::*;

#[test]
fn interrupt_and_unknown_opcodes() {
    let s = Session::start(&[]);
    let c = &s.client;
    // INTERRUPT gets no reply (checked by the client) and changes nothing.
    c.interrupt(FuseClient::next_unique());
    c.interrupt(0);
    for opcode in [7, 19, 9999, u32::MAX, FUSE_BMAP, FUSE_IOCTL, FUSE_POLL] {
        assert_eq!(
            c.raw(opcode, ROOT, &[0; 64], 16 + 256).err(),
            Some(libc::ENOSYS),
            "opcode {opcode}"
        );
    }
    assert_eq!(
        c.getattr(ROOT, None).unwrap().attr.mode & libc::S_IFMT,
        libc::S_IFDIR
    );
}

#[test]
fn daemon_exits_with_status_0_when_the_frontend_disconnects() {
    let s = Session::start(&[]);
    let Session {
        client, mut daemon, ..
    } = s;
    client.getattr(ROOT, None).unwrap();
    assert!(daemon.is_alive());
    drop(client);
    let status = daemon
        .wait_exit(Duration::from_secs(10))
        .unwrap()
        .expect("the daemon did not exit after the disconnect");
    assert!(status.success(), "exit status {status}");
}
