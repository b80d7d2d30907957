//! `wasi:filesystem`'s linker registration: wasmtime-wasi's implementation behind the guard.

use wasmtime::component::{HasData, Linker};

use super::GuardedFilesystem;
use crate::capabilities::CallState;
use crate::error::Error;

struct HasGuardedFilesystem;

impl HasData for HasGuardedFilesystem {
    type Data<'a> = GuardedFilesystem<'a>;
}

/// The host side of `wasi:filesystem` for a call: wasmtime-wasi's implementation behind the
/// policy guard.
fn guarded_filesystem(state: &mut CallState) -> GuardedFilesystem<'_> {
    GuardedFilesystem {
        inner: wasmtime_wasi::filesystem::WasiFilesystemCtxView { ctx: state.wasi.filesystem(), table: &mut state.table },
        guard: &mut state.guard,
    }
}

fn unguarded_filesystem(state: &mut CallState) -> wasmtime_wasi::filesystem::WasiFilesystemCtxView<'_> {
    wasmtime_wasi::filesystem::WasiFilesystemCtxView { ctx: state.wasi.filesystem(), table: &mut state.table }
}

/// Link `wasi:filesystem` and `toolcell:tool/listing`: every call through the guard, or
/// (`guarded` false, the benchmark's baseline, feature `bench-baseline`) wasmtime-wasi unguarded.
pub(crate) fn add_to_linker(linker: &mut Linker<CallState>, guarded: bool) -> Result<(), Error> {
    use wasmtime_wasi::filesystem::WasiFilesystem;
    use wasmtime_wasi::p2::bindings::{filesystem, sync};
    let link = |result: wasmtime::Result<()>| result.map_err(crate::capabilities::context::link_error);
    if guarded {
        link(filesystem::preopens::add_to_linker::<CallState, HasGuardedFilesystem>(linker, guarded_filesystem))?;
        link(sync::filesystem::types::add_to_linker::<CallState, HasGuardedFilesystem>(linker, guarded_filesystem))?;
        link(super::listing::add_to_linker::<CallState, HasGuardedFilesystem>(linker, guarded_filesystem))
    } else {
        link(filesystem::preopens::add_to_linker::<CallState, WasiFilesystem>(linker, unguarded_filesystem))?;
        link(sync::filesystem::types::add_to_linker::<CallState, WasiFilesystem>(linker, unguarded_filesystem))?;
        link(super::listing::add_to_linker::<CallState, WasiFilesystem>(linker, unguarded_filesystem))
    }
}
