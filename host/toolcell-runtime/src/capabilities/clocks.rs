//! `wasi:clocks`: wasmtime-wasi's clocks, with a monotonic clock whose waits end at the
//! call's deadline.

use wasmtime::component::{HasData, Linker};
use wasmtime_wasi::clocks::WasiClocks;
use wasmtime_wasi::p2::bindings::clocks;

use super::CallState;
use super::context::link_error;

struct HasDeadlineClock;

impl HasData for HasDeadlineClock {
    type Data<'a> = DeadlineClock<'a>;
}

/// wasmtime-wasi's monotonic clock, except that a subscription never waits past the call's
/// deadline. Epoch interruption cannot stop a component while the host is blocked in a wait
/// on its behalf (`std::thread::sleep`, a poll with a long timeout); clamping the wait hands
/// control back at the deadline, and the epoch check then stops the component.
struct DeadlineClock<'a> {
    inner: wasmtime_wasi::clocks::WasiClocksCtxView<'a>,
    deadline: std::time::Instant,
}

impl DeadlineClock<'_> {
    /// Nanoseconds until the deadline (at least one tick, so that a wait ends after it).
    fn remaining(&self) -> u64 {
        let left = self.deadline.saturating_duration_since(std::time::Instant::now()) + crate::limits::EPOCH_TICK;
        u64::try_from(left.as_nanos()).unwrap_or(u64::MAX)
    }
}

impl clocks::monotonic_clock::Host for DeadlineClock<'_> {
    fn now(&mut self) -> wasmtime::Result<u64> {
        clocks::monotonic_clock::Host::now(&mut self.inner)
    }

    fn resolution(&mut self) -> wasmtime::Result<u64> {
        clocks::monotonic_clock::Host::resolution(&mut self.inner)
    }

    fn subscribe_instant(&mut self, when: u64) -> wasmtime::Result<wasmtime::component::Resource<wasmtime_wasi::p2::DynPollable>> {
        let now = clocks::monotonic_clock::Host::now(&mut self.inner)?;
        let latest = now.saturating_add(self.remaining());
        clocks::monotonic_clock::Host::subscribe_instant(&mut self.inner, when.min(latest))
    }

    fn subscribe_duration(&mut self, duration: u64) -> wasmtime::Result<wasmtime::component::Resource<wasmtime_wasi::p2::DynPollable>> {
        let clamped = duration.min(self.remaining());
        clocks::monotonic_clock::Host::subscribe_duration(&mut self.inner, clamped)
    }
}

/// Link `wasi:clocks` (the wall clock as wasmtime-wasi has it).
pub(super) fn add_to_linker(linker: &mut Linker<CallState>) -> Result<(), crate::error::Error> {
    clocks::wall_clock::add_to_linker::<CallState, WasiClocks>(linker, wasmtime_wasi::clocks::WasiClocksView::clocks)
        .map_err(link_error)?;
    clocks::monotonic_clock::add_to_linker::<CallState, HasDeadlineClock>(linker, |state| {
        let deadline = state.deadline;
        DeadlineClock { inner: wasmtime_wasi::clocks::WasiClocksView::clocks(state), deadline }
    })
    .map_err(link_error)
}
