//! Per-call limits: a wall-clock deadline (epoch interruption), a memory cap, an output cap.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use wasmtime::{Engine, ResourceLimiter};

/// How often the engine's epoch advances: a call runs at least its deadline and is stopped
/// within one tick after it.
pub const EPOCH_TICK: Duration = Duration::from_millis(10);

/// What one call may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Wall-clock time for the component to run.
    pub deadline: Duration,
    /// Linear memory the component may grow to.
    pub memory_bytes: usize,
    /// Bytes of text returned to the agent; longer output is cut with a marker.
    pub output_bytes: usize,
    /// Filesystem calls the component may make; past them every filesystem call fails.
    pub host_calls: u64,
    /// Files and directories the component may hold open at once.
    pub open_files: usize,
    /// Distinct refusals recorded in the audit trail per call (a refusal repeated exactly is
    /// counted, not recorded again); past them the call is stopped and rolled back.
    pub audit_records: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            deadline: Duration::from_secs(30),
            memory_bytes: 512 << 20,
            output_bytes: 1 << 20,
            host_calls: 1_000_000,
            open_files: 1024,
            audit_records: 1000,
        }
    }
}

/// Epoch ticks in `time`, rounded up (at least one).
pub(crate) fn ticks_in(time: Duration) -> u64 {
    let ticks = time.as_nanos().div_ceil(EPOCH_TICK.as_nanos());
    u64::try_from(ticks).unwrap_or(u64::MAX).max(1)
}

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

/// `text` cut to at most `max_bytes` (at a character boundary) with a marker saying so.
pub(crate) fn cap_output(text: &mut String, max_bytes: usize) {
    if text.len() <= max_bytes {
        return;
    }
    let total = text.len();
    let mut cut = max_bytes;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    text.truncate(cut);
    text.push_str(&format!(
        "\n[output truncated at {} KiB of {} KiB: narrow the request, for example with a smaller window or a more specific pattern]",
        max_bytes / 1024,
        total / 1024
    ));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_is_cut_at_a_character_boundary() {
        let mut text = "é".repeat(10);
        cap_output(&mut text, 5);
        assert!(text.starts_with("éé\n[output truncated"), "{text}");
        let mut short = "abc".to_owned();
        cap_output(&mut short, 5);
        assert_eq!(short, "abc");
    }

    #[test]
    fn deadlines_round_up_to_ticks() {
        let ticks = |millis| ticks_in(Duration::from_millis(millis));
        assert_eq!(ticks(1), 1);
        assert_eq!(ticks(10), 1);
        assert_eq!(ticks(11), 2);
        assert_eq!(ticks(30_000), 3000);
    }
}
