//! The guest is untrusted: malformed FUSE requests, bogus node IDs and file handles, names that
//! try to leave the shared directory, broken descriptor chains and a few thousand random
//! requests, all sent over the real vhost-user socket to a vhostfs process.
//!
//! After each batch the daemon must still be running, answer GETATTR on the root and a LOOKUP,
//! hold no more fds than the guest legitimately made it hold (plus a small transient slack),
//! never have printed "panicked", and nothing next to the shared directory (a "canary" tree)
//! may have changed.

#[path = "../common/mod.rs"]
mod common;

mod chains;
mod harness;
mod names;
mod requests;
mod secctx;
