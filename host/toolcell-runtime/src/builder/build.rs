//! [`RuntimeBuilder::build`], as a sequence of named steps: what the host owns, the policy's
//! text, the engine, the components, the tools the host implements, the compiled policy, the
//! state, and the runtime that holds them.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use toolcell_policy::{Policy, PolicyError, ToolMentions};
use toolcell_state::inventory;
use toolcell_state::sessions::SessionStore;
use toolcell_state::{AuditLog, LockStore};
use wasmtime::Engine;

use super::load::{Linking, Prepared, load_all, prepare, read_plugins};
use super::{ComponentSource, PolicySource, RuntimeBuilder};
use crate::capabilities::CallState;
use crate::engine::{self, ComponentCache, LoadProgress};
use crate::error::{Error, PinMismatch};
use crate::limits;
use crate::pages::release_pages;
use crate::runtime::{HostOwned, LoadedComponent, LoadedTool, Runtime, ToolKind};
use crate::{capabilities, native};
use toolcell_args::adapters;
use toolcell_outcome::plugins::{PluginFailures, tool_of_file};

/// The policy file's name (never a host path: it reaches agents in refusals) and its text.
type PolicyText = Option<(String, String)>;

/// The imports each tool may link as stubs, by tool.
type StubRules = BTreeMap<String, Vec<String>>;

/// The tools loaded: by name, the components among them, and what to warn of.
#[derive(Default)]
struct Tools {
    by_name: BTreeMap<String, LoadedTool>,
    components: Vec<LoadedComponent>,
    warnings: Vec<String>,
}

/// What the engine needs to load components.
struct EngineParts {
    engine: Engine,
    ticker: limits::EpochTicker,
    linker: Arc<wasmtime::component::Linker<CallState>>,
    cache: Option<ComponentCache>,
}

/// What the runtime keeps on disk, opened.
struct StateParts {
    audit: Option<Arc<AuditLog>>,
    state_dir: Option<std::path::PathBuf>,
    work: toolcell_state::WorkDir,
    journal: Arc<toolcell_state::journal::JournalFile>,
    journal_key: toolcell_state::journal::JournalKey,
    locks: Arc<LockStore>,
}

impl RuntimeBuilder {
    /// Compile or load every component, check its imports and its description, and link it.
    ///
    /// # Errors
    ///
    /// [`Error::ForbiddenImport`] naming the import, [`Error::Load`],
    /// [`Error::InvalidDescription`], [`Error::DuplicateTool`], [`Error::NeededPlugin`] (a
    /// plugin the policy needs that cannot be loaded), [`Error::Policy`],
    /// [`Error::Cache`] or [`Error::Engine`].
    pub fn build(mut self) -> Result<Runtime, Error> {
        let mut host_owned = self.host_owned_and_plugins()?;
        self.check_memory_limit()?;
        let policy_directory = self.policy_directory();
        let policy_text = self.read_policy(&mut host_owned)?;
        let outbound = self.outbound(&policy_text, policy_directory.as_deref())?;
        let (stub_rules, mentions) = self.stub_rules_and_mentions(&policy_text)?;
        let mut failures = PluginFailures { mentions: mentions.as_ref(), skipped: Vec::new() };
        let engine = self.start_engine(&mut host_owned)?;
        let mut tools = self.load_components(&engine, &stub_rules, &mut failures)?;
        add_host_tools(&mut tools, &mut failures)?;
        tools.warnings.extend(failures.warnings());
        let policy = compile_policy(policy_text, &tools.by_name, &tools.components)?;
        self.check_configuration()?;
        let state = self.open_state(&mut host_owned)?;
        Ok(self.assemble(engine, tools, (policy, outbound), host_owned, failures.skipped, state))
    }

    /// Every location a run trusts (hidden from every tool), and the plugins of the plugin
    /// directory added to the components.
    fn host_owned_and_plugins(&mut self) -> Result<Vec<HostOwned>, Error> {
        // What any run of this user trusts, whatever this one is configured with.
        let mut host_owned: Vec<HostOwned> = inventory::trusted_directories().iter().map(|path| HostOwned::directory(path)).collect();
        host_owned.extend(inventory::executable().map(|path| HostOwned::new(&path, false)));
        // The names it was started by: the symlinks on their way are protected with them.
        host_owned.extend(inventory::started_by().map(|path| HostOwned::new(&path, false)));
        // What a shell's next `toolcell` runs, whichever executable started this run.
        host_owned.extend(inventory::executables_on_path().iter().map(|path| HostOwned::new(path, false)));
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
        Ok(host_owned)
    }

    /// The memory limit is one a tool's memory can grow to.
    fn check_memory_limit(&self) -> Result<(), Error> {
        if self.limits.memory_bytes > engine::MAX_MEMORY_BYTES {
            return Err(Error::Engine {
                reason: format!(
                    "the memory limit of {} MiB exceeds the most a tool's memory can grow to ({} MiB)",
                    self.limits.memory_bytes >> 20,
                    engine::MAX_MEMORY_BYTES >> 20
                ),
            });
        }
        Ok(())
    }

    /// The policy's text: its `stub_imports` decide how components link.
    fn read_policy(&mut self, host_owned: &mut Vec<HostOwned>) -> Result<PolicyText, Error> {
        Ok(match self.policy.take() {
            Some(PolicySource::Text { file, text }) => Some((file, text)),
            Some(PolicySource::File(path)) => {
                host_owned.push(HostOwned::new(&path, false));
                let text = std::fs::read_to_string(&path).map_err(|source| Error::PolicyFile { path: path.clone(), source })?;
                Some((policy_name(&path), text))
            }
            None => None,
        })
    }

    /// The imports each tool may link as stubs (the policy's and the builder's), and which
    /// tools the policy names.
    fn stub_rules_and_mentions(&mut self, policy_text: &PolicyText) -> Result<(StubRules, Option<ToolMentions>), Error> {
        let mut stub_rules = match policy_text {
            Some((file, text)) => toolcell_policy::stub_imports(file, text)?,
            None => BTreeMap::new(),
        };
        let mentions = policy_text.as_ref().map(|(file, text)| ToolMentions::read(file, text)).transpose()?;
        for (tool, patterns) in std::mem::take(&mut self.stub_imports) {
            stub_rules.entry(tool).or_default().extend(patterns);
        }
        Ok((stub_rules, mentions))
    }

    /// The engine, its deadline ticker, the linker of the `tool-component` world, and the
    /// compiled-component cache.
    fn start_engine(&self, host_owned: &mut Vec<HostOwned>) -> Result<EngineParts, Error> {
        let engine = engine::new_engine()?;
        let ticker = limits::EpochTicker::start(&engine)
            .map_err(|error| Error::Engine { reason: format!("cannot start the deadline ticker thread: {error}") })?;
        let linker = Arc::new(capabilities::linker(&engine, !self.unguarded)?);
        let cache = self.cache_dir.as_deref().map(ComponentCache::open).transpose()?;
        if let Some(directory) = &self.cache_dir {
            host_owned.push(HostOwned::directory(directory));
        }
        Ok(EngineParts { engine, ticker, linker, cache })
    }

    /// Load every component (read or compile, authenticate, check imports, link, describe) on
    /// every core; a plugin that fails is skipped unless the policy needs it.
    fn load_components(&self, parts: &EngineParts, stub_rules: &StubRules, failures: &mut PluginFailures<'_>) -> Result<Tools, Error> {
        let mut tools = Tools::default();
        let quiet = |_: LoadProgress<'_>| {};
        let progress: &engine::Progress = self.progress.as_deref().unwrap_or(&quiet);
        let linking = Linking { linker: &parts.linker, guarded: !self.unguarded, stub_rules };
        let prepared = load_all(&self.components, |source| prepare(&parts.engine, &linking, parts.cache.as_ref(), source, progress));
        for (ComponentSource { origin, wasm, artifact, is_plugin }, prepared) in self.components.iter().zip(prepared) {
            let Prepared { code, info, schema, cache: cache_outcome, warning, imports } = match prepared {
                Ok(prepared) => prepared,
                Err(error) if *is_plugin => {
                    failures.fail_or_skip(origin, tool_of_file(origin), error)?;
                    continue;
                }
                Err(error) => return Err(error),
            };
            tools.warnings.extend(warning);
            if let Some(existing) = tools.by_name.get(info.name.as_str()) {
                let error = Error::DuplicateTool { name: info.name.to_string(), first: existing.origin.clone(), second: origin.clone() };
                if *is_plugin {
                    failures.fail_or_skip(origin, info.name.as_str(), error)?;
                    continue;
                }
                return Err(error);
            }
            tools.components.push(LoadedComponent {
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
            tools
                .by_name
                .insert(info.name.to_string(), LoadedTool { info, schema, kind: ToolKind::Component(code), origin: origin.clone() });
        }
        Ok(tools)
    }

    /// A shared store keeps the audit trail and the locks; the rest stays on each host.
    fn check_configuration(&self) -> Result<(), Error> {
        if self.shared_store.is_some() && self.audit_dir.is_none() {
            return Err(Error::Configuration {
                problem: "a shared store (`shared_store`) was given without a state directory (`audit_dir`): journals, undo records \
                          and indexes stay on each host"
                    .to_owned(),
                hint: "give the state directory too (`RuntimeBuilder::audit_dir`, `--state-dir` on the command line)".to_owned(),
            });
        }
        Ok(())
    }

    /// The state directory (created private, mode-checked, its key read), the audit trail, the
    /// journal and the lock table.
    fn open_state(&self, host_owned: &mut Vec<HostOwned>) -> Result<StateParts, Error> {
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
        // As it was named too: the symlinks on the way of that name lead the next run here.
        if let Some(named) = &self.audit_dir {
            host_owned.push(HostOwned::directory(named));
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
            .map_err(|source| Error::State(toolcell_state::Error::State { path: work.journals(), source }))?;
        let locks = Arc::new(match (&self.shared_store, &state_dir) {
            (Some((backend, _)), _) => LockStore::shared(Arc::clone(backend)),
            (None, Some(directory)) => LockStore::in_directory(directory),
            (None, None) => LockStore::in_memory(),
        });
        Ok(StateParts { audit, state_dir, work, journal, journal_key, locks })
    }

    /// The runtime, holding what the steps before made.
    fn assemble(
        self,
        engine: EngineParts,
        tools: Tools,
        (policy, outbound): (Option<Arc<Policy>>, toolcell_net::Outbound),
        host_owned: Vec<HostOwned>,
        skipped: Vec<crate::runtime::SkippedPlugin>,
        state: StateParts,
    ) -> Runtime {
        let StateParts { audit, state_dir, work, journal, journal_key, locks } = state;
        let workflow = Arc::new(toolcell_state::workflow::WorkflowShared {
            locks: Arc::clone(&locks),
            sessions: Arc::new(SessionStore::new(work.path())),
            spawner: self.spawner,
            audit: audit.clone(),
        });
        Runtime {
            engine: engine.engine,
            unguarded: self.unguarded,
            tools: tools.by_name,
            loaded: tools.components,
            policy: crate::reload::PolicySlot::new(policy),
            host_owned,
            warnings: tools.warnings,
            skipped,
            audit,
            outbound,
            limits: self.limits,
            text_editor_root: self.text_editor_root,
            locks,
            reads: match &self.shared_sessions {
                Some(backend) => toolcell_state::reads::ReadTracker::shared(Arc::clone(backend)),
                None => toolcell_state::reads::ReadTracker::new(state_dir.as_deref()),
            },
            undo: match &self.shared_sessions {
                Some(backend) => toolcell_state::undo::UndoStore::shared(work.path(), Arc::clone(backend)),
                None => toolcell_state::undo::UndoStore::new(work.path()),
            },
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
            ahead: crate::call::ahead::Ahead::default(),
            host_inside: std::sync::Mutex::default(),
            journal_key,
            recovered: toolcell_state::Recoveries::default(),
            journal,
            _work: work,
            _ticker: engine.ticker,
        }
    }
}

/// The tools the host implements, and the providers' built-in tools it adapts.
fn add_host_tools(tools: &mut Tools, failures: &mut PluginFailures<'_>) -> Result<(), Error> {
    let host_tools = native::Native::ALL
        .into_iter()
        .map(|native| (native.describe(), ToolKind::Native(native)))
        .chain(adapters::Adapter::ALL.into_iter().map(|adapter| (adapter.describe(), ToolKind::Adapter(adapter))));
    for ((info, schema), kind) in host_tools {
        if let Some(existing) = tools.by_name.get(info.name.as_str()) {
            let error =
                Error::DuplicateTool { name: info.name.to_string(), first: "builtin:host".to_owned(), second: existing.origin.clone() };
            let origin = existing.origin.clone();
            if !origin.starts_with("plugin:") {
                return Err(error);
            }
            failures.fail_or_skip(&origin, info.name.as_str(), error)?;
            tools.components.retain(|component| component.origin != origin);
        }
        tools.by_name.insert(info.name.to_string(), LoadedTool { info, schema, kind, origin: "builtin:host".to_owned() });
    }
    Ok(())
}

/// A policy file's name in refusals and audit records: its file name alone (the name reaches
/// agents, and a host path must not).
pub(crate) fn policy_name(path: &Path) -> String {
    path.file_name().map_or_else(|| "policy.toml".to_owned(), |name| name.to_string_lossy().into_owned())
}

/// The policy compiled against the loaded tools' names, each component checked against its
/// pin, and each memory limit against what a tool's memory can grow to.
pub(crate) fn compile_policy(
    policy_text: PolicyText,
    by_name: &BTreeMap<String, LoadedTool>,
    components: &[LoadedComponent],
) -> Result<Option<Arc<Policy>>, Error> {
    let names: Vec<&str> = by_name.keys().map(String::as_str).collect();
    let policy = match policy_text {
        Some((file, text)) => Some(Arc::new(Policy::parse(&file, &text, &names)?)),
        None => None,
    };
    if let Some(policy) = &policy {
        for component in components {
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
        for tool in by_name.keys() {
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
    Ok(policy)
}
