//! Descriptor chains and FUSE requests from the fuzzer through `FuseServer::handle_chain`
//! over a real `PassthroughFs`; see `fuzz/harness.rs` for the input format and invariants.
#![no_main]

use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

use libfuzzer_sys::fuzz_target;

#[path = "../harness.rs"]
mod harness;

/// Checking the canary and the base directory costs a few syscalls: every this many inputs.
const CHECK_EVERY: u64 = 64;

/// The scratch directory of this process, under `$VHOSTFS_FUZZ_DIR` (e.g. a small tmpfs: the
/// guest can FALLOCATE) or the system temp dir. Directories of dead fuzzer processes (fork
/// mode starts many, and they exit without dropping the harness) are removed.
fn base() -> harness::TempDir {
    let root = std::env::var_os("VHOSTFS_FUZZ_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("vhostfs-fuzz"));
    std::fs::create_dir_all(&root).unwrap();
    for e in std::fs::read_dir(&root).unwrap().flatten() {
        let name = e.file_name();
        // `run-PID-...`, as `TempDir::new_in` names them.
        let stale = name
            .to_str()
            .and_then(|s| s.strip_prefix("run-")?.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok())
            .is_some_and(|pid| !PathBuf::from(format!("/proc/{pid}")).exists());
        if stale {
            let _ = std::process::Command::new("rm")
                .arg("-rf")
                .arg(e.path())
                .status();
        }
    }
    harness::TempDir::new_in(&root, "run").unwrap()
}

fuzz_target!(|data: &[u8]| {
    static H: OnceLock<Mutex<harness::Harness>> = OnceLock::new();
    let h = H.get_or_init(|| Mutex::new(harness::Harness::new(base(), CHECK_EVERY)));
    h.lock().unwrap_or_else(|e| e.into_inner()).run(data);
});
