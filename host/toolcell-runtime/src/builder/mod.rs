//! Load time: [`RuntimeBuilder`] compiles or loads every component, checks its imports and its
//! description, links it, reads the policy, and records what the host itself owns.

mod load;
mod skip;

use crate::pages::release_pages;
use load::*;
use skip::{PluginFailures, tool_of_file};
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use toolcell_state::inventory;
use toolcell_types::{Annotations, ToolInfo, ToolName};
use wasmtime::Engine;
use wasmtime::Store;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::WasiCtxBuilder;

use crate::capabilities::filesystem::FsGuard;
use crate::capabilities::{CallContext, CallState};
use crate::error::describe;
use std::sync::Arc;
use toolcell_args::ArgsSchema;

use crate::engine::LoadProgress;
use crate::error::{Error, PinMismatch};
use crate::limits::Limits;
use crate::runtime::{HostOwned, LoadedComponent, LoadedTool, Runtime, ToolKind};
use crate::{adapters, engine, limits, native};
use toolcell_policy::{Policy, PolicyError};
use toolcell_state::content_index::IndexFreshness;
use toolcell_state::sessions::{SessionStore, Spawner};
use toolcell_state::{AuditBackend, AuditLog, LockBackend, LockStore};

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
    text_editor_root: Option<String>,
    /// Further files and directories the embedder trusts (a service's own configuration).
    protected: Vec<PathBuf>,
    /// Plugin files loaded with other bytes than the directory holds (`toolcell tools update`
    /// checking a new build), by file name.
    replacements: BTreeMap<String, Vec<u8>>,
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

    /// Like [`policy`](Self::policy), reading the policy from `path` when the runtime is built.
    #[must_use]
    pub fn policy_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.policy = Some(PolicySource::File(path.into()));
        self
    }

    /// Compile or load every component, check its imports and its description, and link it.
    ///
    /// # Errors
    ///
    /// [`Error::ForbiddenImport`] naming the import, [`Error::Load`],
    /// [`Error::InvalidDescription`], [`Error::DuplicateTool`], [`Error::NeededPlugin`] (a
    /// plugin the policy needs that cannot be loaded), [`Error::Policy`],
    /// [`Error::Cache`] or [`Error::Engine`].
    pub fn build(mut self) -> Result<Runtime, Error> {
        // What any run of this user trusts, whatever this one is configured with.
        let mut host_owned: Vec<HostOwned> = inventory::trusted_directories().iter().map(|path| HostOwned::directory(path)).collect();
        host_owned.extend(inventory::executable().map(|path| HostOwned::new(&path, false)));
        // The names it was started by: the symlinks on their way are protected with them.
        host_owned.extend(inventory::started_by().map(|path| HostOwned::new(&path, false)));
        // What other runs were told to use instead of the defaults, as they recorded it.
        for path in inventory::remembered_locations().into_iter().chain(std::mem::take(&mut self.protected)) {
            let is_directory = std::fs::metadata(&path).is_ok_and(|metadata| metadata.is_dir());
            host_owned.push(HostOwned::new(&path, is_directory));
        }
        if let Some(directory) = self.plugin_dir.take() {
            host_owned.push(HostOwned::directory(&directory));
            for (origin, wasm) in read_plugins(&directory)? {
                let wasm = self.replacements.remove(origin.strip_prefix("plugin:").unwrap_or(&origin)).unwrap_or(wasm);
                self.components.push(ComponentSource { origin, wasm: Cow::Owned(wasm), artifact: None, is_plugin: true });
            }
        }
        for (file, wasm) in std::mem::take(&mut self.replacements) {
            self.components.push(ComponentSource {
                origin: format!("plugin:{file}"),
                wasm: Cow::Owned(wasm),
                artifact: None,
                is_plugin: true,
            });
        }
        if self.limits.memory_bytes > engine::MAX_MEMORY_BYTES {
            return Err(Error::Engine {
                reason: format!(
                    "the memory limit of {} MiB exceeds the most a tool's memory can grow to ({} MiB)",
                    self.limits.memory_bytes >> 20,
                    engine::MAX_MEMORY_BYTES >> 20
                ),
            });
        }
        // The policy's text now: its `stub_imports` decide how components link.
        let policy_text = match self.policy.take() {
            Some(PolicySource::Text { file, text }) => Some((file, text)),
            Some(PolicySource::File(path)) => {
                host_owned.push(HostOwned::new(&path, false));
                let text = std::fs::read_to_string(&path).map_err(|source| Error::PolicyFile { path: path.clone(), source })?;
                // Named by its file name alone: the name reaches agents in refusals, and a
                // host path must not.
                let name = path.file_name().map_or_else(|| "policy.toml".to_owned(), |name| name.to_string_lossy().into_owned());
                Some((name, text))
            }
            None => None,
        };
        let mut stub_rules = match &policy_text {
            Some((file, text)) => toolcell_policy::stub_imports(file, text)?,
            None => BTreeMap::new(),
        };
        let mentions = policy_text.as_ref().map(|(file, text)| toolcell_policy::ToolMentions::read(file, text)).transpose()?;
        let mut failures = PluginFailures { mentions: mentions.as_ref(), skipped: Vec::new() };
        for (tool, patterns) in std::mem::take(&mut self.stub_imports) {
            stub_rules.entry(tool).or_default().extend(patterns);
        }
        let engine = engine::new_engine()?;
        let ticker = limits::EpochTicker::start(&engine)
            .map_err(|error| Error::Engine { reason: format!("cannot start the deadline ticker thread: {error}") })?;
        let linker = Arc::new(crate::capabilities::linker(&engine, !self.unguarded)?);
        let cache = self.cache_dir.as_deref().map(engine::ComponentCache::open).transpose()?;
        if let Some(directory) = &self.cache_dir {
            host_owned.push(HostOwned::directory(directory));
        }
        let mut warnings = Vec::new();
        let mut tools: BTreeMap<String, LoadedTool> = BTreeMap::new();
        let mut loaded = Vec::new();
        // Components load independently (read or compile, authenticate, check imports, link,
        // describe), so they load on every core; they are then taken in their given order.
        let quiet = |_: LoadProgress<'_>| {};
        let progress: &engine::Progress = self.progress.as_deref().unwrap_or(&quiet);
        let linking = Linking { linker: &linker, guarded: !self.unguarded, stub_rules: &stub_rules };
        let prepared = load_all(&self.components, |source| prepare(&engine, &linking, cache.as_ref(), source, progress));
        for (ComponentSource { origin, wasm, artifact, is_plugin }, prepared) in self.components.iter().zip(prepared) {
            let Prepared { code, info, schema, cache: cache_outcome, warning, imports } = match prepared {
                Ok(prepared) => prepared,
                Err(error) if *is_plugin => {
                    failures.fail_or_skip(origin, tool_of_file(origin), error)?;
                    continue;
                }
                Err(error) => return Err(error),
            };
            warnings.extend(warning);
            if let Some(existing) = tools.get(info.name.as_str()) {
                let error = Error::DuplicateTool { name: info.name.to_string(), first: existing.origin.clone(), second: origin.clone() };
                if *is_plugin {
                    failures.fail_or_skip(origin, info.name.as_str(), error)?;
                    continue;
                }
                return Err(error);
            }
            loaded.push(LoadedComponent {
                origin: origin.clone(),
                tool: info.name.clone(),
                cache: cache_outcome,
                sha256: toolcell_state::storage::hex(&<sha2::Sha256 as sha2::Digest>::digest(wasm.as_ref())),
                imports,
            });
            // A built-in's bytes are part of the binary, read once for their hash.
            if let (Some(_), Cow::Borrowed(bytes)) = (artifact, wasm) {
                release_pages(bytes);
            }
            tools.insert(info.name.to_string(), LoadedTool { info, schema, kind: ToolKind::Component(code), origin: origin.clone() });
        }
        // The tools the host implements, and the providers' built-in tools it adapts.
        let host_tools = native::Native::ALL
            .into_iter()
            .map(|native| (native.describe(), ToolKind::Native(native)))
            .chain(adapters::Adapter::ALL.into_iter().map(|adapter| (adapter.describe(), ToolKind::Adapter(adapter))));
        for ((info, schema), kind) in host_tools {
            if let Some(existing) = tools.get(info.name.as_str()) {
                let error =
                    Error::DuplicateTool { name: info.name.to_string(), first: "builtin:host".to_owned(), second: existing.origin.clone() };
                let origin = existing.origin.clone();
                if !origin.starts_with("plugin:") {
                    return Err(error);
                }
                failures.fail_or_skip(&origin, info.name.as_str(), error)?;
                loaded.retain(|component| component.origin != origin);
            }
            tools.insert(info.name.to_string(), LoadedTool { info, schema, kind, origin: "builtin:host".to_owned() });
        }
        warnings.extend(failures.warnings());
        let names: Vec<&str> = tools.keys().map(String::as_str).collect();
        let policy = match policy_text {
            Some((file, text)) => Some(Arc::new(Policy::parse(&file, &text, &names)?)),
            None => None,
        };
        if let Some(policy) = &policy {
            for component in &loaded {
                if let Some(pin) = policy.pin(component.tool.as_str())
                    && pin.sha256 != component.sha256
                {
                    return Err(Error::PinMismatch(Box::new(PinMismatch {
                        tool: component.tool.to_string(),
                        origin: component.origin.clone(),
                        expected: pin.sha256.clone(),
                        actual: component.sha256.clone(),
                        policy: policy.file().to_owned(),
                        line: pin.line,
                    })));
                }
            }
            for tool in tools.keys() {
                if let Some(memory) = policy.limits_for(tool).memory_bytes
                    && memory > engine::MAX_MEMORY_BYTES
                {
                    return Err(Error::Policy(PolicyError {
                        file: policy.file().to_owned(),
                        line: None,
                        reason: format!(
                            "the memory limit of {} MiB for `{tool}` exceeds the most a tool's memory can grow to ({} MiB)",
                            memory >> 20,
                            engine::MAX_MEMORY_BYTES >> 20
                        ),
                    }));
                }
            }
        }
        if self.shared_store.is_some() && self.audit_dir.is_none() {
            return Err(Error::Audit {
                path: PathBuf::new(),
                source: std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "a shared store needs a state directory too: journals, undo records and indexes stay on each host",
                ),
            });
        }
        // The state directory is opened once: created private, mode-checked, its key read.
        let state = self.audit_dir.as_deref().map(toolcell_state::StateDir::open).transpose()?;
        let audit = state.as_ref().map(|state| {
            Arc::new(match &self.shared_store {
                Some((_, backend)) => AuditLog::shared_in(Arc::clone(backend), state),
                None => AuditLog::in_state(state),
            })
        });
        let state_dir = state.as_ref().map(|state| state.path().to_path_buf());
        if let Some(directory) = &state_dir {
            host_owned.push(HostOwned::directory(directory));
        }
        // Journals are authenticated with the state directory's key; without a state directory,
        // the private temporary one gets a key of its own. Calls a crash interrupted are undone
        // workspace by workspace, when a call first opens each (`Runtime::recover`).
        let work = toolcell_state::WorkDir::new(state)?;
        if state_dir.is_none() {
            // The private directory of journals and undo records is the host's too (it lies in
            // the temporary directory, which a workspace may contain).
            host_owned.push(HostOwned::directory(work.path()));
        }
        let journal_key = *work.key();
        let journal = toolcell_state::journal::JournalFile::create(&work.journals(), journal_key)
            .map_err(|source| Error::State { path: work.journals(), source })?;
        let locks = Arc::new(match (&self.shared_store, &state_dir) {
            (Some((backend, _)), _) => LockStore::shared(Arc::clone(backend)),
            (None, Some(directory)) => LockStore::in_directory(directory),
            (None, None) => LockStore::in_memory(),
        });
        let workflow = Arc::new(toolcell_state::workflow::WorkflowShared {
            locks: Arc::clone(&locks),
            sessions: Arc::new(SessionStore::new(work.path())),
            spawner: self.spawner,
            audit: audit.clone(),
        });
        Ok(Runtime {
            engine,
            tools,
            loaded,
            policy,
            host_owned,
            warnings,
            skipped: failures.skipped,
            audit,
            limits: self.limits,
            text_editor_root: self.text_editor_root,
            locks,
            reads: toolcell_state::reads::ReadTracker::new(state_dir.as_deref()),
            undo: toolcell_state::undo::UndoStore::new(work.path()),
            memos: Arc::default(),
            indexes: Arc::new(toolcell_state::content_index::IndexStore::new(
                work.path(),
                self.index_freshness,
                self.build_index_on_first_search,
            )),
            parts: self
                .parts
                .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |cores| u32::try_from(cores.get()).unwrap_or(1)).min(8)),
            workflow,
            bound_roles: std::sync::Mutex::default(),
            journal_key,
            recovered: std::sync::Mutex::default(),
            journal,
            _work: work,
            _ticker: ticker,
        })
    }
}
