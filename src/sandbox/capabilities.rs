//! Capabilities: keep only what serving FUSE requests needs (`--modcaps` adjusts the set).
//!
//! The default set is virtiofsd's: CHOWN, DAC_OVERRIDE, FOWNER, FSETID, SETGID, SETUID, MKNOD,
//! SETFCAP, plus DAC_READ_SEARCH when inodes are referenced by file handles (or a
//! `--migration-mode=file-handles` destination opens the source's, see `daemon.rs`)
//! (`open_by_handle_at` needs it). `--modcaps=+a:-b` adds or removes capabilities, with
//! virtiofsd's syntax (names case-insensitive, with or without `cap_`).
//!
//! Invariants:
//! - [`drop_to`] runs in `Sandbox::confine`, after `pivot_root`/`chroot` (which need
//!   CAP_SYS_ADMIN/CAP_SYS_CHROOT) and while the process is single-threaded: capability sets
//!   are per thread, and threads created later inherit the reduced sets.
//! - The effective and permitted sets become exactly the kept set (intersected with what the
//!   process had: a capability is never gained), the inheritable and ambient sets are emptied
//!   and the bounding set is reduced to the kept set, so nothing executed later (nothing is)
//!   could regain more.
//! - [`check_available`] runs before anything else is set up: a mode that needs a capability
//!   the process lacks is one error line naming the capability and the way out, never a
//!   half-working daemon.
//! - In an unprivileged `--sandbox=namespace` run the daemon is root of a user namespace of
//!   its own: every capability here is scoped to that namespace (it grants nothing on host
//!   files beyond what the mapped host ids may do), and `open_by_handle_at`, which checks
//!   CAP_DAC_READ_SEARCH in the initial user namespace, fails: `prefer` falls back to `O_PATH`
//!   fds and `mandatory` is refused up front.

use caps::{CapSet, Capability, CapsHashSet};

/// The capabilities kept by default (file handles add CAP_DAC_READ_SEARCH).
pub const DEFAULT: [Capability; 8] = [
    Capability::CAP_CHOWN,
    Capability::CAP_DAC_OVERRIDE,
    Capability::CAP_FOWNER,
    Capability::CAP_FSETID,
    Capability::CAP_SETGID,
    Capability::CAP_SETUID,
    Capability::CAP_MKNOD,
    Capability::CAP_SETFCAP,
];

/// `--modcaps`: capabilities to add to and remove from the default set.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ModCaps {
    pub add: Vec<Capability>,
    pub remove: Vec<Capability>,
}

impl std::str::FromStr for ModCaps {
    type Err = String;

    /// Parses `+name:-name:...` (each item `+` or `-` and a capability name).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut m = ModCaps::default();
        for item in s.split(':') {
            let (list, name) = match (item.strip_prefix('+'), item.strip_prefix('-')) {
                (Some(name), _) => (&mut m.add, name),
                (_, Some(name)) => (&mut m.remove, name),
                _ => {
                    return Err(format!(
                        "invalid modcaps item '{item}': expected +NAME or -NAME"
                    ))
                }
            };
            let cap = caps::to_canonical(name)
                .parse::<Capability>()
                .map_err(|_| format!("unknown capability '{name}'"))?;
            list.push(cap);
        }
        Ok(m)
    }
}

/// The set to keep: the default, DAC_READ_SEARCH with file handles, then `modcaps` applied.
pub fn wanted(file_handles: bool, modcaps: &ModCaps) -> CapsHashSet {
    let mut set: CapsHashSet = DEFAULT.into_iter().collect();
    if file_handles {
        set.insert(Capability::CAP_DAC_READ_SEARCH);
    }
    set.extend(modcaps.add.iter().copied());
    for cap in &modcaps.remove {
        set.remove(cap);
    }
    set
}

fn effective() -> Result<CapsHashSet, String> {
    caps::read(None, CapSet::Effective).map_err(|e| format!("cannot read capabilities: {e}"))
}

/// Fails, before set-up, when `--modcaps` adds a capability the process does not have or
/// file handles are required (`--inode-file-handles=mandatory`, `handles_required`) without
/// CAP_DAC_READ_SEARCH.
///
/// `user_ns`: the daemon is about to enter a user namespace of its own (an unprivileged
/// `--sandbox=namespace` run). It then holds every capability, but only inside that namespace:
/// `--modcaps` can keep any of them, and file handles cannot work whatever the process has now
/// (`open_by_handle_at` needs CAP_DAC_READ_SEARCH in the initial user namespace).
pub fn check_available(
    modcaps: &ModCaps,
    handles_required: bool,
    user_ns: bool,
) -> Result<(), String> {
    if user_ns {
        if handles_required {
            return Err(
                "--inode-file-handles=mandatory needs CAP_DAC_READ_SEARCH in the initial user \
                 namespace, which an unprivileged --sandbox=namespace run (in a user \
                 namespace) does not have: run as root, or pass --inode-file-handles=prefer"
                    .into(),
            );
        }
        return Ok(());
    }
    let have = effective()?;
    if let Some(cap) = modcaps.add.iter().find(|c| !have.contains(c)) {
        return Err(format!(
            "--modcaps: the process does not have {cap} to keep (run as root or grant it)"
        ));
    }
    if handles_required && !have.contains(&Capability::CAP_DAC_READ_SEARCH) {
        return Err(
            "--inode-file-handles=mandatory needs CAP_DAC_READ_SEARCH, which the \
                    process does not have: grant it, or pass --inode-file-handles=never"
                .into(),
        );
    }
    Ok(())
}

/// Reduces this thread's capabilities to `keep` (see the module invariants). Returns the set
/// now in force.
pub fn drop_to(keep: &CapsHashSet) -> Result<CapsHashSet, String> {
    let fail = |what: &str, e: caps::errors::CapsError| format!("cannot drop {what}: {e}");
    let have = effective()?;
    let kept: CapsHashSet = keep.intersection(&have).copied().collect();
    // Needs CAP_SETPCAP, so before it leaves the effective set.
    if have.contains(&Capability::CAP_SETPCAP) {
        let bounding =
            caps::read(None, CapSet::Bounding).map_err(|e| fail("the bounding set", e))?;
        for cap in bounding.difference(&kept) {
            caps::drop(None, CapSet::Bounding, *cap).map_err(|e| fail("the bounding set", e))?;
        }
    }
    caps::clear(None, CapSet::Ambient).map_err(|e| fail("the ambient set", e))?;
    caps::clear(None, CapSet::Inheritable).map_err(|e| fail("the inheritable set", e))?;
    caps::set(None, CapSet::Effective, &kept).map_err(|e| fail("the effective set", e))?;
    caps::set(None, CapSet::Permitted, &kept).map_err(|e| fail("the permitted set", e))?;
    Ok(kept)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modcaps_syntax() {
        let m: ModCaps = "+sys_admin:-chown:+CAP_NET_ADMIN".parse().unwrap();
        assert_eq!(
            m.add,
            [Capability::CAP_SYS_ADMIN, Capability::CAP_NET_ADMIN]
        );
        assert_eq!(m.remove, [Capability::CAP_CHOWN]);
        assert_eq!(
            "chown".parse::<ModCaps>(),
            Err("invalid modcaps item 'chown': expected +NAME or -NAME".into())
        );
        assert_eq!(
            "+flying".parse::<ModCaps>(),
            Err("unknown capability 'flying'".into())
        );
    }

    #[test]
    fn wanted_set() {
        let none = ModCaps::default();
        assert_eq!(wanted(false, &none), DEFAULT.into_iter().collect());
        assert!(wanted(true, &none).contains(&Capability::CAP_DAC_READ_SEARCH));
        let m: ModCaps = "+sys_admin:-mknod".parse().unwrap();
        let set = wanted(false, &m);
        assert!(set.contains(&Capability::CAP_SYS_ADMIN));
        assert!(!set.contains(&Capability::CAP_MKNOD));
        assert_eq!(set.len(), DEFAULT.len());
    }

    /// In a thread of its own (capabilities are per thread): the sets become the kept set.
    #[test]
    fn drop_to_reduces_every_set() {
        std::thread::spawn(|| {
            let have = effective().unwrap();
            let keep = wanted(false, &ModCaps::default());
            let kept = drop_to(&keep).unwrap();
            assert_eq!(kept, keep.intersection(&have).copied().collect());
            assert_eq!(caps::read(None, CapSet::Effective).unwrap(), kept);
            assert_eq!(caps::read(None, CapSet::Permitted).unwrap(), kept);
            assert!(caps::read(None, CapSet::Inheritable).unwrap().is_empty());
            if have.contains(&Capability::CAP_SETPCAP) {
                assert_eq!(caps::read(None, CapSet::Bounding).unwrap(), kept);
            }
            // Gone for good: cannot be raised again.
            assert!(caps::raise(None, CapSet::Effective, Capability::CAP_SYS_ADMIN).is_err());
        })
        .join()
        .unwrap();
    }
}
