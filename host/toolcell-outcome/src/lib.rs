//! What a toolcell call produces and how the host fails, without wasmtime: the runtime
//! (`toolcell-runtime`) fills these in; embedders, the MCP server and the CLI read them.
//!
//! - [`CallOutcome`]: a call's result, the accesses the guard allowed ([`FsEvent`]) and
//!   refused ([`Denial`]), its captured stdio, and what it cost;
//! - [`limits::Limits`]: what one call may use;
//! - [`Error`]: the host's own failures, for the operator;
//! - [`plugins`]: a plugin that cannot be loaded, left out or needed.
//!
//! ```
//! use toolcell_outcome::{CallOutcome, refusal_warnings};
//!
//! let outcome = CallOutcome::new("c-1".to_owned());
//! assert!(outcome.result.is_err(), "a call that has not run has failed");
//! assert!(refusal_warnings(&outcome.denials).is_empty());
//! ```

mod error;
pub mod limits;
mod outcome;
pub mod plugins;

pub use error::{Error, PinMismatch};
pub use outcome::{
    CallOutcome, Captured, DESCRIPTOR_MOVED, Denial, FsEvent, denied_result, distinct_messages, new_call_id, only_reads_refused,
    refusal_warnings,
};
pub use plugins::SkippedPlugin;
