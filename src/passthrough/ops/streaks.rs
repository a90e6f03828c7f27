//! Per-thread guesses of what a thread's next LOOKUP will be, so that the cheaper way to
//! answer it is tried first. Each is a count that moves by one with each LOOKUP, up for one kind
//! and down for the other, and saturates at ±[`BOUND`]: it turns after a few lookups of the
//! other kind. Per thread, so queue threads share no counter. A wrong guess costs a syscall or
//! two, never a wrong answer.

use std::cell::Cell;
use std::thread::LocalKey;

/// The count saturates here (either way).
const BOUND: i8 = 4;

/// One per-thread count (starting at 0) and the count from which the kind is expected.
pub(in crate::passthrough) struct Streak {
    count: &'static LocalKey<Cell<i8>>,
    expect_from: i8,
}

impl Streak {
    /// Whether the thread's next LOOKUP is likely of the kind.
    pub(in crate::passthrough) fn likely(&self) -> bool {
        self.count.with(|s| s.get() >= self.expect_from)
    }

    /// A LOOKUP was (`of_kind`) or was not of the kind.
    pub(in crate::passthrough) fn saw(&self, of_kind: bool) {
        self.count.with(|s| {
            let v = s.get();
            s.set(if of_kind {
                (v + 1).min(BOUND)
            } else {
                (v - 1).max(-BOUND)
            });
        });
    }
}

thread_local! {
    static KNOWN: Cell<i8> = const { Cell::new(0) };
    static OTHER_CASE: Cell<i8> = const { Cell::new(0) };
}

/// Whether a thread's next LOOKUP is likely of an inode the guest holds already (a revalidation,
/// a `stat` again), so that `PassthroughFs::lookup_known` is worth trying first; a walk of new
/// names (a first `ls -l`, a LOOKUP after FORGET) goes straight to the lookup by fd. Expected
/// from the start.
pub(in crate::passthrough) const KNOWN_INODE: Streak = Streak {
    count: &KNOWN,
    expect_from: 0,
};

/// `--case-insensitive`: whether a thread's next LOOKUP is likely of a name spelt in another case
/// than the host's (a program that spells its files its own way), so that the directory's kept
/// names are read first and the exact `statx`, which would fail, is skipped. Expected only once
/// such lookups outnumber exact ones (names from a listing), whose path then costs nothing more.
pub(in crate::passthrough) const OTHER_CASE_NAME: Streak = Streak {
    count: &OTHER_CASE,
    expect_from: 1,
};
