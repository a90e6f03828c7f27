//! The two indexes of an inode table shard: sets of `Arc<Inode>` looked up by node ID and by
//! key, 8 bytes per entry (a map from the same keys would store each key a second time).
//!
//! Invariant: an inode's node ID and key never change while it is in a set, so the hash and
//! equality of an entry are those of the `u64` or [`InodeKey`] it is looked up by (as `Borrow`
//! requires).

use std::borrow::Borrow;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use super::inode_table::{Inode, InodeKey};

/// An inode in its shard's `by_id` set: hashed and compared by its node ID (so the set is looked
/// up by a `u64`).
pub(super) struct ById(pub(super) Arc<Inode>);

impl Borrow<u64> for ById {
    fn borrow(&self) -> &u64 {
        &self.0.nodeid
    }
}

impl Hash for ById {
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.0.nodeid.hash(h)
    }
}

impl PartialEq for ById {
    fn eq(&self, other: &ById) -> bool {
        self.0.nodeid == other.0.nodeid
    }
}

impl Eq for ById {}

/// An inode in its shard's `by_key` set: hashed and compared by its key (immutable).
pub(super) struct ByKey(pub(super) Arc<Inode>);

impl Borrow<InodeKey> for ByKey {
    fn borrow(&self) -> &InodeKey {
        &self.0.key
    }
}

impl Hash for ByKey {
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.0.key.hash(h)
    }
}

impl PartialEq for ByKey {
    fn eq(&self, other: &ByKey) -> bool {
        self.0.key == other.0.key
    }
}

impl Eq for ByKey {}
