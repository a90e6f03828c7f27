//! Per-opcode counters: requests, errors, data bytes and latency in one slot per opcode number,
//! and what the server reports of them.

use super::abi::*;
use super::FuseServer;
use crate::metrics::requests::{RequestMetrics, RequestSnapshot};

/// Counter slots: one per opcode number up to FUSE_MAX_OPCODE, then one for everything else.
const UNKNOWN_SLOT: usize = FUSE_MAX_OPCODE as usize + 1;
/// How many counter slots [`ServerMetrics`] has.
pub const OP_SLOTS: usize = UNKNOWN_SLOT + 1;

/// Requests, errors, data bytes and latency per opcode slot (see [`slot_name`]).
pub type ServerMetrics = RequestMetrics<OP_SLOTS>;

/// The opcode name (as in the kernel's `fuse_opcode`, without `FUSE_`) of a counter slot, or
/// `None` for a slot no opcode uses; the last slot is "UNKNOWN".
pub fn slot_name(slot: usize) -> Option<&'static str> {
    if slot == UNKNOWN_SLOT {
        Some("UNKNOWN")
    } else {
        opcode_name(u32::try_from(slot).ok()?)
    }
}

/// What [`FuseServer::stats`] reports for one opcode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpStats {
    pub name: &'static str,
    /// Requests seen.
    pub count: u64,
    /// Data bytes moved (READ and WRITE payloads; 0 for other opcodes).
    pub bytes: u64,
}

/// The counter slot of `opcode`: its number if we know it, else [`UNKNOWN_SLOT`].
pub(super) fn slot_of(opcode: u32) -> usize {
    match opcode_name(opcode) {
        Some(_) => opcode as usize,
        None => UNKNOWN_SLOT,
    }
}

impl FuseServer {
    /// The request metrics, for a snapshot.
    pub fn metrics(&self) -> &ServerMetrics {
        &self.metrics
    }

    /// Requests and data bytes per opcode, for opcodes seen at least once, in opcode order;
    /// requests with an opcode we do not know are counted as "UNKNOWN".
    pub fn stats(&self) -> Vec<OpStats> {
        let RequestSnapshot { ops, .. } = self.metrics.snapshot();
        ops.iter()
            .enumerate()
            .filter_map(|(slot, op)| {
                let name = slot_name(slot)?;
                (op.count > 0).then_some(OpStats {
                    name,
                    count: op.count,
                    bytes: op.bytes,
                })
            })
            .collect()
    }

    /// Logs [`Self::stats`] at debug level, one line per opcode.
    pub fn log_stats(&self) {
        for s in self.stats() {
            log::debug!("stats: {} count={} bytes={}", s.name, s.count, s.bytes);
        }
    }

    /// Adds `n` data bytes to a (known) opcode's counter.
    pub(super) fn count_bytes(&self, opcode: u32, n: usize) {
        self.metrics.add_bytes(slot_of(opcode), n as u64);
    }
}
