//! The task-chain workflow's host side, without wasmtime: what the `workflow` import a
//! component calls decides and does, each capability granted by the caller's role in the policy
//! (`may_lock_for_chains`, `may_spawn`) and every decision audited. The runtime's `workflow`
//! capability adapts it to the WIT types.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use toolcell_locks::{Held, Holder, Lock, LockError, LockRequest, Mode};
use toolcell_policy::{Role, TaskBinding, is_glob};
use toolcell_types::{ToolError, ToolErrorKind};

use crate::sessions::{SessionRecord, SessionState, SessionStore, Spawner, default_connect};
use crate::{AuditLog, LockStore};

/// What the workflow capabilities share across calls (held by the runtime).
pub struct WorkflowShared {
    /// The lock table chains lock in.
    pub locks: Arc<LockStore>,
    /// The sessions spawned for tasks.
    pub sessions: Arc<SessionStore>,
    /// The platform's spawner, if it gave one.
    pub spawner: Option<Arc<dyn Spawner>>,
    /// The audit trail every decision goes to.
    pub audit: Option<Arc<AuditLog>>,
}

/// What the `workflow` import works with during one call.
pub struct WorkflowCall {
    /// What every call shares.
    pub shared: Arc<WorkflowShared>,
    /// The workspace's canonical root.
    pub workspace: PathBuf,
    /// The policy and the caller's role as bound for this call; `None` without a policy
    /// (nothing is granted).
    pub policy: Option<Arc<toolcell_policy::Policy>>,
    /// The role bound for this call.
    pub role: Option<Arc<Role>>,
    /// The calling tool.
    pub tool: String,
    /// Who the caller authenticated as.
    pub principal: Option<String>,
    /// Sessions this call spawned so far.
    pub spawned: std::sync::atomic::AtomicU32,
}

/// Sessions one call may spawn.
pub const MAX_SPAWNS_PER_CALL: u32 = 4;
/// Sessions (pending or active) one task may have at once.
pub const MAX_SESSIONS_PER_TASK: usize = 4;
/// Where a task in progress has its file (`docs/tasks/in-progress/CHAIN/TASK.md`).
const IN_PROGRESS_DIR: &str = "docs/tasks/in-progress";

/// Who calls a capability: the call's identity, as its context holds it.
pub struct Caller<'a> {
    /// The caller's role.
    pub role: &'a str,
    /// The caller's session.
    pub session_id: &'a str,
    /// The call.
    pub call_id: &'a str,
}

/// The policy grant a workflow operation needs: the rule its decisions are recorded under.
pub fn grant_of(operation: &str) -> &'static str {
    if operation == "spawn-session" { "may_spawn" } else { "may_lock_for_chains" }
}

impl std::fmt::Debug for WorkflowCall {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("WorkflowCall").field("tool", &self.tool).finish_non_exhaustive()
    }
}

/// What the `workflow` import tells of one lock, before the WIT types.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockInfo {
    /// The locked path or glob, workspace-relative.
    pub pattern: String,
    /// Who holds it (a chain, for a task's locks).
    pub owner: String,
    /// The session that took it.
    pub session: String,
    /// `exclusive` or `shared`.
    pub mode: String,
    /// When the lease ends, RFC 3339 UTC.
    pub expires: String,
}

impl From<&Lock> for LockInfo {
    fn from(lock: &Lock) -> Self {
        LockInfo {
            pattern: lock.pattern.clone(),
            owner: lock.owner.clone(),
            session: lock.session.clone(),
            mode: lock.mode.as_str().to_owned(),
            expires: lock.expires_at(),
        }
    }
}

/// How the lock table names the taker of a task's locks.
pub fn task_session(task: &TaskBinding) -> String {
    format!("task:{task}")
}

fn parse_task(task: &str) -> Result<TaskBinding, ToolError> {
    TaskBinding::parse(task).map_err(|reason| ToolError::new(ToolErrorKind::InvalidArgs, reason))
}

/// A refusal of a workflow capability: its rule, for the audit trail, and the message.
pub struct Refusal {
    /// The refused operation (`spawn-session`).
    pub operation: &'static str,
    /// What it was asked for (the task).
    pub subject: String,
    /// The grant it lacked.
    pub rule: String,
    /// What the caller is told.
    pub message: String,
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
    pub fn locks(&self) -> Vec<Lock> {
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
    pub fn lock_for_task(
        &self,
        caller: &Caller<'_>,
        task: &str,
        patterns: &[String],
        ttl_seconds: u32,
        pending: &[String],
    ) -> Result<Result<Vec<Lock>, ToolError>, Refusal> {
        let granted = self.role.as_ref().is_some_and(|role| role.may_lock_for_chains());
        self.grant(caller, "lock-for-task", task, granted, "lock paths for a chain")?;
        self.lock_for_task_granted(caller, task, patterns, ttl_seconds, pending)
    }

    /// Whose claim a chain's locks are: the caller's role and every role it may spawn (the
    /// sessions that may write as the chain), bound to the task, so they cover what one of
    /// these roles may change. Every spawnable role, not only those the chain has spawned so
    /// far: a lock is taken before the sessions it protects. `None` without a policy (what a
    /// role may change cannot be judged, so the locks cover their whole patterns).
    fn chain_holder(&self, caller: &Caller<'_>, binding: &TaskBinding) -> Option<Holder> {
        self.policy.as_ref()?;
        let mut roles = vec![caller.role.to_owned()];
        if let Some(role) = &self.role {
            roles.extend(role.spawnable().filter(|spawned| *spawned != caller.role).map(str::to_owned));
        }
        Some(Holder { roles, task: Some(binding.to_string()) })
    }

    /// The refusal of a chain lock on the literal `path` that none of `holder`'s roles may
    /// write: audited with the rule that keeps the first role the caller may spawn (else the
    /// caller's) from writing it.
    fn refuse_unwritable(&self, task: &str, holder: &Holder, path: &str) -> Refusal {
        let policy = self.policy.as_deref();
        let decided = |name: &str| {
            policy
                .and_then(|policy| policy.role(name).map(|role| policy.decide(role, toolcell_policy::Access::Write, path).rule))
                .unwrap_or_else(|| "unknown-role".to_owned())
        };
        let rule = decided(holder.roles.get(1).unwrap_or(&holder.roles[0]));
        Refusal {
            operation: "lock-for-task",
            subject: task.to_owned(),
            rule: rule.clone(),
            message: format!(
                "`{}` may not be locked for the chain: none of the roles that write as it ({}) may write it (rule `{rule}`), and a chain may lock only what its roles may change. Lock paths they may write",
                toolcell_types::escape_control(path),
                holder.named()
            ),
        }
    }

    /// `pending`: the files the calling call is writing and has not put in place yet.
    fn lock_for_task_granted(
        &self,
        caller: &Caller<'_>,
        task: &str,
        patterns: &[String],
        ttl_seconds: u32,
        pending: &[String],
    ) -> Result<Result<Vec<Lock>, ToolError>, Refusal> {
        let binding = match parse_task(task) {
            Ok(binding) => binding,
            Err(error) => return Ok(Err(error)),
        };
        let holder = self.chain_holder(caller, &binding);
        let canonical = match self.chain_patterns(&binding, patterns, ttl_seconds, pending) {
            Ok(canonical) => canonical,
            Err(error) => return Ok(Err(error)),
        };
        let policy = self.policy.as_deref();
        if let Some(holder) = &holder
            && let Some(path) = canonical.iter().find(|path| !is_glob(path) && !holder.may(policy, toolcell_policy::Access::Write, path))
        {
            return Err(self.refuse_unwritable(task, holder, path));
        }
        Ok(self.take_chain_locks(&binding, &canonical, ttl_seconds, Held { holder: holder.as_ref(), policy }))
    }

    /// The canonical patterns of a chain lock, once the task and the request are checked.
    fn chain_patterns(
        &self,
        binding: &TaskBinding,
        patterns: &[String],
        ttl_seconds: u32,
        pending: &[String],
    ) -> Result<Vec<String>, ToolError> {
        // Locks for a chain that does not exist (or a task nobody started) would hold paths
        // for no one: `**` for a made-up chain stops every other chain's writes.
        self.check_in_progress(binding, "lock paths for its chain", pending)?;
        if !(1..=86_400).contains(&ttl_seconds) {
            return Err(ToolError::new(ToolErrorKind::InvalidArgs, format!("a lease of {ttl_seconds} s: give 1 to 86400 seconds")));
        }
        if patterns.is_empty() || patterns.len() > 64 {
            return Err(ToolError::new(ToolErrorKind::InvalidArgs, "give 1 to 64 paths or globs to lock"));
        }
        let workspace = open_workspace(&self.workspace)
            .map_err(|_| ToolError::new(ToolErrorKind::Failed, "the workspace cannot be opened to lock paths in it; tell the operator"))?;
        patterns
            .iter()
            .map(|pattern| lock_pattern(&workspace, pattern).map_err(|error| ToolError::new(ToolErrorKind::InvalidArgs, error.to_string())))
            .collect()
    }

    /// Lock the canonical `patterns` for the chain of `binding`, all or none.
    fn take_chain_locks(
        &self,
        binding: &TaskBinding,
        patterns: &[String],
        ttl_seconds: u32,
        held: Held<'_>,
    ) -> Result<Vec<Lock>, ToolError> {
        let mut taken: Vec<Lock> = Vec::new();
        for pattern in patterns {
            let request = LockRequest {
                pattern: pattern.clone(),
                owner: binding.chain().to_owned(),
                session: task_session(binding),
                mode: Mode::Exclusive,
                ttl: Duration::from_secs(u64::from(ttl_seconds)),
            };
            let attempt = self.shared.locks.acquire_held(&self.workspace, &request, held).map_err(|error| match error {
                crate::LockStoreError::Lock(conflict) => ToolError::new(ToolErrorKind::Conflict, conflict.to_string()),
                crate::LockStoreError::Io { .. } | crate::LockStoreError::Store { .. } => {
                    ToolError::new(ToolErrorKind::Failed, "the lock table cannot be written; tell the operator")
                }
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
    pub fn release_task(&self, caller: &Caller<'_>, task: &str) -> Result<Result<u32, ToolError>, Refusal> {
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
    pub fn spawn_session(&self, caller: &Caller<'_>, role: &str, task: &str) -> Result<Result<(String, String), ToolError>, Refusal> {
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
        let unique = crate::storage::hex(&random);
        let id = format!("{role}-{}-{}-{unique}", number(binding.chain()), number(binding.task()));
        let record = SessionRecord {
            id: id.clone(),
            role: role.to_owned(),
            task: Some(binding.to_string()),
            owner: Some(binding.chain().to_owned()),
            parent: Some(caller.session_id.to_owned()),
            created: toolcell_audit::now(),
            state: SessionState::Pending,
            workspace: self.workspace.clone(),
        };
        if self.shared.sessions.create(&record).is_err() {
            return Ok(Err(ToolError::new(ToolErrorKind::Failed, "the session could not be recorded; tell the operator")));
        }
        if let Some(log) = &self.shared.audit {
            let audited = toolcell_audit::Record::spawn(
                &toolcell_audit::now(),
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
        let in_progress = open_workspace(&self.workspace)
            .ok()
            .and_then(|workspace| workspace.symlink_metadata(&file).ok())
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
            let record = crate::lock_record(lock, event, &self.workspace.display().to_string(), self.principal.as_deref());
            let _ = log.append(&[record]);
        }
    }
}

/// The workspace at its canonical root, opened for one operation.
fn open_workspace(root: &Path) -> std::io::Result<cap_std::fs::Dir> {
    cap_std::fs::Dir::open_ambient_dir(root, cap_std::ambient_authority())
}

/// The canonical form of a lock pattern given relative to the workspace `root`: a glob is
/// normalised lexically (`./src//**` is `src/**`); a literal path is resolved through its
/// symlinks, as the guard resolves the paths it judges.
///
/// # Errors
///
/// [`LockError::Pattern`] if the pattern leads outside the workspace.
pub fn lock_pattern(root: &cap_std::fs::Dir, pattern: &str) -> Result<String, LockError> {
    let outside = || LockError::Pattern {
        pattern: pattern.escape_default().to_string(),
        reason: "it leads outside the workspace; lock paths inside it".to_owned(),
    };
    if is_glob(pattern) {
        return toolcell_policy::join_lexically(".", pattern).ok_or_else(outside);
    }
    crate::beneath::canonical(root, pattern).ok_or_else(outside)
}
