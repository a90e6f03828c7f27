//! Threads that exist only while they have work (issue 36): an idle daemon keeps no thread it
//! does not need, and a host running hundreds of idle daemons pays for none of them.
//!
//! An [`OnDemand`] runs one job function on a thread of its own. [`OnDemand::wake`] asks for
//! one more run: it starts the thread if there is none, or wakes it if it waits. The thread
//! runs the job until no wake came during the last run, then waits up to its `linger` for
//! another; after that it ends, and the next wake starts a new thread (a thread start, ~20–50 µs
//! here, once per idle spell). The queue threads of `vhost_device`, the pool helpers, the
//! stall watcher and the fd cache's reaper are all such threads.
//!
//! Invariants (of [`State`], under its lock):
//! - at most one thread runs the job at a time (`running` is true from the start of a thread
//!   until it has decided to end, under the lock);
//! - a wake is never lost: `pending` set by a wake is cleared only by the thread as it starts a
//!   run that comes after it, and a thread that ends has found `pending` false under the lock,
//!   so a later wake sees `running` false and starts one;
//! - [`OnDemand::stop`] returns once no thread runs and none will be started again.

use std::io;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use crate::sync::lock;

/// The job's thread: whether it exists, and what it was asked.
#[derive(Default)]
struct State {
    /// A thread exists (running the job, or waiting for a wake).
    running: bool,
    /// A wake came that no run has answered yet.
    pending: bool,
    /// The thread waits on the condition variable.
    waiting: bool,
    /// No thread may start any more; a waiting one ends.
    stopped: bool,
    /// The thread's id, once it runs.
    thread: Option<std::thread::ThreadId>,
}

/// One job, run on demand on a thread that ends after `linger` without a wake.
pub struct OnDemand {
    name: String,
    linger: Duration,
    state: Mutex<State>,
    changed: Condvar,
    job: Box<dyn Fn() + Send + Sync>,
    /// Runs on the thread as it ends (not when stopped).
    at_end: Option<Box<dyn Fn() + Send + Sync>>,
}

impl OnDemand {
    /// A job named `name` (the thread's name) that lingers `linger` after its last run.
    pub fn new(
        name: impl Into<String>,
        linger: Duration,
        job: impl Fn() + Send + Sync + 'static,
    ) -> Arc<OnDemand> {
        Arc::new(OnDemand {
            name: name.into(),
            linger,
            state: Mutex::default(),
            changed: Condvar::new(),
            job: Box::new(job),
            at_end: None,
        })
    }

    /// [`OnDemand::new`], with `at_end` run on the thread each time it ends after its linger
    /// (what an idle spell may give back).
    pub fn with_end(
        name: impl Into<String>,
        linger: Duration,
        job: impl Fn() + Send + Sync + 'static,
        at_end: impl Fn() + Send + Sync + 'static,
    ) -> Arc<OnDemand> {
        Arc::new(OnDemand {
            name: name.into(),
            linger,
            state: Mutex::default(),
            changed: Condvar::new(),
            job: Box::new(job),
            at_end: Some(Box::new(at_end)),
        })
    }

    /// Has the job run (again) soon on its thread: wakes the thread, or starts one. `Ok(false)`
    /// once stopped; `Err` if no thread could be started (the wake is then dropped: the caller
    /// decides what to do without the thread).
    pub fn wake(self: &Arc<OnDemand>) -> io::Result<bool> {
        let mut s = lock(&self.state);
        if s.stopped {
            return Ok(false);
        }
        s.pending = true;
        if s.running {
            if s.waiting {
                self.changed.notify_all();
            }
            return Ok(true);
        }
        s.running = true;
        drop(s);
        let me = Arc::clone(self);
        let started = std::thread::Builder::new()
            .name(self.name.clone())
            .spawn(move || me.run());
        if let Err(e) = started {
            let mut s = lock(&self.state);
            s.running = false;
            s.pending = false;
            self.changed.notify_all();
            return Err(e);
        }
        Ok(true)
    }

    /// Whether [`OnDemand::stop`] was called: a job that waits for work of its own ends.
    pub fn is_stopped(&self) -> bool {
        lock(&self.state).stopped
    }

    /// Whether a thread exists right now.
    pub fn is_running(&self) -> bool {
        lock(&self.state).running
    }

    /// Ends the thread (after its current run) and starts none again; returns once it has
    /// ended. Called from the job itself it does not wait for its own thread.
    pub fn stop(&self) {
        let mut s = lock(&self.state);
        s.stopped = true;
        self.changed.notify_all();
        if s.thread == Some(std::thread::current().id()) {
            return;
        }
        while s.running {
            s = self.changed.wait(s).unwrap_or_else(|e| e.into_inner());
        }
    }

    fn run(&self) {
        let mut s = lock(&self.state);
        s.thread = Some(std::thread::current().id());
        loop {
            if s.pending && !s.stopped {
                s.pending = false;
                drop(s);
                (self.job)();
                s = lock(&self.state);
                continue;
            }
            if s.stopped {
                break;
            }
            s.waiting = true;
            let (guard, timeout) = self
                .changed
                .wait_timeout(s, self.linger)
                .unwrap_or_else(|e| e.into_inner());
            s = guard;
            s.waiting = false;
            if timeout.timed_out() && !s.pending {
                if let Some(end) = &self.at_end {
                    // Ended before `end` runs: a wake meanwhile starts a new thread.
                    s.running = false;
                    s.thread = None;
                    self.changed.notify_all();
                    drop(s);
                    end();
                    return;
                }
                break;
            }
        }
        s.running = false;
        s.thread = None;
        self.changed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Instant;

    fn counting(linger: Duration) -> (Arc<OnDemand>, Arc<AtomicUsize>) {
        let runs = Arc::new(AtomicUsize::new(0));
        let r = Arc::clone(&runs);
        let job = OnDemand::new("on-demand-test", linger, move || {
            r.fetch_add(1, Ordering::SeqCst);
        });
        (job, runs)
    }

    fn until(what: &str, mut done: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while !done() {
            assert!(Instant::now() < deadline, "{what}");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn a_wake_runs_the_job_and_the_idle_thread_ends() {
        let (job, runs) = counting(Duration::from_millis(50));
        assert!(!job.is_running());
        assert!(job.wake().unwrap());
        until("the job ran", || runs.load(Ordering::SeqCst) == 1);
        until("the idle thread ended", || !job.is_running());
        // The next wake starts a thread again.
        job.wake().unwrap();
        until("the job ran again", || runs.load(Ordering::SeqCst) == 2);
    }

    #[test]
    fn no_wake_is_lost_and_runs_never_overlap() {
        let inside = Arc::new(AtomicUsize::new(0));
        let runs = Arc::new(AtomicUsize::new(0));
        let (i, r) = (Arc::clone(&inside), Arc::clone(&runs));
        let job = OnDemand::new("on-demand-test", Duration::from_micros(10), move || {
            assert_eq!(i.fetch_add(1, Ordering::SeqCst), 0, "two runs at once");
            r.fetch_add(1, Ordering::SeqCst);
            i.fetch_sub(1, Ordering::SeqCst);
        });
        let wakers: Vec<_> = (0..4)
            .map(|_| {
                let job = Arc::clone(&job);
                std::thread::spawn(move || {
                    for _ in 0..500 {
                        job.wake().unwrap();
                    }
                })
            })
            .collect();
        for w in wakers {
            w.join().unwrap();
        }
        // Every wake is followed by a run that started after it: one more wake, then the count
        // must move.
        let seen = runs.load(Ordering::SeqCst);
        job.wake().unwrap();
        until("a run after the last wake", || {
            runs.load(Ordering::SeqCst) > seen
        });
        job.stop();
        assert!(!job.is_running());
        assert!(!job.wake().unwrap(), "stopped: no thread starts");
    }

    #[test]
    fn stop_waits_for_the_running_job() {
        let (started, done) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let (s, d) = (Arc::clone(&started), Arc::clone(&done));
        let job = OnDemand::new("on-demand-test", Duration::from_secs(60), move || {
            s.fetch_add(1, Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(50));
            d.fetch_add(1, Ordering::SeqCst);
        });
        job.wake().unwrap();
        until("the job started", || started.load(Ordering::SeqCst) == 1);
        job.stop();
        assert_eq!(done.load(Ordering::SeqCst), 1);
        assert!(!job.is_running());
    }
}
