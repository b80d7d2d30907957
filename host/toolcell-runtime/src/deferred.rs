//! Bookkeeping written after a call has answered: the session's read versions and undo records.
//!
//! A call's result depends on these only through what the runtime keeps in memory (read
//! versions) or reads back under [`Deferred::flush`] (undo records), so their files are written
//! by one background thread, in submission order, off the call's path. A crash can lose the last
//! few of them; that is safe: a session without a record of a read is asked to read again (or
//! warned), and `undo_edit` says there is nothing to undo.

use std::sync::mpsc::Sender;
use std::sync::{Arc, Condvar, Mutex, PoisonError};

type Job = Box<dyn FnOnce() + Send>;

/// Jobs submitted and not yet finished.
#[derive(Default)]
struct Pending {
    count: Mutex<usize>,
    done: Condvar,
}

impl Pending {
    fn finish(&self) {
        let mut count = self.count.lock().unwrap_or_else(PoisonError::into_inner);
        *count = count.saturating_sub(1);
        if *count == 0 {
            self.done.notify_all();
        }
    }
}

/// One background writer.
pub(crate) struct Deferred {
    jobs: Mutex<Option<Sender<Job>>>,
    pending: Arc<Pending>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for Deferred {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("Deferred").finish_non_exhaustive()
    }
}

impl Deferred {
    /// Start the writer thread (without one, jobs run at once on the caller's thread).
    pub(crate) fn start() -> Self {
        let (sender, receiver) = std::sync::mpsc::channel::<Job>();
        let pending = Arc::new(Pending::default());
        let worker_pending = Arc::clone(&pending);
        let thread = std::thread::Builder::new()
            .name("toolcell-state".to_owned())
            .spawn(move || {
                for job in receiver {
                    // A failing job is best effort by definition; a panicking one must not
                    // leave `flush` waiting.
                    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
                    worker_pending.finish();
                }
            })
            .ok();
        let jobs = thread.is_some().then_some(sender);
        Deferred { jobs: Mutex::new(jobs), pending, thread }
    }

    /// Run `job` after the jobs already submitted.
    pub(crate) fn submit(&self, job: impl FnOnce() + Send + 'static) {
        let jobs = self.jobs.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(sender) = jobs.as_ref() else {
            drop(jobs);
            job();
            return;
        };
        *self.pending.count.lock().unwrap_or_else(PoisonError::into_inner) += 1;
        if let Err(returned) = sender.send(Box::new(job)) {
            self.pending.finish();
            (returned.0)();
        }
    }

    /// Wait until every job submitted so far has run.
    pub(crate) fn flush(&self) {
        let mut count = self.pending.count.lock().unwrap_or_else(PoisonError::into_inner);
        while *count > 0 {
            count = self.pending.done.wait(count).unwrap_or_else(PoisonError::into_inner);
        }
    }
}

impl Drop for Deferred {
    fn drop(&mut self) {
        // Closing the queue lets the writer finish what was submitted, then end.
        self.jobs.lock().unwrap_or_else(PoisonError::into_inner).take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jobs_run_in_order_off_the_callers_thread_and_flush_waits_for_them() {
        let deferred = Deferred::start();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let caller = std::thread::current().id();
        for index in 0..100 {
            let seen = Arc::clone(&seen);
            deferred.submit(move || {
                assert_ne!(std::thread::current().id(), caller);
                std::thread::sleep(std::time::Duration::from_micros(50));
                seen.lock().expect("lock").push(index);
            });
        }
        deferred.submit(|| panic!("a failing job"));
        deferred.flush();
        assert_eq!(*seen.lock().expect("lock"), (0..100).collect::<Vec<_>>());
        let last = Arc::clone(&seen);
        deferred.submit(move || last.lock().expect("lock").push(100));
        drop(deferred);
        assert_eq!(seen.lock().expect("lock").len(), 101, "dropping the writer runs what was submitted");
    }
}
