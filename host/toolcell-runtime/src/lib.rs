//! The toolcell host: runs tool components on wasmtime, granting each call the workspace and
//! nothing else.
//!
//! A [`Runtime`] is built once: it compiles (or loads from the on-disk cache) every tool
//! component, refuses components that import anything outside the `tool-component` world of
//! `wit/tool.wit`, asks each for its description, and compiles its argument schema. Each
//! [`Runtime::call`] then validates the arguments, creates a fresh store and instance from a
//! pre-linked `InstancePre` (pooling allocator), preopens the workspace as `.` (the only
//! directory the component can name), captures stdout and stderr, and runs the tool. Nothing
//! survives between calls. (A tool's instance is made ahead of its next call, and a finished
//! one torn down, by a thread that runs only when a CPU would idle; a call puts its own state
//! into the store before any of the component's code runs: see `call/ahead.rs`.)
//!
//! ```no_run
//! use toolcell_runtime::{CallRequest, RuntimeBuilder, Workspace};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let wasm = std::fs::read("read_file.wasm")?;
//! let runtime = RuntimeBuilder::new()
//!     .cache_dir("/tmp/toolcell-cache")
//!     .component("read_file.wasm", wasm)
//!     .policy_file("policies/default.toml")
//!     .build()?;
//! let workspace = Workspace::open("/path/to/repo".as_ref())?;
//! let args = r#"{"path": "README.md", "limit": 5}"#;
//! let outcome = runtime.call(&CallRequest::new(&workspace, "impl", "s-1", "read_file", args))?;
//! match outcome.result {
//!     Ok(output) => eprintln!("{}", output.text),
//!     Err(error) => eprintln!("{error}"),
//! }
//! # Ok(())
//! # }
//! ```

// Load time: the engine and its compiled-component cache, the import check, the builder, and
// every location a run trusts.
mod builder;
mod descriptors;
mod engine;
mod imports;
mod pages;
// Imports a plugin may link as stubs that refuse every call.
mod stubs;

// The runtime every call shares, and the workspace a call may touch.
mod reload;
mod runtime;
mod workspace;

// The host capabilities, one module each (filesystem: the guard; context; workflow; clocks),
// and the bindings generated from `wit/`.
mod bindings;
mod capabilities;

// One call, top to bottom (`call`), what it is and produces (`outcome`), its limits, the
// stdout and stderr it captures, and the tools the host implements (`native`) or adapts
// from a provider (`toolcell_args::adapters`).
mod call;
mod capture;
mod limits;
mod native;
mod outcome;

// The content index: the CLI's and embedders' operations on it.
mod content_index;

mod error;

pub use builder::RuntimeBuilder;
pub use call::STDIO_CAPACITY;
pub use capabilities::filesystem::{Approver, Denial, FsEvent};
pub use capture::Captured;
pub use content_index::{IndexFreshness, IndexReport, IndexStatus};
pub use descriptors::raise_open_file_limit;
pub use engine::{CacheOutcome, LoadProgress, MAX_LIVE_INSTANCES};
pub use error::{Error, PinMismatch};
pub use limits::{EPOCH_TICK, Limits};
pub use outcome::{CallOutcome, CallRequest};
pub use runtime::{LoadedComponent, Runtime, SkippedPlugin};
pub use toolcell_args::MAX_ARGS_BYTES;
pub use toolcell_args::adapters::{ADAPTER_TOOLS, TEXT_EDITOR};
pub use toolcell_args::host_tools::{NATIVE_TOOLS, lock_json};
pub use toolcell_locks::{Lock, LockError, LockRequest, Mode as LockMode};
pub use toolcell_policy::{Access, Effect, Policy, PolicyError, TaskBinding, canonical_tool_name};
pub use toolcell_state::inventory::{default_cache_dir, default_state_dir, executable, remember_locations, started_by};
pub use toolcell_state::sessions::{SessionRecord, SessionState, SessionStore, Spawner, default_connect};
pub use toolcell_state::undo::SessionChange;
pub use toolcell_state::workflow::{MAX_SESSIONS_PER_TASK, MAX_SPAWNS_PER_CALL};
pub use toolcell_state::{
    AUDIT_FILE, AUDIT_HEAD_FILE, AUDIT_SPOOL_FILE, AuditBackend, AuditLog, Error as StateError, LOCKS_DIR, LockBackend, LockStore,
    LockStoreError,
};
pub use toolcell_state::{Recovery, RecoveryKind};
pub use workspace::Workspace;
