//! The runtime's typed errors live in `toolcell-outcome` (no wasmtime there); what turns a
//! wasmtime error into their text stays here.

pub use toolcell_outcome::{Error, PinMismatch};

/// A wasmtime error with its whole chain of causes, on one line.
pub(crate) fn describe(error: &wasmtime::Error) -> String {
    error.chain().map(ToString::to_string).collect::<Vec<_>>().join(": ")
}
