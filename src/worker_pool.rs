//! A fixed pool of threads that run requests handed over by the queue threads
//! (`--thread-pool-size N`, N > 0).
//!
//! Without a pool each queue's thread serves its requests one after the other; with one, pool
//! threads join a queue thread when its queue has a backlog (see `vhost_device`), so requests are
//! served in parallel and slow ones (fsync, a cold read) do not hold up the rest of the queue. The
//! pool is shared by all queues. Help with work that keeps a thread on a CPU takes at most one
//! thread per CPU ([`WorkerPool::cpu_bound`]); help for requests that wait (a network
//! filesystem's round trip) takes up to the whole pool, as a waiting thread uses no CPU.
//!
//! Threads exist only while there is work (issue 36): a job starts a thread when none is idle
//! and fewer than `size` exist; a thread that has had no job for [`POOL_LINGER`] ends.
//!
//! Invariants (of [`Jobs`], under its lock): `threads` counts the threads that exist and `idle`
//! those of them waiting for a job; a job is queued only with a thread to take it (an idle one
//! is woken, or one is started, or all `size` are busy and one takes it when done); a thread
//! ends only when it finds the queue empty, so no queued job is left without a thread.

use crate::sync::lock;
use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

type Job = Box<dyn FnOnce() + Send>;

/// How long a pool thread waits for a job before it ends.
pub const POOL_LINGER: Duration = Duration::from_secs(1);

#[derive(Default)]
struct Jobs {
    queue: VecDeque<Job>,
    threads: usize,
    idle: usize,
    closed: bool,
}

struct Shared {
    jobs: Mutex<Jobs>,
    /// A job was queued (for idle threads), or a thread ended (for `drop`).
    changed: Condvar,
}

pub struct WorkerPool {
    size: usize,
    cpu_bound: usize,
    shared: Arc<Shared>,
}

impl WorkerPool {
    /// A pool of at most `size` threads; none is started before the first job.
    pub fn new(size: usize) -> std::io::Result<WorkerPool> {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        Ok(WorkerPool {
            size,
            cpu_bound: size.min(cpus),
            shared: Arc::new(Shared {
                jobs: Mutex::default(),
                changed: Condvar::new(),
            }),
        })
    }

    /// Number of threads at most.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Threads at most that the pool's users should keep busy with work that keeps them on a
    /// CPU: one per CPU, within [`WorkerPool::size`].
    pub fn cpu_bound(&self) -> usize {
        self.cpu_bound
    }

    /// Threads that exist right now.
    pub fn threads(&self) -> usize {
        lock(&self.shared.jobs).threads
    }

    /// Runs `job` on a pool thread (or here, if the pool is shutting down or no thread can be
    /// started).
    pub fn execute(&self, job: impl FnOnce() + Send + 'static) {
        let mut jobs = lock(&self.shared.jobs);
        if jobs.closed {
            drop(jobs);
            return job();
        }
        if jobs.idle > 0 || jobs.threads >= self.size {
            jobs.queue.push_back(Box::new(job));
            self.shared.changed.notify_all();
            return;
        }
        jobs.threads += 1;
        let n = jobs.threads;
        drop(jobs);
        let shared = Arc::clone(&self.shared);
        let job: Job = Box::new(job);
        let started = std::thread::Builder::new()
            .name(format!("vhostfs-pool-{}", n - 1))
            .spawn(move || worker(&shared, Some(job)));
        if let Err(e) = started {
            log::debug!("cannot start a pool thread: {e}");
            lock(&self.shared.jobs).threads -= 1;
            self.shared.changed.notify_all();
        }
    }
}

std::thread_local! {
    /// The pool whose thread this is (its `Shared`'s address), 0 on other threads.
    static POOL_OF_THIS_THREAD: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// A pool thread: runs `first`, then queued jobs, until none came for [`POOL_LINGER`].
fn worker(shared: &Shared, first: Option<Job>) {
    POOL_OF_THIS_THREAD.with(|p| p.set(shared as *const Shared as usize));
    if let Some(job) = first {
        job();
    }
    let mut jobs = lock(&shared.jobs);
    loop {
        // The lock is held only while waiting for the next job, never while running one.
        if let Some(job) = jobs.queue.pop_front() {
            drop(jobs);
            job();
            jobs = lock(&shared.jobs);
            continue;
        }
        if jobs.closed {
            break;
        }
        jobs.idle += 1;
        let (guard, timeout) = shared
            .changed
            .wait_timeout(jobs, POOL_LINGER)
            .unwrap_or_else(|e| e.into_inner());
        jobs = guard;
        jobs.idle -= 1;
        if timeout.timed_out() && jobs.queue.is_empty() {
            break;
        }
    }
    jobs.threads -= 1;
    shared.changed.notify_all();
}

impl Drop for WorkerPool {
    /// Lets the threads finish the jobs already queued, then waits for them to end. A job may
    /// hold the last reference to the pool's owner, so the pool may be dropped on one of its
    /// own threads: that one is not waited for (it ends once its job returns).
    fn drop(&mut self) {
        let mut jobs = lock(&self.shared.jobs);
        jobs.closed = true;
        self.shared.changed.notify_all();
        let on_pool = POOL_OF_THIS_THREAD.with(|p| p.get()) == Arc::as_ptr(&self.shared) as usize;
        let left = usize::from(on_pool);
        while jobs.threads > left {
            jobs = self
                .shared
                .changed
                .wait(jobs)
                .unwrap_or_else(|e| e.into_inner());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn runs_every_job_in_parallel_threads() {
        let pool = WorkerPool::new(4).unwrap();
        let done = Arc::new(AtomicUsize::new(0));
        let barrier = Arc::new(std::sync::Barrier::new(4));
        for _ in 0..4 {
            let (done, barrier) = (Arc::clone(&done), Arc::clone(&barrier));
            // Only completes if four jobs run at the same time.
            pool.execute(move || {
                barrier.wait();
                done.fetch_add(1, Ordering::SeqCst);
            });
        }
        drop(pool);
        assert_eq!(done.load(Ordering::SeqCst), 4);
    }

    /// No thread before the first job; the thread a job started ends after [`POOL_LINGER`]
    /// without another.
    #[test]
    fn threads_exist_only_while_there_is_work() {
        let pool = WorkerPool::new(2).unwrap();
        assert_eq!(pool.threads(), 0);
        let (tx, rx) = std::sync::mpsc::channel();
        pool.execute(move || tx.send(()).unwrap());
        rx.recv().unwrap();
        assert_eq!(pool.threads(), 1);
        let deadline = std::time::Instant::now() + POOL_LINGER * 5;
        while pool.threads() > 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "the idle thread stayed"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }

    /// The last reference to a pool, held by one of its jobs, drops it on a pool thread: the
    /// other threads are joined, that one is not (joining itself would panic).
    #[test]
    fn may_be_dropped_by_its_own_job() {
        let pool = Arc::new(WorkerPool::new(2).unwrap());
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let last = Arc::clone(&pool);
        pool.execute(move || {
            go_rx.recv().unwrap();
            drop(last);
            done_tx.send(()).unwrap();
        });
        drop(pool);
        go_tx.send(()).unwrap();
        done_rx
            .recv_timeout(std::time::Duration::from_secs(5))
            .expect("the job that dropped the pool returned");
    }
}
