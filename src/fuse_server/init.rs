//! FUSE_INIT negotiation.

use std::io::{self, Read};
use std::sync::atomic::Ordering;

use super::chain::{Reader, Writer};
use vm_memory::bitmap::BitmapSlice;
use vm_memory::ByteValued;

use super::abi::*;
use super::reply::{self, einval};
use super::Negotiation;
use super::{FuseServer, ServerOptions};

/// Largest WRITE/READ payload we announce: 1 MiB.
pub const MAX_WRITE: u32 = 1 << 20;
/// `max_pages` we announce (with FUSE_MAX_PAGES): 256 pages of 4 KiB = `MAX_WRITE`.
pub const MAX_PAGES: u16 = 256;

/// Flags we negotiate whenever the guest offers them.
///
/// Not FUSE_ATOMIC_O_TRUNC: with it the guest sends O_TRUNC in OPEN, and an
/// `open(O_RDONLY | O_TRUNC)` reaches us (and the host file is truncated) before the guest's
/// ETXTBSY check of a file it is executing, which only comes after `->open()`. Without it the
/// guest checks first and then truncates with a SETATTR.
const WANTED: u64 = FUSE_ASYNC_READ
    | FUSE_PARALLEL_DIROPS
    | FUSE_BIG_WRITES
    | FUSE_AUTO_INVAL_DATA
    | FUSE_ASYNC_DIO
    | FUSE_MAX_PAGES
    | FUSE_SUBMOUNTS
    | FUSE_INIT_EXT;

/// What an INIT request leads to.
#[derive(Debug, PartialEq, Eq)]
pub enum Negotiated {
    /// Session established with this answer.
    Session(InitOut),
    /// The guest speaks a newer major version: answer with ours and wait for another INIT.
    MajorOnly(InitOut),
}

/// The flags the guest offered, as one 64-bit set (flags2 counts only with FUSE_INIT_EXT).
fn offered(init: &InitIn) -> u64 {
    let flags = u64::from(init.flags);
    if flags & FUSE_INIT_EXT != 0 {
        flags | (u64::from(init.flags2) << 32)
    } else {
        flags
    }
}

/// The flags `bits` (all or none) a `--posix-acl`-style `mode` wants from `init`: `auto`
/// continues without them when the guest does not offer them all, `always` then fails INIT
/// with EPROTO, as virtiofsd does.
fn by_mode(mode: Negotiation, init: &InitIn, bits: u64, what: &str) -> Result<u64, i32> {
    match mode {
        Negotiation::Never => Ok(0),
        _ if offered(init) & bits == bits => Ok(bits),
        Negotiation::Auto => {
            log::warn!("{what} requested but the guest does not offer them: continuing without");
            Ok(0)
        }
        Negotiation::Always => {
            log::error!("cannot enable {what}: the guest does not offer them");
            Err(libc::EPROTO)
        }
    }
}

/// Pure negotiation: the answer to `init`, or the errno to reply with.
pub fn negotiate(opts: &ServerOptions, init: &InitIn) -> Result<Negotiated, i32> {
    if init.major < KERNEL_VERSION {
        return Err(libc::EPROTO);
    }
    if init.major > KERNEL_VERSION {
        return Ok(Negotiated::MajorOnly(InitOut {
            major: KERNEL_VERSION,
            minor: KERNEL_MINOR_VERSION,
            ..Default::default()
        }));
    }
    if init.minor < MIN_KERNEL_MINOR_VERSION {
        return Err(libc::EPROTO);
    }
    let mut wanted = WANTED;
    if opts.readdirplus {
        wanted |= FUSE_DO_READDIRPLUS | FUSE_READDIRPLUS_AUTO;
    }
    // A 7.39 flag in a 7.38 answer, as virtiofsd 1.14 answers it: Linux (6.12 and on) reads
    // every INIT flag whatever minor the daemon answers (from 7.6 on) and uses the minor only
    // for the sizes of older structs; the flag changes nothing we send or parse.
    if opts.allow_direct_io_mmap {
        wanted |= FUSE_DIRECT_IO_ALLOW_MMAP;
    }
    if opts.writeback {
        wanted |= FUSE_WRITEBACK_CACHE;
    }
    if opts.killpriv_v2 {
        if offered(init) & FUSE_HANDLE_KILLPRIV_V2 != 0 {
            wanted |= FUSE_HANDLE_KILLPRIV_V2;
        } else {
            log::warn!("cannot enable KILLPRIV_V2: the guest does not offer it");
        }
    }
    let acl = FUSE_POSIX_ACL | FUSE_DONT_MASK;
    let acl = by_mode(opts.posix_acl, init, acl, "posix ACLs")?;
    // With SETXATTR_EXT when offered (Linux 5.16 and on), as virtiofsd 1.14, so that the guest
    // can ask for the setgid bit to go when it sets an access ACL.
    if acl != 0 {
        wanted |= acl | FUSE_SETXATTR_EXT;
    }
    wanted |= by_mode(
        opts.security_label,
        init,
        FUSE_SECURITY_CTX,
        "security labels",
    )?;
    let mut enabled = offered(init) & wanted;
    if enabled & FUSE_INIT_EXT == 0 {
        enabled &= 0xffff_ffff;
    }
    let max_pages = if enabled & FUSE_MAX_PAGES != 0 {
        MAX_PAGES
    } else {
        0
    };
    // Without MAX_PAGES the guest caps requests at its default 32 pages anyway; announcing
    // more than it will send is harmless.
    Ok(Negotiated::Session(InitOut {
        major: KERNEL_VERSION,
        minor: init.minor.min(KERNEL_MINOR_VERSION),
        max_readahead: init.max_readahead,
        flags: enabled as u32,
        max_background: u16::MAX,
        congestion_threshold: u16::MAX / 4 * 3,
        max_write: MAX_WRITE,
        time_gran: 1,
        max_pages,
        map_alignment: 0,
        flags2: (enabled >> 32) as u32,
        max_stack_depth: 0,
        unused: [0; 6],
    }))
}

impl FuseServer {
    /// FUSE_INIT. A new INIT on an established session (guest reboot or remount) starts over:
    /// the filesystem forgets everything as on DESTROY.
    pub(super) fn do_init<S: BitmapSlice>(
        &self,
        unique: u64,
        r: &mut Reader<S>,
        w: &mut Writer<S>,
    ) -> io::Result<u32> {
        let mut init = InitIn::default();
        let n = r.available_bytes().min(std::mem::size_of::<InitIn>());
        if n < INIT_IN_COMPAT_SIZE {
            return Err(einval());
        }
        r.read_exact(&mut init.as_mut_slice()[..n])
            .map_err(|_| einval())?;
        match negotiate(&self.opts, &init) {
            Err(errno) => Err(io::Error::from_raw_os_error(errno)),
            Ok(Negotiated::MajorOnly(out)) => reply::ok(w, unique, &[out.as_slice()]),
            Ok(Negotiated::Session(out)) => {
                if self.initialized.swap(false, Ordering::AcqRel) {
                    log::info!("FUSE_INIT on an established session: resetting");
                    self.fs.destroy();
                }
                log::info!(
                    "FUSE session: guest 7.{} flags {:#x}/{:#x}, answered 7.{} flags {:#x}/{:#x}",
                    init.minor,
                    init.flags,
                    init.flags2,
                    out.minor,
                    out.flags,
                    out.flags2
                );
                let used = reply::ok(w, unique, &[out.as_slice()])?;
                self.apply(u64::from(out.flags) | (u64::from(out.flags2) << 32));
                self.initialized.store(true, Ordering::Release);
                Ok(used)
            }
        }
    }

    /// Puts the session's negotiated INIT `flags` in force (at INIT, or loaded by a migration).
    pub(super) fn apply(&self, flags: u64) {
        self.negotiated.store(flags, Ordering::Release);
        self.dont_mask
            .store(flags & FUSE_DONT_MASK != 0, Ordering::Release);
        self.secctx
            .store(flags & FUSE_SECURITY_CTX != 0, Ordering::Release);
        self.fs.set_writeback(flags & FUSE_WRITEBACK_CACHE != 0);
        self.killpriv_v2
            .store(flags & FUSE_HANDLE_KILLPRIV_V2 != 0, Ordering::Release);
        self.setxattr_ext
            .store(flags & FUSE_SETXATTR_EXT != 0, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn init_in(minor: u32, flags: u64) -> InitIn {
        InitIn {
            major: 7,
            minor,
            max_readahead: 128 * 1024,
            flags: flags as u32,
            flags2: (flags >> 32) as u32,
            ..Default::default()
        }
    }

    fn session(opts: &ServerOptions, init: &InitIn) -> InitOut {
        match negotiate(opts, init) {
            Ok(Negotiated::Session(out)) => out,
            other => panic!("expected a session, got {other:?}"),
        }
    }

    fn all_flags(out: &InitOut) -> u64 {
        u64::from(out.flags) | (u64::from(out.flags2) << 32)
    }

    #[test]
    fn linux_6_12_offer() {
        // Everything a 6.12 virtio-fs guest offers (it sets every bit it knows).
        let offer = u64::MAX >> 23; // bits 0..=40
        let out = session(&ServerOptions::default(), &init_in(41, offer));
        assert_eq!((out.major, out.minor), (7, 38));
        assert_eq!(out.max_write, 1 << 20);
        assert_eq!(out.max_pages, 256);
        assert_eq!(out.max_write, u32::from(out.max_pages) * 4096);
        assert_eq!(out.time_gran, 1);
        assert_eq!(out.max_readahead, 128 * 1024);
        let expect = FUSE_ASYNC_READ
            | FUSE_PARALLEL_DIROPS
            | FUSE_BIG_WRITES
            | FUSE_AUTO_INVAL_DATA
            | FUSE_ASYNC_DIO
            | FUSE_MAX_PAGES
            | FUSE_SUBMOUNTS
            | FUSE_DO_READDIRPLUS
            | FUSE_READDIRPLUS_AUTO
            | FUSE_INIT_EXT;
        assert_eq!(all_flags(&out), expect);
        for never in [
            FUSE_ATOMIC_O_TRUNC,
            FUSE_DONT_MASK,
            FUSE_POSIX_ACL,
            FUSE_HANDLE_KILLPRIV,
            FUSE_HANDLE_KILLPRIV_V2,
            FUSE_WRITEBACK_CACHE,
            FUSE_SECURITY_CTX,
            FUSE_CREATE_SUPP_GROUP,
            FUSE_FLOCK_LOCKS,
            FUSE_POSIX_LOCKS,
            FUSE_EXPORT_SUPPORT,
            FUSE_HAS_INODE_DAX,
            FUSE_SETXATTR_EXT,
        ] {
            assert_eq!(all_flags(&out) & never, 0, "{never:#x}");
        }
    }

    #[test]
    fn only_offered_flags_are_answered() {
        let out = session(
            &ServerOptions::default(),
            &init_in(31, FUSE_ASYNC_READ | FUSE_POSIX_LOCKS),
        );
        assert_eq!(out.minor, 31);
        assert_eq!(all_flags(&out), FUSE_ASYNC_READ);
        assert_eq!(out.max_pages, 0);
    }

    #[test]
    fn flags2_need_init_ext() {
        let opts = ServerOptions {
            allow_direct_io_mmap: true,
            ..ServerOptions::default()
        };
        let with_ext = session(
            &opts,
            &init_in(41, FUSE_INIT_EXT | FUSE_DIRECT_IO_ALLOW_MMAP),
        );
        assert_eq!(
            all_flags(&with_ext),
            FUSE_INIT_EXT | FUSE_DIRECT_IO_ALLOW_MMAP
        );
        // Without INIT_EXT the guest's flags2 is garbage (an older struct): ignore it.
        let without = session(&opts, &init_in(41, FUSE_DIRECT_IO_ALLOW_MMAP));
        assert_eq!(all_flags(&without), 0);
        // Not wanted unless configured.
        let off = session(
            &ServerOptions::default(),
            &init_in(41, FUSE_INIT_EXT | FUSE_DIRECT_IO_ALLOW_MMAP),
        );
        assert_eq!(all_flags(&off), FUSE_INIT_EXT);
    }

    #[test]
    fn writeback_only_when_configured_and_offered() {
        let on = ServerOptions {
            writeback: true,
            ..ServerOptions::default()
        };
        let offer = FUSE_WRITEBACK_CACHE | FUSE_ASYNC_READ;
        assert_eq!(all_flags(&session(&on, &init_in(41, offer))), offer);
        assert_eq!(
            all_flags(&session(&on, &init_in(41, FUSE_ASYNC_READ))),
            FUSE_ASYNC_READ
        );
        let off = session(&ServerOptions::default(), &init_in(41, offer));
        assert_eq!(all_flags(&off), FUSE_ASYNC_READ);
    }

    #[test]
    fn readdirplus_can_be_turned_off() {
        let opts = ServerOptions {
            readdirplus: false,
            ..ServerOptions::default()
        };
        let out = session(
            &opts,
            &init_in(41, FUSE_DO_READDIRPLUS | FUSE_READDIRPLUS_AUTO),
        );
        assert_eq!(all_flags(&out), 0);
    }

    #[test]
    fn posix_acl_modes() {
        let acl = FUSE_POSIX_ACL | FUSE_DONT_MASK;
        let with = |posix_acl| ServerOptions {
            posix_acl,
            ..ServerOptions::default()
        };
        for mode in [Negotiation::Auto, Negotiation::Always] {
            let out = session(&with(mode), &init_in(41, acl | FUSE_ASYNC_READ));
            assert_eq!(all_flags(&out), acl | FUSE_ASYNC_READ, "{mode:?}");
        }
        let never = session(&with(Negotiation::Never), &init_in(41, acl));
        assert_eq!(all_flags(&never), 0);
        // Both flags or neither: a guest that masks the mode itself defeats default ACLs.
        for partial in [FUSE_POSIX_ACL, FUSE_DONT_MASK] {
            let auto = session(&with(Negotiation::Auto), &init_in(41, partial));
            assert_eq!(all_flags(&auto), 0, "{partial:#x}");
            assert_eq!(
                negotiate(&with(Negotiation::Always), &init_in(41, partial)),
                Err(libc::EPROTO),
                "{partial:#x}"
            );
        }
    }

    #[test]
    fn security_label_modes() {
        let with = |security_label| ServerOptions {
            security_label,
            ..ServerOptions::default()
        };
        let offer = FUSE_INIT_EXT | FUSE_SECURITY_CTX;
        for mode in [Negotiation::Auto, Negotiation::Always] {
            let out = session(&with(mode), &init_in(41, offer));
            assert_eq!(all_flags(&out), offer, "{mode:?}");
        }
        assert_eq!(
            all_flags(&session(&with(Negotiation::Never), &init_in(41, offer))),
            FUSE_INIT_EXT
        );
        // Not offered (or offered in flags2 without FUSE_INIT_EXT, i.e. not at all).
        for offer in [FUSE_INIT_EXT, FUSE_SECURITY_CTX] {
            let auto = session(&with(Negotiation::Auto), &init_in(41, offer));
            assert_eq!(all_flags(&auto) & FUSE_SECURITY_CTX, 0, "{offer:#x}");
            assert_eq!(
                negotiate(&with(Negotiation::Always), &init_in(41, offer)),
                Err(libc::EPROTO),
                "{offer:#x}"
            );
        }
    }

    #[test]
    fn killpriv_v2_only_when_asked_and_offered() {
        let on = ServerOptions {
            killpriv_v2: true,
            ..ServerOptions::default()
        };
        let offer = FUSE_HANDLE_KILLPRIV_V2 | FUSE_HANDLE_KILLPRIV | FUSE_ASYNC_READ;
        assert_eq!(
            all_flags(&session(&on, &init_in(41, offer))),
            FUSE_HANDLE_KILLPRIV_V2 | FUSE_ASYNC_READ
        );
        let off = session(&ServerOptions::default(), &init_in(41, offer));
        assert_eq!(all_flags(&off), FUSE_ASYNC_READ);
        // A guest without it still gets a session, without it.
        let old = session(&on, &init_in(31, FUSE_ASYNC_READ));
        assert_eq!(all_flags(&old), FUSE_ASYNC_READ);
    }

    #[test]
    fn setxattr_ext_comes_with_posix_acl() {
        let acl = FUSE_POSIX_ACL | FUSE_DONT_MASK;
        let opts = ServerOptions {
            posix_acl: Negotiation::Auto,
            ..ServerOptions::default()
        };
        let with = session(&opts, &init_in(41, acl | FUSE_SETXATTR_EXT));
        assert_eq!(all_flags(&with), acl | FUSE_SETXATTR_EXT);
        // Not required (a guest before 5.16 has ACLs without it).
        assert_eq!(all_flags(&session(&opts, &init_in(41, acl))), acl);
        // Not without ACLs.
        let none = session(
            &ServerOptions::default(),
            &init_in(41, acl | FUSE_SETXATTR_EXT),
        );
        assert_eq!(all_flags(&none), 0);
    }

    #[test]
    fn versions() {
        let opts = ServerOptions::default();
        let mut old_major = init_in(38, 0);
        old_major.major = 6;
        assert_eq!(negotiate(&opts, &old_major), Err(libc::EPROTO));
        assert_eq!(negotiate(&opts, &init_in(26, 0)), Err(libc::EPROTO));
        let mut new_major = init_in(0, 0);
        new_major.major = 8;
        match negotiate(&opts, &new_major) {
            Ok(Negotiated::MajorOnly(out)) => assert_eq!((out.major, out.minor), (7, 38)),
            other => panic!("{other:?}"),
        }
        assert_eq!(session(&opts, &init_in(38, 0)).minor, 38);
        assert_eq!(session(&opts, &init_in(99, 0)).minor, 38);
    }
}
