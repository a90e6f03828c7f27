//! The budget of file descriptors the guest can make the daemon hold.
//!
//! Every fd that lives as long as the guest wants (an open file or directory, the O_PATH fd of an
//! inode that has no file handle) holds one [`FdToken`]. The budget is RLIMIT_NOFILE minus a
//! reserve for the daemon's own fds (sockets, eventfds, mount fds, the short-lived fds of one
//! request per worker thread), so a guest that never closes or forgets anything gets `ENFILE`
//! while the daemon itself never runs out.
//!
//! Who owns an fd (the one list of them):
//! - The shared dir's O_PATH fd: the root `Inode` (lives as long as the filesystem).
//! - `/proc/self/fd` (an O_PATH directory): `PassthroughFs`, opened at start-up, used to re-open
//!   O_PATH fds (`sys::reopen`).
//! - Mount fds: `MountFds`, one per mount ID seen, never closed while the daemon runs (reserve).
//! - An inode's O_PATH fd (`never` mode, or a filesystem without handles): its `Inode`, with a
//!   token.
//! - Open files and directories: their `OpenFile` in the `HandleTable`, with a token.
//! - The `FdCache`: O_PATH fds of handle-backed inodes the guest uses, each with a token, bounded
//!   in number and in time (its module doc).
//! - Everything else is transient: opened by one request (e.g. `open_by_handle_at(O_PATH)` of a
//!   handle-backed inode) and closed before its reply; bounded by the number of worker threads
//!   and covered by [`DAEMON_RESERVE`].
//! - When the guest's budget is spent, operations that would hold a new fd fail with `ENFILE`
//!   (warned once), after the fd cache has given its fds back; everything else keeps working.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

/// fds kept back from the guest: vhost-user socket, eventfds (2 per queue), mount fds, and the
/// transient fds of in-flight requests. Generous on purpose: running out here is fatal, running
/// out of budget is an errno.
pub const DAEMON_RESERVE: usize = 256;

#[derive(Debug)]
pub struct FdBudget {
    limit: usize,
    used: AtomicUsize,
    warned: AtomicBool,
    /// [`FdBudget::take`]s refused with `ENFILE` (touched only when refusing).
    refused: AtomicU64,
}

/// One fd's worth of budget; given back on drop.
#[derive(Debug)]
pub struct FdToken(Arc<FdBudget>);

impl FdBudget {
    pub fn new(limit: usize) -> Arc<FdBudget> {
        Arc::new(FdBudget {
            limit,
            used: AtomicUsize::new(0),
            warned: AtomicBool::new(false),
            refused: AtomicU64::new(0),
        })
    }

    /// The budget for a process whose fd limit is `rlimit`.
    pub fn from_rlimit(rlimit: u64) -> Arc<FdBudget> {
        let rlimit = usize::try_from(rlimit).unwrap_or(usize::MAX);
        FdBudget::new(rlimit.saturating_sub(DAEMON_RESERVE).max(1))
    }

    /// Takes one fd from the budget, or fails with `ENFILE` (logged once).
    pub fn take(self: &Arc<Self>) -> io::Result<FdToken> {
        let prev = self.used.fetch_add(1, Ordering::Relaxed);
        if prev >= self.limit {
            self.used.fetch_sub(1, Ordering::Relaxed);
            self.refused.fetch_add(1, Ordering::Relaxed);
            if !self.warned.swap(true, Ordering::Relaxed) {
                log::warn!(
                    "the guest holds {} file descriptors, the budget from RLIMIT_NOFILE: \
                     answering ENFILE until it closes or forgets some (raise --rlimit-nofile, \
                     or use --inode-file-handles=prefer)",
                    self.limit
                );
            }
            return Err(io::Error::from_raw_os_error(libc::ENFILE));
        }
        Ok(FdToken(Arc::clone(self)))
    }

    /// Takes one fd from the budget if there is one left, quietly (for caches that can do
    /// without).
    pub fn try_take(self: &Arc<Self>) -> Option<FdToken> {
        let prev = self.used.fetch_add(1, Ordering::Relaxed);
        if prev >= self.limit {
            self.used.fetch_sub(1, Ordering::Relaxed);
            return None;
        }
        Some(FdToken(Arc::clone(self)))
    }

    pub fn in_use(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    /// How many times [`FdBudget::take`] answered `ENFILE`.
    pub fn refusals(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }
}

impl Drop for FdToken {
    fn drop(&mut self) {
        self.0.used.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_is_enforced_and_given_back() {
        let b = FdBudget::new(2);
        let t1 = b.take().unwrap();
        let _t2 = b.take().unwrap();
        assert_eq!(b.take().unwrap_err().raw_os_error(), Some(libc::ENFILE));
        assert_eq!(b.in_use(), 2);
        assert_eq!(b.refusals(), 1);
        assert!(b.try_take().is_none());
        assert_eq!(b.refusals(), 1, "a quiet try is no refusal");
        drop(t1);
        assert!(b.take().is_ok());
    }

    #[test]
    fn reserve_is_kept_back() {
        assert_eq!(FdBudget::from_rlimit(4096).limit(), 4096 - DAEMON_RESERVE);
        assert_eq!(FdBudget::from_rlimit(10).limit(), 1);
    }
}
