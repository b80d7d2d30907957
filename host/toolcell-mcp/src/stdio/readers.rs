//! The threads that read stdin and run the plain calls ([`Readers`]), and a call they run
//! ([`Started`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::Duration;

use rmcp::model::RequestId;
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use toolcell_host::Session;

use super::{Calls, Entry, Reader, write_line};
use crate::call;

/// A call of this path, registered, to be run and answered.
pub(super) struct Started {
    pub(super) id: RequestId,
    pub(super) params: rmcp::model::CallToolRequestParams,
    pub(super) session: Session,
    pub(super) cancel: Arc<AtomicBool>,
    pub(super) entry: Entry,
    pub(super) calls: Arc<Calls>,
    pub(super) stopped: CancellationToken,
}

impl Started {
    /// Run the call and write its answer.
    fn run(self) {
        let Started { id, params, session, cancel, entry, calls, stopped } = self;
        let _entry = entry;
        let name = params.name.into_owned();
        let args = Value::Object(params.arguments.unwrap_or_default()).to_string();
        call::call_answering(&session, &name, &args, &cancel, |finished| {
            // No answer to a request the client cancelled, as rmcp sends none.
            if cancel.load(Ordering::Relaxed) {
                return;
            }
            if let Ok(mut text) = call::answer_of(&name, finished).legacy_response(id) {
                text.push(b'\n');
                if write_line(&text).is_err() {
                    // stdout is gone: no call starts any more, and rmcp stops.
                    calls.close();
                    stopped.cancel();
                }
            }
        });
    }
}

/// How long a thread of [`Readers`] with nothing to do waits before it ends, if another waits
/// too (as long as tokio keeps an idle thread of its blocking pool).
const KEEP_ALIVE: Duration = Duration::from_secs(10);

/// The most threads [`Readers`] keeps. A call read while all of them run calls goes to tokio's
/// blocking pool (shared with rmcp's calls), as every call did before, and the reader reads on:
/// reading never waits for a call to end (a client may write all its requests before it reads
/// an answer).
const MAX_THREADS: usize = 32;

/// Where the reader goes once a call is read.
enum Next {
    /// To a thread waiting for it.
    Waiting,
    /// To a thread just started.
    Started,
    /// Back to the thread that read the call, which is one of [`MAX_THREADS`]: the call goes to
    /// the blocking pool.
    Full,
}

/// A thread of [`Readers`], counted until it ends, however it ends.
struct Alive<'a>(&'a Readers);

impl Drop for Alive<'_> {
    fn drop(&mut self) {
        self.0.slot().threads -= 1;
    }
}

/// The threads that read stdin and run this path's calls, leader and followers: one at a time
/// holds the [`Reader`] and reads; when it reads a call, it hands the reader to a waiting thread
/// (starting one if none waits, up to [`MAX_THREADS`]) and runs the call itself. A call is run
/// by the thread that read it, with no hand-off to another thread between the client's request
/// and its answer (a woken thread was about a fifth of a 4 KiB read back to back), and the next
/// request is read meanwhile, so calls still run side by side and a cancellation is read while
/// its call runs.
pub(super) struct Readers {
    slot: Mutex<Slot>,
    /// Told when the reader is handed over or reading has ended.
    changed: Condvar,
}

struct Slot {
    /// The reader, while no thread reads.
    reader: Option<Reader>,
    /// Threads waiting for the reader.
    idle: usize,
    /// Threads alive.
    threads: usize,
    /// stdin has ended: the threads end.
    done: bool,
}

impl Readers {
    fn slot(&self) -> std::sync::MutexGuard<'_, Slot> {
        self.slot.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Start the first thread, which reads with `reader`.
    pub(super) fn start(reader: Reader) -> std::io::Result<()> {
        let readers = Arc::new(Readers {
            slot: Mutex::new(Slot { reader: Some(reader), idle: 0, threads: 1, done: false }),
            changed: Condvar::new(),
        });
        readers.spawn()
    }

    /// Start one more thread, counted in `threads` by the caller (and no longer if it cannot
    /// be started).
    fn spawn(self: &Arc<Self>) -> std::io::Result<()> {
        let readers = Arc::clone(self);
        let started = std::thread::Builder::new().name("toolcell-stdin".to_owned()).spawn(move || {
            let _alive = Alive(&readers);
            readers.work();
        });
        if started.is_err() {
            self.slot().threads -= 1;
        }
        started.map(drop)
    }

    /// A thread's life: wait for the reader, read until a call, hand the reader on, run the call.
    fn work(self: &Arc<Self>) {
        loop {
            let Some(mut reader) = self.take() else { return };
            let runtime = reader.runtime.clone();
            let Some(call) = reader.next_call() else {
                self.slot().done = true;
                self.changed.notify_all();
                return;
            };
            // The reader goes to a waiting thread, or to a new one; with neither, the call goes
            // to the blocking pool and this thread reads on.
            let next = {
                let mut slot = self.slot();
                slot.reader = Some(reader);
                if slot.idle > 0 {
                    Next::Waiting
                } else if slot.threads < MAX_THREADS {
                    slot.threads += 1;
                    Next::Started
                } else {
                    Next::Full
                }
            };
            match next {
                Next::Waiting => self.changed.notify_one(),
                Next::Started if self.spawn().is_ok() => {}
                Next::Started | Next::Full => {
                    runtime.spawn_blocking(move || call.run());
                    continue;
                }
            }
            // Calls run inside the server's runtime, as on its blocking pool.
            let _entered = runtime.enter();
            call.run();
        }
    }

    /// Wait for the reader (taken at once by the thread that just put it back when it has no
    /// other to hand it to); `None` once reading has ended, or when this thread has waited
    /// [`KEEP_ALIVE`] for nothing while another waits too.
    fn take(&self) -> Option<Reader> {
        let mut slot = self.slot();
        loop {
            if slot.done {
                return None;
            }
            if let Some(reader) = slot.reader.take() {
                return Some(reader);
            }
            slot.idle += 1;
            let (mut waited, timeout) = self.changed.wait_timeout(slot, KEEP_ALIVE).unwrap_or_else(PoisonError::into_inner);
            waited.idle -= 1;
            if timeout.timed_out() && waited.reader.is_none() && waited.idle > 0 {
                return None;
            }
            slot = waited;
        }
    }
}
