//! vhostfs: a vhost-user virtio-fs daemon. See docs/ARCHITECTURE.md for the map.
pub mod capabilities;
pub mod cli;
pub mod credentials;
pub mod daemon;
pub mod fd_budget;
pub mod file_handle;
pub mod fuse_server;
pub mod handle_table;
pub mod inode_table;
pub mod landlock;
pub mod logger;
pub mod passthrough;
pub mod pid_file;
pub mod sandbox;
pub mod seccomp;
pub mod vhost_device;
pub mod worker_pool;
