//! vhostfs: a vhost-user virtio-fs daemon. See docs/ARCHITECTURE.md for the map.
pub mod cli;
pub mod logger;
pub mod pid_file;
