//! A fixed pool of threads that run requests handed over by the queue threads
//! (`--thread-pool-size N`, N > 0).
//!
//! Without a pool each queue's thread serves its requests one after the other; with one, pool
//! threads join a queue thread when its queue has a backlog (see `vhost_device`), so requests are
//! served in parallel and slow ones (fsync, a cold read) do not hold up the rest of the queue. The
//! pool is shared by all queues.

use crate::sync::lock;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

type Job = Box<dyn FnOnce() + Send>;

pub struct WorkerPool {
    size: usize,
    tx: Mutex<Option<Sender<Job>>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl WorkerPool {
    pub fn new(size: usize) -> std::io::Result<WorkerPool> {
        let (tx, rx) = channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        let threads = (0..size)
            .map(|i| {
                let rx = Arc::clone(&rx);
                std::thread::Builder::new()
                    .name(format!("vhostfs-pool-{i}"))
                    .spawn(move || worker(&rx))
            })
            .collect::<std::io::Result<Vec<_>>>()?;
        Ok(WorkerPool {
            size,
            tx: Mutex::new(Some(tx)),
            threads: Mutex::new(threads),
        })
    }

    /// Number of threads.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Runs `job` on a pool thread (or here, if the pool is shutting down).
    pub fn execute(&self, job: impl FnOnce() + Send + 'static) {
        let tx = lock(&self.tx).clone();
        match tx {
            Some(tx) => {
                if let Err(e) = tx.send(Box::new(job)) {
                    (e.0)();
                }
            }
            None => job(),
        }
    }
}

fn worker(rx: &Mutex<Receiver<Job>>) {
    loop {
        // The lock is held only while waiting for the next job, never while running one.
        let job = lock(rx).recv();
        match job {
            Ok(job) => job(),
            Err(_) => return,
        }
    }
}

impl Drop for WorkerPool {
    /// Lets the threads finish the jobs already queued, then joins them. A job may hold the
    /// last reference to the pool's owner, so the pool may be dropped on one of its own
    /// threads: that one is not joined (it ends once its job returns, as the channel is gone).
    fn drop(&mut self) {
        lock(&self.tx).take();
        let me = std::thread::current().id();
        for t in lock(&self.threads).drain(..) {
            if t.thread().id() != me {
                let _ = t.join();
            }
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
