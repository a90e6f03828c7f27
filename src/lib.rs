//! vhostfs: a vhost-user virtio-fs daemon. See docs/ARCHITECTURE.md for the map.
pub mod cli;
pub mod fuse_server;
pub mod passthrough;
