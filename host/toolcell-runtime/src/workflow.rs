//! The task-chain workflow's host side: the sessions spawned for tasks (kept in `spawned-sessions/` of
//! the state directory), the platform's [`Spawner`], and the `workflow` import a component
//! calls, each capability granted by the caller's role in the policy (`may_lock_for_chains`,
//! `may_spawn`) and every decision audited.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use toolcell_locks::{Lock, LockRequest, Mode};
use toolcell_policy::{Role, TaskBinding};
use toolcell_types::{ToolError, ToolErrorKind};

use toolcell_state::AuditLog;
use toolcell_state::LockStore;

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
    pub(crate) fn new(work_dir: &Path) -> Self {
        SessionStore { directory: work_dir.join(toolcell_state::SPAWNED_SESSIONS_DIR), lock: std::sync::Mutex::new(()) }
    }

    fn file(&self, id: &str) -> PathBuf {
        self.directory.join(format!("{}.json", crate::session_key(id, Path::new(""))))
    }

    /// Record a new session.
    ///
    /// # Errors
    ///
    /// The filesystem's error; `AlreadyExists` if the id is taken.
    pub fn create(&self, record: &SessionRecord) -> std::io::Result<()> {
        let _guard = self.lock.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        toolcell_state::storage::create_private_dirs(&self.directory)?;
        let file = self.file(&record.id);
        if file.exists() {
            return Err(std::io::Error::new(std::io::ErrorKind::AlreadyExists, format!("session `{}` exists", record.id)));
        }
        crate::replace_json(&file, record, true)
    }

    /// The session `id`, if the host knows of it.
    pub fn get(&self, id: &str) -> Option<SessionRecord> {
        toolcell_state::storage::read_host_file(&self.file(id)).ok().and_then(|bytes| serde_json::from_slice(&bytes).ok())
    }

    /// Every known session, oldest first.
    pub fn list(&self) -> Vec<SessionRecord> {
        let Ok(entries) = std::fs::read_dir(&self.directory) else {
            return Vec::new();
        };
        let mut records: Vec<SessionRecord> = entries
            .filter_map(Result::ok)
            .filter(|entry| entry.path().extension().is_some_and(|extension| extension == "json"))
            .filter_map(|entry| toolcell_state::storage::read_host_file(&entry.path()).ok())
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
        crate::replace_json(&self.file(id), &record, true)?;
        Ok(record)
    }
}

/// What the workflow capabilities share across calls (held by the runtime).
pub(crate) struct WorkflowShared {
    pub(crate) locks: Arc<LockStore>,
    pub(crate) sessions: Arc<SessionStore>,
    pub(crate) spawner: Option<Arc<dyn Spawner>>,
    pub(crate) audit: Option<Arc<AuditLog>>,
}

/// What the `workflow` import works with during one call.
pub(crate) struct WorkflowCall {
    pub(crate) shared: Arc<WorkflowShared>,
    /// The workspace's canonical root.
    pub(crate) workspace: PathBuf,
    /// The policy and the caller's role as bound for this call; `None` without a policy
    /// (nothing is granted).
    pub(crate) policy: Option<Arc<toolcell_policy::Policy>>,
    pub(crate) role: Option<Arc<Role>>,
    pub(crate) tool: String,
    /// Who the caller authenticated as.
    pub(crate) principal: Option<String>,
    /// Sessions this call spawned so far.
    pub(crate) spawned: std::sync::atomic::AtomicU32,
}

/// Sessions one call may spawn.
pub const MAX_SPAWNS_PER_CALL: u32 = 4;
/// Sessions (pending or active) one task may have at once.
pub const MAX_SESSIONS_PER_TASK: usize = 4;
/// Where a task in progress has its file (`docs/tasks/in-progress/CHAIN/TASK.md`).
const IN_PROGRESS_DIR: &str = "docs/tasks/in-progress";

/// Who calls a capability: the call's identity, as its context holds it.
pub(crate) struct Caller<'a> {
    pub(crate) role: &'a str,
    pub(crate) session_id: &'a str,
    pub(crate) call_id: &'a str,
}

/// The policy grant a workflow operation needs: the rule its decisions are recorded under.
pub(crate) fn grant_of(operation: &str) -> &'static str {
    if operation == "spawn-session" { "may_spawn" } else { "may_lock_for_chains" }
}

impl std::fmt::Debug for WorkflowCall {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("WorkflowCall").field("tool", &self.tool).finish_non_exhaustive()
    }
}

/// The `lock-info` of one lock, without the WIT types.
pub(crate) fn lock_info(lock: &Lock) -> (String, String, String, String, String) {
    (lock.pattern.clone(), lock.owner.clone(), lock.session.clone(), lock.mode.as_str().to_owned(), lock.expires_at())
}

/// How the lock table names the taker of a task's locks.
pub(crate) fn task_session(task: &TaskBinding) -> String {
    format!("task:{task}")
}

fn parse_task(task: &str) -> Result<TaskBinding, ToolError> {
    TaskBinding::parse(task).map_err(|reason| ToolError::new(ToolErrorKind::InvalidArgs, reason))
}

/// A refusal of a workflow capability: its rule, for the audit trail, and the message.
pub(crate) struct Refusal {
    pub(crate) operation: &'static str,
    pub(crate) subject: String,
    pub(crate) rule: String,
    pub(crate) message: String,
}

impl WorkflowCall {
    fn grant(&self, caller: &Caller<'_>, operation: &'static str, subject: &str, granted: bool, what: &str) -> Result<(), Refusal> {
        if granted {
            return Ok(());
        }
        let rule = grant_of(operation);
        Err(Refusal {
            operation,
            subject: subject.to_owned(),
            rule: rule.to_owned(),
            message: format!(
                "role `{}` may not {what} (the policy does not grant `{rule}` to it); ask the control agent or the operator",
                caller.role
            ),
        })
    }

    /// The live locks of the workspace on paths the caller may see (a lock on a hidden
    /// directory would name it).
    pub(crate) fn locks(&self) -> Vec<Lock> {
        let mut locks = self.shared.locks.live(&self.workspace).unwrap_or_default();
        if let Some(policy) = &self.policy {
            locks.retain(|lock| {
                let literal = lock.pattern.find(['*', '?', '[', '{']).map_or(lock.pattern.as_str(), |end| &lock.pattern[..end]);
                let directory = if literal.len() == lock.pattern.len() {
                    literal
                } else {
                    literal.rsplit_once('/').map_or(".", |(directory, _)| directory)
                };
                self.role.as_ref().is_some_and(|role| {
                    policy.verdict(role, toolcell_policy::Access::Read, directory).effect() != toolcell_policy::Effect::Deny
                })
            });
        }
        locks
    }

    /// Lock `patterns` for the chain of `task`, all or none.
    pub(crate) fn lock_for_task(
        &self,
        caller: &Caller<'_>,
        task: &str,
        patterns: &[String],
        ttl_seconds: u32,
        pending: &[String],
    ) -> Result<Result<Vec<Lock>, ToolError>, Refusal> {
        let granted = self.role.as_ref().is_some_and(|role| role.may_lock_for_chains());
        self.grant(caller, "lock-for-task", task, granted, "lock paths for a chain")?;
        Ok(self.lock_for_task_granted(task, patterns, ttl_seconds, pending))
    }

    /// `pending`: the files the calling call is writing and has not put in place yet.
    fn lock_for_task_granted(&self, task: &str, patterns: &[String], ttl_seconds: u32, pending: &[String]) -> Result<Vec<Lock>, ToolError> {
        let binding = parse_task(task)?;
        // Locks for a chain that does not exist (or a task nobody started) would hold paths
        // for no one: `**` for a made-up chain stops every other chain's writes.
        self.check_in_progress(&binding, "lock paths for its chain", pending)?;
        if !(1..=86_400).contains(&ttl_seconds) {
            return Err(ToolError::new(ToolErrorKind::InvalidArgs, format!("a lease of {ttl_seconds} s: give 1 to 86400 seconds")));
        }
        if patterns.is_empty() || patterns.len() > 64 {
            return Err(ToolError::new(ToolErrorKind::InvalidArgs, "give 1 to 64 paths or globs to lock"));
        }
        let workspace = crate::Workspace::open(&self.workspace)
            .map_err(|_| ToolError::new(ToolErrorKind::Failed, "the workspace cannot be opened to lock paths in it; tell the operator"))?;
        let mut taken: Vec<Lock> = Vec::new();
        for pattern in patterns {
            let attempt = workspace
                .lock_pattern(pattern)
                .map_err(|error| ToolError::new(ToolErrorKind::InvalidArgs, error.to_string()))
                .and_then(|pattern| {
                    let request = LockRequest {
                        pattern,
                        owner: binding.chain().to_owned(),
                        session: task_session(&binding),
                        mode: Mode::Exclusive,
                        ttl: Duration::from_secs(u64::from(ttl_seconds)),
                    };
                    self.shared.locks.acquire(&self.workspace, &request).map_err(|error| match error {
                        crate::LockStoreError::Lock(conflict) => ToolError::new(ToolErrorKind::Conflict, conflict.to_string()),
                        crate::LockStoreError::Io { .. } | crate::LockStoreError::Store { .. } => {
                            ToolError::new(ToolErrorKind::Failed, "the lock table cannot be written; tell the operator")
                        }
                    })
                });
            match attempt {
                Ok(lock) => taken.push(lock),
                Err(error) => {
                    for lock in &taken {
                        let _ = self.shared.locks.release(&self.workspace, lock.fence, &lock.owner);
                    }
                    return Err(error);
                }
            }
        }
        for lock in &taken {
            self.audit_lock("acquired", lock);
        }
        Ok(taken)
    }

    /// Release the locks taken for `task`.
    pub(crate) fn release_task(&self, caller: &Caller<'_>, task: &str) -> Result<Result<u32, ToolError>, Refusal> {
        let granted = self.role.as_ref().is_some_and(|role| role.may_lock_for_chains());
        self.grant(caller, "release-task", task, granted, "release a chain's locks")?;
        let binding = match parse_task(task) {
            Ok(binding) => binding,
            Err(error) => return Ok(Err(error)),
        };
        let session = task_session(&binding);
        let mut released = 0;
        let live = self.shared.locks.live(&self.workspace).unwrap_or_default();
        for lock in live.into_iter().filter(|lock| lock.owner == binding.chain() && lock.session == session) {
            if let Ok(lock) = self.shared.locks.release(&self.workspace, lock.fence, &lock.owner) {
                self.audit_lock("released", &lock);
                released += 1;
            }
        }
        Ok(Ok(released))
    }

    /// Spawn a session of `role` bound to `task`.
    pub(crate) fn spawn_session(
        &self,
        caller: &Caller<'_>,
        role: &str,
        task: &str,
    ) -> Result<Result<(String, String), ToolError>, Refusal> {
        let granted = self.role.as_ref().is_some_and(|caller| caller.may_spawn(role));
        self.grant(caller, "spawn-session", task, granted, &format!("start `{}` sessions", role.escape_default()))?;
        let binding = match parse_task(task) {
            Ok(binding) => binding,
            Err(error) => return Ok(Err(error)),
        };
        if let Err(error) = self.check_spawnable(&binding) {
            return Ok(Err(error));
        }
        let number = |id: &str| id.split('-').find(|part| part.bytes().all(|byte| byte.is_ascii_digit())).unwrap_or("0").to_owned();
        // Unguessable, so that knowing a task does not let anyone name its session.
        let mut random = [0u8; 8];
        let mut filled = 0;
        while filled < random.len() {
            match rustix::rand::getrandom(&mut random[filled..], rustix::rand::GetRandomFlags::empty()) {
                Ok(count) => filled += count,
                Err(_) => return Ok(Err(ToolError::new(ToolErrorKind::Failed, "no randomness for a session id; tell the operator"))),
            }
        }
        let unique = crate::hex(&random);
        let id = format!("{role}-{}-{}-{unique}", number(binding.chain()), number(binding.task()));
        let record = SessionRecord {
            id: id.clone(),
            role: role.to_owned(),
            task: Some(binding.to_string()),
            owner: Some(binding.chain().to_owned()),
            parent: Some(caller.session_id.to_owned()),
            created: crate::guard::now(),
            state: SessionState::Pending,
            workspace: self.workspace.clone(),
        };
        if self.shared.sessions.create(&record).is_err() {
            return Ok(Err(ToolError::new(ToolErrorKind::Failed, "the session could not be recorded; tell the operator")));
        }
        if let Some(log) = &self.shared.audit {
            let audited = toolcell_audit::Record::spawn(
                &crate::guard::now(),
                caller.session_id,
                caller.role,
                &self.tool,
                caller.call_id,
                &id,
                role,
                &binding.to_string(),
            )
            .at(&self.workspace.display().to_string(), self.principal.as_deref());
            if log.append(&[audited]).is_err() {
                let _ = self.shared.sessions.set_state(&id, SessionState::Ended);
                return Ok(Err(ToolError::new(
                    ToolErrorKind::Failed,
                    "the audit trail cannot be written, so no session was started; tell the operator",
                )));
            }
        }
        let connect = match &self.shared.spawner {
            Some(spawner) => match spawner.spawn(&record) {
                Ok(connect) => connect,
                Err(reason) => {
                    let _ = self.shared.sessions.set_state(&id, SessionState::Ended);
                    return Ok(Err(ToolError::new(ToolErrorKind::Failed, format!("the platform could not start the session: {reason}"))));
                }
            },
            None => default_connect(&record),
        };
        Ok(Ok((id, connect)))
    }

    /// The task `binding` is in progress: its file is in `docs/tasks/in-progress/`, or among
    /// `pending`, the files the calling call is writing (`task_start` moves the task and locks
    /// for its chain in one call). Else a conflict saying to start it first, then `then`.
    fn check_in_progress(&self, binding: &TaskBinding, then: &str, pending: &[String]) -> Result<(), ToolError> {
        let file = format!("{IN_PROGRESS_DIR}/{}/{}.md", binding.chain(), binding.task());
        if pending.contains(&file) {
            return Ok(());
        }
        let in_progress = crate::Workspace::open(&self.workspace)
            .ok()
            .and_then(|workspace| workspace.directory.symlink_metadata(&file).ok())
            .is_some_and(|metadata| metadata.is_file());
        if in_progress {
            return Ok(());
        }
        Err(ToolError::new(
            ToolErrorKind::Conflict,
            format!("the task `{binding}` is not in progress (there is no `{file}`): start it with `task_start` first, then {then}"),
        ))
    }

    /// A session may be spawned for a task that is in progress (its file is in
    /// `docs/tasks/in-progress/`), up to [`MAX_SPAWNS_PER_CALL`] in one call and
    /// [`MAX_SESSIONS_PER_TASK`] live at once for one task: a component granted `may_spawn`
    /// cannot fill the session store, nor start sessions for tasks nobody started.
    fn check_spawnable(&self, binding: &TaskBinding) -> Result<(), ToolError> {
        use std::sync::atomic::Ordering;
        self.check_in_progress(binding, "spawn its session", &[])?;
        if self.spawned.fetch_add(1, Ordering::AcqRel) >= MAX_SPAWNS_PER_CALL {
            return Err(ToolError::new(
                ToolErrorKind::TooLarge,
                format!("one call may spawn at most {MAX_SPAWNS_PER_CALL} sessions; this one asked for more"),
            ));
        }
        let task = binding.to_string();
        let live = self
            .shared
            .sessions
            .list()
            .into_iter()
            .filter(|session| session.task.as_deref() == Some(task.as_str()) && session.state != SessionState::Ended)
            .count();
        if live >= MAX_SESSIONS_PER_TASK {
            return Err(ToolError::new(
                ToolErrorKind::Conflict,
                format!(
                    "the task `{binding}` has {live} sessions that have not ended, the most one task may have; end one (or let it end) before spawning another"
                ),
            ));
        }
        Ok(())
    }

    fn audit_lock(&self, event: &str, lock: &Lock) {
        if let Some(log) = &self.shared.audit {
            let record = toolcell_audit::Record::lock(
                &crate::guard::now(),
                &lock.session,
                &lock.owner,
                event,
                &lock.pattern,
                lock.mode.as_str(),
                lock.fence,
            )
            .at(&self.workspace.display().to_string(), self.principal.as_deref());
            let _ = log.append(&[record]);
        }
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
