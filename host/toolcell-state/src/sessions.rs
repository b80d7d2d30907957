//! The sessions spawned for tasks, kept in `spawned-sessions/` of the state directory, and
//! the platform's [`Spawner`] that starts their agents.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Where a session stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SessionState {
    /// Spawned; no agent has connected yet.
    Pending,
    /// An agent connected to it.
    Active,
    /// Its agent disconnected, or the platform ended it.
    Ended,
}

impl SessionState {
    /// The name shown in listings.
    pub fn as_str(self) -> &'static str {
        match self {
            SessionState::Pending => "pending",
            SessionState::Active => "active",
            SessionState::Ended => "ended",
        }
    }
}

/// A session the host knows of: one spawned for a task, or one started with a task binding.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionRecord {
    /// The session id.
    pub id: String,
    /// Its role.
    pub role: String,
    /// The task it is bound to (`CHAIN-ID/NNN-slug`).
    pub task: Option<String>,
    /// Who it writes for in the lock table (the task's chain).
    pub owner: Option<String>,
    /// The session that spawned it.
    pub parent: Option<String>,
    /// When it was created, RFC 3339 UTC.
    pub created: String,
    /// Where it stands.
    pub state: SessionState,
    /// The workspace (a host path: for the operator's listings, never shown to a tool).
    pub workspace: PathBuf,
}

/// Starts the agent that will run a spawned session. An embedding platform supplies one
/// (`HostBuilder::spawner`); without one, the session is recorded as pending and the spawning
/// agent is told the `toolcell mcp` command that runs it.
pub trait Spawner: Send + Sync {
    /// Start, or arrange, an agent for `session`. The text returned tells the spawning agent
    /// how the session will run (shown to it: it must not contain host paths).
    ///
    /// # Errors
    ///
    /// Why the agent cannot be started; the spawn then fails and the session is ended.
    fn spawn(&self, session: &SessionRecord) -> Result<String, String>;
}

/// The sessions of every workspace sharing a state directory.
#[derive(Debug)]
pub struct SessionStore {
    directory: PathBuf,
    lock: std::sync::Mutex<()>,
}

impl SessionStore {
    /// The sessions kept under `work_dir` (the state directory, or the private work directory).
    pub fn new(work_dir: &Path) -> Self {
        SessionStore { directory: work_dir.join(crate::SPAWNED_SESSIONS_DIR), lock: std::sync::Mutex::new(()) }
    }

    fn file(&self, id: &str) -> PathBuf {
        self.directory.join(format!("{}.json", crate::storage::session_key(id, Path::new(""))))
    }

    /// Record a new session.
    ///
    /// # Errors
    ///
    /// The filesystem's error; `AlreadyExists` if the id is taken.
    pub fn create(&self, record: &SessionRecord) -> std::io::Result<()> {
        let _guard = self.lock.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        crate::storage::create_private_dirs(&self.directory)?;
        let file = self.file(&record.id);
        if file.exists() {
            return Err(std::io::Error::new(std::io::ErrorKind::AlreadyExists, format!("session `{}` exists", record.id)));
        }
        crate::storage::replace_json(&file, record, true)
    }

    /// The session `id`, if the host knows of it.
    pub fn get(&self, id: &str) -> Option<SessionRecord> {
        crate::storage::read_host_file(&self.file(id)).ok().and_then(|bytes| serde_json::from_slice(&bytes).ok())
    }

    /// Every known session, oldest first.
    pub fn list(&self) -> Vec<SessionRecord> {
        let Ok(entries) = std::fs::read_dir(&self.directory) else {
            return Vec::new();
        };
        let mut records: Vec<SessionRecord> = entries
            .filter_map(Result::ok)
            .filter(|entry| entry.path().extension().is_some_and(|extension| extension == "json"))
            .filter_map(|entry| crate::storage::read_host_file(&entry.path()).ok())
            .filter_map(|bytes| serde_json::from_slice(&bytes).ok())
            .collect();
        records.sort_by(|a, b| a.created.cmp(&b.created).then_with(|| a.id.cmp(&b.id)));
        records
    }

    /// Move the session `id` to `state`.
    ///
    /// # Errors
    ///
    /// `NotFound` for an unknown session; the filesystem's error.
    pub fn set_state(&self, id: &str, state: SessionState) -> std::io::Result<SessionRecord> {
        let _guard = self.lock.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut record = self.get(id).ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, format!("no session `{id}`")))?;
        record.state = state;
        crate::storage::replace_json(&self.file(id), &record, true)?;
        Ok(record)
    }
}

/// How an agent runs a spawned session without a platform's spawner: `toolcell mcp` from the
/// workspace root, with the same policy and state directory as the spawning host.
pub fn default_connect(record: &SessionRecord) -> String {
    format!(
        "toolcell mcp --workspace . --role {} --session {} --task {} (from the workspace root, with the same --policy and --state-dir as this host)",
        record.role,
        record.id,
        record.task.as_deref().unwrap_or_default()
    )
}
