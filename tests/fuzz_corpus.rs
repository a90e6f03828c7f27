//! Replays the dispatcher fuzz corpus (`fuzz/corpus/dispatcher`: the seeds of
//! `fuzz/gen_corpus.py` and inputs of crashes that were fixed) through the fuzz target's own
//! harness (`fuzz/harness.rs`), on stable Rust: every input must pass every invariant.

#[path = "../fuzz/harness.rs"]
mod harness;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;

#[test]
fn fuzz_corpus_replays_cleanly() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/dispatcher");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert!(
        files.len() >= 50,
        "{} inputs in {}",
        files.len(),
        dir.display()
    );
    let base = harness::TempDir::new("vhostfs-fuzz-corpus").unwrap();
    // Outside checks after every input, so that a failure names its input.
    let mut h = harness::Harness::new(base, 1);
    let failed: Vec<_> = files
        .iter()
        .filter(|f| {
            let data = std::fs::read(f).unwrap();
            catch_unwind(AssertUnwindSafe(|| h.run(&data))).is_err()
        })
        .collect();
    assert!(failed.is_empty(), "inputs that failed: {failed:?}");
}
