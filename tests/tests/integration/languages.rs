//! Tools written in Python and JavaScript, built from source with their pinned toolchains and
//! the SDKs in `guest-tools/`, through the real host: conformance, governed calls under a
//! policy that denies part of the workspace, the stub imports CPython needs, and a hostile
//! Python tool contained like the Rust ones.

use serde_json::{Value, json};
use toolcell_runtime::{Error, Runtime, RuntimeBuilder};
use toolcell_tests::languages::{hostile_python, javascript_example, python_example};
use toolcell_tests::{CANARY, Fixture, shared_cache_dir};
use toolcell_types::ToolErrorKind;

const POLICY: &str = r#"
version = 1

[roles.impl]
tools = ["todo_finder", "word_freq", "py_hostile", "read_file"]

[[roles.impl.rules]]
id = "impl-all"
access = ["read", "list", "write", "delete"]
paths = ["**"]
effect = "allow"

[[roles.impl.rules]]
id = "no-secrets"
access = ["read", "list", "write", "delete"]
paths = ["secrets", "secrets/**"]
effect = "deny"

[[roles.impl.rules]]
id = "docs-read-only"
access = ["write", "delete"]
paths = ["docs/**"]
effect = "deny"

[limits.tools.py_hostile]
deadline_ms = 3000
memory_mib = 256

[plugins.todo_finder]
stub_imports = ["wasi:sockets/*"]

[plugins.py_hostile]
stub_imports = ["wasi:sockets/*"]
"#;

fn runtime(state: &std::path::Path) -> Runtime {
    RuntimeBuilder::new()
        .cache_dir(shared_cache_dir())
        .component("plugin:todo_finder.wasm", python_example().to_vec())
        .component("plugin:word_freq.wasm", javascript_example().to_vec())
        .component("plugin:py_hostile.wasm", hostile_python().to_vec())
        .component("builtin:read_file", toolcell_builtins::components().find(|(name, _)| *name == "read_file").expect("read_file").1)
        .policy("languages.toml", POLICY)
        .audit_dir(state)
        .build()
        .unwrap_or_else(|error| panic!("the runtime with the Python and JavaScript tools does not build: {error}"))
}

fn project() -> Fixture {
    let fixture = Fixture::new();
    fixture.write("src/app.py", "def main():\n    pass  # TODO: handle errors\n");
    fixture.write("src/lib.js", "// FIXME: the cat sat on the mat\nexport const cat = 1;\n");
    fixture.write("docs/guide.md", "# Guide\n");
    fixture.write("secrets/key.txt", "TODO hunter2 hunter2 hunter2\n");
    fixture
}

#[test]
fn the_python_and_javascript_examples_pass_conformance() {
    let python = toolcell_conformance::check(
        "examples/todo-finder-py",
        python_example(),
        &toolcell_conformance::Options { cache_dir: Some(shared_cache_dir()), stub_imports: vec!["wasi:sockets/*".to_owned()] },
    );
    assert!(python.passed(), "{}", python.render());
    assert_eq!(python.tool.as_deref(), Some("todo_finder"));
    let javascript = toolcell_conformance::check(
        "examples/word-freq-js",
        javascript_example(),
        &toolcell_conformance::Options { cache_dir: Some(shared_cache_dir()), ..toolcell_conformance::Options::default() },
    );
    assert!(javascript.passed(), "{}", javascript.render());
    assert_eq!(javascript.tool.as_deref(), Some("word_freq"));
}

#[test]
fn the_examples_run_governed_and_denied_files_are_refused_at_the_boundary() {
    let state = tempfile::tempdir().expect("state");
    let runtime = runtime(state.path());
    let fixture = project();
    let call = |tool: &str, args: Value| fixture.call_on(&runtime, "impl", tool, &args, None);

    let todos = call("todo_finder", json!({}));
    let output = todos.result.expect("todo_finder runs");
    assert_eq!(
        output.text.lines().filter(|line| !line.starts_with("Warning")).collect::<Vec<_>>(),
        ["src/app.py:2: pass  # TODO: handle errors", "src/lib.js:1: // FIXME: the cat sat on the mat"]
    );
    assert!(!output.text.contains("hunter2"), "{}", output.text);
    assert_eq!(
        output.structured.expect("structured")["found"][0],
        json!({"path": "src/app.py", "line": 2, "text": "pass  # TODO: handle errors"})
    );
    // The directory the role may not list is not there for the tool to walk into.
    assert!(todos.notes.iter().any(|note| note == "2 markers in 3 files"), "{:?}", todos.notes);

    let words = call("word_freq", json!({"top": 3}));
    let output = words.result.expect("word_freq runs");
    assert!(!output.text.contains("hunter"), "{}", output.text);
    assert!(output.text.starts_with("2 cat\n2 the\n"), "{}", output.text);

    // A file named outright that the role may not read: refused, audited, nothing shown.
    let refused = call("todo_finder", json!({"path": "secrets/key.txt"}));
    let error = refused.result.expect_err("refused");
    assert_eq!(error.kind, ToolErrorKind::Denied, "{}", error.message);
    assert!(!error.message.contains("hunter2"));
    let trail = std::fs::read_to_string(state.path().join("audit.jsonl")).expect("the audit trail");
    assert!(trail.lines().any(|line| line.contains("no-secrets") && line.contains("secrets/key.txt")), "{trail}");
    fixture.assert_outside_untouched();
}

#[test]
fn a_python_tool_importing_sockets_loads_only_when_the_policy_stubs_them_for_it() {
    // Without the opt-in: refused at load, naming the import and how to opt in.
    match RuntimeBuilder::new().cache_dir(shared_cache_dir()).component("plugin:todo_finder.wasm", python_example().to_vec()).build() {
        Err(error @ Error::ForbiddenImport { .. }) => {
            let message = error.to_string();
            assert!(message.contains("wasi:sockets/"), "{message}");
            assert!(message.contains("stub_imports"), "{message}");
        }
        Err(other) => panic!("expected a forbidden import, got: {other}"),
        Ok(_) => panic!("a component importing wasi:sockets loaded without the policy's opt-in"),
    }
    // Opted in for another tool only: still refused, once the component names itself.
    let other = RuntimeBuilder::new()
        .cache_dir(shared_cache_dir())
        .component("plugin:todo_finder.wasm", python_example().to_vec())
        .stub_imports("some_other_tool", ["wasi:sockets/*".to_owned()])
        .build();
    assert!(matches!(other, Err(Error::ForbiddenImport { .. })), "stubs granted to another tool were used");
}

#[test]
fn a_hostile_python_tool_is_contained() {
    let state = tempfile::tempdir().expect("state");
    let runtime = runtime(state.path());
    let fixture = project();
    let hostile = |op: &str, path: &str| fixture.call_on(&runtime, "impl", "py_hostile", &json!({"op": op, "path": path}), None);
    let shown = |outcome: &toolcell_runtime::CallOutcome| match &outcome.result {
        Ok(output) => output.text.clone(),
        Err(error) => error.message.clone(),
    };

    // Plain `open` outside the workspace: nothing there to open, nothing shown.
    for path in ["/etc/passwd", "../outside/secret.txt", "../workspace-sibling/secret.txt", "/proc/self/environ"] {
        let outcome = hostile("read", path);
        let text = shown(&outcome);
        assert!(!text.contains("root:") && !text.contains(CANARY), "{path}: {text}");
        fixture.assert_no_host_path(&text);
    }
    // A denied path: refused at the boundary and audited, whatever Python makes of it.
    let outcome = hostile("write", "docs/guide.md");
    assert_eq!(outcome.result.as_ref().expect_err("refused").kind, ToolErrorKind::Denied);
    assert_eq!(fixture.read_text("docs/guide.md"), "# Guide\n");
    let outcome = hostile("list", "secrets");
    assert_eq!(outcome.result.as_ref().expect_err("refused").kind, ToolErrorKind::Denied);
    // CPython here has no socket module at all: an exception in Python's terms.
    let outcome = hostile("socket", "");
    let error = outcome.result.as_ref().expect_err("no sockets");
    assert!(error.message.contains("the tool raised ModuleNotFoundError: No module named 'socket' (app.py, line"), "{}", error.message);
    // No environment.
    let outcome = hostile("environment", "");
    assert_eq!(outcome.result.as_ref().expect("runs").text, "environment: {}");
    // An endless loop: stopped at the deadline.
    let started = std::time::Instant::now();
    let outcome = hostile("loop", "");
    let error = outcome.result.as_ref().expect_err("stopped");
    assert!(error.message.contains("ran past its deadline of 3.0 s"), "{}", error.message);
    assert!(started.elapsed() < std::time::Duration::from_secs(10), "{:?}", started.elapsed());
    // A memory bomb: stopped at the limit.
    let outcome = hostile("memory", "");
    let error = outcome.result.as_ref().expect_err("stopped");
    assert!(error.message.contains("needed more than its memory limit of 256 MiB"), "{}", error.message);
    // The host carries on.
    assert!(hostile("environment", "").result.is_ok());
    let trail = std::fs::read_to_string(state.path().join("audit.jsonl")).expect("the audit trail");
    assert!(trail.lines().any(|line| line.contains("docs-read-only") && line.contains("docs/guide.md")), "{trail}");
    fixture.assert_outside_untouched();
}

#[test]
fn a_stubbed_import_refuses_every_call_and_the_refusal_is_audited() {
    // The Rust test program connects with `std::net`: through the stub, the socket is never
    // made, the attempt is audited, and the call is refused.
    let state = tempfile::tempdir().expect("state");
    let policy = "version = 1\n[roles.impl]\ntools = [\"net_probe\"]\n[plugins.net_probe]\nstub_imports = [\"wasi:sockets/*\"]\n";
    let runtime = RuntimeBuilder::new()
        .cache_dir(shared_cache_dir())
        .component("test:net_probe", toolcell_tests::guest_program("net_probe"))
        .policy("stubs.toml", policy)
        .audit_dir(state.path())
        .build()
        .unwrap_or_else(|error| panic!("net_probe with stubbed sockets does not load: {error}"));
    let fixture = Fixture::new();
    let outcome = fixture.call_on(&runtime, "impl", "net_probe", &json!({}), None);
    let error = outcome.result.as_ref().expect_err("no connection");
    assert_eq!(error.kind, ToolErrorKind::Denied, "{}", error.message);
    assert!(error.message.contains("is linked as a stub"), "{}", error.message);
    assert!(
        outcome.denials.iter().any(|denial| denial.event.rule == "stub-import" && denial.event.path.starts_with("wasi:sockets/")),
        "{:?}",
        outcome.denials
    );
    let trail = std::fs::read_to_string(state.path().join("audit.jsonl")).expect("the audit trail");
    assert!(trail.lines().any(|line| line.contains("stub-import") && line.contains("wasi:sockets/")), "{trail}");
}

#[test]
fn a_hostile_javascript_tool_is_contained_and_its_exceptions_are_reported_in_its_terms() {
    let state = tempfile::tempdir().expect("state");
    let policy = POLICY
        .replace(r#"tools = ["todo_finder", "word_freq", "py_hostile", "read_file"]"#, r#"tools = ["js_hostile"]"#)
        .split("\n[limits.tools.py_hostile]")
        .next()
        .expect("the policy's roles")
        .to_owned();
    let runtime = RuntimeBuilder::new()
        .cache_dir(shared_cache_dir())
        .component("plugin:js_hostile.wasm", toolcell_tests::languages::hostile_javascript().to_vec())
        .policy("languages.toml", policy)
        .audit_dir(state.path())
        .build()
        .unwrap_or_else(|error| panic!("the hostile JavaScript tool does not load: {error}"));
    let fixture = project();
    let hostile = |op: &str, path: &str| fixture.call_on(&runtime, "impl", "js_hostile", &json!({"op": op, "path": path}), None);
    for path in ["../outside/secret.txt", "/etc/passwd", "secrets/key.txt"] {
        let outcome = hostile("read", path);
        let error = outcome.result.as_ref().expect_err("refused");
        assert!(matches!(error.kind, ToolErrorKind::Denied | ToolErrorKind::NotFound), "{path}: {error:?}");
        assert!(
            !error.message.contains(CANARY) && !error.message.contains("hunter2") && !error.message.contains("root:"),
            "{}",
            error.message
        );
    }
    let outcome = hostile("write", "docs/guide.md");
    assert_eq!(outcome.result.as_ref().expect_err("refused").kind, ToolErrorKind::Denied);
    assert_eq!(fixture.read_text("docs/guide.md"), "# Guide\n");
    let outcome = hostile("throw", "");
    let error = outcome.result.as_ref().expect_err("thrown");
    assert_eq!(error.kind, ToolErrorKind::Failed);
    assert!(error.message.starts_with("the tool threw TypeError:"), "{}", error.message);
    assert!(error.message.contains("tool.js"), "the frame is named: {}", error.message);
    let trail = std::fs::read_to_string(state.path().join("audit.jsonl")).expect("the audit trail");
    assert!(trail.lines().any(|line| line.contains("docs-read-only") && line.contains("docs/guide.md")), "{trail}");
    fixture.assert_outside_untouched();
}

#[test]
fn a_python_trap_is_reported_with_the_exception_and_the_line() {
    let report = toolcell_conformance::check(
        "tests/guest-programs-py/raw",
        toolcell_tests::languages::raw_python(),
        &toolcell_conformance::Options { cache_dir: Some(shared_cache_dir()), stub_imports: vec!["wasi:sockets/*".to_owned()] },
    );
    let traps = report.checks.iter().find(|check| check.name == "never traps on schema-generated arguments").expect("the check ran");
    assert!(!traps.passed);
    assert!(traps.detail.contains("ZeroDivisionError: division by zero"), "{}", traps.detail);
    assert!(traps.detail.contains("it raised ZeroDivisionError: division by zero (app.py, line 18, in helper)"), "{}", traps.detail);
}

#[test]
fn a_python_describe_that_raises_is_reported_with_the_exception_and_the_line() {
    let loaded = RuntimeBuilder::new()
        .cache_dir(shared_cache_dir())
        .component("plugin:bad_describe.wasm", toolcell_tests::languages::bad_describe_python().to_vec())
        .stub_imports("bad_describe", ["wasi:sockets/*".to_owned()])
        .build();
    let message = match loaded {
        Err(error) => error.to_string(),
        Ok(_) => panic!("a component whose describe() raises loaded"),
    };
    // The Python exception and where it was raised, as for a failing call.
    assert!(message.contains("`describe()` failed (the component trapped); it wrote:"), "{message}");
    assert!(message.contains("ValueError: the tool's description file is missing"), "{message}");
    assert!(message.contains("app.py\", line 15, in load_description"), "{message}");
    assert!(!message.contains("wasm backtrace"), "the trap's backtrace is left out: {message}");
}
