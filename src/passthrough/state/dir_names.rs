//! `--case-insensitive`: the names of recently used directories, by folded name, so that a
//! lookup that misses by case does not read a 100,000-entry directory each time.
//!
//! Invariants:
//! - A [`Listing`] is used only while its stamp (the directory's mtime and ctime, to the
//!   nanosecond) equals the directory's: any change the host makes (create, rename, delete)
//!   moves them and the next use reads the directory again. The daemon's own changes are
//!   folded in under the listing's lock ([`Listing::changed`]) when the stamp had not moved
//!   before them, so a guest that copies 1,000 files into a folder does not re-read it 1,000
//!   times.
//! - The listing's lock, taken for writing, is also the directory's lock for
//!   `--case-insensitive` creations: a check that no other name folds alike and the creation run
//!   under it, so two creators of `foo` and `FOO` on two queues cannot both succeed. A host
//!   process creating at the same moment is not held by it. Lookups by another case only read a
//!   current listing, so they run side by side (queues and pool threads looking up in one
//!   folder do not wait on each other).
//! - At most [`MAX_DIRS`] listings are kept (the least recently used goes first); a listing
//!   costs about 60 bytes per name (the name, its hash, the map's slot).
//! - A directory that is case-insensitive on the host (ext4/f2fs `chattr +F`, FS_CASEFOLD_FL)
//!   has an empty listing marked `host_folds`: the host answers by any case itself.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use super::host_inode::InodeKey;
use crate::sync::{read, write};

/// Listings kept at most.
pub const MAX_DIRS: usize = 64;

/// A directory's mtime and ctime (seconds, nanoseconds).
pub type Stamp = [(i64, u32); 2];

/// The stamp `st` (statx with STATX_MTIME | STATX_CTIME) gives.
pub fn stamp_of(st: &libc::statx) -> Stamp {
    [
        (st.stx_mtime.tv_sec, st.stx_mtime.tv_nsec),
        (st.stx_ctime.tv_sec, st.stx_ctime.tv_nsec),
    ]
}

/// One directory's names by the hash of their folded form.
#[derive(Default)]
pub struct Listing {
    /// `None`: never read, or dropped.
    stamp: Option<Stamp>,
    /// The host folds names itself: nothing is kept.
    pub host_folds: bool,
    /// Several names folding alike were warned about (once per listing; set by readers).
    pub warned: AtomicBool,
    by_fold: HashMap<u64, Vec<Box<[u8]>>>,
    hasher: std::hash::RandomState,
}

impl Listing {
    fn hash(&self, folded: &[u8]) -> u64 {
        let mut h = self.hasher.build_hasher();
        h.write(folded);
        h.finish()
    }

    /// Whether the listing is the directory's as of `stamp`.
    pub fn is_current(&self, stamp: &Stamp) -> bool {
        self.stamp.as_ref() == Some(stamp)
    }

    /// Replaces the names with `names` (folded by `fold`), read at `stamp`.
    pub fn fill<'n>(
        &mut self,
        stamp: Stamp,
        host_folds: bool,
        names: impl Iterator<Item = &'n [u8]>,
        fold: impl Fn(&[u8]) -> Vec<u8>,
    ) {
        self.by_fold.clear();
        self.host_folds = host_folds;
        self.warned.store(false, Ordering::Relaxed);
        if !host_folds {
            for n in names {
                let h = self.hash(&fold(n));
                self.by_fold.entry(h).or_default().push(n.into());
            }
        }
        self.by_fold.shrink_to_fit();
        self.stamp = Some(stamp);
    }

    /// Of the names whose folded form is `folded` (`same` tells a real match from a hash
    /// collision): the first in byte order, so that the choice among several is
    /// deterministic, and how many there are.
    pub fn alike(
        &self,
        folded: &[u8],
        mut same: impl FnMut(&[u8]) -> bool,
    ) -> (Option<&[u8]>, usize) {
        let mut first: Option<&[u8]> = None;
        let mut count = 0;
        for n in self.by_fold.get(&self.hash(folded)).into_iter().flatten() {
            if same(n) {
                count += 1;
                first = Some(first.map_or(&**n, |f| f.min(&**n)));
            }
        }
        (first, count)
    }

    /// After the daemon's own change of the directory: `added` and `removed` names (folded as
    /// `fold` does). `before` is the stamp the directory had just before the change, `after`
    /// the one it has now: when `before` was not the listing's, the host changed the directory
    /// too and the listing is dropped instead.
    pub fn changed(
        &mut self,
        before: &Stamp,
        after: Stamp,
        added: Option<&[u8]>,
        removed: Option<&[u8]>,
        fold: impl Fn(&[u8]) -> Vec<u8>,
    ) {
        if !self.is_current(before) {
            self.stamp = None;
            return;
        }
        if !self.host_folds {
            if let Some(r) = removed {
                let h = self.hash(&fold(r));
                if let Some(v) = self.by_fold.get_mut(&h) {
                    v.retain(|n| **n != *r);
                    if v.is_empty() {
                        self.by_fold.remove(&h);
                    }
                }
            }
            if let Some(a) = added {
                let h = self.hash(&fold(a));
                let v = self.by_fold.entry(h).or_default();
                if !v.iter().any(|n| **n == *a) {
                    v.push(a.into());
                }
            }
        }
        self.stamp = Some(after);
    }

    /// Drops the names: the next use reads the directory again.
    pub fn drop_names(&mut self) {
        self.stamp = None;
        self.by_fold = HashMap::new();
    }
}

/// A listing and when it was last used (the [`DirNames`] clock).
type Kept = (AtomicU64, Arc<RwLock<Listing>>);

/// The listings, by directory.
#[derive(Default)]
pub struct DirNames {
    dirs: RwLock<HashMap<InodeKey, Kept>>,
    clock: AtomicU64,
}

impl DirNames {
    /// The listing of the directory `key` (a new, empty one if it has none). A directory
    /// already kept is found under the read lock.
    pub fn listing(&self, key: InodeKey) -> Arc<RwLock<Listing>> {
        let now = self.clock.fetch_add(1, Ordering::Relaxed);
        if let Some((used, l)) = read(&self.dirs).get(&key) {
            used.store(now, Ordering::Relaxed);
            return Arc::clone(l);
        }
        let mut dirs = write(&self.dirs);
        if let Some((used, l)) = dirs.get(&key) {
            used.store(now, Ordering::Relaxed);
            return Arc::clone(l);
        }
        if dirs.len() >= MAX_DIRS {
            let oldest = dirs
                .iter()
                .min_by_key(|(_, (used, _))| used.load(Ordering::Relaxed))
                .map(|(k, _)| *k);
            if let Some(k) = oldest {
                dirs.remove(&k);
            }
        }
        let l = Arc::new(RwLock::new(Listing::default()));
        dirs.insert(key, (AtomicU64::new(now), Arc::clone(&l)));
        l
    }

    /// Listings kept.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        read(&self.dirs).len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fold(n: &[u8]) -> Vec<u8> {
        n.to_ascii_lowercase()
    }

    #[test]
    fn names_by_fold_and_own_changes() {
        let mut l = Listing::default();
        let s0 = [(1, 0), (1, 0)];
        let names: [&[u8]; 3] = [b"Foo", b"foo", b"bar"];
        l.fill(s0, false, names.into_iter(), fold);
        assert!(l.is_current(&s0));
        let same = |n: &[u8]| fold(n) == b"foo";
        assert_eq!(l.alike(b"foo", same), (Some(&b"Foo"[..]), 2));
        // Our own create while the stamp had not moved: folded in.
        let s1 = [(2, 0), (2, 0)];
        l.changed(&s0, s1, Some(b"Baz"), Some(b"Foo"), fold);
        assert!(l.is_current(&s1));
        assert_eq!(
            l.alike(b"baz", |n| fold(n) == b"baz"),
            (Some(&b"Baz"[..]), 1)
        );
        assert_eq!(l.alike(b"foo", same), (Some(&b"foo"[..]), 1));
        assert_eq!(l.alike(b"qux", |n| fold(n) == b"qux"), (None, 0));
        // The host changed it in between: dropped.
        l.changed(&[(9, 9), (9, 9)], [(3, 0), (3, 0)], Some(b"x"), None, fold);
        assert!(!l.is_current(&[(3, 0), (3, 0)]));
    }

    #[test]
    fn at_most_max_dirs() {
        let d = DirNames::default();
        for ino in 0..(MAX_DIRS as u64 + 10) {
            let key = InodeKey {
                ino,
                dev: 1,
                mnt_id: 1,
            };
            d.listing(key);
        }
        assert_eq!(d.len(), MAX_DIRS);
    }
}
