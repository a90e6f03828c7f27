//! A guest that holds many inodes: `n` files in directories of [`PER_DIR`] on the host, every
//! one looked up (the daemon holds a node ID per file), some opened. Used for the migration's
//! and the in-place upgrade's numbers at 10,000+ inodes.

use std::ffi::CString;
use std::fs;
use std::path::Path;

use super::fuse_abi::{FUSE_LOOKUP, FUSE_OPEN};
use super::FuseClient;

/// Files per directory of the share (a tree of N / 100 directories).
pub const PER_DIR: usize = 100;

/// Creates `n` files in `n / PER_DIR` directories `dNNNN` of `shared`, looks every directory
/// and file up through `c` (64 requests in flight) and opens one file in `open_every`
/// (`O_RDWR`). Returns the files' node IDs.
pub fn hold_many(c: &FuseClient, shared: &Path, n: usize, open_every: usize) -> Vec<u64> {
    for d in 0..n / PER_DIR {
        let dir = shared.join(format!("d{d:04}"));
        fs::create_dir(&dir).unwrap();
        for f in 0..PER_DIR {
            fs::write(dir.join(format!("file-{f:03}")), b"x").unwrap();
        }
    }
    let dirs: Vec<(Vec<u8>, usize)> = (0..n / PER_DIR)
        .map(|d| (lookup_req(c, 1, &format!("d{d:04}")), 16 + 128))
        .collect();
    let dir_ids: Vec<u64> = c.pipeline(&dirs, 64).into_iter().map(node_id).collect();
    let mut requests = Vec::new();
    for id in &dir_ids {
        for f in 0..PER_DIR {
            requests.push((lookup_req(c, *id, &format!("file-{f:03}")), 16 + 128));
        }
    }
    let ids: Vec<u64> = c.pipeline(&requests, 64).into_iter().map(node_id).collect();
    let opens: Vec<(Vec<u8>, usize)> = ids
        .iter()
        .step_by(open_every)
        .map(|id| {
            let body = [libc::O_RDWR as u32, 0].map(u32::to_ne_bytes).concat();
            (c.request(FUSE_OPEN, *id, &body), 16 + 16)
        })
        .collect();
    assert!(c.pipeline(&opens, 64).iter().all(Result::is_ok));
    ids
}

fn node_id(reply: Result<Vec<u8>, i32>) -> u64 {
    u64::from_ne_bytes(reply.expect("LOOKUP")[..8].try_into().unwrap())
}

fn lookup_req(c: &FuseClient, parent: u64, name: &str) -> Vec<u8> {
    c.request(
        FUSE_LOOKUP,
        parent,
        CString::new(name).unwrap().as_bytes_with_nul(),
    )
}
