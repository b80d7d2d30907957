//! The commands: build the runtime from validated flags, then do one thing.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use serde_json::json;
use std::sync::Arc;

use toolcell_runtime::{
    Access, Approver, AuditLog, CacheOutcome, CallRequest, Error, LockError, LockMode, LockRequest, LockStoreError, Runtime, Workspace,
    lock_json,
};

use crate::cli::{AuditCommand, CallArgs, Cli, Command, LockCommand, McpArgs, PolicyCommand, RuntimeArgs, ToolsCommand};

use toolcell_host::{DEFAULT_POLICY, DEFAULT_POLICY_NAME};

/// Exit status when a tool returned an error.
pub const EXIT_TOOL_ERROR: u8 = 1;
/// Exit status when the host itself failed (bad flags, unusable workspace, bad component).
pub const EXIT_HOST_ERROR: u8 = 2;

/// Run the parsed command line.
pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    if let Command::Policy(PolicyCommand::Check { file }) = &cli.command {
        return policy_check(&cli.runtime, file);
    }
    if let Command::Audit(command) = &cli.command {
        return audit(&cli.runtime, command);
    }
    if let Command::Mcp(args) = &cli.command {
        return mcp(&cli.runtime, args);
    }
    if let Command::Demo { workspace } = &cli.command {
        return crate::demo::run(&cli.runtime, workspace.clone());
    }
    if let Command::Conformance { component, json } = &cli.command {
        return conformance(&cli.runtime, component, *json);
    }
    if let Command::Tools { command: Some(ToolsCommand::Add { component }), .. } = &cli.command {
        return tools_add(&cli.runtime, component);
    }
    let runtime = build_runtime(&cli.runtime)?;
    match cli.command {
        Command::Tools { json, command: None } => tools(&runtime, json),
        Command::Call(args) => call(&runtime, &args),
        Command::Policy(PolicyCommand::Explain { role, access, path }) => policy_explain(&runtime, &role, &access, &path),
        Command::Schema { role, format } => schema(&runtime, &role, &format),
        Command::Lock(command) => lock(&runtime, command),
        Command::Policy(PolicyCommand::Check { .. })
        | Command::Audit(_)
        | Command::Mcp(_)
        | Command::Demo { .. }
        | Command::Conformance { .. }
        | Command::Tools { command: Some(_), .. } => {
            unreachable!("handled above")
        }
    }
}

/// The runtime with the built-in tools and the plugins.
pub fn build_runtime(args: &RuntimeArgs) -> anyhow::Result<Runtime> {
    build_runtime_with(args, None)
}

/// The plugin directory: `--plugin-dir`, else `plugins` in the state directory.
fn plugin_dir(args: &RuntimeArgs) -> Option<PathBuf> {
    args.plugin_dir.clone().or_else(|| state_dir(args).map(|state| state.join("plugins")))
}

/// The runtime with the built-in tools, the plugins, and `extra` (a component being added).
fn build_runtime_with(args: &RuntimeArgs, extra: Option<(String, Vec<u8>)>) -> anyhow::Result<Runtime> {
    let mut builder = toolcell_host::builtin_runtime();
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
        Some(path) => builder.policy_file(path),
        None => builder.policy(DEFAULT_POLICY_NAME, DEFAULT_POLICY),
    };
    let runtime = builder.build().context("cannot start the toolcell host")?;
    for warning in runtime.warnings() {
        writeln!(std::io::stderr().lock(), "warning: {warning}")?;
    }
    if args.verbose {
        let mut stderr = std::io::stderr().lock();
        for loaded in runtime.loaded() {
            let how = match loaded.cache {
                CacheOutcome::Compiled => "compiled",
                CacheOutcome::Cached => "loaded from cache",
                CacheOutcome::Rejected => "compiled again: the cached artifact failed authentication",
            };
            writeln!(stderr, "{}: {} ({how})", loaded.tool, loaded.origin)?;
        }
    }
    Ok(runtime)
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

fn audit(args: &RuntimeArgs, command: &AuditCommand) -> anyhow::Result<ExitCode> {
    let directory = state_dir(args).context("no state directory: pass --state-dir or set TOOLCELL_STATE_DIR")?;
    // `verify` checks what is there and creates nothing; `tail` may wait for a log to come.
    let opened = match command {
        AuditCommand::Verify => AuditLog::existing(&directory),
        AuditCommand::Tail { .. } => AuditLog::open(&directory),
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
    let text = log.read().with_context(|| format!("cannot read `{}`", log.path().display()))?;
    match command {
        AuditCommand::Verify => {
            match log.head().map_err(|error| toolcell_audit::Tamper { line: 0, reason: format!("{error}") }).and_then(|head| match head {
                Some(head) => toolcell_audit::verify_with_head(text.lines(), &head),
                None if text.is_empty() => Err(toolcell_audit::Tamper {
                    line: 0,
                    reason: "the log is empty and has no head file: nothing was ever recorded here".to_owned(),
                }),
                None => toolcell_audit::verify(text.lines()),
            }) {
                Ok(verified) => {
                    writeln!(
                        std::io::stdout(),
                        "{}: ok, {} records, last hash {}",
                        log.path().display(),
                        verified.records,
                        verified.last_hash
                    )?;
                    Ok(ExitCode::SUCCESS)
                }
                Err(tamper) => {
                    writeln!(std::io::stderr(), "{}: {tamper}", log.path().display())?;
                    Ok(ExitCode::from(EXIT_TOOL_ERROR))
                }
            }
        }
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
            let mut offset = text.len() as u64;
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

fn conformance(args: &RuntimeArgs, component: &std::path::Path, as_json: bool) -> anyhow::Result<ExitCode> {
    let wasm = std::fs::read(component).with_context(|| format!("cannot read `{}`", component.display()))?;
    let options =
        toolcell_conformance::Options { cache_dir: if args.no_cache { None } else { args.cache_dir.clone().or_else(default_cache_dir) } };
    let report = toolcell_conformance::check(&component.display().to_string(), &wasm, &options);
    let mut stdout = std::io::stdout().lock();
    if as_json {
        writeln!(stdout, "{}", serde_json::to_string_pretty(&report)?)?;
    } else {
        write!(stdout, "{}", report.render())?;
    }
    Ok(if report.passed() { ExitCode::SUCCESS } else { ExitCode::from(EXIT_TOOL_ERROR) })
}

fn tools_add(args: &RuntimeArgs, component: &std::path::Path) -> anyhow::Result<ExitCode> {
    let directory = plugin_dir(args).context("no plugin directory: pass --plugin-dir or --state-dir")?;
    let wasm = std::fs::read(component).with_context(|| format!("cannot read `{}`", component.display()))?;
    let origin = format!("plugin:{}", component.display());
    // Loaded beside everything else: its imports, description and schema are checked, and a
    // name collision or a pin mismatch is refused before anything is installed.
    let runtime = build_runtime_with(args, Some((origin.clone(), wasm.clone())))?;
    let added = runtime.loaded().iter().find(|loaded| loaded.origin == origin).context("the component was loaded")?;
    std::fs::create_dir_all(&directory).with_context(|| format!("cannot create `{}`", directory.display()))?;
    let target = directory.join(format!("{}.wasm", added.tool));
    let temporary = directory.join(format!(".{}.wasm.tmp", added.tool));
    std::fs::write(&temporary, &wasm)
        .and_then(|()| std::fs::rename(&temporary, &target))
        .with_context(|| format!("cannot install `{}`", target.display()))?;
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "added `{}` as {}", added.tool, target.display())?;
    writeln!(stdout, "sha256 {}", added.sha256)?;
    writeln!(
        stdout,
        "pin it in the policy, and give it to the roles that may call it:

[plugins.{}]
sha256 = \"{}\"",
        added.tool, added.sha256
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

fn call(runtime: &Runtime, args: &CallArgs) -> anyhow::Result<ExitCode> {
    let workspace = Workspace::open(&args.workspace)?;
    let approver: Arc<dyn Approver> = Arc::new(ApproveAll);
    let outcome = runtime.call(&CallRequest {
        workspace: &workspace,
        role: &args.role,
        session_id: &args.session,
        tool: &args.tool,
        args: &args.args,
        approver: args.approve.then_some(&approver),
        owner: args.owner.as_deref(),
        fences: &args.fences,
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
                    lock.pattern,
                    lock.mode.as_str(),
                    lock.owner,
                    lock.session,
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
                Ok(lock) => writeln!(stdout, "released `{}` (token {})", lock.pattern, lock.fence)?,
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
    let runtime = build_runtime(args)?;
    let approver: Option<Arc<dyn Approver>> = if mcp.approve { Some(Arc::new(ApproveAll)) } else { None };
    let host = toolcell_host::Host::new(runtime, Workspace::open(&mcp.workspace)?, approver);
    let session_id = mcp.session.clone().unwrap_or_else(|| format!("mcp-{}", std::process::id()));
    let session = host.session(&mcp.role, &session_id)?;
    let server = toolcell_mcp::McpServer::new(session);
    writeln!(
        std::io::stderr(),
        "toolcell mcp: serving {} tools for role `{}` on stdio (workspace {}, policy {})",
        server.tools().len(),
        mcp.role,
        mcp.workspace.display(),
        host.runtime().policy().map_or("(none)", |policy| policy.file())
    )?;
    let executor =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().context("cannot start the async runtime")?;
    executor.block_on(toolcell_mcp::serve_stdio(server))?;
    Ok(ExitCode::SUCCESS)
}

fn schema(runtime: &Runtime, role: &str, format: &str) -> anyhow::Result<ExitCode> {
    if let Some(policy) = runtime.policy()
        && policy.role(role).is_none()
    {
        let roles: Vec<&str> = policy.roles().map(|role| role.name()).collect();
        anyhow::bail!("the policy `{}` has no role `{role}`; its roles are: {}", policy.file(), roles.join(", "));
    }
    let format = toolcell_host::schemas::Format::from_name(format).with_context(|| format!("unknown format `{format}`"))?;
    let rendered = toolcell_host::schemas::render(format, toolcell_host::tools_for_role(runtime, role));
    writeln!(std::io::stdout(), "{}", serde_json::to_string_pretty(&rendered)?)?;
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

fn policy_explain(runtime: &Runtime, role_name: &str, access: &str, path: &str) -> anyhow::Result<ExitCode> {
    let policy = runtime.policy().context("the runtime was built with a policy")?;
    let role = policy.role(role_name).with_context(|| {
        let roles: Vec<&str> = policy.roles().map(|role| role.name()).collect();
        format!("the policy `{}` has no role `{role_name}`; its roles are: {}", policy.file(), roles.join(", "))
    })?;
    let access = Access::from_name(access).with_context(|| format!("unknown access `{access}`"))?;
    // Lexical only: symlinks are resolved when a real call touches the workspace.
    let Some(canonical) = toolcell_policy::join_lexically(".", path) else {
        writeln!(std::io::stdout(), "deny: `{path}` is outside the workspace (rule `workspace-boundary`)")?;
        return Ok(ExitCode::SUCCESS);
    };
    let decision = policy.decide(role, access, &canonical);
    let location = decision.line.map(|line| format!(", {} line {line}", policy.file())).unwrap_or_default();
    writeln!(
        std::io::stdout(),
        "{}: {access} of `{canonical}` by role `{}` (rule `{}`{location})",
        decision.effect,
        role.name(),
        decision.rule
    )?;
    Ok(ExitCode::SUCCESS)
}
