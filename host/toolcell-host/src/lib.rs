//! Embed toolcell in a platform: a governed host over one workspace, and sessions that call its
//! tools.
//!
//! [`HostBuilder`] takes the workspace, the policy (the shipped default unless told otherwise),
//! the state directory for the audit trail, the compiled-component cache and an approval
//! callback, and builds a [`Host`] with the built-in tools. [`Host::session`] opens a session for
//! a role; [`Session::call`] runs one tool call and returns its result, any warnings and the audit
//! call id. Every call is a transaction (all of its changes, or none); [`Session::lock`] takes a
//! lease on paths that other sessions (in this process or any other sharing the state
//! directory) then cannot modify. [`schemas`] renders the tools a role may call in the shape each model provider
//! expects, and [`providers`] answers a provider's built-in tool calls (Anthropic's text editor,
//! OpenAI's `apply_patch`) in the provider's own shape.
//!
//! ```
//! use toolcell_host::{HostBuilder, ToolErrorKind};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let base = std::env::temp_dir().join(format!("toolcell-host-doc-{}", std::process::id()));
//! # let repo = base.join("repo");
//! # std::fs::create_dir_all(repo.join("docs"))?;
//! # std::fs::write(repo.join("README.md"), "# demo\n")?;
//! let host = HostBuilder::new(&repo)              // the workspace the agent works in
//!     .state_dir(base.join("state"))             // the audit trail, outside the workspace
//!     .build()?;                                  // the shipped default policy
//! let session = host.session("impl", "s-1")?;
//!
//! let result = session.call("read_file", r#"{"path": "README.md"}"#)?;
//! assert_eq!(result.output?.text, "     1\t# demo");
//!
//! // `impl` may not modify docs/**: the refusal names the rule.
//! let refused = session.call("write_file", r#"{"path": "docs/a.md", "content": "x"}"#)?;
//! let error = refused.output.unwrap_err();
//! assert_eq!(error.kind, ToolErrorKind::Denied);
//! assert!(error.message.contains("docs-read-only"));
//! # std::fs::remove_dir_all(&base)?;
//! # Ok(())
//! # }
//! ```

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub use toolcell_runtime::{
    Access, Approver, CacheOutcome, Denial, Error, IndexStatus, Lock, LockMode, LockRequest, MAX_LIVE_INSTANCES, Runtime, RuntimeBuilder,
    SessionRecord, SessionState, Spawner, TaskBinding, Workspace,
};
pub use toolcell_types::{Image, Structured, ToolError, ToolErrorKind, ToolInfo, ToolOutput};

use toolcell_runtime::CallRequest;

pub mod providers;
pub mod schemas;

/// The shipped default policy (`policies/default.toml`).
pub const DEFAULT_POLICY: &str = include_str!("../../../policies/default.toml");
/// How the default policy is named in messages.
pub const DEFAULT_POLICY_NAME: &str = "policies/default.toml (built in)";
/// The shipped task-chain workflow policy (`policies/workflow.toml`).
pub const WORKFLOW_POLICY: &str = include_str!("../../../policies/workflow.toml");
/// How the workflow policy is named in messages.
pub const WORKFLOW_POLICY_NAME: &str = "policies/workflow.toml (built in)";

/// A shipped policy by name (`default`, `workflow`): its name in messages and its text.
pub fn builtin_policy(name: &str) -> Option<(&'static str, &'static str)> {
    match name {
        "default" => Some((DEFAULT_POLICY_NAME, DEFAULT_POLICY)),
        "workflow" => Some((WORKFLOW_POLICY_NAME, WORKFLOW_POLICY)),
        _ => None,
    }
}

/// A runtime builder with the built-in tools.
pub fn builtin_runtime() -> RuntimeBuilder {
    let mut builder = RuntimeBuilder::new();
    for (name, wasm) in toolcell_builtins::components() {
        builder = match toolcell_builtins::precompiled(name) {
            // SAFETY: the artifact was compiled from these very bytes when this binary was
            // built, and is part of it.
            #[expect(unsafe_code, reason = "the built-in tools' compiled forms ship inside the binary")]
            Some(artifact) => unsafe { builder.precompiled_component(format!("builtin:{name}"), wasm, artifact) },
            None => builder.component(format!("builtin:{name}"), wasm),
        };
    }
    builder
}

/// The tools `role` may call on `runtime`, sorted by name: all of them without a policy, none
/// for a role the policy does not define.
pub fn tools_for_role<'a>(runtime: &'a Runtime, role: &str) -> Vec<&'a ToolInfo> {
    let policy = runtime.policy();
    let policy_role = policy.as_deref().map(|policy| policy.role(role));
    runtime
        .tools()
        .filter(|tool| match policy_role {
            None => true,
            Some(Some(policy_role)) => policy_role.may_call(tool.name.as_str()),
            Some(None) => false,
        })
        .collect()
}

enum PolicyChoice {
    Default,
    File(PathBuf),
    Text { name: String, text: String },
}

/// Configures a [`Host`].
pub struct HostBuilder {
    workspace: PathBuf,
    policy: PolicyChoice,
    state_dir: Option<PathBuf>,
    cache_dir: Option<PathBuf>,
    approver: Option<Arc<dyn Approver>>,
    spawner: Option<Arc<dyn Spawner>>,
    text_editor_root: Option<String>,
    protected: Vec<PathBuf>,
}

impl HostBuilder {
    /// A host over the directory `workspace`, governed by the shipped default policy, with no
    /// audit trail, no compiled-component cache and no approver (`ask` is refused).
    pub fn new(workspace: impl Into<PathBuf>) -> Self {
        HostBuilder {
            workspace: workspace.into(),
            policy: PolicyChoice::Default,
            state_dir: None,
            cache_dir: None,
            approver: None,
            spawner: None,
            text_editor_root: None,
            protected: Vec::new(),
        }
    }

    /// Govern calls by the policy in this file.
    #[must_use]
    pub fn policy_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.policy = PolicyChoice::File(path.into());
        self
    }

    /// Govern calls by this policy text; `name` names it in errors.
    #[must_use]
    pub fn policy_text(mut self, name: impl Into<String>, text: impl Into<String>) -> Self {
        self.policy = PolicyChoice::Text { name: name.into(), text: text.into() };
        self
    }

    /// Keep the audit trail in `directory/audit.jsonl`.
    #[must_use]
    pub fn state_dir(mut self, directory: impl Into<PathBuf>) -> Self {
        self.state_dir = Some(directory.into());
        self
    }

    /// Cache compiled components in `directory`, so that later starts do not recompile.
    #[must_use]
    pub fn cache_dir(mut self, directory: impl Into<PathBuf>) -> Self {
        self.cache_dir = Some(directory.into());
        self
    }

    /// Let the text editor tool take absolute paths under `root` (`/repo`), as the model is
    /// told the files live there: `/repo/src/x.py` is the workspace's `src/x.py`, and messages
    /// name the paths as the model wrote them. Relative paths still work.
    #[must_use]
    pub fn text_editor_root(mut self, root: impl Into<String>) -> Self {
        self.text_editor_root = Some(root.into());
        self
    }

    /// Protect `path`, a file or directory the platform reads and trusts (its own
    /// configuration), as toolcell's own state: no tool may read, list or change it.
    #[must_use]
    pub fn protect(mut self, path: impl Into<PathBuf>) -> Self {
        self.protected.push(path.into());
        self
    }

    /// Ask `approver` about every access the policy marks `ask`.
    #[must_use]
    pub fn approver(mut self, approver: Arc<dyn Approver>) -> Self {
        self.approver = Some(approver);
        self
    }

    /// Start the agent of every session a tool spawns (`spawn_impl_session`) with `spawner`;
    /// without one, a spawned session is recorded as pending and the spawning agent is told
    /// the `toolcell mcp` command that runs it.
    #[must_use]
    pub fn spawner(mut self, spawner: Arc<dyn Spawner>) -> Self {
        self.spawner = Some(spawner);
        self
    }

    /// Load the tools, compile the policy, open the workspace and the audit trail.
    ///
    /// # Errors
    ///
    /// [`Error::Workspace`], [`Error::Policy`], [`Error::PolicyFile`], [`Error::Audit`],
    /// [`Error::Cache`], or a component load error.
    pub fn build(self) -> Result<Host, Error> {
        let workspace = Workspace::open(&self.workspace)?;
        let mut builder = builtin_runtime();
        if let Some(cache) = self.cache_dir {
            builder = builder.cache_dir(cache);
        }
        if let Some(state) = self.state_dir {
            builder = builder.audit_dir(state);
        }
        if let Some(spawner) = self.spawner {
            builder = builder.spawner(spawner);
        }
        if let Some(root) = self.text_editor_root {
            builder = builder.text_editor_root(root);
        }
        for path in self.protected {
            builder = builder.protect(path);
        }
        builder = match self.policy {
            PolicyChoice::Default => builder.policy(DEFAULT_POLICY_NAME, DEFAULT_POLICY),
            PolicyChoice::File(path) => builder.policy_file(path),
            PolicyChoice::Text { name, text } => builder.policy(name, text),
        };
        Ok(Host::new(builder.build()?, workspace, self.approver))
    }
}

struct HostInner {
    runtime: Arc<Runtime>,
    workspace: Workspace,
    approver: Option<Arc<dyn Approver>>,
}

/// A governed toolcell host over one workspace. Cheap to clone and to share between threads.
#[derive(Clone)]
pub struct Host {
    inner: Arc<HostInner>,
}

impl Host {
    /// A host from a runtime built elsewhere (for example with extra components or limits),
    /// over `workspace`, asking `approver` about `ask` rules.
    pub fn new(runtime: Runtime, workspace: Workspace, approver: Option<Arc<dyn Approver>>) -> Host {
        Host::shared(Arc::new(runtime), workspace, approver)
    }

    /// A host over `workspace` on a runtime other hosts share (a service serving several
    /// workspaces loads its components once).
    pub fn shared(runtime: Arc<Runtime>, workspace: Workspace, approver: Option<Arc<dyn Approver>>) -> Host {
        Host { inner: Arc::new(HostInner { runtime, workspace, approver }) }
    }

    /// Open a session for `role`.
    ///
    /// # Errors
    ///
    /// [`Error::UnknownRole`] if the policy has no such role.
    pub fn session(&self, role: &str, session_id: &str) -> Result<Session, Error> {
        if let Some(policy) = self.inner.runtime.policy()
            && policy.role(role).is_none()
        {
            return Err(Error::UnknownRole {
                role: role.escape_default().to_string(),
                roles: policy.roles().map(|role| role.name()).collect::<Vec<_>>().join(", "),
            });
        }
        Ok(Session {
            host: self.clone(),
            role: role.to_owned(),
            session_id: session_id.to_owned(),
            owner: None,
            task: None,
            principal: None,
            held: Arc::new(Mutex::new(Vec::new())),
        })
    }

    /// Open the session `session_id` the host recorded when a tool spawned it: its role, task
    /// and owner come from the record, not from the caller. The session is marked active.
    ///
    /// # Errors
    ///
    /// [`Error::Session`] if no such session was spawned in this workspace, or it has ended.
    pub fn spawned_session(&self, session_id: &str) -> Result<Session, Error> {
        let sessions = self.inner.runtime.sessions();
        let unknown = |reason: &str| Error::Session { session: session_id.escape_default().to_string(), reason: reason.to_owned() };
        let record =
            sessions.get(session_id).ok_or_else(|| unknown("no session of that id was spawned (`toolcell sessions list` lists them)"))?;
        if record.workspace != self.inner.workspace.root() {
            return Err(unknown("it was spawned for another workspace"));
        }
        if record.state == SessionState::Ended {
            return Err(unknown("it has ended; spawn a new one"));
        }
        let mut session = self.session(&record.role, &record.id)?;
        if let Some(task) = &record.task {
            session = session.with_task(TaskBinding::parse(task).map_err(|reason| unknown(&reason))?);
        }
        if let Some(owner) = &record.owner {
            session = session.with_owner(owner.clone());
        }
        sessions.set_state(&record.id, SessionState::Active).map_err(|error| unknown(&format!("its record cannot be updated: {error}")))?;
        Ok(session)
    }

    /// The workspace the host governs.
    pub fn workspace(&self) -> &Workspace {
        &self.inner.workspace
    }

    /// Release every lock the session `session_id` holds on the workspace (it ended), whatever
    /// its role and whichever host took them; the locks released.
    ///
    /// # Errors
    ///
    /// [`Error::Lock`] if the lock table cannot be changed.
    pub fn end_session(&self, session_id: &str) -> Result<Vec<Lock>, Error> {
        self.inner.runtime.release_session_locks(&self.inner.workspace, session_id)
    }

    /// The live locks on the workspace.
    ///
    /// # Errors
    ///
    /// [`Error::Lock`] if the lock table cannot be read.
    pub fn locks(&self) -> Result<Vec<Lock>, Error> {
        self.inner.runtime.live_locks(&self.inner.workspace)
    }

    /// The runtime underneath, for what the session API does not cover.
    pub fn runtime(&self) -> &Runtime {
        &self.inner.runtime
    }

    /// The tools `role` may call, sorted by name.
    pub fn tools_for(&self, role: &str) -> Vec<&ToolInfo> {
        tools_for_role(&self.inner.runtime, role)
    }
}

/// One caller's session: a role, a session id, and optionally an owner (the chain or task the
/// work belongs to).
#[derive(Clone)]
pub struct Session {
    host: Host,
    role: String,
    session_id: String,
    owner: Option<String>,
    /// The task the session is bound to.
    task: Option<TaskBinding>,
    /// Who the caller authenticated as (recorded on every audit record of its calls).
    principal: Option<String>,
    /// Locks this session acquired and has not released; their tokens go with every call.
    held: Arc<Mutex<Vec<Lock>>>,
}

/// What one call returned.
#[derive(Debug, Clone)]
pub struct CallResult {
    /// The tool's output, or the error the agent should see.
    pub output: Result<ToolOutput, ToolError>,
    /// Warnings for the agent that do not fail the call.
    pub warnings: Vec<String>,
    /// The call's id in the audit trail.
    pub call_id: String,
    /// The filesystem accesses the host refused during the call.
    pub denials: Vec<Denial>,
    /// Images the tool showed the agent beside a successful result.
    pub images: Vec<Image>,
}

impl Session {
    /// Record who the work belongs to (for example a chain or task id).
    #[must_use]
    pub fn with_owner(mut self, owner: impl Into<String>) -> Self {
        self.owner = Some(owner.into());
        self
    }

    /// Bind the session to one task: the policy's `{chain}` / `{task}` rules apply to it, the
    /// task tools act on it, and the session writes for the task's chain (its lock owner,
    /// unless [`with_owner`](Self::with_owner) says otherwise).
    #[must_use]
    pub fn with_task(mut self, task: TaskBinding) -> Self {
        if self.owner.is_none() {
            self.owner = Some(task.chain().to_owned());
        }
        self.task = Some(task);
        self
    }

    /// Record on every audit record of this session's calls that the caller authenticated
    /// as `principal`.
    #[must_use]
    pub fn with_principal(mut self, principal: impl Into<String>) -> Self {
        self.principal = Some(principal.into());
        self
    }

    /// Who the caller authenticated as, if a service authenticated it.
    pub fn principal(&self) -> Option<&str> {
        self.principal.as_deref()
    }

    /// The task the session is bound to, if any.
    pub fn task(&self) -> Option<&TaskBinding> {
        self.task.as_ref()
    }

    /// The session's role.
    pub fn role(&self) -> &str {
        &self.role
    }

    /// The session's id.
    pub fn id(&self) -> &str {
        &self.session_id
    }

    /// The session's owner, if set.
    pub fn owner(&self) -> Option<&str> {
        self.owner.as_deref()
    }

    /// The host the session belongs to.
    pub fn host(&self) -> &Host {
        &self.host
    }

    /// Lock a workspace path or glob for this session's owner (its id without one) for `ttl`;
    /// the lock's token goes with this session's calls from now on, so that if the lease
    /// lapses, its writes are refused rather than racing the next holder.
    ///
    /// # Errors
    ///
    /// [`Error::Lock`] naming the conflicting lock, or what is wrong with the pattern.
    pub fn lock(&self, pattern: &str, mode: LockMode, ttl: Duration) -> Result<Lock, Error> {
        let inner = &self.host.inner;
        let request = LockRequest {
            pattern: inner.workspace.lock_pattern(pattern)?,
            owner: self.lock_owner().to_owned(),
            session: self.session_id.clone(),
            mode,
            ttl,
        };
        let lock = inner.runtime.acquire_lock(&inner.workspace, &request)?;
        let mut held = self.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        // The new lease supersedes any earlier token of this session on the same pattern.
        held.retain(|kept| kept.fence != lock.fence && kept.pattern != lock.pattern);
        held.push(lock.clone());
        Ok(lock)
    }

    /// Release a lock this session holds.
    ///
    /// # Errors
    ///
    /// [`Error::Lock`] if the owner holds no such lock.
    pub fn unlock(&self, lock: &Lock) -> Result<(), Error> {
        let inner = &self.host.inner;
        let released = inner.runtime.release_lock(&inner.workspace, lock.fence, self.lock_owner());
        // Released or not (it may have been reclaimed), the token is no longer this session's.
        self.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner).retain(|kept| kept.fence != lock.fence);
        released.map(drop)
    }

    /// End the session: release every lock taken in it (whoever it was taken for), so that
    /// nobody waits for their leases to run out. Its read versions and undo history stay, for
    /// a session of the same id later.
    ///
    /// # Errors
    ///
    /// [`Error::Lock`] if the lock table cannot be updated.
    pub fn end(&self) -> Result<Vec<Lock>, Error> {
        let inner = &self.host.inner;
        let released = inner.runtime.release_session_locks(&inner.workspace, &self.session_id)?;
        self.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clear();
        Ok(released)
    }

    /// The locks this session acquired and has not released (some may have expired).
    pub fn held_locks(&self) -> Vec<Lock> {
        self.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    fn lock_owner(&self) -> &str {
        self.owner.as_deref().unwrap_or(&self.session_id)
    }

    /// The tools this session's role may call.
    pub fn tools(&self) -> Vec<&ToolInfo> {
        self.host.tools_for(&self.role)
    }

    /// Call `tool` with `args`, a JSON object as text.
    ///
    /// # Errors
    ///
    /// [`Error::UnknownTool`] or [`Error::Call`] when the host cannot run the call; everything
    /// the agent should see (bad arguments, refusals, tool errors) is in
    /// [`CallResult::output`].
    pub fn call(&self, tool: &str, args: &str) -> Result<CallResult, Error> {
        self.call_cancellable(tool, args, None)
    }

    /// [`call`](Self::call), stopped and rolled back if `cancel` is set while it runs.
    ///
    /// # Errors
    ///
    /// As [`call`](Self::call).
    pub fn call_cancellable(
        &self,
        tool: &str,
        args: &str,
        cancel: Option<&Arc<std::sync::atomic::AtomicBool>>,
    ) -> Result<CallResult, Error> {
        let inner = &self.host.inner;
        let fences: Vec<u64> = self.held_locks().iter().map(|lock| lock.fence).collect();
        let outcome = inner.runtime.call(&CallRequest {
            workspace: &inner.workspace,
            role: &self.role,
            session_id: &self.session_id,
            tool,
            args,
            approver: inner.approver.as_ref(),
            owner: self.owner.as_deref(),
            fences: &fences,
            task: self.task.as_ref(),
            principal: self.principal.as_deref(),
            cancel,
        })?;
        Ok(CallResult {
            output: outcome.result,
            warnings: outcome.warnings,
            call_id: outcome.call_id,
            denials: outcome.denials,
            images: outcome.images,
        })
    }
}
