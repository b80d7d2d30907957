//! The host capabilities a component is granted, one module each, laid out as wasmtime's
//! `crates/wasi` lays out its own: each keeps its per-call state, the view its host traits are
//! implemented on, and its `add_to_linker`.
//!
//! - `filesystem`, `wasi:filesystem` behind the guard (judge, transaction, adapters);
//! - `context`, `toolcell:tool/context`;
//! - `workflow`, `toolcell:tool/workflow`;
//! - `clocks`, `wasi:clocks`, waits ending at the call's deadline;
//! - `http`, `wasi:http/outgoing-handler`, every request through the call's `CallNet` (the
//!   role's network rules and the call's limits), each one audited;
//! - the rest of the world (`wasi:io`, `wasi:random`, `wasi:cli`) is wasmtime-wasi's, linked
//!   here.

pub(crate) mod clocks;
pub(crate) mod context;
pub(crate) mod filesystem;
pub(crate) mod http;
pub(crate) mod workflow;

use wasmtime::Engine;
use wasmtime::component::{HasData, Linker, ResourceTable};
use wasmtime_wasi::cli::WasiCli;
use wasmtime_wasi::random::WasiRandom;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

pub(crate) use crate::capture::CapturePipe;
use crate::error::Error;
pub(crate) use context::CallContext;
use filesystem::FsGuard;

/// What a component's store holds for one call. Dropped with the store when the call ends.
pub(crate) struct CallState {
    pub(crate) wasi: WasiCtx,
    pub(crate) table: ResourceTable,
    pub(crate) context: CallContext,
    pub(crate) guard: FsGuard,
    pub(crate) limiter: crate::limits::MemoryLimiter,
    /// When the call's deadline passes: no wait on a clock may last beyond it.
    pub(crate) deadline: std::time::Instant,
    /// `wasi:http`: the call's outbound requests.
    pub(crate) http: http::CallHttp,
}

impl CallState {
    /// The state of a store no call owns (a component describing itself, an instance made
    /// ahead of a call): no workspace, no policy, no role, no network, the largest memory any
    /// call may have, stopped at `deadline`.
    pub(crate) fn without_call(wasi: WasiCtx, deadline: std::time::Instant) -> Self {
        CallState {
            wasi,
            table: ResourceTable::new(),
            context: CallContext::default(),
            guard: FsGuard::new(None, "", None, None),
            limiter: crate::limits::MemoryLimiter::new(crate::engine::MAX_MEMORY_BYTES),
            deadline,
            http: http::CallHttp::refusing(),
        }
    }
}

impl WasiView for CallState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

struct HasTable;

impl HasData for HasTable {
    type Data<'a> = &'a mut ResourceTable;
}

/// A linker with exactly the interfaces of the `tool-component` world, and `wasi:http`.
/// `wasi:sockets` is deliberately absent: a component that imports it fails the import check
/// at load, and could not be instantiated anyway.
pub(crate) fn linker(engine: &Engine, guarded: bool) -> Result<Linker<CallState>, Error> {
    use wasmtime_wasi::p2::bindings::{cli, random, sync};

    let link = |result: wasmtime::Result<()>| result.map_err(context::link_error);

    let mut linker = Linker::new(engine);
    let l = &mut linker;
    link(sync::io::error::add_to_linker::<CallState, HasTable>(l, |state| &mut state.table))?;
    link(sync::io::poll::add_to_linker::<CallState, HasTable>(l, |state| &mut state.table))?;
    link(sync::io::streams::add_to_linker::<CallState, HasTable>(l, |state| &mut state.table))?;
    clocks::add_to_linker(l)?;
    link(random::random::add_to_linker::<CallState, WasiRandom>(l, |state| state.wasi.random()))?;
    link(random::insecure::add_to_linker::<CallState, WasiRandom>(l, |state| state.wasi.random()))?;
    link(random::insecure_seed::add_to_linker::<CallState, WasiRandom>(l, |state| state.wasi.random()))?;
    filesystem::add_to_linker(l, guarded)?;
    link(cli::exit::add_to_linker::<CallState, WasiCli>(l, cli_view))?;
    link(cli::environment::add_to_linker::<CallState, WasiCli>(l, cli_view))?;
    link(cli::stdin::add_to_linker::<CallState, WasiCli>(l, cli_view))?;
    link(cli::stdout::add_to_linker::<CallState, WasiCli>(l, cli_view))?;
    link(cli::stderr::add_to_linker::<CallState, WasiCli>(l, cli_view))?;
    link(cli::terminal_input::add_to_linker::<CallState, WasiCli>(l, cli_view))?;
    link(cli::terminal_output::add_to_linker::<CallState, WasiCli>(l, cli_view))?;
    link(cli::terminal_stdin::add_to_linker::<CallState, WasiCli>(l, cli_view))?;
    link(cli::terminal_stdout::add_to_linker::<CallState, WasiCli>(l, cli_view))?;
    link(cli::terminal_stderr::add_to_linker::<CallState, WasiCli>(l, cli_view))?;
    context::add_to_linker(l)?;
    workflow::add_to_linker(l)?;
    http::add_to_linker(l)?;
    Ok(linker)
}

fn cli_view(state: &mut CallState) -> wasmtime_wasi::cli::WasiCliCtxView<'_> {
    wasmtime_wasi::cli::WasiCliView::cli(state)
}
