//! The conformance suite: what a tool component must do to run in toolcell, checked through
//! the real host.
//!
//! [`check`] loads one component alone in a runtime with short limits and a policy of its own,
//! over a scratch workspace beside a canary directory, and runs four groups of checks:
//!
//! - **load**: the component's imports stay within the `tool-component` world, its
//!   `describe()` gives a valid name, a description and a valid JSON Schema;
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

mod generate;

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
    let mut report = Report { component: origin.to_owned(), tool: None, checks: Vec::new() };
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

type Behaviour = fn(&Scratch, &Runtime) -> Result<(), String>;

/// The behaviour checks for a standard tool name.
fn behaviours(tool: &str) -> Vec<(&'static str, Behaviour)> {
    match tool {
        "read_file" => vec![
            ("read_file returns the file's lines", |scratch, runtime| {
                let text = scratch.ok(runtime, "read_file", json!({"path": "notes.txt"}))?.text;
                expect(
                    text.contains("alpha") && text.contains("beta"),
                    format!("reading `notes.txt` (alpha, beta) returned: {}", shorten(&text)),
                )
            }),
            ("read_file reports a missing file as not-found", |scratch, runtime| {
                scratch.err(runtime, "read_file", json!({"path": "missing.txt"}), ToolErrorKind::NotFound)
            }),
        ],
        "write_file" => vec![("write_file creates a file with its parents", |scratch, runtime| {
            scratch.ok(runtime, "write_file", json!({"path": "new/dir/out.txt", "content": "hello\n"}))?;
            let written = scratch.read("new/dir/out.txt");
            expect(written.as_deref() == Some("hello\n"), format!("`new/dir/out.txt` holds {written:?} instead of \"hello\\n\""))
        })],
        "edit_file" => vec![
            ("edit_file replaces an exact string", |scratch, runtime| {
                scratch.ok(runtime, "edit_file", json!({"path": "notes.txt", "old_string": "beta", "new_string": "gamma"}))?;
                let edited = scratch.read("notes.txt");
                expect(edited.as_deref() == Some("alpha\ngamma\n"), format!("`notes.txt` holds {edited:?} instead of \"alpha\\ngamma\\n\""))
            }),
            ("edit_file refuses a missing string as conflict and changes nothing", |scratch, runtime| {
                scratch.err(
                    runtime,
                    "edit_file",
                    json!({"path": "notes.txt", "old_string": "not there", "new_string": "x"}),
                    ToolErrorKind::Conflict,
                )?;
                let kept = scratch.read("notes.txt");
                expect(kept.as_deref() == Some("alpha\nbeta\n"), format!("`notes.txt` changed to {kept:?}"))
            }),
        ],
        "list_files" => vec![("list_files lists the workspace's files", |scratch, runtime| {
            let text = scratch.ok(runtime, "list_files", json!({}))?.text;
            expect(
                text.contains("notes.txt") && text.contains("src"),
                format!("the listing lacks `notes.txt` or `src`: {}", shorten(&text)),
            )
        })],
        "search_files" => vec![("search_files finds a string and names its file", |scratch, runtime| {
            let text = scratch.ok(runtime, "search_files", json!({"query": "alpha"}))?.text;
            expect(text.contains("notes.txt"), format!("searching `alpha` did not name `notes.txt`: {}", shorten(&text)))
        })],
        "read_many" => vec![("read_many returns every readable file and the error of each other", |scratch, runtime| {
            let output = scratch.ok(runtime, "read_many", json!({"paths": ["notes.txt", "missing.txt", "src/lib.rs"]}))?;
            let text = output.text;
            expect(
                text.contains("alpha") && text.contains("42") && text.contains("missing.txt"),
                format!("reading `notes.txt`, `missing.txt` and `src/lib.rs` returned: {}", shorten(&text)),
            )
        })],
        "file_info" => vec![("file_info gives the type, size and line count", |scratch, runtime| {
            let output = scratch.ok(runtime, "file_info", json!({"path": "notes.txt"}))?;
            let info = output.structured.unwrap_or_default();
            expect(
                info["type"] == "file" && info["size"] == 11 && info["lines"] == 2,
                format!("`notes.txt` (11 bytes, 2 lines) was described as {}", shorten(&info.to_string())),
            )
        })],
        "directory_tree" => vec![("directory_tree shows directories with their children", |scratch, runtime| {
            let output = scratch.ok(runtime, "directory_tree", json!({}))?;
            let text = output.structured.map(|tree| tree.to_string()).unwrap_or(output.text);
            expect(
                text.contains("\"src\"") && text.contains("lib.rs") && text.contains("notes.txt"),
                format!("the tree lacks `src/lib.rs` or `notes.txt`: {}", shorten(&text)),
            )
        })],
        "create_directory" => vec![("create_directory creates missing parents and accepts an existing directory", |scratch, runtime| {
            scratch.ok(runtime, "create_directory", json!({"path": "a/b/c"}))?;
            scratch.ok(runtime, "create_directory", json!({"path": "a/b/c"}))?;
            expect(scratch.root().join("a/b/c").is_dir(), "`a/b/c` is not a directory after create_directory".to_owned())
        })],
        "insert_text" => vec![("insert_text inserts after the given line", |scratch, runtime| {
            scratch.ok(runtime, "insert_text", json!({"path": "notes.txt", "line": 1, "text": "between"}))?;
            let edited = scratch.read("notes.txt");
            expect(
                edited.as_deref() == Some("alpha\nbetween\nbeta\n"),
                format!("`notes.txt` holds {edited:?} instead of \"alpha\\nbetween\\nbeta\\n\""),
            )
        })],
        "move_file" => vec![
            ("move_file moves a file", |scratch, runtime| {
                scratch.ok(runtime, "move_file", json!({"source": "notes.txt", "destination": "moved/notes.txt"}))?;
                let moved = scratch.read("moved/notes.txt");
                expect(
                    moved.as_deref() == Some("alpha\nbeta\n") && scratch.read("notes.txt").is_none(),
                    format!(
                        "after the move, `moved/notes.txt` holds {moved:?} and `notes.txt` still exists: {}",
                        scratch.read("notes.txt").is_some()
                    ),
                )
            }),
            ("move_file refuses an existing destination as conflict", |scratch, runtime| {
                scratch.err(runtime, "move_file", json!({"source": "notes.txt", "destination": "src/lib.rs"}), ToolErrorKind::Conflict)?;
                expect(scratch.read("notes.txt").is_some(), "`notes.txt` is gone after a refused move".to_owned())
            }),
        ],
        "delete_file" => vec![
            ("delete_file deletes a file", |scratch, runtime| {
                scratch.ok(runtime, "delete_file", json!({"path": "notes.txt"}))?;
                expect(scratch.read("notes.txt").is_none(), "`notes.txt` still exists".to_owned())
            }),
            ("delete_file refuses a directory without recursive", |scratch, runtime| {
                scratch.err(runtime, "delete_file", json!({"path": "src"}), ToolErrorKind::InvalidArgs)?;
                expect(scratch.read("src/lib.rs").is_some(), "`src/lib.rs` is gone after a refused delete".to_owned())
            }),
        ],
        "apply_patch" => vec![
            ("apply_patch changes several files", |scratch, runtime| {
                let patch = "*** Begin Patch\n*** Update File: notes.txt\n@@\n-beta\n+gamma\n*** Add File: new.txt\n+hello\n*** End Patch";
                scratch.ok(runtime, "apply_patch", json!({"patch": patch}))?;
                let (notes, new) = (scratch.read("notes.txt"), scratch.read("new.txt"));
                expect(
                    notes.as_deref() == Some("alpha\ngamma\n") && new.as_deref() == Some("hello\n"),
                    format!("after the patch `notes.txt` holds {notes:?} and `new.txt` {new:?}"),
                )
            }),
            ("apply_patch changes nothing when a later hunk fails", |scratch, runtime| {
                let patch = "*** Begin Patch\n*** Update File: notes.txt\n@@\n-beta\n+gamma\n*** Update File: src/lib.rs\n@@\n-not in the file\n+x\n*** End Patch";
                scratch.err(runtime, "apply_patch", json!({"patch": patch}), ToolErrorKind::Conflict)?;
                let notes = scratch.read("notes.txt");
                expect(notes.as_deref() == Some("alpha\nbeta\n"), format!("`notes.txt` changed to {notes:?} although the patch failed"))
            }),
        ],
        other => chains::behaviours(other),
    }
}

fn expect(condition: bool, failure: String) -> Result<(), String> {
    if condition { Ok(()) } else { Err(failure) }
}

/// A scratch workspace beside an `outside` directory holding a canary.
struct Scratch {
    temp: tempfile::TempDir,
    workspace: Workspace,
    /// Every successful result so far: the tool, its arguments, its structured value.
    results: std::cell::RefCell<Vec<(String, String, Option<Value>)>>,
}

impl Scratch {
    fn new() -> std::io::Result<Scratch> {
        let temp = tempfile::tempdir()?;
        std::fs::create_dir(temp.path().join("workspace"))?;
        std::fs::create_dir(temp.path().join("outside"))?;
        std::fs::write(temp.path().join("outside/secret.txt"), CANARY)?;
        let workspace = Workspace::open(&temp.path().join("workspace")).map_err(std::io::Error::other)?;
        let scratch = Scratch { temp, workspace, results: std::cell::RefCell::new(Vec::new()) };
        scratch.reset();
        Ok(scratch)
    }

    fn root(&self) -> &Path {
        self.workspace.root()
    }

    /// Put the workspace back to its initial files.
    fn reset(&self) {
        let root = self.root();
        if let Ok(entries) = std::fs::read_dir(root) {
            for entry in entries.flatten() {
                let path = entry.path();
                let _ = if path.is_dir() && !path.is_symlink() { std::fs::remove_dir_all(&path) } else { std::fs::remove_file(&path) };
            }
        }
        let _ = std::fs::create_dir_all(root.join("src"));
        let _ = std::fs::create_dir_all(root.join("docs"));
        let _ = std::fs::write(root.join("notes.txt"), "alpha\nbeta\n");
        let _ = std::fs::write(root.join("src/lib.rs"), "pub fn answer() -> u32 {\n    42\n}\n");
        let _ = std::fs::write(root.join("docs/guide.md"), "# Guide\n");
        let _ = std::os::unix::fs::symlink("../outside/secret.txt", root.join("escape.txt"));
    }

    fn read(&self, path: &str) -> Option<String> {
        std::fs::read_to_string(self.root().join(path)).ok()
    }

    fn call(&self, runtime: &Runtime, role: &str, tool: &str, args: &str) -> CallOutcome {
        self.call_with(runtime, role, tool, args, None)
    }

    /// A call by a session bound to `task` (`CHAIN/TASK`), writing for its chain.
    fn call_bound(&self, runtime: &Runtime, tool: &str, args: &str, task: &str) -> CallOutcome {
        match toolcell_runtime::TaskBinding::parse(task) {
            Ok(binding) => self.call_with(runtime, "agent", tool, args, Some(&binding)),
            Err(reason) => CallOutcome {
                result: Err(toolcell_types::ToolError::new(ToolErrorKind::InvalidArgs, reason)),
                ..CallOutcome::new(String::new())
            },
        }
    }

    fn call_with(
        &self,
        runtime: &Runtime,
        role: &str,
        tool: &str,
        args: &str,
        task: Option<&toolcell_runtime::TaskBinding>,
    ) -> CallOutcome {
        let request = CallRequest {
            workspace: &self.workspace,
            role,
            session_id: "conformance",
            tool,
            args,
            approver: None,
            owner: task.map(toolcell_runtime::TaskBinding::chain),
            fences: &[],
            task,
            principal: None,
            cancel: None,
        };
        let outcome = runtime.call(&request).unwrap_or_else(|error| CallOutcome {
            result: Err(toolcell_types::ToolError::new(ToolErrorKind::Failed, format!("the host could not run the call: {error}"))),
            trapped: true,
            ..CallOutcome::new(String::new())
        });
        if let Ok(output) = &outcome.result {
            self.results.borrow_mut().push((tool.to_owned(), args.to_owned(), output.structured.clone()));
        }
        outcome
    }

    fn ok_bound(&self, runtime: &Runtime, tool: &str, args: Value, task: &str) -> Result<ToolOutput, String> {
        match self.call_bound(runtime, tool, &args.to_string(), task).result {
            Ok(output) => Ok(output),
            Err(error) => Err(format!("{tool} {args} as the session of `{task}` failed: {error}")),
        }
    }

    fn ok(&self, runtime: &Runtime, tool: &str, args: Value) -> Result<ToolOutput, String> {
        match self.call(runtime, "agent", tool, &args.to_string()).result {
            Ok(output) => Ok(output),
            Err(error) => Err(format!("{tool} {args} failed: {error}")),
        }
    }

    fn err(&self, runtime: &Runtime, tool: &str, args: Value, kind: ToolErrorKind) -> Result<(), String> {
        match self.call(runtime, "agent", tool, &args.to_string()).result {
            Err(error) if error.kind == kind => Ok(()),
            other => Err(format!("{tool} {args} should fail with `{kind}`; it returned {}", summary(&other))),
        }
    }

    /// What in a result should not be there: the canary, or a host path.
    fn leak(&self, outcome: &CallOutcome) -> Option<String> {
        let base = self.temp.path().to_string_lossy().into_owned();
        let texts: Vec<String> = match &outcome.result {
            Ok(output) => vec![output.text.clone(), output.structured.as_ref().map(Value::to_string).unwrap_or_default()],
            Err(error) => vec![error.message.clone()],
        };
        texts.iter().find_map(|text| {
            if text.contains(CANARY) {
                Some("the result contains the content of a file outside the workspace".to_owned())
            } else if text.contains(&base) {
                Some("the result contains a host path".to_owned())
            } else {
                None
            }
        })
    }

    /// `Some(problem)` if the outside directory changed.
    fn outside_intact(&self) -> Option<String> {
        let outside = self.temp.path().join("outside");
        let names: Vec<String> = std::fs::read_dir(&outside)
            .map(|entries| entries.flatten().map(|entry| entry.file_name().to_string_lossy().into_owned()).collect())
            .unwrap_or_default();
        if names != ["secret.txt"] {
            return Some(format!("the directory beside the workspace now holds {names:?}"));
        }
        match std::fs::read_to_string(outside.join("secret.txt")) {
            Ok(content) if content == CANARY => None,
            _ => Some("the canary file beside the workspace was modified".to_owned()),
        }
    }
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
