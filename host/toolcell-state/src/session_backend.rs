//! Session state kept outside the state directory, shared by every host of a deployment
//! (PostgreSQL, in `toolcell-store-postgres`), so that any host answers any request of any
//! session: what each session read ([`crate::reads`]), its undo history ([`crate::undo`]), and
//! the MCP sessions of `serve` (who opened each, its initialization, when it was last used).
//!
//! Without one, all of it stays in the state directory (one host), as before. Each method is
//! one round trip to the store, made alone among every host (a transaction); a failure is a
//! [`SessionStoreError`], on which writes are refused and reads go on.

use std::collections::HashMap;
use std::time::Duration;

use crate::reads::Version;

/// The shared store could not be used.
#[derive(Debug, Clone, thiserror::Error)]
#[error("the shared session store{} cannot be used ({reason})", if store.is_empty() { String::new() } else { format!(" ({store})") })]
pub struct SessionStoreError {
    /// What kind of store it is, as clients may be told (no host, path, user or database:
    /// those are for the operator's log).
    pub store: String,
    /// What went wrong.
    pub reason: String,
}

impl SessionStoreError {
    /// What an agent is told when a write is refused for it (no host path, no password).
    pub fn writes_refused(&self) -> String {
        format!(
            "{self}: writes are refused until it answers again, so that read-before-write and undo give the same answer on every host. Reads still work; try the write again shortly, or tell the operator"
        )
    }
}

/// One MCP session of `serve`, as every host sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpSession {
    /// The session id the client presents.
    pub id: String,
    /// The principal that opened it.
    pub principal: String,
    /// The client's `initialize` (JSON: protocol version, capabilities, client), once known.
    pub initialization: Option<String>,
}

/// Session state several hosts share. A session is named by its key
/// ([`crate::storage::session_key`]: the workspace and the toolcell session id).
pub trait SessionBackend: Send + Sync + std::fmt::Debug {
    /// The versions the session `key` has seen.
    ///
    /// # Errors
    ///
    /// [`SessionStoreError`] if the store cannot be used.
    fn reads(&self, key: &str) -> Result<HashMap<String, Version>, SessionStoreError>;

    /// Record what a call taught the session `key`: each path's version, or `None` for a file
    /// it saw removed; in one transaction.
    ///
    /// # Errors
    ///
    /// [`SessionStoreError`]; nothing is recorded then.
    fn record_reads(&self, key: &str, changes: &[(&str, Option<Version>)]) -> Result<(), SessionStoreError>;

    /// The undo log lines of the session `key`, oldest first (JSON, as in the undo log file).
    ///
    /// # Errors
    ///
    /// [`SessionStoreError`].
    fn undo_lines(&self, key: &str) -> Result<Vec<String>, SessionStoreError>;

    /// Append `lines` to the session `key`'s undo log and keep `blobs` (name, content) beside
    /// them, in one transaction; the log keeps its last `keep` lines before this append, and
    /// `lines`.
    ///
    /// # Errors
    ///
    /// [`SessionStoreError`]; nothing is kept then.
    fn append_undo(&self, key: &str, lines: &[String], blobs: &[(String, Vec<u8>)], keep: usize) -> Result<(), SessionStoreError>;

    /// What one call leaves the session `key`, all or nothing: what it taught the session
    /// (as [`record_reads`](Self::record_reads)) and its undo lines and blobs (as
    /// [`append_undo`](Self::append_undo)), so that a call's changes never stand with half
    /// of their record.
    ///
    /// # Errors
    ///
    /// [`SessionStoreError`]; nothing is kept then.
    fn record_call(
        &self,
        key: &str,
        reads: &[(&str, Option<Version>)],
        lines: &[String],
        blobs: &[(String, Vec<u8>)],
        keep: usize,
    ) -> Result<(), SessionStoreError>;

    /// The content of the undo blob `name` of the session `key`, if kept.
    ///
    /// # Errors
    ///
    /// [`SessionStoreError`].
    fn undo_blob(&self, key: &str, name: &str) -> Result<Option<Vec<u8>>, SessionStoreError>;

    /// Record the MCP session `id` opened by `principal` (or add its `initialization`, when
    /// `None` is given for the principal it is already recorded with), last used now.
    ///
    /// # Errors
    ///
    /// [`SessionStoreError`].
    fn open_mcp(&self, id: &str, principal: Option<&str>, initialization: Option<&str>) -> Result<(), SessionStoreError>;

    /// Record the new MCP session `id` of `principal`, last used now, unless `principal`
    /// already has `max` sessions that have not been idle for `idle`, counted over every host
    /// (made alone among the principal's openings): whether it was recorded.
    ///
    /// # Errors
    ///
    /// [`SessionStoreError`]; nothing is recorded then.
    fn open_mcp_within(&self, id: &str, principal: &str, max: usize, idle: Duration) -> Result<bool, SessionStoreError>;

    /// Remove what the toolcell sessions `keys` kept (read versions, undo history): they
    /// ended, so nothing will read it again.
    ///
    /// # Errors
    ///
    /// [`SessionStoreError`]; nothing is removed then.
    fn forget_sessions(&self, keys: &[String]) -> Result<(), SessionStoreError>;

    /// The MCP session `id`, if it exists and has not been idle for `idle`; when `principal`
    /// is given, only if it is that principal's, and then it counts as used now.
    ///
    /// # Errors
    ///
    /// [`SessionStoreError`].
    fn use_mcp(&self, id: &str, principal: Option<&str>, idle: Duration) -> Result<Option<McpSession>, SessionStoreError>;

    /// The sessions of `busy` (with requests in flight on this host) count as used now; those
    /// idle for `idle` are removed, and returned (id, principal). Which of `known` still exist.
    ///
    /// # Errors
    ///
    /// [`SessionStoreError`].
    fn sweep_mcp(&self, busy: &[String], known: &[String], idle: Duration) -> Result<McpSweep, SessionStoreError>;

    /// Remove the MCP session `id`.
    ///
    /// # Errors
    ///
    /// [`SessionStoreError`].
    fn close_mcp(&self, id: &str) -> Result<(), SessionStoreError>;
}

/// What [`SessionBackend::sweep_mcp`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct McpSweep {
    /// The sessions this sweep removed for being idle: (id, principal).
    pub expired: Vec<(String, String)>,
    /// Of the sessions asked about, those that still exist.
    pub alive: Vec<String>,
}
