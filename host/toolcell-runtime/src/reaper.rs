//! Finished calls' instances, torn down on a thread of their own once the call has its result
//! (and [`Dropper`], the thread and queue it and the closing of released files share).
//!
//! Dropping a call's store deallocates its instance: the pool resets the linear memory the
//! component touched (it scans which pages were written and clears them) and its tables, and
//! unregisters the module's code. In a profile of `read_file` on a CPU that had been idle, that
//! was about a sixth of the call, spent after the component had returned and before the
//! caller could have the result. A finished call now hands its store here and goes on: what
//! the store still holds is the instance alone, everything a later step needs was taken out
//! of it first, and everything outside the instance that the call held (the component's open
//! descriptors, its share of the call's memory pool) is let go of in the call as before.
//!
//! At most [`QUEUED`] stores wait; past that (calls finishing faster than the thread clears
//! them) a call drops its own. With the one being dropped, [`HELD`] instances at most live
//! here beyond the calls running, and the pool has room for them besides
//! [`MAX_LIVE_INSTANCES`](crate::MAX_LIVE_INSTANCES): a call never fails to start for want
//! of a slot this thread holds.

use std::sync::OnceLock;
use std::sync::mpsc::{SyncSender, TrySendError, sync_channel};

use wasmtime::Store;

use crate::capabilities::CallState;

/// Stores queued for the thread at most.
const QUEUED: usize = 2;
/// Instances the thread may hold at once: those queued and the one it is dropping.
pub(crate) const HELD: u32 = QUEUED as u32 + 1;

/// The thread finished calls' stores go to.
static STORES: Dropper<Store<CallState>> = Dropper::new("toolcell-teardown", QUEUED);

/// Drop `store` on the thread, or here if its queue is full.
pub(crate) fn later(store: Store<CallState>) {
    STORES.later(store);
}

/// A thread that drops what it is sent, started at the first thing sent, and the bounded
/// queue to it: past `capacity` waiting, or if the thread could not be started, the sender
/// drops its own.
pub(crate) struct Dropper<T> {
    name: &'static str,
    capacity: usize,
    queue: OnceLock<Option<SyncSender<T>>>,
}

impl<T: Send + 'static> Dropper<T> {
    pub(crate) const fn new(name: &'static str, capacity: usize) -> Self {
        Dropper { name, capacity, queue: OnceLock::new() }
    }

    /// Drop `item` on the thread, or here if its queue is full.
    pub(crate) fn later(&self, item: T) {
        let queue = self.queue.get_or_init(|| {
            let (queue, items) = sync_channel::<T>(self.capacity);
            std::thread::Builder::new()
                .name(self.name.to_owned())
                .spawn(move || {
                    for item in items {
                        drop(item);
                    }
                })
                .ok()
                .map(|_| queue)
        });
        match queue.as_ref().map(|queue| queue.try_send(item)) {
            None | Some(Ok(())) => {}
            Some(Err(TrySendError::Full(item) | TrySendError::Disconnected(item))) => drop(item),
        }
    }
}
