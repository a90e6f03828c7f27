//! `--translate-uid` / `--translate-gid`: the daemon's own translation of uids and gids between
//! the guest and the host (no user namespace needed), with virtiofsd 1.14's rule forms:
//!
//! | form                               | direction     | effect                                   |
//! |------------------------------------|---------------|------------------------------------------|
//! | `guest:GUEST:HOST:COUNT`           | guest → host  | `[GUEST, GUEST+COUNT)` 1:1 onto `HOST..` |
//! | `host:HOST:GUEST:COUNT`            | host → guest  | `[HOST, HOST+COUNT)` 1:1 onto `GUEST..`  |
//! | `squash-guest:GUEST:HOST:COUNT`    | guest → host  | the whole guest range onto the one `HOST`|
//! | `squash-host:HOST:GUEST:COUNT`     | host → guest  | the whole host range onto the one `GUEST`|
//! | `forbid-guest:GUEST:COUNT`         | guest → host  | the guest range is refused (EPERM)       |
//! | `map:GUEST:HOST:COUNT`             | both          | `guest:GUEST:HOST:COUNT` + `host:HOST:GUEST:COUNT` |
//!
//! The type is case-insensitive; the separator is the first character that is not
//! alphanumeric, `-` or `_`, and must separate every field (as in virtiofsd).
//!
//! Invariants of an [`IdMap`]:
//! - The two directions are independent: a guest → host rule implies nothing host → guest
//!   (only `map:` sets up both).
//! - An id no rule covers maps to the same number, in either direction. So a host id without a
//!   guest mapping shows in the guest as its own number (host 0 stays 0 under `map:0:1000:1`),
//!   as in virtiofsd.
//! - Within one direction, the source ranges of the rules are disjoint (overlap is refused at
//!   start-up) and sorted by start, so at most one rule covers an id and a binary search finds
//!   it. `BASE + COUNT` must not exceed 2^32 − 1 (virtiofsd's bound: `u32::MAX`, the "no id"
//!   value of chown, is never a source id). A COUNT of 0 is accepted and covers nothing.
//! - Only guest → host can fail (`forbid-guest`); host → guest always gives an id.
//! - With no rule in a direction, translating in it is the identity and costs one length check
//!   (the fast path of every reply and every creating request when nothing is configured).

/// Where one rule sends the ids of its source range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Target {
    /// 1:1 onto the range starting here.
    Base(u32),
    /// Every id onto this one.
    Squash(u32),
    /// Refused.
    Forbid,
}

/// `[start, end)` → `target`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Rule {
    start: u32,
    end: u32,
    target: Target,
}

impl Rule {
    fn apply(&self, id: u32) -> Option<u32> {
        match self.target {
            Target::Base(base) => Some(base.wrapping_add(id - self.start)),
            Target::Squash(to) => Some(to),
            Target::Forbid => None,
        }
    }
}

/// A guest id that `forbid-guest` refuses.
#[derive(Debug, PartialEq, Eq)]
pub struct Forbidden(pub u32);

impl From<Forbidden> for std::io::Error {
    fn from(_: Forbidden) -> std::io::Error {
        std::io::Error::from_raw_os_error(libc::EPERM)
    }
}

/// The translation of one kind of id (uids or gids); the default is the identity.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IdMap {
    /// Guest → host rules: disjoint, sorted by `start`.
    to_host: Vec<Rule>,
    /// Host → guest rules: disjoint, sorted by `start`.
    to_guest: Vec<Rule>,
}

/// The rule of `rules` (disjoint, sorted) that covers `id`.
fn covering(rules: &[Rule], id: u32) -> Option<&Rule> {
    let i = rules.partition_point(|r| r.start <= id);
    rules[..i].last().filter(|r| id < r.end)
}

/// Inserts `rule` (from the option `spec`) keeping `rules` sorted; refuses an overlap.
fn insert(
    rules: &mut Vec<Rule>,
    specs: &mut Vec<String>,
    rule: Rule,
    spec: &str,
    dir: &str,
) -> Result<(), String> {
    if rule.start == rule.end {
        return Ok(());
    }
    let i = rules.partition_point(|r| r.start < rule.start);
    let clash = [i.checked_sub(1), Some(i)]
        .into_iter()
        .flatten()
        .find(|&j| j < rules.len() && rules[j].start < rule.end && rule.start < rules[j].end);
    if let Some(j) = clash {
        return Err(format!(
            "'{spec}' overlaps '{}': both map {dir} ids [{}, {})",
            specs[j],
            rule.start.max(rules[j].start),
            rule.end.min(rules[j].end)
        ));
    }
    rules.insert(i, rule);
    specs.insert(i, spec.to_string());
    Ok(())
}

/// Splits `spec` into its lower-cased type and its numbers.
fn fields(spec: &str) -> Result<(String, Vec<u32>), String> {
    let sep = spec
        .chars()
        .find(|c| !(c.is_alphanumeric() || *c == '-' || *c == '_'))
        .ok_or_else(|| format!("'{spec}': expected TYPE:BASE:...:COUNT"))?;
    let (kind, rest) = spec.split_once(sep).expect("the separator occurs");
    let numbers = rest
        .split(sep)
        .map(|n| {
            n.parse::<u32>()
                .map_err(|e| format!("'{spec}': invalid number '{n}' ({e})"))
        })
        .collect::<Result<Vec<u32>, String>>()?;
    Ok((kind.to_lowercase(), numbers))
}

/// `[base, base + count)`, refused when it passes `u32::MAX`.
fn range(spec: &str, base: u32, count: u32) -> Result<(u32, u32), String> {
    let end = base
        .checked_add(count)
        .ok_or_else(|| format!("'{spec}': range overflow ({base} + {count} > 4294967295)"))?;
    Ok((base, end))
}

impl IdMap {
    /// Builds the map of the given option values (each one rule), in order. The error is one
    /// line naming the bad value.
    pub fn parse<'a>(specs: impl IntoIterator<Item = &'a str>) -> Result<IdMap, String> {
        let mut map = IdMap::default();
        let (mut host_specs, mut guest_specs) = (Vec::new(), Vec::new());
        for spec in specs {
            let (kind, n) = fields(spec)?;
            let want = if kind == "forbid-guest" { 2 } else { 3 };
            let known = [
                "map",
                "guest",
                "host",
                "squash-guest",
                "squash-host",
                "forbid-guest",
            ];
            if !known.contains(&kind.as_str()) {
                return Err(format!(
                    "'{spec}': unknown type '{kind}' (expected map, guest, host, squash-guest, \
                     squash-host or forbid-guest)"
                ));
            }
            if n.len() != want {
                return Err(format!(
                    "'{spec}': '{kind}' takes {want} numbers, got {}",
                    n.len()
                ));
            }
            let count = n[want - 1];
            let mut to_host = |start: u32, target| {
                let (start, end) = range(spec, start, count)?;
                let rule = Rule { start, end, target };
                insert(&mut map.to_host, &mut host_specs, rule, spec, "guest")
            };
            match kind.as_str() {
                "guest" => to_host(n[0], Target::Base(n[1]))?,
                "squash-guest" => to_host(n[0], Target::Squash(n[1]))?,
                "forbid-guest" => to_host(n[0], Target::Forbid)?,
                "map" => to_host(n[0], Target::Base(n[1]))?,
                _ => {}
            }
            let mut to_guest = |start: u32, target| {
                let (start, end) = range(spec, start, count)?;
                let rule = Rule { start, end, target };
                insert(&mut map.to_guest, &mut guest_specs, rule, spec, "host")
            };
            match kind.as_str() {
                "host" => to_guest(n[0], Target::Base(n[1]))?,
                "squash-host" => to_guest(n[0], Target::Squash(n[1]))?,
                "map" => to_guest(n[1], Target::Base(n[0]))?,
                _ => {}
            }
        }
        Ok(map)
    }

    /// Whether every id maps to itself in both directions.
    pub fn is_identity(&self) -> bool {
        self.to_host.is_empty() && self.to_guest.is_empty()
    }

    /// The host id of guest id `id`.
    #[inline]
    pub fn to_host(&self, id: u32) -> Result<u32, Forbidden> {
        if self.to_host.is_empty() {
            return Ok(id);
        }
        match covering(&self.to_host, id) {
            None => Ok(id),
            Some(rule) => rule.apply(id).ok_or(Forbidden(id)),
        }
    }

    /// The guest id of host id `id`.
    #[inline]
    pub fn to_guest(&self, id: u32) -> u32 {
        if self.to_guest.is_empty() {
            return id;
        }
        covering(&self.to_guest, id).map_or(id, |rule| rule.apply(id).unwrap_or(id))
    }
}

/// The uid and gid translations of one share.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IdMaps {
    pub uid: IdMap,
    pub gid: IdMap,
}

/// `ACL_USER` and `ACL_GROUP`: the entries of a POSIX ACL xattr that name a uid or a gid.
const ACL_USER: u16 = 0x02;
const ACL_GROUP: u16 = 0x08;
/// The layout of `system.posix_acl_*` values: a 4-byte version (2), then 8-byte entries of a
/// 16-bit tag, 16-bit permissions and a 32-bit id, all little-endian.
const ACL_VERSION: u32 = 2;
const ACL_HEADER: usize = 4;
const ACL_ENTRY: usize = 8;

/// Whether the xattr name (as the guest gives it) holds a POSIX ACL.
pub fn is_acl_name(name: &[u8]) -> bool {
    name == b"system.posix_acl_access" || name == b"system.posix_acl_default"
}

impl IdMaps {
    pub fn is_identity(&self) -> bool {
        self.uid.is_identity() && self.gid.is_identity()
    }

    /// A stat result's owner as the guest must see it.
    #[inline]
    pub fn stat_to_guest(&self, st: &mut libc::statx) {
        st.stx_uid = self.uid.to_guest(st.stx_uid);
        st.stx_gid = self.gid.to_guest(st.stx_gid);
    }

    /// Rewrites the uids and gids of an ACL xattr value in place with `uid`/`gid`. A value that
    /// is not a version-2 ACL is EINVAL (what the host kernel answers to it).
    fn acl_ids(
        value: &mut [u8],
        mut uid: impl FnMut(u32) -> Result<u32, Forbidden>,
        mut gid: impl FnMut(u32) -> Result<u32, Forbidden>,
    ) -> std::io::Result<()> {
        let einval = || std::io::Error::from_raw_os_error(libc::EINVAL);
        let (head, entries) = value.split_at_mut_checked(ACL_HEADER).ok_or_else(einval)?;
        if u32::from_le_bytes(head.try_into().expect("4 bytes")) != ACL_VERSION
            || entries.len() % ACL_ENTRY != 0
        {
            return Err(einval());
        }
        for e in entries.chunks_exact_mut(ACL_ENTRY) {
            let tag = u16::from_le_bytes([e[0], e[1]]);
            let id = u32::from_le_bytes([e[4], e[5], e[6], e[7]]);
            let new = match tag {
                ACL_USER => uid(id)?,
                ACL_GROUP => gid(id)?,
                _ => continue,
            };
            e[4..8].copy_from_slice(&new.to_le_bytes());
        }
        Ok(())
    }

    /// An ACL value from the guest, with host ids (an entry naming a forbidden id: EPERM).
    pub fn acl_to_host(&self, value: &mut [u8]) -> std::io::Result<()> {
        Self::acl_ids(value, |u| self.uid.to_host(u), |g| self.gid.to_host(g))
    }

    /// An ACL value from the host, with guest ids; a value that is no ACL is left as it is.
    pub fn acl_to_guest(&self, value: &mut [u8]) {
        // Only a malformed value fails, before anything is changed.
        Self::acl_ids(
            value,
            |u| Ok(self.uid.to_guest(u)),
            |g| Ok(self.gid.to_guest(g)),
        )
        .ok();
    }
}

#[cfg(test)]
mod tests;
