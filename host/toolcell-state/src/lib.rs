//! What toolcell keeps for a workspace, on disk and without wasmtime: the state directory's
//! layout and key ([`StateDir`]), the audit trail and its checkpoint ([`AuditLog`]), the lock
//! tables ([`LockStore`]), what each session read ([`reads`]), what tools remember between
//! calls ([`memo`]), where a runtime without a state directory works ([`WorkDir`]), the helpers that write there privately and read back bounded
//! ([`storage`]), the call journals and their recovery after a crash ([`journal`],
//! [`recover`]), undo records ([`undo`]), the workspace's namespace lock ([`NamespaceLock`]),
//! and the opens that follow no symlink ([`beneath`]).
//!
//! A shared store (PostgreSQL, in `toolcell-store-postgres`) implements [`AuditBackend`],
//! [`LockBackend`] and [`SessionBackend`] (read versions, undo history, MCP sessions) and
//! depends on this crate alone, not on the runtime.
//!
//! Only this crate and `toolcell-runtime` touch the disk. The content index lives here too:
//! the index file in the state directory, kept fresh from the workspace (inotify, or a walk),
//! and the candidates a search asks for. So do the sessions spawned for tasks ([`sessions`]),
//! what the `workflow` import decides ([`workflow`]) and the paths each call has in flight
//! ([`inflight`]).
//!
//! ```
//! use toolcell_state::{AUDIT_FILE, StateDir};
//!
//! # fn main() -> Result<(), toolcell_state::Error> {
//! let temp = std::env::temp_dir().join(format!("toolcell-state-doc-{}", std::process::id()));
//! let state = StateDir::open(&temp)?;
//! assert!(state.key().is_some(), "made on first use, mode 0600");
//! assert_eq!(state.join(AUDIT_FILE), state.path().join("audit.jsonl"));
//! # let _ = std::fs::remove_dir_all(&temp);
//! # Ok(())
//! # }
//! ```

pub mod artifacts;
mod audit;
pub mod beneath;
pub mod content_index;
mod dir;
mod error;
pub mod index_watch;
pub mod inflight;
pub mod inventory;
pub mod journal;
pub mod lock_tools;
mod locks;
pub mod memo;
mod namespace;
pub mod reads;
mod recoveries;
mod recovery;
mod session_backend;
pub mod sessions;
pub mod storage;
pub mod undo;
pub mod undo_tool;
mod work;
pub mod workflow;

pub use audit::{AuditBackend, AuditLog};
pub use dir::{
    AUDIT_FILE, AUDIT_HEAD_FILE, AUDIT_SPOOL_FILE, BLOBS_EXTENSION, INDEX_DIR, JOURNAL_DIR, JOURNAL_EXTENSION, LEDGER_FILE,
    LEDGER_LOCK_FILE, LEDGER_SET_ASIDE_FILE, LOCATIONS_FILE, LOCATIONS_LOCK_FILE, LOCKS_DIR, SESSIONS_DIR, SPAWNED_SESSIONS_DIR,
    STATE_KEY_FILE, StateDir, StateKey, UNDO_DIR, UNDO_LOG_FILE,
};
pub use error::Error;
pub use locks::{LockBackend, LockStore, LockStoreError, lock_record};
pub use namespace::NamespaceLock;
pub use recoveries::Recoveries;
pub use recovery::{Recovery, RecoveryKind, recover};
pub use session_backend::{McpSession, McpSweep, SessionBackend, SessionStoreError};
pub use work::WorkDir;
