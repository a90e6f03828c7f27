//! vhostfs: a vhost-user virtio-fs daemon. See docs/ARCHITECTURE.md for the map.
pub mod cli;
pub mod daemon;
pub mod fuse_server;
pub mod logger;
pub mod metrics;
pub mod on_demand;
mod option_values;
pub mod passthrough;
pub mod pid_file;
pub mod sandbox;
pub mod shutdown;
pub mod stall_watch;
pub mod sync;
pub mod systemd;
pub mod vhost_device;
pub mod worker_pool;

/// Scratch directories for the unit tests: the integration tests' helper, the one for all tests.
#[cfg(test)]
#[path = "../tests/common/temp_dir.rs"]
mod temp_dir;
// The generator's whole API, which the integration tests use more of.
#[cfg(test)]
#[path = "../tests/common/rng.rs"]
#[allow(dead_code)]
mod test_rng;
