//! Several threads with a request each in flight on one request queue
//! ([`GuestOptions::shared_waits`](super::GuestOptions::shared_waits)): each adds its chain
//! under the queue's lock and waits without it. One of them sleeps on the call eventfd for
//! everyone and wakes the owner of each completion it collects; the others sleep until woken.
//! When the poller's own reply has come, it wakes a sleeper to take its place.

use std::io;
use std::os::fd::AsRawFd;
use std::time::Instant;

use super::super::virtqueue::VirtQueue;
use super::{reply_bytes, TestGuest, REPLY_TIMEOUT};

/// Wake a sleeper to poll in place of the thread that stops polling.
fn hand_over(vq: &mut VirtQueue) {
    vq.handoff.polling = false;
    if let Some(t) = vq.handoff.asleep.values().next() {
        t.unpark();
    }
}

impl TestGuest {
    /// [`TestGuest::roundtrip`] with shared waits.
    pub(super) fn shared_roundtrip(
        &self,
        q: usize,
        request: &[u8],
        reply_len: usize,
    ) -> io::Result<Vec<u8>> {
        let (chain, bufs) = self.request_buffers(request, reply_len)?;
        let (head, token) = {
            let mut vq = self.request_queue(q)?;
            let token = vq.handoff.next_token;
            vq.handoff.next_token += 1;
            let head = vq.add_buffers(&chain, token, bufs).ok_or_else(|| {
                io::Error::new(io::ErrorKind::WouldBlock, "no free descriptors in queue")
            })?;
            vq.publish()?;
            (head, token)
        };
        let deadline = Instant::now() + REPLY_TIMEOUT;
        let mut polling = false;
        loop {
            let mut vq = self.request_queue(q)?;
            vq.handoff.asleep.remove(&token);
            if polling {
                // Reset the counter; a spurious empty read (EAGAIN) is harmless.
                let _ = vq.call_fd().read();
            }
            while let Some(c) = vq.pop_used()? {
                if let Some(t) = vq.handoff.asleep.remove(&c.token) {
                    t.unpark();
                }
                vq.handoff.done.insert(c.token, c);
            }
            if let Some(c) = vq.handoff.done.remove(&token) {
                if polling {
                    hand_over(&mut vq);
                }
                drop(vq);
                return reply_bytes(&c, reply_len, usize::MAX);
            }
            let now = Instant::now();
            if now >= deadline {
                vq.abandon(head);
                if polling {
                    hand_over(&mut vq);
                }
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("no reply within {REPLY_TIMEOUT:?}"),
                ));
            }
            if !vq.handoff.polling {
                vq.handoff.polling = true;
                polling = true;
            }
            if !polling {
                vq.handoff.asleep.insert(token, std::thread::current());
                drop(vq);
                std::thread::park_timeout(deadline - now);
                continue;
            }
            if vq.arm() {
                continue;
            }
            let fd = vq.call_fd().as_raw_fd();
            drop(vq);
            let ms = (deadline - now)
                .as_micros()
                .div_ceil(1000)
                .min(i32::MAX as u128) as i32;
            let mut pfd = libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd for the duration of the call; the eventfd lives as long
            // as the queue, which `self` holds.
            if unsafe { libc::poll(&mut pfd, 1, ms) } < 0 {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    let mut vq = self.request_queue(q)?;
                    vq.abandon(head);
                    hand_over(&mut vq);
                    return Err(e);
                }
            }
        }
    }
}
