//! Per-call limits: a wall-clock deadline (epoch interruption), a memory cap, an output cap.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use wasmtime::{Engine, ResourceLimiter};

pub use toolcell_outcome::limits::{EPOCH_TICK, Limits};
pub(crate) use toolcell_outcome::limits::{cap_output, ticks_in};

/// Advances the engine's epoch every [`EPOCH_TICK`] until dropped.
pub(crate) struct EpochTicker {
    stop: Arc<AtomicBool>,
}

impl EpochTicker {
    pub(crate) fn start(engine: &Engine) -> std::io::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let engine = engine.clone();
        let stopped = Arc::clone(&stop);
        std::thread::Builder::new().name("toolcell-epoch".to_owned()).spawn(move || {
            while !stopped.load(Ordering::Relaxed) {
                std::thread::sleep(EPOCH_TICK);
                engine.increment_epoch();
            }
        })?;
        Ok(EpochTicker { stop })
    }
}

impl Drop for EpochTicker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Stop `store`'s component at `within` from now, or once `cancel` is set, checked at every
/// epoch tick. The ticker's phase is arbitrary, so the first tick may come at once: one tick
/// more gives the component at least `within`, and stops it within one tick after.
pub(crate) fn stop_at<T>(store: &mut wasmtime::Store<T>, within: std::time::Duration, cancel: Option<Arc<AtomicBool>>) {
    let mut ticks_left = ticks_in(within) + 1;
    store.epoch_deadline_callback(move |_| {
        ticks_left = ticks_left.saturating_sub(1);
        if ticks_left == 0 || cancel.as_ref().is_some_and(|cancel| cancel.load(Ordering::Relaxed)) {
            return Err(wasmtime::Trap::Interrupt.into());
        }
        Ok(wasmtime::UpdateDeadline::Continue(1))
    });
    store.set_epoch_deadline(1);
}

/// Caps a store's linear memory and remembers whether it refused a growth, so that the call's
/// error can name the limit.
#[derive(Debug, Default)]
pub(crate) struct MemoryLimiter {
    pub(crate) max_bytes: usize,
    pub(crate) refused: bool,
    /// The linear memory of all the instance's memories, as granted so far (instantiation
    /// asks for each memory's initial size too).
    pub(crate) granted_bytes: usize,
    /// What all the instances of one split call hold together, which `max_bytes` caps too;
    /// this instance's share is given back when it is dropped.
    pool: Option<Arc<AtomicUsize>>,
}

impl MemoryLimiter {
    pub(crate) fn new(max_bytes: usize) -> Self {
        MemoryLimiter { max_bytes, refused: false, granted_bytes: 0, pool: None }
    }

    /// A limiter whose grants also count against `pool`, shared by the parts of one call.
    pub(crate) fn pooled(max_bytes: usize, pool: Option<Arc<AtomicUsize>>) -> Self {
        MemoryLimiter { pool, ..MemoryLimiter::new(max_bytes) }
    }
}

impl Drop for MemoryLimiter {
    fn drop(&mut self) {
        if let Some(pool) = &self.pool {
            pool.fetch_sub(self.granted_bytes, Ordering::AcqRel);
        }
    }
}

impl ResourceLimiter for MemoryLimiter {
    fn memory_growing(&mut self, current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        let growth = desired.saturating_sub(current);
        let pooled = self.pool.as_ref().is_none_or(|pool| {
            pool.fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| held.checked_add(growth).filter(|after| *after <= self.max_bytes))
                .is_ok()
        });
        if desired > self.max_bytes || !pooled {
            self.refused = true;
            return Ok(false);
        }
        self.granted_bytes += growth;
        Ok(true)
    }

    fn table_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        Ok(desired <= 1 << 20)
    }
}
