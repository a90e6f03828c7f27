//! The note's numbers (docs/migration.md): the state's size and the time the daemons add to
//! the switch-over (save on the source, load on the destination) with 10,000 and 100,000 inodes
//! held, per mode. Ignored in a plain `cargo test` (a minute); run with
//! `cargo test --release --test migration -- --ignored --nocapture numbers`.

use std::ffi::CString;
use std::fs;
use std::time::Instant;

use super::common::fuse_abi::{FUSE_LOOKUP, FUSE_OPEN};
use super::common::FuseClient;
use super::{start, Pair};

/// Files per directory of the share (a tree of N / 100 directories).
const PER_DIR: usize = 100;
/// Of the inodes held, one in this many is also open.
const OPEN_EVERY: usize = 100;

/// `n` files in `n / PER_DIR` directories, every one looked up, one in [`OPEN_EVERY`] open.
fn hold_many(p: &Pair, n: usize) {
    let c = p.c();
    let mut requests = Vec::new();
    for d in 0..n / PER_DIR {
        let dir = p.shared.join(&format!("d{d:04}"));
        fs::create_dir(&dir).unwrap();
        for f in 0..PER_DIR {
            fs::write(dir.join(format!("file-{f:03}")), b"x").unwrap();
        }
    }
    let dirs: Vec<(Vec<u8>, usize)> = (0..n / PER_DIR)
        .map(|d| (lookup_req(c, 1, &format!("d{d:04}")), 16 + 128))
        .collect();
    let dir_ids: Vec<u64> = c
        .pipeline(&dirs, 64)
        .into_iter()
        .map(|r| u64::from_ne_bytes(r.unwrap()[..8].try_into().unwrap()))
        .collect();
    for id in &dir_ids {
        for f in 0..PER_DIR {
            requests.push((lookup_req(c, *id, &format!("file-{f:03}")), 16 + 128));
        }
    }
    let ids: Vec<u64> = c
        .pipeline(&requests, 64)
        .into_iter()
        .map(|r| u64::from_ne_bytes(r.unwrap()[..8].try_into().unwrap()))
        .collect();
    let opens: Vec<(Vec<u8>, usize)> = ids
        .iter()
        .step_by(OPEN_EVERY)
        .map(|id| {
            let body = [libc::O_RDWR as u32, 0].map(u32::to_ne_bytes).concat();
            (c.request(FUSE_OPEN, *id, &body), 16 + 16)
        })
        .collect();
    assert!(c.pipeline(&opens, 64).iter().all(Result::is_ok));
}

fn lookup_req(c: &FuseClient, parent: u64, name: &str) -> Vec<u8> {
    c.request(
        FUSE_LOOKUP,
        parent,
        CString::new(name).unwrap().as_bytes_with_nul(),
    )
}

#[test]
#[ignore]
fn numbers() {
    println!("| inodes held | mode | --inode-file-handles | state bytes | save ms | load ms |");
    println!("|---|---|---|---|---|---|");
    for n in [10_000, 100_000] {
        for (mode, handles) in [
            ("find-paths", "prefer"),
            ("file-handles", "prefer"),
            ("find-paths", "never"),
        ] {
            // `never` holds an fd per inode: 100,000 are past this machine's RLIMIT_NOFILE
            // (ENFILE at ~19,700, see docs/benchmarks.md).
            if handles == "never" && n > 10_000 {
                continue;
            }
            let args = [
                &format!("--migration-mode={mode}")[..],
                &format!("--inode-file-handles={handles}"),
                "--log-level=warn",
            ];
            let mut p = start(&args, &args);
            hold_many(&p, n);
            // The fd cache has let go of the lookups' fds (as after a quiet second in a guest).
            std::thread::sleep(std::time::Duration::from_millis(2500));
            let saved = p.c().guest().save_state().unwrap();
            let start = Instant::now();
            p.migrate_with(&saved).unwrap();
            let load = start.elapsed();
            // Spot check: the last file looked up is there under its node ID.
            assert!(p.c().getattr(1, None).is_ok());
            println!(
                "| {n} | {mode} | {handles} | {} | {:.1} | {:.1} |",
                saved.bytes.len(),
                saved.took.as_secs_f64() * 1e3,
                load.as_secs_f64() * 1e3
            );
        }
    }
}
