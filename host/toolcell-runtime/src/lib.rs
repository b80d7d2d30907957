//! The toolcell host: runs tool components on wasmtime, granting each call the workspace and
//! nothing else.
//!
//! A [`Runtime`] is built once: it compiles (or loads from the on-disk cache) every tool
//! component, refuses components that import anything outside the `tool-component` world of
//! `wit/tool.wit`, asks each for its description, and compiles its argument schema. Each
//! [`Runtime::call`] then validates the arguments, creates a fresh store and instance from a
//! pre-linked `InstancePre` (pooling allocator), preopens the workspace as `.` (the only
//! directory the component can name), captures stdout and stderr, and runs the tool. Nothing
//! survives between calls.
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
//! let outcome = runtime.call(&CallRequest {
//!     workspace: &workspace,
//!     role: "impl",
//!     session_id: "s-1",
//!     tool: "read_file",
//!     args: r#"{"path": "README.md", "limit": 5}"#,
//!     approver: None,
//!     owner: None,
//!     fences: &[],
//! })?;
//! match outcome.result {
//!     Ok(output) => eprintln!("{}", output.text),
//!     Err(error) => eprintln!("{error}"),
//! }
//! # Ok(())
//! # }
//! ```

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use toolcell_policy::{ReadBeforeWrite, ValidatorCheck};
use toolcell_types::{Annotations, ToolError, ToolErrorKind, ToolInfo, ToolName, ToolOutput, escape_control};
use wasmtime::Engine;
use wasmtime::Store;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::{FsPerms, WasiCtxBuilder};

mod audit;
mod beneath;
mod engine;
mod error;
mod guard;
mod imports;
mod journal;
mod limits;
mod locks;
mod native;
mod reads;
mod schema;
mod state;
mod undo;
mod work;

pub use audit::{AUDIT_FILE, AUDIT_HEAD_FILE, AuditLog};
pub use engine::CacheOutcome;
pub use error::{Error, PinMismatch};
pub use guard::{Approver, Denial, FsEvent};
pub use journal::Recovery;
pub use locks::{LOCKS_DIR, LockStore, LockStoreError};
pub use native::{NATIVE_TOOLS, lock_json};
pub use toolcell_locks::{Lock, LockError, LockRequest, Mode as LockMode};
pub use limits::{EPOCH_TICK, Limits};
pub use toolcell_policy::{Access, Effect, Policy, PolicyError};
pub use schema::MAX_ARGS_BYTES;
pub use state::Captured;

use error::describe;
use guard::{AuditSink, FsGuard, Transaction};
use schema::ArgsSchema;
use std::sync::Arc;
use state::{CallContext, CallState, CapturePipe};

/// Host bindings generated from `wit/tool.wit` (world `plugin`; the WASI part of
/// `tool-component` is linked from wasmtime-wasi).
mod bindings {
    wasmtime::component::bindgen!({
        world: "plugin",
        path: "../../wit",
        // The host stops a component that floods the audit trail through `inspect`.
        imports: { "toolcell:tool/context.inspect": trappable },
    });
}

/// How long a component's `describe()` may take at load.
const DESCRIBE_DEADLINE: Duration = Duration::from_secs(10);

/// Bytes of stdout and of stderr kept per call; the rest is counted and dropped.
pub const STDIO_CAPACITY: usize = 64 * 1024;

/// Configures and builds a [`Runtime`].
#[derive(Default)]
pub struct RuntimeBuilder {
    cache_dir: Option<PathBuf>,
    components: Vec<(String, Cow<'static, [u8]>)>,
    policy: Option<PolicySource>,
    audit_dir: Option<PathBuf>,
    unguarded: bool,
    limits: Limits,
    plugin_dir: Option<PathBuf>,
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
        self.components.push((origin.into(), wasm.into()));
        self
    }

    /// Govern every call by the policy in `text` (TOML; `file` names it in errors). It is
    /// compiled when the runtime is built, once the tools' names are known. Without a policy,
    /// only the workspace boundary applies.
    #[must_use]
    pub fn policy(mut self, file: impl Into<String>, text: impl Into<String>) -> Self {
        self.policy = Some(PolicySource::Text {
            file: file.into(),
            text: text.into(),
        });
        self
    }

    /// Load every `*.wasm` file in `directory` as a plugin tool component (in name order;
    /// origin `plugin:FILE`). A missing directory holds no plugins.
    #[must_use]
    pub fn plugin_dir(mut self, directory: impl Into<PathBuf>) -> Self {
        self.plugin_dir = Some(directory.into());
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
    /// [`Error::InvalidDescription`], [`Error::DuplicateTool`], [`Error::Policy`],
    /// [`Error::Cache`] or [`Error::Engine`].
    pub fn build(mut self) -> Result<Runtime, Error> {
        let mut host_owned = Vec::new();
        if let Some(directory) = self.plugin_dir.take() {
            host_owned.push(HostOwned::directory(&directory));
            for (origin, wasm) in read_plugins(&directory)? {
                self.components.push((origin, Cow::Owned(wasm)));
            }
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
        let engine = engine::new_engine()?;
        let ticker = limits::EpochTicker::start(&engine).map_err(|error| Error::Engine {
            reason: format!("cannot start the deadline ticker thread: {error}"),
        })?;
        let linker = state::linker(&engine, !self.unguarded)?;
        let cache = self.cache_dir.as_deref().map(engine::ComponentCache::open).transpose()?;
        if let Some(directory) = &self.cache_dir {
            host_owned.push(HostOwned::directory(directory));
            host_owned.push(HostOwned {
                path: canonical_lenient(&directory.join(engine::CACHE_KEY_FILE)),
                is_directory: false,
                hidden: true,
            });
        }
        let mut warnings = Vec::new();
        let mut tools: BTreeMap<String, LoadedTool> = BTreeMap::new();
        let mut loaded = Vec::new();
        for (origin, wasm) in &self.components {
            let (component, cache_outcome) = match &cache {
                Some(cache) => {
                    let (component, outcome, warning) = cache.load(&engine, origin, wasm)?;
                    warnings.extend(warning);
                    (component, outcome)
                }
                None => (engine::compile(&engine, origin, wasm)?, CacheOutcome::Compiled),
            };
            imports::check(&engine, origin, &component)?;
            let load_error = |error: wasmtime::Error| Error::Load {
                origin: origin.clone(),
                reason: describe(&error),
            };
            let instance_pre = linker.instantiate_pre(&component).map_err(load_error)?;
            let pre = bindings::PluginPre::new(instance_pre).map_err(load_error)?;
            let (info, schema) = describe_tool(&engine, &pre, origin)?;
            if let Some(existing) = tools.get(info.name.as_str()) {
                return Err(Error::DuplicateTool {
                    name: info.name.to_string(),
                    first: existing.origin.clone(),
                    second: origin.clone(),
                });
            }
            loaded.push(LoadedComponent {
                origin: origin.clone(),
                tool: info.name.clone(),
                cache: cache_outcome,
                sha256: hex(&<sha2::Sha256 as sha2::Digest>::digest(wasm.as_ref())),
            });
            tools.insert(
                info.name.to_string(),
                LoadedTool {
                    info,
                    schema,
                    kind: ToolKind::Component(pre),
                    origin: origin.clone(),
                },
            );
        }
        for native in native::Native::ALL {
            let (info, schema) = native.describe();
            if let Some(existing) = tools.get(info.name.as_str()) {
                return Err(Error::DuplicateTool {
                    name: info.name.to_string(),
                    first: "builtin:host".to_owned(),
                    second: existing.origin.clone(),
                });
            }
            tools.insert(
                info.name.to_string(),
                LoadedTool {
                    info,
                    schema,
                    kind: ToolKind::Native(native),
                    origin: "builtin:host".to_owned(),
                },
            );
        }
        let names: Vec<&str> = tools.keys().map(String::as_str).collect();
        let policy = match self.policy {
            Some(PolicySource::Text { file, text }) => Some(Arc::new(Policy::parse(&file, &text, &names)?)),
            Some(PolicySource::File(path)) => {
                host_owned.push(HostOwned {
                    path: canonical_lenient(&path),
                    is_directory: false,
                    hidden: false,
                });
                let text = std::fs::read_to_string(&path).map_err(|source| Error::PolicyFile {
                    path: path.clone(),
                    source,
                })?;
                // Named by its file name alone: the name reaches agents in refusals, and a
                // host path must not.
                let name = path.file_name().map_or_else(|| "policy.toml".to_owned(), |name| name.to_string_lossy().into_owned());
                Some(Arc::new(Policy::parse(&name, &text, &names)?))
            }
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
        let audit = self.audit_dir.as_deref().map(AuditLog::open).transpose()?.map(Arc::new);
        let state_dir = audit.as_ref().map(|log| log.directory().to_path_buf());
        if let Some(directory) = &state_dir {
            host_owned.push(HostOwned::directory(directory));
        }
        let work = work::WorkDir::new(state_dir.as_deref()).map_err(|source| Error::Audit {
            path: state_dir.clone().unwrap_or_else(std::env::temp_dir),
            source,
        })?;
        if state_dir.is_none() {
            // The private directory of journals and undo records is the host's too (it lies in
            // the temporary directory, which a workspace may contain).
            host_owned.push(HostOwned::directory(work.path()));
        }
        // Calls a crash interrupted are undone before anything else runs.
        let recovered = journal::recover(&work.journals());
        if let Some(log) = &audit {
            let records: Vec<_> = recovered
                .iter()
                .map(|recovery| {
                    toolcell_audit::Record::recovery(
                        &guard::now(),
                        &recovery.session,
                        &recovery.call_id,
                        recovery.steps as u64,
                        recovery.error.as_deref(),
                    )
                })
                .collect();
            if !records.is_empty() {
                log.append(&records).map_err(|source| Error::Audit {
                    path: log.path().to_path_buf(),
                    source,
                })?;
            }
        }
        let locks = Arc::new(match &state_dir {
            Some(directory) => LockStore::in_directory(directory),
            None => LockStore::in_memory(),
        });
        Ok(Runtime {
            engine,
            tools,
            loaded,
            policy,
            host_owned,
            warnings,
            audit,
            limits: self.limits,
            locks,
            reads: reads::ReadTracker::new(state_dir.as_deref()),
            undo: undo::UndoStore::new(work.path()),
            recovered,
            work,
            _ticker: ticker,
        })
    }
}

/// A location the host reads and trusts.
#[derive(Debug)]
struct HostOwned {
    /// Canonical (as far as it exists).
    path: PathBuf,
    is_directory: bool,
    /// Hidden from tools altogether, reads included (a secret), not only kept unchanged.
    hidden: bool,
}

impl HostOwned {
    fn directory(path: &Path) -> Self {
        HostOwned {
            path: canonical_lenient(path),
            is_directory: true,
            hidden: false,
        }
    }
}

/// `path` with its longest existing ancestor canonicalized and the missing rest appended: a
/// location that does not exist yet (a plugin directory) must be protected where it would be
/// created.
fn canonical_lenient(path: &Path) -> PathBuf {
    let Ok(absolute) = std::path::absolute(path) else {
        return path.to_path_buf();
    };
    let mut missing = Vec::new();
    let mut current = absolute.as_path();
    loop {
        if let Ok(mut canonical) = std::fs::canonicalize(current) {
            canonical.extend(missing.iter().rev());
            return canonical;
        }
        match (current.file_name(), current.parent()) {
            (Some(name), Some(parent)) => {
                missing.push(name);
                current = parent;
            }
            _ => return absolute,
        }
    }
}

/// The `*.wasm` files of a plugin directory, in name order, as `(origin, bytes)`.
fn read_plugins(directory: &Path) -> Result<Vec<(String, Vec<u8>)>, Error> {
    let error = |path: &Path| {
        let path = path.to_path_buf();
        move |source| Error::Plugins { path, source }
    };
    let entries = match std::fs::read_dir(directory) {
        Ok(entries) => entries,
        Err(source) if source.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => return Err(Error::Plugins { path: directory.to_path_buf(), source }),
    };
    // Whoever can write the directory chooses the code toolcell runs.
    engine::check_private(directory, 0o022, "the plugin directory")?;
    let mut paths: Vec<PathBuf> = entries
        .map(|entry| entry.map(|entry| entry.path()))
        .collect::<Result<_, _>>()
        .map_err(error(directory))?;
    paths.retain(|path| path.extension().is_some_and(|extension| extension == "wasm"));
    paths.sort();
    paths
        .into_iter()
        .map(|path| {
            let name = path.file_name().map(|name| name.to_string_lossy().into_owned()).unwrap_or_default();
            std::fs::read(&path).map(|wasm| (format!("plugin:{name}"), wasm)).map_err(error(&path))
        })
        .collect()
}

/// Ask a freshly loaded component to describe itself, and check what it says. The instance
/// gets no preopened directory: `describe` must not touch the filesystem.
fn describe_tool(
    engine: &Engine,
    pre: &bindings::PluginPre<CallState>,
    origin: &str,
) -> Result<(ToolInfo, ArgsSchema), Error> {
    let state = CallState {
        wasi: WasiCtxBuilder::new().build(),
        table: ResourceTable::new(),
        context: CallContext::default(),
        guard: FsGuard::new(None, "", None, None),
        limiter: limits::MemoryLimiter {
            max_bytes: engine::MAX_MEMORY_BYTES,
            refused: false,
        },
        deadline: Instant::now() + DESCRIBE_DEADLINE,
    };
    let mut store = Store::new(engine, state);
    store.limiter(|state| &mut state.limiter);
    // `describe` gets a fixed deadline: it must answer at once.
    store.set_epoch_deadline(Limits { deadline: DESCRIBE_DEADLINE, ..Limits::default() }.deadline_ticks());
    store.epoch_deadline_trap();
    let load_error = |error: wasmtime::Error| Error::Load {
        origin: origin.to_owned(),
        reason: format!("`describe()` failed: {}", describe(&error)),
    };
    let plugin = pre.instantiate(&mut store).map_err(load_error)?;
    let info = plugin.toolcell_tool_tool().call_describe(&mut store).map_err(load_error)?;
    let invalid = |reason: String| Error::InvalidDescription {
        origin: origin.to_owned(),
        reason,
    };
    let name = ToolName::new(&info.name).map_err(|error| invalid(error.to_string()))?;
    if info.description.trim().is_empty() {
        return Err(invalid(format!("`{name}` has an empty description; agents need one to know when to use it")));
    }
    let (schema, input_schema) = ArgsSchema::compile(&info.input_schema).map_err(invalid)?;
    let info = ToolInfo {
        name,
        title: info.title,
        description: info.description,
        input_schema,
        annotations: Annotations {
            read_only: info.annotations.read_only,
            destructive: info.annotations.destructive,
            idempotent: info.annotations.idempotent,
        },
    };
    Ok((info, schema))
}

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
}

struct LoadedTool {
    info: ToolInfo,
    schema: ArgsSchema,
    kind: ToolKind,
    origin: String,
}

enum ToolKind {
    /// A tool component.
    Component(bindings::PluginPre<CallState>),
    /// A tool the host itself implements (undo, locks): it needs host state no component has.
    Native(native::Native),
}

/// Loaded tool components, ready to run calls. Cheap to share between threads.
pub struct Runtime {
    engine: Engine,
    tools: BTreeMap<String, LoadedTool>,
    loaded: Vec<LoadedComponent>,
    policy: Option<Arc<Policy>>,
    /// What the host itself reads and trusts (state directory, cache and its key, plugin
    /// directory, policy file), canonical: no call may change it.
    host_owned: Vec<HostOwned>,
    /// What went wrong at load that the operator should know (a cached artifact rejected).
    warnings: Vec<String>,
    audit: Option<Arc<AuditLog>>,
    limits: Limits,
    locks: Arc<LockStore>,
    reads: reads::ReadTracker,
    undo: undo::UndoStore,
    /// Journals rolled back at start-up.
    recovered: Vec<Recovery>,
    /// The state directory, or a private temporary directory for journals and undo.
    work: work::WorkDir,
    /// Advances the epoch for deadlines; stops when the runtime is dropped.
    _ticker: limits::EpochTicker,
}

/// The workspace a call may touch: a directory on the host, granted to the component as its
/// only preopen, named `.`.
#[derive(Debug)]
pub struct Workspace {
    root: PathBuf,
    /// The workspace directory, opened once; the guard resolves symlinks through it.
    directory: cap_std::fs::Dir,
}

impl Workspace {
    /// Resolve `path` (symlinks included) and check that it is a directory.
    ///
    /// # Errors
    ///
    /// [`Error::Workspace`] if it does not exist or is not a directory.
    pub fn open(path: &Path) -> Result<Self, Error> {
        let workspace_error = |reason: String| Error::Workspace {
            path: path.to_path_buf(),
            reason,
        };
        let root = std::fs::canonicalize(path).map_err(|error| {
            workspace_error(match error.kind() {
                std::io::ErrorKind::NotFound => "it does not exist; create it or pass an existing directory".to_owned(),
                _ => error.to_string(),
            })
        })?;
        if !root.is_dir() {
            return Err(workspace_error("it is not a directory".to_owned()));
        }
        let directory = cap_std::fs::Dir::open_ambient_dir(&root, cap_std::ambient_authority())
            .map_err(|error| workspace_error(format!("it cannot be opened: {error}")))?;
        Ok(Workspace { root, directory })
    }

    /// Create the directory `path` (and its parents) if missing, then [`open`](Self::open) it.
    ///
    /// # Errors
    ///
    /// [`Error::Workspace`] if it cannot be created or is not a directory.
    pub fn create(path: &Path) -> Result<Self, Error> {
        std::fs::create_dir_all(path).map_err(|error| Error::Workspace {
            path: path.to_path_buf(),
            reason: format!("it cannot be created: {error}"),
        })?;
        Self::open(path)
    }

    /// The canonical host path of the workspace root. For the operator only: never shown to
    /// a component or an agent.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The canonical form of a lock pattern given relative to the workspace: a glob is
    /// normalised lexically (`./src//**` is `src/**`); a literal path is resolved through its
    /// symlinks, as the guard resolves the paths it judges.
    ///
    /// # Errors
    ///
    /// [`Error::Lock`] if the pattern leads outside the workspace.
    pub fn lock_pattern(&self, pattern: &str) -> Result<String, Error> {
        let outside = || {
            Error::Lock(LockStoreError::Lock(LockError::Pattern {
                pattern: pattern.escape_default().to_string(),
                reason: "it leads outside the workspace; lock paths inside it".to_owned(),
            }))
        };
        if pattern.contains(['*', '?', '[', '{']) {
            return toolcell_policy::join_lexically(".", pattern).ok_or_else(outside);
        }
        guard::canonical(&self.directory, pattern).ok_or_else(outside)
    }

    /// A handle of its own on the workspace directory, for one call of `tool`.
    fn reopen(&self, tool: &str) -> Result<cap_std::fs::Dir, Error> {
        self.directory.try_clone().map_err(|error| Error::Call {
            tool: tool.to_owned(),
            reason: format!("cannot reopen the workspace: {error}"),
        })
    }
}

/// One tool call.
#[derive(Clone, Copy)]
pub struct CallRequest<'a> {
    /// The workspace the call may touch.
    pub workspace: &'a Workspace,
    /// The caller's role.
    pub role: &'a str,
    /// The caller's session id.
    pub session_id: &'a str,
    /// The tool's name.
    pub tool: &'a str,
    /// The arguments, a JSON object as text.
    pub args: &'a str,
    /// Asked about accesses the policy marks `ask`; without one they are refused.
    pub approver: Option<&'a Arc<dyn Approver>>,
    /// Who the call writes for, as the lock table knows it (a chain or task id); `None` is
    /// the session itself.
    pub owner: Option<&'a str>,
    /// The fencing tokens of the locks the caller holds: a token whose lease lapsed refuses
    /// the writes it covers.
    pub fences: &'a [u64],
}

impl CallRequest<'_> {
    /// The lock owner: [`owner`](Self::owner), or the session id.
    pub fn lock_owner(&self) -> &str {
        self.owner.unwrap_or(self.session_id)
    }
}

/// What a call produced.
#[derive(Debug, Clone)]
pub struct CallOutcome {
    /// The call's unique id.
    pub call_id: String,
    /// The tool's result, or the error the agent sees (a bad argument, a tool error, or a
    /// crashed component reported as `failed`).
    pub result: Result<ToolOutput, ToolError>,
    /// Notes the tool attached for the audit trail.
    pub notes: Vec<String>,
    /// What the component wrote to stdout.
    pub stdout: Captured,
    /// What the component wrote to stderr.
    pub stderr: Captured,
    /// Whether the component trapped (crashed); `result` is then a `failed` error.
    pub trapped: bool,
    /// Whether the role may not call the tool, so no component ran.
    pub gated: bool,
    /// The filesystem accesses the guard allowed, in order (at most 10,000 are kept).
    pub events: Vec<FsEvent>,
    /// Allowed accesses beyond those kept in `events`.
    pub unrecorded_events: u64,
    /// The filesystem accesses the guard refused, with their messages. If there are any,
    /// `result` is a `denied` (or `conflict`) error carrying them, whatever the component
    /// returned.
    pub denials: Vec<Denial>,
    /// Warnings for the agent (also appended to a successful result's text).
    pub warnings: Vec<String>,
    /// Changes undone because the call failed (0 if it succeeded or changed nothing).
    pub rolled_back: usize,
    /// Wall-clock time of the whole call.
    pub duration: Duration,
}

impl CallOutcome {
    /// The outcome of a call `call_id` that has not run yet (its result is a `failed` error
    /// until something sets it).
    pub fn new(call_id: String) -> Self {
        CallOutcome {
            call_id,
            result: Err(ToolError::new(ToolErrorKind::Failed, "the call did not run")),
            notes: Vec::new(),
            stdout: Captured::default(),
            stderr: Captured::default(),
            trapped: false,
            gated: false,
            events: Vec::new(),
            unrecorded_events: 0,
            denials: Vec::new(),
            warnings: Vec::new(),
            rolled_back: 0,
            duration: Duration::ZERO,
        }
    }
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

    /// The policy governing calls, if any.
    pub fn policy(&self) -> Option<&Policy> {
        self.policy.as_deref()
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

    /// Acquire (or renew) a lock in `workspace`, and record it in the audit trail.
    ///
    /// # Errors
    ///
    /// [`Error::Lock`] naming the conflicting lock, or what is wrong with the request.
    pub fn acquire_lock(&self, workspace: &Workspace, request: &LockRequest) -> Result<Lock, Error> {
        let lock = self.locks.acquire(workspace.root(), request)?;
        self.audit_lock("acquired", &lock);
        Ok(lock)
    }

    /// Release the lock with token `fence` held by `owner` in `workspace`, and record it.
    ///
    /// # Errors
    ///
    /// [`Error::Lock`] if `owner` holds no such lock.
    pub fn release_lock(&self, workspace: &Workspace, fence: u64, owner: &str) -> Result<Lock, Error> {
        let lock = self.locks.release(workspace.root(), fence, owner)?;
        self.audit_lock("released", &lock);
        Ok(lock)
    }

    fn audit_lock(&self, event: &str, lock: &Lock) {
        if let Some(log) = &self.audit {
            let record = toolcell_audit::Record::lock(&guard::now(), &lock.session, &lock.owner, event, &lock.pattern, lock.mode.as_str(), lock.fence);
            let _ = log.append(&[record]);
        }
    }

    /// Calls interrupted by a crash that this runtime rolled back when it started.
    pub fn recovered(&self) -> &[Recovery] {
        &self.recovered
    }

    /// What the operator should know about the load: each cached artifact that failed
    /// authentication and was compiled again.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Every component loaded, in load order, and whether each came from the cache.
    pub fn loaded(&self) -> &[LoadedComponent] {
        &self.loaded
    }

    /// Run one tool call in a fresh instance.
    ///
    /// # Errors
    ///
    /// [`Error::UnknownTool`] for a tool that is not loaded; [`Error::Call`] if the host
    /// cannot set up the instance. Everything the tool itself gets wrong, including a trap, is
    /// in [`CallOutcome::result`].
    pub fn call(&self, request: &CallRequest<'_>) -> Result<CallOutcome, Error> {
        let started = Instant::now();
        let tool = self.tools.get(request.tool).ok_or_else(|| Error::UnknownTool {
            name: request.tool.escape_default().to_string(),
            available: self.tools.keys().map(String::as_str).collect::<Vec<_>>().join(", "),
        })?;
        let call_id = new_call_id();
        let mut outcome = CallOutcome::new(call_id.clone());
        if let Some(policy) = &self.policy {
            let role = policy.role(request.role).ok_or_else(|| Error::UnknownRole {
                role: request.role.escape_default().to_string(),
                roles: policy.roles().map(|role| role.name()).collect::<Vec<_>>().join(", "),
            })?;
            if !role.may_call(request.tool) {
                outcome.gated = true;
                let tools = role.tools().map(|tools| tools.join(", ")).unwrap_or_default();
                outcome.result = Err(ToolError::new(
                    ToolErrorKind::Denied,
                    format!(
                        "role `{}` may not call `{}`; its tools are: {tools}. Use one of those, or ask the operator for a role that has `{}`.",
                        role.name(),
                        request.tool,
                        request.tool
                    ),
                ));
                return Ok(self.finish(request, outcome, started));
            }
        }
        if let Err(error) = tool.schema.check(request.tool, request.args) {
            outcome.result = Err(error);
            return Ok(self.finish(request, outcome, started));
        }

        let directory = request.workspace.reopen(request.tool)?;
        let read_before_write = self.policy.as_ref().map_or(ReadBeforeWrite::Off, |policy| policy.read_before_write());
        let seen = if read_before_write == ReadBeforeWrite::Off {
            Arc::default()
        } else {
            self.reads.load(request.session_id, request.workspace.root())
        };
        let transaction = Transaction::new(
            Arc::clone(&self.locks),
            request.lock_owner().to_owned(),
            request.fences.to_vec(),
            seen,
            read_before_write,
            self.work.journals(),
            request.workspace.root().to_path_buf(),
            request.session_id.to_owned(),
            call_id.clone(),
        );
        let guard = FsGuard::new(self.policy.clone(), request.role, request.approver.cloned(), Some(directory))
            .with_audit(self.audit_sink(request, &call_id), self.host_paths_inside(request.workspace)?)
            .with_transaction(transaction);
        let mut guard = match &tool.kind {
            ToolKind::Component(pre) => {
                let context = CallContext {
                    role: request.role.to_owned(),
                    session_id: request.session_id.to_owned(),
                    call_id,
                    ..CallContext::default()
                };
                self.run_component(pre, request.tool, request.args, request.workspace, context, guard, &mut outcome)?
            }
            ToolKind::Native(native) => {
                let mut guard = guard;
                outcome.result = native.run(&mut native::NativeCall {
                    request,
                    guard: &mut guard,
                    locks: &self.locks,
                    undo: &self.undo,
                    audit: self.audit.as_deref(),
                });
                guard
            }
        };
        // Refusals past the call's budget of audit records stopped the component.
        guard.record_repeats();
        if let Some(message) = guard.flooded() {
            outcome.trapped = false;
            outcome.result = Err(ToolError::new(ToolErrorKind::TooLarge, message));
        }
        outcome.events = std::mem::take(&mut guard.events);
        outcome.unrecorded_events = guard.unrecorded_events;
        outcome.denials = std::mem::take(&mut guard.denials);
        if !outcome.denials.is_empty() {
            if tool.info.annotations.read_only && outcome.result.is_ok() && only_reads_refused(&outcome.denials) {
                // A read-only tool that handled the refusal of some reads (a multi-file read, a
                // search) keeps its result; the host states the refusals itself, so the agent
                // learns of them whatever the component made of them.
                for message in distinct_messages(&outcome.denials) {
                    guard.warnings.push(format!("Refused by the host: {message}"));
                }
            } else if guard.flooded().is_none() {
                outcome.result = Err(denied_result(&outcome.denials, &outcome.result));
            }
        }
        if guard.audit_failures > 0 {
            outcome.result = Err(ToolError::new(
                ToolErrorKind::Failed,
                "the audit trail cannot be written, so this call's result is withheld; tell the operator",
            ));
        }
        self.settle(request, &mut outcome, guard);
        Ok(self.finish(request, outcome, started))
    }

    /// Instantiate `pre` in a fresh store with `guard` on its filesystem and run one call.
    /// Fills the result, the trap flag, notes and stdio of `outcome`; returns the guard.
    #[expect(clippy::too_many_arguments, reason = "the parts of one call, borrowed from different owners")]
    fn run_component(
        &self,
        pre: &bindings::PluginPre<CallState>,
        tool: &str,
        args: &str,
        workspace: &Workspace,
        context: CallContext,
        guard: FsGuard,
        outcome: &mut CallOutcome,
    ) -> Result<FsGuard, Error> {
        let host_error = |error: wasmtime::Error| Error::Call {
            tool: tool.to_owned(),
            reason: describe(&error),
        };
        let stdout = CapturePipe::new(STDIO_CAPACITY);
        let stderr = CapturePipe::new(STDIO_CAPACITY);
        let mut wasi = WasiCtxBuilder::new();
        // The host runs calls on plain threads, so blocking filesystem calls run in place
        // instead of hopping to a worker thread.
        wasi.allow_blocking_current_thread(guard::BLOCKING_IN_PLACE)
            .stdout(stdout.clone())
            .stderr(stderr.clone());
        wasi.preopened_dir(workspace.root(), ".", FsPerms::ReadWrite).map_err(host_error)?;
        let limits = self.limits_for(tool);
        let mut guard = guard;
        guard.set_budget(tool, limits.host_calls, limits.open_files, limits.audit_records);
        let state = CallState {
            wasi: wasi.build(),
            table: ResourceTable::new(),
            context,
            guard,
            limiter: limits::MemoryLimiter {
                max_bytes: limits.memory_bytes,
                refused: false,
            },
            deadline: Instant::now() + limits.deadline,
        };
        let mut store = Store::new(&self.engine, state);
        store.limiter(|state| &mut state.limiter);
        // The ticker's phase is arbitrary, so the first tick may come at once: one tick more
        // gives the call at least its deadline, and stops it within one tick after.
        store.set_epoch_deadline(limits.deadline_ticks() + 1);
        store.epoch_deadline_trap();
        let plugin = pre.instantiate(&mut store).map_err(host_error)?;
        let returned = plugin.toolcell_tool_tool().call_call(&mut store, args);
        let memory_refused = store.data().limiter.refused;
        // Waits in the host end at the deadline (plus a tick) and return to the component; one
        // that then returns before the next epoch check still ran past its deadline.
        let overran = Instant::now() >= store.data().deadline + EPOCH_TICK;
        outcome.result = match returned {
            Ok(_) if overran => {
                outcome.trapped = true;
                Err(self.deadline_error(tool, &limits))
            }
            Ok(Ok(output)) => convert_output(tool, output, limits.output_bytes),
            Ok(Err(_)) | Err(_) if memory_refused => {
                outcome.trapped = returned.is_err();
                Err(ToolError::new(
                    ToolErrorKind::TooLarge,
                    format!(
                        "`{tool}` needed more than its memory limit of {} MiB and was stopped; nothing it returned is used. Give it less to do at once (the operator can raise `memory_mib` under `[limits]` or `[limits.tools.{tool}]` in the policy).",
                        limits.memory_bytes >> 20
                    ),
                ))
            }
            Ok(Err(error)) => Err(convert_error(error)),
            Err(trap) if trap.downcast_ref::<wasmtime::Trap>() == Some(&wasmtime::Trap::Interrupt) => {
                outcome.trapped = true;
                Err(self.deadline_error(tool, &limits))
            }
            Err(trap) => {
                outcome.trapped = true;
                Err(ToolError::new(
                    ToolErrorKind::Failed,
                    format!(
                        "the tool `{tool}` crashed ({}); nothing it returned is used. This is a bug in the tool; try another approach or report it.",
                        trap.root_cause()
                    ),
                ))
            }
        };
        let state = store.into_data();
        outcome.notes = state.context.notes;
        outcome.stdout = stdout.take();
        outcome.stderr = stderr.take();
        Ok(state.guard)
    }

    fn deadline_error(&self, tool: &str, limits: &Limits) -> ToolError {
        ToolError::new(
            ToolErrorKind::Failed,
            format!(
                "`{tool}` ran past its deadline of {:.1} s and was stopped; nothing it returned is used. Give it less to do at once (the operator can raise `deadline_ms` under `[limits]` or `[limits.tools.{tool}]` in the policy).",
                limits.deadline.as_secs_f64()
            ),
        )
    }

    /// The limits of a call of `tool`: the runtime's, with the policy's over them.
    fn limits_for(&self, tool: &str) -> Limits {
        let Some(policy) = &self.policy else {
            return self.limits;
        };
        let set = policy.limits_for(tool);
        Limits {
            deadline: set.deadline.unwrap_or(self.limits.deadline),
            memory_bytes: set.memory_bytes.unwrap_or(self.limits.memory_bytes),
            output_bytes: set.output_bytes.unwrap_or(self.limits.output_bytes),
            host_calls: set.host_calls.unwrap_or(self.limits.host_calls),
            open_files: set.open_files.unwrap_or(self.limits.open_files),
            audit_records: set.audit_records.unwrap_or(self.limits.audit_records),
        }
    }

    fn audit_sink(&self, request: &CallRequest<'_>, call_id: &str) -> Option<AuditSink> {
        self.audit.as_ref().map(|log| AuditSink {
            log: Arc::clone(log),
            session: request.session_id.to_owned(),
            tool: request.tool.to_owned(),
            call_id: call_id.to_owned(),
        })
    }

    /// End the call's transaction: validate what it wrote, then keep its changes (and what
    /// `undo_edit` needs) if it succeeded, or roll them all back if it did not; record what the
    /// session read and wrote.
    fn settle(&self, request: &CallRequest<'_>, outcome: &mut CallOutcome, mut guard: FsGuard) {
        let Some(mut transaction) = guard.transaction.take() else {
            return;
        };
        if outcome.result.is_ok() {
            // Whole-file rewrites go in place before validators read them.
            guard.transaction = Some(transaction);
            if let Err(failure) = guard.land_all() {
                outcome.result = Err(ToolError::new(
                    ToolErrorKind::Failed,
                    format!("the call's writes could not be put in place ({failure})"),
                ));
            }
            let Some(taken) = guard.transaction.take() else {
                return;
            };
            transaction = taken;
        }
        let Some(root) = guard.root() else {
            return;
        };
        let journal = transaction.journal.take();
        if outcome.result.is_ok()
            && journal.is_some()
            && let Err(error) = self.validate(request, root, &transaction.modified)
        {
            outcome.result = Err(error);
        }
        let mut modified: &[String] = &[];
        match (outcome.result.is_ok(), journal) {
            (true, Some(journal)) => {
                let (steps, directory) = journal.commit();
                if request.tool != native::UNDO_EDIT {
                    // Without the undo record the change still stands; `undo_edit` will say
                    // there is nothing to undo.
                    let _ = self.undo.record(
                        request.session_id,
                        request.workspace.root(),
                        root,
                        &outcome.call_id,
                        &steps,
                        &directory,
                    );
                }
                let _ = std::fs::remove_dir_all(&directory);
                modified = &transaction.modified;
            }
            (false, Some(journal)) => match journal.rollback(root) {
                Ok(steps) => {
                    outcome.rolled_back = steps;
                    if let Err(error) = &mut outcome.result {
                        error.message.push_str("\n(No file was changed: every change this call made was rolled back.)");
                    }
                }
                Err(failure) => {
                    outcome.result = Err(ToolError::new(
                        ToolErrorKind::Failed,
                        format!(
                            "the call failed and its changes could not all be rolled back ({failure}); the host will finish the rollback when it next starts. Tell the operator."
                        ),
                    ));
                }
            },
            (_, None) => {}
        }
        if transaction.read_before_write != ReadBeforeWrite::Off {
            // Best effort: without the record, the next write only warns or asks to read again.
            let _ = self.reads.update(
                request.session_id,
                request.workspace.root(),
                root,
                &transaction.seen,
                transaction.tracked_reads(),
                modified,
            );
        }
        outcome.warnings = std::mem::take(&mut guard.warnings);
        if let Ok(output) = &mut outcome.result
            && !outcome.warnings.is_empty()
        {
            output.text.push_str("\n\n");
            output.text.push_str(&outcome.warnings.join("\n"));
        }
    }

    /// Run the policy's validators on every file the call wrote.
    fn validate(&self, request: &CallRequest<'_>, root: &cap_std::fs::Dir, modified: &[String]) -> Result<(), ToolError> {
        let Some(policy) = &self.policy else {
            return Ok(());
        };
        for path in modified {
            let applicable: Vec<_> = policy.validators().iter().filter(|validator| validator.applies_to(path)).collect();
            if applicable.is_empty() || !root.symlink_metadata(path).is_ok_and(|metadata| metadata.is_file()) {
                continue;
            }
            for validator in applicable {
                let failure = match validator.check() {
                    ValidatorCheck::Json => root
                        .read(path)
                        .map_err(|error| error.to_string())
                        .and_then(|bytes| serde_json::from_slice::<serde::de::IgnoredAny>(&bytes).map(drop).map_err(|error| format!("it is not valid JSON: {error}"))),
                    ValidatorCheck::Toml => root.read_to_string(path).map_err(|error| error.to_string()).and_then(|text| {
                        toml::from_str::<serde::de::IgnoredAny>(&text)
                            .map(drop)
                            .map_err(|error| format!("it is not valid TOML: {}", error.message().trim()))
                    }),
                    ValidatorCheck::Tool(tool) => self.run_validator(tool, path, request),
                };
                if let Err(reason) = failure {
                    return Err(ToolError::new(
                        ToolErrorKind::InvalidArgs,
                        format!(
                            "`{}` failed the validator `{}` ({} line {}): {reason}. Fix the content and write it again.",
                            escape_control(path),
                            validator.id(),
                            policy.file(),
                            validator.line()
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Call the validator component `tool` on `path`, read-only and within the workspace.
    fn run_validator(&self, tool: &str, path: &str, request: &CallRequest<'_>) -> Result<(), String> {
        let Some(LoadedTool { kind: ToolKind::Component(pre), .. }) = self.tools.get(tool) else {
            return Err(format!("the validator tool `{tool}` is not a loaded component"));
        };
        let directory = request.workspace.reopen(tool).map_err(|error| error.to_string())?;
        let guard = FsGuard::new(None, request.role, None, Some(directory));
        let context = CallContext {
            role: request.role.to_owned(),
            session_id: request.session_id.to_owned(),
            call_id: new_call_id(),
            ..CallContext::default()
        };
        let args = serde_json::json!({ "path": path }).to_string();
        let mut outcome = CallOutcome::new(context.call_id.clone());
        let guard = self
            .run_component(pre, tool, &args, request.workspace, context, guard, &mut outcome)
            .map_err(|error| error.to_string())?;
        if let Some(denial) = guard.denials.first() {
            return Err(format!("the validator `{tool}` was refused: {}", denial.message));
        }
        outcome.result.map(drop).map_err(|error| error.message)
    }

    /// The host-owned locations inside `workspace`, workspace-relative, each with whether the
    /// guard hides it altogether (the cache key) or only refuses to change it.
    ///
    /// # Errors
    ///
    /// [`Error::Insecure`] if the workspace lies inside a host-owned directory: every write a
    /// tool made would then be a write to the host's own state.
    fn host_paths_inside(&self, workspace: &Workspace) -> Result<Vec<(String, bool)>, Error> {
        let mut inside = Vec::new();
        for owned in &self.host_owned {
            if owned.is_directory && workspace.root().starts_with(&owned.path) {
                return Err(Error::Insecure {
                    path: workspace.root().to_path_buf(),
                    reason: format!(
                        "the workspace lies inside toolcell's own directory `{}`, which tools must not change; use a workspace outside it",
                        owned.path.display()
                    ),
                });
            }
            if let Ok(relative) = owned.path.strip_prefix(workspace.root()) {
                inside.push((relative.to_string_lossy().into_owned(), owned.hidden));
            }
        }
        Ok(inside)
    }

    /// Write the call's record and stamp its duration. A call whose record cannot be written
    /// does not return its result.
    fn finish(&self, request: &CallRequest<'_>, mut outcome: CallOutcome, started: Instant) -> CallOutcome {
        outcome.duration = started.elapsed();
        let Some(log) = &self.audit else {
            return outcome;
        };
        let status = match (&outcome.result, outcome.trapped, outcome.gated) {
            (_, true, _) => "trapped".to_owned(),
            (_, _, true) => "gated".to_owned(),
            (Ok(_), _, _) => "ok".to_owned(),
            (Err(error), _, _) => error.kind.as_str().to_owned(),
        };
        let mut record = toolcell_audit::Record::call(
            &guard::now(),
            request.session_id,
            request.role,
            request.tool,
            &outcome.call_id,
            &status,
        );
        let reads = outcome.events.iter().filter(|event| matches!(event.access, Access::Read | Access::List)).count();
        record.reads = Some(reads as u64 + outcome.unrecorded_events);
        record.duration_us = Some(u64::try_from(outcome.duration.as_micros()).unwrap_or(u64::MAX));
        record.notes.clone_from(&outcome.notes);
        match &outcome.result {
            Ok(output) => record.bytes = Some(output.text.len() as u64),
            Err(error) => record.message = Some(error.message.chars().take(1024).collect()),
        }
        if log.append(&[record]).is_err() {
            outcome.result = Err(ToolError::new(
                ToolErrorKind::Failed,
                "the audit trail cannot be written, so this call's result is withheld; tell the operator",
            ));
        }
        outcome
    }
}

/// Refusals listed in one result, at most.
const MAX_LISTED_DENIALS: usize = 5;

/// The refusals' messages, each once, in order.
fn distinct_messages(denials: &[Denial]) -> Vec<&str> {
    let mut messages: Vec<&str> = Vec::new();
    for denial in denials {
        if !messages.contains(&denial.message.as_str()) {
            messages.push(&denial.message);
        }
    }
    messages
}

/// Whether every refusal was of a read or a listing by the policy or the sandbox (not a
/// budget, a lock or a stale read).
fn only_reads_refused(denials: &[Denial]) -> bool {
    denials
        .iter()
        .all(|denial| matches!(denial.event.access, Access::Read | Access::List) && denial.kind == ToolErrorKind::Denied)
}

/// The result of a call in which the guard refused something: the refusals, whatever the
/// component made of them, and what the component said, for context.
fn denied_result(denials: &[Denial], returned: &Result<ToolOutput, ToolError>) -> ToolError {
    let messages = distinct_messages(denials);
    let mut text = messages.iter().take(MAX_LISTED_DENIALS).copied().collect::<Vec<_>>().join("\n");
    if messages.len() > MAX_LISTED_DENIALS {
        text.push_str(&format!("\n(and {} more refusals)", messages.len() - MAX_LISTED_DENIALS));
    }
    match returned {
        Err(error) if error.kind != ToolErrorKind::Denied => {
            text.push_str(&format!("\n(the tool then reported: {error})"));
        }
        Ok(_) => text.push_str("\n(the tool returned a result anyway; it is withheld because the host refused an operation)"),
        Err(_) => {}
    }
    // A lock or stale-read conflict is `conflict` (the agent can retry after re-reading or
    // waiting); anything mixed with a policy refusal is `denied`.
    let kind = match denials.first() {
        Some(first) if denials.iter().all(|denial| denial.kind == first.kind) => first.kind,
        _ => ToolErrorKind::Denied,
    };
    ToolError::new(kind, text)
}

/// The component's output for the agent: the text cut at `output_bytes`, and the structured
/// result parsed (dropped if it is larger than `output_bytes`).
fn convert_output(
    tool: &str,
    output: bindings::toolcell::tool::types::ToolOutput,
    output_bytes: usize,
) -> Result<ToolOutput, ToolError> {
    let mut text = output.text;
    limits::cap_output(&mut text, output_bytes);
    let structured = match output.structured {
        None => None,
        Some(json) if json.len() > output_bytes => None,
        Some(text) => Some(serde_json::from_str(&text).map_err(|error| {
            ToolError::new(
                ToolErrorKind::Failed,
                format!("the tool `{tool}` returned structured output that is not JSON ({error}); this is a bug in the tool"),
            )
        })?),
    };
    Ok(ToolOutput { text, structured })
}

fn convert_error(error: bindings::toolcell::tool::types::ToolError) -> ToolError {
    use bindings::toolcell::tool::types::ToolError as Wit;
    let (kind, message) = match error {
        Wit::InvalidArgs(message) => (ToolErrorKind::InvalidArgs, message),
        Wit::NotFound(message) => (ToolErrorKind::NotFound, message),
        Wit::Denied(message) => (ToolErrorKind::Denied, message),
        Wit::Conflict(message) => (ToolErrorKind::Conflict, message),
        Wit::TooLarge(message) => (ToolErrorKind::TooLarge, message),
        Wit::Unsupported(message) => (ToolErrorKind::Unsupported, message),
        Wit::Failed(message) => (ToolErrorKind::Failed, message),
    };
    ToolError::new(kind, message)
}

/// A host error as the WIT `tool-error` a component receives.
pub(crate) fn to_wit_error(kind: ToolErrorKind, message: String) -> bindings::toolcell::tool::types::ToolError {
    use bindings::toolcell::tool::types::ToolError as Wit;
    match kind {
        ToolErrorKind::InvalidArgs => Wit::InvalidArgs(message),
        ToolErrorKind::NotFound => Wit::NotFound(message),
        ToolErrorKind::Denied => Wit::Denied(message),
        ToolErrorKind::Conflict => Wit::Conflict(message),
        ToolErrorKind::TooLarge => Wit::TooLarge(message),
        ToolErrorKind::Unsupported => Wit::Unsupported(message),
        // `Failed`, and any kind added later.
        _ => Wit::Failed(message),
    }
}

/// Replace `path` with `value` as JSON: written beside it and renamed over it, so that a reader
/// never sees half of it (synced first if `sync`).
pub(crate) fn replace_json(path: &Path, value: &impl serde::Serialize, sync: bool) -> std::io::Result<()> {
    use std::io::Write as _;
    let name = path.file_name().map(|name| name.to_string_lossy().into_owned()).unwrap_or_default();
    let temporary = path.with_file_name(format!("{name}.{}.tmp", std::process::id()));
    let mut file = std::fs::File::create(&temporary)?;
    file.write_all(&serde_json::to_vec(value).map_err(std::io::Error::other)?)?;
    if sync {
        file.sync_data()?;
    }
    std::fs::rename(&temporary, path)
}

/// The key of one session's state in one workspace (read versions, undo records): a hash, so
/// that neither the session id nor the workspace path becomes a file name.
pub(crate) fn session_key(session: &str, workspace: &Path) -> String {
    use sha2::Digest as _;
    let mut hasher = sha2::Sha256::new();
    hasher.update(workspace.as_os_str().as_encoded_bytes());
    hasher.update([0]);
    hasher.update(session.as_bytes());
    hex(&hasher.finalize())
}

/// Lowercase hex of a digest.
pub(crate) use toolcell_audit::hex;

/// A call id unique across calls and processes: time, process and a counter.
fn new_call_id() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map(|elapsed| elapsed.as_nanos()).unwrap_or(0);
    let count = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("c-{nanos:x}-{:x}-{count:x}", std::process::id())
}
