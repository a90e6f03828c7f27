//! The in-process test guest: a vhost-user frontend with guest memory and split virtqueues that
//! speaks FUSE to a virtio-fs daemon (ours or the reference virtiofsd), plus helpers to run
//! daemons. Shared by tests (`mod common;`) and benches
//! (`#[path = "../tests/common/mod.rs"] mod common;`). Each binary uses only part of it, hence
//! the allow below (`unused_imports` for the re-exports).
#![allow(dead_code, unused_imports)]

pub mod daemon;
pub mod dirty_log;
pub mod footprint;
pub mod frontend;
pub mod fuse_abi;
pub mod fuse_client;
pub mod gluster;
pub mod guest_memory;
pub mod hold;
pub mod mount;
pub mod rng;
pub mod served;
pub mod session;
pub mod smoke;
pub mod temp_dir;
pub mod virtqueue;
pub mod windows_client;

pub use daemon::{spawn_vhostfs, virtiofsd_path, Daemon};
pub use frontend::{GuestOptions, SavedState, TestGuest};
pub use fuse_client::FuseClient;
pub use guest_memory::GuestBuf;
pub use mount::Mount;
pub use session::Session;
pub use temp_dir::TempDir;
pub use virtqueue::{Next, RawDesc};
