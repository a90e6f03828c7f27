//! Where an upgrade's pause goes: time marks from the moment the queues began to stop, on
//! CLOCK_MONOTONIC (the same clock in both processes), logged at debug level once the pause
//! is over for the process that took them.

/// CLOCK_MONOTONIC in ns.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid out pointer; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The phases of one pause, each as the time it ended.
pub struct Marks {
    /// When the pause began (ns).
    pub start: u64,
    marks: Vec<(&'static str, u64)>,
    /// What moved (logged with the phases).
    pub detail: String,
}

impl Marks {
    pub fn since(start: u64) -> Marks {
        Marks {
            start,
            marks: Vec::with_capacity(8),
            detail: String::new(),
        }
    }

    /// `what` has just ended.
    pub fn mark(&mut self, what: &'static str) {
        self.marks.push((what, monotonic_ns()));
    }

    /// Milliseconds from the start of the pause until now.
    pub fn elapsed_ms(&self) -> f64 {
        monotonic_ns().saturating_sub(self.start) as f64 / 1e6
    }

    /// One debug line: each phase with its end, in ms since the pause began.
    pub fn log(&self, side: &str) {
        let shown: Vec<String> = self
            .marks
            .iter()
            .map(|(what, t)| format!("{what} {:.1}", t.saturating_sub(self.start) as f64 / 1e6))
            .collect();
        log::debug!(
            "upgrade: pause phases ({side}; ms since the queues began to stop): {}; the FUSE \
             session: {}",
            shown.join(", "),
            if self.detail.is_empty() {
                "-"
            } else {
                &self.detail
            }
        );
    }
}
