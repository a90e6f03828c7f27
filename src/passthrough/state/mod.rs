//! What the filesystem holds between requests. Nothing here imports an operation or a policy.

pub mod dir_names;
pub mod fd_budget;
pub mod fd_cache;
pub mod file_handle;
pub mod guest_state;
pub mod handle_table;
pub mod host_inode;
pub mod inode_index;
pub mod inode_table;
pub mod own_ids;
