//! Load time: [`RuntimeBuilder`] compiles or loads every component, checks its imports and its
//! description, links it, reads the policy, and records what the host itself owns.

mod build;
mod load;
mod network;

pub(crate) use build::{compile_policy, policy_name};

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use toolcell_types::{Annotations, ToolInfo, ToolName};
use wasmtime::Engine;
use wasmtime::Store;
use wasmtime_wasi::WasiCtxBuilder;

use crate::capabilities::CallState;
use crate::error::describe;
use std::sync::Arc;
use toolcell_args::ArgsSchema;

use crate::engine;
use crate::engine::LoadProgress;
use crate::limits::Limits;
use toolcell_state::content_index::IndexFreshness;
use toolcell_state::sessions::Spawner;
use toolcell_state::{AuditBackend, LockBackend};

/// Configures and builds a [`Runtime`].
#[derive(Default)]
pub struct RuntimeBuilder {
    cache_dir: Option<PathBuf>,
    components: Vec<ComponentSource>,
    policy: Option<PolicySource>,
    audit_dir: Option<PathBuf>,
    unguarded: bool,
    limits: Limits,
    plugin_dir: Option<PathBuf>,
    spawner: Option<Arc<dyn Spawner>>,
    progress: Option<Arc<engine::Progress>>,
    /// Stub imports granted here rather than by the policy, by tool (`*`: any tool).
    stub_imports: BTreeMap<String, Vec<String>>,
    index_freshness: IndexFreshness,
    build_index_on_first_search: bool,
    parts: Option<u32>,
    /// Lock tables and the audit trail in a store several hosts share.
    shared_store: Option<(Arc<dyn LockBackend>, Arc<dyn AuditBackend>)>,
    /// Session state (read versions, undo history) in a store several hosts share.
    shared_sessions: Option<Arc<dyn toolcell_state::SessionBackend>>,
    text_editor_root: Option<String>,
    /// Further files and directories the embedder trusts (a service's own configuration).
    protected: Vec<PathBuf>,
    /// Plugin files loaded with other bytes than the directory holds (`toolcell tools update`
    /// checking a new build), by file name.
    replacements: BTreeMap<String, Vec<u8>>,
    /// How outbound HTTP resolves names (default: the system's resolver).
    resolver: Option<Arc<dyn toolcell_net::Resolve>>,
}

/// A component to load: its origin, its bytes, and optionally its compiled form.
struct ComponentSource {
    origin: String,
    wasm: Cow<'static, [u8]>,
    /// Compiled by `Engine::precompile_component` when the binary was built.
    artifact: Option<&'static [u8]>,
    /// From the plugin directory: if it cannot be loaded and the policy does not need it, it is
    /// left out rather than stopping the start.
    is_plugin: bool,
}

enum PolicySource {
    Text { file: String, text: String },
    File(PathBuf),
}

impl RuntimeBuilder {
    /// A builder with no components and no compiled-component cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// Start the agents of sessions that tools spawn (`workflow.spawn-session`) with
    /// `spawner`; without one, a spawned session waits for an agent to connect to it (the
    /// spawning agent is told the `toolcell mcp` command).
    #[must_use]
    pub fn spawner(mut self, spawner: Arc<dyn Spawner>) -> Self {
        self.spawner = Some(spawner);
        self
    }

    /// Let the component of `tool` (`*`: of any tool) link the imports `patterns` cover
    /// (`namespace:package/interface` or `namespace:package/*`) as stubs that refuse every
    /// call, as the policy's `[plugins.NAME] stub_imports` does. For checking a component
    /// before the policy names it (`toolcell conformance`).
    #[must_use]
    pub fn stub_imports(mut self, tool: impl Into<String>, patterns: impl IntoIterator<Item = String>) -> Self {
        self.stub_imports.entry(tool.into()).or_default().extend(patterns);
        self
    }

    /// Let the text editor tool (`str_replace_based_edit_tool`) take absolute paths under
    /// `root` (`/repo/src/x.py` with root `/repo`), as the provider's reference implementation
    /// expects, mapped onto the workspace; its messages name the paths as the model wrote them.
    #[must_use]
    pub fn text_editor_root(mut self, root: impl Into<String>) -> Self {
        self.text_editor_root = Some(root.into());
        self
    }

    /// How searches learn what changed in a workspace since its content index was built
    /// (default: [`IndexFreshness::Watch`]).
    #[must_use]
    pub fn index_freshness(mut self, freshness: IndexFreshness) -> Self {
        self.index_freshness = freshness;
        self
    }

    /// When a search finds no content index for its workspace, build one in the background
    /// (the search itself scans), for the searches after it. For hosts that outlive a call
    /// (the MCP server, `toolcell serve`); off by default.
    #[must_use]
    pub fn build_index_on_first_search(mut self, build: bool) -> Self {
        self.build_index_on_first_search = build;
        self
    }

    /// Keep the lock tables and the audit trail in a store several hosts share (PostgreSQL:
    /// `toolcell-store-postgres`) instead of the state directory, which still holds what each
    /// host keeps for itself (journals, undo records, read versions, indexes): needs
    /// [`audit_dir`](Self::audit_dir).
    #[must_use]
    pub fn shared_store(mut self, locks: Arc<dyn LockBackend>, audit: Arc<dyn AuditBackend>) -> Self {
        self.shared_store = Some((locks, audit));
        self
    }

    /// Keep each session's read versions and undo history in a store several hosts share
    /// (PostgreSQL: `toolcell-store-postgres`), so that any host serves any request of a
    /// session; without it they stay in the state directory.
    #[must_use]
    pub fn shared_sessions(mut self, sessions: Arc<dyn toolcell_state::SessionBackend>) -> Self {
        self.shared_sessions = Some(sessions);
        self
    }

    /// How many parts a call that splits itself (`context.split`: a search over a large tree)
    /// may run side by side; 0 or 1 runs none. Default: the machine's cores, at most 8.
    #[must_use]
    pub fn parallel_parts(mut self, parts: u32) -> Self {
        self.parts = Some(parts);
        self
    }

    /// Tell `listener` when a component starts and ends compiling (it is called from the
    /// loading threads). Built-in tools and cached components load without compiling.
    #[must_use]
    pub fn on_progress(mut self, listener: impl Fn(LoadProgress<'_>) + Send + Sync + 'static) -> Self {
        self.progress = Some(Arc::new(listener));
        self
    }

    /// Keep compiled components in `directory` (created if missing), so that later starts
    /// load them instead of compiling. The directory must be writable only by this user:
    /// cached artifacts are loaded without validation.
    #[must_use]
    pub fn cache_dir(mut self, directory: impl Into<PathBuf>) -> Self {
        self.cache_dir = Some(directory.into());
        self
    }

    /// Add a tool component. `origin` names it in errors and reports (`builtin:read_file`,
    /// a file path).
    #[must_use]
    pub fn component(mut self, origin: impl Into<String>, wasm: impl Into<Cow<'static, [u8]>>) -> Self {
        self.components.push(ComponentSource { origin: origin.into(), wasm: wasm.into(), artifact: None, is_plugin: false });
        self
    }

    /// Add a tool component together with its compiled form (`Engine::precompile_component`
    /// of exactly these bytes, by an engine configured with the component model and epoch
    /// interruption), loaded instead of compiling it when it matches this runtime's engine;
    /// otherwise the component is compiled (or taken from the cache) as by
    /// [`component`](Self::component).
    ///
    /// # Safety
    ///
    /// Loading `artifact` runs its machine code natively, unchecked: it must come from the
    /// same trusted build as the program (the built-in tools embedded in the binary), never
    /// from anything a user or a tool could write.
    #[must_use]
    #[expect(unsafe_code, reason = "an unsafe constructor is how the caller vouches for the artifact")]
    pub unsafe fn precompiled_component(mut self, origin: impl Into<String>, wasm: &'static [u8], artifact: &'static [u8]) -> Self {
        self.components.push(ComponentSource {
            origin: origin.into(),
            wasm: Cow::Borrowed(wasm),
            artifact: Some(artifact),
            is_plugin: false,
        });
        self
    }

    /// Govern every call by the policy in `text` (TOML; `file` names it in errors). It is
    /// compiled when the runtime is built, once the tools' names are known. Without a policy,
    /// only the workspace boundary applies.
    #[must_use]
    pub fn policy(mut self, file: impl Into<String>, text: impl Into<String>) -> Self {
        self.policy = Some(PolicySource::Text { file: file.into(), text: text.into() });
        self
    }

    /// Protect `path`, a file or directory the embedder reads and trusts (its own
    /// configuration, say), as the host protects its own state: no tool of any role may read,
    /// list or change it when it lies in a workspace, and a workspace inside it is refused.
    /// The runtime protects its state directory, cache, plugin directory and policy file
    /// itself, and so the default ones of this user and the running executable.
    #[must_use]
    pub fn protect(mut self, path: impl Into<PathBuf>) -> Self {
        self.protected.push(path.into());
        self
    }

    /// Load every `*.wasm` file in `directory` as a plugin tool component (in name order;
    /// origin `plugin:FILE`). A missing directory holds no plugins. A plugin that cannot be
    /// loaded (an import the policy does not stub, a bad component or description, a name
    /// collision) fails the build with [`Error::NeededPlugin`] if the policy needs it (a role
    /// lists it or `"*"`, a validator runs it, a `[plugins.NAME]` or `[limits.tools.NAME]`
    /// table names it); otherwise it is left out, never callable, and reported in
    /// [`Runtime::skipped_plugins`] and [`Runtime::warnings`].
    #[must_use]
    pub fn plugin_dir(mut self, directory: impl Into<PathBuf>) -> Self {
        self.plugin_dir = Some(directory.into());
        self
    }

    /// Load `wasm` as the plugin file `file_name` of the plugin directory (`line_count.wasm`),
    /// instead of the bytes the directory holds: what the next start would load once the file
    /// is replaced.
    #[must_use]
    pub fn replace_plugin(mut self, file_name: impl Into<String>, wasm: Vec<u8>) -> Self {
        self.replacements.insert(file_name.into(), wasm);
        self
    }

    /// The limits of every call (default: 30 s, 512 MiB of memory, 1 MiB of output).
    #[must_use]
    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// Keep the audit trail in `state_dir/audit.jsonl`: one record per tool call, one per
    /// refusal, and one per allowed modification, written before the modification happens.
    /// If the state directory lies inside a workspace, no call may modify it.
    #[must_use]
    pub fn audit_dir(mut self, state_dir: impl Into<PathBuf>) -> Self {
        self.audit_dir = Some(state_dir.into());
        self
    }

    /// Link wasmtime-wasi's filesystem directly, without the guard: no policy, no audit of
    /// filesystem decisions, only the preopen's boundary. This is the baseline the benchmark
    /// measures the guard against; it exists only with the `bench-baseline` feature.
    #[cfg(feature = "bench-baseline")]
    #[must_use]
    pub fn without_filesystem_guard(mut self) -> Self {
        self.unguarded = true;
        self
    }

    /// Resolve the host names of components' outbound HTTP requests with `resolver` (for
    /// example the CLI's `--resolve NAME=ADDRESS` entries over the system's resolver). Every
    /// address it returns is still checked against the role's network rules.
    #[must_use]
    pub fn resolver(mut self, resolver: Arc<dyn toolcell_net::Resolve>) -> Self {
        self.resolver = Some(resolver);
        self
    }

    /// Like [`policy`](Self::policy), reading the policy from `path` when the runtime is built.
    #[must_use]
    pub fn policy_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.policy = Some(PolicySource::File(path.into()));
        self
    }
}
