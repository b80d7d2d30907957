//! The threads tool calls run on.
//!
//! A call is synchronous work (a wasm instance, filesystem calls), so it cannot run on the async
//! runtime's thread. tokio's blocking pool would do, but its threads carry the runtime's context,
//! and wasmtime-wasi then drives every filesystem operation through that runtime's handle, a
//! cross-thread hand-off per operation. These workers carry no runtime context: a call runs on
//! one of them from start to end, and only its result crosses back.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex, PoisonError};

/// Workers started at most: calls beyond this many at once wait for a free one.
const MAX_WORKERS: usize = 64;

type Job = Box<dyn FnOnce() + Send>;

/// A pool of threads that grows to the number of calls in flight (up to [`MAX_WORKERS`]); idle
/// workers wait for the next call, and all of them end when the pool is dropped.
pub struct Workers {
    jobs: Mutex<Option<Sender<Job>>>,
    queue: Arc<Mutex<Receiver<Job>>>,
    started: AtomicUsize,
    idle: Arc<AtomicUsize>,
}

impl Default for Workers {
    fn default() -> Self {
        Self::new()
    }
}

/// The worker running a call stopped before it answered (the call panicked, or the pool was
/// dropped).
#[derive(Debug, thiserror::Error)]
#[error("the call's worker stopped before it answered")]
pub struct WorkerLost;

impl Workers {
    /// A pool with no thread yet.
    pub fn new() -> Self {
        let (sender, receiver) = std::sync::mpsc::channel();
        Workers {
            jobs: Mutex::new(Some(sender)),
            queue: Arc::new(Mutex::new(receiver)),
            started: AtomicUsize::new(0),
            idle: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// Run `work` on a worker and wait for its result without blocking the async runtime.
    ///
    /// # Errors
    ///
    /// [`WorkerLost`] if `work` panicked, or no worker could be started.
    pub async fn run<T: Send + 'static>(&self, work: impl FnOnce() -> T + Send + 'static) -> Result<T, WorkerLost> {
        let (answer, answered) = tokio::sync::oneshot::channel();
        let job: Job = Box::new(move || {
            let _ = answer.send(work());
        });
        self.submit(job)?;
        answered.await.map_err(|_| WorkerLost)
    }

    fn submit(&self, job: Job) -> Result<(), WorkerLost> {
        // A worker is started when none is idle; one that finds the queue empty goes idle.
        let claimed = self.idle.fetch_update(Ordering::AcqRel, Ordering::Acquire, |idle| idle.checked_sub(1)).is_ok();
        if !claimed && self.started.load(Ordering::Acquire) < MAX_WORKERS {
            self.start_worker()?;
        }
        let jobs = self.jobs.lock().unwrap_or_else(PoisonError::into_inner);
        jobs.as_ref().ok_or(WorkerLost)?.send(job).map_err(|_| WorkerLost)
    }

    fn start_worker(&self) -> Result<(), WorkerLost> {
        let queue = Arc::clone(&self.queue);
        let idle = Arc::clone(&self.idle);
        self.started.fetch_add(1, Ordering::AcqRel);
        let spawned = std::thread::Builder::new().name("toolcell-call".to_owned()).spawn(move || {
            loop {
                let job = queue.lock().unwrap_or_else(PoisonError::into_inner).recv();
                let Ok(job) = job else {
                    return;
                };
                // A panicking call drops its answer; the caller sees `WorkerLost`.
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
                idle.fetch_add(1, Ordering::AcqRel);
            }
        });
        match spawned {
            Ok(_) => Ok(()),
            Err(_) => {
                self.started.fetch_sub(1, Ordering::AcqRel);
                // Calls can still run if another worker exists.
                if self.started.load(Ordering::Acquire) == 0 { Err(WorkerLost) } else { Ok(()) }
            }
        }
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        // Closing the queue ends every worker once it finishes its call.
        self.jobs.lock().unwrap_or_else(PoisonError::into_inner).take();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_run_on_workers_concurrently_and_a_panic_is_an_error() {
        let runtime = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
        let workers = Workers::new();
        runtime.block_on(async {
            // Two calls that each wait for the other: they finish only if both run at once.
            let barrier = Arc::new(std::sync::Barrier::new(2));
            let (first, second) = (Arc::clone(&barrier), Arc::clone(&barrier));
            let (a, b) = tokio::join!(
                workers.run(move || {
                    first.wait();
                    1
                }),
                workers.run(move || {
                    second.wait();
                    2
                })
            );
            assert_eq!((a.expect("first"), b.expect("second")), (1, 2));
            // No runtime context on a worker.
            let context = workers.run(|| tokio::runtime::Handle::try_current().is_ok()).await.expect("runs");
            assert!(!context);
            assert!(workers.run(|| -> u8 { panic!("a host bug") }).await.is_err());
            assert_eq!(workers.run(|| 3).await.expect("the pool survives a panic"), 3);
        });
        assert!(workers.started.load(Ordering::Acquire) <= 3);
    }
}
