//! The commands: build the runtime from validated flags, then do one thing.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use serde_json::json;
use toolcell_runtime::{CacheOutcome, CallRequest, Runtime, RuntimeBuilder, Workspace};

use crate::cli::{CallArgs, Cli, Command, RuntimeArgs};

/// Exit status when a tool returned an error.
pub const EXIT_TOOL_ERROR: u8 = 1;
/// Exit status when the host itself failed (bad flags, unusable workspace, bad component).
pub const EXIT_HOST_ERROR: u8 = 2;

/// Run the parsed command line.
pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let runtime = build_runtime(&cli.runtime)?;
    match cli.command {
        Command::Tools { json } => tools(&runtime, json),
        Command::Call(args) => call(&runtime, &args),
        Command::Demo { workspace } => crate::demo::run(&runtime, workspace),
    }
}

/// The runtime with the built-in tools.
pub fn build_runtime(args: &RuntimeArgs) -> anyhow::Result<Runtime> {
    let mut builder = RuntimeBuilder::new();
    if !args.no_cache
        && let Some(directory) = args.cache_dir.clone().or_else(default_cache_dir)
    {
        builder = builder.cache_dir(directory);
    }
    for (name, wasm) in toolcell_builtins::components() {
        builder = builder.component(format!("builtin:{name}"), wasm);
    }
    let runtime = builder.build().context("cannot start the toolcell host")?;
    if args.verbose {
        let mut stderr = std::io::stderr().lock();
        for loaded in runtime.loaded() {
            let how = match loaded.cache {
                CacheOutcome::Compiled => "compiled",
                CacheOutcome::Cached => "loaded from cache",
            };
            writeln!(stderr, "{}: {} ({how})", loaded.tool, loaded.origin)?;
        }
    }
    Ok(runtime)
}

fn default_cache_dir() -> Option<PathBuf> {
    let from_env = |name: &str| std::env::var_os(name).filter(|value| !value.is_empty()).map(PathBuf::from);
    from_env("TOOLCELL_CACHE_DIR")
        .or_else(|| from_env("XDG_CACHE_HOME").map(|cache| cache.join("toolcell")))
        .or_else(|| from_env("HOME").map(|home| home.join(".cache").join("toolcell")))
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

fn call(runtime: &Runtime, args: &CallArgs) -> anyhow::Result<ExitCode> {
    let workspace = Workspace::open(&args.workspace)?;
    let outcome = runtime.call(&CallRequest {
        workspace: &workspace,
        role: &args.role,
        session_id: &args.session,
        tool: &args.tool,
        args: &args.args,
        approver: None,
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
        Ok(output) => {
            writeln!(stdout, "{}", output.text)?;
            Ok(ExitCode::SUCCESS)
        }
        Err(error) => {
            writeln!(std::io::stderr().lock(), "{error}")?;
            Ok(ExitCode::from(EXIT_TOOL_ERROR))
        }
    }
}
