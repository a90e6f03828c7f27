//! Many requests at once on a [`TestGuest`]: pipelines with a cap on what is in flight, timed
//! ones, bursts published with one kick, and hand-made (raw) chains.

use std::io;
use std::sync::MutexGuard;
use std::time::{Duration, Instant};

use super::super::virtqueue::{RawDesc, VirtQueue};
use super::{reply_bytes, TestGuest, REPLY_TIMEOUT};

impl TestGuest {
    /// Many requests in flight on request queue `q`: `requests` are `(request bytes, reply_len)`.
    /// Chains are added while descriptors are free and fewer than `max_in_flight` are
    /// outstanding, published with one kick per batch, and refilled as completions arrive
    /// (completion order is whatever the daemon chooses). Returns the replies in request order.
    /// Fails with `TimedOut` if no completion arrives for ~10 s.
    pub fn pipeline(
        &self,
        q: usize,
        requests: &[(Vec<u8>, usize)],
        max_in_flight: usize,
    ) -> io::Result<Vec<Vec<u8>>> {
        self.pipeline_timed(q, requests, max_in_flight)
            .map(|(replies, _)| replies)
    }

    /// [`TestGuest::pipeline`], also returning each request's latency: from the moment its chain
    /// was added to the ring (just before the batch's kick) to the moment this thread collected
    /// its completion.
    pub fn pipeline_timed(
        &self,
        q: usize,
        requests: &[(Vec<u8>, usize)],
        max_in_flight: usize,
    ) -> io::Result<(Vec<Vec<u8>>, Vec<Duration>)> {
        self.pipeline_capped(q, requests, max_in_flight, usize::MAX)
            .map(|p| (p.replies, p.latencies))
    }

    /// [`TestGuest::pipeline_timed`] that copies only the first `keep` bytes of each reply out of
    /// guest memory (a guest's page cache keeps READ data where the device put it; copying
    /// megabytes out would make the client, not the daemon, the bottleneck).
    pub fn pipeline_capped(
        &self,
        q: usize,
        requests: &[(Vec<u8>, usize)],
        max_in_flight: usize,
        keep: usize,
    ) -> io::Result<Pipelined> {
        let mut vq = self.request_queue(q)?;
        let mut lens = vec![0; requests.len()];
        let mut replies: Vec<Option<Vec<u8>>> = vec![None; requests.len()];
        let mut submitted = vec![None; requests.len()];
        let mut latencies = vec![Duration::ZERO; requests.len()];
        let mut next = 0;
        let mut outstanding = Vec::new();
        let mut done = 0;
        while done < requests.len() {
            while next < requests.len() && outstanding.len() < max_in_flight.max(1) {
                let (request, reply_len) = &requests[next];
                let needed = 1 + usize::from(*reply_len > 0);
                if vq.free_descs() < needed {
                    break;
                }
                let (chain, bufs) = match self.request_buffers(request, *reply_len) {
                    Ok(b) => b,
                    Err(e) => {
                        // Keep the queue usable: late completions of these are dropped.
                        for &head in &outstanding {
                            vq.abandon(head);
                        }
                        return Err(e);
                    }
                };
                let head = vq.add_buffers(&chain, next as u64, bufs).unwrap();
                submitted[next] = Some(Instant::now());
                outstanding.push(head);
                next += 1;
            }
            vq.publish()?;
            let deadline = Instant::now() + REPLY_TIMEOUT;
            let Some(mut c) = vq.wait_used(deadline)? else {
                for head in outstanding {
                    vq.abandon(head);
                }
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("pipeline: no completion within {REPLY_TIMEOUT:?}"),
                ));
            };
            // Collect whatever else is already there before refilling.
            loop {
                let now = Instant::now();
                outstanding.retain(|&h| h != c.head);
                let i = c.token as usize;
                replies[i] = Some(reply_bytes(&c, requests[i].1, keep)?);
                lens[i] = c.len as usize;
                latencies[i] = submitted[i].map_or(Duration::ZERO, |t| now - t);
                done += 1;
                match vq.pop_used()? {
                    Some(more) => c = more,
                    None => break,
                }
            }
        }
        Ok(Pipelined {
            replies: replies.into_iter().map(Option::unwrap).collect(),
            lens,
            latencies,
        })
    }

    /// Requests of `slots` senders that each keep one request in flight on request queue `q`,
    /// driven from this thread (the WinFsp dispatcher threads of a Windows guest, without a
    /// thread switch per request): `next(slot, reply)` returns the slot's next request
    /// `(request bytes, reply_len)` given the reply bytes of its previous one (`None` at the
    /// start), or `None` when the slot is done. Completions are collected as they come and the
    /// next requests published with one kick per batch. Returns when every slot is done; fails
    /// with `TimedOut` if no completion arrives for ~10 s.
    pub fn drive(
        &self,
        q: usize,
        slots: usize,
        mut next: impl FnMut(usize, Option<Vec<u8>>) -> Option<(Vec<u8>, usize)>,
    ) -> io::Result<()> {
        let mut vq = self.request_queue(q)?;
        let mut reply_lens = vec![0; slots];
        let mut heads: Vec<Option<u16>> = vec![None; slots];
        let mut ready: Vec<(usize, (Vec<u8>, usize))> = (0..slots)
            .filter_map(|s| next(s, None).map(|r| (s, r)))
            .collect();
        loop {
            for (s, (request, reply_len)) in ready.drain(..) {
                let (chain, bufs) = self.request_buffers(&request, reply_len)?;
                let head = vq.add_buffers(&chain, s as u64, bufs).ok_or_else(|| {
                    io::Error::new(io::ErrorKind::WouldBlock, "no free descriptors in queue")
                })?;
                reply_lens[s] = reply_len;
                heads[s] = Some(head);
            }
            if heads.iter().all(Option::is_none) {
                return Ok(());
            }
            vq.publish()?;
            let Some(mut c) = vq.wait_used(Instant::now() + REPLY_TIMEOUT)? else {
                for head in heads.into_iter().flatten() {
                    vq.abandon(head);
                }
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("drive: no completion within {REPLY_TIMEOUT:?}"),
                ));
            };
            loop {
                let s = c.token as usize;
                heads[s] = None;
                let reply = reply_bytes(&c, reply_lens[s], usize::MAX)?;
                if let Some(r) = next(s, Some(reply)) {
                    ready.push((s, r));
                }
                match vq.pop_used()? {
                    Some(more) => c = more,
                    None => break,
                }
            }
        }
    }

    /// All of `requests` published on request queue `q` with one kick, then collected by polling
    /// the used ring (never reading the call eventfd meanwhile). With EVENT_IDX the guest asks
    /// to be notified of the last completion only. Returns the replies in request
    /// order and how many notifications the daemon sent for them (the call eventfd's counter).
    pub fn burst(
        &self,
        q: usize,
        requests: &[(Vec<u8>, usize)],
    ) -> io::Result<(Vec<Vec<u8>>, u64)> {
        let mut vq = self.request_queue(q)?;
        let _ = vq.call_fd().read(); // Earlier notifications are not this burst's.
        let mut replies: Vec<Option<Vec<u8>>> = vec![None; requests.len()];
        for (i, (request, reply_len)) in requests.iter().enumerate() {
            let (chain, bufs) = self.request_buffers(request, *reply_len)?;
            vq.add_buffers(&chain, i as u64, bufs).ok_or_else(|| {
                io::Error::new(io::ErrorKind::WouldBlock, "burst larger than the queue")
            })?;
        }
        vq.notify_after(u16::try_from(requests.len()).unwrap_or(u16::MAX));
        vq.publish()?;
        let deadline = Instant::now() + REPLY_TIMEOUT;
        let mut done = 0;
        while done < requests.len() {
            match vq.pop_used()? {
                Some(c) => {
                    let i = c.token as usize;
                    replies[i] = Some(reply_bytes(&c, requests[i].1, usize::MAX)?);
                    done += 1;
                }
                None if Instant::now() > deadline => {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("burst: {done} of {} answered", requests.len()),
                    ))
                }
                None => std::thread::sleep(Duration::from_micros(50)),
            }
        }
        // The daemon signals after it publishes the used index: the last reply can be seen
        // before its notification is sent. Everything it sends for the burst has been sent a
        // moment later.
        std::thread::sleep(Duration::from_millis(20));
        let notifications = vq.call_fd().read().unwrap_or(0);
        Ok((
            replies.into_iter().map(Option::unwrap).collect(),
            notifications,
        ))
    }

    /// Fault injection: submit the raw chain `descs` on request queue `q` and wait up to
    /// `timeout`. Returns `Some(used length)`, or `None` if the daemon did not complete the
    /// chain in time (its descriptors then stay reserved until it ever does).
    pub fn raw_chain(
        &self,
        q: usize,
        descs: &[RawDesc],
        timeout: Duration,
    ) -> io::Result<Option<u32>> {
        let vq = self.request_queue(q)?;
        raw_chain_on(vq, descs, timeout)
    }

    /// [`TestGuest::raw_chain`] on the hiprio queue.
    pub fn hiprio_raw_chain(
        &self,
        descs: &[RawDesc],
        timeout: Duration,
    ) -> io::Result<Option<u32>> {
        raw_chain_on(self.hiprio_queue(), descs, timeout)
    }
}

fn raw_chain_on(
    mut vq: MutexGuard<'_, VirtQueue>,
    descs: &[RawDesc],
    timeout: Duration,
) -> io::Result<Option<u32>> {
    let head = vq.add_chain(descs, 0, Vec::new()).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::WouldBlock,
            "chain is empty or longer than the free descriptors",
        )
    })?;
    vq.publish()?;
    match vq.wait_used(Instant::now() + timeout)? {
        Some(c) if c.head == head => Ok(Some(c.len)),
        Some(c) => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("expected head {head}, device returned {}", c.head),
        )),
        None => {
            vq.abandon(head);
            Ok(None)
        }
    }
}

/// What [`TestGuest::pipeline_capped`] collected, in request order.
pub struct Pipelined {
    /// The first `keep` bytes of each reply.
    pub replies: Vec<Vec<u8>>,
    /// The used length of each reply (what the device wrote).
    pub lens: Vec<usize>,
    pub latencies: Vec<Duration>,
}
