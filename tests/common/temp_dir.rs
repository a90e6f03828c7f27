//! Scratch directories: the one temp-dir helper of the project's tests. Besides the integration
//! tests and benches (through `common`), the unit tests (`src/lib.rs`) and the fuzz harness
//! include this file by `#[path]`, so it uses nothing but std.
#![allow(dead_code)]

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

/// A fresh directory under the system temp dir, removed recursively on drop.
pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    pub fn new(prefix: &str) -> io::Result<TempDir> {
        TempDir::new_in(&std::env::temp_dir(), prefix)
    }

    /// A fresh directory under `base` (e.g. `/var/tmp`, on disk where `/tmp` may be a tmpfs).
    pub fn new_in(base: &Path, prefix: &str) -> io::Result<TempDir> {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let path = base.join(format!(
            "{prefix}-{}-{}-{nanos}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        fs::create_dir(&path)?;
        Ok(TempDir { path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `self.path()` joined with `name`.
    pub fn join(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }
}

/// A `TempDir` stands for its path, like the `PathBuf` a test would otherwise hold.
impl std::ops::Deref for TempDir {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.path);
    }
}
