//! Running tools: one call (`toolcell call`), an MCP server over stdio (`toolcell mcp`) or HTTP
//! (`toolcell serve`), and the tokens `serve` admits.

use super::*;

/// `--approve`: approves every `ask`, and says so on stderr.
pub(super) struct ApproveAll;

impl Approver for ApproveAll {
    fn approve(&self, role: &str, access: Access, path: &str, rule: &str) -> bool {
        let _ = writeln!(std::io::stderr(), "approved (--approve): {access} of `{path}` for role `{role}` (rule `{rule}`)");
        true
    }
}

/// The arguments of `toolcell call`: as given, from stdin (`-`) or from a file (`@FILE`).
pub(super) fn call_arguments(given: &str) -> anyhow::Result<String> {
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

pub(super) fn call(runtime: &Runtime, args: &CallArgs) -> anyhow::Result<ExitCode> {
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
            Err(error) => json!({ "ok": false, "error": error }),
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
            writeln!(std::io::stderr().lock(), "{}", toolcell_types::escape_terminal(&error.full_text()))?;
            Ok(ExitCode::from(EXIT_TOOL_ERROR))
        }
    }
}

pub(super) fn mcp(args: &RuntimeArgs, mcp: &McpArgs) -> anyhow::Result<ExitCode> {
    let runtime = build_serving_runtime(args, &[], None).context("cannot start the toolcell host")?;
    let approver: Option<Arc<dyn Approver>> = if mcp.approve { Some(Arc::new(ApproveAll)) } else { None };
    let Some(workspace) = &mcp.workspace else { return mcp_on_roots(runtime, approver, mcp) };
    let host = toolcell_host::Host::new(runtime, Workspace::open(workspace)?, approver);
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
        workspace.display(),
        host.runtime().policy().map_or_else(|| "(none)".to_owned(), |policy| policy.file().to_owned())
    )?;
    // One thread for the connections and MCP's own work, which is light: every call runs on the
    // blocking pool (so do the store's calls), and a request handed between worker threads
    // cost more than it did (HTTP read_file p50 1.69x stdio's with two workers, 1.63x here).
    let executor = tokio::runtime::Builder::new_current_thread().enable_all().build().context("cannot start the async runtime")?;
    let served = executor.block_on(toolcell_mcp::serve_stdio(server));
    if spawned {
        // The agent disconnected: the session has ended.
        let _ = host.runtime().sessions().set_state(&session_id, SessionState::Ended);
    }
    served?;
    Ok(ExitCode::SUCCESS)
}

/// `toolcell mcp` without `--workspace`: the workspace is the client's first root.
fn mcp_on_roots(runtime: Runtime, approver: Option<Arc<dyn Approver>>, mcp: &McpArgs) -> anyhow::Result<ExitCode> {
    if mcp.task.is_some() {
        anyhow::bail!("`--task` needs `--workspace`: a task's chain lives in one workspace");
    }
    let runtime = Arc::new(runtime);
    let session_id = mcp.session.clone().unwrap_or_else(|| format!("mcp-{}", std::process::id()));
    if runtime.sessions().get(&session_id).is_some() {
        anyhow::bail!("session `{session_id}` was spawned for a task: start it with `--workspace` (the task's workspace)");
    }
    let tools = toolcell_host::tools_for_role(&runtime, &mcp.role);
    if tools.is_empty() && runtime.policy().is_some_and(|policy| policy.role(&mcp.role).is_none()) {
        anyhow::bail!("the policy has no role `{}`: pick one of its roles with `--role`", mcp.role);
    }
    let (role, for_factory) = (mcp.role.clone(), Arc::clone(&runtime));
    let factory: toolcell_mcp::roots::SessionFactory = Box::new(move |directory| {
        let workspace = Workspace::open(directory).map_err(|error| format!("the client's root cannot be the workspace: {error}"))?;
        let host = toolcell_host::Host::shared(Arc::clone(&for_factory), workspace, approver.clone());
        host.session(&role, &session_id).map_err(|error| error.to_string())
    });
    let server = toolcell_mcp::McpServer::from_roots(tools, factory);
    writeln!(
        std::io::stderr(),
        "toolcell mcp: serving {} tools for role `{}` on stdio (workspace: the client's first root, policy {})",
        server.tools().len(),
        mcp.role,
        runtime.policy().map_or_else(|| "(none)".to_owned(), |policy| policy.file().to_owned())
    )?;
    let executor = tokio::runtime::Builder::new_current_thread().enable_all().build().context("cannot start the async runtime")?;
    executor.block_on(toolcell_mcp::serve_stdio(server))?;
    Ok(ExitCode::SUCCESS)
}

/// Descriptors kept for calls beyond one per connection, below which `serve` warns at start.
const OPEN_FILES_FOR_CALLS: u64 = 1024;

/// `toolcell serve`: one runtime, one host per configured workspace, MCP over HTTP.
pub(super) fn serve(args: &RuntimeArgs, serve: &ServeArgs) -> anyhow::Result<ExitCode> {
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
    if let Some(answer_timeout) = config.store_answer_timeout {
        // `serve` runs once per process: every store it opens waits this long.
        let _ = STORE_ANSWER_TIMEOUT.set(answer_timeout);
    }
    let json_logs = serve.log_format == "json";
    let subscriber = tracing_subscriber::fmt().with_writer(std::io::stderr).with_ansi(false);
    // rmcp's own lines only from warnings up: at info it names session ids (which a caller
    // could take over a session with) and echoes what clients send, unbounded.
    let targets = tracing_subscriber::filter::Targets::new()
        .with_default(tracing::Level::INFO)
        .with_target("rmcp", tracing::Level::WARN)
        .with_target("hyper", tracing::Level::WARN);
    {
        use tracing_subscriber::layer::SubscriberExt as _;
        use tracing_subscriber::util::SubscriberInitExt as _;
        // Only the first subscriber of the process counts; `serve` starts once.
        let _ = if json_logs {
            subscriber.json().flatten_event(true).finish().with(targets).try_init()
        } else {
            subscriber.finish().with(targets).try_init()
        };
    }
    let log =
        Arc::new(if json_logs { toolcell_mcp::operator::OperatorLog::traced() } else { toolcell_mcp::operator::OperatorLog::default() });
    let runtime = Arc::new(build_serving_runtime(args, &[serve.config.as_path()], Some(&log)).context("cannot start the toolcell host")?);
    let mut hosts = std::collections::BTreeMap::new();
    // What recovery did, said after the listening line (which stays the first line).
    let mut recovered = Vec::new();
    // One descriptor per connection, and calls hold some for what they have in flight.
    let open_files = toolcell_runtime::raise_open_file_limit();
    let wanted = u64::try_from(config.bounds.max_connections).unwrap_or(u64::MAX).saturating_add(OPEN_FILES_FOR_CALLS);
    if open_files < wanted {
        recovered.push(format!(
            "toolcell serve: warning: the limit of open files is {open_files}, below `max_connections` ({}) plus {OPEN_FILES_FOR_CALLS} for calls: raise it (`LimitNOFILE=` in a systemd unit, `ulimit -n`) or lower `max_connections`; a call that meets it fails, and a rollback that meets it stops writes until a restart",
            config.bounds.max_connections
        ));
    }
    for (name, directory) in &config.workspaces {
        let workspace = Workspace::open(directory).with_context(|| format!("{}: workspace `{name}`", config.file))?;
        // A call cut off when the last run stopped is rolled back now, before anyone reads.
        for recovery in runtime.recover(&workspace) {
            let what = match recovery.kind {
                toolcell_runtime::RecoveryKind::RolledBack => {
                    let listed = |paths: &[String]| paths.iter().map(|path| format!("`{path}`")).collect::<Vec<_>>().join(", ");
                    let mut what = format!("rolled back call `{}` ({} steps)", recovery.call_id, recovery.steps);
                    if !recovery.left.is_empty() {
                        what.push_str(&format!(
                            ", leaving the directories it made that hold what another session made: {}",
                            listed(&recovery.left)
                        ));
                    }
                    if !recovery.unrestored.is_empty() {
                        what.push_str(&format!(
                            ", not putting back what it removed where another session put a file or symlink in place of a directory on the way: {}",
                            listed(&recovery.unrestored)
                        ));
                    }
                    what
                }
                _ => format!(
                    "could not roll back call `{}`: {}",
                    recovery.call_id,
                    recovery.error.as_deref().unwrap_or("see the audit trail")
                ),
            };
            recovered.push(format!("toolcell serve: workspace `{name}`: {}", toolcell_types::escape_control(&what)));
        }
        hosts.insert(name.clone(), toolcell_host::Host::shared(Arc::clone(&runtime), workspace, None));
    }
    let listen = serve.listen.or(config.listen).unwrap_or_else(|| std::net::SocketAddr::from(([127, 0, 0, 1], 8750)));
    let sessions = state_dir(args).map(|state| state.join("mcp-sessions"));
    let principals = config.principals.len();
    let served = served_line(args, &config.workspaces);
    let service = toolcell_mcp::http::Service::new(config, hosts, sessions)
        .map_err(anyhow::Error::msg)?
        .with_operator_log(log)
        .with_readiness(readiness(args));
    // With a store, any host of the deployment serves any session (its own connection: a
    // session check does not wait behind the calls' lock and audit work).
    let service = match store_url(args) {
        Some(url) => service.with_shared_sessions(connect_store(&url)?),
        None => service,
    };
    let executor = tokio::runtime::Builder::new_current_thread().enable_all().build().context("cannot start the async runtime")?;
    let served = executor.block_on(async {
        let listener = tokio::net::TcpListener::bind(listen).await.with_context(|| format!("cannot listen on {listen}"))?;
        let bound = listener.local_addr()?;
        // The signals are taken before the listening line: one sent as soon as it is read
        // finds its handler in place.
        let shutdown = tokio_util::sync::CancellationToken::new();
        let stop = shutdown.clone();
        #[cfg(unix)]
        let terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::spawn(async move {
            #[cfg(unix)]
            stopped(terminate, &stop).await;
            #[cfg(not(unix))]
            stopped(&stop).await;
            stop.cancel();
        });
        let (reload, reloads) = tokio::sync::mpsc::unbounded_channel();
        #[cfg(unix)]
        {
            let file = serve.config.clone();
            // The policy file, when it is one (a shipped policy does not change).
            let policy = args.policy.clone().filter(|path| builtin_policy_name(path).is_none());
            let runtime = Arc::clone(&runtime);
            let mut hangups = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())?;
            tokio::spawn(async move {
                // SIGHUP: read the configuration again; one that does not parse changes nothing.
                while hangups.recv().await.is_some() {
                    match toolcell_mcp::config::ServiceConfig::load(&file) {
                        Ok(config) => {
                            let _ = reload.send(config);
                        }
                        Err(error) => {
                            let _ = writeln!(std::io::stderr(), "toolcell serve: not reloaded, the configuration in use is kept: {error}");
                        }
                    }
                    if let Some(policy) = &policy {
                        let _ = writeln!(std::io::stderr(), "{}", reload_policy(&runtime, policy));
                    }
                }
            });
        }
        #[cfg(not(unix))]
        drop(reload);
        let listening = format!(
            "toolcell serve: listening on http://{bound}/ ({principals} principals, policy {}, {served})",
            runtime.policy().map_or_else(|| "(none)".to_owned(), |policy| policy.file().to_owned())
        );
        for line in std::iter::once(&listening).chain(&recovered) {
            if json_logs {
                tracing::info!(target: "toolcell::serve", "{line}");
            } else {
                writeln!(std::io::stderr(), "{line}")?;
            }
        }
        toolcell_mcp::http::serve_http(service, listener, shutdown, reloads).await?;
        anyhow::Ok(())
    });
    // Calls still running past `shutdown_grace` are not waited for: the process ends, and
    // they with it (each is rolled back whole, as any call that does not finish).
    executor.shutdown_timeout(std::time::Duration::from_millis(100));
    served?;
    Ok(ExitCode::SUCCESS)
}

/// SIGHUP: put the policy file at `path` in force for the calls that start from now on; the
/// line that tells the operator what came of it. A policy that does not parse, or does not
/// fit the loaded tools, changes nothing.
fn reload_policy(runtime: &Runtime, path: &std::path::Path) -> String {
    match runtime.reload_policy_file(path) {
        Ok(()) => format!(
            "toolcell serve: reloaded the policy {}: calls that start from now on go by it (sessions kept)",
            toolcell_types::escape_control(&runtime.policy().map_or_else(String::new, |policy| policy.file().to_owned()))
        ),
        Err(error) => {
            format!("toolcell serve: policy not reloaded, the one in use is kept: {}", toolcell_types::escape_control(&error.to_string()))
        }
    }
}

/// Until SIGTERM (`terminate`) or SIGINT (Ctrl-C), or `stop` is cancelled otherwise.
#[cfg(unix)]
async fn stopped(mut terminate: tokio::signal::unix::Signal, stop: &tokio_util::sync::CancellationToken) {
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate.recv() => {}
        () = stop.cancelled() => {}
    }
}

/// Until Ctrl-C, or `stop` is cancelled otherwise.
#[cfg(not(unix))]
async fn stopped(stop: &tokio_util::sync::CancellationToken) {
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = stop.cancelled() => {}
    }
}

/// What `/readyz` checks: that the store of locks and the audit trail can be reached (a query
/// on PostgreSQL; the state directory, else). Its reasons name neither paths nor workspaces.
fn readiness(args: &RuntimeArgs) -> Box<dyn Fn() -> Result<(), String> + Send + Sync> {
    match store_url(args) {
        Some(url) => {
            let answer_timeout = STORE_ANSWER_TIMEOUT.get().copied().unwrap_or(toolcell_store_postgres::DEFAULT_ANSWER_TIMEOUT);
            let store = toolcell_store_postgres::PostgresStore::open_with(&url, answer_timeout).ok();
            Box::new(move || match &store {
                Some(store) => store.schema_version().map(|_| ()).map_err(|_| "the store cannot be reached".to_owned()),
                None => Err("the store's URL does not parse".to_owned()),
            })
        }
        None => {
            let state = state_dir(args);
            Box::new(move || match &state {
                Some(state) if !state.is_dir() => Err("the state directory is gone".to_owned()),
                _ => Ok(()),
            })
        }
    }
}

/// Where `serve` keeps locks and the audit trail, and the workspaces it serves, for its
/// listening line: `store STORE, workspaces NAME (DIR), ...` (a PostgreSQL store by its name,
/// which never holds a password).
fn served_line(args: &RuntimeArgs, workspaces: &std::collections::BTreeMap<String, PathBuf>) -> String {
    let store = match store_url(args) {
        Some(url) => {
            toolcell_store_postgres::PostgresStore::open(&url).map_or_else(|_| "PostgreSQL".to_owned(), |store| store.name().to_owned())
        }
        None => match state_dir(args) {
            Some(state) => format!("the state directory {}", state.display()),
            None => "(no state directory)".to_owned(),
        },
    };
    let workspaces: Vec<String> = workspaces.iter().map(|(name, directory)| format!("{name} ({})", directory.display())).collect();
    format!("store {store}, workspaces {}", workspaces.join(", "))
}

/// `toolcell token`: a new random token and its hash line, or the hash line of a given token.
pub(super) fn token(hash_stdin: bool) -> anyhow::Result<ExitCode> {
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
