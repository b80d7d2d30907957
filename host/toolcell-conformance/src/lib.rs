//! The conformance suite: what a tool component must do to run in toolcell, checked through
//! the real host.
//!
//! [`check`] loads one component alone in a runtime with short limits and a policy of its own,
//! over a scratch workspace beside a canary directory, and runs four groups of checks:
//!
//! - **load**: the component's imports stay within the `tool-component` world, its
//!   `describe()` gives a valid name, a description and a valid JSON Schema; the hosts it
//!   declares in a `toolcell:network` section are well formed (one that imports `wasi:http`
//!   without declaring any gets a warning, not a failure);
//! - **contract**: malformed arguments are refused as `invalid-args`; arguments generated from
//!   its own schema (typical values, edge values, hostile paths, huge strings) never make it
//!   trap, and every error it returns has a message;
//! - **sandbox**: nothing outside the workspace is read or written (the canary stays intact
//!   and never appears in a result), no host path appears in a result, it stays within its
//!   deadline and memory, and what the host refuses is reported as `denied` (a read-only tool
//!   may instead report refused reads per item, with the host stating each refusal);
//! - **behaviour**: a component that claims a standard tool name (`read_file`, `read_many`,
//!   `file_info`, `list_files`, `directory_tree`, `search_files`, `write_file`, `edit_file`,
//!   `insert_text`, `apply_patch`, `create_directory`, `move_file`, `delete_file`) does what
//!   that tool does.
//!
//! Third parties run it in their CI with `toolcell conformance my_tool.wasm` (`--json` for a
//! machine-readable report; exit status 1 if a check fails).

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;
use serde_json::{Value, json};
use toolcell_runtime::{CallOutcome, CallRequest, Limits, Runtime, RuntimeBuilder, Workspace};
use toolcell_types::{ToolErrorKind, ToolOutput};

mod behaviour;
mod generate;
mod junit;
mod network;

use behaviour::*;

pub use generate::generate;

/// The canary's content: it must never appear in a result.
const CANARY: &str = "TOOLCELL-CONFORMANCE-CANARY-7f3e";
/// Failures listed per check, at most.
const MAX_LISTED: usize = 5;

/// The limits components are checked under: generous for a file tool, short for a test run.
pub const LIMITS: Limits = Limits {
    deadline: Duration::from_secs(2),
    memory_bytes: 256 << 20,
    output_bytes: 256 << 10,
    host_calls: 100_000,
    open_files: 256,
    audit_records: 1000,
};

/// The policy of the suite: `agent` may do anything inside the workspace; `locked-out` may
/// call the tool but touch nothing.
mod chains;

const POLICY: &str = r#"
version = 1

[writes]
read_before_write = "off"

[roles.agent]
tools = ["*"]
may_spawn = ["impl"]
may_lock_for_chains = true

[[roles.agent.rules]]
id = "agent-all"
access = ["read", "list", "write", "delete"]
paths = ["**"]
effect = "allow"

[roles.locked-out]
tools = ["*"]

[roles.impl]
tools = ["*"]
"#;

/// One check's verdict.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Check {
    /// `load`, `contract`, `sandbox` or `behaviour`.
    pub group: &'static str,
    /// What was checked.
    pub name: String,
    /// Whether it passed.
    pub passed: bool,
    /// What was found: on failure, what went wrong and what to do.
    pub detail: String,
}

/// The whole report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Report {
    /// The component as given.
    pub component: String,
    /// The tool it provides, if it loaded.
    pub tool: Option<String>,
    /// Every check, in order.
    pub checks: Vec<Check>,
    /// What does not fail the suite but should be fixed (a network tool that declares no
    /// hosts), each saying what to do.
    pub warnings: Vec<String>,
}

impl Report {
    /// Whether every check passed.
    pub fn passed(&self) -> bool {
        self.checks.iter().all(|check| check.passed)
    }

    /// The report for a human: one line per check, details indented.
    pub fn render(&self) -> String {
        let mut text = format!(
            "conformance of {}{}\n",
            self.component,
            self.tool.as_deref().map(|tool| format!(" (tool `{tool}`)")).unwrap_or_default()
        );
        for check in &self.checks {
            text.push_str(&format!("  {} {:<9} {}\n", if check.passed { "PASS" } else { "FAIL" }, check.group, check.name));
            if !check.detail.is_empty() {
                for line in check.detail.lines() {
                    text.push_str(&format!("         {line}\n"));
                }
            }
        }
        for warning in &self.warnings {
            text.push_str(&format!("  WARN {warning}\n"));
        }
        let failed = self.checks.iter().filter(|check| !check.passed).count();
        text.push_str(&if failed == 0 {
            format!("all {} checks passed\n", self.checks.len())
        } else {
            format!("{failed} of {} checks failed\n", self.checks.len())
        });
        text
    }

    fn record(&mut self, group: &'static str, name: &str, failures: &[String], passed_detail: String) {
        let detail = if failures.is_empty() {
            passed_detail
        } else {
            let mut listed: Vec<String> = failures.iter().take(MAX_LISTED).cloned().collect();
            if failures.len() > MAX_LISTED {
                listed.push(format!("(and {} more)", failures.len() - MAX_LISTED));
            }
            listed.join("\n")
        };
        self.checks.push(Check { group, name: name.to_owned(), passed: failures.is_empty(), detail });
    }
}

/// Where to cache compiled components (the suite compiles the component once).
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// The compiled-component cache.
    pub cache_dir: Option<PathBuf>,
    /// Imports the component may link as stubs that refuse every call
    /// (`namespace:package/interface` or `namespace:package/*`), as the policy's
    /// `[plugins.NAME] stub_imports` would let it.
    pub stub_imports: Vec<String>,
}

/// Run the suite on the component `wasm` (`origin` names it in the report).
pub fn check(origin: &str, wasm: &[u8], options: &Options) -> Report {
    let mut report = Report { component: origin.to_owned(), tool: None, checks: Vec::new(), warnings: Vec::new() };
    let mut builder = RuntimeBuilder::new().component(origin, wasm.to_vec()).policy("conformance-policy.toml", POLICY).limits(LIMITS);
    if let Some(cache) = &options.cache_dir {
        builder = builder.cache_dir(cache);
    }
    if !options.stub_imports.is_empty() {
        builder = builder.stub_imports("*", options.stub_imports.iter().cloned());
    }
    let runtime = match builder.build() {
        Ok(runtime) => runtime,
        Err(error) => {
            report.record("load", "loads: imports, description and schema", &[error.to_string()], String::new());
            return report;
        }
    };
    let is_host_tool = |name: &str| toolcell_runtime::NATIVE_TOOLS.contains(&name) || toolcell_runtime::ADAPTER_TOOLS.contains(&name);
    let Some(info) = runtime.tools().find(|tool| !is_host_tool(tool.name.as_str())).cloned() else {
        report.record("load", "loads: imports, description and schema", &["the component provides no tool".to_owned()], String::new());
        return report;
    };
    let tool = info.name.to_string();
    report.tool = Some(tool.clone());
    report.record(
        "load",
        "loads: imports, description and schema",
        &[],
        if options.stub_imports.is_empty() {
            format!("`{tool}`: imports within `tool-component`, a valid name, description and input schema")
        } else {
            format!(
                "`{tool}`: imports within `tool-component` (beside the stubs allowed for {}), a valid name, description and input schema",
                options.stub_imports.join(", ")
            )
        },
    );
    let imports = runtime.loaded().iter().find(|loaded| loaded.origin == origin).map(|loaded| loaded.imports.clone()).unwrap_or_default();
    network::check_declaration(&mut report, &tool, wasm, &imports);

    let scratch = match Scratch::new() {
        Ok(scratch) => scratch,
        Err(error) => {
            report.record("load", "scratch workspace", &[format!("cannot create it: {error}")], String::new());
            return report;
        }
    };

    // Contract: malformed arguments.
    let mut failures = Vec::new();
    for raw in ["[]", "null", "42", "\"text\"", "{", "{\"path\": "] {
        let outcome = scratch.call(&runtime, "agent", &tool, raw);
        match &outcome.result {
            Err(error) if error.kind == ToolErrorKind::InvalidArgs => {}
            other => failures.push(format!("arguments `{raw}` were not refused as invalid-args: {}", summary(other))),
        }
    }
    report.record(
        "contract",
        "malformed arguments are refused as invalid-args",
        &failures,
        "6 malformed argument texts refused".to_owned(),
    );

    // Contract and sandbox: generated arguments.
    let generated = generate(&info.input_schema);
    let mut traps = Vec::new();
    let mut unstructured = Vec::new();
    let mut limits = Vec::new();
    let mut leaks = Vec::new();
    for args in &generated {
        scratch.reset();
        let text = args.to_string();
        let outcome = scratch.call(&runtime, "agent", &tool, &text);
        let shown = shorten(&text);
        let message = match &outcome.result {
            Ok(output) => output.text.clone(),
            Err(error) => error.message.clone(),
        };
        if message.contains("ran past its deadline") || message.contains("memory limit") {
            limits.push(format!("with {shown}: {}", first_line(&message)));
        } else if outcome.trapped {
            // The guest's own panic message, if it printed one, says where to look.
            let stderr = String::from_utf8_lossy(&outcome.stderr.bytes);
            let lines: Vec<&str> = stderr.lines().collect();
            let said = match python_exception(&lines) {
                // An exception of an interpreted tool, in its own terms.
                Some(raised) => format!("; it raised {raised}"),
                None => match lines.iter().position(|line| line.contains("panicked at ")) {
                    Some(index) => {
                        let at = lines[index].split_once("panicked at ").map_or("", |(_, at)| at).trim_end_matches(':');
                        let what = lines.get(index + 1).map(|line| shorten(line.trim())).unwrap_or_default();
                        format!("; it panicked at {at}: {what}")
                    }
                    None => lines
                        .iter()
                        .rfind(|line| !line.trim().is_empty())
                        .map(|line| format!("; it said: {}", shorten(line.trim())))
                        .unwrap_or_default(),
                },
            };
            traps.push(format!("trapped with {shown}: {}{said}", first_line(&message)));
        }
        if let Err(error) = &outcome.result
            && error.message.trim().is_empty()
        {
            unstructured.push(format!("an empty `{}` error with {shown}", error.kind));
        }
        if let Some(leak) = scratch.leak(&outcome) {
            leaks.push(format!("with {shown}: {leak}"));
        }
    }
    let tried = format!("{} argument sets generated from the input schema", generated.len());
    report.record("contract", "never traps on schema-generated arguments", &traps, tried.clone());
    report.record("contract", "every error carries a message", &unstructured, tried.clone());
    report.record(
        "sandbox",
        "stays within its deadline and memory",
        &limits,
        format!("{tried}, under {} s and {} MiB", LIMITS.deadline.as_secs(), LIMITS.memory_bytes >> 20),
    );
    report.record("sandbox", "shows no host path and nothing from outside the workspace", &leaks, tried);
    let outside = scratch.outside_intact();
    report.record(
        "sandbox",
        "leaves everything outside the workspace untouched",
        &outside.into_iter().collect::<Vec<_>>(),
        "the canary directory beside the workspace is intact".to_owned(),
    );

    // Sandbox: refusals surface as `denied`.
    let mut failures = Vec::new();
    let mut refused = 0;
    for args in generated.iter().take(40) {
        scratch.reset();
        let outcome = scratch.call(&runtime, "locked-out", &tool, &args.to_string());
        if outcome.denials.is_empty() {
            continue;
        }
        refused += 1;
        match &outcome.result {
            Err(error) if error.kind == ToolErrorKind::Denied => {}
            // A read-only tool may report refused reads per item (a multi-file read); the host
            // then states every refusal in the result itself.
            Ok(output)
                if info.annotations.read_only
                    && outcome.denials.iter().all(|denial| output.text.contains(&format!("Refused by the host: {}", denial.message))) => {}
            other => {
                failures.push(format!("with {}: the host refused access but the result was {}", shorten(&args.to_string()), summary(other)))
            }
        }
    }
    report.record(
        "sandbox",
        "refused accesses surface as denied",
        &failures,
        format!("{refused} calls by a role that may touch nothing were refused and reported as denied (or, by a read-only tool, stated by the host)"),
    );

    // Behaviour of standard tools.
    for (name, run) in behaviours(&tool) {
        scratch.reset();
        let failures: Vec<String> = run(&scratch, &runtime).err().into_iter().collect();
        report.record("behaviour", name, &failures, String::new());
    }

    // Contract: every structured result the calls above returned matches the output schema.
    let results = scratch.results.borrow();
    let failures = output_mismatches(&runtime, &results);
    report.record(
        "contract",
        "structured results match the declared output schema",
        &failures,
        format!("{} successful results checked", results.len()),
    );
    report
}

/// What is wrong with each structured result of `results` against its tool's output schema.
fn output_mismatches(runtime: &Runtime, results: &[(String, String, Option<Value>)]) -> Vec<String> {
    let mut failures = Vec::new();
    for (tool, args, structured) in results {
        let Some(info) = runtime.tools().find(|info| info.name.as_str() == tool) else {
            continue;
        };
        let shown = shorten(args);
        match (&info.output_schema, structured) {
            (Some(schema), Some(value)) => match jsonschema::validator_for(schema) {
                Ok(validator) => {
                    if let Some(error) = validator.iter_errors(value).next() {
                        failures.push(format!("`{tool}` with {shown}: {} (at `{}`)", shorten(&error.to_string()), error.instance_path()));
                    }
                }
                Err(error) => failures.push(format!("`{tool}`'s output schema cannot be compiled: {error}")),
            },
            (Some(_), None) => failures.push(format!("`{tool}` with {shown} returned no structured value, though it declares an output schema")),
            (None, Some(_)) => failures.push(format!(
                "`{tool}` with {shown} returned a structured value but declares no output schema: describe it (the Rust SDK's `ToolInfo::output`)"
            )),
            (None, None) => {}
        }
    }
    failures.dedup();
    failures
}

fn summary(result: &Result<ToolOutput, toolcell_types::ToolError>) -> String {
    match result {
        Ok(output) => format!("success: {}", shorten(&output.text)),
        Err(error) => format!("`{}`: {}", error.kind, first_line(&error.message)),
    }
}

/// A Python traceback's exception and innermost frame, from what a component printed:
/// `ZeroDivisionError: division by zero (app.py, line 18, in helper)`.
fn python_exception(lines: &[&str]) -> Option<String> {
    let start = lines.iter().rposition(|line| line.starts_with("Traceback (most recent call last):"))?;
    let frames: Vec<&str> = lines[start + 1..].iter().take_while(|line| line.starts_with(' ')).copied().collect();
    let exception = lines.get(start + 1 + frames.len())?.trim();
    let frame = frames.iter().rev().find_map(|line| line.trim().strip_prefix("File \""))?;
    let (file, rest) = frame.split_once('"')?;
    let name = file.rsplit('/').next().unwrap_or(file);
    Some(shorten(&format!("{exception} ({name}{rest})")))
}

fn first_line(text: &str) -> String {
    shorten(text.lines().next().unwrap_or_default())
}

fn shorten(text: &str) -> String {
    const MAX: usize = 240;
    if text.chars().count() <= MAX {
        return text.to_owned();
    }
    let cut: String = text.chars().take(MAX).collect();
    format!("{cut}… ({} characters)", text.chars().count())
}
