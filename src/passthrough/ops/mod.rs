//! The FUSE operations on the host directory, each an `impl PassthroughFs` block.

mod case_names;
mod dirs;
mod entries;
mod files;
mod guest_view;
pub mod labels;
mod lookups;
mod setattr;
mod streaks;
mod xattrs;
