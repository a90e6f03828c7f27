//! The calling thread's filesystem uid and gid.
//!
//! setfsuid/setfsgid report the previous value, never an error: a change is checked by asking
//! again (`u32::MAX` changes nothing and returns the current value). Also the calling thread's
//! capability sets (`capget`/`capset`), whose effective set the kill-privileges path narrows.

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

/// `_LINUX_CAPABILITY_VERSION_3`: 64-bit sets, as two 32-bit halves.
const CAPABILITY_VERSION_3: u32 = 0x2008_0522;

#[repr(C)]
struct CapHeader {
    version: u32,
    /// 0: the calling thread.
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// The calling thread's capability sets (capget/capset act on one thread, pid 0).
#[derive(Clone, Copy, Default)]
pub struct ThreadCaps([CapData; 2]);

impl ThreadCaps {
    fn bit(cap: u32) -> (usize, u32) {
        ((cap / 32) as usize, 1 << (cap % 32))
    }

    pub fn effective(&self, cap: u32) -> bool {
        let (i, b) = Self::bit(cap);
        self.0[i].effective & b != 0
    }

    pub fn permitted(&self, cap: u32) -> bool {
        let (i, b) = Self::bit(cap);
        self.0[i].permitted & b != 0
    }

    /// These sets with `cap` put into (`on`) or taken out of the effective set.
    pub fn with_effective(mut self, cap: u32, on: bool) -> ThreadCaps {
        let (i, b) = Self::bit(cap);
        if on {
            self.0[i].effective |= b;
        } else {
            self.0[i].effective &= !b;
        }
        self
    }
}

/// The calling thread's capability sets.
pub fn capget() -> std::io::Result<ThreadCaps> {
    let mut hdr = CapHeader {
        version: CAPABILITY_VERSION_3,
        pid: 0,
    };
    let mut caps = ThreadCaps::default();
    // SAFETY: a version-3 header and room for the two data structs it asks for.
    super::check(unsafe {
        libc::syscall(libc::SYS_capget, &mut hdr, caps.0.as_mut_ptr()) as libc::c_int
    })?;
    Ok(caps)
}

/// Sets the calling thread's capability sets (the effective set only within the permitted).
pub fn capset(caps: &ThreadCaps) -> std::io::Result<()> {
    let mut hdr = CapHeader {
        version: CAPABILITY_VERSION_3,
        pid: 0,
    };
    // SAFETY: a version-3 header and the two data structs it names; capset only reads them.
    super::check(unsafe {
        libc::syscall(libc::SYS_capset, &mut hdr, caps.0.as_ptr()) as libc::c_int
    })
    .map(drop)
}
