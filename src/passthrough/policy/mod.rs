//! What a request passes through on its way to the host. Uses the state, never an operation.

pub mod acl;
pub mod case_fold;
pub mod credentials;
pub mod id_map;
pub mod killpriv;
pub mod windows_names;
pub mod writeback;
pub mod xattr_map;
