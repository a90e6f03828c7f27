//! The calling thread's filesystem uid and gid.
//!
//! setfsuid/setfsgid report the previous value, never an error: a change is checked by asking
//! again (`u32::MAX` changes nothing and returns the current value).

/// Sets this thread's fsuid; returns the previous one.
pub fn setfsuid(uid: u32) -> u32 {
    // SAFETY: plain syscall on the calling thread's credentials.
    unsafe { libc::setfsuid(uid) as u32 }
}

/// Sets this thread's fsgid; returns the previous one.
pub fn setfsgid(gid: u32) -> u32 {
    // SAFETY: plain syscall on the calling thread's credentials.
    unsafe { libc::setfsgid(gid) as u32 }
}

/// This thread's fsuid.
pub fn fsuid() -> u32 {
    setfsuid(u32::MAX)
}

/// This thread's fsgid.
pub fn fsgid() -> u32 {
    setfsgid(u32::MAX)
}
