//! [`Runtime`]: the loaded tools, the policy, and the host state every call shares (audit trail,
//! locks, read versions, undo records, journals).

use std::collections::BTreeMap;

use toolcell_types::{ToolInfo, ToolName};
use wasmtime::Engine;

use std::sync::Arc;
use toolcell_args::ArgsSchema;

use crate::engine::CacheOutcome;
use crate::error::Error;
use crate::limits::Limits;
use crate::workspace::Workspace;
use crate::{limits, native};
use toolcell_args::adapters;
use toolcell_locks::{Lock, LockRequest};
use toolcell_policy::{Policy, TaskBinding, canonical_tool_name};
use toolcell_state::sessions::SessionStore;
use toolcell_state::undo::SessionChange;
use toolcell_state::{AuditLog, LockStore, Recovery};

/// One component the runtime loaded, and whether it came from the cache.
#[derive(Debug, Clone)]
pub struct LoadedComponent {
    /// Where it came from.
    pub origin: String,
    /// The tool it provides.
    pub tool: ToolName,
    /// Compiled now, or loaded from the compiled-component cache.
    pub cache: CacheOutcome,
    /// SHA-256 of the component's bytes, lowercase hex (what a policy pins).
    pub sha256: String,
    /// What the component imports (`wasi:filesystem/types@0.2.6`), in its order.
    pub imports: Vec<String>,
}

pub use toolcell_outcome::SkippedPlugin;

pub(crate) struct LoadedTool {
    pub(crate) info: ToolInfo,
    pub(crate) schema: ArgsSchema,
    pub(crate) kind: ToolKind,
    pub(crate) origin: String,
}

pub(crate) enum ToolKind {
    /// A tool component.
    Component(crate::engine::ComponentCode),
    /// A tool the host itself implements (undo, locks): it needs host state no component has.
    Native(native::Native),
    /// A provider's built-in tool, carried out by calls of the other tools.
    Adapter(adapters::Adapter),
}

/// A role bound for a call: the policy's generation, the role, the tool, the session's task.
pub(crate) type BoundRoleKey = (u64, String, String, Option<TaskBinding>);

/// Loaded tool components, ready to run calls. Cheap to share between threads.
pub struct Runtime {
    pub(crate) engine: Engine,
    /// wasmtime-wasi's filesystem linked without the guard (the benchmark's baseline): the
    /// workspace is then preopened by wasmtime-wasi itself, by its path.
    pub(crate) unguarded: bool,
    pub(crate) tools: BTreeMap<String, LoadedTool>,
    pub(crate) loaded: Vec<LoadedComponent>,
    /// The policy in force: replaced whole by [`Runtime::reload_policy`].
    pub(crate) policy: crate::reload::PolicySlot,
    /// What the host itself reads and trusts (state directory, cache and its key, plugin
    /// directory, policy file), canonical: no call may change it.
    pub(crate) host_owned: Vec<HostOwned>,
    /// [`Self::host_owned`] as each workspace sees it (workspace-relative), by workspace root:
    /// it changes only with the runtime, and every call needs it.
    pub(crate) host_inside: std::sync::Mutex<std::collections::HashMap<std::path::PathBuf, Vec<String>>>,
    /// What went wrong at load that the operator should know (a cached artifact rejected).
    pub(crate) warnings: Vec<String>,
    /// Plugins left out: they could not be loaded, and the policy does not need them.
    pub(crate) skipped: Vec<SkippedPlugin>,
    pub(crate) audit: Option<Arc<AuditLog>>,
    /// Outbound HTTP (`wasi:http`): TLS, resolver and the `[network]` limits, shared by calls.
    pub(crate) outbound: toolcell_net::Outbound,
    pub(crate) limits: Limits,
    /// The absolute path the text editor tool's paths start from (`/repo`), if the embedder
    /// maps one onto the workspace.
    pub(crate) text_editor_root: Option<String>,
    pub(crate) locks: Arc<LockStore>,
    pub(crate) reads: toolcell_state::reads::ReadTracker,
    pub(crate) undo: toolcell_state::undo::UndoStore,
    /// What tools remember between their calls in a session.
    pub(crate) memos: Arc<toolcell_state::memo::MemoStore>,
    /// Content indexes in the state directory.
    pub(crate) indexes: Arc<toolcell_state::content_index::IndexStore>,
    /// How many parts a call that splits itself (`context.split`) may run side by side.
    pub(crate) parts: u32,
    /// What authenticates the journal lines this runtime writes and replays.
    pub(crate) journal_key: toolcell_state::journal::JournalKey,
    /// Each workspace whose interrupted calls this runtime has rolled back (see
    /// [`Runtime::recover`]), with what it found.
    pub(crate) recovered: toolcell_state::Recoveries,
    /// This runtime's journal file, where every call journals its changes.
    pub(crate) journal: Arc<toolcell_state::journal::JournalFile>,
    /// The state directory, or a private temporary directory for journals and undo, removed
    /// with the runtime (after the journal file and the stores above, which write in it).
    pub(crate) _work: toolcell_state::WorkDir,
    /// Sessions spawned for tasks, the platform's spawner, and what the `workflow` import
    /// shares between calls.
    pub(crate) workflow: Arc<toolcell_state::workflow::WorkflowShared>,
    /// Instances made ahead of the tools' next calls, and finished ones torn down, on an idle
    /// thread.
    pub(crate) ahead: crate::call::ahead::Ahead,
    /// Roles bound for a tool and a task (`Policy::bind`), kept between calls.
    pub(crate) bound_roles: std::sync::Mutex<std::collections::HashMap<BoundRoleKey, Arc<toolcell_policy::Role>>>,
    /// Advances the epoch for deadlines; stops when the runtime is dropped.
    pub(crate) _ticker: limits::EpochTicker,
}

impl Runtime {
    /// The loaded tools, sorted by name.
    pub fn tools(&self) -> impl Iterator<Item = &ToolInfo> {
        self.tools.values().map(|tool| &tool.info)
    }

    /// The tool named `name`, if loaded.
    pub fn tool(&self, name: &str) -> Option<&ToolInfo> {
        self.tools.get(name).map(|tool| &tool.info)
    }

    /// The audit trail, if the runtime keeps one.
    pub fn audit(&self) -> Option<&AuditLog> {
        self.audit.as_deref()
    }

    /// The policy governing calls that start now, if any (a reload replaces it).
    pub fn policy(&self) -> Option<Arc<Policy>> {
        self.policy.current()
    }

    /// The changes `session` made to files of `workspace` that its undo records still hold,
    /// oldest first, each with the content before and (when it can still be told) after.
    pub fn session_changes(&self, workspace: &Workspace, session: &str) -> Vec<SessionChange> {
        self.undo.changes(session, workspace.root(), &workspace.directory)
    }

    /// The sessions the host knows of (spawned for tasks, or started with one).
    pub fn sessions(&self) -> &SessionStore {
        &self.workflow.sessions
    }

    /// The tool `name` names: itself, or the canonical name of an alias (`chain:status` is
    /// `chain_status`); `None` if no tool is loaded under either.
    pub fn canonical_tool<'a>(&'a self, name: &str) -> Option<&'a str> {
        let canonical = canonical_tool_name(name);
        self.tools.get_key_value(canonical.as_ref()).map(|(key, _)| key.as_str())
    }

    /// The role `role` as it stands for a call of `tool` by a session bound to `task`
    /// under the policy `in_force` ([`Policy::bind`]), cached; `None` without a policy or for
    /// an unknown role.
    pub(crate) fn bound_role(
        &self,
        in_force: &crate::reload::InForce,
        role: &str,
        tool: &str,
        task: Option<&TaskBinding>,
    ) -> Option<Arc<toolcell_policy::Role>> {
        let policy = in_force.policy.as_ref()?;
        if !policy.role(role)?.has_scoped_rules() {
            return policy.bind(role, tool, None);
        }
        let key = (in_force.generation, role.to_owned(), tool.to_owned(), task.cloned());
        let mut cache = self.bound_roles.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(bound) = cache.get(&key) {
            return Some(Arc::clone(bound));
        }
        let bound = policy.bind(role, tool, task)?;
        if cache.len() >= 1024 {
            cache.clear();
        }
        cache.insert(key, Arc::clone(&bound));
        Some(bound)
    }

    /// The lock table every call's writes pass.
    pub fn locks(&self) -> &LockStore {
        &self.locks
    }

    /// The live locks of `workspace`.
    ///
    /// # Errors
    ///
    /// [`Error::Lock`] if the lock table cannot be read.
    pub fn live_locks(&self, workspace: &Workspace) -> Result<Vec<Lock>, Error> {
        Ok(self.locks.live(workspace.root())?)
    }

    /// Acquire (or renew) a lock in `workspace` for the operator or the embedding platform,
    /// and record it in the audit trail. It covers its whole pattern; a lock an agent took for
    /// its role contests it only where that role may write, under the policy in force.
    ///
    /// # Errors
    ///
    /// [`Error::Lock`] naming the conflicting lock, or what is wrong with the request.
    pub fn acquire_lock(&self, workspace: &Workspace, request: &LockRequest) -> Result<Lock, Error> {
        let policy = self.policy();
        let held = toolcell_locks::Held { holder: None, policy: policy.as_deref() };
        let lock = self.locks.acquire_held(workspace.root(), request, held)?;
        self.audit_lock(workspace, "acquired", &lock);
        Ok(lock)
    }

    /// Release the lock with token `fence` held by `owner` in `workspace`, and record it.
    ///
    /// # Errors
    ///
    /// [`Error::Lock`] if `owner` holds no such lock.
    pub fn release_lock(&self, workspace: &Workspace, fence: u64, owner: &str) -> Result<Lock, Error> {
        let lock = self.locks.release(workspace.root(), fence, owner)?;
        self.audit_lock(workspace, "released", &lock);
        Ok(lock)
    }

    /// End `session` in `workspace`: release every lock taken in it, and record each release.
    ///
    /// # Errors
    ///
    /// [`Error::Lock`] if the lock table cannot be updated.
    pub fn release_session_locks(&self, workspace: &Workspace, session: &str) -> Result<Vec<Lock>, Error> {
        let released = self.locks.release_session(workspace.root(), session)?;
        for lock in &released {
            self.audit_lock(workspace, "released", lock);
        }
        Ok(released)
    }

    fn audit_lock(&self, workspace: &Workspace, event: &str, lock: &Lock) {
        if let Some(log) = &self.audit {
            let record = toolcell_state::lock_record(lock, event, &workspace.root().display().to_string(), None);
            let _ = log.append(&[record]);
        }
    }

    /// Calls interrupted by a crash that this runtime rolled back in the workspaces it opened.
    pub fn recovered(&self) -> Vec<Recovery> {
        self.recovered.all()
    }

    /// Roll back the calls in `workspace` that a runtime which died (here or in another
    /// process on the same state directory) left open, once per workspace and runtime: every
    /// call does this first. Only journals this installation wrote (their lines verify under
    /// the state key) and only calls in this very workspace are replayed; each recovery is
    /// audited. Returns what this workspace's recovery found (the first time; later calls
    /// return the same).
    pub fn recover(&self, workspace: &Workspace) -> Vec<Recovery> {
        self.recovered.recover_once(&self._work.journals(), &self.journal_key, workspace.root(), self.audit.as_deref())
    }

    /// Why writes to `workspace` are stopped, for the agent (no host path), if they are: a
    /// journal there did not verify, or a call could not be rolled back (at recovery or in the
    /// call itself), so something in it may be half done until the operator looks.
    pub fn writes_stopped(&self, workspace: &Workspace) -> Option<String> {
        self.recovered.writes_stopped(workspace.root()).then(|| {
            "writes to this workspace are stopped: the host found a call journal it cannot trust, or a call it could not roll back, so something in the workspace may be half done. Reads still work. Tell the operator: the host's log and the audit trail name the journal; once they have checked the workspace and removed that journal, a restart lets writes go on".to_owned()
        })
    }

    /// Stop writes to `workspace` for the rest of this runtime: the call `call_id` of `session`
    /// failed and could not be rolled back (`failure`).
    pub(crate) fn stop_writes(&self, workspace: &Workspace, session: &str, call_id: &str, failure: &str) {
        self.recovered.stop_writes(workspace.root(), session, call_id, failure, self.audit.as_deref());
    }

    /// The instances made ahead of the tools' next calls and not yet taken by one (at most
    /// one per tool called so far): what the runtime's idle thread has ready.
    pub fn instances_made_ahead(&self) -> usize {
        self.ahead.ready()
    }

    /// What the operator should know about the load: each cached artifact that failed
    /// authentication and was compiled again, each plugin left out.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// The plugins left out at load: they could not be loaded and the policy does not need
    /// them (each is also one of the [`warnings`](Self::warnings)). None is callable.
    pub fn skipped_plugins(&self) -> &[SkippedPlugin] {
        &self.skipped
    }

    /// Every component loaded, in load order, and whether each came from the cache.
    pub fn loaded(&self) -> &[LoadedComponent] {
        &self.loaded
    }
}

/// A location the host reads and trusts: hidden from every tool (not readable, listable,
/// searchable or statable, let alone writable), whatever the policy says.
#[derive(Debug)]
pub(crate) struct HostOwned {
    /// Canonical (as far as it exists).
    pub(crate) path: std::path::PathBuf,
    pub(crate) is_directory: bool,
    /// The symlinks on the way to it as it was named (each itself, not followed): a run finds
    /// it through them, so they are protected with it.
    pub(crate) links: Vec<std::path::PathBuf>,
}

impl HostOwned {
    pub(crate) fn directory(path: &std::path::Path) -> Self {
        HostOwned::new(path, true)
    }

    pub(crate) fn new(path: &std::path::Path, is_directory: bool) -> Self {
        HostOwned {
            path: toolcell_state::inventory::canonical_lenient(path),
            is_directory,
            links: toolcell_state::inventory::symlinks_on_the_way(path),
        }
    }
}
