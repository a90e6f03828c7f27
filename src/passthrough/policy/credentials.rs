//! Per-thread file-system credentials (`setfsuid`/`setfsgid`).
//!
//! Operations that create files run with the caller's uid/gid so the new file gets the right
//! owner and the host checks what the guest user may do. fsuid/fsgid are per thread on Linux; a
//! [`Credentials`] guard switches them for its lifetime and switches back to root on drop. The
//! current values are cached per thread so the common case (guest root) costs no syscall.
//!
//! [`Fsetid`] puts CAP_FSETID into or takes it out of this thread's effective set for its
//! lifetime (the kill-privileges path, see [`super::killpriv`]); capabilities are per thread on
//! Linux too. The kernel drops the filesystem capabilities (CAP_FSETID among them) from the
//! effective set when the fsuid leaves 0 and puts them back when it returns to 0.

use std::cell::Cell;
use std::io;

use crate::passthrough::sys::creds;
use crate::passthrough::sys::creds::ThreadCaps;

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

/// CAP_FSETID's number (linux/capability.h).
const CAP_FSETID: u32 = 4;

/// CAP_FSETID put into or taken out of this thread's effective set until dropped (then back
/// as it was).
pub struct Fsetid {
    saved: ThreadCaps,
    _not_send: std::marker::PhantomData<*const ()>,
}

impl Fsetid {
    /// CAP_FSETID effective (`on`) or not. `None` when it already is as asked, or when it is
    /// not in the permitted set to be put in (an unprivileged daemon, `--modcaps=-fsetid`).
    pub fn set(on: bool) -> io::Result<Option<Fsetid>> {
        let saved = creds::capget()?;
        if saved.effective(CAP_FSETID) == on || (on && !saved.permitted(CAP_FSETID)) {
            return Ok(None);
        }
        creds::capset(&saved.with_effective(CAP_FSETID, on))?;
        Ok(Some(Fsetid {
            saved,
            _not_send: std::marker::PhantomData,
        }))
    }
}

impl Drop for Fsetid {
    fn drop(&mut self) {
        // Within the permitted set, which never changed: cannot be refused.
        if creds::capset(&self.saved).is_err() {
            log::error!("cannot restore CAP_FSETID in the effective set");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn has_fsetid() -> io::Result<bool> {
        Ok(creds::capget()?.effective(CAP_FSETID))
    }

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

    #[test]
    fn fsetid_out_and_back() {
        std::thread::spawn(|| {
            assert!(has_fsetid().unwrap(), "this test needs CAP_FSETID");
            assert!(Fsetid::set(true).unwrap().is_none(), "already effective");
            {
                let _g = Fsetid::set(false).unwrap().expect("it was effective");
                assert!(!has_fsetid().unwrap());
                assert!(creds::capget().unwrap().permitted(CAP_FSETID));
                assert!(Fsetid::set(false).unwrap().is_none(), "already out");
            }
            assert!(has_fsetid().unwrap());
            // A non-root fsuid loses it; it can be put back from the permitted set.
            let _c = Credentials::switch(1234, 4321).unwrap();
            assert!(!has_fsetid().unwrap());
            {
                let _g = Fsetid::set(true).unwrap().expect("permitted");
                assert!(has_fsetid().unwrap());
            }
            assert!(!has_fsetid().unwrap());
        })
        .join()
        .unwrap();
        // Only that thread was affected.
        assert!(has_fsetid().unwrap());
    }
}
