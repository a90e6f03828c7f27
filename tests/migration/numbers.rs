//! The note's numbers (docs/migration.md): the state's size and the time the daemons add to
//! the switch-over (save on the source, load on the destination) with 10,000 and 100,000 inodes
//! held, per mode. Ignored in a plain `cargo test` (a minute); run with
//! `cargo test --release --test migration -- --ignored --nocapture numbers`.

use std::time::Instant;

use super::common::hold::hold_many;
use super::start;

/// Of the inodes held, one in this many is also open.
const OPEN_EVERY: usize = 100;

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
            hold_many(p.c(), p.shared.path(), n, OPEN_EVERY);
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
