//! Placeholder until the CLI module lands (branch `cli`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InodeFileHandles {
    Never,
    Prefer,
    Mandatory,
}
