//! Instances made ahead of a tool's next call, and finished calls' instances torn down, on a
//! thread of the runtime's own that runs only when a CPU would otherwise idle.
//!
//! Every call still runs in an instance no call has run in: an instance made ahead is made
//! exactly as a call makes one (the tool's linked component, a fresh store from the pool) and
//! is handed to one call only, which puts its own state (filesystem guard, WASI context,
//! limits, deadline) into the store before it calls the tool. Only the tools the host ships
//! (origin `builtin:`) are made ahead: whatever their instantiation runs keeps nothing of the
//! state it runs under (the tests check that a call made ahead sees its own workspace, role,
//! session, limits and deadline), where a plugin's own start code could read the
//! placeholder's (no workspace, no role) and keep what it read for the call, or spin or grow
//! its memory on this thread. A plugin's call instantiates its own, under its own deadline and
//! limits, as before. The instantiation made ahead runs under the tool's memory limit and deadline as
//! its last call had them; one that fails is not tried again for that tool.
//! What it saves a call is the instantiation and the teardown, the two largest fixed parts of
//! a call that has to warm up again after the machine idled (about a quarter of a cold
//! `read_file`): see *Performance* in the book.
//!
//! The thread is `SCHED_IDLE`: it never takes a CPU from a call, a client or anything else
//! the machine runs. What it has not done yet costs a call nothing but what it cost before: a
//! call finding no instance made ahead instantiates its own, and past [`MAX_QUEUED_TEARDOWNS`]
//! a call tears its instance down itself. The thread holds at most [`MAX_HELD`] instances
//! (the [`MAX_MADE_AHEAD`] most recently made, the one it is making, and the teardowns), for
//! which the pool has slots beyond the calls' own.

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Sender, channel};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use wasmtime::{Engine, Store};

use crate::bindings;
use crate::capabilities::CallState;
use crate::limits::{Limits, MemoryLimiter};

/// Finished instances waiting to be torn down on the thread before calls tear down their own.
pub(crate) const MAX_QUEUED_TEARDOWNS: usize = 4;
/// Instances made ahead and kept (the tools called most recently: an agent's few).
pub(crate) const MAX_MADE_AHEAD: usize = 4;
/// The pool slots the thread may hold beyond the calls': those kept, the one it is making
/// (made before the oldest kept is let go of), and the teardowns waiting.
pub(crate) const MAX_HELD: usize = MAX_MADE_AHEAD + 1 + MAX_QUEUED_TEARDOWNS;

/// An instance made ahead: its store (holding a placeholder state) and its bindings.
pub(crate) type Made = (Store<CallState>, bindings::Plugin);

/// Work for the thread.
enum Job {
    /// Make an instance of `tool` ahead, its memory within `memory_limit`, stopped at
    /// `deadline`.
    Make { tool: String, pre: bindings::PluginPre<CallState>, engine: Engine, memory_limit: usize, deadline: Duration },
    /// Tear a finished call's instance down (its store holds a placeholder state).
    TearDown(Store<CallState>),
}

/// The runtime's instances made ahead, by tool name (a runtime's tools never change), and its
/// thread, started with the first job.
#[derive(Default)]
pub(crate) struct Ahead {
    shared: Arc<Shared>,
    jobs: OnceLock<Mutex<Sender<Job>>>,
}

#[derive(Default)]
struct Shared {
    ready: Mutex<Ready>,
    queued_teardowns: AtomicUsize,
}

#[derive(Default)]
struct Ready {
    /// Oldest first.
    made: VecDeque<(String, Made)>,
    /// Asked for and not made yet.
    queued: HashSet<String>,
    /// Tools whose instantiation ahead failed: never made ahead again.
    refused: HashSet<String>,
}

impl Ahead {
    /// The store of a call of `tool` (`None`: not a tool's own call) holding `state`: the one
    /// made ahead for it, with its instance, if one is ready and what its instantiation was
    /// granted is within the call's `memory_limit` (else the call instantiates its own, and
    /// meets its limit as it always did); or a new one.
    pub(crate) fn store(
        &self,
        engine: &Engine,
        tool: Option<&str>,
        mut state: CallState,
        memory_limit: usize,
    ) -> (Store<CallState>, Option<bindings::Plugin>) {
        let made = tool.and_then(|tool| {
            let mut ready = self.shared.ready.lock().ok()?;
            let at = ready.made.iter().position(|(name, _)| name == tool)?;
            ready.made.remove(at).map(|(_, made)| made)
        });
        match made.filter(|(store, _)| store.data().limiter.granted_bytes <= memory_limit) {
            Some((mut store, plugin)) => {
                state.limiter.granted_bytes = store.data().limiter.granted_bytes;
                drop(std::mem::replace(store.data_mut(), state));
                (store, Some(plugin))
            }
            None => {
                let mut store = Store::new(engine, state);
                store.limiter(|state| &mut state.limiter);
                (store, None)
            }
        }
    }

    /// How many instances wait, made ahead and not yet taken (one per tool at most).
    pub(crate) fn ready(&self) -> usize {
        self.shared.ready.lock().map_or(0, |ready| ready.made.len())
    }

    /// Have an instance of `tool` made ahead for its next call, within `limits` (the tool's,
    /// as its last call had them), unless one is ready or asked for, or its instantiation ahead
    /// failed before.
    pub(crate) fn make(&self, tool: &str, pre: &bindings::PluginPre<CallState>, engine: &Engine, limits: &Limits) {
        {
            let Ok(mut ready) = self.shared.ready.lock() else {
                return;
            };
            if ready.refused.contains(tool) || ready.made.iter().any(|(name, _)| name == tool) || !ready.queued.insert(tool.to_owned()) {
                return;
            }
        }
        let (memory_limit, deadline) = (limits.memory_bytes, limits.deadline);
        self.send(Job::Make { tool: tool.to_owned(), pre: pre.clone(), engine: engine.clone(), memory_limit, deadline });
    }

    /// Tear down a finished call's instance on the thread (its store's state already taken
    /// out), or here if enough are waiting.
    pub(crate) fn tear_down(&self, store: Store<CallState>) {
        if self.shared.queued_teardowns.fetch_add(1, Ordering::AcqRel) >= MAX_QUEUED_TEARDOWNS {
            self.shared.queued_teardowns.fetch_sub(1, Ordering::AcqRel);
            drop(store);
            return;
        }
        self.send(Job::TearDown(store));
    }

    fn send(&self, job: Job) {
        let jobs = self.jobs.get_or_init(|| Mutex::new(spawn(Arc::clone(&self.shared))));
        let unsent = match jobs.lock() {
            Ok(sender) => sender.send(job).err().map(|error| error.0),
            Err(_) => Some(job),
        };
        // No thread (it could not be started, or it is gone): what it would have done is done
        // now, or left.
        match unsent {
            Some(Job::TearDown(store)) => {
                self.shared.queued_teardowns.fetch_sub(1, Ordering::AcqRel);
                drop(store);
            }
            Some(Job::Make { tool, .. }) => {
                if let Ok(mut ready) = self.shared.ready.lock() {
                    ready.queued.remove(&tool);
                    ready.refused.insert(tool);
                }
            }
            None => {}
        }
    }
}

/// The state a store made ahead holds until a call puts its own in (the call's own memory
/// limit is checked when it takes the instance).
pub(crate) fn placeholder() -> CallState {
    CallState::without_call(wasmtime_wasi::WasiCtxBuilder::new().build(), std::time::Instant::now())
}

/// Start the thread; it ends when the runtime (the sender) is gone.
fn spawn(shared: Arc<Shared>) -> Sender<Job> {
    let (sender, receiver) = channel::<Job>();
    let started = std::thread::Builder::new().name("toolcell-ahead".to_owned()).spawn(move || {
        idle_priority();
        for job in receiver {
            match job {
                Job::TearDown(store) => {
                    // A panic in a teardown (none is known) leaves the thread serving.
                    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(store)));
                    shared.queued_teardowns.fetch_sub(1, Ordering::AcqRel);
                }
                Job::Make { tool, pre, engine, memory_limit, deadline } => {
                    let made = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| make(&engine, &pre, memory_limit, deadline)))
                        .ok()
                        .flatten();
                    let Ok(mut ready) = shared.ready.lock() else {
                        continue;
                    };
                    ready.queued.remove(&tool);
                    match made {
                        Some(made) => {
                            ready.made.push_back((tool, made));
                            if ready.made.len() > MAX_MADE_AHEAD {
                                ready.made.pop_front();
                            }
                        }
                        None => {
                            ready.refused.insert(tool);
                        }
                    }
                }
            }
        }
    });
    if started.is_err() {
        // The receiver went with the closure: every send fails, and calls do the work.
        return channel().0;
    }
    sender
}

/// An instance of `pre` in a store holding a placeholder state, its memory within
/// `memory_limit`, its instantiation stopped at `deadline` as a call's is; `None` if it failed.
fn make(engine: &Engine, pre: &bindings::PluginPre<CallState>, memory_limit: usize, deadline: Duration) -> Option<Made> {
    let mut state = placeholder();
    state.limiter = MemoryLimiter::new(memory_limit);
    let mut store = Store::new(engine, state);
    store.limiter(|state| &mut state.limiter);
    crate::limits::stop_at(&mut store, deadline, None);
    let plugin = pre.instantiate(&mut store).ok()?;
    Some((store, plugin))
}

/// Run this thread only when a CPU has nothing else to run (`SCHED_IDLE`); left at the
/// default if the kernel refuses.
fn idle_priority() {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: `sched_setscheduler` reads `param`, which lives across the call, and changes only
    // the calling thread's (pid 0) scheduling.
    #[expect(unsafe_code, reason = "sched_setscheduler has no safe binding in rustix")]
    let _ = unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &raw const param) };
}
