//! Hash maps keyed by the daemon's own numbers: node IDs (slot, epoch and shard bits, see
//! `inode_table`) and file handles (a counter, see `handle_table`). The guest only names keys
//! the daemon handed out; it never chooses them, so no guest can aim keys at one bucket, and
//! one multiply does what SipHash does for them. (A migration's load restores the source's
//! fhs: numbers the source daemon handed out.)

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A map from one of the daemon's own numbers.
pub(in crate::passthrough) type OwnIdMap<V> = HashMap<u64, V, BuildHasherDefault<OwnIdHasher>>;

/// Fibonacci hashing of a `u64` (see the module).
#[derive(Default)]
pub(in crate::passthrough) struct OwnIdHasher(u64);

/// [`OwnIdHasher`]'s hash of one of the daemon's own numbers, for a table that is no map (the
/// fd cache's ghosts).
pub(in crate::passthrough) fn own_id_hash(n: u64) -> u64 {
    let mut h = OwnIdHasher::default();
    h.write_u64(n);
    h.finish()
}

impl Hasher for OwnIdHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u64(&mut self, n: u64) {
        // The product's high bits depend on every bit of the key.
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }

    /// The product with its high bits folded into the low ones (the map's bucket index) and
    /// its top bits (the map's control byte) as they are.
    fn finish(&self) -> u64 {
        self.0 ^ (self.0 >> 29)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::hash::Hasher;

    use super::OwnIdHasher;

    /// Buckets of 1,024 that `keys` fall into.
    fn buckets(keys: impl Iterator<Item = u64>) -> usize {
        let hashes: HashSet<u64> = keys
            .map(|k| {
                let mut h = OwnIdHasher::default();
                h.write_u64(k);
                h.finish() & 1023
            })
            .collect();
        hashes.len()
    }

    #[test]
    fn node_ids_and_fhs_spread_over_buckets() {
        // Uniform hashing fills ~1,005 of 1,024 buckets with 4,096 keys. Sequential slots of
        // one inode-table shard, as the table hands them out: their own low bits would fill 64
        // (the 4 low bits are the shard's).
        let nodes = buckets((1..=4096u64).map(|slot| 1 << 32 | slot << 4 | 3));
        assert!(nodes > 900, "node IDs: {nodes} of 1024 buckets used");
        // The fhs of one handle-table shard (every 16th).
        let fhs = buckets((0..4096u64).map(|i| 16 * i + 5));
        assert!(fhs > 900, "fhs: {fhs} of 1024 buckets used");
    }
}
