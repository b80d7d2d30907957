//! The commands: build the runtime from validated flags, then do one thing: this
//! module builds the runtime and dispatches; each command group has a module of its own.

mod governance;
mod network;
mod plugins;
mod records;
mod registry;
mod serving;

use governance::*;
use plugins::*;
use records::*;
use serving::*;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use serde_json::json;
use std::sync::Arc;

use toolcell_runtime::{
    Access, Approver, AuditLog, CacheOutcome, CallRequest, Error, LockError, LockMode, LockRequest, LockStoreError, Runtime, SessionState,
    TaskBinding, Workspace, lock_json,
};

use crate::cli::{
    AuditCommand, CallArgs, Cli, Command, IndexCommand, LockCommand, McpArgs, PolicyCommand, ReportArgs, RuntimeArgs, ServeArgs,
    SessionsCommand, StoreCommand, ToolsCommand,
};

use toolcell_host::{DEFAULT_POLICY, DEFAULT_POLICY_NAME};

/// Exit status when a tool returned an error.
pub const EXIT_TOOL_ERROR: u8 = 1;
/// Exit status when the host itself failed (bad flags, unusable workspace, bad component).
pub const EXIT_HOST_ERROR: u8 = 2;

/// Run the parsed command line.
pub fn run(mut cli: Cli) -> anyhow::Result<ExitCode> {
    // `policy explain POLICY PATH`: the policy named first, as `policy check` takes it.
    if let Command::Policy(PolicyCommand::Explain { targets, .. }) = &mut cli.command
        && targets.len() == 2
    {
        cli.runtime.policy = Some(PathBuf::from(targets.remove(0)));
    }
    if let Command::Policy(PolicyCommand::Check { file }) = &cli.command {
        return policy_check(&cli.runtime, file);
    }
    if let Command::Policy(PolicyCommand::Show) = &cli.command {
        return policy_show(&cli.runtime);
    }
    if let Command::Completions { shell } = &cli.command {
        // Generated into memory first: clap_complete panics when its writer fails (a closed pipe).
        let mut script = Vec::new();
        clap_complete::generate(*shell, &mut <Cli as clap::CommandFactory>::command(), "toolcell", &mut script);
        std::io::stdout().lock().write_all(&script)?;
        return Ok(ExitCode::SUCCESS);
    }
    if let Command::Sdk { language, out } = &cli.command {
        return crate::sdk::write(language, out);
    }
    if let Command::Audit(command) = &cli.command {
        return audit(&cli.runtime, command);
    }
    if let Command::Store(command) = &cli.command {
        return store(&cli.runtime, command);
    }
    if let Command::Mcp(args) = &cli.command {
        return mcp(&cli.runtime, args);
    }
    if let Command::Serve(args) = &cli.command {
        return serve(&cli.runtime, args);
    }
    if let Command::Token { hash } = &cli.command {
        return token(*hash);
    }
    if let Command::Demo { workspace } = &cli.command {
        return crate::demo::run(&cli.runtime, workspace.clone());
    }
    if let Command::Conformance { component, json, format, stub_imports } = &cli.command {
        return conformance(&cli.runtime, component, if *json { "json" } else { format }, stub_imports);
    }
    if let Command::Tools { command: Some(ToolsCommand::Add { component, force, insecure }), .. } = &cli.command {
        return tools_add(&cli.runtime, component, *force, *insecure);
    }
    if let Command::Tools { command: Some(ToolsCommand::Push { component, reference, version, description, source, insecure }), .. } =
        &cli.command
    {
        let annotations = toolcell_oci::Annotations {
            version: version.clone(),
            description: description.clone(),
            source: source.clone(),
            title: component.file_name().map(|name| name.to_string_lossy().into_owned()),
        };
        return registry::push(&cli.runtime, component, reference, &annotations, *insecure);
    }
    if let Command::Tools { command: Some(ToolsCommand::Pull { reference, output, insecure }), .. } = &cli.command {
        return registry::pull(&cli.runtime, reference, output.as_deref(), *insecure);
    }
    if let Command::Tools { command: Some(ToolsCommand::Sign { reference, key, insecure }), .. } = &cli.command {
        return registry::sign(&cli.runtime, reference, key, *insecure);
    }
    if let Command::Tools { command: Some(ToolsCommand::Remove { name }), .. } = &cli.command {
        return tools_remove(&cli.runtime, name);
    }
    if let Command::Tools { command: Some(ToolsCommand::Update { name, component, force, insecure }), .. } = &cli.command {
        return match component {
            Some(component) => {
                registry::refuse_unsigned_file(&cli.runtime, &component.display().to_string())?;
                let wasm = std::fs::read(component).with_context(|| format!("cannot read `{}`", component.display()))?;
                tools_update(&cli.runtime, name, &component.display().to_string(), wasm, *force, None)
            }
            None => registry::update(&cli.runtime, name, *force, *insecure),
        };
    }
    let runtime = build_runtime(&cli.runtime)?;
    match cli.command {
        Command::Tools { json, command: None } => tools(&runtime, json),
        Command::Call(args) => call(&runtime, &args),
        Command::Policy(PolicyCommand::Explain { role, access, targets, tool, task, json }) => policy_explain(
            &runtime,
            &Explain { role: &role, access: &access, path: &targets.concat(), tool: tool.as_deref(), task: task.as_deref(), json },
        ),
        Command::Schema { role, format, strict } => schema(&runtime, &role, &format, strict),
        Command::Lock(command) => lock(&runtime, command),
        Command::Sessions(SessionsCommand::List { workspace, json }) => sessions_list(&runtime, workspace.as_deref(), json),
        Command::Report(args) => report(&runtime, &args),
        Command::Index(command) => index(&runtime, &command),
        Command::Policy(PolicyCommand::Check { .. } | PolicyCommand::Show)
        | Command::Completions { .. }
        | Command::Sdk { .. }
        | Command::Audit(_)
        | Command::Store(_)
        | Command::Mcp(_)
        | Command::Serve(_)
        | Command::Token { .. }
        | Command::Demo { .. }
        | Command::Conformance { .. }
        | Command::Tools { command: Some(_), .. } => {
            unreachable!("handled above")
        }
    }
}

/// The runtime with the built-in tools and the plugins.
pub fn build_runtime(args: &RuntimeArgs) -> anyhow::Result<Runtime> {
    build_runtime_with(args, None, false, &[])
}

/// The runtime of a host that serves many calls (`mcp`, `serve`): as [`build_runtime`], and a
/// workspace's first search builds its content index in the background for the searches after.
/// `protected` are the service's own files (its configuration), hidden from every tool.
/// `store_log`, if given, is told each outage and recovery of the shared store.
fn build_serving_runtime(
    args: &RuntimeArgs,
    protected: &[&std::path::Path],
    store_log: Option<&Arc<toolcell_mcp::operator::OperatorLog>>,
) -> anyhow::Result<Runtime> {
    build_runtime_watching(args, None, true, protected, store_log)
}

/// The plugin directory: `--plugin-dir`, else `plugins` in the state directory.
fn plugin_dir(args: &RuntimeArgs) -> Option<PathBuf> {
    args.plugin_dir.clone().or_else(|| state_dir(args).map(|state| state.join("plugins")))
}

/// What `tools add` and `tools update` load beside the plugin directory, to check it.
enum Candidate {
    /// A component being added: its origin and bytes.
    Added { origin: String, wasm: Vec<u8> },
    /// New bytes for the plugin file `file_name`, and the policy's new text (its pin updated),
    /// if its pin changes: `(policy file, text)`.
    Replacing { file_name: String, wasm: Vec<u8>, policy: Option<(PathBuf, String)> },
}

/// The runtime with the built-in tools, the plugins, and `extra` (a component being added or
/// replaced).
fn build_runtime_with(
    args: &RuntimeArgs,
    extra: Option<Candidate>,
    serving: bool,
    protected: &[&std::path::Path],
) -> anyhow::Result<Runtime> {
    build_runtime_watching(args, extra, serving, protected, None)
}

/// [`build_runtime_with`], telling `store_log` each outage and recovery of the shared store.
fn build_runtime_watching(
    args: &RuntimeArgs,
    extra: Option<Candidate>,
    serving: bool,
    protected: &[&std::path::Path],
    store_log: Option<&Arc<toolcell_mcp::operator::OperatorLog>>,
) -> anyhow::Result<Runtime> {
    let mut builder = toolcell_host::builtin_runtime().build_index_on_first_search(serving);
    for path in protected {
        builder = builder.protect(*path);
    }
    // The registry keys the policy names: a tool that rewrote one would have its own
    // signatures trusted by `tools add` and the check of the installed plugins.
    let keys = registry::signature_key_files(args);
    for key in &keys {
        builder = builder.protect(key);
    }
    // What this run uses (told or by default, from the command line or the environment) and
    // the executables it was started from: every later run protects them too, whatever it is
    // configured with.
    let policy_file = args.policy.clone().filter(|path| builtin_policy_name(path).is_none());
    let cache_dir = (!args.no_cache).then(|| args.cache_dir.clone().or_else(toolcell_runtime::default_cache_dir)).flatten();
    let chosen: Vec<PathBuf> =
        [state_dir(args), cache_dir, plugin_dir(args), policy_file, toolcell_runtime::executable(), toolcell_runtime::started_by()]
            .into_iter()
            .flatten()
            .chain(keys)
            .chain(protected.iter().map(|path| path.to_path_buf()))
            .collect();
    if let Err(error) = toolcell_runtime::remember_locations(&chosen) {
        writeln!(
            std::io::stderr().lock(),
            "warning: the locations this run uses could not be recorded in the default state directory ({error}), so other runs will not protect them"
        )?;
    }
    if !serving {
        // One call, then the process ends: watching the workspace for the searches after
        // would cost a watch per directory and buy nothing.
        builder = builder.index_freshness(toolcell_runtime::IndexFreshness::Walk);
    }
    if let Some(url) = store_url(args) {
        let store = connect_store(&url)?;
        if let Some(log) = store_log {
            watch_store(&store, Arc::clone(log));
        }
        builder = builder
            .shared_store(Arc::clone(&store) as Arc<dyn toolcell_runtime::LockBackend>, Arc::clone(&store) as _)
            .shared_sessions(store);
    }
    if let Some(directory) = plugin_dir(args) {
        // The plugin an update replaces is checked as the new build, not as the old file.
        let replaced = match &extra {
            Some(Candidate::Replacing { file_name, .. }) => Some(file_name.as_str()),
            _ => None,
        };
        registry::check_installed_signatures(args, &directory, replaced)?;
        builder = builder.plugin_dir(directory);
    }
    let mut new_policy = None;
    match extra {
        Some(Candidate::Added { origin, wasm }) => builder = builder.component(origin, wasm),
        Some(Candidate::Replacing { file_name, wasm, policy }) => {
            builder = builder.replace_plugin(file_name, wasm);
            new_policy = policy;
        }
        None => {}
    }
    if !args.no_cache
        && let Some(directory) = args.cache_dir.clone().or_else(toolcell_runtime::default_cache_dir)
    {
        builder = builder.cache_dir(directory);
    }
    if let Some(state_dir) = state_dir(args) {
        builder = builder.audit_dir(state_dir);
    }
    if !args.resolve.is_empty() {
        let mut resolver = toolcell_net::StaticResolver::new();
        for entry in &args.resolve {
            resolver.insert_flag(entry).with_context(|| format!("`--resolve {entry}` cannot be used"))?;
        }
        builder = builder.resolver(Arc::new(resolver.with_fallback(Arc::new(toolcell_net::SystemResolver))));
    }
    // The policy as `tools update` would leave it (the same file, a new pin).
    let new_policy = new_policy.filter(|(file, _)| args.policy.as_ref() == Some(file));
    builder = match (&args.policy, new_policy) {
        (Some(path), Some((_, text))) => {
            let name = path.file_name().map_or_else(|| "policy.toml".to_owned(), |name| name.to_string_lossy().into_owned());
            builder.protect(path).policy(name, text)
        }
        (Some(path), None) => match builtin_policy_name(path) {
            Some(name) => {
                let (shown, text) = toolcell_host::builtin_policy(name).with_context(|| {
                    format!("there is no shipped policy `{name}`; the shipped ones are `builtin:default` and `builtin:workflow`")
                })?;
                builder.policy(shown, text)
            }
            None => builder.policy_file(path),
        },
        (None, _) => builder.policy(DEFAULT_POLICY_NAME, DEFAULT_POLICY),
    };
    builder = builder.spawner(Arc::new(CliSpawner { policy: args.policy.clone(), custom_state_dir: args.state_dir.is_some() }));
    // Compiling a plugin takes seconds the first time: a person at a terminal hears of it;
    // a client reading stderr through a pipe is not bothered.
    if std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        builder = builder.on_progress(|progress| {
            let line = match progress {
                toolcell_runtime::LoadProgress::Compiling { origin } => {
                    format!("compiling `{origin}` for this machine (once: later starts load it from the cache)…")
                }
                toolcell_runtime::LoadProgress::Compiled { origin, elapsed } => {
                    format!("compiled `{origin}` in {:.1} s", elapsed.as_secs_f64())
                }
                _ => return,
            };
            let _ = writeln!(std::io::stderr().lock(), "{line}");
        });
    }
    // The builder's errors say what failed (the policy, a plugin, the cache); the commands that
    // go on to serve say that the host did not start.
    let runtime = builder.build()?;
    for warning in runtime.warnings() {
        writeln!(std::io::stderr().lock(), "warning: {warning}")?;
    }
    if args.verbose {
        let mut stderr = std::io::stderr().lock();
        for loaded in runtime.loaded() {
            let how = match loaded.cache {
                CacheOutcome::Compiled => "compiled",
                CacheOutcome::Cached => "loaded from cache",
                CacheOutcome::Embedded => "loaded precompiled from the binary",
                CacheOutcome::Rejected => "compiled again: the cached artifact failed authentication",
            };
            writeln!(stderr, "{}: {} ({how})", loaded.tool, loaded.origin)?;
        }
    }
    Ok(runtime)
}

/// Tell `log` when uses of `store` find it unreachable, and when it is back.
fn watch_store(store: &toolcell_store_postgres::PostgresStore, log: Arc<toolcell_mcp::operator::OperatorLog>) {
    use toolcell_mcp::operator::Event;
    use toolcell_store_postgres::Availability;
    let name = store.name().to_owned();
    store.watch(move |change| match change {
        Availability::Lost { reason } => {
            log.note(Event::StoreDown, &format!("the store {name} cannot be reached ({reason}): writes are refused until it is back"))
        }
        Availability::Back { after } => {
            log.note(Event::StoreBack, &format!("the store {name} is back (unreachable for {:.1} s)", after.as_secs_f64()));
        }
        _ => {}
    });
}

/// `builtin:NAME` names a shipped policy.
fn builtin_policy_name(path: &std::path::Path) -> Option<&str> {
    path.to_str().and_then(|text| text.strip_prefix("builtin:"))
}

/// Without a platform to start agents, a spawned session waits for one: the spawning agent is
/// told the `toolcell mcp` command that serves it. Host paths stay out of the command (it is
/// shown to an agent): a policy file is named by its file name, the state directory not at all.
struct CliSpawner {
    policy: Option<PathBuf>,
    custom_state_dir: bool,
}

impl toolcell_runtime::Spawner for CliSpawner {
    fn spawn(&self, session: &toolcell_runtime::SessionRecord) -> Result<String, String> {
        let mut command = "toolcell mcp --workspace .".to_owned();
        match self.policy.as_deref() {
            Some(path) if builtin_policy_name(path).is_some() => command.push_str(&format!(" --policy {}", path.display())),
            Some(path) => {
                command.push_str(&format!(" --policy {}", path.file_name().map(|name| name.to_string_lossy()).unwrap_or_default()))
            }
            None => {}
        }
        command.push_str(&format!(" --role {} --session {}", session.role, session.id));
        if let Some(task) = &session.task {
            command.push_str(&format!(" --task {task}"));
        }
        let mut text = format!("pending: an agent runs it with `{command}` from the workspace root");
        if self.custom_state_dir {
            text.push_str(", with the same --state-dir as this host");
        }
        Ok(text)
    }
}

/// Where the audit trail lives: `--state-dir`, else the environment's state directory.
fn state_dir(args: &RuntimeArgs) -> Option<PathBuf> {
    args.state_dir.clone().or_else(toolcell_runtime::default_state_dir)
}

/// The shared store's connection string (`--store`).
fn store_url(args: &RuntimeArgs) -> Option<String> {
    args.store.clone().filter(|url| !url.is_empty())
}

/// How long a use of the store waits for the database: `[store] answer_timeout` of `serve`'s
/// service.toml, set once before `serve` opens a store (else the store's default).
static STORE_ANSWER_TIMEOUT: std::sync::OnceLock<std::time::Duration> = std::sync::OnceLock::new();

/// The store at `url`, each use waiting for the database at most [`STORE_ANSWER_TIMEOUT`].
fn connect_store(url: &str) -> Result<Arc<toolcell_store_postgres::PostgresStore>, toolcell_store_postgres::StoreError> {
    let answer_timeout = STORE_ANSWER_TIMEOUT.get().copied().unwrap_or(toolcell_store_postgres::DEFAULT_ANSWER_TIMEOUT);
    toolcell_store_postgres::PostgresStore::connect_with(url, answer_timeout)
}
