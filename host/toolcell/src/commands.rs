//! The commands: build the runtime from validated flags, then do one thing.

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
    if let Command::Conformance { component, json, stub_imports } = &cli.command {
        return conformance(&cli.runtime, component, *json, stub_imports);
    }
    if let Command::Tools { command: Some(ToolsCommand::Add { component, force }), .. } = &cli.command {
        return tools_add(&cli.runtime, component, *force);
    }
    if let Command::Tools { command: Some(ToolsCommand::Remove { name }), .. } = &cli.command {
        return tools_remove(&cli.runtime, name);
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
    build_runtime_with(args, None, false)
}

/// The runtime of a host that serves many calls (`mcp`, `serve`): as [`build_runtime`], and a
/// workspace's first search builds its content index in the background for the searches after.
fn build_serving_runtime(args: &RuntimeArgs) -> anyhow::Result<Runtime> {
    build_runtime_with(args, None, true)
}

/// The plugin directory: `--plugin-dir`, else `plugins` in the state directory.
fn plugin_dir(args: &RuntimeArgs) -> Option<PathBuf> {
    args.plugin_dir.clone().or_else(|| state_dir(args).map(|state| state.join("plugins")))
}

/// The runtime with the built-in tools, the plugins, and `extra` (a component being added).
fn build_runtime_with(args: &RuntimeArgs, extra: Option<(String, Vec<u8>)>, serving: bool) -> anyhow::Result<Runtime> {
    let mut builder = toolcell_host::builtin_runtime().build_index_on_first_search(serving);
    if let Some(url) = store_url(args) {
        let store = toolcell_store_postgres::PostgresStore::connect(&url)?;
        builder = builder.shared_store(Arc::clone(&store) as Arc<dyn toolcell_runtime::LockBackend>, store);
    }
    if let Some(directory) = plugin_dir(args) {
        builder = builder.plugin_dir(directory);
    }
    if let Some((origin, wasm)) = extra {
        builder = builder.component(origin, wasm);
    }
    if !args.no_cache
        && let Some(directory) = args.cache_dir.clone().or_else(default_cache_dir)
    {
        builder = builder.cache_dir(directory);
    }
    if let Some(state_dir) = state_dir(args) {
        builder = builder.audit_dir(state_dir);
    }
    builder = match &args.policy {
        Some(path) => match builtin_policy_name(path) {
            Some(name) => {
                let (shown, text) = toolcell_host::builtin_policy(name).with_context(|| {
                    format!("there is no shipped policy `{name}`; the shipped ones are `builtin:default` and `builtin:workflow`")
                })?;
                builder.policy(shown, text)
            }
            None => builder.policy_file(path),
        },
        None => builder.policy(DEFAULT_POLICY_NAME, DEFAULT_POLICY),
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

fn from_env(name: &str) -> Option<PathBuf> {
    std::env::var_os(name).filter(|value| !value.is_empty()).map(PathBuf::from)
}

fn default_cache_dir() -> Option<PathBuf> {
    from_env("TOOLCELL_CACHE_DIR")
        .or_else(|| from_env("XDG_CACHE_HOME").map(|cache| cache.join("toolcell")))
        .or_else(|| from_env("HOME").map(|home| home.join(".cache").join("toolcell")))
}

/// Where the audit trail lives: `--state-dir`, else the environment's state directory.
fn state_dir(args: &RuntimeArgs) -> Option<PathBuf> {
    args.state_dir
        .clone()
        .or_else(|| from_env("TOOLCELL_STATE_DIR"))
        .or_else(|| from_env("XDG_STATE_HOME").map(|state| state.join("toolcell")))
        .or_else(|| from_env("HOME").map(|home| home.join(".local").join("state").join("toolcell")))
}

/// The shared store's connection string (`--store`).
fn store_url(args: &RuntimeArgs) -> Option<String> {
    args.store.clone().filter(|url| !url.is_empty())
}

/// `toolcell store migrate|status`.
fn store(args: &RuntimeArgs, command: &StoreCommand) -> anyhow::Result<ExitCode> {
    use toolcell_store_postgres::{PostgresStore, SCHEMA_VERSION};
    let url = store_url(args).context("no store: pass --store URL")?;
    let store = PostgresStore::open(&url)?;
    let mut stdout = std::io::stdout().lock();
    match command {
        StoreCommand::Migrate => {
            let applied = store.migrate()?;
            if applied.is_empty() {
                writeln!(stdout, "{}: already at schema version {SCHEMA_VERSION}", store.name())?;
            } else {
                let applied: Vec<String> = applied.iter().map(ToString::to_string).collect();
                writeln!(stdout, "{}: migrated to schema version {SCHEMA_VERSION} (applied {})", store.name(), applied.join(", "))?;
            }
            Ok(ExitCode::SUCCESS)
        }
        StoreCommand::Status => {
            let found = store.schema_version()?;
            writeln!(stdout, "{}: schema version {found}; this toolcell needs {SCHEMA_VERSION}", store.name())?;
            Ok(if found == SCHEMA_VERSION { ExitCode::SUCCESS } else { ExitCode::from(EXIT_TOOL_ERROR) })
        }
    }
}

fn audit(args: &RuntimeArgs, command: &AuditCommand) -> anyhow::Result<ExitCode> {
    let directory = state_dir(args).context("no state directory: pass --state-dir or set TOOLCELL_STATE_DIR")?;
    // `verify` checks what is there and creates nothing; `tail` may wait for a log to come.
    let opened = match (store_url(args), command) {
        (Some(url), _) => AuditLog::shared(toolcell_store_postgres::PostgresStore::connect(&url)?, &directory),
        (None, AuditCommand::Verify) => AuditLog::existing(&directory),
        (None, AuditCommand::Tail { .. }) => AuditLog::open(&directory),
    };
    let log = match opened {
        Ok(log) => log,
        Err(Error::Audit { path, source }) if source.kind() == std::io::ErrorKind::NotFound => {
            writeln!(
                std::io::stderr(),
                "there is no audit trail at `{}`: nothing was recorded there, or this is not the state directory (pass --state-dir)",
                path.display()
            )?;
            return Ok(ExitCode::from(EXIT_TOOL_ERROR));
        }
        Err(error) => return Err(error.into()),
    };
    let (text, end) = log.read_from(0).with_context(|| format!("cannot read `{}`", log.name()))?;
    match command {
        AuditCommand::Verify => match log.verify(&text) {
            Ok(verified) => {
                writeln!(std::io::stdout(), "{}: ok, {} records, last hash {}", log.name(), verified.records, verified.last_hash)?;
                Ok(ExitCode::SUCCESS)
            }
            Err(tamper) => {
                writeln!(std::io::stderr(), "{}: {tamper}", log.name())?;
                Ok(ExitCode::from(EXIT_TOOL_ERROR))
            }
        },
        AuditCommand::Tail { lines, session, follow } => {
            let shown: Vec<String> = readable(&text, session.as_deref());
            let mut stdout = std::io::stdout().lock();
            for line in &shown[shown.len().saturating_sub(*lines)..] {
                writeln!(stdout, "{line}")?;
            }
            stdout.flush()?;
            if !follow {
                return Ok(ExitCode::SUCCESS);
            }
            let mut offset = end;
            loop {
                std::thread::sleep(std::time::Duration::from_millis(200));
                let (more, end) = log.read_from(offset)?;
                offset = end;
                for line in readable(&more, session.as_deref()) {
                    writeln!(stdout, "{line}")?;
                }
                stdout.flush()?;
            }
        }
    }
}

/// Audit lines as readable text, optionally for one session; unparsable lines are shown as such.
fn readable(text: &str, session: Option<&str>) -> Vec<String> {
    text.lines()
        .filter_map(|line| match serde_json::from_str::<toolcell_audit::Record>(line) {
            Ok(record) if session.is_none_or(|session| record.session == session) => Some(toolcell_audit::display(&record)),
            Ok(_) => None,
            Err(_) => Some(format!("(unreadable record: {})", line.escape_default())),
        })
        .collect()
}

fn conformance(args: &RuntimeArgs, component: &std::path::Path, as_json: bool, stub_imports: &[String]) -> anyhow::Result<ExitCode> {
    let wasm = std::fs::read(component).with_context(|| format!("cannot read `{}`", component.display()))?;
    let options = toolcell_conformance::Options {
        cache_dir: if args.no_cache { None } else { args.cache_dir.clone().or_else(default_cache_dir) },
        stub_imports: stub_imports.to_vec(),
    };
    let report = toolcell_conformance::check(&component.display().to_string(), &wasm, &options);
    let mut stdout = std::io::stdout().lock();
    if as_json {
        writeln!(stdout, "{}", serde_json::to_string_pretty(&report)?)?;
    } else {
        write!(stdout, "{}", report.render())?;
    }
    Ok(if report.passed() { ExitCode::SUCCESS } else { ExitCode::from(EXIT_TOOL_ERROR) })
}

fn tools_add(args: &RuntimeArgs, component: &std::path::Path, force: bool) -> anyhow::Result<ExitCode> {
    let directory = plugin_dir(args).context("no plugin directory: pass --plugin-dir or --state-dir")?;
    let wasm = std::fs::read(component).with_context(|| format!("cannot read `{}`", component.display()))?;
    // The same bytes installed already: nothing to do.
    let installed = std::fs::read_dir(&directory)
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|extension| extension == "wasm"))
        .find(|path| std::fs::read(path).is_ok_and(|bytes| bytes == wasm));
    if let Some(installed) = installed {
        writeln!(std::io::stdout(), "`{}` is installed already, with the same bytes; nothing changed", installed.display())?;
        return Ok(ExitCode::SUCCESS);
    }
    let origin = format!("plugin:{}", component.display());
    // Loaded beside everything else: its imports, description and schema are checked, and a
    // name collision or a pin mismatch is refused before anything is installed.
    let runtime = build_runtime_with(args, Some((origin.clone(), wasm.clone())), false)?;
    let added = runtime.loaded().iter().find(|loaded| loaded.origin == origin).context("the component was loaded")?;
    // Then what it does: the conformance suite, with the stubs the policy grants the tool.
    let stub_imports = runtime.policy().map(|policy| policy.stub_imports(added.tool.as_str()).to_vec()).unwrap_or_default();
    let options = toolcell_conformance::Options {
        cache_dir: if args.no_cache { None } else { args.cache_dir.clone().or_else(default_cache_dir) },
        stub_imports,
    };
    let report = toolcell_conformance::check(&component.display().to_string(), &wasm, &options);
    if !report.passed() {
        let mut stderr = std::io::stderr().lock();
        let failed: Vec<_> = report.checks.iter().filter(|check| !check.passed).collect();
        for check in &failed {
            writeln!(stderr, "{}: conformance check failed: {}: {}", if force { "warning" } else { "error" }, check.name, check.detail)?;
        }
        if !force {
            writeln!(
                stderr,
                "refused: {} conformance check(s) of `{}` failed (`toolcell conformance {}` shows them all); fix the tool, or add it anyway with --force",
                failed.len(),
                added.tool,
                component.display()
            )?;
            return Ok(ExitCode::from(EXIT_TOOL_ERROR));
        }
    }
    std::fs::create_dir_all(&directory).with_context(|| format!("cannot create `{}`", directory.display()))?;
    let target = directory.join(format!("{}.wasm", added.tool));
    let temporary = directory.join(format!(".{}.wasm.tmp", added.tool));
    std::fs::write(&temporary, &wasm)
        .and_then(|()| std::fs::rename(&temporary, &target))
        .with_context(|| format!("cannot install `{}`", target.display()))?;
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "added `{}` as {}", added.tool, target.display())?;
    writeln!(stdout, "sha256 {}", added.sha256)?;
    // A table the policy has already (its stubs, an older pin) takes the line; a new table
    // pasted beside it would be a duplicate the policy refuses.
    let has_table = runtime
        .policy()
        .is_some_and(|policy| policy.pin(added.tool.as_str()).is_some() || !policy.stub_imports(added.tool.as_str()).is_empty());
    if has_table {
        writeln!(
            stdout,
            "pin it in the policy's existing [plugins.{}] table (replacing any `sha256` there), and give it to the roles that may call it:

sha256 = \"{}\"",
            added.tool, added.sha256
        )?;
    } else {
        writeln!(
            stdout,
            "pin it in the policy, and give it to the roles that may call it:

[plugins.{}]
sha256 = \"{}\"",
            added.tool, added.sha256
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `toolcell tools remove NAME`: the plugin's file goes; its pin and role entries are the
/// operator's to remove from the policy.
fn tools_remove(args: &RuntimeArgs, name: &str) -> anyhow::Result<ExitCode> {
    let directory = plugin_dir(args).context("no plugin directory: pass --plugin-dir or --state-dir")?;
    let target = directory.join(format!("{name}.wasm"));
    let valid = !name.is_empty() && name.bytes().all(|byte| byte.is_ascii_lowercase() || byte.is_ascii_digit() || byte == b'_');
    if !valid || !target.is_file() {
        let mut installed: Vec<String> = std::fs::read_dir(&directory)
            .into_iter()
            .flatten()
            .filter_map(Result::ok)
            .filter_map(|entry| entry.file_name().to_str().and_then(|file| file.strip_suffix(".wasm")).map(str::to_owned))
            .collect();
        installed.sort();
        let listed = if installed.is_empty() { "none".to_owned() } else { installed.join(", ") };
        anyhow::bail!("no plugin `{}` is installed in `{}`; the installed ones are: {listed}", name.escape_default(), directory.display());
    }
    std::fs::remove_file(&target).with_context(|| format!("cannot remove `{}`", target.display()))?;
    writeln!(
        std::io::stdout(),
        "removed `{name}` ({}); remove its [plugins.{name}] pin and its entries in roles' `tools` from the policy",
        target.display()
    )?;
    Ok(ExitCode::SUCCESS)
}

fn tools(runtime: &Runtime, as_json: bool) -> anyhow::Result<ExitCode> {
    let mut stdout = std::io::stdout().lock();
    if as_json {
        let tools: Vec<_> = runtime.tools().collect();
        writeln!(stdout, "{}", serde_json::to_string_pretty(&tools)?)?;
        return Ok(ExitCode::SUCCESS);
    }
    for tool in runtime.tools() {
        let hints = [
            (tool.annotations.read_only, "read-only"),
            (tool.annotations.destructive, "destructive"),
            (tool.annotations.idempotent, "idempotent"),
        ]
        .iter()
        .filter(|(set, _)| *set)
        .map(|(_, name)| *name)
        .collect::<Vec<_>>()
        .join(", ");
        writeln!(stdout, "{} — {} [{hints}]", tool.name, tool.title)?;
        writeln!(stdout, "  {}", tool.description)?;
        writeln!(stdout, "  arguments: {}", serde_json::to_string(&tool.input_schema)?)?;
        writeln!(stdout)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `--approve`: approves every `ask`, and says so on stderr.
struct ApproveAll;

impl Approver for ApproveAll {
    fn approve(&self, role: &str, access: Access, path: &str, rule: &str) -> bool {
        let _ = writeln!(std::io::stderr(), "approved (--approve): {access} of `{path}` for role `{role}` (rule `{rule}`)");
        true
    }
}

/// The arguments of `toolcell call`: as given, from stdin (`-`) or from a file (`@FILE`).
fn call_arguments(given: &str) -> anyhow::Result<String> {
    if given == "-" {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut text).context("cannot read the arguments from stdin")?;
        return Ok(text);
    }
    match given.strip_prefix('@') {
        Some(path) => {
            std::fs::read_to_string(path).with_context(|| format!("cannot read the arguments from `{path}` (`@FILE` names a file of JSON)"))
        }
        None => Ok(given.to_owned()),
    }
}

fn call(runtime: &Runtime, args: &CallArgs) -> anyhow::Result<ExitCode> {
    let workspace = Workspace::open(&args.workspace)?;
    let arguments = call_arguments(&args.args)?;
    let task = args.task.as_deref().map(TaskBinding::parse).transpose().map_err(anyhow::Error::msg)?;
    // A task's session writes for the task's chain unless told otherwise.
    let owner = args.owner.as_deref().or(task.as_ref().map(TaskBinding::chain));
    let approver: Arc<dyn Approver> = Arc::new(ApproveAll);
    let outcome = runtime.call(&CallRequest {
        workspace: &workspace,
        role: &args.role,
        session_id: &args.session,
        tool: &args.tool,
        args: &arguments,
        approver: args.approve.then_some(&approver),
        owner,
        fences: &args.fences,
        task: task.as_ref(),
        principal: None,
        cancel: None,
    })?;
    let mut stdout = std::io::stdout().lock();
    if args.json {
        let result = match &outcome.result {
            Ok(output) => json!({ "ok": true, "text": output.text, "structured": output.structured }),
            Err(error) => json!({ "ok": false, "error": { "kind": error.kind, "message": error.message } }),
        };
        let mut document = result;
        document["call_id"] = json!(outcome.call_id);
        writeln!(stdout, "{}", serde_json::to_string_pretty(&document)?)?;
        return Ok(if outcome.result.is_ok() { ExitCode::SUCCESS } else { ExitCode::from(EXIT_TOOL_ERROR) });
    }
    match &outcome.result {
        // Text that came from a component is printed with its control characters escaped: it
        // must not drive the terminal (`--json` output is JSON-escaped already).
        Ok(output) => {
            writeln!(stdout, "{}", toolcell_types::escape_terminal(&output.text))?;
            Ok(ExitCode::SUCCESS)
        }
        Err(error) => {
            writeln!(std::io::stderr().lock(), "{}", toolcell_types::escape_terminal(&error.to_string()))?;
            Ok(ExitCode::from(EXIT_TOOL_ERROR))
        }
    }
}

fn lock(runtime: &Runtime, command: LockCommand) -> anyhow::Result<ExitCode> {
    let mut stdout = std::io::stdout().lock();
    match command {
        LockCommand::Acquire { pattern, workspace, owner, session, mode, ttl, json } => {
            let workspace = Workspace::open(&workspace)?;
            let request = LockRequest {
                pattern: workspace.lock_pattern(&pattern)?,
                session: session.unwrap_or_else(|| owner.clone()),
                owner,
                mode: LockMode::from_name(&mode).context("mode is `exclusive` or `shared`")?,
                ttl,
            };
            match runtime.acquire_lock(&workspace, &request) {
                Ok(lock) if json => writeln!(stdout, "{}", serde_json::to_string_pretty(&lock_json(&lock))?)?,
                Ok(lock) => writeln!(
                    stdout,
                    "locked `{}` ({}) for `{}` (session {}) until {}: token {}",
                    toolcell_types::escape_control(&lock.pattern),
                    lock.mode.as_str(),
                    toolcell_types::escape_control(&lock.owner),
                    toolcell_types::escape_control(&lock.session),
                    lock.expires_at(),
                    lock.fence
                )?,
                Err(Error::Lock(LockStoreError::Lock(conflict @ LockError::Conflict(_)))) => {
                    writeln!(std::io::stderr(), "{conflict}")?;
                    return Ok(ExitCode::from(EXIT_TOOL_ERROR));
                }
                Err(error) => return Err(error.into()),
            }
        }
        LockCommand::Release { token, workspace, owner } => {
            let workspace = Workspace::open(&workspace)?;
            match runtime.release_lock(&workspace, token, &owner) {
                Ok(lock) => writeln!(stdout, "released `{}` (token {})", toolcell_types::escape_control(&lock.pattern), lock.fence)?,
                Err(Error::Lock(LockStoreError::Lock(error))) => {
                    writeln!(std::io::stderr(), "{error}")?;
                    return Ok(ExitCode::from(EXIT_TOOL_ERROR));
                }
                Err(error) => return Err(error.into()),
            }
        }
        LockCommand::List { workspace, json } => {
            let locks = runtime.live_locks(&Workspace::open(&workspace)?)?;
            if json {
                let locks: Vec<_> = locks.iter().map(lock_json).collect();
                writeln!(stdout, "{}", serde_json::to_string_pretty(&locks)?)?;
            } else if locks.is_empty() {
                writeln!(stdout, "no live locks")?;
            } else {
                for lock in &locks {
                    writeln!(stdout, "{} (token {})", lock, lock.fence)?;
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn mcp(args: &RuntimeArgs, mcp: &McpArgs) -> anyhow::Result<ExitCode> {
    let runtime = build_serving_runtime(args).context("cannot start the toolcell host")?;
    let approver: Option<Arc<dyn Approver>> = if mcp.approve { Some(Arc::new(ApproveAll)) } else { None };
    let host = toolcell_host::Host::new(runtime, Workspace::open(&mcp.workspace)?, approver);
    let session_id = mcp.session.clone().unwrap_or_else(|| format!("mcp-{}", std::process::id()));
    let spawned = host.runtime().sessions().get(&session_id).is_some();
    let session = if spawned {
        // A spawned session is what its record says; the flags may only repeat it.
        let session = host.spawned_session(&session_id)?;
        if session.role() != mcp.role
            || mcp.task.as_deref().is_some_and(|task| Some(task) != session.task().map(ToString::to_string).as_deref())
        {
            anyhow::bail!(
                "session `{session_id}` was spawned for role `{}` and task `{}`; start it with `--role {}` (and `--task` left out or the same)",
                session.role(),
                session.task().map(ToString::to_string).unwrap_or_default(),
                session.role()
            );
        }
        session
    } else {
        let session = host.session(&mcp.role, &session_id)?;
        match mcp.task.as_deref() {
            Some(task) => session.with_task(TaskBinding::parse(task).map_err(anyhow::Error::msg)?),
            None => session,
        }
    };
    let server = toolcell_mcp::McpServer::new(session);
    writeln!(
        std::io::stderr(),
        "toolcell mcp: serving {} tools for role `{}` on stdio (workspace {}, policy {})",
        server.tools().len(),
        mcp.role,
        mcp.workspace.display(),
        host.runtime().policy().map_or("(none)", |policy| policy.file())
    )?;
    let executor = tokio::runtime::Builder::new_current_thread().enable_all().build().context("cannot start the async runtime")?;
    let served = executor.block_on(toolcell_mcp::serve_stdio(server));
    if spawned {
        // The agent disconnected: the session has ended.
        let _ = host.runtime().sessions().set_state(&session_id, SessionState::Ended);
    }
    served?;
    Ok(ExitCode::SUCCESS)
}

/// `toolcell serve`: one runtime, one host per configured workspace, MCP over HTTP.
fn serve(args: &RuntimeArgs, serve: &ServeArgs) -> anyhow::Result<ExitCode> {
    let config = toolcell_mcp::config::ServiceConfig::load(&serve.config)?;
    // `[store] url` in the service's configuration, unless `--store` names another.
    let with_store;
    let args = match (&config.store, store_url(args)) {
        (Some(url), None) => {
            with_store = RuntimeArgs { store: Some(url.clone()), ..args.clone() };
            &with_store
        }
        _ => args,
    };
    let runtime = Arc::new(build_serving_runtime(args).context("cannot start the toolcell host")?);
    let mut hosts = std::collections::BTreeMap::new();
    for (name, directory) in &config.workspaces {
        let workspace = Workspace::open(directory).with_context(|| format!("{}: workspace `{name}`", config.file))?;
        hosts.insert(name.clone(), toolcell_host::Host::shared(Arc::clone(&runtime), workspace, None));
    }
    let listen = serve.listen.or(config.listen).unwrap_or_else(|| std::net::SocketAddr::from(([127, 0, 0, 1], 8750)));
    let sessions = state_dir(args).map(|state| state.join("mcp-sessions"));
    let principals = config.principals.len();
    let service = toolcell_mcp::http::Service::new(config, hosts, sessions).map_err(anyhow::Error::msg)?;
    let executor = tokio::runtime::Builder::new_multi_thread().enable_all().build().context("cannot start the async runtime")?;
    executor.block_on(async {
        let listener = tokio::net::TcpListener::bind(listen).await.with_context(|| format!("cannot listen on {listen}"))?;
        let bound = listener.local_addr()?;
        writeln!(
            std::io::stderr(),
            "toolcell serve: listening on http://{bound}/ ({principals} principals, policy {})",
            runtime.policy().map_or("(none)", |policy| policy.file())
        )?;
        let shutdown = tokio_util::sync::CancellationToken::new();
        let stop = shutdown.clone();
        tokio::spawn(async move {
            let _ = tokio::signal::ctrl_c().await;
            stop.cancel();
        });
        toolcell_mcp::http::serve_http(service, listener, shutdown).await?;
        anyhow::Ok(())
    })?;
    Ok(ExitCode::SUCCESS)
}

/// `toolcell token`: a new random token and its hash line, or the hash line of a given token.
fn token(hash_stdin: bool) -> anyhow::Result<ExitCode> {
    use toolcell_mcp::config::{hex, token_hash};
    let mut stdout = std::io::stdout().lock();
    if hash_stdin {
        let mut token = String::new();
        std::io::stdin().read_line(&mut token)?;
        let token = token.trim();
        anyhow::ensure!(!token.is_empty(), "no token on stdin: pipe one in, e.g. `echo \"$TOKEN\" | toolcell token --hash`");
        writeln!(stdout, "token_sha256 = \"{}\"", hex(&token_hash(token)))?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|error| anyhow::anyhow!("no randomness for a token: {error}"))?;
    let token = format!("tc_{}", hex(&bytes));
    writeln!(stdout, "{token}")?;
    writeln!(stdout, "token_sha256 = \"{}\"", hex(&token_hash(&token)))?;
    Ok(ExitCode::SUCCESS)
}

fn sessions_list(runtime: &Runtime, workspace: Option<&std::path::Path>, as_json: bool) -> anyhow::Result<ExitCode> {
    let root = workspace.map(|workspace| Workspace::open(workspace).map(|opened| opened.root().to_path_buf())).transpose()?;
    let sessions: Vec<_> =
        runtime.sessions().list().into_iter().filter(|record| root.as_ref().is_none_or(|root| &record.workspace == root)).collect();
    let mut stdout = std::io::stdout().lock();
    if as_json {
        writeln!(stdout, "{}", serde_json::to_string_pretty(&sessions)?)?;
        return Ok(ExitCode::SUCCESS);
    }
    if sessions.is_empty() {
        writeln!(stdout, "no sessions")?;
    }
    for record in &sessions {
        writeln!(
            stdout,
            "{}  role={}  task={}  owner={}  parent={}  {}  created {}",
            record.id,
            record.role,
            record.task.as_deref().unwrap_or("-"),
            record.owner.as_deref().unwrap_or("-"),
            record.parent.as_deref().unwrap_or("-"),
            record.state.as_str(),
            record.created
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

fn report(runtime: &Runtime, args: &ReportArgs) -> anyhow::Result<ExitCode> {
    let workspace = Workspace::open(&args.workspace)?;
    let subject = match (&args.session, &args.chain) {
        (Some(session), _) => crate::report::Subject::Session(session),
        (None, Some(chain)) => crate::report::Subject::Chain(chain),
        (None, None) => anyhow::bail!("give --session ID or --chain CHAIN-ID"),
    };
    let gathered = match crate::report::gather(runtime, &workspace, &subject, args.role.as_deref()) {
        Ok(gathered) => gathered,
        Err(reason) => {
            writeln!(std::io::stderr(), "{reason}")?;
            return Ok(ExitCode::from(EXIT_TOOL_ERROR));
        }
    };
    std::fs::write(&args.output, crate::report::render(&gathered)).with_context(|| format!("cannot write {}", args.output.display()))?;
    writeln!(std::io::stdout(), "wrote {} ({} session(s))", args.output.display(), gathered.sessions.len())?;
    Ok(ExitCode::SUCCESS)
}

fn schema(runtime: &Runtime, role: &str, format: &str, strict: bool) -> anyhow::Result<ExitCode> {
    if let Some(policy) = runtime.policy()
        && policy.role(role).is_none()
    {
        let roles: Vec<&str> = policy.roles().map(|role| role.name()).collect();
        anyhow::bail!("the policy `{}` has no role `{role}`; its roles are: {}", policy.file(), roles.join(", "));
    }
    let format = match (toolcell_host::schemas::Format::from_name(format), strict) {
        (Some(toolcell_host::schemas::Format::OpenAi), true) => toolcell_host::schemas::Format::OpenAiStrict,
        (Some(_), true) => anyhow::bail!("`--strict` is OpenAI's strict mode: use it with `--format openai`"),
        (Some(format), false) => format,
        (None, _) => anyhow::bail!("unknown format `{format}`"),
    };
    let rendered = toolcell_host::schemas::render(format, toolcell_host::tools_for_role(runtime, role));
    writeln!(std::io::stdout(), "{}", serde_json::to_string_pretty(&rendered)?)?;
    Ok(ExitCode::SUCCESS)
}

/// `toolcell index build|status|drop`.
fn index(runtime: &Runtime, command: &IndexCommand) -> anyhow::Result<ExitCode> {
    let (IndexCommand::Build(args) | IndexCommand::Status(args) | IndexCommand::Drop(args)) = command;
    let workspace = Workspace::open(&args.workspace)?;
    let described = |report: &toolcell_runtime::IndexReport| {
        json!({
            "files": report.files,
            "trigrams": report.trigrams,
            "text_bytes": report.text_bytes,
            "index_bytes": report.index_bytes,
        })
    };
    let size = |bytes: u64| match bytes {
        0..1_048_576 => format!("{:.1} KiB", bytes as f64 / 1024.0),
        _ => format!("{:.1} MiB", bytes as f64 / 1_048_576.0),
    };
    let mut stdout = std::io::stdout().lock();
    match command {
        IndexCommand::Build(_) => {
            let report = runtime.build_index(&workspace)?;
            if args.json {
                let mut value = described(&report);
                value["took_ms"] = json!(report.took.as_millis());
                writeln!(stdout, "{value}")?;
            } else {
                writeln!(
                    stdout,
                    "indexed {} files ({} of text) in {:.2} s: {} trigrams, {} of index ({:.0}% of the text)",
                    report.files,
                    size(report.text_bytes),
                    report.took.as_secs_f64(),
                    report.trigrams,
                    size(report.index_bytes),
                    100.0 * report.index_bytes as f64 / report.text_bytes.max(1) as f64
                )?;
            }
            Ok(ExitCode::SUCCESS)
        }
        IndexCommand::Status(_) => {
            let status = runtime.index_status(&workspace)?;
            let (value, text, healthy) = match &status {
                toolcell_runtime::IndexStatus::Absent => {
                    (json!({"state": "absent"}), "no index: `toolcell index build` makes one".to_owned(), false)
                }
                toolcell_runtime::IndexStatus::Damaged(reason) => (
                    json!({"state": "damaged", "reason": reason}),
                    format!("the index cannot be used: {reason}. `toolcell index build` replaces it"),
                    false,
                ),
                toolcell_runtime::IndexStatus::Present { report, changed } => {
                    let mut value = described(report);
                    value["state"] = json!("present");
                    value["changed"] = json!(changed);
                    let text = format!(
                        "{} files indexed ({} of text, {} trigrams, {} of index); {changed} changed since",
                        report.files,
                        size(report.text_bytes),
                        report.trigrams,
                        size(report.index_bytes)
                    );
                    (value, text, true)
                }
            };
            writeln!(stdout, "{}", if args.json { value.to_string() } else { text })?;
            Ok(if healthy { ExitCode::SUCCESS } else { ExitCode::from(EXIT_TOOL_ERROR) })
        }
        IndexCommand::Drop(_) => {
            let dropped = runtime.drop_index(&workspace)?;
            writeln!(stdout, "{}", if dropped { "the index was removed" } else { "there was no index" })?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// `toolcell policy show`: the effective policy's text, once it has loaded as `policy check`
/// would load it.
fn policy_show(args: &RuntimeArgs) -> anyhow::Result<ExitCode> {
    let (name, text) = match &args.policy {
        None => (DEFAULT_POLICY_NAME.to_owned(), DEFAULT_POLICY.to_owned()),
        Some(path) => match builtin_policy_name(path) {
            Some(name) => {
                let (shown, text) = toolcell_host::builtin_policy(name).with_context(|| {
                    format!("there is no shipped policy `{name}`; the shipped ones are `builtin:default` and `builtin:workflow`")
                })?;
                (shown.to_owned(), text.to_owned())
            }
            None => (
                path.display().to_string(),
                std::fs::read_to_string(path).with_context(|| format!("cannot read the policy `{}`", path.display()))?,
            ),
        },
    };
    build_runtime(args)?;
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "# The effective policy, from {name}. To change it, copy it to a file and pass --policy FILE.")?;
    write!(stdout, "{text}")?;
    Ok(ExitCode::SUCCESS)
}

fn policy_check(args: &RuntimeArgs, file: &std::path::Path) -> anyhow::Result<ExitCode> {
    let checked = RuntimeArgs {
        policy: Some(file.to_path_buf()),
        state_dir: None,
        plugin_dir: plugin_dir(args),
        cache_dir: args.cache_dir.clone(),
        no_cache: args.no_cache,
        verbose: args.verbose,
        store: None,
    };
    let runtime = match build_runtime(&checked) {
        Ok(runtime) => runtime,
        Err(error) => match error.downcast_ref::<Error>() {
            Some(Error::Policy(policy_error)) => {
                // The operator is told the file as they gave it (agents only ever see its name).
                let shown = toolcell_runtime::PolicyError { file: file.display().to_string(), ..policy_error.clone() };
                writeln!(std::io::stderr(), "{shown}")?;
                return Ok(ExitCode::from(EXIT_TOOL_ERROR));
            }
            _ => return Err(error),
        },
    };
    let policy = runtime.policy().context("the runtime was built with a policy")?;
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{}: ok", policy.file())?;
    for role in policy.roles() {
        let tools = role.tools().map_or_else(|| "every tool".to_owned(), |tools| tools.join(", "));
        writeln!(stdout, "  role `{}`: {tools}", role.name())?;
    }
    Ok(ExitCode::SUCCESS)
}

/// What `policy explain` is asked.
struct Explain<'a> {
    role: &'a str,
    access: &'a str,
    path: &'a str,
    tool: Option<&'a str>,
    task: Option<&'a str>,
    json: bool,
}

fn policy_explain(runtime: &Runtime, asked: &Explain<'_>) -> anyhow::Result<ExitCode> {
    let role_name = asked.role;
    let policy = runtime.policy().context("the runtime was built with a policy")?;
    let Some(policy_role) = policy.role(role_name) else {
        let roles: Vec<&str> = policy.roles().map(|role| role.name()).collect();
        anyhow::bail!("the policy `{}` has no role `{role_name}`; its roles are: {}", policy.file(), roles.join(", "));
    };
    let task = asked.task.map(TaskBinding::parse).transpose().map_err(anyhow::Error::msg)?;
    let tool = match asked.tool {
        Some(tool) => {
            Some(runtime.canonical_tool(tool).with_context(|| format!("there is no tool `{tool}`; `toolcell tools` lists them"))?)
        }
        None => None,
    };
    let may_call = tool.map(|tool| policy_role.may_call(tool));
    // The role as a call of `tool` by a session bound to `task` sees it (rules naming the tool,
    // the task's paths); without them, the rules that name no tool.
    let role = policy.bind(role_name, tool.unwrap_or(""), task.as_ref()).context("the role's rules cannot be bound")?;
    let access = Access::from_name(asked.access).with_context(|| format!("unknown access `{}`", asked.access))?;
    // Lexical only: symlinks are resolved when a real call touches the workspace.
    let canonical = toolcell_policy::join_lexically(".", asked.path);
    let outside = canonical.is_none();
    let (effect, shown_path, rule, line) = match canonical {
        Some(canonical) => {
            let decision = policy.decide(&role, access, &canonical);
            (decision.effect.to_string(), canonical, decision.rule.to_string(), decision.line)
        }
        None => ("deny".to_owned(), asked.path.to_owned(), "workspace-boundary".to_owned(), None),
    };
    let denied = effect == "deny" || may_call == Some(false);
    let mut stdout = std::io::stdout().lock();
    if asked.json {
        let mut document = json!({
            "effect": effect,
            "access": access.as_str(),
            "path": shown_path,
            "role": role.name(),
            "rule": rule,
            "policy": policy.file(),
            "line": line,
        });
        if let (Some(tool), Some(may_call)) = (tool, may_call) {
            document["tool"] = json!({ "name": tool, "may_call": may_call });
        }
        writeln!(stdout, "{}", serde_json::to_string_pretty(&document)?)?;
    } else {
        if outside {
            writeln!(stdout, "deny: `{shown_path}` is outside the workspace (rule `workspace-boundary`)")?;
        } else {
            let location = line.map(|line| format!(", {} line {line}", policy.file())).unwrap_or_default();
            writeln!(stdout, "{effect}: {access} of `{shown_path}` by role `{}` (rule `{rule}`{location})", role.name())?;
        }
        if let (Some(tool), Some(may_call)) = (tool, may_call) {
            let verdict = if may_call { "may call it" } else { "may not call it (its `tools` list does not name it)" };
            writeln!(stdout, "tool `{tool}`: role `{role_name}` {verdict}")?;
        }
    }
    Ok(if denied { ExitCode::from(EXIT_TOOL_ERROR) } else { ExitCode::SUCCESS })
}
