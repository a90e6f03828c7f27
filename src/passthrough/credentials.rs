//! Per-thread file-system credentials (`setfsuid`/`setfsgid`).
//!
//! Operations that create files run with the caller's uid/gid so the new file gets the right
//! owner and the host checks what the guest user may do. fsuid/fsgid are per thread on Linux; a
//! [`Credentials`] guard switches them for its lifetime and switches back to root on drop. The
//! current values are cached per thread so the common case (guest root) costs no syscall.

use std::cell::Cell;
use std::io;

use super::sys::creds;

thread_local! {
    static CURRENT: Cell<(u32, u32)> = const { Cell::new((0, 0)) };
}

/// Switches this thread's fsuid/fsgid until dropped.
pub struct Credentials {
    _not_send: std::marker::PhantomData<*const ()>,
}

fn set(uid: u32, gid: u32) -> io::Result<()> {
    let (cur_uid, cur_gid) = CURRENT.with(Cell::get);
    // The gid first: after the fsuid leaves 0 we may no longer change the fsgid.
    if gid != cur_gid {
        creds::setfsgid(gid);
        if creds::fsgid() != gid {
            return Err(io::Error::from_raw_os_error(libc::EPERM));
        }
    }
    if uid != cur_uid {
        creds::setfsuid(uid);
        if creds::fsuid() != uid {
            return Err(io::Error::from_raw_os_error(libc::EPERM));
        }
    }
    CURRENT.with(|c| c.set((uid, gid)));
    Ok(())
}

impl Credentials {
    /// Runs the rest of this scope as `uid`/`gid`.
    pub fn switch(uid: u32, gid: u32) -> io::Result<Credentials> {
        set(uid, gid)?;
        Ok(Credentials {
            _not_send: std::marker::PhantomData,
        })
    }
}

impl Drop for Credentials {
    fn drop(&mut self) {
        // Back to root: uid first so that the gid can be changed again.
        let (_, gid) = CURRENT.with(Cell::get);
        if set(0, gid).and_then(|_| set(0, 0)).is_err() {
            log::error!("cannot switch the file-system credentials back to root");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn switch_and_restore() {
        // SAFETY: plain syscall.
        if unsafe { libc::geteuid() } != 0 {
            panic!("this test needs root");
        }
        std::thread::spawn(|| {
            {
                let _c = Credentials::switch(1234, 4321).unwrap();
                assert_eq!(creds::fsuid(), 1234);
                assert_eq!(creds::fsgid(), 4321);
            }
            assert_eq!(creds::fsuid(), 0);
            assert_eq!(creds::fsgid(), 0);
        })
        .join()
        .unwrap();
    }
}
